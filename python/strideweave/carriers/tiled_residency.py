"""The work of a TiledEvictable (extension-and-tiling.md §7): residency requests, projections
and the "tiled.to_cpu" transfer. `tiled_evictable.py` validates the carrier and delegates here.

Every request pins the tiles it covers (writes to them and conflicting requests raise
RuntimeError) and runs as one job on the engine. Between built-in tiers (`tiled_bulk`) that
job is one batched span copy in Rust with the GIL released; otherwise each tile goes through
the object model (§5 route resolution, moves between tiers, `_sw_fill`), exactly as a Python tier
expects. Either way a residency request commits every tile swap at once under the carrier's
lock, and any failure releases what was staged and changes nothing.

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


def _pin(c: Any, indices: Sequence[int], reading: bool = False) -> None:
    """Pin `indices` for one request; the caller holds `c._state_lock`. A projection pins
    `reading`: it reads the tiles in place, so a residency request already pending on them
    must not release them under it (see `_commit`)."""
    pins = c._pins
    for i in indices:
        pins[i] += 1
    if reading:
        readers = c._readers
        for i in indices:
            readers[i] += 1
    c._pending += 1


def _unpin(c: Any, indices: Sequence[int], reading: bool = False) -> None:
    retired: list[Tile] = []
    with c._state_lock:
        pins = c._pins
        for i in indices:
            pins[i] -= 1
        if reading:
            readers, retiring = c._readers, c._retired
            for i in indices:
                readers[i] -= 1
                if not readers[i] and i in retiring:
                    retired.extend(retiring.pop(i))
        c._pending -= 1
    # Tiles a commit replaced while this projection read them: nobody reads them now.
    tiled_tiles.release_tiles(retired, c._ownership)


def _commit(c: Any, moving: list[int], staged: list[Tile], target: str,
            reused: dict[int, Tile]) -> None:
    """A residency request's commit: every swap at once, under the lock writers and readers
    of state take. `moving` minus `reused` take the `staged` tiles in order; an evicted clean
    tile takes its retained copy from `reused`. A replaced tile is released, unless a
    projection still reads it in place (it started while this request was pending): that one
    is retired until the last reader unpins; or, promoted with retain_clean, it is kept as
    the tile's clean copy."""
    tiles, where, ownership = c._tiles, c._where, c._ownership
    clean_copies, readers, retired = c._clean_copies, c._readers, c._retired
    keep = target == PRIMARY and c._retain_clean
    fresh_tiles = iter(staged)
    # Adopting and releasing carrier tiles take the global carrier state lock, which a public
    # write holds while it waits for `c._state_lock`: both happen outside `c._state_lock`.
    tiled_tiles.adopt_all(staged, ownership)
    with c._state_lock:
        replaced = []
        for i in moving:
            if keep:
                clean_copies[i] = tiles[i]
            elif readers[i]:
                retired.setdefault(i, []).append(tiles[i])
            else:
                replaced.append(tiles[i])
            if i in reused:  # the clean copy is the current tile again
                tiles[i] = clean_copies.pop(i)
            else:
                tiles[i] = next(fresh_tiles)
            where[i] = target
    tiled_tiles.release_tiles(replaced, ownership)


def _finish(c: Any, indices: Sequence[int], handle: Any, error: BaseException | None,
            result: Any = None, reading: bool = False) -> None:
    """A request's terminal step: unpin its tiles, then complete its handle with `result` or
    `error`, in that order, so a waiter the handle wakes finds the tiles free."""
    _unpin(c, indices, reading)
    if error is None:
        handle._succeed(result)
    else:
        handle._fail(error)


def _flat(carrier: Carrier, size: int) -> Any:
    from strideweave.tensor import Tensor
    return Tensor(carrier, 0, Layout.canonical(Shape(size)))


# ===== residency ================================================================================

def _make_room(c: Any, requested: list[int], moving: list[int], protect: Iterable[int]) -> list[int]:
    """The primary tiles a promote of `moving` must evict first to stay within the carrier's
    residency policy (the caller holds `c._state_lock`): none if it fits; else unpinned
    primary tiles outside the request and `protect`, clean before dirty, least recently used
    first. ValueError when the request alone exceeds the budget, RuntimeError when pinned
    tiles leave too little to evict; either before any effect."""
    budget = c._budget_tiles
    if len(requested) > budget:
        raise ValueError(f"cannot promote {len(requested)} tiles of a TiledEvictable: they need "
                         f"{len(requested) * c._tile_bytes} bytes, over its residency_policy budget of "
                         f"{c._policy.budget}")
    resident = sum(1 for w in c._where if w == PRIMARY) + len(c._promoting)
    excess = resident + len(moving) - budget
    if excess <= 0:
        return []
    keep = set(requested) | set(protect)
    candidates = [i for i, w in enumerate(c._where)
                  if w == PRIMARY and not c._pins[i] and i not in keep and i not in c._promoting]
    if len(candidates) < excess:
        raise RuntimeError(f"cannot promote tiles of a TiledEvictable within its residency_policy budget: "
                           f"{excess} tiles must leave the primary tier first and only {len(candidates)} "
                           "are neither pinned nor in use")
    last, clean = c._last_use, c._clean_copies
    candidates.sort(key=lambda i: (i not in clean, last.get(i, 0)))
    return candidates[:excess]


