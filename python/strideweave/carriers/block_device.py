"""BlockDevice and BlockDeviceCarrier: Float32 slots on a real block device
(docs/spec/tensor-and-carriers.md §3.1).

`BlockDevice` opens a block-special node (a loop device, a partition) through the Rust layer
(`_native.BlockDeviceHandle`: O_DIRECT with aligned bounce buffers, positioned I/O retried on
short transfers, one lock per device, a sticky fault state after an OS error or a zero-byte
transfer). `BlockDevice.allocate` carves extents out of it; each `BlockDeviceCarrier` is one
extent seen as a fixed number of native-endian float32 slots.

Python keeps what the Rust layer cannot know: which carrier *objects* are alive (close refuses
while any is, even a released one), argument checks in the contract's order, and the carrier
framework state (version, release, ownership) inherited from `Carrier`.
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Iterable

from strideweave import _native
from strideweave.carriers._sizes import check_storage_size
from strideweave.carriers.base import (
    Carrier,
    check_bool_argument,
    check_factory_dtype,
    check_index,
    check_size_argument,
)
from strideweave.carriers.dtype import DType

__all__ = ["BlockDevice", "BlockDeviceCarrier"]

_BLOCK_DTYPES = (DType.Float32,)
_SLOT_BYTES = 4


class BlockDevice:
    """A block-special node opened for reading and writing; opening writes nothing.

    `path` must be a `str` or `os.PathLike[str]` (TypeError otherwise). A path containing
    NUL, naming something that is not a block device, or a device with bad geometry →
    ValueError; the OS refusing the open → OSError; a system other than Linux →
    NotImplementedError.

    Use as a context manager to close the device when the block ends.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike[str], not {type(path).__name__}")
        fspath = os.fspath(path)
        if not isinstance(fspath, str):
            raise TypeError(f"path must be a str or os.PathLike[str], not a PathLike of "
                            f"{type(fspath).__name__}")
        self._handle = _native.BlockDeviceHandle(fspath)
        self._path = path
        # Carrier objects allocated here and not yet garbage-collected (released or not).
        self._carriers: weakref.WeakSet[BlockDeviceCarrier] = weakref.WeakSet()
        self._lock = threading.Lock()

    # ----- geometry and state ----------------------------------------------------------
    @property
    def path(self) -> str | os.PathLike[str]:
        """The path exactly as given to the constructor."""
        return self._path

    @property
    def capacity_bytes(self) -> int:
        return self._handle.capacity_bytes

    @property
    def logical_block_size(self) -> int:
        return self._handle.logical_block_size

    @property
    def physical_block_size(self) -> int:
        return self._handle.physical_block_size

    @property
    def allocation_alignment(self) -> int:
        """The larger block size; every extent starts and ends on a multiple of it."""
        return self._handle.allocation_alignment

    def is_closed(self) -> bool:
        return self._handle.is_closed()

    def is_faulted(self) -> bool:
        """True after an OS error or zero-byte transfer; access, allocation and factories
        then raise RuntimeError, while release and close still work."""
        return self._handle.is_faulted()

    # ----- allocation ------------------------------------------------------------------
    def allocate(self, size: int, *, mutable: bool = True, dtype: DType = DType.Float32,
                 empty: bool = False) -> "BlockDeviceCarrier":
        """A new carrier of `size` Float32 slots on this device.

        Its extent is `size * 4` bytes rounded up to `allocation_alignment`, placed in the
        lowest free range, never overlapping a live extent, and zero-filled unless `empty`.
        Raises TypeError / ValueError for a bad `size`, TypeError for a non-bool `mutable` or
        `empty`, TypeError / ValueError for a dtype other than Float32, RuntimeError on a closed
        or faulted device and MemoryError when no free range is large enough (OverflowError,
        as for every carrier, when `size * 4` bytes exceed 2**63 - 1: README, "Sizes").
        """
        return self._allocate(BlockDeviceCarrier, size, mutable, dtype, empty)

    def _allocate(self, cls: type[BlockDeviceCarrier], size: Any, mutable: Any, dtype: Any, empty: Any) -> "BlockDeviceCarrier":
        n = check_size_argument(size)
        check_bool_argument(mutable, "mutable")
        check_bool_argument(empty, "empty")
        check_factory_dtype(cls, dtype, _BLOCK_DTYPES)
        check_storage_size(f"{type(self).__name__}.allocate", n, _SLOT_BYTES)
        with self._lock:
            if self._handle.is_closed():
                raise RuntimeError(f"cannot allocate on {self._describe()}: the device is closed")
            if self._handle.is_faulted():
                raise RuntimeError(f"cannot allocate on {self._describe()}: the device is faulted "
                                   f"({self._handle.fault_reason()})")
            offset, length = self._handle.allocate(n * _SLOT_BYTES, not empty)
            try:
                carrier = cls._sw_create(self, offset, length, n, mutable)
            except BaseException:
                self._handle.free(offset, length)
                raise
            self._carriers.add(carrier)
        return carrier

    # ----- closing ---------------------------------------------------------------------
    def close(self) -> None:
        """Closes the descriptor; idempotent, leaves the node alone. RuntimeError while any
        carrier object from this device is alive, even a released one."""
        with self._lock:
            # A native call first: references the engine's threads dropped without the
            # interpreter lock (the last ones of a move that just finished, say) are parked in
            # PyO3's deferred pool until the next call into the extension, and the carriers
            # they keep would count as alive here, where nothing else calls into it.
            self._handle.is_closed()
            alive = len(self._carriers)
            if alive:
                raise RuntimeError(f"cannot close {self._describe()}: {alive} carrier object(s) "
                                   "from it are still alive (even released carriers count until "
                                   "they are garbage-collected)")
            self._handle.close()

    def __enter__(self) -> "BlockDevice":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return None
        # An exception is already propagating: it wins over a refused close.
        try:
            self.close()
        except RuntimeError:
            pass
        return None

    def _describe(self) -> str:
        return f"BlockDevice({os.fspath(self._path)!r})"

    def __repr__(self) -> str:
        if self.is_faulted():
            state = "faulted"
        elif self.is_closed():
            state = "closed"
        else:
            state = "open"
        return (f"<BlockDevice {os.fspath(self._path)!r} capacity_bytes={self.capacity_bytes} "
                f"logical_block_size={self.logical_block_size} "
                f"physical_block_size={self.physical_block_size} {state}>")


