"""`_native.copy_buffer_to_host`: the checked bulk copy from a buffer object into HostStorage
that the Ray carrier's fetch uses (any C-contiguous buffer, ranges and overlap checked,
nothing written unless every check passes), and `_native.submit_prefault`, which faults a landing range in ahead without changing a byte."""
import threading

import numpy as np
import pytest

from strideweave import _native


def storage(n):
    s = _native.HostStorage("f32", n)
    s.set_values([-1.0] * n)
    return s


def test_copies_a_byte_range_of_any_buffer():
    src = np.arange(8, dtype=np.float32)
    dst = storage(6)
    _native.copy_buffer_to_host(src, 2 * 4, dst, 1 * 4, 3 * 4)
    assert dst.to_list() == [-1.0, 2.0, 3.0, 4.0, -1.0, -1.0]
    ro = src.copy()
    ro.flags.writeable = False  # read-only sources (Ray's object-store views) are fine
    _native.copy_buffer_to_host(memoryview(ro), 0, dst, 0, 4)
    assert dst.to_list()[0] == 0.0
    _native.copy_buffer_to_host(b"", 0, dst, 24, 0)  # empty copy at the end


def test_a_large_copy_split_over_threads_lands_every_byte_in_place():
    """From 32 MiB the copy is split over threads: every part lands at its own offset, at
    unaligned starts and a length no part count divides, and nothing outside the range moves."""
    n = (40 << 20) // 4 + 7
    src = (np.arange(n + 5, dtype=np.int64) * 2654435761 % (1 << 31)).astype(np.float32)
    dst = _native.HostStorage("f32", n + 9)
    dst.set_values([-1.0] * (n + 9))
    _native.copy_buffer_to_host(memoryview(src).cast("B"), 3 * 4, dst, 5 * 4, n * 4)
    out = np.array(dst.to_list(), dtype=np.float32)
    assert np.array_equal(out[5:5 + n], src[3:3 + n])
    assert (out[:5] == -1.0).all() and (out[5 + n:] == -1.0).all()


@pytest.mark.parametrize("args, error, word", [
    ((0, 0, 36), ValueError, "source"),        # past the source's 32 bytes
    ((4, 0, 32), ValueError, "source"),
    ((0, 12, 16), ValueError, "destination"),  # past the destination's 24 bytes
])
def test_out_of_range_copies_write_nothing(args, error, word):
    src, dst = np.arange(8, dtype=np.float32), storage(6)
    s_off, d_off, n = args
    with pytest.raises(error, match=word):
        _native.copy_buffer_to_host(src, s_off, dst, d_off, n)
    assert dst.to_list() == [-1.0] * 6


def test_refusals():
    dst = storage(4)
    with pytest.raises(BufferError, match="C-contiguous"):
        _native.copy_buffer_to_host(np.arange(8, dtype=np.float32)[::2], 0, dst, 0, 4)
    with pytest.raises(TypeError):
        _native.copy_buffer_to_host(object(), 0, dst, 0, 4)
    with pytest.raises(TypeError):
        _native.copy_buffer_to_host(b"abcd", 0, "not a storage", 0, 4)
    with pytest.raises(OverflowError):
        _native.copy_buffer_to_host(b"abcd", -1, dst, 0, 4)
    assert dst.to_list() == [-1.0] * 4
    gone = storage(4)
    gone.release()
    with pytest.raises(RuntimeError, match="released"):
        _native.copy_buffer_to_host(b"abcd", 0, gone, 0, 4)


def test_overlapping_ranges_are_refused():
    memory = np.full(4, -1.0, dtype=np.float32)
    dst = _native.HostStorage.wrap("f32", memory.ctypes.data, 4)  # the storage aliases `memory`
    with pytest.raises(ValueError, match="overlap"):
        _native.copy_buffer_to_host(memory, 0, dst, 4, 8)
    assert dst.to_list() == [-1.0] * 4
    _native.copy_buffer_to_host(memory[:1] + 5.0, 0, dst, 4, 4)  # a fresh array does not alias
    _native.copy_buffer_to_host(memory, 4, dst, 12, 4)  # disjoint ranges of the same memory
    assert memory.tolist() == [-1.0, 4.0, -1.0, 4.0]


def test_concurrent_copies_into_disjoint_ranges():
    n = 1 << 16
    dst = _native.HostStorage("f32", 4 * n)
    sources = [np.full(n, float(k), dtype=np.float32) for k in range(4)]
    threads = [threading.Thread(target=_native.copy_buffer_to_host, args=(s, 0, dst, k * 4 * n, 4 * n))
               for k, s in enumerate(sources)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    values = dst.to_list()
    assert all(values[k * n] == values[(k + 1) * n - 1] == float(k) for k in range(4))



def prefault(storage, start, nbytes):
    """Submit a prefault and wait for its completion callback; returns what it was given."""
    done, got = threading.Event(), []
    _native.submit_prefault(storage, start, nbytes, lambda e: (got.append(e), done.set()))
    assert done.wait(30)
    return got[0]


def test_prefault_changes_no_byte_of_fresh_or_written_memory():
    n = (8 << 20) // 4
    fresh = _native.HostStorage("f32", n)  # zeroed: a mapping faulted in lazily, untouched yet
    assert prefault(fresh, 0, 4 * n) is None
    assert fresh.to_list()[:: 1 << 16] == [0.0] * (n >> 16)
    written = storage(n)
    assert prefault(written, 4 * 3, 4 * n - 4 * 5) is None  # unaligned ends: the inner pages
    assert written.to_list() == [-1.0] * n
    memory = np.arange(1 << 14, dtype=np.float32)  # a wrapped caller's buffer
    wrapped = _native.HostStorage.wrap("f32", memory.ctypes.data, 1 << 14)
    assert prefault(wrapped, 0, 4 << 14) is None and np.array_equal(memory, np.arange(1 << 14))
    assert prefault(written, 0, 0) is None


def test_prefault_checks_before_queueing_and_outlives_a_release():
    s = storage(4)
    with pytest.raises(ValueError, match="exceeds"):
        _native.submit_prefault(s, 4, 16, lambda e: None)
    with pytest.raises(TypeError):
        _native.submit_prefault("not a storage", 0, 4, lambda e: None)
    with pytest.raises(TypeError, match="callable"):
        _native.submit_prefault(s, 0, 4, None)
    gone = storage(4)
    gone.release()
    with pytest.raises(RuntimeError, match="released"):
        _native.submit_prefault(gone, 0, 4, lambda e: None)
    big = _native.HostStorage("f32", (16 << 20) // 4, False)
    done = threading.Event()
    _native.submit_prefault(big, 0, 16 << 20, lambda e: done.set())
    big.release()  # the job holds the buffer: it finishes on memory still mapped
    assert done.wait(30)
