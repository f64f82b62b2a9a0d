"""TiledEvictable (extension-and-tiling.md §7): TileSet and TileSelection, construction checks
in order, geometry, in-place reads and pinned writes, asynchronous residency requests with
atomic commit (held open with a gated move to observe the pending state, and failed with an
injected one), projections and the handles (the route, factories and release are in
test_s7_tiled_evictable_route_and_release.py).
"""
import threading

import pytest

import strideweave as sw
from strideweave.carriers import tiled_evictable as te_module
from strideweave.carriers.extension import (CarrierDefinition, StorageProvider,
                                            register_carrier_definition)
from strideweave.carriers.move import AwaitResult, MoveOperation, registered_move_operation
from strideweave.carriers.tiled_evictable import (AwaitProjection, AwaitResidency, TiledEvictable,
                                                  TiledResidencyFacet, TileSelection, TileSet)
from tiled_data import cpu, full, snapshot, tiled, values

F32, I32 = sw.DType.Float32, sw.DType.Int32
TIMEOUT = 20


# ----- imports and value types -------------------------------------------------------------------

def test_names_import_from_module_and_package_as_the_same_objects():
    for name in ("TiledEvictable", "TileSet", "TileSelection", "AwaitProjection", "AwaitResidency",
                 "TiledResidencyFacet"):
        assert getattr(sw, name) is getattr(te_module, name)
        assert name in te_module.__all__


def test_tileset_sorts_first_axis_fastest_and_is_immutable():
    ts = TileSet([(1, 0), (0, 1), (0, 0)])
    assert ts.coordinates == ((0, 0), (1, 0), (0, 1))
    assert TileSet().coordinates == () and len(TileSet()) == 0
    assert TileSet(c for c in [[2], [0]]).coordinates == ((0,), (2,))  # consumed once, tuples
    with pytest.raises(AttributeError):
        ts.coordinates = ()
    with pytest.raises(AttributeError):
        ts.other = 1


@pytest.mark.parametrize("bad,exc", [
    ([(0, True)], TypeError), ([(0, 1.0)], TypeError), ([5], TypeError), (7, TypeError),
    ([(0, 0), (1,)], ValueError), ([(0, -1)], ValueError), ([(1, 0), (1, 0)], ValueError),
])
def test_tileset_rejects(bad, exc):
    with pytest.raises(exc):
        TileSet(bad)


def test_tileselection_products_first_mode_fastest_in_caller_order():
    sel = TileSelection(((7, 2), (4, 9)))
    assert sel.coordinates == ((7, 4), (2, 4), (7, 9), (2, 9))
    assert sel.per_axis == ((7, 2), (4, 9)) and sel.rank == 2
    assert sel.compact_grid_shape == (2, 2)
    assert sel.tile_set == TileSet(sel.coordinates)
    assert sel.tile_set.coordinates == ((2, 4), (7, 4), (2, 9), (7, 9))
    with pytest.raises(AttributeError):
        sel.per_axis = ()


@pytest.mark.parametrize("bad,exc", [
    ([], ValueError), ([[]], ValueError), ([[1, 1]], ValueError), ([[0, -2]], ValueError),
    ([[0, False]], TypeError), ([[0.0]], TypeError), ([3], TypeError), (None, TypeError),
])
def test_tileselection_rejects(bad, exc):
    with pytest.raises(exc):
        TileSelection(bad)


# ----- construction --------------------------------------------------------------------------------

def test_construction_owns_tiers_and_seeds_every_tile_from_one_tier():
    p, s = cpu([float(i) for i in range(16)]), sw.FileBacked(dtype=F32)
    te = TiledEvictable(p, s, (2, 2), (2, 2))
    assert te.primary is p and te.secondary is s and p.is_owned() and s.is_owned()
    assert te.size() == 16 and te.logical_shape == (4, 4) and te.dtype() is F32
    assert te.version == 0 and te.is_mutable()
    assert values(te) == [float(i) for i in range(16)]
    assert te.primary_tiles == TileSet([(0, 0), (1, 0), (0, 1), (1, 1)])
    assert te.secondary_tiles == TileSet()
    assert te.tile_state((1, 0)).location == "primary"


