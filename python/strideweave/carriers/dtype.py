"""Dtype descriptors: immutable identity singletons (docs/spec/layout-and-dtype.md §8).

Every descriptor is created once, here, and compared by identity. The metaclass forbids
construction by users and any rebinding of class attributes, so `DType.Float32` is the same
object for the life of the process (copy, deepcopy and pickle return it too).
"""
from __future__ import annotations

from typing import Any as _AnyType, ClassVar, NoReturn, TypeVar

__all__ = ["DType", "DTypeCategory", "SimpleDType", "CompoundDType", "BlockScaledDType",
           "storage_schema", "storage_zero"]

_REGISTRY: dict[str, "DType"] = {}
_D = TypeVar("_D", bound="DType")


class _FrozenDTypeMeta(type):
    """Blocks `DType(...)` and rebinding or adding class attributes such as `DType.Float32`."""

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(f"{cls.__name__} descriptors are singletons; use DType.from_name(name)")

    def __setattr__(cls, name: str, value: object) -> NoReturn:
        raise AttributeError(f"cannot set attribute {name!r} of {cls.__name__}: dtypes are immutable")

    def __delattr__(cls, name: str) -> NoReturn:
        raise AttributeError(f"cannot delete attribute {name!r} of {cls.__name__}: dtypes are immutable")


def _lookup(name: str) -> "DType":
    return _REGISTRY[name]


class DType(metaclass=_FrozenDTypeMeta):
    """Abstract base of every dtype descriptor."""

    __slots__ = ("_name", "_supertype", "_opaque")
    _name: str
    _supertype: DType | None
    _opaque: bool

    # The singletons, created once by `_make` below; declared here so that type checkers
    # know `DType.Float32` and its siblings (the metaclass forbids rebinding them).
    Any: ClassVar[DTypeCategory]
    Floating: ClassVar[DTypeCategory]
    Integer: ClassVar[DTypeCategory]
    Float32: ClassVar[SimpleDType]
    Float64: ClassVar[SimpleDType]
    Int32: ClassVar[SimpleDType]
    Bool: ClassVar[SimpleDType]
    E2M1: ClassVar[SimpleDType]
    E8M0: ClassVar[SimpleDType]
    MXFP4: ClassVar[BlockScaledDType]

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"cannot set attribute {name!r}: dtypes are immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"cannot delete attribute {name!r}: dtypes are immutable")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r})"

    def __copy__(self) -> DType:
        return self

    def __deepcopy__(self, memo: object) -> DType:
        return self

    def __reduce__(self) -> tuple[_AnyType, tuple[str]]:
        return (_lookup, (self._name,))

    @property
    def name(self) -> str:
        return self._name

    @property
    def value(self) -> str:
        return self._name

    @property
    def supertype(self) -> "DType | None":
        return self._supertype

    @property
    def representation_rules(self) -> tuple[_AnyType, ...]:
        return ()

    def supertypes(self) -> tuple["DType", ...]:
        chain: list[DType] = []
        node = self._supertype
        while node is not None:
            chain.append(node)
            node = node._supertype
        return tuple(chain)

    def is_subtype_of(self, other: "DType") -> bool:
        if not isinstance(other, DType):
            raise TypeError(f"is_subtype_of() argument must be a DType, not {type(other).__name__}")
        return other is self or other in self.supertypes()

    def is_category(self) -> bool:
        return isinstance(self, DTypeCategory)

    def is_simple(self) -> bool:
        return isinstance(self, SimpleDType)

    def is_compound(self) -> bool:
        return isinstance(self, CompoundDType)

    def is_opaque_storage(self) -> bool:
        return self._opaque

    @classmethod
    def from_name(cls, name: str) -> "DType":
        if not isinstance(name, str):
            raise TypeError(f"from_name() argument must be a str, not {type(name).__name__}")
        found = _REGISTRY.get(name)
        if found is None:
            raise LookupError(f"no dtype is registered as {name!r}")
        if not isinstance(found, cls):
            raise LookupError(f"{name!r} is a {type(found).__name__}, not a {cls.__name__}")
        return found


