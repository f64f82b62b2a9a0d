"""The Generic carrier: a list of Python objects."""
from __future__ import annotations

import numbers
import struct
from typing import Any, Iterable

from strideweave.carriers._sizes import GENERIC_SLOT_BYTES, check_storage_size
from strideweave.carriers.base import Carrier, check_factory_dtype, check_index, check_size_argument
from strideweave.carriers.dtype import DType, storage_zero

__all__ = ["Generic"]

_GENERIC_DTYPES = (DType.Any, DType.Floating, DType.Float32, DType.Int32, DType.Bool)
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_F32 = struct.Struct("f")


def coerce_slot_value(dtype: DType, value: Any) -> Any:
    """The carrier write rules (docs/spec/tensor-and-carriers.md §3) for a Python-held slot."""
    if dtype is DType.Float32:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"a Float32 slot takes a real number, not {type(value).__name__}")
        number = float(value)  # OverflowError for an int beyond every float, as in Rust storage
        try:
            return _F32.unpack(_F32.pack(number))[0]
        except OverflowError:  # a finite double beyond binary32 rounds to infinity
            return float("inf") if number > 0 else float("-inf")
    if dtype is DType.Int32:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"an Int32 slot takes an int, not {type(value).__name__}")
        v = int(value)
        if v < _INT32_MIN or v > _INT32_MAX:
            raise OverflowError(f"{v} is out of Int32 range")
        return v
    if dtype is DType.Bool:
        if not isinstance(value, bool):
            raise TypeError(f"a Bool slot takes a bool, not {type(value).__name__}")
        return value
    return value  # Any and Floating hold any object


def _fill_zero(dtype: DType) -> Any:
    """What `allocate_like` zero-fills with: the dtype's storage zero, and a numeric zero for
    the opaque categories, whose storage zero is None."""
    zero = storage_zero(dtype)
    if zero is not None:
        return zero
    return 0.0 if dtype is DType.Floating else 0


# The slots of every released Generic: empty, and never written (every write is range-checked
# against it first), so its identity tells a release under way from an out-of-range index.
_RELEASED: list = []


class Generic(Carrier):
    """Python objects in a list; `values` is always copied."""

    def __init__(self, values: Iterable[Any], *, mutable: bool = True, dtype: DType = DType.Floating) -> None:
        check_factory_dtype(type(self), dtype, _GENERIC_DTYPES)
        try:
            items = list(values)
        except TypeError:
            raise TypeError(f"values must be iterable, not {type(values).__name__}") from None
        items = [coerce_slot_value(dtype, v) for v in items]
        super().__init__()
        self._dtype = dtype
        self._mutable = bool(mutable)
        self._values = items

    def size(self) -> int:
        return 0 if self._sw_released else len(self._values)

    def dtype(self) -> DType:
        return self._dtype

    def _is_mutable(self) -> bool:
        return self._mutable

    def _supports_storage_dtype(self, d: DType) -> bool:
        return d in _GENERIC_DTYPES

    def get_value(self, i: Any) -> Any:
        try:
            return self._values[check_index(self, i)]
        except IndexError:
            self._sw_raise_if_releasing()
            raise

    def set_value(self, i: Any, v: Any) -> None:
        def store(index: int) -> None:
            value = coerce_slot_value(self._dtype, v)
            if self._sw_released:  # converting ran user code (`__float__`), which may release
                raise RuntimeError(f"{type(self).__name__} carrier is released")
            self._values[index] = value
        self._sw_write_slot(i, store)

    def _sw_storage_gone(self) -> bool:
        return self._values is _RELEASED

    def _sw_raise_if_releasing(self) -> None:
        """After a range failure: RuntimeError if a release (possibly still running on another
        thread, before the released flag is set) has emptied the slots."""
        if self._sw_released or self._sw_storage_gone():
            raise RuntimeError(f"{type(self).__name__} carrier is released") from None

    def _sw_fill(self, i: int, v: Any) -> None:
        self._values[i] = coerce_slot_value(self._dtype, v)

    __getitem__ = get_value
    __setitem__ = set_value

    def _release(self) -> None:
        self._values = _RELEASED

    def new_like(self, values: Iterable[Any], *, mutable: bool = True, dtype: DType | None = None) -> "Generic":
        dtype = self._dtype if dtype is None else check_factory_dtype(type(self), dtype, _GENERIC_DTYPES)
        try:
            items = list(values)
        except TypeError:
            raise TypeError(f"values must be iterable, not {type(values).__name__}") from None
        zero = storage_zero(dtype)
        return type(self)([zero if v is None else v for v in items], mutable=mutable, dtype=dtype)

    def allocate_like(self, size: int, *, mutable: bool = True, dtype: DType | None = None,
                      empty: bool = False) -> "Generic":
        n = check_size_argument(size)
        dtype = self._dtype if dtype is None else check_factory_dtype(type(self), dtype, _GENERIC_DTYPES)
        check_storage_size(f"{type(self).__name__}.allocate_like", n, GENERIC_SLOT_BYTES)
        try:
            slots = [_fill_zero(dtype)] * n
        except MemoryError:  # representable, but more than this process can have
            raise MemoryError(f"cannot allocate {n} slots for {type(self).__name__}.allocate_like") from None
        return type(self)(slots, mutable=mutable, dtype=dtype)