def test_a_full_secondary_seeds_every_tile_on_secondary_and_reads_in_place():
    s = sw.FileBacked(dtype=F32)
    s._allocate(6)
    for i in range(6):
        s[i] = i * 10.0
    te = TiledEvictable(sw.CPU(0), s, (3,), (2,))
    assert te.secondary_tiles == TileSet([(0,), (1,), (2,)]) and te.primary_tiles == TileSet()
    assert values(te) == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    assert te.secondary_tiles == TileSet([(0,), (1,), (2,)])  # reading promoted nothing


def test_geometry_puts_slots_2_3_6_7_in_tile_1_0():
    te = tiled()
    with sw.no_grad():
        out = te.project(full(te), [[1], [0]]).wait()
    assert out.tolist() == [2.0, 3.0, 6.0, 7.0]
    te.evict(TileSet([(1, 0)]))
    assert te.secondary_tiles == TileSet([(1, 0)])
    assert values(te) == [float(i) for i in range(16)]


def test_mutable_only_if_the_primary_is():
    te = tiled(mutable=False)
    assert not te.is_mutable()
    with pytest.raises(RuntimeError):
        te[0] = 1.0
    assert te.version == 0 and te[0] == 0.0


def test_subclassing_is_refused():
    with pytest.raises(TypeError):
        class Sub(TiledEvictable):  # noqa: F841
            pass


_KEEP = []


def _cases():
    def ev_tier():
        return sw.Evictable(cpu([1.0]), sw.FileBacked(dtype=F32))

    def released(c):
        c.release()
        return c

    def owned():
        inner = cpu([1.0])
        _KEEP.append(sw.Evictable(cpu([2.0]), inner))
        return inner

    def no_route_slab():
        cls = type("NoRouteSlab", (sw.Carrier,), {})

        def allocate(c, n):
            c.cells = [0.0] * n

        register_carrier_definition(cls, CarrierDefinition(StorageProvider(
            lambda c, d: d is F32, lambda c: len(c.cells), allocate, lambda c: None,
            lambda c, i: c.cells[i], lambda c, i, v: None)))
        return cls(0, dtype=F32)

    fb = lambda dtype=F32: sw.FileBacked(dtype=dtype)  # noqa: E731
    four = lambda: cpu([1.0, 2.0, 3.0, 4.0])  # noqa: E731
    return [
        # (label, primary, secondary, grid, tile, exception, word)
        ("1 not a carrier", lambda: ([1.0], fb(), (2,), (2,)), TypeError, None),
        ("1 evictable tier", lambda: (ev_tier(), fb(), (1,), (1,)), TypeError, None),
        ("1 tiled tier", lambda: (four(), tiled(4, (2,), (2,)), (2,), (2,)), TypeError, None),
        ("2 same object", lambda: (lambda c: (c, c, "x", "y"))(released(four())), ValueError, None),
        ("3 released", lambda: (released(four()), fb(I32), "x", "y"), RuntimeError, "released"),
        ("3 owned", lambda: (four(), owned(), "x", "y"), RuntimeError, "owned"),
        ("4 dtypes", lambda: (four(), fb(I32), "x", "y"), TypeError, "dtype"),
        ("5 not iterable", lambda: (four(), fb(), 4, (0,)), TypeError, "grid_shape"),
        ("5 bool extent", lambda: (four(), fb(), (2,), (True,)), TypeError, "tile_shape"),
        ("5 float extent", lambda: (four(), fb(), (2.0,), (-1,)), TypeError, "grid_shape"),
        ("6 empty shape", lambda: (four(), fb(), (), (2,)), ValueError, None),
        ("6 non-positive", lambda: (four(), fb(), (2,), (0,)), ValueError, None),
        ("6 ranks", lambda: (four(), cpu([1.0]), (2, 1), (2,)), ValueError, "rank"),
        ("7 partial", lambda: (cpu([1.0, 2.0, 3.0]), fb(), (2,), (2,)), ValueError, None),
        ("7 both full", lambda: (four(), cpu([1.0] * 4), (2,), (2,)), ValueError, "both"),
        ("7 both empty", lambda: (sw.CPU(0), fb(), (2,), (2,)), ValueError, "both"),
        ("9 no route", lambda: (four(), no_route_slab(), (2,), (2,)), NotImplementedError, None),
    ]