class DTypeCategory(DType):
    """An abstract family of dtypes (Any, Floating, Integer)."""

    __slots__ = ()


class SimpleDType(DType):
    """A scalar dtype with a fixed bit width."""

    __slots__ = ("_bits",)
    _bits: int

    @property
    def bits(self) -> int:
        return self._bits


class CompoundDType(DType):
    """A dtype stored as several planes, one carrier each."""

    __slots__ = ("_simple_types",)
    _simple_types: tuple[DType, ...]

    @property
    def simple_types(self) -> tuple[DType, ...]:
        return self._simple_types

    @property
    def num_carriers(self) -> int:
        return len(self._simple_types)

    @property
    def element(self) -> DType:
        return self._simple_types[0]


class BlockScaledDType(CompoundDType):
    """A compound dtype whose planes are elements and shared block scales."""

    __slots__ = ()


def _make(cls: type[_D], name: str, supertype: DType | None, *, opaque: bool = False, bits: int | None = None,
          simple_types: tuple[DType, ...] = (), attribute: bool = True) -> _D:
    obj: _D = object.__new__(cls)
    object.__setattr__(obj, "_name", name)
    object.__setattr__(obj, "_supertype", supertype)
    object.__setattr__(obj, "_opaque", opaque)
    if bits is not None:
        object.__setattr__(obj, "_bits", bits)
    if issubclass(cls, CompoundDType):
        object.__setattr__(obj, "_simple_types", tuple(simple_types))
    _REGISTRY[name] = obj
    if attribute:
        type.__setattr__(DType, name, obj)
    return obj


_any = _make(DTypeCategory, "Any", None, opaque=True)
_floating = _make(DTypeCategory, "Floating", _any, opaque=True)
_integer = _make(DTypeCategory, "Integer", _any)
_float32 = _make(SimpleDType, "Float32", _floating, bits=32)
_float64 = _make(SimpleDType, "Float64", _floating, bits=64)
_int32 = _make(SimpleDType, "Int32", _integer, bits=32)
_bool = _make(SimpleDType, "Bool", _any, bits=8)
_e2m1 = _make(SimpleDType, "E2M1", _floating, bits=4)
_e8m0 = _make(SimpleDType, "E8M0", _floating, bits=8)
_mxfp4 = _make(BlockScaledDType, "MXFP4", _any, simple_types=(_e2m1, _e8m0))

# Shipped for tests of multi-subtensor tensors: resolvable by name, not a DType attribute.
PLANAR_FLOAT32_PAIR = _make(CompoundDType, "PlanarFloat32Pair", _any,
                            simple_types=(_float32, _float32), attribute=False)

_ZEROS: dict[DType, _AnyType] = {_float32: 0.0, _int32: 0, _bool: False}

# Native slot encodings of the Rust storages (see crates/strideweave-core/src/storage).
STORAGE_KIND: dict[DType, str] = {_float32: "f32", _int32: "i32", _bool: "bool", _floating: "f64", _float64: "f64"}


def storage_schema(dtype: DType) -> tuple[DType, ...]:
    """The ordered storage dtypes of `dtype`, one carrier each."""
    if not isinstance(dtype, DType):
        raise TypeError(f"storage_schema() argument must be a DType, not {type(dtype).__name__}")
    if isinstance(dtype, CompoundDType):
        return dtype.simple_types
    if isinstance(dtype, SimpleDType) or dtype.is_opaque_storage():
        return (dtype,)
    raise ValueError(f"{dtype!r} has no Tensor storage schema")


def storage_zero(dtype: DType) -> _AnyType:
    """The value of a fresh or unaddressed slot of `dtype` (None where there is none)."""
    if not isinstance(dtype, DType):
        raise TypeError(f"storage_zero() argument must be a DType, not {type(dtype).__name__}")
    return _ZEROS.get(dtype)


def check_dtype_argument(dtype: _AnyType, name: str = "dtype") -> DType:
    """The common rule for dtype arguments: a non-DType is a TypeError."""
    if not isinstance(dtype, DType):
        raise TypeError(f"{name} must be a DType, not {type(dtype).__name__}")
    return dtype
