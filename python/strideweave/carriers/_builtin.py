"""Shared machinery of the built-in carriers that keep their slots in Rust storage."""
from __future__ import annotations

from typing import Any

from strideweave.carriers.base import Carrier, check_index

__all__: list[str] = []


class RustBackedCarrier(Carrier):
    """A built-in carrier whose slots live in a `_native` storage object (`self._storage`).

    Built-in `get_value`/`set_value` run the framework checks themselves (the contract says
    built-ins do), and `set_value` bumps the version, so `carrier[i] = v` goes straight to it
    instead of through the base class's check-then-hook path: one check, one bump.
    """

    _storage: Any
    _mutable: bool

    # `Tensor[key]` reads and writes of a live, unowned, unclaimed, mutable carrier of this
    # class go straight to `_native.read_element` / `write_element` (key walk, index, range,
    # value rules and storage access in one Rust call). That is only faithful while the
    # element path is exactly this class's, so a subclass that overrides any hook the path
    # runs through loses it (decided once per class, in __init_subclass__).
    _sw_fast_access: bool = True
    # A subclass of a built-in class (CPU, FileBacked: those that set `_sw_is_builtin` in
    # their own body) that overrides none of the hooks a move, its commit or its backward runs
    # through, except those the native move calls itself (`_NATIVE_MOVE_HOOKS`), moves as the
    # built-in does: the native moves serve its pairs once the route registry resolved them
    # to the built-in pair's default route, calling the hooks it overrides (`_sw_move_hooks`,
    # the mask the pair's route carries) where the request would. Decided once per class,
    # here; the route once per pair, in `move._lookup_route`.
    _sw_native_move: bool = False
    _sw_move_hooks: int = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._sw_fast_access = all(getattr(cls, name, None) is getattr(RustBackedCarrier, name, None)
                                  for name in _ELEMENT_PATH)
        builtin = next((base for base in cls.__mro__[1:] if base.__dict__.get("_sw_is_builtin")), None)
        if builtin is None:
            cls._sw_native_move, cls._sw_move_hooks = False, 0
            return
        cls._sw_native_move = all(getattr(cls, name, None) is getattr(builtin, name, None)
                                  for name in _MOVE_PATH if name not in _NATIVE_MOVE_HOOKS)
        cls._sw_move_hooks = sum(1 << bit for bit, name in enumerate(_NATIVE_MOVE_HOOKS)
                                 if getattr(cls, name, None) is not getattr(builtin, name, None))

    def _sw_storage(self) -> Any:
        return None if self._sw_released else self._storage

    def size(self) -> int:
        return 0 if self._sw_released else self._storage.count

    def _is_mutable(self) -> bool:
        return self._mutable

    def get_value(self, i: Any) -> Any:
        return self._storage.get(check_index(self, i))

    def set_value(self, i: Any, v: Any) -> None:
        self._sw_write_slot(i, lambda index: self._storage.set(index, v))

    def _sw_storage_gone(self) -> bool:
        return bool(self._storage.is_released())

    def _sw_fill(self, i: int, v: Any) -> None:
        self._storage.set(i, v)

    __getitem__ = get_value
    __setitem__ = set_value

    def _release(self) -> None:
        self._storage.release()


def keeps_builtin_element_path(cls: type) -> bool:
    """`cls`'s carriers may take the native element path (what the binding asks, once per
    carrier; decided per class in `RustBackedCarrier.__init_subclass__`)."""
    return bool(getattr(cls, "_sw_fast_access", False))


def keeps_builtin_mutability(cls: type) -> bool:
    """`cls` answers `is_mutable` as the built-ins do: live, unowned and `_mutable` (so the
    DLPack export computes the answer from the native state)."""
    return (getattr(cls, "is_mutable", None) is Carrier.is_mutable
            and getattr(cls, "_is_mutable", None) is RustBackedCarrier._is_mutable)


# What `Tensor.__getitem__` / `__setitem__` reach on the reference path (carrier[i], its
# checks and hooks); overriding any of these opts the subclass out of the Rust fast path.
_ELEMENT_PATH = ("get_value", "set_value", "__getitem__", "__setitem__", "size", "is_released",
                 "_is_mutable", "_sw_check_writable", "_sw_check_unclaimed", "_sw_count_write",
                 "_sw_write_slot")
# The move hooks the native move calls itself, where the request would: the destination's
# `_is_mutable` (once per move) and the source's `_release` (at the commit, while the move still
# claims it). Bit `i` of a class's `_sw_move_hooks` is `_NATIVE_MOVE_HOOKS[i]`
# (crates/strideweave-py/src/py_carrier.rs, `MoveHooks`).
_NATIVE_MOVE_HOOKS = ("_is_mutable", "_release")
# What a move of a carrier runs through beyond the element path: its checks, its commit (the
# source's release), its growth and shrink, its autograd node's backward (fresh storage like
# the source) and its export.
_MOVE_PATH = _ELEMENT_PATH + ("dtype", "is_mutable", "is_owned", "_supports_storage_dtype", "supports_storage_dtype",
                              "release", "_release", "_sw_release_for", "_sw_storage", "_sw_storage_gone", "_sw_fill",
                              "_sw_write_granted", "_sw_allocate_claimed", "_allocate", "_increment_version",
                              "allocate_like", "new_like", "dlpack_info", "facet", "require_facet")