@pytest.mark.parametrize("label,build,exc,word", _cases(), ids=[c[0] for c in _cases()])
def test_construction_errors_in_order_change_nothing(label, build, exc, word):
    p, s, grid, tile = build()
    tiers = [t for t in (p, s) if isinstance(t, sw.Carrier)]
    before = [(t.is_owned(), t.is_released(), t.version, t.size()) for t in tiers]
    with pytest.raises(exc, match=word):
        TiledEvictable(p, s, grid, tile)
    assert [(t.is_owned(), t.is_released(), t.version, t.size()) for t in tiers] == before


def test_tier_that_cannot_store_the_dtype_is_a_type_error():
    class NoF32(sw.CPU):
        def _supports_storage_dtype(self, d):
            return False

    p = cpu([1.0, 2.0], cls=NoF32)
    with pytest.raises(TypeError, match="cannot store"):
        TiledEvictable(p, sw.FileBacked(dtype=F32), (1,), (2,))
    assert not p.is_owned()


# ----- element access --------------------------------------------------------------------------------

def test_writes_go_to_the_tiles_current_tier_and_bump_the_version():
    te = tiled()
    te.evict(TileSet([(1, 1)]))
    te[15] = 99.0          # tile (1, 1), on secondary
    full(te)[0, 0] = -1.0  # tile (0, 0), on primary
    assert te.version == 2 and te[15] == 99.0 and te[0] == -1.0
    te.promote(TileSet([(1, 1)]))
    assert te[15] == 99.0 and te.version == 2


def test_index_errors():
    te = tiled()
    with pytest.raises(IndexError):
        te[16]
    with pytest.raises(TypeError):
        te["1"]


# ----- residency -------------------------------------------------------------------------------------

def test_evict_and_promote_change_residency_only():
    te = tiled()
    t = full(te)
    layout = t.layout
    h = te.evict_async(TileSelection([[0, 1], [1]]))
    assert isinstance(h, AwaitResidency) and isinstance(h, AwaitResult)
    assert h.wait() is None and h.done
    assert te.secondary_tiles == TileSet([(0, 1), (1, 1)])
    assert te.tile_state((0, 1)).location == "secondary"
    assert values(te) == [float(i) for i in range(16)] and te.version == 0
    assert t.layout == layout and t.carrier is te
    assert te.promote(TileSet([(1, 1)])) is None
    assert te.primary_tiles == TileSet([(0, 0), (1, 0), (1, 1)])
    assert values(te) == [float(i) for i in range(16)] and te.version == 0


def test_requests_with_nothing_to_move_start_done():
    te = tiled()
    h = te.promote_async(TileSet([(0, 0), (1, 1)]))
    assert h.done and h.wait() is None
    assert te.evict_async(TileSet()).done


def test_residency_argument_checks_in_order():
    te = tiled()
    with pytest.raises(TypeError):
        te.evict([(0, 0)])
    with pytest.raises(ValueError):
        te.evict(TileSet([(0,)]))           # rank
    with pytest.raises(ValueError):
        te.evict(TileSet([(2, 0)]))         # range
    with pytest.raises(ValueError):
        te.evict(TileSelection([[0], [5]]))
    released = tiled()
    released.release()
    with pytest.raises(RuntimeError, match="released"):
        released.evict("not even a tile set")  # released comes first
    assert te.secondary_tiles == TileSet()


def test_residency_adds_no_autograd_node_and_no_profile_event(gated):
    te = tiled()
    assert sw.is_grad_enabled()
    with sw.profile() as prof:
        te.evict(TileSet([(0, 0), (1, 1)]))
        te.promote(TileSet([(0, 0)]))
    assert prof.events() == []
    # Between tier classes whose tile move is ours, the node is observable: each tile move's
    # operation saved no inputs at forward entry and its output got no autograd_ctx.
    GatedMove.gate.set()
    te = gated_tiled()
    with sw.profile() as prof:
        te.evict(TileSet([(0, 0), (1, 1)]))
        te.promote(TileSet([(0, 0)]))
    assert prof.events() == [] and values(te) == [float(i) for i in range(16)]
    assert [(inputs, output.autograd_ctx) for _, inputs, output in GatedMove.seen] == [((), None)] * 3
    # a public move of the same pair is profiled and records its node, so the assertions above bite
    GatedMove.seen = []
    source = sw.Tensor(cpu([1.0, 2.0], cls=GCPU), 0, sw.Layout.canonical(sw.Shape([2])))
    with sw.profile() as prof:
        moved = sw.move(source, GFile(dtype=F32))
    ((node, inputs, output),) = GatedMove.seen
    assert prof.events() and len(inputs) == 1 and inputs[0] is source
    assert output is moved and moved.autograd_ctx is node


