"""How each tier of a TiledEvictable holds its tiles (extension-and-tiling.md §7).

A tile is one of two things:
- a bare Rust storage, when the tier's class is exactly CPU or FileBacked: a `HostStorage` per
  CPU tile, and for FileBacked a `FileRegion` of one `FileSlab` per tier (one file for all of
  the tier's tiles, removed whenever the tier holds none, instead of a file created and
  unlinked per tile). Such a tile is what `allocate_like` of the tier would hold, minus the
  carrier object around it, which nobody could observe: a TiledEvictable owns its tiles and
  never hands them out, and the exact built-in classes run no user hook;
- a carrier made by the tier's own factories (`new_like`, `allocate_like`) for every other
  class, a subclass of CPU or FileBacked included, owned by the TiledEvictable's ownership
  token, so a Python-defined tier sees each tile's life through its hooks exactly as §7
  describes it.

Both kinds read, write, copy and release through the functions below; `TierTiles` makes
fresh tiles of one tier. A carrier tile of another class may declare two capabilities, checked
with isinstance against the Protocols below (never probed by attribute name):
`HostReadableTile` (its slots land in a fresh bare HostStorage in one native copy, so reads of
the whole tile are bulk and its tier's tiles join the batched Rust copies as sources) and
`ShareableTile` (immutable, so a private copy may share its storage).
"""
from __future__ import annotations

import contextlib
import itertools
import os
import threading
from typing import Any, Protocol, Sequence, Union, cast, runtime_checkable

from strideweave import _native
from strideweave.carriers import tiled_bulk
from strideweave.carriers._filebacked_dir import filebacked_directory
from strideweave.carriers.base import Carrier
from strideweave.carriers.cpu import CPU
from strideweave.carriers.dtype import STORAGE_KIND, DType
from strideweave.carriers.file_backed import FileBacked
from strideweave.carriers.ownership import Ownership
from strideweave.carriers.tiled_types import _release_quietly

__all__: list[str] = []

Bare = Union[_native.HostStorage, _native.FileRegion]
Tile = Union[Carrier, Bare]

_slab_names = itertools.count()


@runtime_checkable
class HostReadableTile(Protocol):
    """A carrier tile whose slots can be read in bulk: `_sw_host_snapshot()` returns a fresh
    bare HostStorage of the tile's storage kind holding exactly what `tile[k]` reads for every
    slot, landed with one checked native copy (`strideweave.ray`: from the local view of the
    tile's sealed object). Only ever a copy source: nothing writes through it into the tile."""

    def _sw_host_snapshot(self) -> _native.HostStorage: ...


@runtime_checkable
class ShareableTile(Protocol):
    """An immutable carrier tile that can share its storage: `_sw_shared_copy()` returns a new
    carrier of the same class over the same storage, whose release drops only its own
    reference (`strideweave.ray`: a sealed object). What a tier move of a private copy needs,
    without copying a byte."""

    def _sw_shared_copy(self) -> Carrier: ...


def tile_storage(tile: Tile) -> Any:
    """The Rust storage a batched copy reads or writes for `tile`, or None when the tile is a
    carrier whose element path is not the built-in one."""
    return tiled_bulk.native_storage(tile) if isinstance(tile, Carrier) else tile


def read_slot(tile: Tile, k: int) -> Any:
    return tile[k] if isinstance(tile, Carrier) else tile.get(k)


def write_slot(tile: Tile, ownership: Ownership, k: int, v: Any) -> None:
    if isinstance(tile, Carrier):
        tile._sw_write_as_owner(ownership, k, v)
    else:
        tile.set(k, v)


def read_all(tile: Tile, size: int) -> list[Any]:
    if not isinstance(tile, Carrier):
        return tile.to_list()
    if isinstance(tile, HostReadableTile):
        return tile._sw_host_snapshot().to_list()
    return [tile[j] for j in range(size)]


_BARE_TYPES = frozenset((_native.HostStorage, _native.FileRegion))


def all_bare(tiles: Sequence[Tile]) -> bool:
    """Whether every tile is a bare storage: one pass over the tiles' types in C, since a
    request's bookkeeping asks this of a thousand tiles several times."""
    return set(map(type, tiles)) <= _BARE_TYPES


def _split(tiles: Sequence[Tile]) -> tuple[list[Bare], list[Carrier]]:
    if all_bare(tiles):
        return cast("list[Bare]", list(tiles)), []
    bare: list[Bare] = []
    carriers: list[Carrier] = []
    for tile in tiles:
        if isinstance(tile, Carrier):
            carriers.append(tile)
        else:
            bare.append(tile)
    return bare, carriers


def adopt_all(tiles: Sequence[Tile], ownership: Ownership) -> None:
    """Record the TiledEvictable as the owner of every carrier tile (a bare storage has none)."""
    if all_bare(tiles):
        return
    for tile in tiles:
        if isinstance(tile, Carrier):
            ownership.take(tile)


