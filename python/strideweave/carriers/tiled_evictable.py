"""TiledEvictable: a carrier split into tiles that live independently in a fast primary tier
or a slow secondary tier (extension-and-tiling.md §7).

TiledEvictable is the one shipped carrier that is definition-backed: its storage is the
`StorageProvider` below (slots are read and written in place in whichever tier holds their
tile), it declares one route, "tiled.to_cpu", and its `TiledResidencyFacet` carries the
residency and projection operations. The class is final.

Geometry: `logical_shape[a] = grid_shape[a] * tile_shape[a]`; slot `s` decodes first mode
fastest to coordinate `x`, which lies in tile `x // tile_shape` at in-tile slot
`encode(x mod tile_shape, tile_shape)`. That is CuTe's zipped divide of the canonical layout
of `logical_shape` by `tile_shape` (mode 0 a tile's slots, mode 1 the tiles' origins), so
the carrier computes it with `Layout.zipped_divide` and maps a slot back with the divide's
`left_inverse`. Every tile is its own dense storage of a tier: a
carrier of the tier's class (made by `new_like` at construction, by `allocate_like` when it
moves), owned by the TiledEvictable through an ownership token like Evictable's, or, for the
exact built-in classes CPU and FileBacked, the bare Rust storage such a carrier would hold
(`tiled_tiles.py` says why and how).

This module holds the carrier, its storage provider, the facet and the definition; the rules
of the tiles (where each is, pins, commits, retired tiles, clean copies, the residency policy)
are the core's tile book (`_native.TileBook`, the Rust TiledEvictable's own); the value types
live in `tiled_types.py`, what a request, a projection and the route do to the tiles in
`tiled_residency.py`, the tiles of each tier in `tiled_tiles.py`, and
the batched Rust data path in `tiled_bulk.py`.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence, cast, final

from strideweave import _native
from strideweave.carriers import tiled_bulk, tiled_residency, tiled_tiles
from strideweave.carriers.base import Carrier, check_bool_argument, check_size_argument, not_a_carrier
from strideweave.carriers.cpu import CPU
from strideweave.carriers.dtype import DType
from strideweave.carriers.evictable import Evictable
from strideweave.carriers.ownership import TwoTiered, check_tier_pair
from strideweave.carriers.extension import (CarrierDefinition, CarrierFacet, StorageProvider,
                                            TransferProvider, TransferRoute,
                                            _register_shipped_definition)
from strideweave.layout import Layout, Shape
from strideweave.carriers.tiled_types import (PRIMARY, SECONDARY, AwaitProjection, AwaitResidency, ResidencyPolicy,
                                              as_tile_set,
                                              TileSelection, TileSet, TileState, _check_shape,
                                              _consume_ints, _Ownership, _release_quietly)

if TYPE_CHECKING:  # annotations only (imported lazily where it is used)
    from strideweave.tensor import Tensor

__all__ = ["TiledEvictable", "TileSet", "TileSelection", "AwaitProjection", "AwaitResidency",
           "TiledResidencyFacet", "ResidencyPolicy", "ResidencyPlan"]

# The value types' documented home is this module.
for _public in (TileSet, TileSelection, AwaitProjection, AwaitResidency, TileState, ResidencyPolicy):
    _public.__module__ = __name__


_INDEXED_TILES = 1 << 16  # ~10 MB of index at most


def _check_tiers_free(primary: Carrier, secondary: Carrier) -> None:
    """Construction step 3: each tier live, unowned and unclaimed."""
    for name, tier in (("primary", primary), ("secondary", secondary)):
        if tier.is_released():
            raise RuntimeError(f"TiledEvictable {name} tier ({type(tier).__name__}) is released")
        if tier.is_owned():
            raise RuntimeError(f"TiledEvictable {name} tier ({type(tier).__name__}) is already owned")
        tier._sw_check_unclaimed(f"use as the TiledEvictable {name} tier a")


# ===== the carrier ==============================================================================

@final
class TiledEvictable(TwoTiered, Carrier):
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
                 tile_shape: Iterable[int], *, retain_clean: bool = False,
                 residency_policy: ResidencyPolicy | None = None) -> None:
        retain_clean = check_bool_argument(retain_clean, "retain_clean")
        if residency_policy is not None and not isinstance(residency_policy, ResidencyPolicy):
            raise TypeError(f"residency_policy must be a ResidencyPolicy or None, not "
                            f"{type(residency_policy).__name__}")
        for name, tier in (("primary", primary), ("secondary", secondary)):
            if not isinstance(tier, Carrier) or isinstance(tier, (TiledEvictable, Evictable)):
                raise not_a_carrier(f"TiledEvictable {name} tier", tier,
                                    "a plain Carrier (not an Evictable or TiledEvictable)")
        dtype = check_tier_pair("TiledEvictable", primary, secondary, _check_tiers_free, "differ")
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
        from strideweave.carriers.move import _resolve, _slot_bytes
        _resolve(type(primary), type(secondary))
        _resolve(type(secondary), type(primary))
        tile_bytes = math.prod(tile) * _slot_bytes(dtype)
        if residency_policy is not None:
            if residency_policy.budget < tile_bytes:
                raise ValueError(f"residency_policy budget {residency_policy.budget} bytes is below one "
                                 f"tile's {tile_bytes} bytes")
            if sizes[0] == full and full // math.prod(tile) * tile_bytes > residency_policy.budget:
                raise ValueError(f"residency_policy budget {residency_policy.budget} bytes is below the "
                                 f"{full // math.prod(tile) * tile_bytes} bytes of the primary tier that "
                                 "seeds the tiles: seed from the secondary tier")

        # Read by the storage provider during Carrier.__init__ (allocate builds the tiles).
        self._primary = primary
        self._secondary = secondary
        self._grid = grid
        self._tile = tile
        self._logical = logical
        self._full = full
        self._tile_size = math.prod(tile)
        # The tiling is CuTe's zipped divide of the logical array (first axis fastest) by the
        # tile shape: mode 0 walks one tile's slots, mode 1 the tiles' origins in tile-index
        # order, and its left inverse takes a logical slot back to `in_tile + size * tile`.
        self._tiling = Layout.canonical(Shape(*logical)).zipped_divide(tile)
        self._ordinal_of_slot = self._tiling.left_inverse()
        self._in_tile_offsets: list[int] | None = None
        # Each tile's first slot in the logical array, by tile index (the route's gather).
        self._origins = tiled_bulk.placement([range(g) for g in grid], grid, tile)[1]
        self._seed: Carrier | None = primary if sizes[0] == full else secondary
        self._makers = {PRIMARY: tiled_tiles.TierTiles(primary, self._tile_size, dtype),
                        SECONDARY: tiled_tiles.TierTiles(secondary, self._tile_size, dtype)}
        # Tile index by coordinate, so a request of thousands of tiles maps them in one pass;
        # for a grid too large to hold that cheaply, `_coordinate_index` computes each.
        self._index_of = ({self._coordinate_of(i): i for i in range(len(self._origins))}
                          if len(self._origins) <= _INDEXED_TILES else {})
        # Where each tile is, the pins of pending requests and projections, the tiles a commit
        # retires while a projection reads them, the clean copies (retain_clean) and the
        # policy's budget and least-recently-used order: the core's book of a tiled composite
        # (`_native.TileBook`, the Rust TiledEvictable's own), made when the storage provider
        # builds the tiles. None before that.
        self._book: Any = None
        # The tiles the storage provider cut (handed from its allocate to the adoption below).
        self._seeded_tiles: list[tiled_tiles.Tile] = []
        self._retain_clean = retain_clean
        self._policy = residency_policy
        self._tile_bytes = tile_bytes
        self._budget_tiles = residency_policy.budget // tile_bytes if residency_policy is not None else 0
        self._ownership = _Ownership()
        super().__init__(full, dtype=dtype, mutable=primary.is_mutable())
        self._seed = None
        # The storage provider's allocate (run by Carrier.__init__, full > 0) built the tiles.
        tiles, self._seeded_tiles = self._seeded_tiles, []
        try:
            # Each tier is adopted in one step of its state: one a racing move or release took
            # since the checks above fails them now, with their message, and nothing is kept.
            self._sw_own_tiers(self._ownership, lambda: _check_tiers_free(primary, secondary))
        except BaseException:
            tiled_tiles.release_tiles(tiles)
            raise
        tiled_tiles.adopt_all(tiles, self._ownership)
        ownership = self._ownership
        # A write runs as a writer of the tile it writes (see `_provider_write`).
        self._write_tile = lambda tile, k, v: tiled_tiles.write_slot(tile, ownership, k, v)
        # The tiles a read or write hands back: replaced or released while it used them, or a
        # clean copy a write made stale.
        self._release_ended = lambda tiles: tiled_tiles.release_tiles(tiles, ownership)

    # ----- geometry (`primary` / `secondary` come from TwoTiered) ---------------------------
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
        """(tile index, in-tile slot) of logical slot `slot`: the tiling's inverse gives the
        ordinal `in_tile + tile_size * tile_index`."""
        tile_index, in_tile = divmod(self._ordinal_of_slot(slot), self._tile_size)
        return tile_index, in_tile

    def _tile_slots(self, tile_index: int) -> list[int]:
        """Logical slots of one tile, in in-tile slot order: the tile's origin plus the
        tiling's in-tile offsets (computed once, on first use)."""
        offsets = self._in_tile_offsets
        if offsets is None:
            walk = self._tiling[0]
            offsets = self._in_tile_offsets = [walk(k) for k in range(self._tile_size)]
        origin = self._tiling[1](tile_index)
        return [origin + o for o in offsets]

    def _coordinate_index(self, coord: tuple[int, ...]) -> int:
        index = self._index_of.get(coord)
        if index is not None:
            return index
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
    @property
    def residency_policy(self) -> ResidencyPolicy | None:
        """The residency policy given at construction, or None."""
        return self._policy

    def residency_plan(self, steps: Iterable["TileSet | TileSelection"]) -> "ResidencyPlan":
        """A plan that iterates `steps` with each step's tiles on primary, prefetching the
        next step's tiles while the caller works on this one (see `ResidencyPlan`)."""
        return ResidencyPlan(self, steps)

    @property
    def retain_clean(self) -> bool:
        """Whether a promote keeps each tile's secondary copy while the tile stays clean."""
        return self._retain_clean

    def tile_state(self, coordinate: Sequence[int]) -> TileState:
        """Where the tile at `coordinate` lives now, whether it is pinned, and whether it is
        clean (on primary with its unchanged secondary copy retained)."""
        self._check_live("query tile state of")
        coord = _consume_ints(coordinate, "coordinate")
        index = self._coordinate_index(coord)
        state = self._book.state(index)
        if state is None:
            raise RuntimeError("cannot query tile state of a released TiledEvictable")
        on_primary, pinned, clean = state
        return TileState(coord, PRIMARY if on_primary else SECONDARY, pinned, clean)

    def _tile_set(self, location: str) -> TileSet:
        if self._sw_released or self._book is None:
            return TileSet()
        # One consistent view: a commit swaps every tile of a phase at once.
        indices = self._book.tiles_on(location == PRIMARY)
        return TileSet(self._coordinate_of(i) for i in indices)

    @property
    def primary_tiles(self) -> TileSet:
        return self._tile_set(PRIMARY)

    @property
    def secondary_tiles(self) -> TileSet:
        return self._tile_set(SECONDARY)

    def _check_live(self, action: str) -> None:
        # The book is released while a release runs, before the released flag is set: this
        # sees a release in progress.
        if self._sw_released or self._book is None or self._book.is_released():
            raise RuntimeError(f"cannot {action} a released TiledEvictable")

    def _sw_storage_gone(self) -> bool:
        # A release (of the user, or of a move's commit) releases the book before the released
        # flag is set: a slot access racing it is refused as released, not as out of range.
        return self._book is None or self._book.is_released()

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
        on_primary = len(self._book.tiles_on(True))
        return (f"<TiledEvictable grid={self._grid} tile={self._tile} dtype={self.dtype().name} "
                f"version={self._sw_version} tiles on primary={on_primary}/{len(self._origins)}>")


