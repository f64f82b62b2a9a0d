"""docs/spec/interop-movement.md, "Requirement: A carrier opts into DLPack through dlpack_info":
non-exporting carriers fail both calls alike, and a hook's value is converted and checked
(missing keys, null pointer, foreign device reported verbatim, exceptions propagating)."""
from __future__ import annotations

import numpy as np
import pytest

import strideweave as sw

from dlpack_sources import HookCPU, cpu_tensor
from dlpack_structs import READ_ONLY, managed

F32, I32, BOOL = sw.DType.Float32, sw.DType.Int32, sw.DType.Bool


def layout(shape, stride):
    return sw.Layout(sw.Shape(shape), sw.Stride(stride))


def _non_exporting_tensors():
    g = sw.Generic([True, False], dtype=BOOL)
    yield "Generic", sw.Tensor(g, 0, layout([2], [1]))
    g = sw.Generic([1.0, 2.0], dtype=F32)
    yield "Generic", sw.Tensor(g, 0, layout([2], [1]))
    fb = sw.FileBacked().new_like([1.0, 2.0])  # Floating: both carrier and dtype unsupported
    yield "FileBacked", sw.Tensor(fb, 0, layout([2], [1]))


@pytest.mark.parametrize("kind,tensor", list(_non_exporting_tensors()))
def test_non_exporting_carrier_fails_both_calls_with_carrier_error(kind, tensor):
    errors = []
    for call in (tensor.__dlpack_device__, tensor.__dlpack__,
                 lambda: tensor.__dlpack__(max_version=(1, 0))):
        with pytest.raises(BufferError) as info:
            call()
        errors.append(str(info.value))
    # Same failure for both, and it is the carrier's (resolved before the dtype).
    assert len(set(errors)) == 1
    assert kind in errors[0] and "Float32" not in errors[0]
    assert tensor.carrier.version == 0


def test_evictable_and_owned_tiers():
    primary, secondary = sw.CPU(3), sw.CPU(3)
    ev = sw.Evictable(primary, secondary)
    t = sw.Tensor(ev, 0, layout([3], [1]))
    for call in (t.__dlpack_device__, t.__dlpack__):
        with pytest.raises(BufferError, match="Evictable"):
            call()
    # An owned carrier is not publicly mutable, so it exports read-only.
    owned = sw.Tensor(primary, 0, layout([3], [1]))
    assert not owned.is_mutable()
    assert managed(owned.__dlpack__(max_version=(1, 0))).flags == READ_ONLY
    assert not np.from_dlpack(owned).flags.writeable


# --------------------------------------------------------------------------------------------
# The dlpack_info hook contract (custom carriers)

@pytest.fixture
def hook():
    HookCPU.answer, HookCPU.calls = None, 0
    carrier = HookCPU(4)
    for i in range(4):
        carrier[i] = float(i + 1)
    yield carrier, sw.Tensor(carrier, 0, layout([4], [1]))
    HookCPU.answer = None


def _both(t):
    return (t.__dlpack_device__, t.__dlpack__, lambda: t.__dlpack__(max_version=(1, 0)))


@pytest.mark.parametrize("answer", [42, None, 3.5, object(), "ab", [1, 2], [(1,)]])
def test_hook_value_not_convertible_to_dict_is_type_error(hook, answer):
    _, t = hook
    HookCPU.answer = answer
    for call in _both(t):
        with pytest.raises(TypeError, match="dlpack_info"):
            call()


@pytest.mark.parametrize("missing", ["pointer", "device_type", "device_id"])
def test_hook_value_missing_key_is_key_error(hook, missing):
    carrier, t = hook
    info = {"pointer": carrier.pointer(), "device_type": 1, "device_id": 0}
    del info[missing]
    HookCPU.answer = info
    for call in _both(t):
        with pytest.raises(KeyError, match=missing):
            call()


def test_hook_value_convertible_with_extra_keys(hook):
    carrier, t = hook
    HookCPU.answer = lambda c: [("pointer", c.pointer()), ("device_type", 1), ("device_id", 0),
                                ("colour", "blue")]
    assert t.__dlpack_device__() == (1, 0)
    assert np.from_dlpack(t).tolist() == [1.0, 2.0, 3.0, 4.0]


def test_hook_exception_propagates_unchanged(hook):
    _, t = hook

    class Boom(Exception):
        pass

    boom = Boom("hook failed")
    HookCPU.answer = boom
    for call in _both(t):
        with pytest.raises(Boom) as info:
            call()
        assert info.value is boom


def test_hook_null_pointer_is_buffer_error(hook):
    _, t = hook
    HookCPU.answer = {"pointer": 0, "device_type": 1, "device_id": 0}
    for max_version in (None, (1, 0)):
        with pytest.raises(BufferError, match="null"):
            t.__dlpack__(max_version=max_version)


def test_hook_resolved_before_dtype():
    class BoolHook(HookCPU):
        pass
    carrier = BoolHook(2, dtype=BOOL)
    t = sw.Tensor(carrier, 0, layout([2], [1]))
    HookCPU.answer = KeyError("hook first")
    with pytest.raises(KeyError, match="hook first"):
        t.__dlpack__()
    HookCPU.answer = None


def test_hook_foreign_device_reported_verbatim(hook):
    carrier, t = hook
    HookCPU.answer = lambda c: {"pointer": c.pointer(), "device_type": 12, "device_id": 3}
    assert t.__dlpack_device__() == (12, 3)
    for max_version in (None, (1, 0)):
        for dl_device in (None, (12, 3), [12, 3]):
            d = managed(t.__dlpack__(max_version=max_version, dl_device=dl_device)).dl_tensor
            assert (d.device.device_type, d.device.device_id) == (12, 3)
        with pytest.raises(BufferError):
            t.__dlpack__(max_version=max_version, dl_device=(1, 0))


def test_cpu_subclass_overriding_pointer_is_honoured():
    # CPU.dlpack_info reports self.pointer(); a subclass that only overrides pointer() must
    # see its pointer exported (the built-in fast path may not bypass the override).
    backing = np.arange(4, dtype=np.float32) * 10

    class Elsewhere(sw.CPU):
        def pointer(self):
            return backing.ctypes.data

    t = sw.Tensor(Elsewhere(4), 0, layout([4], [1]))
    assert t.carrier.dlpack_info()["pointer"] == backing.ctypes.data
    cap = t.__dlpack__(max_version=(1, 0))
    assert managed(cap).dl_tensor.data == backing.ctypes.data
    assert np.from_dlpack(t).tolist() == [0.0, 10.0, 20.0, 30.0]


def test_tensor_subclass_is_mutable_decides_the_flag():
    class ReadOnlyView(sw.Tensor):
        def is_mutable(self):
            return False

    t = ReadOnlyView(sw.CPU(2), 0, layout([2], [1]))
    assert t.carrier.is_mutable()
    assert managed(t.__dlpack__(max_version=(1, 0))).flags == READ_ONLY


def test_released_cpu_carrier_refuses_export():
    t = cpu_tensor([1.0, 2.0])
    t.carrier.release()
    with pytest.raises(BufferError, match="null"):
        t.__dlpack__()
    with pytest.raises(BufferError, match="null"):
        t.__dlpack__(max_version=(1, 0))
