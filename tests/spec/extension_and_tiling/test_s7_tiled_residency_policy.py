"""extension-and-tiling.md §7, "Residency policy" (issue 24): `ResidencyPolicy(budget)` and
`TiledEvictable(..., residency_policy=)` keep at most `budget` bytes of tiles on the primary
tier, making room for a promote by evicting unpinned tiles outside the request, clean ones
first, least recently used first; `ResidencyPlan` (`residency_plan(steps)`) yields each step
resident while it prefetches the next. With races of policy promotes against writes, moves
and releases."""
import random
import threading

import pytest

import strideweave as sw
from racing import THREADS, accepts_release, messages, run_together
from strideweave import ResidencyPlan, ResidencyPolicy, TileSelection, TileSet
from strideweave.carriers import tiled_evictable as te_module

F32 = sw.DType.Float32
TILE_BYTES = 4 * 4  # tiles of 2x2 Float32


def tiled(budget_tiles, grid=(4, 4), retain_clean=False):
    """A 2x2-tiled Float32 carrier seeded from its secondary tier with 0..n-1."""
    n = grid[0] * grid[1] * 4
    secondary = sw.CPU(n, dtype=F32)
    for i in range(n):
        secondary[i] = float(i)
    return sw.TiledEvictable(sw.CPU(0, dtype=F32), secondary, grid, (2, 2), retain_clean=retain_clean,
                             residency_policy=ResidencyPolicy(budget_tiles * TILE_BYTES))


def resident_bytes(c):
    return len(c.primary_tiles.coordinates) * TILE_BYTES


def test_names_import_from_the_package_and_the_tiled_module():
    for name in ("ResidencyPolicy", "ResidencyPlan"):
        assert getattr(sw, name) is getattr(te_module, name) and name in te_module.__all__
    assert ResidencyPolicy(64) == ResidencyPolicy(64) and hash(ResidencyPolicy(64)) == hash(64)
    assert repr(ResidencyPolicy(64)) == "ResidencyPolicy(budget=64)"
    with pytest.raises(AttributeError):
        ResidencyPolicy(64).budget = 1  # type: ignore[misc]


@pytest.mark.parametrize(("budget", "exc"), [(0, ValueError), (-5, ValueError), (True, TypeError),
                                             (1.5, TypeError), ("64", TypeError), (None, TypeError)])
def test_a_bad_budget_is_refused(budget, exc):
    with pytest.raises(exc, match="ResidencyPolicy budget"):
        ResidencyPolicy(budget)


def test_bad_policies_at_construction_change_nothing():
    primary, secondary = sw.CPU(0, dtype=F32), sw.CPU(16, dtype=F32)
    with pytest.raises(TypeError, match="residency_policy must be a ResidencyPolicy"):
        sw.TiledEvictable(primary, secondary, (2, 2), (2, 2), residency_policy=64)
    with pytest.raises(ValueError, match="below one tile's 16 bytes"):
        sw.TiledEvictable(primary, secondary, (2, 2), (2, 2), residency_policy=ResidencyPolicy(15))
    full = sw.CPU(16, dtype=F32)
    with pytest.raises(ValueError, match="seed from the secondary tier"):
        sw.TiledEvictable(full, sw.CPU(0, dtype=F32), (2, 2), (2, 2), residency_policy=ResidencyPolicy(32))
    for carrier in (primary, secondary, full):  # nothing adopted them: they release
        assert not carrier.is_owned()
        carrier.release()


def test_the_budget_is_never_exceeded_and_values_stay_exact():
    c = tiled(budget_tiles=3)
    rng = random.Random(7)
    coords = [(i, j) for j in range(4) for i in range(4)]
    for _ in range(60):
        picked = rng.sample(coords, rng.randint(1, 3))
        c.promote(TileSet(picked))
        assert resident_bytes(c) <= 3 * TILE_BYTES
        assert set(picked) <= set(c.primary_tiles.coordinates)
        slot = rng.randrange(64)
        assert c[slot] == float(slot)
    assert c.residency_policy == ResidencyPolicy(3 * TILE_BYTES)


