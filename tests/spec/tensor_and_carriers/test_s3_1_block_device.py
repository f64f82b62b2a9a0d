"""docs/spec/tensor-and-carriers.md §3.1 BlockDevice and BlockDeviceCarrier, on a real
block device.

The device comes from tests/blockdev_fixture.py: a fresh loop device when running as root,
`$STRIDEWEAVE_TEST_BLOCK_DEVICE` when set, otherwise the tests skip with the reason."""
from __future__ import annotations

import errno
import fcntl
import gc
import os
import pathlib
import struct

import numpy as np
import pytest

import strideweave as sw
from strideweave import DType
from strideweave import BlockDevice, Layout, Shape, Stride, Tensor

from blockdev_fixture import (  # noqa: F401  (pytest fixtures are used by name)
    raw_read,
    raw_write,
    block_device_path,
    device,
    loop_unavailable_reason,
    scratch_loop_device,
    set_read_only,
    shrink,
)

MiB = 1 << 20


def os_geometry(path) -> tuple[int, int, int]:
    """(capacity bytes, logical block size, physical block size) as the kernel reports them,
    through the BLKGETSIZE64 / BLKSSZGET / BLKPBSZGET ioctls on a descriptor of our own."""
    BLKSSZGET, BLKPBSZGET, BLKGETSIZE64 = 0x1268, 0x127B, 0x80081272
    fd = os.open(path, os.O_RDONLY)
    try:
        capacity = struct.unpack("=Q", fcntl.ioctl(fd, BLKGETSIZE64, bytes(8)))[0]
        logical = struct.unpack("=i", fcntl.ioctl(fd, BLKSSZGET, bytes(4)))[0]
        physical = struct.unpack("=I", fcntl.ioctl(fd, BLKPBSZGET, bytes(4)))[0]
    finally:
        os.close(fd)
    return capacity, logical, physical


def merged(spans) -> list:
    """Sorted (offset, length) byte ranges, touching ones joined into one."""
    out: list = []
    for off, length in sorted(spans):
        if out and out[-1][0] + out[-1][1] == off:
            out[-1] = (out[-1][0], out[-1][1] + length)
        else:
            out.append((off, length))
    return out