def test_facet_methods_take_the_carrier_first():
    te = tiled()
    facet = te.facet(TiledResidencyFacet)
    assert isinstance(facet, TiledResidencyFacet) and te.require_facet(TiledResidencyFacet) is facet
    facet.evict(te, TileSet([(0, 0)]))
    assert facet.tile_state(te, (0, 0)).location == "secondary"
    assert facet.promote_async(te, TileSet([(0, 0)])).wait() is None
    with pytest.raises(TypeError):
        facet.evict(sw.CPU(1), TileSet([(0, 0)]))
    with pytest.raises(AttributeError):
        facet.x = 1
    assert sw.CPU(1).facet(TiledResidencyFacet) is None


def checkpoint(entered, gate, error):
    """Where a test holds or fails a hook: set `entered`, wait at `gate`, raise `error`
    (each only when the test has set it)."""
    if entered is not None:
        entered.set()
    if gate is not None:
        assert gate.wait(TIMEOUT)
    if error is not None:
        raise error


class GCPU(sw.CPU):
    """A primary-tier class whose element reads can be held at a gate or fail (a projection
    gathers by reading each selected tile, where it lives, through them)."""

    read_gate = None
    read_entered = None
    read_error = None
    created = []

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        GCPU.created.append(self)

    def get_value(self, i):
        checkpoint(GCPU.read_entered, GCPU.read_gate, GCPU.read_error)
        return super().get_value(i)

    __getitem__ = get_value


class GFile(sw.FileBacked):
    created = []

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        GFile.created.append(self)


class Injected(OSError):
    pass


class GatedMove(MoveOperation):
    """Tile moves between GCPU and GFile: waits at `gate`, fails when `error` is set, and
    notes what the operation had saved (`inputs()`) and its output Tensor, so a test can see
    whether the move made an autograd node."""

    gate = None
    entered = None
    error = None
    seen = []

    def _copy(self, tensor, destination, output, element_count):
        GatedMove.seen.append((self, self.inputs(), output))
        checkpoint(GatedMove.entered, GatedMove.gate, GatedMove.error)
        for j in range(output.size()):  # logical order, first mode fastest, on both sides
            output[j] = tensor[j]


@pytest.fixture
def gated():
    GatedMove.gate, GatedMove.entered, GatedMove.error = threading.Event(), threading.Event(), None
    GatedMove.seen = []
    GCPU.read_gate = GCPU.read_entered = GCPU.read_error = None
    GCPU.created.clear()
    GFile.created.clear()
    with registered_move_operation(GCPU, GFile, GatedMove), registered_move_operation(GFile, GCPU, GatedMove):
        yield
        GatedMove.gate.set()
        if GCPU.read_gate is not None:
            GCPU.read_gate.set()
    GatedMove.gate = GatedMove.entered = GatedMove.error = None
    GCPU.read_gate = GCPU.read_entered = GCPU.read_error = None


def gated_tiled():
    return tiled(primary_cls=GCPU, secondary_cls=GFile)


def test_a_pending_request_pins_its_tiles_and_commits_atomically(gated):
    te = gated_tiled()
    h = te.evict_async(TileSet([(0, 0), (1, 0)]))
    assert GatedMove.entered.wait(TIMEOUT)
    assert not h.done
    assert te.tile_state((0, 0)).pinned and not te.tile_state((1, 1)).pinned
    # pinned tiles: readable (old tiles stay until commit), not writable, not requestable
    assert [te[i] for i in (0, 1, 2, 3)] == [0.0, 1.0, 2.0, 3.0]
    for slot in (0, 3):
        with pytest.raises(RuntimeError, match="pinned"):
            te[slot] = 5.0
    with pytest.raises(RuntimeError, match="pinned"):
        te.promote(TileSet([(1, 0)]))
    with pytest.raises(RuntimeError, match="pending"):
        te.release()
    assert not te.is_released() and te.primary_tiles == TileSet([(0, 0), (1, 0), (0, 1), (1, 1)])
    te[15] = 7.0  # an unpinned tile is still writable
    assert te.version == 1
    GatedMove.gate.set()
    assert h.wait() is None and h.done
    assert te.secondary_tiles == TileSet([(0, 0), (1, 0)])
    assert not te.tile_state((0, 0)).pinned
    te[0] = 8.0
    assert te[0] == 8.0 and te.version == 2
    assert te.release() is None


