"""docs/spec/interop-movement.md, "Requirement: The exported buffer describes the layout's flattened leaf modes":
hierarchical layouts flatten to their leaf modes, broadcast strides stay 0, and the byte offset
selects the tensor's window."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import strideweave as sw

from dlpack_sources import cpu_tensor
from dlpack_structs import dims, managed

F32, I32, BOOL = sw.DType.Float32, sw.DType.Int32, sw.DType.Bool


def layout(shape, stride):
    return sw.Layout(sw.Shape(shape), sw.Stride(stride))


def test_hierarchical_layout_flattens_to_leaf_modes():
    carrier = sw.CPU(24)
    for i in range(24):
        carrier[i] = float(i)
    t = sw.Tensor(carrier, 0, layout([2, [3, 4]], [1, [2, 6]]))
    for max_version in (None, (1, 0)):
        d = managed(t.__dlpack__(max_version=max_version)).dl_tensor
        assert d.ndim == 3
        assert dims(d) == ((2, 3, 4), (1, 2, 6))
    a = np.from_dlpack(t)
    assert a.shape == (2, 3, 4) and a.strides == (4, 8, 24)
    for i in range(2):
        for j in range(3):
            for k in range(4):
                assert a[i, j, k] == t[i, [j, k]]


def test_broadcast_stride_zero_is_preserved():
    x = cpu_tensor([1.0, 2.0, 3.0], [1, 3], [1, 1])
    b = sw.broadcast_to(x, sw.Shape([2, 3]))
    d = managed(b.__dlpack__(max_version=(1, 0))).dl_tensor
    assert dims(d) == ((2, 3), (0, 1))
    a = np.from_dlpack(b)
    assert a.strides == (0, 4)
    assert a.tolist() == [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]
    x[0, 1] = 20.0  # one storage element, seen at every coordinate along the broadcast mode
    assert a[:, 1].tolist() == [20.0, 20.0]


@pytest.mark.parametrize("dtype", [F32, I32])
def test_offset_selects_the_tensor_window(dtype):
    t = cpu_tensor(list(range(10)), [2, 3], [3, 1], offset=4, dtype=dtype)
    for max_version in (None, (1, 0)):
        d = managed(t.__dlpack__(max_version=max_version)).dl_tensor
        assert d.byte_offset == 16
        assert d.data == t.carrier.pointer()
    a = np.from_dlpack(t)
    assert a[0, 0] == t[0, 0] == 4
    assert a.tolist() == [[t[i, j] for j in range(3)] for i in range(2)] == [[4, 5, 6], [7, 8, 9]]


@pytest.mark.parametrize("modes", [1, 2, 4, 5, 8, 12])
def test_every_count_of_leaf_modes_is_described(modes):
    # Leaf extents 2 then 1s, strides the running product: every count of modes, whichever
    # way the export stores its shape and stride arrays, describes the same two values.
    extents = [2] + [1] * (modes - 1)
    strides = [1] * modes
    carrier = sw.CPU(2)
    carrier[0], carrier[1] = 5.0, 7.0
    t = sw.Tensor(carrier, 0, layout([extents], [strides]))
    for max_version in (None, (1, 0)):
        d = managed(t.__dlpack__(max_version=max_version)).dl_tensor
        assert d.ndim == modes
        assert dims(d) == (tuple(extents), tuple(strides))
    a = np.from_dlpack(t)
    assert a.shape == tuple(extents)
    assert a.reshape(-1).tolist() == [5.0, 7.0]


@pytest.mark.parametrize("modes", [3, 9])
def test_shape_and_strides_live_as_long_as_the_capsule(modes):
    # The arrays belong to the capsule, not to the Tensor or its layout.
    extents, strides = [1] * (modes - 1) + [3], [3] * (modes - 1) + [1]
    capsule = sw.Tensor(sw.CPU(3), 0, layout([extents], [strides])).__dlpack__(max_version=(1, 0))
    gc.collect()
    junk = [sw.Layout(sw.Shape([[9] * modes]), sw.Stride([[0] * modes])) for _ in range(100)]
    assert dims(managed(capsule).dl_tensor) == (tuple(extents), tuple(strides))
    del junk