def residency(c: Any, tiles: Any, target: str, protect: Iterable[int] = ()) -> AwaitResidency:
    """Start moving `tiles` (a TileSet or TileSelection) into the `target` tier. Under a
    residency policy a promote first evicts what `_make_room` picks (never a tile of
    `protect`), in the same engine job."""
    action = "promote tiles of" if target == PRIMARY else "evict tiles of"
    c._check_live(action)
    tiles = as_tile_set(tiles, "tiles")
    index_of = c._index_of
    try:
        requested = [index_of[coord] for coord in tiles.coordinates]
    except KeyError:  # a coordinate outside the grid: the checked lookup words the error
        requested = [c._coordinate_index(coord) for coord in tiles.coordinates]
    handle = _native.new_completion(AwaitResidency)
    with c._state_lock:
        c._check_live(action)  # again, atomically with the pins: a release may have run since
        pins, where = c._pins, c._where
        pinned = [i for i in requested if pins[i]]
        if pinned:
            raise RuntimeError(f"cannot {action} a TiledEvictable: tile {c._coordinate_of(pinned[0])} "
                               "is pinned by a pending residency request or projection")
        moving = [i for i in requested if where[i] != target]
        policy = c._policy is not None and target == PRIMARY
        if policy:
            c._touch(requested)
        if not moving:
            handle._succeed(None)
            return handle
        victims = _make_room(c, requested, moving, protect) if policy else []
        pinned_here = requested + victims
        _pin(c, pinned_here)
        if policy:
            c._promoting.update(moving)
        # Evicting clean tiles: their retained copies become current, nothing is copied. The
        # pins keep every write (which would drop a copy) out until the commit.
        phases = [_Phase(c, victims, SECONDARY), _Phase(c, moving, target)] if victims else [_Phase(c, moving, target)]

    def job() -> None:
        try:
            for phase in phases:
                error = phase.run(c)
                if error is not None:
                    # The room a policy made stays made (values unchanged); the request fails.
                    _finish(c, pinned_here, handle, error)
                    return
            _finish(c, pinned_here, handle, None)
        finally:
            if policy:
                with c._state_lock:
                    c._promoting.difference_update(moving)

    try:
        _native.submit_python(handle, job)
    except BaseException:
        if policy:
            with c._state_lock:
                c._promoting.difference_update(moving)
        _unpin(c, pinned_here)
        raise
    return handle


class _Phase:
    """One tier change of a residency request: `moving` into `target`, made under
    `c._state_lock` at construction (which clean copies an eviction reuses)."""

    def __init__(self, c: Any, moving: list[int], target: str) -> None:
        self.moving, self.target = moving, target
        clean_copies = c._clean_copies
        self.reused = ({i: clean_copies[i] for i in moving if i in clean_copies}
                       if target != PRIMARY and clean_copies else {})
        self.copying = [i for i in moving if i not in self.reused]
        self.prototype = c._primary if target == PRIMARY else c._secondary
        self.source_tier = c._secondary if target == PRIMARY else c._primary
        self.native = (tiled_bulk.native_pair(type(self.source_tier), type(self.prototype))
                       and tiled_bulk.native_storage(self.prototype) is not None
                       and tiled_bulk.native_storage(self.source_tier) is not None)
        self.nbytes = len(self.copying) * c._tile_size * _slot_bytes(c.dtype())

    def run(self, c: Any) -> BaseException | None:
        """Stage and commit; the failure (nothing of this phase changed), or None."""
        staged: list[Tile] = []
        copies: list[Carrier] = []
        start = time.perf_counter_ns()
        try:
            if self.copying and not (self.native and _stage_native(c, self.copying, c._makers[self.target], staged)):
                _stage_moves(c, self.copying, self.prototype, self.source_tier, staged, copies)
            _commit(c, self.moving, staged, self.target, self.reused)
        except BaseException as exc:  # noqa: BLE001 - the request's terminal failure
            tiled_tiles.release_tiles(staged, c._ownership)
            for copy in copies:
                _release_quietly(copy)
            _move_log.residency(self.source_tier, self.prototype, self.nbytes, start, exc)
            return exc
        # One residency change: the tiles copied (clean tiles evicted without a copy count 0).
        _move_log.residency(self.source_tier, self.prototype, self.nbytes, start, None)
        return None


