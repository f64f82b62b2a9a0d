"""Evictable: one logical carrier over a fast primary tier and a slow secondary tier
(docs/spec/tensor-and-carriers.md §3.2).

The values live in exactly one tier at a time. `evict()` moves them to the secondary and
`promote()` back, each as one move between tiers (`move._move_between_tiers`: the ordinary route and
transfer, no autograd node, no profiling) of a flat canonical tensor over the whole tier, so
a transition costs what a public move between the two tier classes costs and uses the same
bulk routes (CPU ↔ FileBacked is one positioned transfer on an engine thread).

Ownership. While the Evictable is live it owns both tiers: they stay readable but refuse
writes, release, moves and mutable DLPack export (the Carrier base class enforces that from
`_sw_owner`). The tiers' `_sw_owner` is not the Evictable itself but an `Ownership` token
(carriers/ownership.py): a tier the caller still holds must not keep the Evictable alive (that reference
would make "garbage-collected while unreleased → tiers disowned" unreachable for exactly the
tiers somebody can still observe). A `weakref.finalize` on the Evictable disowns, without
releasing, whatever tiers the token lists when the Evictable is collected unreleased.

Failure atomicity. A transition either commits completely (tiers swapped, residency flipped,
old source released by the move, a replaced destination released) or changes nothing: the
move itself leaves its source live on failure, and a destination this call allocated is
disowned and released again before the exception propagates.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterable

from strideweave.carriers.base import STATE_LOCK, Carrier, check_index, drop_claims, not_a_carrier, take_claim
from strideweave.carriers.ownership import Ownership, TwoTiered, check_tier_pair
from strideweave.carriers.block_device import BlockDeviceCarrier
from strideweave.carriers.dtype import DType

__all__ = ["Evictable"]


# Base-class messages print `type(owner).__name__`; the token stands for the Evictable there.
_Ownership = Ownership.named("Evictable")


class _TransitionClaim:
    """Held in the Evictable's `_sw_claim` while a transition runs, so writes, release and
    moves of the Evictable from other threads fail instead of racing the tier swap."""

    __slots__ = ()


def _check_tiers_free(primary: Carrier, secondary: Carrier) -> None:
    """Construction steps 4 and 5: both tiers live, then each unowned and unclaimed."""
    for name, tier in (("primary", primary), ("secondary", secondary)):
        if tier.is_released():
            raise RuntimeError(f"Evictable {name} tier ({_describe(tier)}) is released")
    for name, tier in (("primary", primary), ("secondary", secondary)):
        if tier.is_owned():
            raise RuntimeError(f"Evictable {name} tier ({_describe(tier)}) is already owned by "
                               f"{type(tier._sw_owner).__name__}")
        # A tier a pending move holds would be released under us at that move's commit.
        tier._sw_check_unclaimed(f"use as the Evictable {name} tier a")


def _flat_tensor(carrier: Carrier, size: int) -> Any:
    from strideweave.layout import Layout, Shape
    from strideweave.tensor import Tensor
    return Tensor(carrier, 0, Layout.canonical(Shape(size)))


def _describe(tier: Any) -> str:
    return type(tier).__name__


class Evictable(TwoTiered, Carrier):
    """A carrier whose values live either in `primary` (promoted) or in `secondary`
    (evicted); it starts promoted and owns both tiers.

    `Evictable(primary, secondary)` checks, in order and before taking ownership of
    anything: both tiers are Carriers (TypeError), neither is a BlockDeviceCarrier
    (TypeError), they are distinct objects (ValueError), live (RuntimeError), unowned
    (RuntimeError), of one dtype (TypeError), the secondary is mutable (RuntimeError), the
    primary is non-empty (ValueError), and movement between the two tier classes is
    possible in both directions (the route's own refusal).

    While promoted, `ev[i]` reads the primary and `ev[i] = v` writes it (raising the
    Evictable's version by 1); while evicted both raise RuntimeError "evicted". `evict()`
    and `promote()` never change the version, and fail atomically.
    """

    def __init__(self, primary: Carrier, secondary: Carrier) -> None:
        for name, tier in (("primary", primary), ("secondary", secondary)):
            if not isinstance(tier, Carrier):
                raise not_a_carrier(f"Evictable {name} tier", tier)
        for name, tier in (("primary", primary), ("secondary", secondary)):
            if isinstance(tier, BlockDeviceCarrier):
                raise TypeError(f"Evictable {name} tier cannot be a {_describe(tier)}: block tiers in "
                                "Evictable are not supported")
        dtype = check_tier_pair("Evictable", primary, secondary, _check_tiers_free, "must be identical")
        if not secondary._is_mutable():
            raise RuntimeError(f"Evictable secondary tier ({_describe(secondary)}) must be mutable: "
                               "eviction writes into it")
        size = primary.size()
        if size == 0:
            raise ValueError("Evictable primary tier must hold at least one slot")
        from strideweave.carriers.move import _resolve
        # Step 9: the route resolver raises the refusal (e.g. NotImplementedError for a
        # definition-backed pair without a route) for either direction.
        _resolve(type(primary), type(secondary))
        _resolve(type(secondary), type(primary))
        mutable = primary.is_mutable()

        super().__init__()
        self._size = size
        self._dtype: DType = dtype
        self._mutable = bool(mutable)
        self._primary = primary
        self._secondary = secondary
        self._evicted = False
        self._lock = threading.Lock()
        # Each tier is adopted in one step of its state: one a racing move or release took
        # since the checks above fails them now, with their message.
        self._sw_own_tiers(_Ownership(), lambda: _check_tiers_free(primary, secondary))

    # ----- queries ------------------------------------------------------------------------
    # `primary` / `secondary` (TwoTiered): the current tiers; eviction releases the primary,
    # promotion the secondary.

    def is_evicted(self) -> bool:
        """True when the values live in the secondary tier."""
        return self._evicted

    def size(self) -> int:
        return 0 if self._sw_released else self._size

    def dtype(self) -> DType:
        return self._dtype

    def _is_mutable(self) -> bool:
        return self._mutable

    def _supports_storage_dtype(self, d: DType) -> bool:
        return self._primary.supports_storage_dtype(d) and self._secondary.supports_storage_dtype(d)

    def dlpack_info(self) -> dict[str, Any]:
        cls = type(self).__name__
        shown = "Evictable" if cls == "Evictable" else f"{cls} (an Evictable)"
        raise BufferError(f"DLPack is not supported for {shown} carrier: its values may move between "
                          "tiers; export a tensor on a DLPack carrier instead")

    # ----- element access -------------------------------------------------------------------
    def _check_promoted(self) -> None:
        if self._evicted:
            raise RuntimeError(f"{type(self).__name__} carrier is evicted: promote() it before "
                               "reading or writing its values")

    def get_value(self, i: Any) -> Any:
        index = check_index(self, i)
        self._check_promoted()
        return self._primary[index]

    def set_value(self, i: Any, v: Any) -> None:
        with STATE_LOCK:  # one state transition, as Carrier._sw_write_slot (promotion checked between)
            index = check_index(self, i)
            self._check_promoted()
            self._sw_check_writable()
            self._primary._sw_write_as_owner(self._ownership, index, v)
            self._sw_count_write()

    def _sw_fill(self, i: int, v: Any) -> None:
        # A move into this Evictable: the primary's storage write, no version change.
        self._check_promoted()
        self._primary._sw_fill(i, v)

    __getitem__ = get_value
    __setitem__ = set_value

    # ----- residency --------------------------------------------------------------------------
    def evict(self) -> None:
        """Move the values into the secondary tier (no-op when already evicted)."""
        self._transition(evict=True)

    def promote(self) -> None:
        """Move the values back into the primary tier (no-op when promoted)."""
        self._transition(evict=False)

    def _transition(self, *, evict: bool) -> None:
        action = "evict" if evict else "promote"
        # One transition at a time (a second evict waits, then finds nothing to do). The
        # Evictable's claim is checked and taken in one step of its state (released, owned,
        # claimed, each refused with its message), so of a transition and a racing move,
        # release or write of the Evictable exactly one goes ahead; it is given back only
        # once the tiers and the residency are final.
        with self._lock:
            claim = _TransitionClaim()
            take_claim(self, claim, action)
            try:
                if self._evicted != evict:
                    self._move_tiers(evict)
            finally:
                # Given back under the state lock, as it was taken: a write checks the
                # residency and then the claim under that lock, so it must not see the
                # residency from before the transition and the claim from after it (a write
                # into the tier this transition has just released).
                with STATE_LOCK:
                    drop_claims(claim, (self,))
        return None

    def _move_tiers(self, evict: bool) -> None:
        """The transition proper, run while the Evictable's claim is held."""
        from strideweave.carriers.move import _move_between_tiers
        source = self._primary if evict else self._secondary
        target = self._secondary if evict else self._primary
        size = self._size
        fresh: Carrier | None = None
        if target.is_released() or target.size() < size:
            # Allocation failure leaves everything as it was: nothing is owned yet. The
            # contract's call exactly (zeroed): large host buffers are kernel-zeroed
            # mappings, so the zeroing costs no pass over memory.
            fresh = target.allocate_like(size, mutable=True)
            self._ownership.take(fresh)
            destination = fresh
        else:
            destination = target
        try:
            _move_between_tiers(_flat_tensor(source, size), destination)
        except BaseException:
            if fresh is not None:
                self._ownership.drop(fresh)
                with contextlib.suppress(Exception):
                    fresh.release()
            # The failed move restored its own claims; the source is live and still ours.
            raise
        # Committed: the move released the source for us, its owner, so it stays ours: listed
        # as our (released) tier, the pair keeps reporting as owned until we are released.
        if fresh is not None:
            self._ownership.drop(target)
            if not target.is_released():
                target.release()
            if evict:
                self._secondary = fresh
            else:
                self._primary = fresh
        self._evicted = evict

    # ----- release and factories ---------------------------------------------------------------
    def _release(self) -> None:
        # The base class has already refused an owned or claimed Evictable.
        ownership = self._ownership
        self._finalizer.detach()
        tiers = ownership.held
        ownership.disown_all()
        for tier in tiers:
            tier.release()

    def new_like(self, values: Iterable[Any], *, mutable: bool = True, dtype: DType | None = None) -> "Evictable":
        """A new promoted Evictable: the primary from the primary tier's `new_like`, an empty
        secondary from the secondary tier's `allocate_like(0)`."""
        primary = self._primary.new_like(values, mutable=mutable, dtype=dtype)
        return self._assemble(primary, dtype)

    def allocate_like(self, size: int, *, mutable: bool = True, dtype: DType | None = None,
                      empty: bool = False) -> "Evictable":
        """A new promoted Evictable of `size` slots (see `new_like`)."""
        primary = self._primary.allocate_like(size, mutable=mutable, dtype=dtype, empty=empty)
        return self._assemble(primary, dtype)

    def _assemble(self, primary: Carrier, dtype: DType | None) -> "Evictable":
        fresh: list[Carrier] = [primary]
        try:
            secondary = self._secondary.allocate_like(0, mutable=True, dtype=dtype)
            fresh.append(secondary)
            return type(self)(primary, secondary)
        except BaseException:
            for tier in fresh:
                if tier._sw_owner is None:
                    with contextlib.suppress(Exception):
                        tier.release()
            raise

    def __repr__(self) -> str:
        if self._sw_released:
            state = "released"
        else:
            state = f"size={self._size} {'evicted' if self._evicted else 'promoted'}"
        return (f"<{type(self).__name__} {state} dtype={self._dtype.name} version={self._sw_version} "
                f"primary={_describe(self._primary)} secondary={_describe(self._secondary)}>")