def test_a_failed_request_changes_nothing_releases_staged_tiles_and_can_be_retried(gated):
    te = gated_tiled()
    GatedMove.gate.set()
    te.evict(TileSet([(0, 1)]))
    GFile.created.clear()
    GCPU.created.clear()
    before = snapshot(te)
    GatedMove.error = Injected("injected tile move failure")
    h = te.evict_async(TileSet([(0, 0), (1, 0), (1, 1)]))
    with pytest.raises(Injected) as first:
        h.wait()
    with pytest.raises(Injected) as again:
        h.wait()
    assert first.value is again.value
    assert snapshot(te) == before
    (staged,) = GFile.created      # the first tile's fresh secondary tile; the move failed
    (copy,) = GCPU.created         # ... and its private copy of the primary tile
    assert staged.is_released() and copy.is_released() and not staged.is_owned()
    assert not any(te.tile_state(c).pinned for c in [(0, 0), (1, 0), (1, 1)])
    GatedMove.error = None
    te.evict(TileSet([(0, 0), (1, 0), (1, 1)]))
    assert te.primary_tiles == TileSet() and values(te) == [float(i) for i in range(16)]


def test_a_failed_promote_keeps_tiles_on_secondary(gated):
    te = gated_tiled()
    GatedMove.gate.set()
    te.evict(TileSet([(0, 0), (1, 1)]))
    GCPU.created.clear()
    before = snapshot(te)
    GatedMove.error = Injected("injected")
    with pytest.raises(Injected):
        te.promote(TileSet([(0, 0), (1, 1)]))
    assert snapshot(te) == before
    assert GCPU.created and all(c.is_released() for c in GCPU.created)


# ----- projection --------------------------------------------------------------------------------------

def test_projection_example_values_0_to_5():
    te = tiled(6, (3,), (2,))
    with sw.no_grad():
        h = te.project(full(te), [[2, 0]])
        out = h.wait()
    assert isinstance(h, AwaitProjection) and isinstance(h, AwaitResult) and not isinstance(h, sw.Tensor)
    assert out.tolist() == [4.0, 5.0, 0.0, 1.0]
    assert h.wait() is out
    assert out.offset == 0 and out.layout == sw.Layout.canonical(sw.Shape([4]))
    assert type(out.carrier) is sw.CPU and out.carrier is not te.primary