class BlockDeviceCarrier(Carrier):
    """A fixed number of Float32 slots in one extent of a `BlockDevice`.

    Made only by `BlockDevice.allocate` and the factories (`new_like`, `allocate_like`, which
    allocate on the same device, even from a released carrier). Each access is a synchronous
    positioned read or write of the slot, serialized by the device's lock. Release or garbage
    collection frees the extent for reuse; afterwards `size()`, `device_offset_bytes` and
    `extent_bytes` are 0. DLPack → BufferError; `scatter` → NotImplementedError.
    """

    _sw_device: BlockDevice
    _sw_offset: int
    _sw_extent: int
    _sw_slots: int
    _mutable: bool
    _sw_free: weakref.finalize

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(f"{type(self).__name__} cannot be constructed directly; "
                        "use BlockDevice.allocate(size)")

    @classmethod
    def _sw_create(cls, device: BlockDevice, offset: int, length: int, slots: int,
                   mutable: bool) -> "BlockDeviceCarrier":
        # Bypass __init__ (which refuses direct construction) but not the framework state.
        carrier = cls.__new__(cls)
        Carrier.__init__(carrier)
        carrier._sw_device = device
        carrier._sw_offset = offset
        carrier._sw_extent = length
        carrier._sw_slots = slots
        carrier._mutable = mutable
        # Frees the extent once: on release, or when the carrier is garbage-collected live.
        carrier._sw_free = weakref.finalize(carrier, device._handle.free, offset, length)
        return carrier

    # ----- identity ----------------------------------------------------------------------
    @property
    def device(self) -> BlockDevice:
        return self._sw_device

    @property
    def device_offset_bytes(self) -> int:
        """Byte offset of slot 0 on the device; 0 after release."""
        return 0 if self._sw_released else self._sw_offset

    @property
    def extent_bytes(self) -> int:
        """Bytes reserved on the device (a multiple of the alignment); 0 after release."""
        return 0 if self._sw_released else self._sw_extent

    # ----- storage hooks -----------------------------------------------------------------
    def size(self) -> int:
        return 0 if self._sw_released else self._sw_slots

    def dtype(self) -> DType:
        return DType.Float32

    def _supports_storage_dtype(self, d: DType) -> bool:
        return d is DType.Float32

    def _is_mutable(self) -> bool:
        return self._mutable

    def get_value(self, i: Any) -> float:
        index = check_index(self, i)
        return self._sw_device._handle.read_f32(self._sw_offset + _SLOT_BYTES * index)

    def set_value(self, i: Any, v: Any) -> None:
        # The handle checks the value (TypeError) before any I/O; the version moves only
        # after the write reached the device.
        self._sw_write_slot(i, lambda index: self._sw_device._handle.write_f32(self._sw_offset + _SLOT_BYTES * index, v))

    __getitem__ = get_value
    __setitem__ = set_value

    def _release(self) -> None:
        self._sw_free()

    # ----- factories ---------------------------------------------------------------------
    def new_like(self, values: Iterable[Any], *, mutable: bool = True,
                 dtype: DType | None = None) -> "BlockDeviceCarrier":
        dtype = DType.Float32 if dtype is None else check_factory_dtype(type(self), dtype, _BLOCK_DTYPES)
        check_bool_argument(mutable, "mutable")
        try:
            items = list(values)
        except TypeError:
            raise TypeError(f"values must be iterable, not {type(values).__name__}") from None
        fresh = self._sw_device._allocate(type(self), len(items), True, dtype, True)
        try:
            fresh._sw_device._handle.write_values(fresh._sw_offset, items)
        except BaseException:
            fresh.release()
            raise
        fresh._mutable = mutable
        return fresh

    def allocate_like(self, size: int, *, mutable: bool = True, dtype: DType | None = None,
                      empty: bool = False) -> "BlockDeviceCarrier":
        dtype = DType.Float32 if dtype is None else dtype
        return self._sw_device._allocate(type(self), size, mutable, dtype, empty)

    # ----- refusals ----------------------------------------------------------------------
    def scatter(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("scatter is not supported for BlockDeviceCarrier")

    # ----- framework internals -----------------------------------------------------------
    def _sw_block_extent(self) -> tuple[Any, int, int] | None:
        """`(handle, device_offset_bytes, slots)` for the CPU↔block bulk moves, or None once
        released. `handle.read_into` / `write_from` move raw bytes with the GIL released."""
        if self._sw_released:
            return None
        return self._sw_device._handle, self._sw_offset, self._sw_slots
