"""The native data path of the tiled tier: when a tile copy may run as a batched span copy in
Rust, and the placement of tiles in a dense array that block copies need
(`_native.copy_spans`, `copy_blocks` and friends).

A tile copy may bypass Python exactly when Python would have done nothing but move bytes
between built-in storages:
- each end is a bare tile storage (`tiled_tiles`), or a `HostStorage` or `FileStorage` behind
  a class whose element path (reads, writes, `_sw_fill`) is the built-in one, so no user hook
  is skipped;
- for a residency request, the pair of tier classes resolves (§5, legacy registry) to a
  built-in bulk or elementwise operation, so no user MoveOperation or provider is skipped.
Anything else, and every tier defined in Python, keeps the object-model path.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from strideweave import _native
from strideweave.carriers._builtin import RustBackedCarrier
from strideweave.carriers.base import Carrier
from strideweave.carriers.cpu import CPU
from strideweave.carriers.file_backed import FileBacked

__all__: list[str] = []

_STORAGES = (_native.HostStorage, _native.FileStorage)
_FACTORIES: dict[type[RustBackedCarrier], tuple[Callable[..., Carrier], Callable[..., Carrier]]] = {
    CPU: (CPU.new_like, CPU.allocate_like), FileBacked: (FileBacked.new_like, FileBacked.allocate_like)}


_NATIVE_CLASSES: dict[type, bool] = {}


def _native_class(cls: type) -> bool:
    """The class keeps the built-in element path (decided once per class, like
    `_sw_fast_access` itself)."""
    ok = _NATIVE_CLASSES.get(cls)
    if ok is None:
        ok = _NATIVE_CLASSES[cls] = bool(getattr(cls, "_sw_fast_access", False)
                                         and getattr(cls, "_sw_fill", None) is RustBackedCarrier._sw_fill)
    return ok


def native_storage(carrier: Carrier) -> Any:
    """The carrier's Rust storage when its element path is the built-in one, else None."""
    if not _native_class(type(carrier)):
        return None
    storage = carrier._sw_storage()
    return storage if type(storage) in _STORAGES else None


def placement(per_axis: Sequence[Sequence[int]], grid: Sequence[int], tile_shape: Sequence[int]) -> tuple[list[int], list[int]]:
    """For the Cartesian product of `per_axis` (first mode fastest): each selected tile's
    index in `grid` and the slot of its first element in the dense compact array."""
    compact = [len(axis) * t for axis, t in zip(per_axis, tile_shape)]
    indices, origins = [0], [0]
    grid_mul = 1
    for axis, g, t, stride in zip(per_axis, grid, tile_shape, dense_strides(compact)):
        indices = [i + q * grid_mul for q in axis for i in indices]
        origins = [o + b * t * stride for b in range(len(axis)) for o in origins]
        grid_mul *= g
    return indices, origins


def builtin_factories(cls: type) -> bool:
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
    if storage is None or not builtin_factories(type(tile)):
        return None
    n = tile.size()
    copy = tile.allocate_like(n, mutable=True, empty=True)
    try:
        _native.copy_spans([(storage, 0, copy._sw_storage(), 0, n)])
    except BaseException:
        copy.release()
        raise
    return copy


def dense_strides(shape: Sequence[int]) -> list[int]:
    """First-mode-fastest strides of a dense array of `shape`."""
    strides, acc = [], 1
    for extent in shape:
        strides.append(acc)
        acc *= extent
    return strides