def test_room_is_made_least_recently_used_first():
    c = tiled(budget_tiles=2)
    c.promote(TileSet([(0, 0)]))
    c.promote(TileSet([(1, 0)]))
    assert c[0] == 0.0  # tile (0, 0) is used again: (1, 0) is now the least recently used
    c.promote(TileSet([(0, 1)]))
    assert c.primary_tiles.coordinates == ((0, 0), (0, 1))
    assert c.tile_state((1, 0)).location == "secondary"


def test_room_is_made_from_clean_tiles_first():
    c = tiled(budget_tiles=2, retain_clean=True)
    c.promote(TileSet([(0, 0)]))
    c.promote(TileSet([(1, 0)]))
    c[0] = 100.0  # (0, 0) dirty
    assert c[2] == 2.0  # (1, 0) clean and the most recently used
    c.promote(TileSet([(0, 1)]))
    # The clean tile leaves (no write), though the dirty one was used less recently.
    assert c.primary_tiles.coordinates == ((0, 0), (0, 1))
    assert c[0] == 100.0 and c[2] == 2.0


def test_a_request_over_the_budget_is_refused_before_any_effect():
    c = tiled(budget_tiles=2)
    c.promote(TileSet([(0, 0)]))
    before = (c.primary_tiles.coordinates, c.version)
    with pytest.raises(ValueError, match="over its residency_policy budget of 32"):
        c.promote(TileSet([(1, 0), (2, 0), (3, 0)]))
    assert (c.primary_tiles.coordinates, c.version) == before


def test_a_plan_yields_each_step_resident_and_prefetches_the_next():
    c = tiled(budget_tiles=2)
    steps = [TileSet([(k, 0)]) for k in range(4)] + [TileSelection([[0], [1]])]
    plan = c.residency_plan(steps)
    assert isinstance(plan, ResidencyPlan) and len(plan) == 5
    seen = []
    for step in plan:
        assert set(step.coordinates) <= set(c.primary_tiles.coordinates)
        assert resident_bytes(c) <= 2 * TILE_BYTES
        seen.append(step.coordinates)
        x, y = step.coordinates[0]
        assert c[(2 * y) * 8 + 2 * x] == float((2 * y) * 8 + 2 * x)  # read the step's tile
    assert seen == [((0, 0),), ((1, 0),), ((2, 0),), ((3, 0),), ((0, 1),)]


def test_a_plan_prefetches_the_next_step_while_the_caller_holds_this_one():
    c = tiled(budget_tiles=2)
    plan = iter(c.residency_plan([TileSet([(0, 0)]), TileSet([(1, 0)])]))
    first = next(plan)
    assert first.coordinates == ((0, 0),)
    # The prefetch of (1, 0) is pending or done: its tile is pinned or already on primary.
    state = c.tile_state((1, 0))
    assert state.pinned or state.location == "primary"
    assert next(plan).coordinates == ((1, 0),)
    assert list(plan) == []


def test_steps_that_do_not_fit_together_are_promoted_one_after_the_other():
    c = tiled(budget_tiles=2)
    steps = [TileSet([(0, 0), (1, 0)]), TileSet([(2, 0), (3, 0)])]
    for step in c.residency_plan(steps):
        assert set(c.primary_tiles.coordinates) == set(step.coordinates)


@pytest.mark.parametrize(("steps", "exc", "match"), [
    (5, TypeError, "steps must be iterable"),
    ([TileSet([(0, 0)]), (0, 0)], TypeError, "step 1 must be a TileSet"),
    ([TileSet([(9, 0)])], ValueError, "outside the grid"),
])
def test_bad_plans_are_refused_before_anything_moves(steps, exc, match):
    c = tiled(budget_tiles=2)
    with pytest.raises(exc, match=match):
        c.residency_plan(steps)
    assert c.primary_tiles.coordinates == ()


def test_a_step_over_the_budget_raises_when_reached():
    c = tiled(budget_tiles=1)
    plan = iter(c.residency_plan([TileSet([(0, 0)]), TileSet([(1, 0), (2, 0)])]))
    next(plan)
    with pytest.raises(ValueError, match="residency_policy budget"):
        next(plan)


