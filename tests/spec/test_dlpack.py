"""DLPack export (interop-movement.md, "DLPack export produces version 1.0 ..." through
"DLPack is export-only"). Capsules are inspected at the C level through ctypes views
(tests/dlpack_structs.py); NumPy and JAX act as real consumers."""
from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import textwrap
import threading
import weakref

import numpy as np
import pytest

import strideweave as sw
from dlpack_structs import (K_DL_CPU, K_DL_FLOAT, K_DL_INT, LEGACY, READ_ONLY, USED_LEGACY,
                            USED_VERSIONED, VERSIONED, DLManagedTensor, DLManagedTensorVersioned,
                            call_deleter, capsule_name, consume, dims, managed)

F32, I32, BOOL = sw.DType.Float32, sw.DType.Int32, sw.DType.Bool


def layout(shape, stride):
    return sw.Layout(sw.Shape(shape), sw.Stride(stride))


def cpu_tensor(values, shape=None, stride=None, *, offset=0, dtype=F32, mutable=True, size=None):
    """A CPU tensor whose carrier holds `values` (padded to `size`), viewed through a layout."""
    n = len(values) if size is None else size
    carrier = sw.CPU(n, dtype=dtype)
    for i, v in enumerate(values):
        carrier[i] = v
    if not mutable:
        carrier = carrier.new_like([carrier[i] for i in range(n)], mutable=False)
    if shape is None:
        shape, stride = [n - offset], [1]
    return sw.Tensor(carrier, offset, layout(shape, stride))


# --------------------------------------------------------------------------------------------
# Version selection


@pytest.mark.parametrize("max_version", [(1, 0), (1, 3), [1, 0], (2, 0), (3, 9), (10**30, 0)])
def test_versioned_capsule_for_any_1x_or_higher_ceiling(max_version):
    t = cpu_tensor([1.0, 2.0, 3.0])
    cap = t.__dlpack__(max_version=max_version)
    assert capsule_name(cap) == VERSIONED
    m = managed(cap)
    assert isinstance(m, DLManagedTensorVersioned)
    assert (m.version.major, m.version.minor) == (1, 0)


@pytest.mark.parametrize("kwargs", [{}, {"max_version": None}, {"max_version": (0, 0)},
                                    {"max_version": [0, 8]}, {"max_version": (0, 10**30)}])
def test_legacy_capsule_without_a_1x_ceiling(kwargs):
    t = cpu_tensor([1.0, 2.0, 3.0])
    cap = t.__dlpack__(**kwargs)
    assert capsule_name(cap) == LEGACY
    m = managed(cap)
    assert isinstance(m, DLManagedTensor)
    assert dims(m.dl_tensor) == ((3,), (1,))
    assert m.dl_tensor.data == t.carrier.pointer()


def test_signature_keyword_only_arguments():
    t = cpu_tensor([1.0])
    with pytest.raises(TypeError):
        t.__dlpack__(None, (1, 0))  # max_version is keyword-only
    assert capsule_name(t.__dlpack__(None)) == LEGACY  # stream is positional
    with pytest.raises(TypeError):
        t.__dlpack_device__(None)


@pytest.mark.parametrize("bad", [1, 1.0, "1.0", b"10", {1: 0}, {1, 0}, range(2), np.array([1, 0])])
def test_max_version_of_wrong_type_is_type_error(bad):
    with pytest.raises(TypeError, match="max_version"):
        cpu_tensor([1.0]).__dlpack__(max_version=bad)


@pytest.mark.parametrize("bad", [(), (1,), [1], (1, 0, 0), [1, 0, 0], (-1, 0), (1, -1), [0, -5],
                                 (-(10**30), 0)])
def test_max_version_wrong_length_or_negative_is_value_error(bad):
    with pytest.raises(ValueError, match="max_version"):
        cpu_tensor([1.0]).__dlpack__(max_version=bad)


# --------------------------------------------------------------------------------------------
# copy, dl_device, stream


@pytest.mark.parametrize("copy", [True, 1, "yes", [0]])
def test_truthy_copy_is_refused(copy):
    t = cpu_tensor([1.0, 2.0])
    with pytest.raises(BufferError, match="copy"):
        t.__dlpack__(copy=copy)
    with pytest.raises(BufferError, match="copy"):
        t.__dlpack__(copy=copy, max_version=(1, 0))


@pytest.mark.parametrize("copy", [None, False, 0, "", []])
def test_falsy_copy_aliases(copy):
    t = cpu_tensor([1.0, 2.0])
    m = managed(t.__dlpack__(copy=copy, max_version=(1, 0)))
    assert m.dl_tensor.data == t.carrier.pointer()


