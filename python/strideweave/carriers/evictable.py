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
disowned and released again before the exception propagates. A replaced tier is released as
its owner before it is disowned, never disowned while live: a user holding it (`ev.secondary`)
could otherwise release it in between and make the committed transition raise (issue 22).

Clean tiers and asynchronous residency (§3.2.1–§3.2.2, issue 24). With `retain_clean=True` a
promotion copies (the secondary stays live as a clean copy) and the eviction of a primary
unchanged since then only releases it.

One model (issue 21). The tiers, the residency and the order of every transition are the
core's two-tier composite (`_native.TwoTier`, `model::two_tier` in crates/strideweave-core), the
Rust `Evictable`'s own: it claims this Evictable for the transition (refusals in the words
below), runs one transition at a time, plans it by the core's residency rule, refuses reads
from the plan to the commit, and commits or gives back; a transition the running one's own
tier code asks for is refused rather than left waiting for itself. What is done to a tier is this
module's `_TierWork`: a fresh tier by the tier class's `allocate_like`, the transfer as a move
between tiers (or a copy, for a `retain_clean` promote), a release as the owner.
`evict()`/`promote()` run the transfer on the calling thread; `evict_async()` /
`promote_async()` on an engine thread, completing an `AwaitResidency` (the move handles'
protocol).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable

from strideweave import _native
from strideweave.carriers.base import RELEASING, Carrier, check_bool_argument, check_index, not_a_carrier
from strideweave.carriers.ownership import Ownership, TwoTiered, check_tier_pair
from strideweave.carriers.block_device import BlockDeviceCarrier
from strideweave.carriers.cpu import CPU
from strideweave.carriers._sizes import KIND_BYTES
from strideweave.carriers.dtype import STORAGE_KIND, DType
from strideweave.carriers.file_backed import FileBacked
from strideweave.carriers.move_handle import AwaitResult
from strideweave.carriers.tiled_types import AwaitResidency

__all__ = ["Evictable"]


# Base-class messages print `type(owner).__name__`; the token stands for the Evictable there.
_Ownership = Ownership.named("Evictable")

# A `retain_clean` promote of at least this many bytes from a FileBacked secondary into a fresh
# CPU primary maps the file copy-on-write instead of copying it (`_CopyStep`); below it a copy
# costs less than a mapping and its unmapping. The core's threshold for mapped host buffers.
SNAPSHOT_MIN_BYTES = 4 << 20


class _TransitionClaim:
    """Held in the Evictable's `_sw_claim` while a transition runs (the core's `TwoTier` takes
    one per transition), so writes, release and moves of the Evictable fail instead of racing
    the tier swap."""

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


