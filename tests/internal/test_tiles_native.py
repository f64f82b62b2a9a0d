"""The native pieces of the tiled tier's data path: `FileSlab` and its `FileRegion`s, the batched
whole-tile copies (`copy_storages`, `submit_place_blocks`), `release_storages` and
`HostStorage.many`. Every request is checked before a byte moves; a region is confined to its
own slots of the slab's file.
"""
import threading

import pytest

from strideweave import _native
from tiled_data import run_threads

TIMEOUT = 30


def host(values, kind="f32"):
    s = _native.HostStorage(kind, len(values))
    s.set_values(values)
    return s


def slab_file(tmp_path, slots=4, kind="f32"):
    return _native.FileSlab(str(tmp_path / "slab.bin"), kind, slots)


def test_regions_are_fixed_windows_of_one_file_that_goes_when_none_is_left(tmp_path):
    slab = slab_file(tmp_path)
    assert not (tmp_path / "slab.bin").exists() and slab.live == 0 and slab.is_creator()
    a, b, c = slab.allocate(3)
    assert slab.live == 3 and (tmp_path / "slab.bin").stat().st_size == 48
    assert {r.path for r in (a, b, c)} == {tmp_path / "slab.bin"} and a.count == 4 and a.kind == "f32"
    for k, region in enumerate((a, b, c)):
        for j in range(4):
            region.set(j, 10.0 * k + j)
    b.set(3, 2.5)
    b.set(0, -1.0)
    assert b.to_list() == [-1.0, 11.0, 12.0, 2.5]
    assert a.to_list() == [0.0, 1.0, 2.0, 3.0] and c.to_list() == [20.0, 21.0, 22.0, 23.0]
    with pytest.raises(IndexError):
        a.get(4)
    with pytest.raises(IndexError):
        a.set(-1, 1.0)
    with pytest.raises(TypeError):
        a.set(0, "x")
    c.release()
    assert c.is_released() and c.count == 0 and (tmp_path / "slab.bin").stat().st_size == 32
    with pytest.raises(RuntimeError, match="released"):
        c.get(0)
    c.release()                                            # idempotent
    _native.release_storages([a, b])
    assert slab.live == 0 and not (tmp_path / "slab.bin").exists()


def test_slab_arguments_and_a_taken_path_are_refused_without_effect(tmp_path):
    with pytest.raises(ValueError):
        _native.FileSlab(str(tmp_path / "x.bin"), "f32", 0)
    with pytest.raises(ValueError):
        _native.FileSlab(str(tmp_path / "x.bin"), "f16", 4)
    (tmp_path / "taken.bin").write_bytes(b"keep")
    slab = _native.FileSlab(str(tmp_path / "taken.bin"), "f32", 4)
    with pytest.raises(FileExistsError):
        slab.allocate(2)
    assert slab.live == 0 and (tmp_path / "taken.bin").read_bytes() == b"keep"


