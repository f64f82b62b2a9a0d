"""The work of a TiledEvictable (extension-and-tiling.md §7): residency requests, projections
and the "tiled.to_cpu" transfer. `tiled_evictable.py` validates the carrier and delegates here.

Every request pins the tiles it covers (writes to them and conflicting requests raise
RuntimeError) and runs as one job on the engine. The pins, the commit's swaps, the tiles a
commit retires while a projection reads them, the clean copies and the residency policy are
the core's book (`_native.TileBook`, the Rust TiledEvictable's own); this module does what is
done *to* the tiles: it makes fresh ones, copies into them, adopts and releases them. Between built-in tiers (`tiled_bulk`) that
job is one batched span copy in Rust with the GIL released; otherwise each tile goes through
the object model (§5 route resolution, moves between tiers, `_sw_fill`), exactly as a Python tier
expects. Either way a residency request commits every tile swap of a phase at once in the
book, and any failure releases what was staged and changes nothing.

Old tiles stay readable until commit without any copy on the native path: the copy reads the
current tiles in place, and they are pinned, so nothing writes them meanwhile. The object-
model path moves a private copy instead, because a move releases its source. Tiles are
carriers or bare storages (`tiled_tiles`); every step below goes through that module.
"""
from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Iterable, Protocol, Sequence, cast

from strideweave import _autograd, _move_log, _native
from strideweave.carriers import tiled_bulk, tiled_tiles
from strideweave.carriers.base import RELEASING, Allocatable, Carrier, drop_claims, not_a_carrier, take_claim
from strideweave.carriers.dtype import DType
from strideweave.carriers.extension import PreparedTransfer, Unsupported, is_definition_backed
from strideweave.carriers.move import AwaitResult, _slot_bytes
from strideweave.carriers.tiled_tiles import Tile
from strideweave.carriers.tiled_types import (PRIMARY, SECONDARY, as_tile_set, AwaitProjection, AwaitResidency, TileSelection,
                                              TileSet, _release_quietly)
from strideweave.layout import Layout, Shape

__all__: list[str] = []


def _release_returned(c: Any, tiles: Sequence[Tile]) -> None:
    """Release tiles the book handed back (replaced, retired): outside the book's lock, as
    adopting and releasing carrier tiles take their carriers' state."""
    if tiles:
        tiled_tiles.release_tiles(tiles, c._ownership)


def _complete(handle: Any, error: BaseException | None, result: Any = None) -> None:
    if error is None:
        handle._succeed(result)
    else:
        handle._fail(error)


def _flat(carrier: Carrier, size: int) -> Any:
    from strideweave.tensor import Tensor
    return Tensor(carrier, 0, Layout.canonical(Shape(size)))


# ===== residency ================================================================================

def residency(c: Any, tiles: Any, target: str, protect: Iterable[int] = ()) -> AwaitResidency:
    """Start moving `tiles` (a TileSet or TileSelection) into the `target` tier. Under a
    residency policy a promote first evicts what the book picks (never a tile of `protect`),
    in the same engine job."""
    action = "promote tiles of" if target == PRIMARY else "evict tiles of"
    c._check_live(action)
    tiles = as_tile_set(tiles, "tiles")
    index_of = c._index_of
    try:
        requested = [index_of[coord] for coord in tiles.coordinates]
    except KeyError:  # a coordinate outside the grid: the checked lookup words the error
        requested = [c._coordinate_index(coord) for coord in tiles.coordinates]
    handle = _native.new_completion(AwaitResidency)
    book = c._book
    # Pins every requested tile (and the policy's victims), or refuses before any effect.
    request = book.request(requested, target == SECONDARY, list(protect))
    if request is None:
        handle._succeed(None)
        return handle
    try:
        phases = [_Phase(c, request, k) for k in range(request.phase_count)]
    except BaseException:
        book.finish(request)  # no pin outlives a request that never ran
        raise

    def job() -> None:
        error = None
        for phase in phases:
            error = phase.run(c, request)
            if error is not None:
                break  # the room a policy made stays made (values unchanged); the request fails
        # Unpinned before the handle completes, so a waiter it wakes finds the tiles free.
        book.finish(request)
        _complete(handle, error)

    try:
        _native.submit_python(handle, job)
    except BaseException:
        book.finish(request)
        raise
    return handle


