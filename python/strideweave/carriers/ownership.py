"""The token a composite carrier (Evictable, TiledEvictable) records as its tiers' owner.

A tier's `_sw_owner` is this token rather than the composite itself, so a tier the caller
still holds does not keep the composite alive, and the composite's GC finalizer can disown
exactly the carriers the token lists. The base class's messages print
`type(owner).__name__` ("owned by Evictable"): `Ownership.named(name)` is the token class whose
name stands for the composite.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from strideweave.carriers.base import RELEASING, Carrier

if TYPE_CHECKING:
    from strideweave.carriers.dtype import DType

__all__: list[str] = []


class Ownership:
    """Which carriers one composite owns; taking and dropping set their `_sw_owner`."""

    __slots__ = ("_held", "__weakref__")
    _named: ClassVar[dict[str, type["Ownership"]]] = {}

    def __init__(self) -> None:
        self._held: dict[int, Carrier] = {}

    @classmethod
    def named(cls, owner_name: str) -> type["Ownership"]:
        """The token class of the composite class called `owner_name` (one per name)."""
        if owner_name not in cls._named:
            cls._named[owner_name] = type(owner_name, (cls,), {"__slots__": (), "__qualname__": owner_name})
        return cls._named[owner_name]

    @property
    def held(self) -> list[Carrier]:
        """The carriers owned now, in the order they were taken."""
        return list(self._held.values())

    def take(self, carrier: Carrier, explain: Callable[[], None] | None = None) -> None:
        """Own `carrier`, which must be live, unowned and unclaimed: checked and owned in one
        step of its state, so a racing move or release cannot slip in after the caller's
        checks. When that step refuses, `explain()` (the caller's checks, which the state now
        fails) raises the refusal in the caller's words; should the state have changed back
        meanwhile, the step is tried again."""
        while not carrier._sw_adopt(self, None, RELEASING):
            if explain is None:
                raise RuntimeError(f"{type(carrier).__name__} carrier cannot be owned: it is released, "
                                   "owned or held by a pending move")
            explain()
        self._held[id(carrier)] = carrier

    def drop(self, carrier: Carrier) -> None:
        carrier._sw_disown(self)
        self._held.pop(id(carrier), None)

    def disown_all(self) -> None:
        """GC finalizer and release: every carrier held goes back to being unowned."""
        for carrier in self._held.values():
            carrier._sw_disown(self)
        self._held = {}


def check_tier_pair(kind: str, primary: Carrier, secondary: Carrier,
                    check_free: Callable[[Carrier, Carrier], None], dtypes_differ: str) -> "DType":
    """The checks both composites make of their two tiers, in this order: two distinct objects,
    both free (`check_free`, in the composite's own order and words), one dtype
    (`dtypes_differ` words the refusal). Returns that dtype."""
    if primary is secondary:
        raise ValueError(f"{kind} primary and secondary must be distinct carrier objects")
    check_free(primary, secondary)
    dtype = primary.dtype()
    if secondary.dtype() is not dtype:
        raise TypeError(f"{kind} tier dtypes {dtypes_differ}: primary is {dtype.name}, "
                        f"secondary is {secondary.dtype().name}")
    return dtype


class TwoTiered:
    """What both composites (Evictable, TiledEvictable) share: their two tiers, owned through
    one `Ownership` token that a finalizer clears if the composite is collected unreleased."""

    _primary: Carrier
    _secondary: Carrier
    _ownership: Ownership
    _finalizer: Any

    def _sw_own_tiers(self, ownership: Ownership, explain: Callable[[], None]) -> None:
        """Own both tiers through `ownership`, or neither (`explain` words a refusal, see
        `Ownership.take`); disown them if this object is collected."""
        ownership.take(self._primary, explain)
        try:
            ownership.take(self._secondary, explain)
        except BaseException:
            ownership.drop(self._primary)
            raise
        self._ownership = ownership
        self._finalizer = weakref.finalize(self, ownership.disown_all)

    @property
    def primary(self) -> Carrier:
        """The current primary tier."""
        return self._primary

    @property
    def secondary(self) -> Carrier:
        """The current secondary tier."""
        return self._secondary