@pytest.mark.parametrize("dl_device", [None, (1, 0), [1, 0]])
def test_own_device_is_accepted_and_aliases(dl_device):
    t = cpu_tensor([1.0, 2.0])
    assert t.__dlpack_device__() == (1, 0)
    cap = t.__dlpack__(dl_device=dl_device, max_version=(1, 0))
    m = managed(cap)
    assert (m.dl_tensor.device.device_type, m.dl_tensor.device.device_id) == (1, 0)
    assert m.dl_tensor.data == t.carrier.pointer()


@pytest.mark.parametrize("dl_device", [(2, 0), (1, 1), [3, 0], (1, 2**70)])
def test_other_device_is_buffer_error(dl_device):
    with pytest.raises(BufferError, match="dl_device"):
        cpu_tensor([1.0]).__dlpack__(dl_device=dl_device)


@pytest.mark.parametrize("dl_device", [1, "cpu", {1: 0}, 1.0])
def test_dl_device_of_wrong_type_is_type_error(dl_device):
    with pytest.raises(TypeError, match="dl_device"):
        cpu_tensor([1.0]).__dlpack__(dl_device=dl_device)


@pytest.mark.parametrize("dl_device", [(), (1,), [1, 0, 0]])
def test_dl_device_wrong_length_is_value_error(dl_device):
    with pytest.raises(ValueError, match="dl_device"):
        cpu_tensor([1.0]).__dlpack__(dl_device=dl_device)


def _fields(cap):
    m = managed(cap)
    t = m.dl_tensor
    return (capsule_name(cap), t.data, t.device.device_type, t.device.device_id, t.ndim,
            t.dtype.code, t.dtype.bits, t.dtype.lanes, dims(t), t.byte_offset,
            getattr(m, "flags", None), getattr(m, "version", None) and (m.version.major, m.version.minor))


@pytest.mark.parametrize("stream", [0, 1, 2, -1, 10**40, "stream", object(), (1, 2)])
@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_stream_is_accepted_and_ignored(stream, max_version):
    t = cpu_tensor([1.0, 2.0, 3.0, 4.0], [2, 2], [2, 1])
    expected = _fields(t.__dlpack__(max_version=max_version))
    assert _fields(t.__dlpack__(stream, max_version=max_version)) == expected
    assert _fields(t.__dlpack__(stream=stream, max_version=max_version)) == expected


# --------------------------------------------------------------------------------------------
# dtypes and carriers


@pytest.mark.parametrize("dtype,code,np_dtype", [(F32, K_DL_FLOAT, np.float32), (I32, K_DL_INT, np.int32)])
def test_supported_dtypes_export_32_bit_single_lane(dtype, code, np_dtype):
    t = cpu_tensor([1, 2, 3], dtype=dtype)
    for max_version in (None, (1, 0)):
        d = managed(t.__dlpack__(max_version=max_version)).dl_tensor
        assert (d.dtype.code, d.dtype.bits, d.dtype.lanes) == (code, 32, 1)
    a = np.from_dlpack(t)
    assert a.dtype == np_dtype
    assert a.tolist() == [1, 2, 3]
    a[1] = 7
    assert t[1] == 7


def test_bool_cpu_reports_device_but_refuses_export():
    t = cpu_tensor([True, False], dtype=BOOL)
    assert t.__dlpack_device__() == (1, 0)
    for max_version in (None, (1, 0)):
        with pytest.raises(BufferError) as info:
            t.__dlpack__(max_version=max_version)
        assert "Float32" in str(info.value) and "Int32" in str(info.value)


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


class HookCPU(sw.CPU):
    """A CPU subclass whose dlpack_info answer is whatever the test sets."""
    answer = None
    calls = 0

    def dlpack_info(self):
        type(self).calls += 1
        answer = type(self).answer
        if isinstance(answer, BaseException):
            raise answer
        return answer(self) if callable(answer) else answer


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


# --------------------------------------------------------------------------------------------
# Shape, strides, offset


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


def test_aliasing_both_ways_and_writeable():
    t = cpu_tensor([0.0] * 6, [2, 3], [1, 2])
    a = np.from_dlpack(t)
    assert a.flags.writeable
    t[1, 2] = 5.0
    assert a[1, 2] == 5.0
    a[0, 1] = -3.0
    assert t[0, 1] == -3.0
    assert a.ctypes.data == t.carrier.pointer()


# --------------------------------------------------------------------------------------------
# Read-only flag


def test_immutable_tensor_exports_read_only():
    t = cpu_tensor([1.0, 2.0], mutable=False)
    assert not t.is_mutable()
    assert managed(t.__dlpack__(max_version=(1, 0))).flags == READ_ONLY
    a = np.from_dlpack(t)
    assert not a.flags.writeable
    assert a.tolist() == [1.0, 2.0]


