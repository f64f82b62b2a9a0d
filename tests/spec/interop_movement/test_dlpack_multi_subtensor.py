"""docs/spec/interop-movement.md, "Requirement: Multi-subtensor tensors reject DLPack export"."""
from __future__ import annotations

import pytest

import strideweave as sw

from dlpack_sources import HookCPU

F32, I32, BOOL = sw.DType.Float32, sw.DType.Int32, sw.DType.Bool


def layout(shape, stride):
    return sw.Layout(sw.Shape(shape), sw.Stride(stride))


def test_multi_subtensor_rejected_before_touching_carriers():
    from strideweave.core.representation import PLANAR_FLOAT32_PAIR, Subtensor, tensor_from_subtensors

    HookCPU.answer, HookCPU.calls = None, 0
    a, b = HookCPU(4), HookCPU(2)
    t = tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [
        Subtensor(F32, a, 0, layout([2, 2], [1, 2])),
        Subtensor(F32, b, 0, layout([2], [1]))], [layout([2, 2], [0, 1])])
    snapshot = t.version_snapshot()
    for call in (t.__dlpack_device__, t.__dlpack__, lambda: t.__dlpack__(max_version=(1, 0)),
                 lambda: t.__dlpack__(copy=True, dl_device=(9, 9))):
        with pytest.raises(NotImplementedError) as info:
            call()
        assert "multi-subtensor" in str(info.value) and "DLPack" in str(info.value)
    assert HookCPU.calls == 0
    assert t.version_snapshot() == snapshot
    assert not a.is_released() and not b.is_released()