def occupied(device) -> list:
    """The byte ranges live extents hold on `device` (touching ones joined), found through
    `allocate` alone. Each request goes to the lowest free range that fits, so the largest
    request that still fits takes one whole free range; claiming that again and again maps
    every free range, and the occupied ones are the rest of the usable capacity. Every probe
    is released before returning."""
    a = device.allocation_alignment
    usable = device.capacity_bytes - device.capacity_bytes % a
    free, probes = [], []
    try:
        while True:
            fits, too_big = 0, usable // a + 1   # in blocks
            while too_big - fits > 1:
                blocks = (fits + too_big) // 2
                try:
                    device.allocate(blocks * a // 4, empty=True).release()
                    fits = blocks
                except MemoryError:
                    too_big = blocks
            if fits == 0:
                break
            probe = device.allocate(fits * a // 4, empty=True)
            probes.append(probe)
            free.append((probe.device_offset_bytes, probe.extent_bytes))
    finally:
        for probe in probes:
            probe.release()
    taken, start = [], 0
    for off, length in merged(free):
        if off > start:
            taken.append((start, off - start))
        start = off + length
    if start < usable:
        taken.append((start, usable - start))
    return taken


# --- BlockDevice(path) -----------------------------------------------------------------

def test_exports():
    assert sw.carriers.BlockDevice is sw.BlockDevice
    assert sw.carriers.BlockDeviceCarrier is sw.BlockDeviceCarrier
    assert issubclass(sw.BlockDeviceCarrier, sw.Carrier)


@pytest.mark.parametrize("bad", [3, None, b"/dev/loop0", 1.5])
def test_path_type_is_checked(bad):
    with pytest.raises(TypeError, match="path"):
        sw.BlockDevice(bad)


def test_pathlike_of_bytes_is_type_error():
    class BytesPath:
        def __fspath__(self):
            return b"/dev/loop0"

    with pytest.raises(TypeError, match="path"):
        sw.BlockDevice(BytesPath())


def test_path_value_errors(tmp_path):
    with pytest.raises(ValueError):
        sw.BlockDevice("/dev/loop0\0")
    f = tmp_path / "regular"
    f.write_bytes(b"abc")
    with pytest.raises(ValueError, match="not a block device"):
        sw.BlockDevice(f)
    with pytest.raises(ValueError, match="not a block device"):
        sw.BlockDevice("/dev/null")
    assert f.read_bytes() == b"abc"


def test_bad_geometry_is_value_error():
    reason = loop_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    import subprocess

    free = subprocess.run(["losetup", "--find"], capture_output=True, text=True, check=True)
    with pytest.raises(ValueError, match="geometry"):
        sw.BlockDevice(free.stdout.strip())


def test_open_failure_is_oserror(tmp_path):
    with pytest.raises(OSError) as ei:
        sw.BlockDevice(tmp_path / "missing")
    assert ei.value.errno == errno.ENOENT


def test_properties_and_path_as_given(block_device_path):
    given = pathlib.Path(block_device_path)
    d = sw.BlockDevice(given)
    try:
        assert d.path is given
        capacity, logical, physical = os_geometry(block_device_path)
        assert d.capacity_bytes == capacity > 0
        assert d.logical_block_size == logical
        assert d.physical_block_size == physical
        assert d.allocation_alignment == max(d.logical_block_size, d.physical_block_size)
        assert not d.is_closed() and not d.is_faulted()
    finally:
        d.close()


def test_opening_writes_nothing(block_device_path):
    data = os.urandom(8192)
    raw_write(block_device_path, 0, data)
    d = sw.BlockDevice(block_device_path)
    d.close()
    assert raw_read(block_device_path, 0, 8192) == data


# --- BlockDevice.allocate --------------------------------------------------------------

@pytest.mark.parametrize("size, exc", [(1.5, TypeError), ("3", TypeError), (None, TypeError),
                                       (-1, ValueError)])
def test_allocate_size_errors(device, size, exc):
    with pytest.raises(exc):
        device.allocate(size)
    assert occupied(device) == []


@pytest.mark.parametrize("kw", [{"mutable": 1}, {"mutable": None}, {"empty": 0},
                                {"empty": np.bool_(True)}])
def test_allocate_flags_must_be_bool(device, kw):
    with pytest.raises(TypeError):
        device.allocate(4, **kw)
    assert occupied(device) == []


def test_allocate_dtype_errors(device):
    with pytest.raises(TypeError):
        device.allocate(4, dtype="float32")
    with pytest.raises(ValueError):
        device.allocate(4, dtype=DType.Int32)
    with pytest.raises(ValueError, match="planes"):
        device.allocate(4, dtype=sw.core.representation.PLANAR_FLOAT32_PAIR)
    assert occupied(device) == []


def test_allocate_places_rounded_extents_lowest_first(device):
    a = device.allocation_alignment
    c1 = device.allocate(1)
    c2 = device.allocate(a // 4 + 1)  # one slot more than a block: two blocks
    c3 = device.allocate(3)
    assert (c1.device_offset_bytes, c1.extent_bytes) == (0, a)
    assert (c2.device_offset_bytes, c2.extent_bytes) == (a, 2 * a)
    assert (c3.device_offset_bytes, c3.extent_bytes) == (3 * a, a)
    assert [c1.size(), c2.size(), c3.size()] == [1, a // 4 + 1, 3]
    c2.release()
    c4 = device.allocate(a // 4)
    assert c4.device_offset_bytes == a, "the freed range is the lowest free one"
    c5 = device.allocate(a // 2)
    assert c5.device_offset_bytes == 4 * a, "a request larger than the hole skips it"
    spans = sorted((c.device_offset_bytes, c.extent_bytes) for c in (c1, c3, c4, c5))
    for (o1, l1), (o2, _) in zip(spans, spans[1:]):
        assert o1 + l1 <= o2


def test_allocate_zero_fills_unless_empty(block_device_path, device):
    garbage = struct.pack("=4f", 1.0, 2.0, 3.0, 4.0) * 1024
    raw_write(block_device_path, 0, garbage)
    kept = device.allocate(4, empty=True)
    assert [kept[i] for i in range(4)] == [1.0, 2.0, 3.0, 4.0]
    kept.release()
    zeroed = device.allocate(4)
    assert [zeroed[i] for i in range(4)] == [0.0] * 4
    assert raw_read(block_device_path, 0, 16) == bytes(16)


def test_no_room_is_memory_error(device):
    usable = device.capacity_bytes - device.capacity_bytes % device.allocation_alignment
    with pytest.raises(MemoryError):
        device.allocate(usable // 4 + 1, empty=True)
    assert occupied(device) == []
    big = device.allocate(usable // 4 - 1, empty=True)
    with pytest.raises(MemoryError):
        device.allocate(device.allocation_alignment // 4 + 1, empty=True)
    assert big.extent_bytes == usable


# --- close and with --------------------------------------------------------------------

def test_close_refuses_while_any_carrier_object_is_alive(block_device_path):
    d = sw.BlockDevice(block_device_path)
    c = d.allocate(4)
    with pytest.raises(RuntimeError):
        d.close()
    c.release()
    with pytest.raises(RuntimeError):
        d.close()  # released, but the object is still alive
    assert not d.is_closed()
    del c
    gc.collect()
    d.close()
    assert d.is_closed()
    d.close()
    assert d.is_closed()
    with pytest.raises(RuntimeError):
        d.allocate(1)
    # The node is left alone.
    assert os.path.exists(block_device_path)
    d2 = sw.BlockDevice(block_device_path)
    d2.close()


def test_with_closes_and_propagates(block_device_path):
    with sw.BlockDevice(block_device_path) as d:
        assert not d.is_closed()
    assert d.is_closed()
    with pytest.raises(KeyError, match="boom"):
        with sw.BlockDevice(block_device_path) as d2:
            raise KeyError("boom")
    assert d2.is_closed()


# --- BlockDeviceCarrier ----------------------------------------------------------------

def test_direct_construction_names_allocate():
    with pytest.raises(TypeError, match=r"BlockDevice\.allocate"):
        sw.BlockDeviceCarrier()
    with pytest.raises(TypeError, match=r"BlockDevice\.allocate"):
        sw.BlockDeviceCarrier(4)


def test_slots_round_trip_as_float32_on_the_device(block_device_path, device):
    c = device.allocate(5)
    assert c.device is device
    assert c.dtype() is DType.Float32
    assert c.supports_storage_dtype(DType.Float32)
    assert not c.supports_storage_dtype(DType.Int32)
    assert c.is_mutable()
    assert c.version == 0
    c[0] = 0.1
    c[4] = 7
    c.set_value(2, np.float64(2.5))
    assert c.version == 3
    assert [c[i] for i in range(5)] == [float(np.float32(0.1)), 0.0, 2.5, 0.0, 7.0]
    on_dev = raw_read(block_device_path, c.device_offset_bytes, 20)
    assert struct.unpack("=5f", on_dev) == tuple(c[i] for i in range(5))


def test_access_checks_in_order(device):
    c = device.allocate(3)
    with pytest.raises(TypeError):
        c["0"]
    with pytest.raises(IndexError):
        c[3]
    with pytest.raises(IndexError):
        c.get_value(-1)
    for bad in ("x", True, None, [1.0]):
        with pytest.raises(TypeError):
            c[1] = bad
    assert c[1] == 0.0 and c.version == 0
    ro = device.allocate(2, mutable=False)
    assert not ro.is_mutable()
    with pytest.raises(RuntimeError, match="not mutable"):
        ro[0] = 1.0
    with pytest.raises(RuntimeError, match="not mutable"):
        ro.set_value(0, 1.0)
    assert ro.version == 0 and ro[0] == 0.0
    c.release()
    with pytest.raises(RuntimeError, match="released"):
        c[0]
    with pytest.raises(RuntimeError, match="released"):
        c["bad"] = "worse"


def test_release_and_gc_free_the_extent(device):
    c = device.allocate(10)
    off, ext = c.device_offset_bytes, c.extent_bytes
    c.release()
    c.release()
    assert (c.size(), c.device_offset_bytes, c.extent_bytes) == (0, 0, 0)
    assert c.dtype() is DType.Float32
    assert occupied(device) == []
    d = device.allocate(10)
    assert (d.device_offset_bytes, d.extent_bytes) == (off, ext)
    del d
    gc.collect()
    assert occupied(device) == []


def test_factories_allocate_on_the_same_device_even_when_released(device):
    c = device.allocate(2)
    c[1] = 3.0
    c.release()
    n = c.new_like([1.5, None, 2])
    assert type(n) is sw.BlockDeviceCarrier and n.device is device
    assert [n[i] for i in range(n.size())] == [1.5, 0.0, 2.0]
    assert n.version == 0 and n.is_mutable()
    frozen = c.new_like([1.0], mutable=False)
    assert not frozen.is_mutable() and frozen[0] == 1.0
    a = c.allocate_like(3)
    assert a.device is device and a.size() == 3 and [a[i] for i in range(3)] == [0.0] * 3
    live = {(x.device_offset_bytes, x.extent_bytes) for x in (n, frozen, a)}
    assert occupied(device) == merged(live)
    with pytest.raises(TypeError):
        c.new_like(5)
    with pytest.raises(ValueError):
        c.allocate_like(-1)
    with pytest.raises(ValueError):
        c.new_like([1.0], dtype=DType.Int32)
    with pytest.raises(TypeError):
        c.new_like(["x"])
    assert occupied(device) == merged(live), "failed factories leave no extent behind"


def test_subclass_factories_keep_the_exact_class(device):
    class Tagged(sw.BlockDeviceCarrier):
        pass

    c = device.allocate(1)
    c.__class__ = Tagged
    assert type(c.new_like([1.0])) is Tagged
    assert type(c.allocate_like(2)) is Tagged


# --- faults ----------------------------------------------------------------------------

def _assert_faulted(d, c):
    assert d.is_faulted()
    with pytest.raises(RuntimeError):
        c[0]
    with pytest.raises(RuntimeError):
        c[0] = 1.0
    with pytest.raises(RuntimeError):
        d.allocate(1)
    with pytest.raises(RuntimeError):
        c.new_like([1.0])
    with pytest.raises(RuntimeError):
        c.allocate_like(1)


def test_zero_byte_transfer_faults_the_device(scratch_loop_device):
    d = sw.BlockDevice(scratch_loop_device.path)
    lo = d.allocate(MiB)  # 4 MiB
    hi = d.allocate(2 * MiB)  # 8 MiB at offset 4 MiB
    hi[MiB + 5] = 1.0
    shrink(scratch_loop_device, 8 * MiB)
    with pytest.raises(RuntimeError):
        hi[MiB + 5]
    _assert_faulted(d, lo)
    version = hi.version
    lo.release()
    hi.release()
    assert hi.version == version
    with pytest.raises(RuntimeError):
        d.close()  # the carrier objects are still alive
    del lo, hi
    gc.collect()
    d.close()
    assert d.is_closed()


def test_os_error_faults_the_device_and_keeps_the_last_value(scratch_loop_device):
    path = scratch_loop_device.path
    d = sw.BlockDevice(path)
    c = d.allocate(8)
    c[3] = 1.25
    set_read_only(path, True)
    try:
        with pytest.raises(OSError) as ei:
            c[3] = 9.0
        assert ei.value.errno == errno.EPERM
    finally:
        set_read_only(path, False)
    assert c.version == 1, "the failed write did not count"
    _assert_faulted(d, c)
    c.release()
    del c, ei  # the traceback's frames reference the carrier too
    gc.collect()
    d.close()
    on_dev = raw_read(path, 0, 32)
    assert struct.unpack("=8f", on_dev) == (0.0, 0.0, 0.0, 1.25, 0.0, 0.0, 0.0, 0.0)


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_computation_on_block_tensors_is_refused(block_device_path):
    dev = BlockDevice(block_device_path)
    block = dev.allocate(4)
    t = Tensor(block, 0, L(4, 1))
    for compute in (lambda: sw.add(t, t), lambda: sw.sum(t), lambda: t * 2.0, lambda: sw.elementwise_mul(t, t)):
        with pytest.raises(NotImplementedError, match="BlockDeviceCarrier"):
            compute()
    assert block.version == 0
    del t
    block.release()
    del block
    import gc
    gc.collect()
    dev.close()
