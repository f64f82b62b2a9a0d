"""extension-and-tiling.md §7 TiledEvictable, with its requests racing the other state
transitions (issue 10: a claim is taken atomically with the checks that guard it): residency
vs a move of the TiledEvictable ("tiled.to_cpu"), residency vs release, and a projection into
a caller's destination vs a move or release of that destination.

8 threads, 300 rounds each (100 for the Python-tier variants, whose rounds copy through
Python hooks). Whatever the interleaving, two conflicting transitions never both take effect
at once: the one that meets the other's claim or pins raises RuntimeError with the message of
what it met, the values are exact, nothing crashes, and nothing stays claimed or pinned
(checked through public API: a carrier nobody claims accepts `release()`)."""
import pytest

import strideweave as sw
from racing import (THREADS, accepts_release, frequent_thread_switches, messages, ok,  # noqa: F401 (autouse fixture)
                     raised, run_together)
from strideweave.carriers.tiled_evictable import TiledEvictable, TileSelection, TileSet

F32 = sw.DType.Float32
ROUNDS = 300
GRID, TILE = 4, 16
N = GRID * TILE
VALUES = [float(i) for i in range(N)]
EVERY = TileSet([(k,) for k in range(GRID)])
HALF = THREADS // 2


def flat(carrier, n=N):
    return sw.Tensor(carrier, 0, sw.Layout.canonical(sw.Shape(n)))