def _fill_slots(source: Carrier, target: Carrier, size: int) -> None:
    """Slots `[0, size)` of `source` into `target`, one by one: tiers with no bulk storage."""
    for i in range(size):
        target._sw_fill(i, source[i])


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

    `retain_clean=True` (a bool, TypeError otherwise): `promote()` copies and keeps the
    secondary live as a clean copy; `evict()` of a primary neither written nor moved into
    since then releases it without writing (`is_clean()`). `promote_async()` /
    `evict_async()` return an `AwaitResidency`; until it completes the Evictable refuses
    reads, writes, moves and release as for a pending move.
    """

    def __init__(self, primary: Carrier, secondary: Carrier, *, retain_clean: bool = False) -> None:
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
        retain_clean = check_bool_argument(retain_clean, "retain_clean")

        super().__init__()
        self._size = size
        self._dtype: DType = dtype
        self._mutable = bool(mutable)
        ownership = _Ownership()
        # The tiers, the residency and the transitions: the core's two-tier composite.
        self._tiers = _native.TwoTier(_TierWork(ownership, size), primary, secondary, retain_clean,
                                      _TransitionClaim, RELEASING)
        # Each tier is adopted in one step of its state: one a racing move or release took
        # since the checks above fails them now, with their message.
        self._sw_own_tiers(ownership, lambda: _check_tiers_free(primary, secondary))

    # ----- queries ------------------------------------------------------------------------
    # `primary` / `secondary` (TwoTiered): the current tiers, the core's; eviction releases the
    # primary, promotion the secondary.

    @property
    def _primary(self) -> Carrier:  # type: ignore[override]
        return self._tiers.primary

    @property
    def _secondary(self) -> Carrier:  # type: ignore[override]
        return self._tiers.secondary

    def is_evicted(self) -> bool:
        """True when the values live in the secondary tier."""
        return self._tiers.is_evicted()

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
    def _promoted_primary(self, action: str) -> Carrier:
        """The primary, which holds the values: RuntimeError while a transition runs (as for a
        pending move) or while they are evicted."""
        primary = self._tiers.readable_primary(self, action)
        if primary is None:
            raise RuntimeError(f"{type(self).__name__} carrier is evicted: promote() it before "
                               "reading or writing its values")
        return primary

    def get_value(self, i: Any) -> Any:
        index = check_index(self, i)
        return self._promoted_primary("read")[index]

    def set_value(self, i: Any, v: Any) -> None:
        # A public write, as Carrier._sw_write_slot: the checks with their messages, then the
        # write opened in the state cell, which refuses it while a transition claims this
        # carrier and refuses a transition while it is open; so the residency checked again
        # once it is open holds until the store is done.
        index = check_index(self, i)
        self._promoted_primary("write to")
        self._sw_check_writable()
        self._sw_open_public_write()
        stored = False
        try:
            self._promoted_primary("write to")._sw_write_as_owner(self._ownership, index, v)
            self._tiers.mark_dirty()
            stored = True
        finally:
            self._sw_close_write(stored)

    def _sw_fill(self, i: int, v: Any) -> None:
        # A move into this Evictable: the primary's storage write, no version change.
        primary = self._promoted_primary("write to")
        self._tiers.mark_dirty()  # the secondary no longer holds these values
        primary._sw_fill(i, v)

    __getitem__ = get_value
    __setitem__ = set_value

    # ----- residency --------------------------------------------------------------------------
    def evict(self) -> None:
        """Move the values into the secondary tier (no-op when already evicted). With
        `retain_clean` and a clean secondary (see `is_clean`), release the primary without
        writing anything."""
        self._tiers.transition(self, True)

    def promote(self) -> None:
        """Move the values back into the primary tier (no-op when promoted). With
        `retain_clean`, copy them instead, keeping the secondary as a clean copy."""
        self._tiers.transition(self, False)

    def evict_async(self) -> AwaitResidency:
        """Start `evict()`; the handle's `wait()` returns None or raises the transition's
        failure (which, as for `evict()`, changed nothing). Until it completes, reads, writes,
        moves and release of this Evictable raise RuntimeError (a pending move), and a further
        transition first waits for it. Refusals (released, owned, claimed) raise here."""
        return self._start(evict=True)

    def promote_async(self) -> AwaitResidency:
        """Start `promote()` (see `evict_async`): prefetch the values while the caller works
        on something else; `wait()` before reading them."""
        return self._start(evict=False)

    @property
    def retain_clean(self) -> bool:
        """Whether `promote()` keeps the secondary as a clean copy (a constructor argument)."""
        return self._tiers.retains_clean()

    def is_clean(self) -> bool:
        """True when the secondary tier holds the current values: evicted, or promoted with
        `retain_clean` and neither written nor moved into since that promote (an `evict()`
        then writes nothing)."""
        return not self._sw_released and bool(self._tiers.is_clean(self._sw_version))

    def _start(self, *, evict: bool) -> AwaitResidency:
        handle = _native.new_completion(AwaitResidency)
        self._tiers.transition_async(self, evict, handle)
        return handle

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
            state = f"size={self._size} {'evicted' if self._tiers.is_evicted() else 'promoted'}"
        return (f"<{type(self).__name__} {state} dtype={self._dtype.name} version={self._sw_version} "
                f"primary={_describe(self._primary)} secondary={_describe(self._secondary)}>")


class _TierWork:
    """What the Evictable's transitions do to its tiers, called by the core's `TwoTier` while
    the transition claims the Evictable (so nobody else writes, releases or moves it or its
    tiers meanwhile), never under a lock of the core.

    Fresh tiers. A transition into a released or too small tier makes a fresh one with the
    tier's `allocate_like`, owned at once; the contract's call exactly (zeroed), except a
    promote into the exact built-in CPU class, whose `allocate_like` runs no hook anybody sees:
    it asks for `empty=True`, since the transfer writes every slot before anybody can read one
    (a failure releases the fresh primary unread), and an uninitialised host buffer of a size
    freed before reuses that buffer's pages (`RECYCLE_MIN` in the core's host storage) instead
    of faulting in and zeroing fresh ones.

    Transfers. The specified transition is one move between tiers, which releases its source
    for us, its owner (so the source stays ours: listed as our released tier until replaced).
    A `retain_clean` promotion copies instead, leaving the secondary live as the clean copy;
    both tiers are ours and claimed, so the copy needs no move request: built-in storages copy
    in Rust (one positioned read for FileBacked → CPU), others slot by slot. An asynchronous
    copy between built-in storages runs on the copy lane alone (`submit_span(alone=True)`), not
    split over the other cores, whose compute it runs beside; a caller that waits for it
    (`wait()` without a timeout) lends its own core: the copy's 2 MiB pieces are offered to
    waiting threads (the core's `engine::help_offered`).

    Snapshots. A FileBacked secondary of at least `SNAPSHOT_MIN_BYTES` whose bytes are all in
    the page cache, promoted into a fresh built-in CPU primary (`promote()` or
    `promote_async()`), is a copy-on-write snapshot of the file (`CPU._sw_snapshot_of`, a
    private mapping), made in microseconds, then loaded (`load_snapshot`; for `promote_async()`
    an engine job, `submit_load_snapshot`, which a caller that waits runs itself): its pages
    are mapped from the page cache and nothing is copied, so the primary reads the page cache
    as `np.memmap` does. (Should the kernel drop some of them in between, the load reads the
    file into the snapshot instead.) The first write to a page copies that page into the
    process and no write reaches the file, so to everybody who reads or writes it the primary
    is a copy. A layer not all cached is copied: the read in 2 MiB pieces over the copy threads
    and a waiting caller is faster than a snapshot's one read. Why `promote_async()` maps too:
    a prefetch that copies competes with the caller's compute for memory bandwidth and a core,
    as a hand-written reader thread does (1.48x the in-RAM pass in issue 24's table, where
    `np.memmap` is 1.02x); a mapping of cached pages is ready in about 0.3 ms per 16 MiB
    layer, where a read takes 2 ms or more.

    The snapshot's contract (the file's bytes change only by the write-back of the snapshot
    itself, and the file does not shrink while it is mapped) holds because the secondary is
    owned: nobody else writes or resizes it, this Evictable writes it only by evicting a dirty
    primary, which is this snapshot, and a FileBacked's file is the process's own."""

    __slots__ = ("_ownership", "_size", "_snapshot")

    def __init__(self, ownership: Ownership, size: int) -> None:
        self._ownership = ownership
        self._size = size
        # The snapshot `fresh` made for the transition running (one runs at a time).
        self._snapshot: Carrier | None = None

    def needs_fresh(self, target: Carrier) -> bool:
        return target.is_released() or target.size() < self._size

    def fresh(self, source: Carrier, target: Carrier, evicts: bool, copies: bool) -> Carrier:
        """A fresh owned tier like `target`. An allocation failure leaves everything as it
        was: nothing is owned yet."""
        size = self._size
        fresh: Carrier | None = None
        if (copies and type(source) is FileBacked and type(target) is CPU
                and size * KIND_BYTES[STORAGE_KIND[target.dtype()]] >= SNAPSHOT_MIN_BYTES):
            # None unless the page cache holds the whole layer.
            fresh = self._snapshot = CPU._sw_snapshot_of(source._sw_storage(), size, target.dtype())
        if fresh is None and not evicts and type(target) is CPU:
            fresh = target.allocate_like(size, mutable=True, empty=True)
        elif fresh is None:
            # The contract's call exactly: a tier's own `allocate_like` may not take `empty`.
            fresh = target.allocate_like(size, mutable=True)
        self._ownership.take(fresh)
        return fresh

    def transfer(self, source: Carrier, target: Carrier, copies: bool) -> None:
        """A blocking transition's transfer, on the calling thread."""
        size = self._size
        if not copies:
            from strideweave.carriers.move import _move_between_tiers
            _move_between_tiers(_flat_tensor(source, size), target)
            return
        if target is self._snapshot:
            self._snapshot = None
            _native.load_snapshot(target._sw_storage())
            return
        src, dst = source._sw_storage(), target._sw_storage()
        if src is None or dst is None:
            _fill_slots(source, target, size)
        else:
            _native.copy_span(src, 0, dst, 0, size)

    def start_transfer(self, source: Carrier, target: Carrier, copies: bool,
                       then: Callable[[BaseException | None], None]) -> None:
        """An asynchronous transition's transfer: started here, `then(None)` or
        `then(exception)` called once where it completes (the core commits there)."""
        size = self._size
        if not copies:
            from strideweave.carriers.move import _start_move_between_tiers
            handle = _start_move_between_tiers(_flat_tensor(source, size), target)
            handle._add_done_callback(lambda done: then(done.exception(timeout=0)))
            return
        if target is self._snapshot:
            self._snapshot = None
            _native.submit_load_snapshot(target._sw_storage(), then)
            return
        src, dst = source._sw_storage(), target._sw_storage()
        if src is not None and dst is not None:
            _native.submit_span(src, 0, dst, 0, size, then, alone=True)
            return
        done = _native.new_completion(AwaitResult)

        def job() -> None:
            try:
                _fill_slots(source, target, size)
            except BaseException as exc:  # noqa: BLE001 - the copy's terminal failure
                done._fail(exc)
                then(exc)
                return
            done._succeed(None)
            then(None)
        _native.submit_python(done, job)

    def release(self, tier: Carrier, keep: bool) -> None:
        """Release an owned tier as its owner: never unowned while live, so a user holding it
        (`ev.secondary`) cannot release it in between (issue 22 item 1); `keep` leaves it
        listed as ours (the source a move released), else it is disowned afterwards. After a
        committed transition, a failing release hook cannot undo it: it is not raised."""
        if tier is self._snapshot:
            self._snapshot = None
        with contextlib.suppress(Exception):
            tier._sw_release_for(self._ownership)
        if not keep:
            self._ownership.drop(tier)
