"""docs/spec/interop-movement.md, "Requirement: Export is zero-copy, same-device, and stream-agnostic":
copy, dl_device and stream arguments, and aliasing in both directions."""
from __future__ import annotations

import numpy as np
import pytest

from dlpack_sources import cpu_tensor
from dlpack_structs import capsule_name, dims, managed


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


def test_aliasing_both_ways_and_writeable():
    t = cpu_tensor([0.0] * 6, [2, 3], [1, 2])
    a = np.from_dlpack(t)
    assert a.flags.writeable
    t[1, 2] = 5.0
    assert a[1, 2] == 5.0
    a[0, 1] = -3.0
    assert t[0, 1] == -3.0
    assert a.ctypes.data == t.carrier.pointer()
