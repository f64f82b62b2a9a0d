"""Where a TiledEvictable keeps a FileBacked tier's tiles (issue 12): in one file of FileBacked's
directory, not a file per tile. The file appears with the tier's first tile, grows and shrinks
with what the tier holds, and is gone once the tier holds no tile, when the TiledEvictable is
released or collected, and at exit; a fork()ed child never changes its parent's file.
Concurrent requests from 8 threads share the file without losing a value or a byte of it.
"""
import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np

import strideweave as sw
from strideweave.carriers.tiled_evictable import TiledEvictable, TileSet
from move_sources import filebacked_directory
from tiled_data import F32, full, grid_tiles, logical_array, random_logical, run_threads, seeded

TIMEOUT = 60
TILE_BYTES = 16 * 16 * 4


def cpu_over_file(seed=1, grid=(4, 4)):
    data = random_logical(tuple(16 * g for g in grid), F32, seed)
    return data, TiledEvictable(seeded(sw.CPU, data, F32), sw.FileBacked(dtype=F32), grid, (16, 16))


def listing():
    return set(os.listdir(filebacked_directory()))


def run_child(script, tmp_path):
    env = dict(os.environ, STRIDEWEAVE_FILEBACKED_PARENT=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split()


def test_one_file_holds_the_tiers_tiles_and_goes_when_it_holds_none():
    data, te = cpu_over_file()
    tiles = grid_tiles((4, 4))
    before = listing()
    te.evict(TileSet(tiles[:5]))
    (name,) = listing() - before
    path = filebacked_directory() / name
    assert path.stat().st_size == 5 * TILE_BYTES
    te.evict(TileSet(tiles[5:12]))
    assert listing() - before == {name} and path.stat().st_size == 12 * TILE_BYTES
    te.promote(TileSet(tiles[8:12]))              # the file's last tiles: it shrinks
    assert path.stat().st_size == 8 * TILE_BYTES
    te.promote(TileSet(tiles[1:3]))               # tiles in the middle leave room ...
    te.evict(TileSet(tiles[12:14]))               # ... that the next tiles take
    assert path.stat().st_size == 8 * TILE_BYTES
    np.testing.assert_array_equal(logical_array(te), data)
    te.promote(TileSet(tiles))
    assert not path.exists() and not listing() - before
    assert te.version == 0 and te.secondary_tiles == TileSet()
    np.testing.assert_array_equal(logical_array(te), data)
    te.release()


def test_a_file_backed_seed_is_split_into_one_file_and_release_removes_it():
    data = random_logical((64, 32), F32, seed=2)
    before = listing()
    seed = seeded(sw.FileBacked, data, F32)
    te = TiledEvictable(sw.CPU(0), seed, (4, 2), (16, 16))
    assert len(listing() - before) == 2           # the seed's own file and one for the 8 tiles
    np.testing.assert_array_equal(logical_array(te), data)
    te.release()
    assert not listing() - before


def test_a_collected_tiled_evictable_leaves_no_file():
    data, te = cpu_over_file(seed=3)
    before = listing()
    te.evict(TileSet(grid_tiles((4, 4))[::3]))
    (tiles_file,) = listing() - before
    mine = {tiles_file, te.secondary.path.name}
    del te
    for _ in range(3):
        gc.collect()
    assert not listing() & mine                   # neither the tier's file nor the tiles' is left


def test_exit_removes_the_tiles_file_with_the_directory(tmp_path):
    out = run_child("""
        import os
        import strideweave as sw
        from strideweave.carriers.tiled_evictable import TiledEvictable, TileSet
        te = TiledEvictable(sw.CPU(0).new_like([1.0] * 64), sw.FileBacked(dtype=sw.DType.Float32), (4,), (16,))
        te.evict(TileSet([(0,), (2,)]))
        probe = sw.FileBacked(dtype=sw.DType.Float32)  # its parent is FileBacked's directory
        directory = probe.path.parent
        probe.release()
        print(len(os.listdir(directory)))
    """, tmp_path)
    assert out == ["2"]                           # the secondary tier's file and the tiles' file
    assert os.listdir(tmp_path) == []


def test_a_forked_child_never_changes_the_parents_tiles_file(tmp_path):
    out = run_child("""
        import os
        import strideweave as sw
        from strideweave.carriers.tiled_evictable import TiledEvictable, TileSet
        values = [float(i) for i in range(64)]
        te = TiledEvictable(sw.CPU(0).new_like(values), sw.FileBacked(dtype=sw.DType.Float32), (4,), (16,))
        te.evict(TileSet([(0,), (1,), (3,)]))
        probe = sw.FileBacked(dtype=sw.DType.Float32)  # its parent is FileBacked's directory
        directory = probe.path.parent
        probe.release()
        before = {p.name: p.stat().st_size for p in directory.iterdir()}
        pid = os.fork()
        if pid == 0:
            # Frees every region in the child's bookkeeping, then takes new ones: in a file
            # of the child's own, never in the parent's.
            te.promote(TileSet([(0,), (1,), (3,)]))
            te.evict(TileSet([(2,)]))
            ok = [te[i] for i in range(64)] == values
            te.release()
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        after = {p.name: p.stat().st_size for p in directory.iterdir()}
        print(os.waitstatus_to_exitcode(status), after == before, [te[i] for i in range(64)] == values)
        te.promote(TileSet([(0,), (1,), (3,)]))
        print(len(list(directory.iterdir())) == len(before) - 1)
    """, tmp_path)
    assert out == ["0", "True", "True", "True"]


def test_eight_threads_sharing_the_tiers_file_lose_nothing():
    data, te = cpu_over_file(seed=4, grid=(8, 8))
    tiles = grid_tiles((8, 8))
    before = listing()
    barrier, errors = threading.Barrier(8), []

    done = []

    def worker(k):
        # Each thread's own tiles, and a few of its neighbour's: requests overlap, so each one
        # either commits or is refused because another pins one of its tiles.
        requests = [TileSet(tiles[8 * k:8 * k + 8]), TileSet(tiles[(8 * k + 6) % 64:(8 * k + 6) % 64 + 4])]
        barrier.wait()
        try:
            for r in range(12):
                try:
                    (te.evict if r % 3 else te.promote)(requests[r % 2])
                    done.append(k)
                except RuntimeError as exc:
                    assert "pinned" in str(exc)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    assert run_threads([lambda k=k: worker(k) for k in range(8)], TIMEOUT)
    assert errors == [] and done
    assert te.version == 0 and not any(te.tile_state(c).pinned for c in tiles)
    np.testing.assert_array_equal(logical_array(te), data)
    te.promote(TileSet(tiles))
    assert not listing() - before
    with sw.no_grad():
        out = sw.move(full(te), sw.CPU(te.size()))
    np.testing.assert_array_equal(np.from_dlpack(out).reshape(te.logical_shape, order="F"), data)