# ===== storage provider ===========================================================================

def _provider_supports(c: TiledEvictable, dtype: DType) -> bool:
    return bool(c._primary.supports_storage_dtype(dtype) and c._secondary.supports_storage_dtype(dtype))


def _provider_size(c: TiledEvictable) -> int:
    return c._full if c._book is not None and not c._book.is_released() else 0


def _provider_allocate(c: TiledEvictable, slots: int) -> None:
    """Construction: split the seeding tier into tiles (every tile lands in that tier)."""
    if slots != c._full:
        raise ValueError(f"TiledEvictable storage holds exactly its full size {c._full}, not {slots}")
    seed = cast(Carrier, c._seed)  # set for the duration of __init__, which is what calls this
    location = PRIMARY if seed is c._primary else SECONDARY
    tiles: list[tiled_tiles.Tile] = []
    # A seed already cut into this geometry's tiles appends them instead of being split, as
    # `split` does (strideweave.ray rebuilds an unpickled tiled tensor from its tiles so).
    handover = getattr(seed, "_sw_seed_tiles", None)
    try:
        handed = handover is not None and handover(c._grid, c._tile, tiles)
        if not handed and not tiled_tiles.split(seed, c._grid, c._tile, c._makers[location], tiles):
            for index in range(math.prod(c._grid)):
                values = [seed[s] for s in c._tile_slots(index)]
                tiles.append(seed.new_like(values, mutable=True))
    except BaseException:
        tiled_tiles.release_tiles(tiles)
        raise
    c._seeded_tiles = tiles
    c._book = _native.TileBook(list(c._grid), tiles, location == PRIMARY, c._retain_clean,
                               None if c._policy is None else c._policy.budget, c._tile_bytes)


