"""The native block-device layer (`_native.BlockDeviceHandle`) on a real block device.

tensor-and-carriers.md §3.1: opening (writes nothing; ValueError / OSError cases), geometry,
the extent allocator (alignment rounding, zero-fill unless empty, lowest free range, no
overlap, reuse after free, no room → MemoryError), positioned I/O with O_DIRECT alignment
handled for any offset and size, and the fault state after a real device error. Every check
that data reached the device reads it back through an independent descriptor.
"""
from __future__ import annotations

import errno
import os
import stat
import struct

import numpy as np
import pytest

from blockdev_fixture import (  # noqa: F401  (pytest fixtures are used by name)
    raw_read,
    raw_write,
    block_device_path,
    scratch_loop_device,
    loop_unavailable_reason,
    set_read_only,
    shrink,
)
from strideweave import _native

Handle = _native.BlockDeviceHandle
MiB = 1 << 20


@pytest.fixture
def dev(block_device_path):
    h = Handle(block_device_path)
    try:
        yield h
    finally:
        h.close()


def sysfs_geometry(path: str) -> tuple[int, int, int]:
    """(capacity, logical, physical) from sysfs: a source independent of our ioctls."""
    st = os.stat(path)
    base = f"/sys/dev/block/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"

    def read(rel: str) -> int:
        with open(f"{base}/{rel}") as f:
            return int(f.read())

    return read("size") * 512, read("queue/logical_block_size"), read("queue/physical_block_size")