def test_projection_2d_reads_secondary_tiles_in_place_and_keeps_residency():
    te = tiled(24, (2, 3), (2, 2))   # logical (4, 6)
    te.evict(TileSet([(1, 2), (0, 0)]))
    before = snapshot(te)
    with sw.no_grad():
        out = te.project(full(te), TileSelection([[1], [2, 0]])).wait()
    # compact (2, 4): y -> x = (2 + y0, per_axis[1][y1 // 2] * 2 + y1 % 2)
    expected = [float((2 + y0) + 4 * ([2, 0][y1 // 2] * 2 + y1 % 2)) for y1 in range(4) for y0 in range(2)]
    assert out.tolist() == expected
    assert out.layout == sw.Layout.canonical(sw.Shape([2, 4]))
    assert snapshot(te) == before


def test_projection_into_a_callers_destination_and_an_empty_allocatable_one():
    te = tiled(6, (3,), (2,))
    dest = sw.CPU(5)
    with sw.no_grad():
        out = te.project(full(te), [[1]], dest).wait()
    assert out.carrier is dest and out.tolist() == [2.0, 3.0] and dest.version == 0
    fb = TiledEvictable(sw.FileBacked(dtype=F32).new_like([1.0, 2.0, 3.0, 4.0]), sw.CPU(0), (2,), (2,))
    empty = sw.FileBacked(dtype=F32)
    with sw.no_grad():
        out = fb.project(full(fb), [[1, 0]], empty).wait()
    assert out.carrier is empty and empty.size() == 4 and out.tolist() == [3.0, 4.0, 1.0, 2.0]


def test_projection_errors_in_order():
    te = tiled(6, (3,), (2,))
    t = full(te)
    ints = tiled(6, (3,), (2,), dtype=I32)
    with pytest.raises(TypeError):
        te.project(full(ints), [[0]])                     # a tensor on another carrier
    with pytest.raises(TypeError):
        te.project("tensor", [[0]])
    with pytest.raises(ValueError, match="full"):
        te.project(t[1:3], [[0]])                          # a view is not full
    with pytest.raises(ValueError):
        te.project(sw.Tensor(te, 0, sw.Layout.canonical(sw.Shape([2, 3]))), [[0]])
    with pytest.raises(TypeError):
        te.project(t, [[True]])
    with pytest.raises(ValueError):
        te.project(t, [[]])
    with pytest.raises(ValueError):
        te.project(t, [[3]])                                # range
    with pytest.raises(ValueError):
        te.project(t, [[0], [0]])                           # rank
    assert sw.is_grad_enabled()
    with pytest.raises(NotImplementedError, match="grad"):
        te.project(t, [[0]])
    assert ints.project(full(ints), [[0]]).wait().tolist() == [0, 1]  # Int32 needs no grad
    with sw.no_grad():
        with pytest.raises(TypeError):
            te.project(t, [[0]], sw.FileBacked(dtype=F32))        # not the primary's class
        with pytest.raises(TypeError):
            te.project(t, [[0]], cpu([0.0, 0.0], cls=GCPU))       # a subclass is not exact
        rel = sw.CPU(2)
        rel.release()
        with pytest.raises(RuntimeError, match="released"):
            te.project(t, [[0]], rel)
        with pytest.raises(RuntimeError, match="mutable"):
            te.project(t, [[0]], cpu([0.0, 0.0], mutable=False))
        with pytest.raises(TypeError):
            te.project(t, [[0]], sw.CPU(2, dtype=I32))
        with pytest.raises(ValueError, match="small"):
            te.project(t, [[0, 1]], sw.CPU(3))
        assert not any(te.tile_state((i,)).pinned for i in range(3))
    te.release()
    with pytest.raises(RuntimeError, match="released"):
        te.project(t, "bad selection")


def test_projection_pins_its_tiles_until_completion(gated):
    te = gated_tiled()
    GCPU.read_gate, GCPU.read_entered = threading.Event(), threading.Event()
    with sw.no_grad():
        h = te.project(full(te), [[0], [0, 1]])
    assert GCPU.read_entered.wait(TIMEOUT) and not h.done
    assert te.tile_state((0, 1)).pinned and not te.tile_state((1, 0)).pinned
    with pytest.raises(RuntimeError, match="pinned"):
        te[0] = 3.0
    with pytest.raises(RuntimeError, match="pinned"):
        te.evict(TileSet([(0, 0)]))
    with pytest.raises(RuntimeError, match="pending"):
        te.release()
    te[2] = 3.0  # tile (1, 0) is not selected
    GCPU.read_gate.set()
    out = h.wait()
    assert out.tolist() == [0.0, 1.0, 4.0, 5.0, 8.0, 9.0, 12.0, 13.0]
    assert not te.tile_state((0, 1)).pinned
    te[0] = 3.0


def test_a_failed_projection_publishes_nothing(gated):
    te = gated_tiled()
    GCPU.created.clear()
    GCPU.read_error = Injected("injected gather failure")
    with sw.no_grad():
        h = te.project(full(te), [[1], [1]])
    with pytest.raises(Injected):
        h.wait()
    (framework_destination,) = GCPU.created
    assert framework_destination.is_released()
    caller = cpu([7.0] * 4, cls=GCPU)
    with sw.no_grad():
        h = te.project(full(te), [[1], [1]], caller)
    with pytest.raises(Injected):
        h.wait()
    assert not caller.is_released() and caller.is_mutable()
    assert not te.tile_state((1, 1)).pinned and te.release() is None


def test_user_construction_of_handles_is_refused():
    for cls in (AwaitProjection, AwaitResidency):
        assert issubclass(cls, AwaitResult) and not issubclass(cls, sw.Tensor)
        with pytest.raises(TypeError):
            cls()


# ----- dirty tiles (retain_clean) ----------------------------------------------------------------

EVERY_2X2 = [(0, 0), (1, 0), (0, 1), (1, 1)]


def retaining_tiled(retain_clean=True):
    return TiledEvictable(cpu([float(i) for i in range(16)], cls=GCPU), GFile(dtype=F32), (2, 2), (2, 2),
                          retain_clean=retain_clean)


def test_retain_clean_evicts_a_tile_unchanged_since_its_promote_without_copying(gated):
    GatedMove.gate.set()
    te = retaining_tiled()
    assert te.retain_clean
    every = TileSet(EVERY_2X2)
    te.evict(every)
    assert not any(te.tile_state(c).clean for c in EVERY_2X2)  # on secondary: nothing retained
    GatedMove.seen.clear()
    te.promote(every)
    assert len(GatedMove.seen) == 4  # promote copies, keeping each secondary tile
    assert all(te.tile_state(c).clean for c in EVERY_2X2)
    te[0] = 100.0  # tile (0, 0) is dirty now
    assert not te.tile_state((0, 0)).clean and te.tile_state((1, 0)).clean
    GatedMove.seen.clear()
    GFile.created.clear()
    te.evict(every)
    assert len(GatedMove.seen) == 1  # only the dirty tile is written
    assert te.secondary_tiles == every and not any(te.tile_state(c).clean for c in EVERY_2X2)
    assert values(te) == [100.0] + [float(i) for i in range(1, 16)] and te.version == 1


def test_retain_clean_copies_are_released_with_the_carrier_and_by_a_write(gated):
    GatedMove.gate.set()
    te = retaining_tiled()
    every = TileSet(EVERY_2X2)
    te.evict(every)
    secondary_tiles = [f for f in GFile.created if f is not te.secondary and not f.is_released()]
    assert len(secondary_tiles) == 4
    te.promote(every)
    assert all(not f.is_released() for f in secondary_tiles)  # retained as clean copies
    te[0] = 1.5
    assert sum(f.is_released() for f in secondary_tiles) == 1  # the dirty tile's copy went
    te.release()
    assert all(f.is_released() for f in secondary_tiles)


def test_a_failed_evict_keeps_clean_copies_and_changes_nothing(gated):
    GatedMove.gate.set()
    te = retaining_tiled()
    every = TileSet(EVERY_2X2)
    te.evict(every)
    te.promote(every)
    te[0] = 100.0
    before = snapshot(te)
    GatedMove.error = Injected("injected")
    with pytest.raises(Injected):
        te.evict(every)
    assert snapshot(te) == before
    assert [te.tile_state(c).clean for c in EVERY_2X2] == [False, True, True, True]
    GatedMove.error = None
    te.evict(every)
    assert values(te)[0] == 100.0 and te.primary_tiles == TileSet()


def test_without_retain_clean_eviction_always_copies(gated):
    GatedMove.gate.set()
    te = retaining_tiled(retain_clean=False)
    assert not te.retain_clean
    every = TileSet(EVERY_2X2)
    te.evict(every)
    te.promote(every)
    assert not any(te.tile_state(c).clean for c in EVERY_2X2)
    GatedMove.seen.clear()
    te.evict(every)
    assert len(GatedMove.seen) == 4


def test_retain_clean_must_be_a_bool():
    with pytest.raises(TypeError, match="retain_clean"):
        TiledEvictable(cpu([0.0] * 4), sw.FileBacked(dtype=F32), (2,), (2,), retain_clean=1)


def test_a_policy_promote_that_finds_only_pinned_tiles_to_evict_is_refused(gated):
    """Residency policy (issue 24): the tiles a pending request pins are never evicted to make
    room; with nothing else to evict a promote raises RuntimeError before any effect."""
    seeded = sw.move(sw.Tensor(cpu([float(i) for i in range(16)]), 0, sw.Layout.canonical(sw.Shape(16))),
                     GFile(dtype=F32)).carrier
    te = TiledEvictable(GCPU(0, dtype=F32), seeded, (2, 2), (2, 2),
                        residency_policy=sw.ResidencyPolicy(2 * 4 * 4))
    GatedMove.gate.set()  # these promotes pass the gate
    te.promote(TileSet([(0, 0), (1, 0)]))
    GatedMove.gate, GatedMove.entered = threading.Event(), threading.Event()
    pending = te.evict_async(TileSet([(0, 0), (1, 0)]))  # held at the gate: both tiles pinned
    assert GatedMove.entered.wait(TIMEOUT)
    before = snapshot(te)
    with pytest.raises(RuntimeError, match="within its residency_policy budget"):
        te.promote(TileSet([(0, 1)]))
    assert snapshot(te) == before and not te.tile_state((0, 1)).pinned
    GatedMove.gate.set()
    assert pending.wait() is None
    te.promote(TileSet([(0, 1)]))  # the evicted tiles left room
    assert te.primary_tiles == TileSet([(0, 1)]) and values(te) == [float(i) for i in range(16)]
