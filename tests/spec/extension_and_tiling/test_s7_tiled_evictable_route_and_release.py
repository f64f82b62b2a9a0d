"""TiledEvictable (extension-and-tiling.md §7), continued: the "tiled.to_cpu" route and the
moves it refuses, factories, release and the tiers' definitions (the value types, construction,
residency and projections are in test_s7_tiled_evictable.py).
"""
import pytest

import strideweave as sw
from strideweave.carriers.extension import (CarrierDefinition, StorageProvider,
                                            register_carrier_definition)
from strideweave.carriers.move import MoveOperation, dispatch_move, register_move_operation
from strideweave.carriers.tiled_evictable import TiledEvictable, TileSet
from tiled_data import NotedCPU, NotedFileBacked, NotesFactories, cpu, full, live_made, tiled, values

F32, I32 = sw.DType.Float32, sw.DType.Int32


class AnyMove(MoveOperation):
    """A move operation the legacy registry is asked to register (and must refuse)."""


# ----- the route and other moves ----------------------------------------------------------------------

def noted_tiled():
    """`tiled()` on tiers whose factories note the carriers they make: its tiles."""
    NotesFactories.made.clear()
    return tiled(primary_cls=NotedCPU, secondary_cls=NotedFileBacked)


def test_move_to_cpu_gathers_every_tile_in_place_and_releases():
    te = noted_tiled()
    te.evict(TileSet([(1, 0), (0, 1)]))
    p, s = te.primary, te.secondary
    secondary_tiles = [c for c in live_made() if type(c) is NotedFileBacked]
    assert len(secondary_tiles) == 2 and all(t.is_owned() for t in secondary_tiles)
    assert sorted(t[k] for t in secondary_tiles for k in range(4)) == [2.0, 3.0, 6.0, 7.0, 8.0, 9.0, 12.0, 13.0]
    with sw.no_grad():
        out = sw.move(full(te), sw.CPU(16))
    assert out.tolist() == [float(i) for i in range(16)]
    assert [out.carrier[i] for i in range(16)] == [float(i) for i in range(16)]
    assert te.is_released() and te.size() == 0
    assert p.is_released() and s.is_released() and all(t.is_released() for t in secondary_tiles)
    assert live_made() == []  # every tile, and every private copy a tile move made
    with pytest.raises(RuntimeError):
        te[0]


def test_route_is_declared_as_tiled_to_cpu():
    # The route a move takes names itself when it declines a request: the one from
    # TiledEvictable to exact CPU is "tiled.to_cpu" (it takes full tensors only).
    te = tiled()
    with sw.no_grad(), pytest.raises(NotImplementedError) as info:
        sw.move(full(te)[1:3, :], sw.CPU(16))
    assert "'tiled.to_cpu' for (TiledEvictable, CPU)" in str(info.value)
    # No route to any other class, not even a subclass of CPU: such a move fails at resolution,
    # before any prepare, so it names no route.
    sub_cpu = type("SubCPU", (sw.CPU,), {})
    for destination in (sub_cpu(16), sw.FileBacked(dtype=F32), sw.Generic([0.0] * 16, dtype=F32)):
        with sw.no_grad(), pytest.raises(NotImplementedError) as info:
            sw.move(full(te), destination)
        assert "no transfer route for (TiledEvictable, " in str(info.value)
        assert "tiled.to_cpu" not in str(info.value)
    assert not te.is_released() and values(te) == [float(i) for i in range(16)]


def test_non_full_and_other_moves_are_refused_before_effects():
    te = tiled()
    t = full(te)
    with sw.no_grad():
        with pytest.raises(NotImplementedError, match="tiled.to_cpu"):
            sw.move(t[1:3, :], sw.CPU(16))
        with pytest.raises(NotImplementedError):
            sw.move(t, sw.FileBacked(dtype=F32))
        with pytest.raises(NotImplementedError):
            sw.move(sw.Tensor(cpu([0.0] * 16), 0, t.layout), tiled())
    # differentiable with graph construction on: no reverse route CPU -> TiledEvictable
    with pytest.raises(NotImplementedError):
        sw.move(t, sw.CPU(16))
    assert not te.is_released() and values(te) == [float(i) for i in range(16)]
    for api in (lambda: dispatch_move(TiledEvictable, sw.CPU),
                lambda: register_move_operation(sw.CPU, TiledEvictable, AnyMove)):
        with pytest.raises(RuntimeError, match="TransferRoute"):
            api()
    ints = tiled(dtype=I32)
    assert sw.move(full(ints), sw.CPU(16, dtype=I32)).tolist() == list(range(16))


