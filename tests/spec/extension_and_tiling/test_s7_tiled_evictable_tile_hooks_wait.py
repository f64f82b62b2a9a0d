"""§7: a TiledEvictable reads and writes a tile outside the book's lock, as a reader or writer
of that tile. So a tier's element hook that waits for another thread using the same
TiledEvictable (reading, writing, moving tiles, releasing it) is not waiting for a lock its own
read or write holds: the other thread finishes and the read or write completes. A tile the
other thread replaced or released meanwhile is released when the read ends, not under it; a
residency request on the tile being written waits for that write. Public API only: the tier is
a user's CPU subclass whose `__getitem__` and `set_value` start the other thread and join it."""
import threading

import pytest

import strideweave as sw
from strideweave.carriers.tiled_evictable import TiledEvictable
from list_carrier import ListCarrier
from tiled_data import F32, NotesFactories, live_made

VALUES = [float(v) for v in range(8)]
JOIN_SECONDS = 10


def wait_for_other():
    """Run `WAIT["then"]` (once) on another thread and join it."""
    then = WAIT.pop("then", None)
    if then is None:
        return
    outcome = {}

    def other():
        try:
            outcome["value"] = then()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            outcome["error"] = exc

    thread = threading.Thread(target=other, daemon=True)
    thread.start()
    thread.join(WAIT.get("join", JOIN_SECONDS))
    WAIT["other"] = "finished" if not thread.is_alive() else "still waiting"
    WAIT["outcome"] = outcome
    WAIT["thread"] = thread


class WaitingCPU(NotesFactories, sw.CPU):
    """A tile of this class runs `WAIT["then"]` on another thread during its first read, and
    joins it before reading its own slot."""

    def __getitem__(self, i):
        wait_for_other()
        return super().__getitem__(i)


class WaitingList(NotesFactories, ListCarrier):
    """A user's carrier whose tiles run `WAIT["then"]` on another thread during their first
    write (`set_value`, the store of a Python carrier), and join it before storing."""

    def new_like(self, values, *, mutable=True, dtype=None):
        made = WaitingList(values, mutable)
        NotesFactories.made.append(made)
        return made

    def allocate_like(self, size, *, mutable=True, dtype=None, empty=False):
        return self.new_like([0.0] * size, mutable=mutable)

    def set_value(self, i, v):
        wait_for_other()
        super().set_value(i, v)


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


def write_while(te, slot, value, then, join=JOIN_SECONDS):
    """`te[slot] = value`, whose tile runs `then` on another thread and waits for it (at most
    `join` seconds)."""
    WAIT.update(then=then, join=join)
    te[slot] = value
    return WAIT["other"], WAIT["outcome"]


@pytest.fixture
def te_list():
    NotesFactories.made.clear()
    WAIT.clear()
    composite = TiledEvictable(WaitingList(VALUES), WaitingList([]), (4,), (2,))
    yield composite
    WAIT.clear()
    composite.release()


def test_another_threads_reads_writes_and_requests_run_while_a_write_hook_waits(te_list):
    te = te_list

    def other():
        te[7] = 70.0
        te.evict(sw.TileSet([(3,)]))
        return te[6], te[7], te[4]

    finished, outcome = write_while(te, 5, 50.0, other)
    assert finished == "finished" and outcome == {"value": (6.0, 70.0, 4.0)}
    assert [te[i] for i in range(8)] == VALUES[:5] + [50.0, 6.0, 70.0]
    assert te.version == 2 and te.secondary_tiles == sw.TileSet([(3,)])


def test_a_request_on_the_tile_being_written_waits_for_the_write(te_list):
    te = te_list
    tile = sw.TileSet([(2,)])
    finished, outcome = write_while(te, 5, 50.0, lambda: te.evict(tile), join=0.5)
    assert finished == "still waiting", "the evict of the tile went ahead under its write"
    WAIT["thread"].join(JOIN_SECONDS)
    assert WAIT["outcome"] == {"value": None}, "the evict ran once the write finished"
    assert te.secondary_tiles == tile and te[5] == 50.0, "the evicted tile holds the write"