def test_copies_confine_each_region_to_its_own_slots(tmp_path):
    slab = slab_file(tmp_path)
    a, b = slab.allocate(2)
    src = host([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    _native.copy_spans([(src, 0, a, 0, 4), (src, 4, b, 0, 4)])
    assert a.to_list() == [1.0, 2.0, 3.0, 4.0] and b.to_list() == [5.0, 6.0, 7.0, 8.0]
    for bad in ([(src, 0, a, 1, 4)], [(a, 2, src, 0, 3)]):
        with pytest.raises(ValueError, match="past"):
            _native.copy_spans(bad)
    with pytest.raises(ValueError, match="past"):
        _native.copy_blocks([(src, 0, a, 2)], [2, 2], [2, 4], [2, 2])
    assert a.to_list() == [1.0, 2.0, 3.0, 4.0] and b.to_list() == [5.0, 6.0, 7.0, 8.0]
    back = _native.HostStorage.many("f32", 4, 2, False)
    assert [s.count for s in back] == [4, 4] and back[0] is not back[1]
    _native.copy_storages([b, a], back, 4)
    assert back[0].to_list() == [5.0, 6.0, 7.0, 8.0] and back[1].to_list() == [1.0, 2.0, 3.0, 4.0]
    a.release()
    with pytest.raises(RuntimeError, match="released"):
        _native.copy_storages([a], [back[0]], 4)
    assert back[0].to_list() == [5.0, 6.0, 7.0, 8.0]


@pytest.mark.parametrize("sources,destinations,count,exc,word", [
    (lambda s, d: [s[0], s[1]], lambda s, d: [d[0]], 2, ValueError, "fewer"),
    (lambda s, d: [s[0]], lambda s, d: d, 2, ValueError, "more"),
    (lambda s, d: s, lambda s, d: d, 3, ValueError, "past"),
    (lambda s, d: s, lambda s, d: d, -1, ValueError, "non-negative"),
    (lambda s, d: [s[0], 5], lambda s, d: d, 2, TypeError, "sources\\[1\\]"),
    (lambda s, d: s, lambda s, d: [d[0], host([0, 0], "i32")], 2, TypeError, "i32"),
])
def test_bad_whole_storage_copies_are_refused_before_any_write(sources, destinations, count, exc, word):
    s, d = [host([1.0, 2.0]), host([3.0, 4.0])], [host([9.0, 9.0]), host([9.0, 9.0])]
    with pytest.raises(exc, match=word):
        _native.copy_storages(sources(s, d), destinations(s, d), count)
    assert [x.to_list() for x in d] == [[9.0, 9.0], [9.0, 9.0]]


def test_placing_tiles_into_one_array_runs_as_one_job_and_checks_first(tmp_path):
    slab = slab_file(tmp_path)
    tiles = slab.allocate(2) + [host([0.0] * 4)]
    for k, tile in enumerate(tiles):
        _native.copy_spans([(host([10.0 * k + j for j in range(4)]), 0, tile, 0, 4)])
    dst = host([0.0] * 12)
    done, results = threading.Event(), []
    # Three 2x2 tiles side by side in a 6x2 array (first mode fastest): tile k at slot 2k.
    _native.submit_place_blocks(tiles, dst, [0, 2, 4], [2, 2], [6, 2], lambda e: (results.append(e), done.set()))
    assert done.wait(TIMEOUT) and results == [None]
    assert dst.to_list() == [0.0, 1.0, 10.0, 11.0, 20.0, 21.0, 2.0, 3.0, 12.0, 13.0, 22.0, 23.0]
    called = []
    for offsets, exc, word in (([0, 2], ValueError, "offsets"), ([0, 2, 4, 6], ValueError, "offsets"),
                               ([0, 2, 5], ValueError, "past")):
        with pytest.raises(exc, match=word):
            _native.submit_place_blocks(tiles, dst, offsets, [2, 2], [6, 2], called.append)
    with pytest.raises(ValueError, match="block_shape"):
        _native.submit_place_blocks(tiles, dst, [0, 2, 4], [3, 2], [2, 2], called.append)
    assert called == [] and dst.to_list()[:2] == [0.0, 1.0]


def test_a_placement_reading_its_own_destination_is_refused_before_anything_is_written():
    # The sources of a placement are only read, and so are not deduplicated among themselves,
    # but a source that is the destination still counts as the same storage: placing it into
    # itself over its own slots is an overlap, refused before a byte moves.
    dst = host([float(v) for v in range(12)])
    other = host([100.0, 101.0, 102.0, 103.0])
    called = []
    with pytest.raises(ValueError, match="overlap"):
        _native.submit_place_blocks([other, dst, other], dst, [0, 2, 4], [2, 2], [6, 2], called.append)
    assert called == [] and dst.to_list() == [float(v) for v in range(12)]
    # The same source read twice is fine.
    done = threading.Event()
    _native.submit_place_blocks([other, other, other], dst, [0, 2, 4], [2, 2], [6, 2], lambda e: done.set())
    assert done.wait(TIMEOUT)
    assert dst.to_list() == [100.0, 101.0] * 3 + [102.0, 103.0] * 3


def test_release_storages_refuses_strangers_before_releasing_anything(tmp_path):
    (region,) = slab_file(tmp_path).allocate(1)
    buffer = host([1.0])
    with pytest.raises(TypeError, match="storages\\[1\\]"):
        _native.release_storages([buffer, 3, region])
    assert not buffer.is_released() and not region.is_released()
    big = _native.HostStorage.many("f32", 1 << 17, 4)      # 2 MiB together: freed off-thread
    _native.release_storages(big + [buffer, region, buffer])
    assert all(s.is_released() for s in big + [buffer, region])


def test_eight_threads_allocating_and_releasing_regions_never_share_slots(tmp_path):
    slab = slab_file(tmp_path, slots=2, kind="i32")
    barrier, errors = threading.Barrier(8), []

    def worker(k):
        barrier.wait()
        try:
            for r in range(50):
                regions = slab.allocate(1 + (k + r) % 4)
                for region in regions:
                    region.set(0, k)
                    region.set(1, r)
                assert all(region.to_list() == [k, r] for region in regions)
                (regions[0].release() if r % 2 else _native.release_storages(regions))
                _native.release_storages(regions)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    assert run_threads([lambda k=k: worker(k) for k in range(8)], TIMEOUT)
    assert errors == [] and slab.live == 0 and not (tmp_path / "slab.bin").exists()


# ----- copy_spans / copy_blocks (moved from the tiled spec tests) -----------------------------

def test_copy_spans_and_blocks_copy_between_host_and_file_storages(tmp_path):
    a, b = host([1.0, 2.0, 3.0, 4.0]), host([0.0] * 4)
    f = _native.FileStorage(str(tmp_path / "f.bin"), "f32")
    f.resize(4)
    _native.copy_spans([(a, 2, f, 0, 2), (a, 0, f, 2, 2)])
    assert f.to_list() == [3.0, 4.0, 1.0, 2.0]
    _native.copy_spans([(f, 0, b, 2, 2), (f, 2, b, 0, 2)])
    assert b.to_list() == [1.0, 2.0, 3.0, 4.0]
    # a 2x2 block of a dense 2x2 source, into the right half of a dense 2x4 destination
    d = host([0.0] * 8)
    _native.copy_blocks([(f, 0, d, 4)], [2, 2], [2, 2], [2, 4])
    assert d.to_list() == [0.0, 0.0, 0.0, 0.0, 3.0, 4.0, 1.0, 2.0]
    done, results = threading.Event(), []
    _native.submit_copy_spans([(d, 4, a, 0, 4)], lambda err: (results.append(err), done.set()))
    assert done.wait(TIMEOUT) and results == [None] and a.to_list() == [3.0, 4.0, 1.0, 2.0]
    f.release()


@pytest.mark.parametrize("spans,exc,word", [
    (lambda a, b: [(a, 0, b, 0, 2), (a, 3, b, 0, 2)], ValueError, "span 1"),
    (lambda a, b: [(a, 0, b, 3, 2)], ValueError, "destination"),
    (lambda a, b: [(a, 0, a, 1, 2)], ValueError, "overlapping"),
    (lambda a, b: [(a, -1, b, 0, 1)], ValueError, "src_slot"),
    (lambda a, b: [(a, 0, 5, 0, 1)], TypeError, "HostStorage"),
    (lambda a, b: [(a, 0, b)], TypeError, "spans\\[0\\]"),
    (lambda a, b: [(a, 0, host([1, 2], "i32"), 0, 1)], TypeError, "i32"),
])
def test_bad_span_requests_are_refused_before_any_write(spans, exc, word):
    a, b = host([1.0, 2.0, 3.0, 4.0]), host([9.0] * 4)
    with pytest.raises(exc, match=word):
        _native.copy_spans(spans(a, b))
    called = []
    with pytest.raises(exc, match=word):
        _native.submit_copy_spans(spans(a, b), called.append)
    assert b.to_list() == [9.0] * 4 and a.to_list() == [1.0, 2.0, 3.0, 4.0] and called == []


def test_bad_block_requests_and_released_storages_are_refused():
    a, b = host([1.0] * 4), host([9.0] * 4)
    with pytest.raises(ValueError, match="block_shape"):
        _native.copy_blocks([(a, 0, b, 0)], [4], [2], [4])
    with pytest.raises(ValueError, match="past"):
        _native.copy_blocks([(a, 0, b, 1)], [4], [4], [4])
    a.release()
    with pytest.raises(RuntimeError, match="released"):
        _native.copy_spans([(a, 0, b, 0, 1)])
    assert b.to_list() == [9.0] * 4


def placed(sources, offsets, block, shape):
    """Runs `submit_place_blocks` of numpy-backed Float32 sources into a fresh numpy-backed
    destination; returns the destination as an array of `shape` (first mode fastest)."""
    import numpy as np
    out = np.zeros(shape[::-1], dtype=np.float32)
    storages = [_native.HostStorage.wrap("f32", s.ctypes.data, s.size) for s in sources]
    dst = _native.HostStorage.wrap("f32", out.ctypes.data, out.size)
    done, results = threading.Event(), []
    _native.submit_place_blocks(storages, dst, offsets, block, shape, lambda e: (results.append(e), done.set()))
    assert done.wait(TIMEOUT) and results == [None]
    return out


def test_a_large_placement_on_the_tile_lattice_is_split_over_copy_threads_with_the_same_result():
    # 64 tiles of 256 KiB (16 MiB) placed on the lattice: copied in parts at once.
    import numpy as np
    t, g = 256, 8
    tiles = [np.arange(t * t, dtype=np.float32) + k * t * t for k in range(g * g)]
    order = [(i, j) for j in range(g) for i in range(g)][::-1]  # placed in reverse grid order
    offsets = [i * t + j * t * (g * t) for i, j in order]
    out = placed(tiles, offsets, [t, t], [g * t, g * t])
    for k, (i, j) in enumerate(order):
        assert np.array_equal(out[j * t:(j + 1) * t, i * t:(i + 1) * t], tiles[k].reshape(t, t)), (i, j)


def test_large_blocks_placed_at_one_offset_run_in_order_and_the_last_wins():
    # Off the disjoint lattice rule (two blocks at one slot), so never split: in order.
    import numpy as np
    n = 2048
    first, second = np.full(n * n, 1.0, dtype=np.float32), np.arange(n * n, dtype=np.float32)
    out = placed([first, second], [0, 0], [n, n], [n, n])
    assert np.array_equal(out.reshape(-1), second)


def test_a_placement_that_reads_its_own_destination_runs_in_order():
    # Block 0 copies the destination's first half into its second; block 1 then overwrites the
    # first half. Run at once, block 1 could land before block 0 has read it.
    import numpy as np
    n = 2048
    out = np.zeros(2 * n * n, dtype=np.float32)
    out[:n * n] = np.arange(n * n, dtype=np.float32)
    other = np.full(n * n, -1.0, dtype=np.float32)
    dst = _native.HostStorage.wrap("f32", out.ctypes.data, out.size)
    src = _native.HostStorage.wrap("f32", other.ctypes.data, other.size)
    done, results = threading.Event(), []
    _native.submit_place_blocks([dst, src], dst, [n * n, 0], [n, n], [n, 2 * n],
                                lambda e: (results.append(e), done.set()))
    assert done.wait(TIMEOUT) and results == [None]
    assert np.array_equal(out[n * n:], np.arange(n * n, dtype=np.float32))
    assert np.array_equal(out[:n * n], other)
