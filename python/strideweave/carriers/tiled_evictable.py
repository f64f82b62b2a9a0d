"""TiledEvictable: a carrier split into tiles that live independently in a fast primary tier
or a slow secondary tier (extension-and-tiling.md §7).

TiledEvictable is the one shipped carrier that is definition-backed: its storage is the
`StorageProvider` below (slots are read and written in place in whichever tier holds their
tile), it declares one route, "tiled.to_cpu", and its `TiledResidencyFacet` carries the
residency and projection operations. The class is final.

Geometry: `logical_shape[a] = grid_shape[a] * tile_shape[a]`; slot `s` decodes first mode
fastest to coordinate `x`, which lies in tile `x // tile_shape` at in-tile slot
`encode(x mod tile_shape, tile_shape)`. Every tile is its own dense carrier of a tier class
(made by `new_like` at construction, by `allocate_like` when it moves), owned by the
TiledEvictable through an ownership token like Evictable's.

Asynchrony: residency requests and projections validate on the caller's thread, pin the
tiles they cover (writes to a pinned tile and conflicting requests raise RuntimeError), and
run their transfers as one job on the engine's worker pool (`_native.submit_python`). A
residency request moves each tile's private dense copy into a fresh target-tier tile with a
lowered move (no autograd node, no profiling) and commits every tile swap at once under the
carrier's lock; any failure releases what was staged and changes nothing.
"""
from __future__ import annotations

import contextlib
import math
import threading
import weakref
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence, final

from strideweave import _autograd, _native
from strideweave.carriers.base import Carrier, check_size_argument
from strideweave.carriers.dtype import DType
from strideweave.carriers.evictable import Evictable
from strideweave.carriers.extension import (CarrierDefinition, CarrierFacet, PreparedTransfer,
                                            StorageProvider, TransferProvider, TransferRoute,
                                            Unsupported, _register_shipped_definition,
                                            is_definition_backed)
from strideweave.carriers.cpu import CPU
from strideweave.carriers.move import AwaitResult
from strideweave.layout import Layout, Shape

if TYPE_CHECKING:  # annotations only (imported lazily where it is used)
    from strideweave.tensor import Tensor

__all__ = ["TiledEvictable", "TileSet", "TileSelection", "AwaitProjection", "AwaitResidency",
           "TiledResidencyFacet"]


# ===== value types ==============================================================================

def _component(value: Any, what: str) -> int:
    """A tile coordinate component: an int, bool rejected (TypeError)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    return int(value)


def _consume_ints(values: Any, what: str) -> tuple[int, ...]:
    try:
        items = tuple(values)
    except TypeError:
        raise TypeError(f"{what} must be an iterable of ints, not {type(values).__name__}") from None
    return tuple(_component(v, f"{what}[{k}]") for k, v in enumerate(items))


class _Immutable:
    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete attribute {name!r}")


class TileSet(_Immutable):
    """An immutable, possibly empty set of tile coordinates, sorted first axis fastest.

    `TileSet([(1, 0), (0, 1), (0, 0)]).coordinates == ((0, 0), (1, 0), (0, 1))`. A component
    that is not an int (or is a bool) → TypeError; mixed ranks, negative components or
    duplicates → ValueError. Whether the coordinates fit a carrier's grid is checked when
    the set is used.
    """

    __slots__ = ("_coordinates",)
    _coordinates: tuple[tuple[int, ...], ...]

    def __init__(self, coordinates: Iterable[Sequence[int]] = ()) -> None:
        try:
            entries = tuple(coordinates)
        except TypeError:
            raise TypeError(f"coordinates must be an iterable of int sequences, "
                            f"not {type(coordinates).__name__}") from None
        coords = tuple(_consume_ints(c, f"coordinates[{k}]") for k, c in enumerate(entries))
        ranks = {len(c) for c in coords}
        if len(ranks) > 1:
            raise ValueError(f"coordinates mix ranks {sorted(ranks)}")
        if 0 in ranks:
            raise ValueError("a tile coordinate needs at least one component")
        for c in coords:
            if any(v < 0 for v in c):
                raise ValueError(f"tile coordinate {c} has a negative component")
        if len(set(coords)) != len(coords):
            seen: set = set()
            duplicate = next(c for c in coords if c in seen or seen.add(c))
            raise ValueError(f"tile coordinate {duplicate} appears more than once")
        object.__setattr__(self, "_coordinates", tuple(sorted(coords, key=lambda c: c[::-1])))

    @property
    def coordinates(self) -> tuple[tuple[int, ...], ...]:
        """The coordinates, first axis fastest."""
        return self._coordinates

    @property
    def rank(self) -> int | None:
        """The coordinates' rank, or None for the empty set."""
        return len(self._coordinates[0]) if self._coordinates else None

    def __len__(self) -> int:
        return len(self._coordinates)

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return iter(self._coordinates)

    def __contains__(self, coordinate: Any) -> bool:
        return tuple(coordinate) in self._coordinates if isinstance(coordinate, (tuple, list)) else False

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, TileSet) and other._coordinates == self._coordinates

    def __hash__(self) -> int:
        return hash(self._coordinates)

    def __repr__(self) -> str:
        return f"TileSet({list(self._coordinates)!r})"


