"""Large copies into host memory run in 2 MiB pieces spread over idle copy threads
(`transfer.rs`, `SPLIT_MIN`, `PIECE`; `engine::run_pieces` in the core): every byte lands
exactly once, at the right offset, whatever the split, and the progress counter still ends at
the total.

Sizes are just over the split threshold (whole pieces and a ragged tail) and the offsets are
not multiples of a piece, so a piece that copied the wrong range would show. Host storages are
checked through a file written from them (host -> file is never split), read by NumPy.
"""

import threading

import numpy as np
import pytest

from strideweave import _native

SPLIT_MIN = 16 << 20  # bytes: spans from this size on are split
SLOTS = (SPLIT_MIN + 12_345 * 4) // 4  # i32 slots: whole pieces and a ragged last one
BOUND = 60.0  # seconds; a safety net against hangs, never a speed requirement


def file_with(path, values):
    storage = _native.FileStorage(path, "i32")
    values.astype(np.int32).tofile(path)  # same inode: the storage sees these bytes
    return storage


def host_values(storage, tmp_path, name="check.bin"):
    """The slots of a host storage, through a file copy of them."""
    out = _native.FileStorage(tmp_path / name, "i32")
    out.resize(storage.count)
    _native.copy_span(storage, 0, out, 0, storage.count)
    return np.fromfile(tmp_path / name, dtype=np.int32)


def submitted(submit, *args, **kwargs):
    done, errors = threading.Event(), []

    def then(err):
        errors.append(err)
        done.set()

    submit(*args, then, **kwargs)
    assert done.wait(BOUND)
    assert errors == [None]


@pytest.mark.parametrize("blocking", [True, False])
def test_a_large_file_span_lands_in_host_memory_exactly(tmp_path, blocking):
    values = np.arange(SLOTS + 1000, dtype=np.int32) * 7 - 3
    src = file_with(tmp_path / "src.bin", values)
    dst = _native.HostStorage("i32", SLOTS + 10)
    progress = _native.TransferProgress()
    if blocking:
        _native.copy_span(src, 1000, dst, 3, SLOTS)
    else:
        submitted(_native.submit_span, src, 1000, dst, 3, SLOTS, progress=progress)
        assert (progress.done, progress.total) == (4 * SLOTS, 4 * SLOTS)
    got = host_values(dst, tmp_path)
    assert np.array_equal(got[3:3 + SLOTS], values[1000:])
    assert not got[:3].any() and not got[3 + SLOTS:].any()


def test_a_large_host_span_copies_exactly(tmp_path):
    values = np.arange(SLOTS, dtype=np.int32) ^ 0x5A5A
    src = _native.HostStorage("i32", SLOTS + 5)
    _native.copy_span(file_with(tmp_path / "src.bin", values), 0, src, 5, SLOTS)
    dst = _native.HostStorage("i32", SLOTS)
    submitted(_native.submit_span, src, 5, dst, 0, SLOTS)
    assert np.array_equal(host_values(dst, tmp_path), values)


@pytest.mark.parametrize("extents,strides", [
    ([SLOTS], [1]),  # flat
    ([1024, SLOTS // 1024], [1, 1024]),  # compact hierarchical: one run once coalesced
    ([SLOTS // 2, 3, 2], [1, 0, SLOTS // 2]),  # with a broadcast leaf: still one dense run
])
def test_a_large_dense_layout_copies_as_one_exact_span(tmp_path, extents, strides):
    span = int(np.prod([e for e, s in zip(extents, strides) if s]))
    values = (np.arange(span + 9, dtype=np.int64) * 31 % 1_000_003).astype(np.int32)
    src = _native.HostStorage("i32", span + 9)
    _native.copy_span(file_with(tmp_path / "src.bin", values), 0, src, 0, span + 9)
    dst = _native.HostStorage("i32", span + 4)
    submitted(_native.submit_layout, src, 9, dst, 4, extents, strides)
    got = host_values(dst, tmp_path)
    assert np.array_equal(got[4:], values[9:])
    assert not got[:4].any()