class _Phase:
    """One tier change of a residency request (phase `k` of the book's request): the tiles
    it copies, read in place (pinned), into fresh tiles of the target tier; evicted clean
    tiles take their kept copies in the book's commit, with nothing copied."""

    def __init__(self, c: Any, request: Any, k: int) -> None:
        evicts, self.sources = request.phase(k)
        self.k = k
        self.target = SECONDARY if evicts else PRIMARY
        self.prototype = c._secondary if evicts else c._primary
        self.source_tier = c._primary if evicts else c._secondary
        self.native = (tiled_bulk.native_pair(type(self.source_tier), type(self.prototype))
                       and tiled_bulk.native_storage(self.prototype) is not None
                       and tiled_bulk.native_storage(self.source_tier) is not None)
        self.nbytes = len(self.sources) * c._tile_size * _slot_bytes(c.dtype())

    def run(self, c: Any, request: Any) -> BaseException | None:
        """Stage and commit; the failure (nothing of this phase changed), or None."""
        staged: list[Tile] = []
        copies: list[Carrier] = []
        start = time.perf_counter_ns()
        try:
            if self.sources and not (self.native and _stage_native(c, self.sources, c._makers[self.target], staged)):
                _stage_moves(c, self.sources, self.prototype, self.source_tier, staged, copies)
            # Adopted before the commit, outside the book's lock (adoption takes each tile's state).
            tiled_tiles.adopt_all(staged, c._ownership)
            replaced = c._book.commit(request, self.k, staged)
        except BaseException as exc:  # noqa: BLE001 - the request's terminal failure
            tiled_tiles.release_tiles(staged, c._ownership)
            for copy in copies:
                _release_quietly(copy)
            _move_log.residency(self.source_tier, self.prototype, self.nbytes, start, exc)
            return exc
        _release_returned(c, replaced)
        # One residency change: the tiles copied (clean tiles evicted without a copy count 0).
        _move_log.residency(self.source_tier, self.prototype, self.nbytes, start, None)
        return None


def _stage_native(c: Any, sources: list[Tile], maker: tiled_tiles.TierTiles, staged: list[Tile]) -> bool:
    """Make every fresh tile, then copy every moving tile into its fresh tile in one batched
    Rust copy (GIL released), reading the pinned current tiles in place. False, with nothing
    staged, when a tile turns out to have no Rust storage: the caller takes the object-model
    path for the whole request."""
    maker.fresh(len(sources), staged)
    storages = tiled_tiles.storages_of(sources)
    destinations = tiled_tiles.storages_of(staged)
    if storages is None or destinations is None:
        tiled_tiles.release_tiles(staged)
        staged.clear()
        return False
    _native.copy_storages(storages, destinations, c._tile_size)
    return True


def _stage_moves(c: Any, sources: list[Tile], prototype: Carrier, source_tier: Carrier, staged: list[Tile],
                 copies: list[Carrier]) -> None:
    """The object-model path: each tile's private copy moves into a fresh target-tier tile
    through a move between tiers (§5 resolution, graph construction off)."""
    from strideweave.carriers.move import _move_between_tiers
    with _autograd.no_grad():
        for tile in sources:
            copy = tiled_tiles.carrier_copy(tile, source_tier, c._tile_size)
            copies.append(copy)
            fresh = prototype.allocate_like(c._tile_size, mutable=True, empty=True)
            staged.append(fresh)
            _move_between_tiers(_flat(copy, c._tile_size), fresh)


# ===== projection ================================================================================

class _ProjectionClaim:
    """Held in a caller's destination while a projection fills it."""

    __slots__ = ()


class _ProjectionSource(Protocol):
    """What `check_projection` reads of the TiledEvictable (that module imports this one, so
    it cannot be named here)."""

    _logical: tuple[int, ...]
    _grid: tuple[int, ...]
    _tile: tuple[int, ...]
    _primary: Carrier

    def _check_live(self, action: str) -> None: ...

    def _is_full(self, tensor: Any) -> bool: ...

    def dtype(self) -> DType: ...


