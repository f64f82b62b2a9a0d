"""Sources and operations for the move tests: CPU tensors holding values at a
layout's coordinates, CPU and FileBacked subclasses (which inherit no registration), and a
MoveOperation that records its `_copy` calls."""
import strideweave as sw
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def cpu_tensor(values, layout=None, offset=0, dtype=D.Float32, mutable=True):
    layout = layout if layout is not None else L(len(values), 1)
    c = CPU(offset + layout.cosize, dtype=dtype)
    for k, v in enumerate(values):
        c[offset + layout.index(k)] = v
    if not mutable:
        # The public way to an immutable CPU carrier holding these slots: its factory.
        c = c.new_like([c[i] for i in range(c.size())], mutable=False)
    return Tensor(c, offset, layout)


def snapshot(carrier):
    return (carrier.is_released(), carrier.version, carrier.size(),
            [carrier[i] for i in range(carrier.size())] if not carrier.is_released() else None)


class MyCPU(CPU):
    pass


class MyFile(FileBacked):
    pass


class Recorder(sw.MoveOperation):
    calls: list = []

    def _copy(self, tensor, destination, output, element_count):
        Recorder.calls.append((tensor, destination, output, element_count))
        for k in range(tensor.size()):
            output[k] = tensor[k] * 10


def filebacked_directory():
    """The per-process directory FileBacked files live in, found publicly: a probe file's
    parent (the probe is removed again)."""
    probe = FileBacked(dtype=D.Float32)
    directory = probe.path.parent
    probe.release()
    return directory