class TileSelection(_Immutable):
    """An ordered Cartesian product of per-axis tile indices.

    `per_axis` keeps the caller's order; `coordinates` enumerates the product first mode
    fastest: `TileSelection(((7, 2), (4, 9))).coordinates == ((7, 4), (2, 4), (7, 9), (2, 9))`.
    No axes, an empty axis, a duplicate within an axis or a negative index → ValueError; a
    non-int (or bool) index → TypeError.
    """

    __slots__ = ("_per_axis",)
    _per_axis: tuple[tuple[int, ...], ...]

    def __init__(self, per_axis: Iterable[Iterable[int]]) -> None:
        try:
            axes = tuple(per_axis)
        except TypeError:
            raise TypeError(f"per_axis must be an iterable of int iterables, "
                            f"not {type(per_axis).__name__}") from None
        parsed = tuple(_consume_ints(axis, f"per_axis[{a}]") for a, axis in enumerate(axes))
        if not parsed:
            raise ValueError("per_axis must name at least one axis")
        for a, axis in enumerate(parsed):
            if not axis:
                raise ValueError(f"per_axis[{a}] selects no tiles")
            if any(v < 0 for v in axis):
                raise ValueError(f"per_axis[{a}] has a negative tile index")
            if len(set(axis)) != len(axis):
                raise ValueError(f"per_axis[{a}] repeats a tile index")
        object.__setattr__(self, "_per_axis", parsed)

    @property
    def per_axis(self) -> tuple[tuple[int, ...], ...]:
        return self._per_axis

    @property
    def rank(self) -> int:
        return len(self._per_axis)

    @property
    def compact_grid_shape(self) -> tuple[int, ...]:
        """Selected tiles per axis: the grid of the compact projection."""
        return tuple(len(axis) for axis in self._per_axis)

    @property
    def coordinates(self) -> tuple[tuple[int, ...], ...]:
        """Every selected tile, first mode fastest, each axis in the caller's order."""
        shape = self.compact_grid_shape
        out = []
        for k in range(math.prod(shape)):
            coord = []
            for axis, extent in zip(self._per_axis, shape):
                k, r = divmod(k, extent)
                coord.append(axis[r])
            out.append(tuple(coord))
        return tuple(out)

    @property
    def tile_set(self) -> TileSet:
        return TileSet(self.coordinates)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, TileSelection) and other._per_axis == self._per_axis

    def __hash__(self) -> int:
        return hash(self._per_axis)

    def __repr__(self) -> str:
        return f"TileSelection({[list(a) for a in self._per_axis]!r})"


class AwaitResidency(AwaitResult[None]):
    """Completion handle of a residency request; `wait()` returns None or raises the first
    transfer failure. Only the framework creates these."""

    __slots__ = ()


class AwaitProjection(AwaitResult["Tensor"]):
    """Completion handle of a projection; `wait()` returns the compact Tensor (the same
    object every time) or raises the gather's failure. Only the framework creates these."""

    __slots__ = ()