def check_projection(c: _ProjectionSource, tensor: Any, selection: Any, destination: Carrier | None) -> tuple[TileSelection, tuple[int, ...], bool]:
    """Projection argument checks in the specified order; returns (selection, compact shape,
    whether an empty destination must grow)."""
    from strideweave.tensor import Tensor

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
            raise not_a_carrier("destination", destination,
                                f"a {type(c._primary).__name__} carrier (the primary tier's exact class)")
        if destination.is_released():
            raise RuntimeError("the projection destination is released")
        if not destination.is_mutable():
            if destination.is_released():  # released by another thread since the check above
                raise RuntimeError("the projection destination is released")
            raise RuntimeError("the projection destination is not mutable")
        destination._sw_check_unclaimed("project into")
        if destination.dtype() is not c.dtype():
            raise TypeError(f"destination dtype {destination.dtype().name} is not the "
                            f"TiledEvictable's {c.dtype().name}")
        size = destination.size()
        if size < total:
            if size == 0 and (isinstance(destination, Allocatable) or is_definition_backed(destination)):
                grow = True
            elif destination.is_released() or destination._sw_claim is RELEASING or destination._sw_storage_gone():
                # Released by another thread since the check above: that is the error.
                raise RuntimeError("the projection destination is released")
            else:
                raise ValueError(f"destination is too small: {size} slots for a {total}-slot "
                                 "projection")
    return selection, compact, grow


def project(c: Any, tensor: Any, selection: Any, destination: Carrier | None) -> AwaitProjection:
    """Start gathering the selected tiles of the full `tensor` into one compact dense Tensor
    (on `destination`, or on a fresh primary-class carrier); returns at once."""
    from strideweave.tensor import Tensor

    selection, compact, grow = check_projection(c, tensor, selection, destination)
    total = math.prod(compact)
    selected = [c._coordinate_index(coord) for coord in selection.coordinates]
    book = c._book
    # Pins the selected tiles for reading in place (refused once released): a residency
    # request on them is refused meanwhile, and one already running keeps each tile it
    # replaces until this projection unpins.
    pin = book.pin_reading(selected)
    tile_of = dict(zip(selected, pin.tiles))

    def unpin() -> None:
        _release_returned(c, book.unpin(pin))
    owned_destination = destination is None
    claim = _ProjectionClaim()
    claimed: Carrier | None = None
    try:
        if destination is None:  # = owned_destination, tested on the variable so it narrows
            destination = c._primary.allocate_like(total, mutable=True, empty=True)
        # Checked and claimed in one step of the destination's state (before it grows, as a
        # move grows its claimed destination): of this projection and a racing move, release
        # or write of a caller's destination exactly one goes ahead.
        take_claim(destination, claim, "project into")
        claimed = destination
        if grow:
            if is_definition_backed(destination):
                from strideweave.carriers.extension import allocate_destination
                allocate_destination(destination, total)
            elif isinstance(destination, Allocatable):  # check_projection grows no other kind
                Carrier._sw_allocate_claimed(cast(Carrier, destination), claim, total)
        handle = _native.new_completion(AwaitProjection)
    except BaseException:
        if claimed is not None:
            drop_claims(claim, (claimed,))
        if owned_destination and destination is not None:
            _release_quietly(destination)
        unpin()
        raise
    layout = Layout.canonical(Shape(list(compact)))

    def finish(error: BaseException | None) -> None:
        """The projection's one terminal step (on whichever thread ran the gather)."""
        result = None
        if error is None:
            try:
                result = Tensor(destination, 0, layout)
            except BaseException as exc:  # noqa: BLE001
                error = exc
        drop_claims(claim, (destination,))
        if error is not None:
            if owned_destination:
                _release_quietly(destination)
            elif grow and isinstance(destination, Allocatable):
                with contextlib.suppress(Exception):
                    destination._allocate(0)
        unpin()  # before the handle completes, so a waiter it wakes finds the tiles free
        _complete(handle, error, result)

    def place_or_gather() -> None:
        """On an engine thread: the selected tiles placed in Rust when every end has a Rust
        storage (a tile read through a fetch, a Ray tile's snapshot, is read here too, so a
        lost object fails the handle), else the object-model gather."""
        try:
            placed = _native_placement(c, selection, destination, tile_of)
            if placed is not None:
                _native.submit_place_blocks(*placed, list(c._tile), list(compact), finish)
                return
            _gather(c, selection, destination, compact, tile_of)
        except BaseException as exc:  # noqa: BLE001 - the projection's terminal failure
            finish(exc)
        else:
            finish(None)

    try:
        placed = None
        if all(tiled_tiles.tile_storage(tile) is not None for tile in pin.tiles):
            placed = _native_placement(c, selection, destination, tile_of)  # no tile to fetch: at once
        if placed is not None:
            _native.submit_place_blocks(*placed, list(c._tile), list(compact), finish)
        else:
            _native.submit_python(handle, place_or_gather)
    except BaseException:
        drop_claims(claim, (destination,))
        if owned_destination:
            _release_quietly(destination)
        unpin()
        raise
    return handle