ROUNDS = 300


def test_policy_promotes_racing_writes_moves_and_releases():
    """8 threads, 300 operations each (10 carriers × 30): policy promotes of random tiles race
    one another, a writer, and a move of the whole carrier or its release. The losers raise RuntimeError (pinned,
    released, claimed), the budget holds after every round, the values are exact, and
    nothing stays pinned or claimed."""
    rng = random.Random(11)
    coords = [(i, j) for j in range(4) for i in range(4)]
    for rnd in range(ROUNDS // 30):
        c = tiled(budget_tiles=3)
        full = sw.Tensor(c, 0, sw.Layout(sw.Shape(8, 8), sw.Stride(1, 8)))
        destination = sw.CPU(64, dtype=F32, empty=True)

        def promote_some(seed):
            local = random.Random(seed)
            for _ in range(30):
                try:
                    c.promote(TileSet(local.sample(coords, local.randint(1, 2))))
                except RuntimeError:
                    pass  # pinned by another request, or the carrier moved or released
                else:
                    assert resident_bytes(c) <= 3 * TILE_BYTES
            return True

        def write_some():
            for k in range(30):
                try:
                    c[k] = float(k)  # the value it already holds
                except RuntimeError:
                    pass
            return True

        actions = [lambda s=rng.random(): promote_some(s) for _ in range(THREADS - 2)]
        actions.append(write_some)
        actions.append(lambda: sw.move(full, destination) if rnd % 2 else c.release())
        outcomes = run_together(actions, grad=False)
        messages(outcomes)
        if not c.is_released():
            assert resident_bytes(c) <= 3 * TILE_BYTES
            assert [c[i] for i in range(64)] == [float(i) for i in range(64)]
            assert accepts_release(c)
        elif rnd % 2:
            got = [destination[i] for i in range(64)]
            assert got == [float(i) for i in range(64)] or destination.size() in (0, 64)


def test_layers_stream_through_a_plan_within_the_budget_and_read_exact():
    """The streaming use (issue 24): each layer one tile of a file-seeded TiledEvictable with
    retain_clean under a budget of two layers, a plan of one step per layer, twice over. While
    a thread watches the resident bytes the whole time, every step is resident and clean when
    yielded, its projection reads exactly the layer's values, and the tiles on primary never
    pass the budget (the second pass starts with the first pass's last layers resident, so
    its prefetches must make room)."""
    layers, slots = 6, 1024
    seed = sw.CPU(layers * slots, dtype=F32)
    for i in range(layers * slots):
        seed[i] = float(i)
    secondary = sw.FileBacked(dtype=F32)
    sw.move(sw.Tensor(seed, 0, sw.Layout.canonical(sw.Shape(layers * slots))), secondary)
    tile_bytes = slots * 4
    budget = 2 * tile_bytes
    c = sw.TiledEvictable(sw.CPU(0, dtype=F32), secondary, (layers,), (slots,), retain_clean=True,
                          residency_policy=ResidencyPolicy(budget))
    full = sw.Tensor(c, 0, sw.Layout.canonical(sw.Shape(layers * slots)))
    destination = sw.CPU(slots, dtype=F32)
    seen_resident: list[int] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen_resident.append(len(c.primary_tiles.coordinates) * tile_bytes)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        plan = c.residency_plan([TileSet([(k,)]) for k in range(layers)])
        for _ in range(2):
            yielded = []
            for step in plan:
                (k,), = step.coordinates
                yielded.append(k)
                state = c.tile_state((k,))
                assert state.location == "primary" and state.clean
                assert len(c.primary_tiles.coordinates) * tile_bytes <= budget
                with sw.no_grad():
                    layer = c.project(full, [[k]], destination).wait()
                assert [layer[i] for i in range(slots)] == [float(k * slots + i) for i in range(slots)]
            assert yielded == list(range(layers))
    finally:
        stop.set()
        watcher.join()
    assert seen_resident and max(seen_resident) <= budget
    assert c.version == 0 and [c[k * slots + 7] for k in range(layers)] == [float(k * slots + 7) for k in range(layers)]
    c.release()
    destination.release()