def _provider_release(c: TiledEvictable) -> None:
    # The book refuses while a residency request or projection is pending, before any effect;
    # it frees its bare host tiles itself and returns the rest.
    tiles = c._book.release_hosts()
    c._finalizer.detach()
    c._ownership.disown_all()
    tiled_tiles.release_all(tiles)
    c._primary.release()
    c._secondary.release()


def _provider_read(c: TiledEvictable, i: int) -> Any:
    tile, k = c._locate(i)
    # As a reader of the tile, outside the book's lock: a commit or release that replaces it
    # meanwhile keeps it until the read ends, and hands it to `release` then.
    return c._book.read(tile, tiled_tiles.read_slot, k, c._release_ended)


def _provider_write(c: TiledEvictable, i: int, v: Any) -> None:
    tile, k = c._locate(i)
    # As a writer of the tile, outside the book's lock; refused on a pinned tile. The tile is
    # dirty after it, and its retained secondary copy, which no longer matches it, goes to
    # `release`.
    c._book.write(tile, c._write_tile, k, v, c._release_ended)


# ===== the plan ===================================================================================

@final
class ResidencyPlan:
    """Iterating it yields each step (a TileSet) once that step's tiles are all on primary;
    before yielding step k it starts promoting step k + 1 (its prefetch), so the I/O of the
    next step overlaps the caller's work on this one. Under a residency policy the prefetch
    never evicts the tiles of the step being yielded: when the two steps do not fit the
    budget together, step k + 1 is promoted only once the caller asks for it. A step that
    alone exceeds the budget raises ValueError when it is reached. Built by
    `TiledEvictable.residency_plan(steps)`; the steps are checked (type, rank, range) when the
    plan is built, before anything moves."""

    __slots__ = ("_carrier", "_steps")

    def __init__(self, carrier: TiledEvictable, steps: Iterable["TileSet | TileSelection"]) -> None:
        if not isinstance(carrier, TiledEvictable):
            raise TypeError(f"ResidencyPlan carrier must be a TiledEvictable, not {type(carrier).__name__}")
        try:
            items = list(steps)
        except TypeError:
            raise TypeError(f"ResidencyPlan steps must be iterable, not {type(steps).__name__}") from None
        checked = []
        for k, item in enumerate(items):
            step = as_tile_set(item, f"ResidencyPlan step {k}")
            for coord in step.coordinates:
                carrier._coordinate_index(coord)  # ValueError for a rank or range mismatch
            checked.append(step)
        self._carrier = carrier
        self._steps = tuple(checked)

    @property
    def steps(self) -> tuple[TileSet, ...]:
        return self._steps

    def __len__(self) -> int:
        return len(self._steps)

    def __iter__(self) -> Iterator[TileSet]:
        c, steps = self._carrier, self._steps
        if not steps:
            return
        pending: AwaitResidency | None = c.promote_async(steps[0])
        for k, step in enumerate(steps):
            if pending is None:
                pending = c.promote_async(step)
            pending.wait()
            pending = None
            if k + 1 < len(steps) and _fits_with(c, step, steps[k + 1]):
                protect = [c._coordinate_index(coord) for coord in step.coordinates]
                pending = tiled_residency.residency(c, steps[k + 1], PRIMARY, protect)
            yield step
        if pending is not None:
            pending.wait()


