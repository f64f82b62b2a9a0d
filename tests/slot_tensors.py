"""Tensors over raw storage slots, as the autograd tests build them, and readers
of their values."""
from strideweave import CPU, DType, Generic, Tensor


def cpu(slots, layout, offset=0, cls=CPU):
    """A CPU Float32 tensor over exactly `slots` (raw storage order)."""
    c = cls(len(slots))
    for i, v in enumerate(slots):
        c[i] = v
    return Tensor(c, offset, layout)


def gen(slots, layout, dtype=DType.Floating):
    return Tensor(Generic(slots, dtype=dtype), 0, layout)
