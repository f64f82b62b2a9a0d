"""The FileBacked carrier: a raw native-endian file in a hidden per-process directory."""
from __future__ import annotations

import itertools
import os
import pathlib
import weakref
from typing import Any, Iterable

from strideweave import _native
from strideweave.carriers._builtin import RustBackedCarrier
from strideweave.carriers._filebacked_dir import filebacked_directory
from strideweave.carriers._sizes import KIND_BYTES, check_storage_size
from strideweave.carriers.base import check_factory_dtype, check_size_argument, claimed_resize_admitted
from strideweave.carriers.dtype import STORAGE_KIND, DType, storage_zero

__all__ = ["FileBacked"]

_FILE_DTYPES = (DType.Floating, DType.Float32, DType.Int32)

_names = itertools.count()


def _fresh_name() -> str:
    return f"carrier-{os.getpid()}-{next(_names)}.bin"


class FileBacked(RustBackedCarrier):
    """Slots in a raw file (float64 for Floating, float32, int32). Starts empty; a move into
    it grows it through `_allocate`. Releasing or garbage-collecting it deletes the file."""

    _sw_is_builtin = True  # its plain subclasses move as it does (`_builtin._sw_plain_move`)

    def __init__(self, filename: str | os.PathLike[str] | None = None, *, mutable: bool = True,
                 dtype: DType = DType.Floating) -> None:
        if filename is not None:
            # Any os.PathLike naming a bare file (`pathlib.Path("x.bin")`) works like its str.
            name = os.fspath(filename) if isinstance(filename, os.PathLike) else filename
            if not isinstance(name, str):
                raise TypeError(f"filename must be a str, an os.PathLike[str] or None, "
                                f"not {type(filename).__name__}")
            filename = name
            if (not filename or os.sep in filename or (os.altsep and os.altsep in filename)
                    or filename in (".", "..") or "\0" in filename):
                raise ValueError(f"filename must be a bare file name, not {filename!r}")
        check_factory_dtype(type(self), dtype, _FILE_DTYPES)
        directory = filebacked_directory()
        path = directory / (filename if filename is not None else _fresh_name())
        if filename is not None and path.exists():
            raise FileExistsError(f"FileBacked file {filename!r} already exists in {directory}")
        storage = _native.FileStorage(str(path), STORAGE_KIND[dtype])
        super().__init__()
        self._dtype = dtype
        self._mutable = bool(mutable)
        self._storage = storage
        self._path = path
        # Deletes the file when the carrier is garbage-collected unreleased, and at exit (only in
        # the creating process: the storage never unlinks from a fork()ed child).
        self._finalizer = weakref.finalize(self, storage.release)

    @property
    def path(self) -> pathlib.Path:
        return self._path

    def dtype(self) -> DType:
        return self._dtype

    def _supports_storage_dtype(self, d: DType) -> bool:
        return d in _FILE_DTYPES

    def _allocate(self, size: int) -> None:
        """Resize the file to `size` slots; new slots read zero. The version is unchanged.
        RuntimeError while a pending move (or another claim) holds the carrier: only the move
        itself sizes its destination (`_sw_allocate_claimed`)."""
        if not claimed_resize_admitted(self):
            self._sw_check_unclaimed("resize")
        n = check_storage_size(f"{type(self).__name__}._allocate", check_size_argument(size),
                               KIND_BYTES[STORAGE_KIND[self._dtype]])
        self._storage.resize(n)

    def _release(self) -> None:
        self._finalizer()

    def new_like(self, values: Iterable[Any], *, mutable: bool = True, dtype: DType | None = None) -> "FileBacked":
        dtype = self._dtype if dtype is None else check_factory_dtype(type(self), dtype, _FILE_DTYPES)
        try:
            items = list(values)
        except TypeError:
            raise TypeError(f"values must be iterable, not {type(values).__name__}") from None
        zero = storage_zero(dtype)
        zero = 0.0 if zero is None else zero
        fresh = type(self)(mutable=True, dtype=dtype)
        try:
            fresh._storage.assign_values([zero if v is None else v for v in items])
        except BaseException:
            fresh.release()
            raise
        fresh._mutable = bool(mutable)
        return fresh

    def allocate_like(self, size: int, *, mutable: bool = True, dtype: DType | None = None,
                      empty: bool = False) -> "FileBacked":
        n = check_size_argument(size)
        dtype = self._dtype if dtype is None else check_factory_dtype(type(self), dtype, _FILE_DTYPES)
        check_storage_size(f"{type(self).__name__}.allocate_like", n, KIND_BYTES[STORAGE_KIND[dtype]])
        fresh = type(self)(mutable=mutable, dtype=dtype)
        try:
            fresh._storage.resize(n)
        except BaseException:  # ENOSPC/EFBIG: leave no file behind
            fresh.release()
            raise
        return fresh