def test_dlpack_is_refused_naming_tiled_evictable():
    te = tiled()
    with pytest.raises(BufferError, match="TiledEvictable"):
        full(te).__dlpack__()
    with pytest.raises(BufferError, match="TiledEvictable"):
        te.dlpack_info()


# ----- factories and release ---------------------------------------------------------------------------

def test_factories_need_the_full_size_and_place_every_tile_on_primary():
    te = tiled()
    te.evict(TileSet([(0, 0)]))
    made = te.new_like([float(-i) for i in range(16)])
    assert type(made) is TiledEvictable and made.secondary_tiles == TileSet()
    assert values(made) == [float(-i) for i in range(16)] and made.grid_shape == (2, 2)
    zeros = te.allocate_like(16)
    assert values(zeros) == [0.0] * 16 and zeros.secondary_tiles == TileSet()
    with pytest.raises(ValueError):
        te.new_like([1.0] * 15)
    with pytest.raises(ValueError):
        te.allocate_like(8)
    te.release()
    assert values(te.allocate_like(16)) == [0.0] * 16  # even after release


def test_release_is_idempotent_and_releases_tiles_and_tiers():
    te = noted_tiled()
    te.evict(TileSet([(1, 1)]))
    p, s = te.primary, te.secondary
    # the four tiles: the replaced tile and the private copy the move made are released
    tiles = live_made(but=(p,))
    assert len(tiles) == 4 and all(t.is_owned() for t in tiles)
    assert te.release() is None and te.release() is None
    assert te.size() == 0 and te.is_released()
    assert all(t.is_released() for t in tiles) and p.is_released() and s.is_released()
    for action in (lambda: te[0], lambda: te.__setitem__(0, 1.0), lambda: te.evict(TileSet([(0, 0)])),
                   lambda: te.tile_state((0, 0))):
        with pytest.raises(RuntimeError):
            action()


def test_provider_supports_both_tiers_dtypes():
    # (That its allocate takes only the full size, which no public call can ask otherwise, is in
    # tests/internal/test_tiled_evictable_definition.py.)
    te = tiled()
    assert te.supports_storage_dtype(F32) and te.supports_storage_dtype(I32)
    assert not te.supports_storage_dtype(sw.DType.Bool)      # FileBacked cannot store Bool
    assert not te.supports_storage_dtype(sw.DType.Floating)  # CPU cannot
    te.release()
    assert te.supports_storage_dtype(I32)


def _fallback_slab(name):
    cls = type(name, (sw.Carrier,), {"allocated": []})

    def allocate(c, n):
        cls.allocated.append(c)
        c.cells = [0.0] * n

    def release(c):
        c.cells = []

    def write(c, i, v):
        c.cells[i] = float(v)

    register_carrier_definition(cls, CarrierDefinition(StorageProvider(
        lambda c, d: d is F32, lambda c: len(c.cells), allocate, release,
        lambda c, i: c.cells[i], write, elementwise_fallback=True)))
    return cls


def test_definition_backed_tiers_move_tiles_through_their_section_5_resolution():
    Fast, Slow = _fallback_slab("FastSlab"), _fallback_slab("SlowSlab")
    seed = Fast(4, dtype=F32)
    for i in range(4):
        seed[i] = i + 1.0
    secondary = Slow(0, dtype=F32)
    te = TiledEvictable(seed, secondary, (2,), (2,))
    te.evict(TileSet([(1,)]))
    # the provider filled one Slow carrier since: tile (1,), owned, holding its values
    (tile,) = [c for c in Slow.allocated if c is not secondary and not c.is_released()]
    assert type(tile) is Slow and tile.cells == [3.0, 4.0] and tile.is_owned()
    Fast.allocated.clear()
    te.promote(TileSet([(1,)]))
    (back,) = [c for c in Fast.allocated if not c.is_released()]
    assert type(back) is Fast and back.cells == [3.0, 4.0] and back.is_owned() and tile.is_released()
    assert values(te) == [1.0, 2.0, 3.0, 4.0]