def _fits_with(c: TiledEvictable, step: TileSet, following: TileSet) -> bool:
    """Whether `following` can be prefetched while `step` stays resident."""
    if c._policy is None:
        return True
    return len(set(step.coordinates) | set(following.coordinates)) <= c._budget_tiles


# ===== the facet ==================================================================================

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

    def promote_async(self, carrier: TiledEvictable, tiles: "TileSet | TileSelection") -> AwaitResidency:
        """Start moving `tiles` into the primary tier; returns at once."""
        return tiled_residency.residency(self._carrier(carrier), tiles, PRIMARY)

    def evict_async(self, carrier: TiledEvictable, tiles: "TileSet | TileSelection") -> AwaitResidency:
        """Start moving `tiles` into the secondary tier; returns at once."""
        return tiled_residency.residency(self._carrier(carrier), tiles, SECONDARY)

    def promote(self, carrier: TiledEvictable, tiles: "TileSet | TileSelection") -> None:
        return self.promote_async(carrier, tiles).wait()

    def evict(self, carrier: TiledEvictable, tiles: "TileSet | TileSelection") -> None:
        return self.evict_async(carrier, tiles).wait()

    def project(self, carrier: TiledEvictable, tensor: Any, selection: Any,
                destination: Carrier | None = None) -> AwaitProjection:
        """Start gathering the selected tiles of the full `tensor` into one compact dense
        Tensor (on `destination`, or on a fresh primary-class carrier); returns at once."""
        return tiled_residency.project(self._carrier(carrier), tensor, selection, destination)


# ===== definition ===================================================================================

_register_shipped_definition(TiledEvictable, CarrierDefinition(
    StorageProvider(_provider_supports, _provider_size, _provider_allocate, _provider_release,
                    _provider_read, _provider_write),
    transfers=(TransferRoute(TiledEvictable, CPU, "tiled.to_cpu",
                             TransferProvider(tiled_residency.prepare_to_cpu)),),
    facets=(TiledResidencyFacet(),),
))