def storage_holding(data: bytes, shift: int = 0) -> "_native.HostStorage":
    """A HostStorage whose bytes from `shift` on are `data` (Int32 slots carry any 4 bytes
    exactly). Storages of 64 KiB or more are page-aligned, so `shift` sets the misalignment."""
    padded = bytes(shift) + data
    padded += bytes(-len(padded) % 4)
    storage = _native.HostStorage("i32", len(padded) // 4)
    storage.set_values(np.frombuffer(padded, dtype=np.int32).tolist())
    return storage


def storage_bytes(storage: "_native.HostStorage") -> bytes:
    return np.array(storage.to_list(), dtype=np.int32).tobytes()


def pattern(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


# --- opening ---------------------------------------------------------------------------


def test_geometry_matches_the_kernel(block_device_path, dev):
    cap, logical, physical = sysfs_geometry(block_device_path)
    assert dev.path == block_device_path
    assert dev.capacity_bytes == cap
    assert dev.logical_block_size == logical
    assert dev.physical_block_size == physical
    assert dev.allocation_alignment == max(logical, physical)
    assert not dev.is_closed() and not dev.is_faulted()
    assert dev.fault_reason() is None


def test_descriptor_is_the_device_opened_with_o_direct(block_device_path, dev):
    fd = dev.fileno()
    st = os.fstat(fd)
    assert stat.S_ISBLK(st.st_mode)
    assert st.st_rdev == os.stat(block_device_path).st_rdev
    with open(f"/proc/self/fdinfo/{fd}") as f:
        flags = int(next(line for line in f if line.startswith("flags:")).split()[1], 8)
    assert dev.direct_io
    assert flags & os.O_DIRECT
    assert flags & os.O_ACCMODE == os.O_RDWR
    assert flags & os.O_CLOEXEC


def test_opening_and_closing_writes_nothing(block_device_path):
    data = bytes(pattern(64 * 1024, 1))
    raw_write(block_device_path, 0, data)
    h = Handle(block_device_path)
    h.close()
    assert raw_read(block_device_path, 0, len(data)) == data


def test_open_rejects_nul_and_non_block_nodes(tmp_path):
    with pytest.raises(ValueError, match="NUL"):
        Handle("/dev/loop0\0x")
    f = tmp_path / "plain"
    f.write_bytes(b"x" * 4096)
    with pytest.raises(ValueError, match="not a block device"):
        Handle(str(f))
    with pytest.raises(ValueError, match="not a block device"):
        Handle(str(tmp_path))
    with pytest.raises(ValueError, match="not a block device"):
        Handle("/dev/null")
    assert f.read_bytes() == b"x" * 4096


def test_open_failure_is_oserror_with_errno(tmp_path):
    missing = str(tmp_path / "no-such-device")
    with pytest.raises(OSError) as ei:
        Handle(missing)
    assert ei.value.errno == errno.ENOENT
    assert isinstance(ei.value, FileNotFoundError)
    assert ei.value.filename == missing


def test_unattached_loop_node_has_bad_geometry():
    reason = loop_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    import subprocess

    node = subprocess.run(["losetup", "--find"], capture_output=True, text=True, check=True)
    # A loop node without a backing file is a block device of capacity 0.
    with pytest.raises(ValueError, match="geometry"):
        Handle(node.stdout.strip())


# --- the allocator ---------------------------------------------------------------------


def test_allocation_rounds_to_alignment_and_takes_lowest_free_range(dev):
    a = dev.allocation_alignment
    x = dev.allocate(1, True)
    y = dev.allocate(a + 1, True)
    z = dev.allocate(a, True)
    assert x == (0, a)
    assert y == (a, 2 * a)
    assert z == (3 * a, a)
    dev.free(y[0])
    # The freed range is the lowest fit for anything up to its size ...
    assert dev.allocate(4, True) == (a, a)
    # ... and a larger request skips the remaining hole.
    assert dev.allocate(2 * a, True) == (4 * a, 2 * a)
    assert dev.allocate(a, True) == (2 * a, a)
    live = dev.live_extents()
    assert live == sorted(live)
    for (o1, l1), (o2, _) in zip(live, live[1:]):
        assert o1 + l1 <= o2


def test_allocation_zero_fills_unless_empty(block_device_path, dev):
    n = 3 * dev.allocation_alignment
    garbage = bytes(pattern(n, 2))
    raw_write(block_device_path, 0, garbage)
    off, length = dev.allocate(n, False)
    assert (off, length) == (0, n)
    assert dev.read_bytes(0, n) == garbage, "empty allocation keeps the old bytes"
    dev.free(off)
    off, length = dev.allocate(n, True)
    assert dev.read_bytes(off, n) == bytes(n)
    assert raw_read(block_device_path, off, n) == bytes(n), "zeros reached the device"


def test_zero_byte_allocation_occupies_nothing(dev):
    assert dev.allocate(0, True) == (0, 0)
    assert dev.live_extents() == []
    dev.free(0, 0)
    assert dev.allocate(1, True) == (0, dev.allocation_alignment)


def test_no_room_is_memory_error_and_reserves_nothing(dev):
    usable = dev.capacity_bytes - dev.capacity_bytes % dev.allocation_alignment
    with pytest.raises(MemoryError, match="no room"):
        dev.allocate(usable + 1, False)
    assert dev.live_extents() == []
    a = dev.allocate(usable - dev.allocation_alignment, False)
    b = dev.allocate(1, False)
    with pytest.raises(MemoryError):
        dev.allocate(1, False)
    assert dev.live_extents() == [a, b]
    dev.free(b[0])
    assert dev.allocate(1, True) == b
    assert not dev.is_faulted()


def test_free_of_unknown_extent_is_value_error(dev):
    off, length = dev.allocate(100, True)
    with pytest.raises(ValueError):
        dev.free(off + dev.allocation_alignment)
    with pytest.raises(ValueError):
        dev.free(off, length + 1)
    dev.free(off, length)
    with pytest.raises(ValueError):
        dev.free(off)
    assert dev.live_extents() == []


# --- element I/O -----------------------------------------------------------------------


@pytest.mark.parametrize("rel", [0, 1, 3, 4, 510, 511, 4093, 4095, 8188])
def test_f32_round_trip_at_any_byte_offset(block_device_path, dev, rel):
    off, _ = dev.allocate(3 * 4096, True)
    base = off + rel
    neighbours = raw_read(block_device_path, off, 3 * 4096)
    dev.write_f32(base, 0.1)
    assert dev.read_f32(base) == float(np.float32(0.1))
    after = raw_read(block_device_path, off, 3 * 4096)
    assert after[rel:rel + 4] == struct.pack("=f", 0.1)
    # Read-modify-write of the enclosing blocks left every other byte alone.
    assert after[:rel] == neighbours[:rel]
    assert after[rel + 4:] == neighbours[rel + 4:]


def test_values_persist_on_the_device(block_device_path):
    h = Handle(block_device_path)
    off, _ = h.allocate(4096, True)
    for i in range(8):
        h.write_f32(off + 4 * i, i * 1.5)
    h.close()
    h2 = Handle(block_device_path)
    try:
        off2, _ = h2.allocate(4096, False)
        assert off2 == off
        assert [h2.read_f32(off + 4 * i) for i in range(8)] == [i * 1.5 for i in range(8)]
    finally:
        h2.close()


def test_access_outside_live_extents_is_value_error(dev):
    off, length = dev.allocate(4096, True)
    with pytest.raises(ValueError, match="live extent"):
        dev.read_f32(off + length - 2)
    with pytest.raises(ValueError, match="live extent"):
        dev.write_f32(off + length, 1.0)
    dev.free(off)
    with pytest.raises(ValueError):
        dev.read_f32(off)
    assert not dev.is_faulted()


# --- bulk I/O --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dev_shift, nbytes, mem_shift",
    [
        (0, 4096, 0),  # fully aligned: straight from/to caller memory
        (0, 4096 * 5, 4),  # aligned range, misaligned memory: bounced
        (3, 12345, 0),  # odd device offset, size not a block multiple
        (511, 1, 0),  # a single byte at the end of a sector
        (4097, 20 * MiB + 7, 1),  # several 8 MiB chunks, nothing aligned
        (0, 20 * MiB, 0),  # several chunks, all aligned
        (5, 9 * MiB + 3, 5),  # congruent: partial head/tail blocks, direct middle chunks
    ],
)
def test_bulk_round_trip(block_device_path, dev, dev_shift, nbytes, mem_shift):
    ext, length = dev.allocate(dev_shift + nbytes + 4096, True)
    data = pattern(nbytes, nbytes).tobytes()
    src = storage_holding(data, mem_shift)
    dev.write_from(src, mem_shift, ext + dev_shift, nbytes)
    dst = storage_holding(bytes(nbytes), mem_shift)
    dev.read_into(dst, mem_shift, ext + dev_shift, nbytes)
    assert storage_bytes(dst)[mem_shift:mem_shift + nbytes] == data
    on_dev = raw_read(block_device_path, ext, dev_shift + nbytes + 4096)
    assert on_dev[dev_shift:dev_shift + nbytes] == data
    # The zeroed bytes around the written range are untouched.
    assert on_dev[:dev_shift] == bytes(dev_shift)
    assert on_dev[dev_shift + nbytes:] == bytes(4096)


def test_bulk_checks_the_storage_range_and_zero_length_is_a_no_op(dev):
    off, _ = dev.allocate(4096, True)
    small = _native.HostStorage("i32", 4)
    with pytest.raises(ValueError, match="run past the end of the storage"):
        dev.write_from(small, 0, off, 17)
    with pytest.raises(ValueError, match="run past the end of the storage"):
        dev.read_into(small, 4, off, 16)
    with pytest.raises(TypeError):
        dev.read_into(0, 0, off, 16)  # an address is not a storage
    released = _native.HostStorage("i32", 4)
    released.release()
    with pytest.raises(RuntimeError, match="released"):
        dev.write_from(released, 0, off, 4)
    dev.write_from(small, 16, off, 0)
    dev.read_into(small, 16, off, 0)
    assert dev.read_bytes(off, 4096) == bytes(4096)
    assert not dev.is_faulted()


def test_closed_device_refuses_io_but_free_and_close_work(dev):
    off, _ = dev.allocate(4096, True)
    dev.close()
    assert dev.is_closed()
    with pytest.raises(RuntimeError, match="closed"):
        dev.read_f32(off)
    with pytest.raises(RuntimeError, match="closed"):
        dev.write_f32(off, 1.0)
    with pytest.raises(RuntimeError, match="closed"):
        dev.allocate(4096, True)
    with pytest.raises(RuntimeError, match="closed"):
        dev.fileno()
    dev.free(off)
    assert dev.live_extents() == []
    dev.close()
    assert dev.is_closed()


# --- real device errors ----------------------------------------------------------------


def _assert_faulted_and_inert(h, good_off):
    assert h.is_faulted()
    assert h.fault_reason()
    with pytest.raises(RuntimeError, match="faulted"):
        h.read_f32(good_off)
    with pytest.raises(RuntimeError, match="faulted"):
        h.write_f32(good_off, 2.0)
    with pytest.raises(RuntimeError, match="faulted"):
        h.allocate(4096, True)
    with pytest.raises(RuntimeError, match="faulted"):
        h.read_into(_native.HostStorage("i32", 1), 0, good_off, 0)
    for off, _ in h.live_extents():
        h.free(off)
    assert h.live_extents() == []
    h.close()
    h.close()
    assert h.is_closed()


def test_read_past_a_shrunken_device_faults_with_runtime_error(scratch_loop_device):
    h = Handle(scratch_loop_device.path)
    lo, _ = h.allocate(4 * MiB, True)
    hi, _ = h.allocate(8 * MiB, True)
    h.write_f32(lo + 8, 7.0)
    h.write_f32(hi + 4 * MiB, 9.0)
    # The backing file loses its second half; the device shrinks under the open handle.
    shrink(scratch_loop_device, 8 * MiB)
    assert h.read_f32(lo + 8) == 7.0  # still inside the device
    with pytest.raises(RuntimeError, match="zero-byte read"):
        h.read_f32(hi + 4 * MiB)
    _assert_faulted_and_inert(h, lo + 8)


def test_write_past_a_shrunken_device_faults_with_oserror(scratch_loop_device):
    h = Handle(scratch_loop_device.path)
    lo, _ = h.allocate(4 * MiB, True)
    hi, _ = h.allocate(8 * MiB, True)
    shrink(scratch_loop_device, 8 * MiB)
    # A whole aligned block from aligned memory is written without reading first (an
    # element write would read-modify-write and fail on the read).
    src = storage_holding(bytes([1]) * 4096)
    with pytest.raises(OSError) as ei:
        h.write_from(src, 0, hi + 4 * MiB, 4096)
    assert ei.value.errno == errno.ENOSPC
    assert "faulted" in str(ei.value)
    _assert_faulted_and_inert(h, lo)


def test_write_to_a_device_turned_read_only_faults_and_loses_nothing(scratch_loop_device):
    path = scratch_loop_device.path
    h = Handle(path)
    off, _ = h.allocate(3 * 4096, True)
    h.write_f32(off + 4098, 5.0)
    set_read_only(path, True)
    try:
        with pytest.raises(OSError) as ei:
            h.write_f32(off + 4098, 6.0)
        assert ei.value.errno == errno.EPERM
        # A bulk write is refused the same way once faulted, without reaching the device.
        src = storage_holding(bytes([0xFF]) * 4096)
        with pytest.raises(RuntimeError, match="faulted"):
            h.write_from(src, 0, off, 4096)
    finally:
        set_read_only(path, False)
    # The fault is sticky even though the device is writable again: after a failed write the
    # caller must not assume anything about what was stored.
    assert h.is_faulted()
    with pytest.raises(RuntimeError, match="faulted"):
        h.write_f32(off + 4098, 6.0)
    _assert_faulted_and_inert(h, off)
    # Nothing was silently lost or half-written: the device holds the last value that was
    # reported written, and the neighbouring bytes are still the zero fill.
    on_dev = raw_read(path, off, 3 * 4096)
    assert on_dev[4098:4102] == struct.pack("=f", 5.0)
    assert on_dev[:4098] == bytes(4098) and on_dev[4102:] == bytes(3 * 4096 - 4102)
