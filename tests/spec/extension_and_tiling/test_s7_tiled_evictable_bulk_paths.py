"""TiledEvictable between built-in tiers (CPU, FileBacked) at bulk speed (issue 12), checked
against NumPy on random data: residency requests, projections and the "tiled.to_cpu" route
run as batched span copies in Rust and keep every §7 contract (values, versions and tile
states; old tiles readable until commit; pins; a failure changes nothing).
(The native entry points themselves, `_native.copy_spans`/`copy_blocks`, are tested in
tests/internal/test_tiles_native.py.)
"""
import os
import subprocess
import sys
import tempfile
import textwrap
import threading

import numpy as np
import pytest

import strideweave as sw
from strideweave.carriers.tiled_evictable import TiledEvictable, TileSelection, TileSet
from tiled_data import (F32, I32, NotedGeneric, NotesFactories, full, grid_tiles, live_made, logical_array,
                        random_logical, run_threads, seeded)

TIMEOUT = 30


def block_rows(per_axis, tile):
    """Logical indices per axis covered by the selected tiles, in the caller's order."""
    return [np.concatenate([np.arange(i * t, (i + 1) * t) for i in axis]) for axis, t in zip(per_axis, tile)]


GEOMETRIES = [((5,), (4,)), ((3, 4), (2, 3)), ((4, 2), (8, 16)), ((2, 3, 2), (3, 2, 5)), ((6, 6), (64, 64))]
TIERS = [(sw.CPU, sw.FileBacked), (sw.FileBacked, sw.CPU), (sw.CPU, sw.CPU)]


