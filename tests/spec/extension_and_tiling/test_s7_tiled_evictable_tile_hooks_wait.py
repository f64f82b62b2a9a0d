"""§7: a TiledEvictable reads a tile outside the book's lock, as a reader of that tile. So a
tier's element hook that waits for another thread using the same TiledEvictable (reading,
writing, moving tiles, releasing it) is not waiting for a lock its own read holds: the other
thread finishes and the read completes with its value. A tile the other thread replaced or
released meanwhile is released when the read ends, not under it. Public API only: the tier is
a user's CPU subclass whose `__getitem__` starts the other thread and joins it."""
import threading

import pytest

import strideweave as sw
from strideweave.carriers.tiled_evictable import TiledEvictable
from tiled_data import F32, NotesFactories, live_made

VALUES = [float(v) for v in range(8)]
JOIN_SECONDS = 10


class WaitingCPU(NotesFactories, sw.CPU):
    """A tile of this class runs `WAIT["then"]` on another thread during its first read, and
    joins it before reading its own slot."""

    def __getitem__(self, i):
        then = WAIT.pop("then", None)
        if then is not None:
            outcome = {}

            def other():
                try:
                    outcome["value"] = then()
                except BaseException as exc:  # noqa: BLE001 - reported to the test
                    outcome["error"] = exc

            thread = threading.Thread(target=other, daemon=True)
            thread.start()
            thread.join(JOIN_SECONDS)
            WAIT["other"] = "finished" if not thread.is_alive() else "still waiting"
            WAIT["outcome"] = outcome
        return super().__getitem__(i)


WAIT: dict = {}


@pytest.fixture
def te():
    NotesFactories.made.clear()
    WAIT.clear()
    composite = TiledEvictable(WaitingCPU(0, dtype=F32).new_like(VALUES), sw.FileBacked(dtype=F32), (4,), (2,))
    yield composite
    WAIT.clear()
    composite.release()


def read_while(te, slot, then):
    """`te[slot]`, whose tile runs `then` on another thread and waits for it."""
    WAIT["then"] = then
    value = te[slot]
    assert WAIT["other"] == "finished", "the other thread waited for this thread's read"
    return value, WAIT["outcome"]


def test_another_threads_reads_and_writes_run_while_a_tile_hook_waits(te):
    def other():
        te[7] = 70.0
        return te[6], te[7]

    value, outcome = read_while(te, 5, other)
    assert value == 5.0 and outcome == {"value": (6.0, 70.0)}
    assert te.version == 1


def test_another_thread_reads_the_same_tile_while_its_hook_waits(te):
    value, outcome = read_while(te, 1, lambda: te[0])
    assert (value, outcome) == (1.0, {"value": 0.0})


def test_a_tile_evicted_while_its_read_waits_is_released_when_the_read_ends(te):
    tile = sw.TileSet([(0,)])
    value, outcome = read_while(te, 1, lambda: te.evict(tile))
    assert (value, outcome) == (1.0, {"value": None})
    assert te.secondary_tiles == tile
    # The primary tile the eviction replaced was kept for the read, then released.
    tiles = [c for c in live_made() if c.size() == 2]  # not the primary tier (8 slots)
    assert len(tiles) == 3, "only the three tiles left on the primary tier stay live"
    assert [te[i] for i in range(8)] == VALUES


def test_a_release_while_a_read_waits_succeeds_and_the_read_keeps_its_tile(te):
    value, outcome = read_while(te, 3, te.release)
    assert (value, outcome) == (3.0, {"value": None})
    assert te.is_released() and te.size() == 0
    assert live_made() == [], "the tile the read kept was released when it ended"
    with pytest.raises(RuntimeError, match="released"):
        te[0]