class TileState(_Immutable):
    """Where one tile lives (`location` is "primary" or "secondary") and whether a pending
    request pins it."""

    __slots__ = ("coordinate", "location", "pinned")
    coordinate: tuple[int, ...]
    location: str
    pinned: bool

    def __init__(self, coordinate: tuple[int, ...], location: str, pinned: bool) -> None:
        object.__setattr__(self, "coordinate", coordinate)
        object.__setattr__(self, "location", location)
        object.__setattr__(self, "pinned", pinned)

    def __repr__(self) -> str:
        pinned = ", pinned" if self.pinned else ""
        return f"TileState({self.coordinate}, {self.location!r}{pinned})"


# ===== ownership ================================================================================

class _Ownership:
    """The owner recorded on a TiledEvictable's tiers and tiles (see evictable.py: a token,
    so a tier the caller holds does not keep the TiledEvictable alive)."""

    __slots__ = ("carriers", "__weakref__")

    def __init__(self) -> None:
        self.carriers: dict[int, Carrier] = {}

    def take(self, carrier: Carrier) -> None:
        carrier._sw_owner = self
        self.carriers[id(carrier)] = carrier

    def drop(self, carrier: Carrier) -> None:
        if carrier._sw_owner is self:
            carrier._sw_owner = None
        self.carriers.pop(id(carrier), None)

    def disown_all(self) -> None:
        for carrier in self.carriers.values():
            if carrier._sw_owner is self:
                carrier._sw_owner = None
        self.carriers = {}


_Ownership.__name__ = "TiledEvictable"
_Ownership.__qualname__ = "TiledEvictable"


def _release_quietly(carrier: Carrier, ownership: _Ownership | None = None) -> None:
    if ownership is not None:
        ownership.drop(carrier)
    with contextlib.suppress(Exception):
        if carrier._sw_owner is None:
            carrier.release()


# ===== the carrier ==============================================================================

PRIMARY, SECONDARY = "primary", "secondary"


def _check_shape(value: Any, name: str) -> tuple[int, ...]:
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be an iterable of ints, not {type(value).__name__}") from None
    for k, v in enumerate(items):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name}[{k}] must be an int, not {type(v).__name__}")
    return tuple(int(v) for v in items)