@pytest.mark.parametrize("grid,tile", GEOMETRIES, ids=[f"{g}x{t}" for g, t in GEOMETRIES])
@pytest.mark.parametrize("primary_cls,secondary_cls", TIERS, ids=["cpu-file", "file-cpu", "cpu-cpu"])
def test_residency_and_projection_match_numpy(grid, tile, primary_cls, secondary_cls):
    dtype = I32 if primary_cls is sw.FileBacked else F32
    logical = tuple(g * t for g, t in zip(grid, tile))
    data = random_logical(logical, dtype, seed=sum(logical))
    secondary = secondary_cls(0, dtype=dtype) if secondary_cls is sw.CPU else secondary_cls(dtype=dtype)
    te = TiledEvictable(seeded(primary_cls, data, dtype), secondary, grid, tile)
    tiles = grid_tiles(grid)
    rng = np.random.default_rng(len(tiles))

    evicted = {tiles[k] for k in rng.choice(len(tiles), size=max(1, len(tiles) // 2), replace=False)}
    assert te.evict(TileSet(evicted)) is None
    assert te.secondary_tiles == TileSet(evicted) and te.primary_tiles == TileSet(set(tiles) - evicted)
    assert te.version == 0 and not any(te.tile_state(c).pinned for c in tiles)
    np.testing.assert_array_equal(logical_array(te), data)

    promoted = {c for c in evicted if rng.random() < 0.5}
    promoted.add(tiles[0])                           # may already be in place: skipped then
    te.promote(TileSet(promoted))
    assert te.secondary_tiles == TileSet(evicted - promoted)
    assert te.version == 0
    np.testing.assert_array_equal(logical_array(te), data)

    # Projections read tiles where they are (both tiers here) and change no residency.
    before = (te.primary_tiles, te.secondary_tiles, te.version)
    selections = [[list(range(0, g, 2)) for g in grid], [list(range(g))[::-1] for g in grid],
                  [[g - 1] for g in grid]]
    for per_axis in selections:
        with sw.no_grad():
            out = te.project(full(te), TileSelection(per_axis)).wait()
        assert type(out.carrier) is primary_cls and out.offset == 0
        compact = tuple(len(a) * t for a, t in zip(per_axis, tile))
        assert out.layout == sw.Layout.canonical(sw.Shape(list(compact)))
        got = np.array([out.carrier[i] for i in range(out.carrier.size())]).reshape(compact, order="F")
        np.testing.assert_array_equal(got, data[np.ix_(*block_rows(per_axis, tile))])
        assert out.carrier.version == 0
    assert (te.primary_tiles, te.secondary_tiles, te.version) == before
    assert not any(te.tile_state(c).pinned for c in tiles)

    # Writes still land in each tile's current tier after native swaps.
    te[0] = 7 if dtype is I32 else 7.5
    assert te.version == 1 and te[0] == (7 if dtype is I32 else 7.5)


def test_projection_into_a_file_backed_destination_reads_cpu_tiles_in_place():
    data = random_logical((8, 6), F32, seed=3)
    te = TiledEvictable(seeded(sw.FileBacked, data, F32), sw.CPU(0), (4, 3), (2, 2))
    te.evict(TileSelection([[0, 2], [1]]))
    dest = sw.FileBacked(dtype=F32)
    with sw.no_grad():
        out = te.project(full(te), [[2, 0], [1, 2]], dest).wait()
    assert out.carrier is dest and dest.size() == 16 and dest.version == 0
    got = np.array([dest[i] for i in range(16)], dtype=np.float32).reshape((4, 4), order="F")
    np.testing.assert_array_equal(got, data[np.ix_(*block_rows([[2, 0], [1, 2]], (2, 2)))])
    assert te.secondary_tiles == TileSet([(0, 1), (2, 1)])


def test_a_python_storage_tier_keeps_the_object_model_path():
    """Generic keeps its slots in Python: its tile moves run through moves between tiers and
    hooks, while the CPU side's private copies are made in Rust. (A Generic subclass that
    only notes what its factories make, so the test sees the tiles.)"""
    data = random_logical((6, 4), F32, seed=2)
    NotesFactories.made.clear()
    te = TiledEvictable(seeded(sw.CPU, data, F32), NotedGeneric([], dtype=F32), (3, 2), (2, 2))
    tiles = grid_tiles((3, 2))
    te.evict(TileSet(tiles[1:5]))
    # The tier's own factory made each evicted tile: a Generic (of our subclass), owned,
    # holding that tile's values first mode fastest.
    evicted = live_made()
    assert all(type(t) is NotedGeneric and t.is_owned() for t in evicted)
    expected = sorted(data[2 * a:2 * a + 2, 2 * b:2 * b + 2].ravel(order="F").tolist() for a, b in tiles[1:5])
    assert sorted([t[k] for k in range(4)] for t in evicted) == expected
    np.testing.assert_array_equal(logical_array(te), data)
    te.promote(TileSet(tiles[2:4]))
    assert te.secondary_tiles == TileSet([tiles[1], tiles[4]]) and te.version == 0
    np.testing.assert_array_equal(logical_array(te), data)
    with sw.no_grad():
        out = te.project(full(te), [[2, 0], [1]]).wait()
    got = np.array([out.carrier[i] for i in range(out.carrier.size())], dtype=np.float32)
    np.testing.assert_array_equal(got.reshape((4, 2), order="F"), data[np.ix_(*block_rows([[2, 0], [1]], (2, 2)))])
    with sw.no_grad():
        moved = sw.move(full(te), sw.CPU(24))
    np.testing.assert_array_equal(np.from_dlpack(moved), data)


# ----- old tiles stay readable until commit; pins ------------------------------------------------

class GatedCPU(sw.CPU):
    """A CPU tier whose allocations (the fresh tiles of a promotion) wait at a gate: holds a
    native request open between its pins and its copy."""

    gate = None
    entered = None

    def allocate_like(self, size, *, mutable=True, dtype=None, empty=False):
        if GatedCPU.entered is not None:
            GatedCPU.entered.set()
        if GatedCPU.gate is not None:
            assert GatedCPU.gate.wait(TIMEOUT)
        return super().allocate_like(size, mutable=mutable, dtype=dtype, empty=empty)


@pytest.fixture
def gate():
    event = threading.Event()
    GatedCPU.gate, GatedCPU.entered = event, threading.Event()
    yield GatedCPU
    event.set()
    GatedCPU.gate = GatedCPU.entered = None


def evicted_tiled(data, grid, tile, primary_cls=sw.CPU):
    """Every tile on a FileBacked secondary, promotion target `primary_cls`."""
    te = TiledEvictable(primary_cls(0), seeded(sw.FileBacked, data, F32), grid, tile)
    assert te.primary_tiles == TileSet()
    return te


def test_a_pending_promotion_serves_old_tiles_and_refuses_writes_until_commit(gate):
    data = random_logical((32, 32), F32, seed=11)
    te = evicted_tiled(data, (4, 4), (8, 8), GatedCPU)
    tiles = grid_tiles((4, 4))
    h = te.promote_async(TileSet(tiles[:8]))
    assert gate.entered.wait(TIMEOUT) and not h.done
    assert all(te.tile_state(c).pinned and te.tile_state(c).location == "secondary" for c in tiles[:8])
    np.testing.assert_array_equal(logical_array(te), data)   # the old (secondary) tiles
    with pytest.raises(RuntimeError, match="pinned"):
        te[0] = 1.0
    with pytest.raises(RuntimeError, match="pinned"):
        te.evict(TileSet([tiles[3]]))
    with pytest.raises(RuntimeError, match="pending"):
        te.release()
    te[te.size() - 1] = 2.0                                  # an unpinned tile is writable
    data[-1, -1] = 2.0
    gate.gate.set()
    assert h.wait() is None
    assert te.primary_tiles == TileSet(tiles[:8]) and te.version == 1
    np.testing.assert_array_equal(logical_array(te), data)


def test_a_concurrent_reader_sees_correct_values_throughout_a_promotion():
    data = random_logical((256, 256), F32, seed=5)           # 64 tiles of 4 KiB
    te = evicted_tiled(data, (8, 8), (32, 32))
    probes = [(s, float(data.ravel(order="F")[s])) for s in range(0, te.size(), 997)]
    tiles = grid_tiles((8, 8))
    stop, seen, errors = threading.Event(), [], []

    def reader():
        try:
            while not stop.is_set():
                for s, expected in probes:
                    got = te[s]
                    if got != expected:
                        errors.append((s, got, expected))
                seen.append(len(te.primary_tiles))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(3):
            te.promote(TileSet(tiles))
            te.evict(TileSet(tiles))
    finally:
        stop.set()
        thread.join(TIMEOUT)
    assert errors == []
    # Every observed state is all-primary or all-secondary: one request commits all at once.
    assert seen and set(seen) <= {0, len(tiles)}
    np.testing.assert_array_equal(logical_array(te), data)


def test_racing_residency_requests_one_wins_the_others_see_pins(gate):
    data = random_logical((16, 16), F32, seed=9)
    te = evicted_tiled(data, (4, 4), (4, 4), GatedCPU)
    tiles = grid_tiles((4, 4))
    first = te.promote_async(TileSet(tiles))
    assert gate.entered.wait(TIMEOUT)
    barrier, outcomes = threading.Barrier(6), []

    def contender(k):
        barrier.wait()
        try:
            request = te.promote_async if k % 2 else te.evict_async
            outcomes.append(request(TileSet(tiles[k:k + 5])))
        except RuntimeError as exc:
            outcomes.append(exc)

    assert run_threads([lambda k=k: contender(k) for k in range(6)], TIMEOUT)
    assert len(outcomes) == 6 and all(isinstance(o, RuntimeError) and "pinned" in str(o) for o in outcomes)
    gate.gate.set()
    assert first.wait() is None and te.primary_tiles == TileSet(tiles)

    # Free-for-all: whatever interleaving, each request succeeds or is refused for pins, and
    # values, version and pins come out intact.
    GatedCPU.gate = None
    results = []

    def racer(k):
        for r in range(4):
            tiles_k = TileSet(tiles[(k + r) % 8:(k + r) % 8 + 8])
            try:
                h = (te.evict_async if (k + r) % 2 else te.promote_async)(tiles_k)
            except RuntimeError as exc:
                results.append(exc)
                continue
            results.append(h.wait())

    assert run_threads([lambda k=k: racer(k) for k in range(5)], TIMEOUT)
    assert len(results) == 20 and None in results
    assert all(r is None or (isinstance(r, RuntimeError) and "pinned" in str(r)) for r in results)
    assert te.version == 0 and not any(te.tile_state(c).pinned for c in tiles)
    np.testing.assert_array_equal(logical_array(te), data)


# ----- a real fault mid-request: ENOSPC on a tiny tmpfs -----------------------------------------

FAULT_CHILD = textwrap.dedent("""
    import errno, os
    import numpy as np
    import strideweave as sw
    from strideweave.carriers.tiled_evictable import TiledEvictable, TileSet
    F32 = sw.DType.Float32
    probe = sw.FileBacked(dtype=F32)
    directory = probe.path.parent                 # on the 128 KiB tmpfs
    probe.release()
    values = np.random.default_rng(1).standard_normal(256 * 256).astype(np.float32).tolist()

    def expect_enospc(fn):
        try:
            fn()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        else:
            raise AssertionError("the request should have run out of space")

    def state(te, tiles):
        return ([te[i] for i in range(0, te.size(), 61)], te.version, te.primary_tiles,
                te.secondary_tiles, [te.tile_state(c).pinned for c in tiles])

    # Evicting 64 tiles of 4 KiB (256 KiB) onto the tmpfs fails part-way: nothing changes and
    # the staged tiles' file is gone.
    tiles = [(i, j) for j in range(8) for i in range(8)]
    te = TiledEvictable(sw.CPU(0).new_like(values), sw.FileBacked(dtype=F32), (8, 8), (32, 32))
    names, before = sorted(os.listdir(directory)), state(te, tiles)
    expect_enospc(lambda: te.evict(TileSet(tiles)))
    assert state(te, tiles) == before and sorted(os.listdir(directory)) == names
    te.evict(TileSet(tiles[:8]))                  # a request that fits still works
    (slab,) = set(os.listdir(directory)) - set(names)   # one file holds the tier's tiles
    assert os.path.getsize(os.path.join(directory, slab)) == 8 * 4096
    te.promote(TileSet(tiles[:8]))
    assert state(te, tiles) == before and sorted(os.listdir(directory)) == names
    te.release()

    # A FileBacked primary on an almost full tmpfs: promotion and projection fail part-way.
    tiles = [(i, j) for j in range(4) for i in range(4)]
    te = TiledEvictable(sw.FileBacked(dtype=F32), sw.CPU(0).new_like(values[:16384]), (4, 4), (32, 32))
    filler = sw.FileBacked(dtype=F32).new_like([1.0] * 28000)   # leaves 4 pages free
    names, before = sorted(os.listdir(directory)), state(te, tiles)
    expect_enospc(lambda: te.promote(TileSet(tiles)))
    assert state(te, tiles) == before and sorted(os.listdir(directory)) == names
    with sw.no_grad():
        handle = te.project(sw.Tensor(te, 0, sw.Layout.canonical(sw.Shape([128, 128]))),
                            [[0, 1, 2, 3], [0, 1, 2, 3]])
    expect_enospc(handle.wait)
    assert state(te, tiles) == before and sorted(os.listdir(directory)) == names
    filler.release()
    te.promote(TileSet(tiles))                    # with room, the same request succeeds
    assert te.primary_tiles == TileSet(tiles) and state(te, tiles)[0] == before[0]
    te.release()
    print("ok")
""")


@pytest.fixture
def tiny_tmpfs():
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tempfile.mkdtemp(prefix="sw-tiled-tmpfs-")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", mount_point],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        os.rmdir(mount_point)
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", mount_point], check=False)
        os.rmdir(mount_point)


def test_running_out_of_space_mid_request_changes_nothing(tiny_tmpfs):
    env = dict(os.environ, STRIDEWEAVE_FILEBACKED_PARENT=tiny_tmpfs)
    out = subprocess.run([sys.executable, "-c", FAULT_CHILD], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "ok"
    assert os.listdir(tiny_tmpfs) == []


def test_the_route_to_cpu_and_residency_requests_race_cleanly(gate):
    data = random_logical((32, 32), F32, seed=13)
    te = evicted_tiled(data, (4, 4), (8, 8), GatedCPU)
    tiles = grid_tiles((4, 4))
    # A pending request refuses the move before any effect.
    h = te.promote_async(TileSet(tiles[:4]))
    assert gate.entered.wait(TIMEOUT)
    dest = sw.CPU(te.size())
    with sw.no_grad(), pytest.raises(RuntimeError, match="pending"):
        sw.move(full(te), dest)
    assert not te.is_released() and dest.version == 0 and not dest.is_released()
    gate.gate.set()
    assert h.wait() is None
    GatedCPU.gate = None

    # Free race: one move against residency requests; exactly one side's effects remain.
    barrier, outcomes = threading.Barrier(5), {}

    def mover():
        barrier.wait()
        try:
            with sw.no_grad():
                outcomes["move"] = sw.move(full(te), sw.CPU(te.size()))
        except BaseException as exc:  # noqa: BLE001 - checked below: only RuntimeError may lose
            outcomes["move"] = exc

    def requester(k):
        barrier.wait()
        try:
            outcomes[k] = (te.evict_async if k % 2 else te.promote_async)(TileSet(tiles[4 * k:4 * k + 4])).wait()
        except BaseException as exc:  # noqa: BLE001 - checked below: only RuntimeError may lose
            outcomes[k] = exc

    assert run_threads([mover] + [lambda k=k: requester(k) for k in range(4)], TIMEOUT)
    assert len(outcomes) == 5
    moved = outcomes["move"]
    for k in range(4):
        assert outcomes[k] is None or isinstance(outcomes[k], RuntimeError)
    if isinstance(moved, sw.Tensor):
        np.testing.assert_array_equal(np.from_dlpack(moved), data)
        assert te.is_released()
    else:
        assert isinstance(moved, RuntimeError) and not te.is_released()
        np.testing.assert_array_equal(logical_array(te), data)
        assert not any(te.tile_state(c).pinned for c in tiles)


def test_a_grid_of_more_tiles_than_the_coordinate_index_holds_maps_requests_the_same():
    data = random_logical((257, 256), F32, seed=17)            # 65792 one-slot tiles
    te = TiledEvictable(seeded(sw.CPU, data, F32), sw.FileBacked(dtype=F32), (257, 256), (1, 1))
    chosen = [(256, 255), (0, 0), (3, 200)]
    te.evict(TileSet(chosen))
    assert te.secondary_tiles == TileSet(chosen) and te[256 + 257 * 255] == data[256, 255]
    for bad in ([(257, 0)], [(0, 256)], [(1, 2, 3)]):
        with pytest.raises(ValueError):
            te.promote(TileSet(bad))
    te.promote(TileSet(chosen))
    assert te.secondary_tiles == TileSet() and te.version == 0
    np.testing.assert_array_equal(logical_array(te), data)


def test_gathers_of_many_megabytes_match_numpy():
    """Projection and the route to CPU past 8 MiB, where host rows are written with streaming
    stores."""
    data = random_logical((1536, 1536), F32, seed=23)          # 9 MiB in 24 x 24 tiles
    seed = sw.CPU(data.size, empty=True)
    np.from_dlpack(sw.Tensor(seed, 0, sw.Layout.canonical(sw.Shape(data.size))))[:] = data.ravel(order="F")
    te = TiledEvictable(seed, sw.FileBacked(dtype=F32), (24, 24), (64, 64))
    te.evict(TileSet(grid_tiles((24, 24))[::5]))
    every = [list(range(24))[::-1], list(range(24))]
    with sw.no_grad():
        out = te.project(full(te), every).wait()
        got = np.from_dlpack(out).reshape((1536, 1536), order="F")
        np.testing.assert_array_equal(got, data[np.ix_(*block_rows(every, (64, 64)))])
        moved = sw.move(full(te), sw.CPU(data.size, empty=True))
    np.testing.assert_array_equal(np.from_dlpack(moved).reshape((1536, 1536), order="F"), data)
