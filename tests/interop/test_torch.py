"""PyTorch as a tested DLPack consumer (issue 13): `torch.from_dlpack` and `torch.asarray` on
every layout the DLPack tests cover, aliasing and writes visible both ways.

Run by `make test-interop`, which installs the pinned torch from requirements-interop.txt;
plain `pytest` does not collect this directory (tests/conftest.py). Without torch every
test here skips, saying so."""
from __future__ import annotations

import numpy as np
import pytest

import strideweave as sw
from dlpack_sources import cpu_tensor, layout

torch = pytest.importorskip("torch", reason="torch is not installed (make test-interop installs it)")

F32, I32 = sw.DType.Float32, sw.DType.Int32


# (shape, stride, offset): contiguous, column-major, row-major, hierarchical, gapped,
# offset window, broadcast (stride 0), rank 0, a one-element mode, a deep hierarchy.
LAYOUTS = [
    ([6], [1], 0), ([2, 3], [1, 2], 0), ([2, 3], [3, 1], 0), ([2, [3, 4]], [1, [2, 6]], 0),
    ([2, 3], [1, 4], 0), ([3], [2], 1), ([2, 3], [3, 1], 4), ([2, 3], [1, 0], 0), ([4], [0], 2),
    ([], [], 0), ([1, 3], [1, 1], 0), ([[2, 2], [2, 2]], [[1, 2], [4, 8]], 0),
]
IDS = [f"{s}:{d}+{o}" for s, d, o in LAYOUTS]


def _check_same(x, t):
    expected = np.from_dlpack(t)
    assert tuple(x.shape) == expected.shape == t.shape
    assert tuple(x.stride()) == tuple(s // expected.itemsize for s in expected.strides)
    assert x.numpy().tolist() == expected.tolist()
    assert x.data_ptr() == expected.ctypes.data  # the same memory: zero copy


@pytest.mark.parametrize("shape,stride,offset", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("dtype,torch_dtype", [(F32, "float32"), (I32, "int32")])
def test_from_dlpack_every_layout(shape, stride, offset, dtype, torch_dtype):
    t = cpu_tensor(list(range(40)), shape, stride, offset=offset, dtype=dtype, size=40)
    x = torch.from_dlpack(t)
    assert x.dtype == getattr(torch, torch_dtype) and x.device.type == "cpu"
    _check_same(x, t)


@pytest.mark.parametrize("shape,stride,offset", LAYOUTS, ids=IDS)
def test_asarray_every_layout(shape, stride, offset):
    t = cpu_tensor([float(i) for i in range(40)], shape, stride, offset=offset, size=40)
    x = torch.asarray(t)
    assert x.dtype == torch.float32
    _check_same(x, t)


@pytest.mark.parametrize("convert", [torch.from_dlpack, torch.asarray], ids=["from_dlpack", "asarray"])
def test_rank_0_with_an_offset(convert):
    """torch 2.15 refuses a 0-d DLPack tensor whose byte_offset is not zero ("Expected zero
    byte_offset"), while the spec requires byte_offset = offset x item size. Our export is
    right (NumPy reads it); accept torch's refusal in exactly that form, and the correct
    alias once a torch release takes it."""
    t = cpu_tensor([float(i) for i in range(8)], [], [], offset=5)
    assert np.from_dlpack(t).tolist() == 5.0
    try:
        x = convert(t)
    except ValueError as exc:
        assert "byte_offset" in str(exc)
    else:
        _check_same(x, t)


@pytest.mark.parametrize("convert", [torch.from_dlpack, torch.asarray], ids=["from_dlpack", "asarray"])
def test_writes_are_visible_both_ways(convert):
    t = cpu_tensor([0.0] * 24, [2, [3, 4]], [1, [2, 6]])
    x = convert(t)
    t[1, [2, 3]] = 5.0
    assert x[1, 2, 3].item() == 5.0
    before = t.version
    x[0, 1, 2] = -3.0
    assert t[0, [1, 2]] == -3.0
    assert t.version == before  # a consumer's write bypasses version tracking, as specified


def test_broadcast_view_aliases_one_element_along_the_stride_zero_mode():
    x0 = cpu_tensor([1.0, 2.0, 3.0], [1, 3], [1, 1])
    b = sw.broadcast_to(x0, sw.Shape([2, 3]))
    x = torch.from_dlpack(b)
    assert tuple(x.stride()) == (0, 1)
    x0[0, 1] = 20.0
    assert x[:, 1].tolist() == [20.0, 20.0]


def test_read_only_tensor():
    t = cpu_tensor([1.0, 2.0], [2], [1], mutable=False)
    # torch has no read-only tensors: it may warn about the flag, but it aliases the memory
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = torch.from_dlpack(t)
    assert x.tolist() == [1.0, 2.0]


def test_the_export_keeps_storage_alive_after_the_tensor_is_dropped():
    import gc

    t = cpu_tensor([7.0, 8.0], [2], [1])
    x = torch.from_dlpack(t)
    del t
    gc.collect()
    assert x.tolist() == [7.0, 8.0]


def test_refusals_reach_torch_unchanged():
    g = sw.Tensor(sw.Generic([1.0], dtype=F32), 0, layout([1], [1]))
    with pytest.raises(BufferError):
        torch.from_dlpack(g)
    b = cpu_tensor([True], [1], [1], dtype=sw.DType.Bool)
    with pytest.raises(BufferError):
        torch.from_dlpack(b)


def test_autograd_is_untouched_by_export():
    w = cpu_tensor([1.0, 2.0], [2], [1])
    y = sw.sum(w * w)
    x = torch.from_dlpack(w)
    x[0] = 3.0  # a foreign write: the traversal succeeds on the changed values
    y.backward()
    assert w.grad.tolist() == [6.0, 4.0]
