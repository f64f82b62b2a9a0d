"""The FileBacked carrier: a raw native-endian file in a hidden per-process directory."""
from __future__ import annotations

import atexit
import itertools
import os
import pathlib
import secrets
import shutil
import tempfile
import threading
import weakref
from typing import Any, Iterable

from strideweave import _native
from strideweave.carriers._builtin import RustBackedCarrier
from strideweave.carriers.base import check_factory_dtype, check_size_argument
from strideweave.carriers.dtype import STORAGE_KIND, DType, storage_zero

__all__ = ["FileBacked"]

_FILE_DTYPES = (DType.Floating, DType.Float32, DType.Int32)

_directory_lock = threading.Lock()
_directory: pathlib.Path | None = None
_names = itertools.count()


def filebacked_directory() -> pathlib.Path:
    """The hidden directory of this process's FileBacked files, created on first use and
    removed at interpreter exit."""
    global _directory
    with _directory_lock:
        if _directory is None or not _directory.is_dir():
            parent = pathlib.Path(os.environ.get("STRIDEWEAVE_FILEBACKED_PARENT") or tempfile.gettempdir())
            while True:
                candidate = parent / f".strideweave-filebacked-{secrets.token_hex(8)}"
                try:
                    candidate.mkdir(mode=0o700)
                except FileExistsError:
                    continue
                break
            _directory = candidate
            atexit.register(shutil.rmtree, str(_directory), True)
        return _directory


def _fresh_name() -> str:
    return f"carrier-{os.getpid()}-{next(_names)}.bin"


class FileBacked(RustBackedCarrier):
    """Slots in a raw file (float64 for Floating, float32, int32). Starts empty; a move into
    it grows it through `_allocate`. Releasing or garbage-collecting it deletes the file."""

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
        # Deletes the file when the carrier is garbage-collected unreleased, and at exit.
        self._finalizer = weakref.finalize(self, storage.release)

    @property
    def path(self) -> pathlib.Path:
        return self._path

    def dtype(self) -> DType:
        return self._dtype

    def _supports_storage_dtype(self, d: DType) -> bool:
        return d in _FILE_DTYPES

    def _allocate(self, size: int) -> None:
        """Resize the file to `size` slots; new slots read zero. The version is unchanged."""
        self._storage.resize(check_size_argument(size))

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
        fresh = type(self)(mutable=mutable, dtype=dtype)
        fresh._storage.resize(n)
        return fresh