def _stage_native(c: Any, moving: list[int], maker: tiled_tiles.TierTiles, staged: list[Tile]) -> bool:
    """Make every fresh tile, then copy every moving tile into its fresh tile in one batched
    Rust copy (GIL released), reading the pinned current tiles in place. False, with nothing
    staged, when a tile turns out to have no Rust storage: the caller takes the object-model
    path for the whole request."""
    maker.fresh(len(moving), staged)
    tiles = c._tiles
    sources = tiled_tiles.storages_of([tiles[i] for i in moving])
    destinations = tiled_tiles.storages_of(staged)
    if sources is None or destinations is None:
        tiled_tiles.release_tiles(staged)
        staged.clear()
        return False
    _native.copy_storages(sources, destinations, c._tile_size)
    return True


def _stage_moves(c: Any, moving: list[int], prototype: Carrier, source_tier: Carrier, staged: list[Tile],
                 copies: list[Carrier]) -> None:
    """The object-model path: each tile's private copy moves into a fresh target-tier tile
    through a move between tiers (§5 resolution, graph construction off)."""
    from strideweave.carriers.move import _move_between_tiers
    with _autograd.no_grad():
        for i in moving:
            copy = tiled_tiles.carrier_copy(c._tiles[i], source_tier, c._tile_size)
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
    with c._state_lock:
        c._check_live("project")
        _pin(c, selected, reading=True)
        if c._policy is not None:
            c._touch(selected)
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
        _unpin(c, selected, reading=True)
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
        _finish(c, selected, handle, error, result, reading=True)

    def place_or_gather() -> None:
        """On an engine thread: the selected tiles placed in Rust when every end has a Rust
        storage (a tile read through a fetch, a Ray tile's snapshot, is read here too, so a
        lost object fails the handle), else the object-model gather."""
        try:
            placed = _native_placement(c, selection, destination)
            if placed is not None:
                _native.submit_place_blocks(*placed, list(c._tile), list(compact), finish)
                return
            _gather(c, selection, destination, compact)
        except BaseException as exc:  # noqa: BLE001 - the projection's terminal failure
            finish(exc)
        else:
            finish(None)

    try:
        placed = None
        if all(tiled_tiles.tile_storage(c._tiles[i]) is not None for i in selected):
            placed = _native_placement(c, selection, destination)  # no tile to fetch: at once
        if placed is not None:
            _native.submit_place_blocks(*placed, list(c._tile), list(compact), finish)
        else:
            _native.submit_python(handle, place_or_gather)
    except BaseException:
        drop_claims(claim, (destination,))
        if owned_destination:
            _release_quietly(destination)
        _unpin(c, selected, reading=True)
        raise
    return handle


def _native_placement(c: Any, selection: TileSelection, destination: Carrier) -> tuple[list[Any], Any, list[int]] | None:
    """`(tile storages, destination storage, origins)`: each selected tile placed at its
    block of the compact array; None unless every end has a Rust storage."""
    dst = tiled_bulk.native_storage(destination)
    if dst is None:
        return None
    indices, origins = tiled_bulk.placement(selection.per_axis, c._grid, c._tile)
    sources = tiled_tiles.storages_of([c._tiles[i] for i in indices])
    return None if sources is None else (sources, dst, origins)


def _gather(c: Any, selection: TileSelection, destination: Carrier, compact: tuple[int, ...]) -> None:
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
        tile = c._tiles[c._coordinate_index(tuple(coord))]
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
    if source._pending:
        raise RuntimeError("cannot move a TiledEvictable while a residency request or projection "
                           "is pending")
    destination = request.destination

    def submit() -> Any:
        every = range(len(source._tiles))
        dst = tiled_bulk.native_storage(destination)
        with source._state_lock:
            if source._pending:  # a request started since prepare: refuse, as prepare does
                raise RuntimeError("cannot move a TiledEvictable while a residency request or "
                                   "projection is pending")
            # Pinned whichever path gathers, so no residency request swaps out (and releases)
            # a tile under the copy: of the two, exactly one goes ahead.
            _pin(source, every)
        try:
            # Outside the lock: reading a tile may fetch it (a Ray tile's snapshot), and the
            # pins keep every tile in place meanwhile.
            sources = None if dst is None else tiled_tiles.storages_of(source._tiles)
        except BaseException:
            _unpin(source, every)
            raise
        if sources is None:
            try:
                for index, tile in enumerate(source._tiles):
                    values = tiled_tiles.read_all(tile, source._tile_size)
                    for s, v in zip(source._tile_slots(index), values):
                        destination._sw_fill(s, v)
            finally:
                _unpin(source, every)
            return None
        # One engine job; the move waits on the returned completion. The tiles stay pinned
        # meanwhile, so no residency request swaps one out under the copy.
        done = _native.new_completion(AwaitResult)

        def then(error: BaseException | None) -> None:
            _finish(source, every, done, error)
        try:
            _native.submit_place_blocks(sources, dst, source._origins, list(source._tile),
                                        list(source._logical), then)
        except BaseException:
            _unpin(source, every)
            raise
        return done

    return PreparedTransfer(submit)