@final
class TiledEvictable(Carrier):
    """Tiles of one logical array, each resident in the primary or the secondary tier.

    `TiledEvictable(primary, secondary, grid_shape, tile_shape)`: exactly one tier holds the
    full `prod(grid_shape[a] * tile_shape[a])` slots and seeds every tile; the other is
    empty. Both tiers become owned. Reads and writes go to each tile's current tier in place;
    `promote_async`/`evict_async` (and the blocking `promote`/`evict`) move whole tiles, and
    `project` gathers selected tiles into one compact Tensor. The class cannot be subclassed.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("TiledEvictable is final and cannot be subclassed")

    def __init__(self, primary: Carrier, secondary: Carrier, grid_shape: Iterable[int],
                 tile_shape: Iterable[int]) -> None:
        for name, tier in (("primary", primary), ("secondary", secondary)):
            if not isinstance(tier, Carrier) or isinstance(tier, (TiledEvictable, Evictable)):
                raise TypeError(f"TiledEvictable {name} tier must be a plain Carrier (not an Evictable "
                                f"or TiledEvictable), not {type(tier).__name__}")
        if primary is secondary:
            raise ValueError("TiledEvictable primary and secondary must be distinct carrier objects")
        for name, tier in (("primary", primary), ("secondary", secondary)):
            if tier.is_released():
                raise RuntimeError(f"TiledEvictable {name} tier ({type(tier).__name__}) is released")
            if tier.is_owned():
                raise RuntimeError(f"TiledEvictable {name} tier ({type(tier).__name__}) is already owned")
            tier._sw_check_unclaimed(f"use as the TiledEvictable {name} tier a")
        dtype = primary.dtype()
        if secondary.dtype() is not dtype:
            raise TypeError(f"TiledEvictable tier dtypes differ: primary is {dtype.name}, secondary "
                            f"is {secondary.dtype().name}")
        grid = _check_shape(grid_shape, "grid_shape")
        tile = _check_shape(tile_shape, "tile_shape")
        for name, shape in (("grid_shape", grid), ("tile_shape", tile)):
            if not shape:
                raise ValueError(f"{name} must have at least one extent")
            if any(e <= 0 for e in shape):
                raise ValueError(f"{name} extents must be positive, got {shape}")
        if len(grid) != len(tile):
            raise ValueError(f"grid_shape and tile_shape ranks differ: {len(grid)} and {len(tile)}")
        logical = tuple(g * t for g, t in zip(grid, tile))
        full = math.prod(logical)
        sizes = (primary.size(), secondary.size())
        for name, size in zip(("primary", "secondary"), sizes):
            if size not in (0, full):
                raise ValueError(f"TiledEvictable {name} tier has {size} slots: a tier must be empty "
                                 f"or hold the full {full}")
        if sizes == (full, full):
            raise ValueError("exactly one TiledEvictable tier may hold the values: both are full")
        if sizes == (0, 0):
            raise ValueError("exactly one TiledEvictable tier must hold the values: both are empty")
        for name, tier in (("primary", primary), ("secondary", secondary)):
            if not tier.supports_storage_dtype(dtype):
                raise TypeError(f"TiledEvictable {name} tier ({type(tier).__name__}) cannot store "
                                f"{dtype.name}")
        from strideweave.carriers.move import _resolve
        _resolve(type(primary), type(secondary))
        _resolve(type(secondary), type(primary))

        # Read by the storage provider during Carrier.__init__ (allocate builds the tiles).
        self._primary = primary
        self._secondary = secondary
        self._grid = grid
        self._tile = tile
        self._logical = logical
        self._full = full
        self._tile_size = math.prod(tile)
        self._seed = primary if sizes[0] == full else secondary
        self._tiles: list[Carrier] | None = None
        self._where: list[str] = []
        self._pins: list[int] = []
        self._pending = 0
        self._state_lock = threading.RLock()
        self._ownership = _Ownership()
        super().__init__(full, dtype=dtype, mutable=primary.is_mutable())
        self._seed = None
        ownership = self._ownership
        ownership.take(primary)
        ownership.take(secondary)
        for t in self._tiles:
            ownership.take(t)
        self._finalizer = weakref.finalize(self, ownership.disown_all)

    # ----- geometry ------------------------------------------------------------------------
    @property
    def primary(self) -> Carrier:
        return self._primary

    @property
    def secondary(self) -> Carrier:
        return self._secondary

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return self._grid

    @property
    def tile_shape(self) -> tuple[int, ...]:
        return self._tile

    @property
    def logical_shape(self) -> tuple[int, ...]:
        return self._logical

    def _locate(self, slot: int) -> tuple[int, int]:
        """(tile index, in-tile slot) of logical slot `slot`."""
        tile_index = in_tile = 0
        grid_mul = tile_mul = 1
        for extent, t, g in zip(self._logical, self._tile, self._grid):
            slot, x = divmod(slot, extent)
            q, r = divmod(x, t)
            tile_index += q * grid_mul
            in_tile += r * tile_mul
            grid_mul *= g
            tile_mul *= t
        return tile_index, in_tile

    def _tile_slots(self, tile_index: int) -> list[int]:
        """Logical slots of one tile, in in-tile slot order."""
        origin = []
        for g, t in zip(self._grid, self._tile):
            tile_index, q = divmod(tile_index, g)
            origin.append(q * t)
        slots = []
        for k in range(self._tile_size):
            s = 0
            mul = 1
            for o, t, extent in zip(origin, self._tile, self._logical):
                k, r = divmod(k, t)
                s += (o + r) * mul
                mul *= extent
            slots.append(s)
        return slots

    def _coordinate_index(self, coord: tuple[int, ...]) -> int:
        if len(coord) != len(self._grid):
            raise ValueError(f"tile coordinate {coord} has rank {len(coord)}, the grid has rank "
                             f"{len(self._grid)}")
        index, mul = 0, 1
        for c, g in zip(coord, self._grid):
            if c >= g:
                raise ValueError(f"tile coordinate {coord} is outside the grid {self._grid}")
            index += c * mul
            mul *= g
        return index

    def _coordinate_of(self, index: int) -> tuple[int, ...]:
        out = []
        for g in self._grid:
            index, q = divmod(index, g)
            out.append(q)
        return tuple(out)

    def _is_full(self, tensor: Any) -> bool:
        layout = tensor.layout
        if tensor.offset != 0 or len(layout) != len(self._logical):
            return False
        if tuple(layout[a:a + 1].size for a in range(len(layout))) != self._logical:
            return False
        expected = 1
        for extent, stride in zip(layout.leaf_shape, layout.leaf_stride):
            if extent != 1 and stride != expected:
                return False
            expected *= extent
        return True

    # ----- state ---------------------------------------------------------------------------
    def tile_state(self, coordinate: Sequence[int]) -> TileState:
        """Where the tile at `coordinate` lives now."""
        self._check_live("query tile state of")
        coord = _consume_ints(coordinate, "coordinate")
        index = self._coordinate_index(coord)
        return TileState(coord, self._where[index], self._pins[index] > 0)

    def _tile_set(self, location: str) -> TileSet:
        if self._sw_released:
            return TileSet()
        return TileSet(self._coordinate_of(i) for i, w in enumerate(self._where) if w == location)

    @property
    def primary_tiles(self) -> TileSet:
        return self._tile_set(PRIMARY)

    @property
    def secondary_tiles(self) -> TileSet:
        return self._tile_set(SECONDARY)

    def _check_live(self, action: str) -> None:
        if self._sw_released:
            raise RuntimeError(f"cannot {action} a released TiledEvictable")

    def dlpack_info(self) -> dict[str, Any]:
        raise BufferError("DLPack is not supported for TiledEvictable carrier: its tiles live in "
                          "separate storages")

    # ----- residency and projection (delegated to the facet) -----------------------------------
    def promote_async(self, tiles: "TileSet | TileSelection") -> AwaitResidency:
        return self.require_facet(TiledResidencyFacet).promote_async(self, tiles)

    def evict_async(self, tiles: "TileSet | TileSelection") -> AwaitResidency:
        return self.require_facet(TiledResidencyFacet).evict_async(self, tiles)

    def promote(self, tiles: "TileSet | TileSelection") -> None:
        return self.require_facet(TiledResidencyFacet).promote(self, tiles)

    def evict(self, tiles: "TileSet | TileSelection") -> None:
        return self.require_facet(TiledResidencyFacet).evict(self, tiles)

    def project(self, tensor: Any, selection: Any, destination: Carrier | None = None) -> AwaitProjection:
        return self.require_facet(TiledResidencyFacet).project(self, tensor, selection, destination)

    # ----- factories ---------------------------------------------------------------------------
    def new_like(self, values: Iterable[Any], *, mutable: bool = True,
                 dtype: DType | None = None) -> "TiledEvictable":
        """A new TiledEvictable of this geometry holding `values` (exactly the full size),
        every tile on primary."""
        try:
            items = list(values)
        except TypeError:
            raise TypeError(f"values must be iterable, not {type(values).__name__}") from None
        if len(items) != self._full:
            raise ValueError(f"new_like needs exactly the full size {self._full} values, got {len(items)}")
        return self._assemble(lambda: self._primary.new_like(items, mutable=mutable, dtype=dtype), dtype)

    def allocate_like(self, size: int, *, mutable: bool = True, dtype: DType | None = None,
                      empty: bool = False) -> "TiledEvictable":
        """A new zero-filled TiledEvictable of this geometry (`size` must be the full size),
        every tile on primary."""
        n = check_size_argument(size)
        if n != self._full:
            raise ValueError(f"allocate_like needs the full size {self._full}, got {n}")
        return self._assemble(lambda: self._primary.allocate_like(n, mutable=mutable, dtype=dtype), dtype)

    def _assemble(self, make_primary: Any, dtype: DType | None) -> "TiledEvictable":
        made: list[Carrier] = []
        try:
            made.append(make_primary())
            made.append(self._secondary.allocate_like(0, mutable=True, dtype=dtype))
            return TiledEvictable(made[0], made[1], self._grid, self._tile)
        except BaseException:
            for tier in made:
                _release_quietly(tier)
            raise

    def __repr__(self) -> str:
        if self._sw_released:
            return f"<TiledEvictable released grid={self._grid} tile={self._tile}>"
        on_primary = sum(1 for w in self._where if w == PRIMARY)
        return (f"<TiledEvictable grid={self._grid} tile={self._tile} dtype={self.dtype().name} "
                f"version={self._sw_version} tiles on primary={on_primary}/{len(self._where)}>")


# ===== storage provider ===========================================================================

def _provider_supports(c: TiledEvictable, dtype: DType) -> bool:
    return bool(c._primary.supports_storage_dtype(dtype) and c._secondary.supports_storage_dtype(dtype))


def _provider_size(c: TiledEvictable) -> int:
    return c._full if c._tiles is not None else 0


def _provider_allocate(c: TiledEvictable, slots: int) -> None:
    """Construction: split the seeding tier into tiles (every tile lands in that tier)."""
    if slots != c._full:
        raise ValueError(f"TiledEvictable storage holds exactly its full size {c._full}, not {slots}")
    seed = c._seed
    location = PRIMARY if seed is c._primary else SECONDARY
    tiles: list[Carrier] = []
    try:
        for index in range(math.prod(c._grid)):
            values = [seed[s] for s in c._tile_slots(index)]
            tiles.append(seed.new_like(values, mutable=True))
    except BaseException:
        for t in tiles:
            _release_quietly(t)
        raise
    c._tiles = tiles
    c._where = [location] * len(tiles)
    c._pins = [0] * len(tiles)


def _provider_release(c: TiledEvictable) -> None:
    with c._state_lock:
        if c._pending:
            raise RuntimeError("cannot release a TiledEvictable while a residency request or "
                               "projection is pending")
        ownership = c._ownership
        c._finalizer.detach()
        carriers = [*c._tiles, c._primary, c._secondary]
        ownership.disown_all()
        c._tiles = None
        for carrier in carriers:
            carrier.release()


def _provider_read(c: TiledEvictable, i: int) -> Any:
    tile, k = c._locate(i)
    return c._tiles[tile][k]


def _provider_write(c: TiledEvictable, i: int, v: Any) -> None:
    tile, k = c._locate(i)
    with c._state_lock:
        if c._pins[tile]:
            raise RuntimeError(f"cannot write to tile {c._coordinate_of(tile)} of a TiledEvictable: "
                               "it is pinned by a pending residency request or projection")
        c._tiles[tile]._sw_write_as_owner(c._ownership, k, v)
    return None


# ===== the route to CPU ==============================================================================

def _prepare_to_cpu(request: Any) -> Any:
    source = request.tensor.carrier
    if not source._is_full(request.tensor):
        return Unsupported("only a full tensor (offset 0, the identity layout over the logical "
                           "shape) moves out of a TiledEvictable")
    if source._pending:
        raise RuntimeError("cannot move a TiledEvictable while a residency request or projection "
                           "is pending")
    destination = request.destination

    def submit() -> None:
        # Every tile, read where it lives (secondary tiles in place), into [0, size).
        for index, tile in enumerate(source._tiles):
            for k, s in enumerate(source._tile_slots(index)):
                destination._sw_fill(s, tile[k])
        return None

    return PreparedTransfer(submit)


# ===== the facet =======================================================================================

def _pin(c: TiledEvictable, indices: Iterable[int]) -> None:
    for i in indices:
        c._pins[i] += 1
    c._pending += 1


def _unpin(c: TiledEvictable, indices: Iterable[int]) -> None:
    with c._state_lock:
        for i in indices:
            c._pins[i] -= 1
        c._pending -= 1


def _private_copy(tile: Carrier) -> Carrier:
    """A dense copy of `tile` of the same class, so the lowered move (which releases its
    source) leaves the current tile readable until commit."""
    return tile.new_like([tile[k] for k in range(tile.size())], mutable=True)


class TiledResidencyFacet(CarrierFacet):
    """Residency and projection operations of a TiledEvictable; every method takes the
    carrier first. Immutable and shared by every TiledEvictable."""

    __slots__ = ()

    @staticmethod
    def _carrier(carrier: Any) -> TiledEvictable:
        if not isinstance(carrier, TiledEvictable):
            raise TypeError(f"carrier must be a TiledEvictable, not {type(carrier).__name__}")
        return carrier

    def tile_state(self, carrier: TiledEvictable, coordinate: Sequence[int]) -> TileState:
        return self._carrier(carrier).tile_state(coordinate)

    # ----- residency ---------------------------------------------------------------------
    def promote_async(self, carrier: TiledEvictable, tiles: "TileSet | TileSelection") -> AwaitResidency:
        """Start moving `tiles` into the primary tier; returns at once."""
        return self._residency(self._carrier(carrier), tiles, PRIMARY)

    def evict_async(self, carrier: TiledEvictable, tiles: "TileSet | TileSelection") -> AwaitResidency:
        """Start moving `tiles` into the secondary tier; returns at once."""
        return self._residency(self._carrier(carrier), tiles, SECONDARY)

    def promote(self, carrier: TiledEvictable, tiles: "TileSet | TileSelection") -> None:
        return self.promote_async(carrier, tiles).wait()

    def evict(self, carrier: TiledEvictable, tiles: "TileSet | TileSelection") -> None:
        return self.evict_async(carrier, tiles).wait()

    def _residency(self, c: TiledEvictable, tiles: Any, target: str) -> AwaitResidency:
        action = "promote tiles of" if target == PRIMARY else "evict tiles of"
        c._check_live(action)
        if isinstance(tiles, TileSelection):
            tiles = tiles.tile_set
        elif not isinstance(tiles, TileSet):
            raise TypeError(f"tiles must be a TileSet or TileSelection, not {type(tiles).__name__}")
        requested = [c._coordinate_index(coord) for coord in tiles.coordinates]
        handle = _native.new_completion(AwaitResidency)
        with c._state_lock:
            pinned = [i for i in requested if c._pins[i]]
            if pinned:
                raise RuntimeError(f"cannot {action} a TiledEvictable: tile {c._coordinate_of(pinned[0])} "
                                   "is pinned by a pending residency request or projection")
            moving = [i for i in requested if c._where[i] != target]
            if not moving:
                handle._succeed(None)
                return handle
            _pin(c, requested)
        prototype = c._primary if target == PRIMARY else c._secondary

        def job() -> None:
            staged: dict[int, Carrier] = {}
            copies: list[Carrier] = []
            try:
                from strideweave.carriers.move import _lowered_move
                with _autograd.no_grad():
                    for i in moving:
                        copy = _private_copy(c._tiles[i])
                        copies.append(copy)
                        fresh = prototype.allocate_like(c._tile_size, mutable=True, empty=True)
                        staged[i] = fresh
                        _lowered_move(_flat(copy, c._tile_size), fresh)
                # Commit: every swap at once, under the lock writers and readers of state take.
                with c._state_lock:
                    replaced = []
                    for i, fresh in staged.items():
                        replaced.append(c._tiles[i])
                        c._ownership.take(fresh)
                        c._tiles[i] = fresh
                        c._where[i] = target
                    for old in replaced:
                        _release_quietly(old, c._ownership)
            except BaseException as exc:  # noqa: BLE001 - the request's terminal failure
                for fresh in staged.values():
                    _release_quietly(fresh)
                for copy in copies:
                    _release_quietly(copy)
                _unpin(c, requested)
                handle._fail(exc)
                return
            _unpin(c, requested)
            handle._succeed(None)

        try:
            _native.submit_python(handle, job)
        except BaseException:
            _unpin(c, requested)
            raise
        return handle

    # ----- projection ---------------------------------------------------------------------
    def project(self, carrier: TiledEvictable, tensor: Any, selection: Any,
                destination: Carrier | None = None) -> AwaitProjection:
        """Start gathering the selected tiles of the full `tensor` into one compact dense
        Tensor (on `destination`, or on a fresh primary-class carrier); returns at once."""
        from strideweave.tensor import Tensor

        c = self._carrier(carrier)
        c._check_live("project")
        if not isinstance(tensor, Tensor) or tensor.carrier is not c:
            raise TypeError("tensor must be a Tensor on this TiledEvictable")
        if not c._is_full(tensor):
            raise ValueError("project needs a full tensor: offset 0 and the identity layout over "
                             f"the logical shape {c._logical}")
        if not isinstance(selection, TileSelection):
            selection = TileSelection(selection)
        if selection.rank != len(c._grid):
            raise ValueError(f"selection has rank {selection.rank}, the grid has rank {len(c._grid)}")
        for a, (axis, g) in enumerate(zip(selection.per_axis, c._grid)):
            if any(v >= g for v in axis):
                raise ValueError(f"selection axis {a} names a tile outside [0, {g})")
        if _autograd.is_grad_enabled() and tensor.is_differentiable():
            raise NotImplementedError("projection of a tensor that requires grad is not implemented "
                                      "(graph construction is on); use no_grad()")
        compact = tuple(n * t for n, t in zip(selection.compact_grid_shape, c._tile))
        total = math.prod(compact)
        grow = False
        if destination is not None:
            if not isinstance(destination, Carrier) or type(destination) is not type(c._primary):
                raise TypeError(f"destination must be a {type(c._primary).__name__} carrier (the "
                                f"primary tier's exact class), not {type(destination).__name__}")
            if destination.is_released():
                raise RuntimeError("the projection destination is released")
            if not destination.is_mutable():
                raise RuntimeError("the projection destination is not mutable")
            destination._sw_check_unclaimed("project into")
            if destination.dtype() is not c.dtype():
                raise TypeError(f"destination dtype {destination.dtype().name} is not the "
                                f"TiledEvictable's {c.dtype().name}")
            size = destination.size()
            if size < total:
                if size == 0 and (hasattr(destination, "_allocate") or is_definition_backed(destination)):
                    grow = True
                else:
                    raise ValueError(f"destination is too small: {size} slots for a {total}-slot "
                                     "projection")
        selected = [c._coordinate_index(coord) for coord in selection.coordinates]
        with c._state_lock:
            c._check_live("project")
            _pin(c, selected)
        owned_destination = destination is None
        try:
            if owned_destination:
                destination = c._primary.allocate_like(total, mutable=True, empty=True)
            elif grow:
                if is_definition_backed(destination):
                    from strideweave.carriers.extension import allocate_destination
                    allocate_destination(destination, total)
                else:
                    destination._allocate(total)
            handle = _native.new_completion(AwaitProjection)
        except BaseException:
            _unpin(c, selected)
            raise
        claim = _ProjectionClaim()
        destination._sw_claim = claim
        layout = Layout.canonical(Shape(list(compact)))

        def job() -> None:
            try:
                _gather(c, selection, destination, compact)
                result = Tensor(destination, 0, layout)
            except BaseException as exc:  # noqa: BLE001 - the projection's terminal failure
                destination._sw_claim = None
                if owned_destination:
                    _release_quietly(destination)
                elif grow and hasattr(destination, "_allocate"):
                    with contextlib.suppress(Exception):
                        destination._allocate(0)
                _unpin(c, selected)
                handle._fail(exc)
                return
            destination._sw_claim = None
            _unpin(c, selected)
            handle._succeed(result)

        try:
            _native.submit_python(handle, job)
        except BaseException:
            destination._sw_claim = None
            if owned_destination:
                _release_quietly(destination)
            _unpin(c, selected)
            raise
        return handle


class _ProjectionClaim:
    """Held in a caller's destination while a projection fills it."""

    __slots__ = ()