def release_tiles(tiles: Sequence[Tile], ownership: Ownership | None = None) -> None:
    """Release tiles quietly: bare ones in one native call (a slab's regions together),
    carriers one by one (disowned first when `ownership` is given)."""
    bare, carriers = _split(tiles)
    with contextlib.suppress(Exception):  # a release failure leaves nothing to undo
        _native.release_storages(bare)
    for carrier in carriers:
        _release_quietly(carrier, ownership)


def release_all(tiles: Sequence[Tile]) -> None:
    """Release every tile (a TiledEvictable's release, after disowning them): bare ones in one
    native call, carriers one by one; the first failure propagates."""
    bare, carriers = _split(tiles)
    _native.release_storages(bare)
    for carrier in carriers:
        carrier.release()


def storages_of(tiles: Sequence[Tile]) -> list[Any] | None:
    """The Rust storage a batched copy reads for every tile (the tiles themselves when all are
    bare), or None when one has none. A `HostReadableTile` gives a fresh snapshot of its slots,
    which is right only as a copy source: destinations are always fresh tiles of a tier that
    has Rust storage (`tiled_bulk.native_storage` of its prototype is checked first)."""
    if all_bare(tiles):
        return list(tiles)
    storages = [source_storage(tile) for tile in tiles]
    return None if any(s is None for s in storages) else storages


def source_storage(tile: Tile) -> Any:
    """The Rust storage a batched copy reads `tile` from: its own (`tile_storage`), else a
    snapshot of a `HostReadableTile`, else None."""
    storage = tile_storage(tile)
    if storage is None and isinstance(tile, HostReadableTile):
        return tile._sw_host_snapshot()
    return storage


def carrier_copy(tile: Tile, tier: Carrier, size: int) -> Carrier:
    """A private dense copy of `tile` as a carrier of its tier's class (what the object-model
    path moves, since a move releases its source): in Rust for a bare or built-in tile,
    through the tile's hooks otherwise."""
    if not isinstance(tile, Carrier):
        copy = tier.allocate_like(size, mutable=True, empty=True)
        try:
            _native.copy_storages([tile], [copy._sw_storage()], size)
        except BaseException:
            copy.release()
            raise
        return copy
    made = tiled_bulk.snapshot(tile)
    if made is not None:
        return made
    if isinstance(tile, ShareableTile):
        return tile._sw_shared_copy()
    return tile.new_like([tile[k] for k in range(size)], mutable=True)


class TierTiles:
    """Makes the fresh tiles of one tier: bare storages for the exact built-in classes,
    carriers from the tier's `allocate_like` otherwise."""

    __slots__ = ("tier", "size", "kind", "bare", "_slab", "_slab_lock")
    tier: Carrier
    size: int
    kind: str
    bare: bool

    def __init__(self, tier: Carrier, tile_size: int, dtype: DType) -> None:
        self.tier = tier
        self.size = tile_size
        self.kind = STORAGE_KIND[dtype]
        self.bare = type(tier) in (CPU, FileBacked)
        self._slab: Any = None
        self._slab_lock = threading.Lock()  # requests of one TiledEvictable run concurrently

    def fresh(self, count: int, into: list[Tile]) -> None:
        """Append `count` fresh tiles of unspecified contents to `into` (appended one by one
        where they are made one by one, so a caller that fails part-way can release those
        made so far)."""
        if not self.bare:
            for _ in range(count):
                into.append(self.tier.allocate_like(self.size, mutable=True, empty=True))
        elif type(self.tier) is CPU:
            into.extend(_native.HostStorage.many(self.kind, self.size, count, False))
        elif count:
            into.extend(self._current_slab().allocate(count))

    def _current_slab(self) -> Any:
        """The tier's slab, made on first use, and again in a fork()ed child (only the
        creating process may allocate from a slab: the file is shared with the parent)."""
        with self._slab_lock:
            slab = self._slab
            if slab is None or not slab.is_creator():
                name = f"tiles-{os.getpid()}-{next(_slab_names)}.bin"
                slab = self._slab = _native.FileSlab(str(filebacked_directory() / name), self.kind, self.size)
            return slab


def split(seed: Carrier, grid: Sequence[int], tile_shape: Sequence[int], maker: TierTiles, tiles: list[Tile]) -> bool:
    """Cut a built-in seeding tier into fresh tiles of `maker`, appended to `tiles`, with one
    Rust block copy: what `new_like` of each tile's values would give. False (nothing made)
    when the seed is not built-in, or its tiles are carriers of a class whose factories are
    its own (those are made by the caller through `new_like`)."""
    storage = tiled_bulk.native_storage(seed)
    if storage is None or not (maker.bare or tiled_bulk.builtin_factories(type(seed))):
        return False
    count = 1
    for g in grid:
        count *= g
    maker.fresh(count, tiles)
    logical = [g * t for g, t in zip(grid, tile_shape)]
    _, origins = tiled_bulk.placement([range(g) for g in grid], grid, tile_shape)
    blocks = [(storage, origin, tile_storage(tile), 0) for origin, tile in zip(origins, tiles)]
    _native.copy_blocks(blocks, list(tile_shape), logical, list(tile_shape))
    return True