def test_mutable_tensor_flags_zero():
    t = cpu_tensor([1.0, 2.0])
    assert managed(t.__dlpack__(max_version=(1, 0))).flags == 0


def test_legacy_export_carries_no_flags():
    t = cpu_tensor([1.0, 2.0], mutable=False)
    cap = t.__dlpack__()
    assert capsule_name(cap) == LEGACY
    m = managed(cap)
    assert not hasattr(m, "flags") and ctypes.sizeof(m) == ctypes.sizeof(DLManagedTensor)


# --------------------------------------------------------------------------------------------
# Version and gradient tracking


def test_export_and_foreign_writes_leave_version_unchanged():
    t = cpu_tensor([1.0, 2.0, 3.0])
    t[0] = 1.0
    before = t.carrier.version
    snapshot = t.version_snapshot()
    a = np.from_dlpack(t)
    legacy = t.__dlpack__()
    assert t.carrier.version == before
    a[2] = 30.0
    assert t.carrier.version == before
    assert t.version_snapshot() == snapshot
    assert t[2] == 30.0
    del legacy


def _worked_example():
    x = cpu_tensor([1.0, 2.0, 3.0], [1, 3], [1, 1])
    w = cpu_tensor([10.0, 1.0, 20.0, 2.0, 30.0, 3.0], [2, 3], [1, 2])
    b = sw.broadcast_to(x, sw.Shape([2, 3]))
    p = b * w
    y = sw.sum(p)
    return x, w, b, p, y


def test_backward_over_foreign_modified_storage():
    x, w, b, p, y = _worked_example()
    version = w.carrier.version
    np.from_dlpack(w)[0, 0] = 5.0  # a DLPack consumer writes w[0,0] = 5.0
    assert w.carrier.version == version
    y.backward()
    assert [x.grad[0, j] for j in range(3)] == [6.0, 22.0, 33.0]


def test_export_does_not_disturb_the_graph():
    x, w, b, p, y = _worked_example()
    ctx, grad = p.autograd_ctx, p.grad
    versions = (x.carrier.version, w.carrier.version, p.carrier.version)
    assert ctx is not None
    caps = [p.__dlpack__(), p.__dlpack__(max_version=(1, 0)), np.from_dlpack(p)]
    assert p.autograd_ctx is ctx and p.grad is grad and y.grad is None
    assert (x.carrier.version, w.carrier.version, p.carrier.version) == versions
    y.backward()
    assert [x.grad[0, j] for j in range(3)] == [11.0, 22.0, 33.0]
    # A gradient tensor exports under the same rules.
    assert np.from_dlpack(x.grad).tolist() == [[11.0, 22.0, 33.0]]
    del caps


# --------------------------------------------------------------------------------------------
# Lifetime and ownership


def test_capsule_keeps_the_tensor_alive():
    t = cpu_tensor([1.0, 2.0])
    ref = weakref.ref(t)
    cap = t.__dlpack__(max_version=(1, 0))
    del t
    gc.collect()
    assert ref() is not None
    del cap
    gc.collect()
    assert ref() is None


def test_consumer_outlives_the_producing_expression():
    a = np.from_dlpack(cpu_tensor([4.0, 5.0, 6.0]))
    gc.collect()
    assert a.tolist() == [4.0, 5.0, 6.0]


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_unconsumed_capsule_runs_deleter_once(max_version):
    t = cpu_tensor([1.0, 2.0])
    ref = weakref.ref(t)
    base = sys.getrefcount(t)
    cap = t.__dlpack__(max_version=max_version)
    assert sys.getrefcount(t) == base + 1  # the managed tensor's strong reference
    cap2 = t.__dlpack__(max_version=max_version)
    assert sys.getrefcount(t) == base + 2
    del cap2
    gc.collect()
    assert sys.getrefcount(t) == base + 1  # dropped exactly once
    del cap
    gc.collect()
    assert sys.getrefcount(t) == base
    del t
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("max_version,used", [(None, USED_LEGACY), ((1, 0), USED_VERSIONED)])
def test_consumed_capsule_leaves_the_deleter_to_the_consumer(max_version, used):
    t = cpu_tensor([1.0, 2.0, 3.0])
    ref = weakref.ref(t)
    cap = t.__dlpack__(max_version=max_version)
    m = consume(cap)
    assert capsule_name(cap) == used
    del t, cap
    gc.collect()
    # The renamed capsule's destructor did nothing: the producer is still referenced.
    assert ref() is not None
    assert dims(m.dl_tensor) == ((3,), (1,))
    call_deleter(m)  # the consumer's single deleter call
    gc.collect()
    assert ref() is None


