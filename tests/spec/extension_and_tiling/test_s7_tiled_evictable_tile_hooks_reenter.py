"""§7 and issue 21 (one model): the rules of a TiledEvictable's tiles live in the core's tile
book, which runs a tile's code under its lock. A tier class whose tiles call back into the
TiledEvictable that owns them, on the same thread, is refused with RuntimeError instead of
waiting for itself, and the outer read or write completes with its values intact. Public API
only: the tier is a user's CPU subclass whose element access reaches the composite."""
import threading

import pytest

import strideweave as sw
from strideweave.carriers.tiled_evictable import TiledEvictable
from tiled_data import F32, run_threads

REENTRY = {"target": None, "calls": [], "refusals": []}


class ReenteringCPU(sw.CPU):
    """Tiles made by `allocate_like`/`new_like` of this class read and write their own
    TiledEvictable (the one named in REENTRY) whenever one of their slots is read or written."""

    def _reenter(self):
        te = REENTRY["target"]
        if te is None:
            return
        for attempt in (lambda: te[0], lambda: te.__setitem__(1, 99.0), lambda: te.evict(sw.TileSet([(0,)]))):
            REENTRY["calls"].append(1)
            try:
                attempt()
            except RuntimeError as exc:
                REENTRY["refusals"].append(str(exc))

    def __getitem__(self, i):
        self._reenter()
        return super().__getitem__(i)


@pytest.fixture
def reentering():
    values = [float(v) for v in range(8)]
    te = TiledEvictable(ReenteringCPU(0, dtype=F32).new_like(values), sw.FileBacked(dtype=F32), (4,), (2,))
    REENTRY.update(target=te, calls=[], refusals=[])
    yield te
    REENTRY["target"] = None
    te.release()


def test_a_tile_that_reads_its_own_tiled_evictable_during_a_read_is_refused_not_deadlocked(reentering):
    te = reentering
    result = {}

    def outer():
        result["value"] = te[5]

    assert run_threads([outer], timeout=10), "the read waited for itself"
    assert result["value"] == 5.0
    # The re-entrant read and write are refused as re-entries; the evict is refused by the
    # same rule (or, had it been admitted, would run on the engine with the tile pinned).
    reads_and_writes = REENTRY["refusals"][:2]
    assert len(reads_and_writes) == 2 and all("its own tiles" in m for m in reads_and_writes)
    REENTRY["target"] = None
    assert [te[i] for i in range(8)] == [float(v) for v in range(8)], "nothing was written"
    assert te.version == 0 and not te.is_released()


def test_after_a_refused_re_entry_other_threads_still_read_write_and_move_tiles(reentering):
    te = reentering
    assert run_threads([lambda: te[2]], timeout=10)
    REENTRY["target"] = None
    errors = []

    def worker(k):
        try:
            te[k] = float(k) + 0.5
            te.evict(sw.TileSet([(k // 2,)]))
            te.promote(sw.TileSet([(k // 2,)]))
        except RuntimeError as exc:  # another worker pinned the tile: the specified refusal
            errors.append(str(exc))

    assert run_threads([lambda k=k: worker(k) for k in range(8)], timeout=30)
    assert all("pinned" in e for e in errors)
    assert not any(te.tile_state((i,)).pinned for i in range(4)), "no pin is left behind"
    te.evict(sw.TileSet([(i,) for i in range(4)]))
    assert te.secondary_tiles == sw.TileSet([(i,) for i in range(4)])
