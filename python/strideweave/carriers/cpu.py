"""The CPU carrier: host memory owned by the carrier or wrapped around a caller's pointer."""
from __future__ import annotations

from typing import Any, Iterable

from strideweave import _native
from strideweave.carriers._builtin import RustBackedCarrier
from strideweave.carriers._sizes import KIND_BYTES, check_storage_size
from strideweave.carriers.base import check_factory_dtype, check_size_argument
from strideweave.carriers.dtype import STORAGE_KIND, DType, storage_zero

__all__ = ["CPU"]

_CPU_DTYPES = (DType.Float32, DType.Int32, DType.Bool)


class CPU(RustBackedCarrier):
    """Host memory: 64-byte aligned and zeroed unless `empty=True`, freed on release.

    A size beyond 2**63 - 1 bytes is an OverflowError (README, "Sizes"); a representable size
    the system cannot supply is a MemoryError.

    With `pointer=`, the carrier wraps `size` slots of caller-owned memory that it never
    copies, initialises or frees. Warning: the caller must keep that memory alive (not freed,
    moved or resized) until the carrier is released and every tensor, move and DLPack export
    using it has finished. The address of a temporary (`pointer=np.zeros(n).ctypes.data`)
    makes the carrier silently read and write freed memory; keep a reference to the owner
    (README, "Wrapping memory you own").
    Exports through DLPack as device (1, 0).
    """

    _sw_is_builtin = True  # its plain subclasses move as it does (`_builtin._sw_plain_move`)

    def __init__(self, size: int, pointer: int | None = None, *, mutable: bool = True,
                 dtype: DType = DType.Float32, empty: bool = False) -> None:
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"size must be an int, not {type(size).__name__}")
        if pointer is not None and (isinstance(pointer, bool) or not isinstance(pointer, int)):
            raise TypeError(f"pointer must be an int or None, not {type(pointer).__name__}")
        if size < 0:
            raise ValueError(f"size must be non-negative, got {size}")
        if pointer is not None and pointer <= 0:
            raise ValueError(f"pointer must be positive, got {pointer}")
        check_factory_dtype(type(self), dtype, _CPU_DTYPES)
        kind = STORAGE_KIND[dtype]
        check_storage_size(type(self).__name__, size, KIND_BYTES[kind])
        if pointer is None:
            storage = _native.HostStorage(kind, size, not empty)
        else:
            storage = _native.HostStorage.wrap(kind, pointer, size)
        super().__init__()
        self._dtype = dtype
        self._mutable = bool(mutable)
        self._storage = storage

    @classmethod
    def _sw_snapshot_of(cls, storage: "_native.FileStorage", size: int, dtype: DType) -> "CPU | None":
        """A fresh, mutable CPU carrier whose memory is a copy-on-write snapshot of the first
        `size` slots of a file storage (`HostStorage.snapshot_of`): the file's page cache, read
        without a copy, each page copied on its first write; `None` when the page cache does not
        hold every byte. For `Evictable(retain_clean=True)`'s promote only (see
        `evictable._TierWork`), which keeps the snapshot's contract."""
        snapshot = _native.HostStorage.snapshot_of(storage, size)
        if snapshot is None:
            return None
        fresh = cls.__new__(cls)
        RustBackedCarrier.__init__(fresh)
        fresh._dtype = dtype
        fresh._mutable = True
        fresh._storage = snapshot
        return fresh

    def dtype(self) -> DType:
        return self._dtype

    def _supports_storage_dtype(self, d: DType) -> bool:
        return d in _CPU_DTYPES

    def pointer(self) -> int:
        """Address of slot 0 while live, 0 after release."""
        return 0 if self._sw_released else self._storage.pointer()

    def dlpack_info(self) -> dict[str, Any]:
        return {"pointer": self.pointer(), "device_type": 1, "device_id": 0}

    def new_like(self, values: Iterable[Any], *, mutable: bool = True, dtype: DType | None = None) -> "CPU":
        dtype = self._dtype if dtype is None else check_factory_dtype(type(self), dtype, _CPU_DTYPES)
        try:
            items = list(values)
        except TypeError:
            raise TypeError(f"values must be iterable, not {type(values).__name__}") from None
        zero = storage_zero(dtype)
        fresh = type(self)(len(items), mutable=True, dtype=dtype, empty=True)
        fresh._storage.set_values([zero if v is None else v for v in items])
        fresh._mutable = bool(mutable)
        return fresh

    def allocate_like(self, size: int, *, mutable: bool = True, dtype: DType | None = None,
                      empty: bool = False) -> "CPU":
        n = check_size_argument(size)
        dtype = self._dtype if dtype is None else check_factory_dtype(type(self), dtype, _CPU_DTYPES)
        return type(self)(n, mutable=mutable, dtype=dtype, empty=empty)