# Built-in tiers copy in Rust; Generic tiers go through the object model (Python hooks).
TIERS = {
    "builtin": (lambda: sw.CPU(0, dtype=F32).new_like(VALUES), lambda: sw.FileBacked(dtype=F32), ROUNDS),
    "python": (lambda: sw.Generic(VALUES, dtype=F32), lambda: sw.Generic([], dtype=F32), ROUNDS // 3),
}


def tiled(tiers):
    primary, secondary, _ = TIERS[tiers]
    return TiledEvictable(primary(), secondary(), (GRID,), (TILE,))


def pinned(action, k):
    return (f"cannot {action} tiles of a TiledEvictable: tile ({k},) is pinned by a pending residency "
            "request or projection")


PENDING_WORK = "a TiledEvictable while a residency request or projection is pending"


def residency_losses(action):
    return {f"cannot {action} tiles of a released TiledEvictable"} | {pinned(action, k) for k in range(GRID)}


def live_and_exact(te):
    """A live TiledEvictable still holds the values, and nothing holds it."""
    assert [te[i] for i in range(N)] == VALUES and te.version == 0
    assert not any(te.tile_state((k,)).pinned for k in range(GRID))
    assert accepts_release(te)


@pytest.mark.parametrize("tiers", TIERS)
def test_residency_racing_moves_of_the_tiled_evictable(tiers):
    for _ in range(TIERS[tiers][2]):
        te = tiled(tiers)
        dests = [sw.CPU(N) for _ in range(HALF)]
        t = flat(te)
        with sw.no_grad():
            outcomes = run_together([(lambda: te.evict(EVERY)), (lambda: te.promote(EVERY))] * (HALF // 2)
                                    + [(lambda d=d: sw.move(t, d)) for d in dests], grad=False)
        requests, moves = outcomes[:HALF], outcomes[HALF:]
        assert messages(requests) <= residency_losses("evict") | residency_losses("promote")
        # A move meets a pending request (at prepare, at submit, or at its commit's release of
        # the source), another move's claim, or the source released by the move that won
        # (before its claims, or while its prepare ran: §5's check after prepare says so).
        assert messages(moves) <= {f"cannot move {PENDING_WORK}", f"cannot release {PENDING_WORK}",
                                   "cannot move TiledEvictable carrier: it participates in a pending move",
                                   "cannot move TiledEvictable carrier: it is being released",
                                   "the source TiledEvictable carrier is released",
                                   "transfer route 'tiled.to_cpu' for (TiledEvictable, CPU): prepare changed "
                                   "a carrier's version, size or release state"}
        moved = ok(moves)
        assert len(moved) <= 1
        for result in moved:
            assert result.tolist() == VALUES
        if moved:
            assert te.is_released()
        else:
            live_and_exact(te)
        for d in dests:
            assert accepts_release(d)


@pytest.mark.parametrize("tiers", TIERS)
def test_residency_racing_release(tiers):
    for _ in range(TIERS[tiers][2]):
        te = tiled(tiers)
        outcomes = run_together([(lambda: te.evict(EVERY)), (lambda: te.promote(EVERY))] * (HALF // 2)
                                + [te.release] * HALF)
        requests, releases = outcomes[:HALF], outcomes[HALF:]
        assert messages(requests) <= residency_losses("evict") | residency_losses("promote")
        assert messages(releases) <= {f"cannot release {PENDING_WORK}",
                                      "cannot release TiledEvictable carrier: it is being released"}
        if f"cannot release {PENDING_WORK}" in messages(releases):
            assert ok(requests)  # a release met a pending request, which then completed
        if te.is_released():
            assert te.size() == 0 and te.primary.is_released() and te.secondary.is_released()
        else:
            live_and_exact(te)


def test_projection_into_a_callers_destination_racing_its_move_and_release():
    selection = TileSelection([[2, 0]])
    projected = VALUES[2 * TILE:3 * TILE] + VALUES[:TILE]
    zeros = [0.0] * len(projected)
    for _ in range(ROUNDS):
        te = tiled("builtin")
        dest = sw.CPU(len(projected))
        movers = [sw.CPU(len(projected)) for _ in range(2)]
        whole, on_dest = flat(te), flat(dest, len(projected))

        def project():
            return te.project(whole, selection, dest).wait()
        with sw.no_grad():
            outcomes = run_together([project] * HALF + [(lambda m=m: sw.move(on_dest, m))
                                                        for m in movers] + [dest.release] * 2, grad=False)
        projections, moves, releases = outcomes[:HALF], outcomes[HALF:HALF + 2], outcomes[HALF + 2:]
        projection_losses = {"cannot project into CPU carrier: it participates in a pending move",
                             "cannot project into CPU carrier: it is being released",
                             "cannot project into a released CPU carrier",
                             "the projection destination is released"}
        assert messages(projections) <= projection_losses, sorted(messages(projections))
        for result in ok(projections):
            assert result.carrier is dest and result.shape == (len(projected),)
        moved = ok(moves)
        assert len(moved) <= 1
        assert messages(moves) <= {"cannot move CPU carrier: it participates in a pending move",
                                   "cannot move CPU carrier: it is being released",
                                   "the source CPU carrier is released"}
        assert messages(releases) <= {"cannot release CPU carrier: it participates in a pending move",
                                      "cannot release CPU carrier: it is being released"}
        if moved:
            # The move took the destination as some projection left it, never halfway.
            assert moved[0].tolist() == (projected if ok(projections) else zeros)
        if not dest.is_released():
            assert [dest[i] for i in range(len(projected))] == (projected if ok(projections) else zeros)
        assert accepts_release(dest)
        for m in movers:
            assert accepts_release(m)
        live_and_exact(te)


# ----- issue 22 item 2 ---------------------------------------------------------------------------

def test_projection_racing_promote_and_evict_reads_the_values():
    """A projection started while a residency request moves its tiles reads them in place
    ("old tiles stay readable until commit"): the commit does not release a tile a
    projection still reads, so no projection fails (it once raised OSError "file ends before
    byte N" while a promote released the file tile under it)."""
    selection = TileSelection([[3, 1, 0]])
    projected = VALUES[3 * TILE:4 * TILE] + VALUES[TILE:2 * TILE] + VALUES[:TILE]
    for _ in range(ROUNDS):
        te = tiled("builtin")
        te.evict(EVERY)
        whole = flat(te)

        def project():
            return te.project(whole, selection).wait().tolist()
        with sw.no_grad():
            outcomes = run_together([(lambda: te.promote(EVERY)), (lambda: te.evict(EVERY))]
                                    + [project] * (THREADS - 2), grad=False)
        requests, projections = outcomes[:2], outcomes[2:]
        assert not raised(projections), raised(projections)
        assert all(result == projected for result in ok(projections))
        assert messages(requests) <= residency_losses("evict") | residency_losses("promote")
        live_and_exact(te)


@pytest.mark.parametrize("tiers", TIERS)
def test_writes_racing_move_and_release_raise_released(tiers):
    """A write racing the TiledEvictable's move or release either lands before it, or raises
    RuntimeError saying the carrier is released or taken by the move (it once raised
    IndexError "outside [0, 0)" while the release ran)."""
    write_losses = {"TiledEvictable carrier is released",
                    "cannot write to TiledEvictable carrier: it participates in a pending move",
                    "cannot write to TiledEvictable carrier: it is being released"}
    for _ in range(TIERS[tiers][2]):
        te = tiled(tiers)
        dest = sw.CPU(N)
        t = flat(te)

        def write(k):
            for i in range(k, N, THREADS):
                te[i] = float(i)
        with sw.no_grad():
            outcomes = run_together([(lambda: sw.move(t, dest)), te.release]
                                    + [(lambda k=k: write(k)) for k in range(THREADS - 2)], grad=False)
        writes = outcomes[2:]
        assert messages(writes) <= write_losses, sorted(messages(writes))
        assert te.is_released()
        assert accepts_release(dest)


# ----- issue 24: asynchronous residency against every other transition ---------------------------

@pytest.mark.parametrize("tiers", TIERS)
def test_async_residency_racing_moves_releases_writes_and_projections(tiers):
    """promote_async/evict_async return at once; racing a move and a release of the
    TiledEvictable, writes and projections, each started request either completes (its handle
    succeeds) or is refused with RuntimeError before any work; a write to a pinned or released
    tile raises RuntimeError; the values are exact and nothing stays pinned or claimed."""
    selection = TileSelection([[1, 3]])
    projected = VALUES[TILE:2 * TILE] + VALUES[3 * TILE:4 * TILE]
    for _ in range(TIERS[tiers][2]):
        te = tiled(tiers)
        te.evict(TileSet([(0,), (2,)]))
        dest = sw.CPU(N)
        whole = flat(te)

        def write(k):
            te[k * TILE] = VALUES[k * TILE]  # the same value: only the version changes

        def project():
            return te.project(whole, selection).wait().tolist()
        with sw.no_grad():
            outcomes = run_together([(lambda: te.evict_async(EVERY)), (lambda: te.promote_async(EVERY)),
                                     (lambda: write(1)), (lambda: write(2)), project, project,
                                     (lambda: sw.move(whole, dest)), te.release], grad=False)
        requests, writes, projections, (move,), (release,) = (outcomes[:2], outcomes[2:4], outcomes[4:6],
                                                              outcomes[6:7], outcomes[7:])
        assert messages(requests) <= residency_losses("evict") | residency_losses("promote")
        for handle in ok(requests):
            assert handle.wait() is None  # a request that started completes: nothing cancels it
        assert messages(writes) <= {"TiledEvictable carrier is released",
                                    "cannot write to TiledEvictable carrier: it participates in a pending move",
                                    "cannot write to TiledEvictable carrier: it is being released"} | {
            f"cannot write to tile ({k},) of a TiledEvictable: it is pinned by a pending residency "
            "request or projection" for k in range(GRID)}, sorted(messages(writes))
        assert messages(projections) <= {"cannot project a released TiledEvictable"}, sorted(messages(projections))
        assert all(result == projected for result in ok(projections))
        if move[0] == "ok":
            assert move[1].tolist() == VALUES and te.is_released()
        else:
            assert isinstance(move[1], RuntimeError), move
        if release[0] == "raised":
            assert isinstance(release[1], RuntimeError), release
        if te.is_released():
            assert te.size() == 0
        else:
            assert [te[i] for i in range(N)] == VALUES
            assert not any(te.tile_state((k,)).pinned for k in range(GRID))
            assert accepts_release(te)
        assert accepts_release(dest)


@pytest.mark.parametrize("tiers", TIERS)
def test_retain_clean_evict_racing_writes_keeps_every_write(tiers):
    """With retain_clean, an evict reuses the clean copy of an unwritten tile: a write that
    lands before the evict pins its tile makes the tile dirty (so it is copied), one after
    the commit writes the now-current secondary tile, one in between is refused. Every write
    that returned is in the values afterwards."""
    for _ in range(TIERS[tiers][2]):
        primary, secondary, _ = TIERS[tiers]
        te = TiledEvictable(primary(), secondary(), (GRID,), (TILE,), retain_clean=True)
        te.evict(EVERY)
        te.promote(EVERY)
        assert all(te.tile_state((k,)).clean for k in range(GRID))

        def write(k):
            te[k * TILE + 1] = -1.0 - k
        outcomes = run_together([(lambda: te.evict(EVERY)), (lambda: te.promote(EVERY))]
                                + [(lambda k=k: write(k)) for k in range(GRID)] * 1
                                + [(lambda: te.evict(EVERY))] * (THREADS - 2 - GRID))
        requests, writes = outcomes[:2] + outcomes[2 + GRID:], outcomes[2:2 + GRID]
        assert messages(requests) <= residency_losses("evict") | residency_losses("promote")
        assert messages(writes) <= {f"cannot write to tile ({k},) of a TiledEvictable: it is pinned by a "
                                    "pending residency request or projection" for k in range(GRID)}
        expected = list(VALUES)
        for k, outcome in enumerate(writes):
            if outcome[0] == "ok":
                expected[k * TILE + 1] = -1.0 - k
        te.evict(EVERY)
        assert [te[i] for i in range(N)] == expected
        te.promote(EVERY)
        assert [te[i] for i in range(N)] == expected
        assert accepts_release(te)


# ----- element reads (outside the book's lock) against residency changes and the release ---------

@pytest.mark.parametrize("tiers", ["builtin", "noted"])
def test_reads_racing_residency_and_release_read_exact_values_and_leave_no_tile_live(tiers):
    """A read runs a tile's code outside the book's lock, as a reader of the tile: racing
    evictions, promotions and the release, it returns the exact value or raises RuntimeError
    saying the carrier is released; the tiles a commit or the release replaced under a read are
    released when that read ends, so none stays live (seen through the noted tier classes'
    factories, which make every tile of that variant)."""
    from tiled_data import NotedCPU, NotedFileBacked, NotesFactories, live_made
    rounds = ROUNDS if tiers == "builtin" else ROUNDS // 3
    read_passes = 8
    read_losses = {"TiledEvictable carrier is released", "cannot read a released TiledEvictable"}
    for _ in range(rounds):
        NotesFactories.made.clear()
        if tiers == "builtin":
            te = tiled("builtin")
        else:
            te = TiledEvictable(NotedCPU(0, dtype=F32).new_like(VALUES), NotedFileBacked(dtype=F32), (GRID,), (TILE,))

        def read(k):
            for _ in range(read_passes):  # long enough to overlap the commits and the release
                for i in range(k, N, HALF):
                    assert te[i] == VALUES[i]
        moves = [lambda: te.evict(EVERY), lambda: te.promote(EVERY), lambda: te.evict(TileSet([(1,), (2,)]))]
        outcomes = run_together([(lambda k=k: read(k)) for k in range(HALF)] + moves + [te.release])
        reads, residency, release = outcomes[:HALF], outcomes[HALF:-1], outcomes[-1:]
        assert messages(reads) <= read_losses, sorted(messages(reads))
        assert messages(residency) <= residency_losses("evict") | residency_losses("promote"), \
            sorted(messages(residency))
        assert messages(release) <= {f"cannot release {PENDING_WORK}"}, sorted(messages(release))
        if not te.is_released():  # the release met a pending request: it is refused, nothing lost
            live_and_exact(te)
        assert te.is_released() and te.primary.is_released() and te.secondary.is_released()
        assert live_made() == [], "a tile replaced or released under a read stayed live"
