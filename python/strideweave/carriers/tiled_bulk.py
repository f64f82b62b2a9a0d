"""The native data path of the tiled tier: when a tile copy may run as a batched span copy in
Rust, and the span and block lists that describe it (`_native.copy_spans` and friends).

A tile copy may bypass Python exactly when Python would have done nothing but move bytes
between built-in storages:
- each end is a `HostStorage` or `FileStorage` behind a class whose element path (reads,
  writes, `_sw_fill`) is the built-in one, so no user hook is skipped;
- for a residency request, the pair of tier classes resolves (§5, legacy registry) to a
  built-in bulk or elementwise operation, so no user MoveOperation or provider is skipped.
Anything else, and every tier defined in Python, keeps the object-model path.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from strideweave import _native
from strideweave.carriers._builtin import RustBackedCarrier
from strideweave.carriers.base import Carrier
from strideweave.carriers.cpu import CPU
from strideweave.carriers.file_backed import FileBacked

__all__: list[str] = []

_STORAGES = (_native.HostStorage, _native.FileStorage)
_FACTORIES = {CPU: (CPU.new_like, CPU.allocate_like), FileBacked: (FileBacked.new_like, FileBacked.allocate_like)}


def native_storage(carrier: Carrier) -> Any:
    """The carrier's Rust storage when its element path is the built-in one, else None."""
    cls = type(carrier)
    if not getattr(cls, "_sw_fast_access", False) or cls._sw_fill is not RustBackedCarrier._sw_fill:
        return None
    storage = carrier._sw_storage()
    return storage if isinstance(storage, _STORAGES) else None


def _builtin_factories(cls: type) -> bool:
    """`new_like` and `allocate_like` are those of the built-in base (a fresh tile of the
    class is then a plain storage of the same kind)."""
    for base, (new_like, allocate_like) in _FACTORIES.items():
        if issubclass(cls, base):
            return cls.new_like is new_like and cls.allocate_like is allocate_like
    return False


def native_pair(source_class: type, target_class: type) -> bool:
    """Whether a tile move from `source_class` to `target_class` resolves to a built-in byte
    copy (the storages themselves are checked per tile with `native_storage`)."""
    from strideweave.carriers import move
    try:
        route = move._resolve(source_class, target_class)
    except NotImplementedError:
        return False
    return route.decision is None and route.operation_class in (
        move.CpuToFileBackedMoveOperation, move.FileBackedToCpuMoveOperation, move.ElementwiseMoveOperation)


def snapshot(tile: Carrier) -> Carrier | None:
    """A private dense copy of a built-in tile (same class), copied in Rust; None when the
    tile is not built-in and the caller must copy through its hooks."""
    storage = native_storage(tile)
    if storage is None or not _builtin_factories(type(tile)):
        return None
    n = tile.size()
    copy = tile.allocate_like(n, mutable=True, empty=True)
    try:
        _native.copy_spans([(storage, 0, copy._sw_storage(), 0, n)])
    except BaseException:
        copy.release()
        raise
    return copy


def split(seed: Carrier, grid: Sequence[int], tile_shape: Sequence[int], tiles: list) -> bool:
    """Split a built-in seeding tier into fresh tiles of its class, appended to `tiles`, with
    one Rust block copy: what `new_like` of each tile's values would give. False (nothing
    made) when the seed is not built-in."""
    storage = native_storage(seed)
    if storage is None or not _builtin_factories(type(seed)):
        return False
    size = math.prod(tile_shape)
    for _ in range(math.prod(grid)):
        tiles.append(seed.allocate_like(size, mutable=True, empty=True))
    logical = [g * t for g, t in zip(grid, tile_shape)]
    strides = dense_strides(logical)
    blocks = [(storage, block_origin(coord, tile_shape, strides), tile._sw_storage(), 0)
              for coord, tile in zip(grid_coordinates(grid), tiles)]
    _native.copy_blocks(blocks, list(tile_shape), logical, list(tile_shape))
    return True


def dense_strides(shape: Sequence[int]) -> list[int]:
    """First-mode-fastest strides of a dense array of `shape`."""
    strides, acc = [], 1
    for extent in shape:
        strides.append(acc)
        acc *= extent
    return strides


def block_origin(block: Sequence[int], tile_shape: Sequence[int], strides: Sequence[int]) -> int:
    """Slot of the first element of block `block` (a tile coordinate in some grid of tiles)
    in a dense array with `strides`."""
    return sum(b * t * s for b, t, s in zip(block, tile_shape, strides))


def grid_coordinates(grid: Sequence[int]) -> list[tuple[int, ...]]:
    """Every coordinate of `grid`, first mode fastest."""
    out = []
    for k in range(math.prod(grid)):
        coord = []
        for extent in grid:
            k, r = divmod(k, extent)
            coord.append(r)
        out.append(tuple(coord))
    return out