def _native_placement(c: Any, selection: TileSelection, destination: Carrier,
                      tile_of: dict[int, Tile]) -> tuple[list[Any], Any, list[int]] | None:
    """`(tile storages, destination storage, origins)`: each selected tile placed at its
    block of the compact array; None unless every end has a Rust storage."""
    dst = tiled_bulk.native_storage(destination)
    if dst is None:
        return None
    indices, origins = tiled_bulk.placement(selection.per_axis, c._grid, c._tile)
    sources = tiled_tiles.storages_of([tile_of[i] for i in indices])
    return None if sources is None else (sources, dst, origins)


def _gather(c: Any, selection: TileSelection, destination: Carrier, compact: tuple[int, ...],
            tile_of: dict[int, Tile]) -> None:
    """The object-model gather. Compact `y` takes source
    `x[a] = per_axis[a][y[a] // t[a]] * t[a] + y[a] % t[a]`: each selected tile, read in place
    through its hooks, into its block of the compact array."""
    tile_shape = c._tile
    shape = selection.compact_grid_shape
    for k in range(math.prod(shape)):
        block, coord, rest = [], [], k
        for axis, extent in zip(selection.per_axis, shape):
            rest, r = divmod(rest, extent)
            block.append(r)
            coord.append(axis[r])
        tile = tile_of[c._coordinate_index(tuple(coord))]
        values = tiled_tiles.read_all(tile, c._tile_size)
        for j, v in enumerate(values):
            s, mul, rest = 0, 1, j
            for b, t, extent in zip(block, tile_shape, compact):
                rest, r = divmod(rest, t)
                s += (b * t + r) * mul
                mul *= extent
            destination._sw_fill(s, v)


# ===== the route to CPU ============================================================================

def prepare_to_cpu(request: Any) -> Any:
    """`TransferProvider.prepare` of "tiled.to_cpu": a full tensor gathers every tile, read
    where it lives (secondary tiles in place), into destination slots `[0, size)`."""
    source = request.tensor.carrier
    if not source._is_full(request.tensor):
        return Unsupported("only a full tensor (offset 0, the identity layout over the logical "
                           "shape) moves out of a TiledEvictable")
    if source._book.is_pending():
        raise RuntimeError("cannot move a TiledEvictable while a residency request or projection "
                           "is pending")
    destination = request.destination

    def submit() -> Any:
        dst = tiled_bulk.native_storage(destination)
        book = source._book
        # Every tile pinned whichever path gathers, so no residency request swaps out (and
        # releases) a tile under the copy; refused like prepare when a request or projection
        # started since: of the two, exactly one goes ahead.
        pin = book.pin_all()
        tiles = pin.tiles
        try:
            # Reading a tile may fetch it (a Ray tile's snapshot); the pins keep every tile in
            # place meanwhile.
            sources = None if dst is None else tiled_tiles.storages_of(tiles)
        except BaseException:
            book.unpin(pin)
            raise
        if sources is None:
            try:
                for index, tile in enumerate(tiles):
                    values = tiled_tiles.read_all(tile, source._tile_size)
                    for s, v in zip(source._tile_slots(index), values):
                        destination._sw_fill(s, v)
            finally:
                book.unpin(pin)
            return None
        # One engine job; the move waits on the returned completion. The tiles stay pinned
        # meanwhile, so no residency request swaps one out under the copy.
        done = _native.new_completion(AwaitResult)

        def then(error: BaseException | None) -> None:
            book.unpin(pin)
            _complete(done, error)
        try:
            _native.submit_place_blocks(sources, dst, source._origins, list(source._tile),
                                        list(source._logical), then)
        except BaseException:
            book.unpin(pin)
            raise
        return done

    return PreparedTransfer(submit)