def test_deleter_called_from_another_thread_without_the_gil():
    # ctypes releases the GIL around foreign calls, so the deleter must attach by itself.
    t = cpu_tensor([1.0, 2.0])
    ref = weakref.ref(t)
    cap = t.__dlpack__(max_version=(1, 0))
    m = consume(cap)
    del t, cap
    worker = threading.Thread(target=call_deleter, args=(m,))
    worker.start()
    worker.join()
    gc.collect()
    assert ref() is None


def test_release_succeeds_while_a_capsule_is_outstanding():
    t = cpu_tensor([1.0, 2.0])
    cap = t.__dlpack__(max_version=(1, 0))
    address = managed(cap).dl_tensor.data
    assert address == t.carrier.pointer()
    assert t.carrier.release() is None
    assert t.carrier.is_released() and t.carrier.pointer() == 0
    del cap  # the deleter still runs cleanly after release
    gc.collect()


def test_move_succeeds_while_a_capsule_is_outstanding():
    t = cpu_tensor([1.0, 2.0])
    source = t.carrier
    cap = t.__dlpack__(max_version=(1, 0))
    address = managed(cap).dl_tensor.data
    moved = sw.move(t, sw.CPU(2))
    assert source.is_released()
    assert moved.carrier.pointer() != address
    assert [moved[0], moved[1]] == [1.0, 2.0]
    del cap
    gc.collect()


def test_finalization_with_outstanding_capsules_is_safe():
    # Unconsumed capsules, a consumed-but-undeleted one, and a daemon thread calling a
    # deleter, all left behind at interpreter exit.
    script = textwrap.dedent("""
        import sys, threading, time
        sys.path.insert(0, {tests!r})
        import numpy as np
        import strideweave as sw
        from dlpack_structs import consume, call_deleter
        c = sw.CPU(4)
        t = sw.Tensor(c, 0, sw.Layout(sw.Shape([4]), sw.Stride([1])))
        KEEP = [t.__dlpack__(), t.__dlpack__(max_version=(1, 0)), np.from_dlpack(t)]
        LEAK = consume(t.__dlpack__(max_version=(1, 0)))
        pending = [consume(t.__dlpack__()) for _ in range(200)]
        def late():
            for m in pending:
                call_deleter(m)
                time.sleep(0.0005)
        threading.Thread(target=late, daemon=True).start()
        del t
        print("ok")
    """).format(tests=str(__import__("pathlib").Path(__file__).parents[1]))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert "Fatal" not in proc.stderr and "panic" not in proc.stderr


# --------------------------------------------------------------------------------------------
# Multi-subtensor and export-only


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


def test_no_dlpack_import_path():
    import importlib
    import pkgutil

    modules = [sw]
    for info in pkgutil.walk_packages(sw.__path__, "strideweave."):
        if info.name.split(".")[-1].startswith("_"):
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:
            continue
    for module in modules:
        names = [n for n in dir(module) if not n.startswith("_")]
        assert not [n for n in names if "from_dlpack" in n.lower()], module.__name__
        for name in names:
            obj = getattr(module, name)
            if isinstance(obj, type):
                assert not [n for n in dir(obj) if "from_dlpack" in n.lower()], (module.__name__, name)
    # The Tensor and carrier constructors do not consume capsules.
    cap = cpu_tensor([1.0]).__dlpack__()
    with pytest.raises(TypeError):
        sw.Tensor(cap, 0, layout([1], [1]))
    with pytest.raises(TypeError):
        sw.CPU(cap)


# --------------------------------------------------------------------------------------------
# JAX (takes the legacy capsule: jax.numpy.from_dlpack calls __dlpack__(stream=...))

def _jax():
    try:
        import jax.numpy as jnp_
    except ImportError:
        pytest.skip("jax is not installed")
    return jnp_


@pytest.mark.parametrize("shape,stride,offset", [([6], [1], 0), ([2, 3], [3, 1], 0),
                                                 ([2, 3], [1, 2], 0), ([3], [1], 2)])
def test_jax_consumer(shape, stride, offset):
    jnp_ = _jax()
    t = cpu_tensor([float(i) for i in range(8)], shape, stride, offset=offset, size=8)
    j = jnp_.from_dlpack(t)
    expected = np.from_dlpack(t)
    assert j.shape == expected.shape
    assert np.asarray(j).tolist() == expected.tolist()


def test_jax_takes_the_legacy_capsule_and_int32():
    jnp_ = _jax()
    t = cpu_tensor([1, 2, 3], dtype=I32)
    names = []

    class Spy:
        def __dlpack__(self, *args, **kwargs):
            cap = t.__dlpack__(*args, **kwargs)
            names.append(capsule_name(cap))
            return cap

        def __dlpack_device__(self):
            return t.__dlpack_device__()

    j = jnp_.from_dlpack(Spy())
    assert names == [LEGACY]
    assert j.dtype == np.int32 and np.asarray(j).tolist() == [1, 2, 3]