def _flat(carrier: Carrier, size: int) -> Any:
    from strideweave.tensor import Tensor
    return Tensor(carrier, 0, Layout.canonical(Shape(size)))


def _gather(c: TiledEvictable, selection: TileSelection, destination: Carrier,
            compact: tuple[int, ...]) -> None:
    """Compact coordinate `y` takes source `x[a] = per_axis[a][y[a] // t[a]] * t[a] + y[a] % t[a]`:
    copy each selected tile, read in place, into its block of the compact array."""
    tile_shape = c._tile
    shape = selection.compact_grid_shape
    for k in range(math.prod(shape)):
        block, coord, rest = [], [], k
        for axis, extent in zip(selection.per_axis, shape):
            rest, r = divmod(rest, extent)
            block.append(r)
            coord.append(axis[r])
        tile = c._tiles[c._coordinate_index(tuple(coord))]
        values = [tile[j] for j in range(c._tile_size)]
        for j, v in enumerate(values):
            s, mul, rest = 0, 1, j
            for b, t, extent in zip(block, tile_shape, compact):
                rest, r = divmod(rest, t)
                s += (b * t + r) * mul
                mul *= extent
            destination._sw_fill(s, v)


# ===== definition ========================================================================================

_register_shipped_definition(TiledEvictable, CarrierDefinition(
    StorageProvider(_provider_supports, _provider_size, _provider_allocate, _provider_release,
                    _provider_read, _provider_write),
    transfers=(TransferRoute(TiledEvictable, CPU, "tiled.to_cpu", TransferProvider(_prepare_to_cpu)),),
    facets=(TiledResidencyFacet(),),
))
