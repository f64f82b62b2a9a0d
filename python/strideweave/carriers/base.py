"""The Carrier base class: the storage contract every carrier honours
(docs/spec/tensor-and-carriers.md §2, docs/spec/extension-and-tiling.md §4).

A carrier is a flat array of slots. This class owns the framework state every carrier
shares — version counter, release state, ownership by an Evictable, claims by a pending move —
and the framework-owned entry points (`carrier[i]`, `release()`, `is_mutable()`) that check
that state in the specified order before any subclass hook runs. Subclasses supply storage
through the hooks `size`, `dtype`, `get_value`, `set_value`, `new_like`, `allocate_like`,
`_is_mutable`, `_supports_storage_dtype`, `_release`, `_allocate` and `dlpack_info`.
"""
from __future__ import annotations

import operator
import threading
from types import TracebackType
from typing import Any, Callable, Iterable, Protocol, Self, TypeVar, cast, runtime_checkable

from strideweave import _native
from strideweave.carriers.dtype import CompoundDType, DType

__all__ = ["Carrier"]


@runtime_checkable
class Allocatable(Protocol):
    """The optional sizing hook of a carrier (docs/spec/tensor-and-carriers.md §4):
    `_allocate(n)` makes the carrier exactly `n` slots. A move grows an empty destination that
    has it to the moved span, and shrinks it back to 0 if the move fails. FileBacked has it;
    definition-backed carriers size through their provider instead."""

    def _allocate(self, size: int) -> None: ...

# A facet type (a `CarrierFacet` subclass; the extension module, a layer above, defines it).
_F = TypeVar("_F")


class _DefinitionHooks:
    """Late-bound entry points of `strideweave.carriers.extension`.

    The base class must consult carrier definitions (construction, sealing, facets) but
    cannot import the extension module, which imports this one. The extension module
    installs its functions here when it is imported.
    """

    @staticmethod
    def definition_for(cls: type) -> Any:
        return None

    @staticmethod
    def observe(cls: type) -> None:
        return None

    @staticmethod
    def init_defined(carrier: "Carrier", definition: Any, slots: Any, dtype: Any, mutable: Any) -> None:
        raise NotImplementedError  # replaced by the extension module

    # Installed by the extension module only (used only once a definition is bound).
    defined_size: Callable[["Carrier"], int]
    defined_dtype: Callable[["Carrier"], DType]
    defined_get: Callable[["Carrier", int], Any]
    defined_set: Callable[["Carrier", int, Any], None]
    defined_new_like: Callable[..., "Carrier"]
    defined_allocate_like: Callable[..., "Carrier"]
    defined_is_mutable: Callable[["Carrier"], bool]
    defined_supports_dtype: Callable[["Carrier", DType], bool]
    defined_release: Callable[["Carrier"], None]
    facet_of: Callable[["Carrier", Any], Any]


DEFINITION_HOOKS = _DefinitionHooks()


class _SubmitWindow(threading.local):
    """The move whose provider's `submit()` call is running on this thread.

    A claim admits what its transfer was handed, never a thread: a `_copy` hook writes through
    its `output`, a provider through `TransferRequest.output` from any thread. The one
    exception the specification grants is the destination itself, written during the
    provider's own `submit()` call (docs/spec/extension-and-tiling.md §5, "What a claim
    admits"): that call, on this thread, may write that move's destination, and nothing else
    (no release, no resize, no version bump, no move; no other carrier).
    """

    request: object | None = None


SUBMIT_WINDOW = _SubmitWindow()


class _ClaimedResize(threading.local):
    """The `(carrier, claim)` whose claim is sizing it on this thread, for the one
    `_allocate` call `Carrier._sw_allocate_claimed` makes (a subclass's override calling the
    built-in's must pass too); every other `_allocate` of a claimed carrier is refused."""

    entry: tuple[object, object] | None = None


CLAIMED_RESIZE = _ClaimedResize()


def claimed_resize_admitted(carrier: "Carrier") -> bool:
    """True inside the `_allocate` call the claim holding `carrier` makes (see above)."""
    entry = CLAIMED_RESIZE.entry
    return entry is not None and entry[0] is carrier and entry[1] is carrier._sw_claim


# Each carrier state transition is atomic on its own: the carrier's state cell (the core's
# `StateCell`, see crates/strideweave-py/src/carrier_state.rs) checks and changes the state in
# one step, and it is the only lock of carrier state. A public write whose store is a Python
# hook opens the write in the cell (`_sw_open_write`: its checks and "a write is open" in one
# step), runs the hook with no lock held, and closes it (`_sw_close_write`, which counts it);
# while it is open, claims and releases of the carrier are refused, so none falls between the
# write's checks and its store.


class _Releasing:
    """The claim a carrier holds while its `_release()` hook runs: a move, a write or another
    release arriving meanwhile fails instead of using storage that is being freed."""

    __slots__ = ()


RELEASING = _Releasing()


def in_submit_window(carrier: "Carrier") -> bool:
    """True when this thread runs the `submit()` of the move that claims `carrier` as its
    destination (see `_SubmitWindow`)."""
    claim = carrier._sw_claim
    return claim is not None and claim is SUBMIT_WINDOW.request and getattr(claim, "destination", None) is carrier


def take_claims(claim: object, carriers: "Iterable[tuple[Carrier, str, str]]") -> None:
    """Claim every `(carrier, role, action)` for `claim`, or none of them: each must still be
    live and unclaimed. The carriers' state cells check and claim in one step (the core's
    `StateCell::claim_all`), so of two racing requests exactly one wins and the other raises
    RuntimeError. A carrier a pending move claims refuses every other claim, whoever asks
    (the move's own hooks included), and so does one a write is storing into."""
    _native._CarrierBase._sw_take_claims(claim, tuple(carriers), None, RELEASING)


def take_claim(carrier: "Carrier", claim: object, action: str) -> None:
    """Claim `carrier` for a composite's own operation (`action`: "evict", "project into"):
    RuntimeError, worded for the action, if it is released, owned or claimed, checked and
    claimed in one step of its state cell, so of this and a racing move, release or write
    exactly one goes ahead (refused, as `take_claims`, while a write stores into it)."""
    carrier._sw_take_claim(claim, action, None, RELEASING)


def drop_claims(claim: object, carriers: "Iterable[Carrier]") -> None:
    """Drop `claim` from every carrier that still holds it (idempotent)."""
    for carrier in carriers:
        carrier._sw_drop_claim(claim)


def check_index(carrier: "Carrier", index: Any) -> int:
    """The framework's slot checks, in the contract's order: released, type, range."""
    if carrier._sw_released:
        raise RuntimeError(f"{type(carrier).__name__} carrier is released")
    try:
        i = operator.index(index)
    except TypeError:
        raise TypeError(f"carrier index must be an integer, not {type(index).__name__}") from None
    if carrier._sw_released:  # `__index__` ran user code, which may have released the carrier
        raise RuntimeError(f"{type(carrier).__name__} carrier is released")
    size = carrier.size()
    if i < 0 or i >= size:
        # Released meanwhile (by `__index__`, or by another thread's release, whose hook
        # runs outside every lock): that, not the range, is the error.
        if carrier._sw_released or carrier._sw_claim is RELEASING or carrier._sw_storage_gone():
            raise RuntimeError(f"{type(carrier).__name__} carrier is released")
        raise IndexError(f"carrier index {i} is outside [0, {size})")
    return i


def check_factory_dtype(carrier_cls: type, dtype: Any, supported: Iterable[DType]) -> DType:
    """Dtype arguments of constructors and factories: TypeError for a non-DType, ValueError
    (before any allocation) for a DType the carrier cannot store."""
    if not isinstance(dtype, DType):
        raise TypeError(f"dtype must be a DType, not {type(dtype).__name__}")
    if dtype not in supported:
        names = ", ".join(d.name for d in supported)
        if isinstance(dtype, CompoundDType):
            raise ValueError(f"{carrier_cls.__name__} cannot store compound dtype {dtype.name}: "
                             f"its planes need one carrier each (supported: {names})")
        raise ValueError(f"{carrier_cls.__name__} cannot store dtype {dtype.name} (supported: {names})")
    return dtype


def check_size_argument(size: Any, name: str = "size") -> int:
    if isinstance(size, bool):
        raise TypeError(f"{name} must be an integer, not bool")
    try:
        n = operator.index(size)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(size).__name__}") from None
    if n < 0:
        raise ValueError(f"{name} must be non-negative, got {n}")
    return n


def check_bool_argument(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


class Carrier(_native._CarrierBase):
    """Base class of every carrier. Subclass it and implement the storage hooks."""

    # The framework state is held natively by `_native._CarrierBase` (so the Rust fast paths
    # read it as fields): `_sw_version`, `_sw_released`, `_sw_owner`, `_sw_claim`, and for
    # the built-ins `_storage` and `_mutable`.

    # The CarrierDefinition of a definition-backed instance, set by the extension module's
    # init_defined; the default hooks below delegate to it because a user's class
    # (`class Slab(Carrier): pass`) has no methods of its own to run the provider.
    _sw_definition: Any = None
    # Set by init_defined on a definition-backed instance only.
    _sw_def_dtype: DType
    _sw_def_mutable: bool

    def __init__(self, slots: Any = None, *, dtype: Any = None, mutable: Any = True) -> None:
        cls = type(self)
        definition = DEFINITION_HOOKS.definition_for(cls)
        self._sw_version = 0
        self._sw_released = False
        # The owning composite's token (Evictable, TiledEvictable), or None.
        self._sw_owner: object | None = None
        self._sw_claim: object | None = None
        if definition is None:
            DEFINITION_HOOKS.observe(cls)
            if slots is not None or dtype is not None or mutable is not True:
                raise TypeError(f"{cls.__name__} has no CarrierDefinition: Carrier.__init__ takes no "
                                "slots, dtype or mutable=False (those configure definition-backed carriers)")
        else:
            DEFINITION_HOOKS.init_defined(self, definition, slots, dtype, mutable)

    # ----- hooks a subclass implements ---------------------------------------------------
    def size(self) -> int:
        if self._sw_definition is not None:
            return DEFINITION_HOOKS.defined_size(self)
        raise NotImplementedError(f"{type(self).__name__} does not implement size()")

    def dtype(self) -> DType:
        if self._sw_definition is not None:
            return DEFINITION_HOOKS.defined_dtype(self)
        raise NotImplementedError(f"{type(self).__name__} does not implement dtype()")

    def get_value(self, i: int) -> Any:
        if self._sw_definition is not None:
            return DEFINITION_HOOKS.defined_get(self, i)
        raise NotImplementedError(f"{type(self).__name__} does not implement get_value()")

    def set_value(self, i: int, v: Any) -> None:
        if self._sw_definition is not None:
            return DEFINITION_HOOKS.defined_set(self, i, v)
        raise RuntimeError(f"{type(self).__name__} carrier is not mutable")

    def new_like(self, values: Iterable[Any], *, mutable: bool = True, dtype: DType | None = None) -> "Carrier":
        if self._sw_definition is not None:
            return DEFINITION_HOOKS.defined_new_like(self, values, mutable=mutable, dtype=dtype)
        raise NotImplementedError(f"{type(self).__name__} does not implement new_like()")

    def allocate_like(self, size: int, *, mutable: bool = True, dtype: DType | None = None,
                      empty: bool = False) -> "Carrier":
        if self._sw_definition is not None:
            return DEFINITION_HOOKS.defined_allocate_like(self, size, mutable=mutable, dtype=dtype, empty=empty)
        raise NotImplementedError(f"{type(self).__name__} does not implement allocate_like()")

    def _is_mutable(self) -> bool:
        if self._sw_definition is not None:
            return DEFINITION_HOOKS.defined_is_mutable(self)
        return False

    def _supports_storage_dtype(self, d: DType) -> bool:
        if self._sw_definition is not None:
            return DEFINITION_HOOKS.defined_supports_dtype(self, d)
        return d is self.dtype()

    def _release(self) -> None:
        if self._sw_definition is not None:
            return DEFINITION_HOOKS.defined_release(self)
        return None

    def dlpack_info(self) -> dict[str, Any]:
        raise BufferError(f"DLPack is not supported for {type(self).__name__} carrier")

    # ----- framework-owned members ------------------------------------------------------
    @property
    def version(self) -> int:
        return self._sw_version

    def is_released(self) -> bool:
        return self._sw_released

    def is_owned(self) -> bool:
        return self._sw_owner is not None

    def is_mutable(self) -> bool:
        return not self._sw_released and self._sw_owner is None and bool(self._is_mutable())

    def supports_storage_dtype(self, d: DType) -> bool:
        if not isinstance(d, DType):
            raise TypeError(f"supports_storage_dtype() argument must be a DType, not {type(d).__name__}")
        return bool(self._supports_storage_dtype(d))

    def __getitem__(self, i: Any) -> Any:
        return self.get_value(check_index(self, i))

    def __setitem__(self, i: Any, v: Any) -> None:
        self._sw_write_slot(i, lambda index: self.set_value(index, v))

    def release(self) -> None:
        self._sw_release_for(None)

    def _sw_release_for(self, owner: object | None, claim: object | None = None) -> None:
        """`release()`; with `owner`, for that owner: the composite that owns this carrier as
        a tier releasing it at the commit of a move between its tiers. The owner does not
        refuse it and stays, so the carrier goes from owned and live to owned and released
        in one step, never unowned in between. With `claim`, as that claim's own act: the
        commit of the move that claims this carrier as its source (the move request passes
        itself; nothing else holds it)."""
        # The checks and the start are one transition of the carrier's state: an owned or
        # claimed carrier raises, a released one returns. A release by the claiming move's
        # commit keeps its claim for the hook's duration (to everybody else, the carrier's
        # own `_release` hook included, the carrier still participates in that pending move);
        # any other release holds RELEASING for the hook's duration (outside every lock: a
        # hook may block), so a racing move or write fails instead of using storage that is
        # being freed. A write storing into the carrier refuses the release.
        began, saved = self._sw_begin_release(claim, RELEASING, owner)
        if not began:
            return None
        try:
            self._release()
        except BaseException:
            self._sw_abort_release(saved)
            raise
        self._sw_finish_release(saved)
        return None

    def _increment_version(self) -> None:
        self._sw_mutate(None, RELEASING)

    def facet(self, facet_type: type[_F]) -> _F | None:
        found: _F | None = DEFINITION_HOOKS.facet_of(self, facet_type)
        return found

    def require_facet(self, facet_type: type[_F]) -> _F:
        found = self.facet(facet_type)
        if found is None:
            raise NotImplementedError(f"{type(self).__name__} carrier has no {facet_type.__name__} facet")
        return found

    def __repr__(self) -> str:
        def attempt(hook: Any) -> str:
            try:
                return str(hook())
            except Exception:  # a subclass missing hooks must still be printable
                return "?"
        state = "released" if self._sw_released else f"size={attempt(self.size)}"
        dtype = attempt(lambda: self.dtype().name)
        return f"<{type(self).__name__} {state} dtype={dtype} version={self._sw_version}>"

    # ----- framework internals (see ARCHITECTURE.md, "Carrier state") ---------------------
    def _sw_storage(self) -> Any:
        """The Rust storage object behind a built-in carrier, or None."""
        return None

    def _sw_storage_gone(self) -> bool:
        """True once a release hook has dropped the storage, even while `release()` (of the
        user, or of a move's commit) is still running and the released flag is not yet set."""
        return False

    def _sw_check_unclaimed(self, action: str) -> None:
        """RuntimeError (`cannot {action} ...`) when a claim holds the carrier."""
        self._sw_check_claim(action, None, RELEASING)

    def _sw_check_writable(self) -> None:
        """Raise unless a public write may proceed now (checked after the index checks)."""
        if in_submit_window(self):
            # The claiming move's provider writing the destination during its own submit():
            # ownership by a composite (an Evictable's tier during evict/promote) does not
            # stop it.
            if not self._is_mutable():
                raise RuntimeError(f"{type(self).__name__} carrier is not mutable")
            return
        owner = self._sw_owner
        if owner is not None:
            raise RuntimeError(f"{type(self).__name__} carrier is not mutable: owned by "
                               f"{type(owner).__name__}")
        if not self._is_mutable():
            raise RuntimeError(f"{type(self).__name__} carrier is not mutable")
        self._sw_check_unclaimed("write to")

    def _sw_write_slot(self, i: Any, store: Any) -> None:
        """A public write of slot `i`: the index checks, the writability checks (each with its
        message, in the contract's order), then the write opened in the state cell (the same
        checks, made again atomically), `store(index)` with no lock held, and the write closed
        and counted. While it is open no claim or release of the carrier goes ahead."""
        index = check_index(self, i)
        self._sw_check_writable()
        self._sw_open_public_write()
        stored = False
        try:
            store(index)
            stored = True
        finally:
            self._sw_close_write(stored)

    def _sw_open_public_write(self) -> None:
        """Opens a public write in the state cell with the admission `_sw_check_writable`
        granted: the claiming move's provider during its own submit() (whatever the owner)."""
        claim = self._sw_claim
        if claim is not None and in_submit_window(self):
            self._sw_open_write(claim, RELEASING, None, True)
            return
        self._sw_open_write(None, RELEASING)

    def _sw_allocate_claimed(self, claim: object, size: int) -> None:
        """`_allocate(size)` as the act of `claim`, which must hold this carrier: a move growing
        its empty destination, or shrinking it back when the move fails (a projection into a
        caller's destination likewise). The carrier's own `_allocate` hook runs (a subclass's
        override included); a built-in's `_allocate`, which refuses while the carrier is
        claimed, admits this one call (`claimed_resize_admitted`)."""
        if self._sw_claim is not claim:
            raise RuntimeError(f"cannot resize {type(self).__name__} carrier: its claim has ended")
        saved, CLAIMED_RESIZE.entry = CLAIMED_RESIZE.entry, (self, claim)
        try:
            cast(Allocatable, self)._allocate(size)
        finally:
            CLAIMED_RESIZE.entry = saved

    def _sw_write_granted(self, i: Any, v: Any, request: object) -> None:
        """A write through a Tensor a move handed its transfer (`output`, or a provider's
        `TransferRequest.output`): while `request` claims this carrier as its destination the
        claim admits it (ownership by a composite does not stop it; immutability does): the
        transfer's store (`_sw_fill`), uncounted, in a write opened as the request's. Once the
        request no longer claims it, it is an ordinary public write."""
        if self._sw_claim is request and getattr(request, "destination", None) is self:
            index = check_index(self, i)
            if not self._is_mutable():
                raise RuntimeError(f"{type(self).__name__} carrier is not mutable")
            # Opened as the request's write; refused, it is still the request's claim that
            # decides (ended meanwhile: an ordinary write below, with its own checks).
            self._sw_open_write(request, RELEASING, None, True)
            stored = False
            try:
                if self._sw_claim is request:
                    self._sw_fill(index, v)
                    stored = True
                    return
            finally:
                self._sw_close_write(stored)
        self[i] = v

    def _sw_fill(self, i: int, v: Any) -> None:
        """Framework write of a move's transfer: no checks beyond the storage's own, and no
        version change (a move is not an in-place mutation). Built-ins write storage directly."""
        self.set_value(i, v)

    def _sw_write_as_owner(self, owner: object, i: int, v: Any) -> None:
        """A write by the owning composite (Evictable, TiledEvictable), the owner its
        capability: the public write's checks with the owner admitted, the write opened in
        the state cell as that owner's (so the carrier stays owned throughout and no other
        thread ever sees it unowned), the store, counted. Nothing is admitted by thread: a
        hook that the store runs and that writes this carrier itself is a public write, which
        the owner refuses."""
        if owner is not self._sw_owner:
            raise RuntimeError("only the owning carrier may write through this path")
        index = check_index(self, i)
        if not self._is_mutable():
            raise RuntimeError(f"{type(self).__name__} carrier is not mutable")
        self._sw_check_unclaimed("write to")
        self._sw_open_write(None, RELEASING, owner)
        stored = False
        try:
            # The store of the public write (`set_value` of a Python carrier, the storage's
            # own for a built-in), counted when the write closes.
            self._sw_fill(index, v)
            stored = True
        finally:
            self._sw_close_write(stored)

    # ----- pickling ---------------------------------------------------------------------------
    _SW_NATIVE_STATE = ("_sw_version", "_sw_released", "_sw_owner", "_sw_claim", "_storage", "_dtype",
                        "_mutable")

    def __getstate__(self) -> dict[str, Any]:
        """The instance dict plus the natively held state, so pickling sees what it saw when
        all of it was in the dict (a built-in's native storage then refuses with TypeError)."""
        state = dict(self.__dict__)
        for name in self._SW_NATIVE_STATE:
            try:
                state[name] = getattr(self, name)
            except AttributeError:  # `_storage`/`_dtype`/`_mutable` of a carrier that has none
                pass
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    # ----- context manager ------------------------------------------------------------------
    def __enter__(self) -> Self:
        """`with sw.CPU(n) as c:` binds the carrier itself."""
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Releases the carrier (`release()`, with its rules: an owned carrier or one held by a
        pending move raises RuntimeError). Exceptions from the block propagate."""
        self.release()


def not_a_carrier(name: str, value: Any, expected: str = "a Carrier") -> TypeError:
    """The TypeError for an argument that should be a carrier instance. Passing the class
    itself (`move(t, FileBacked)`) is a common slip, so that case names the fix."""
    if isinstance(value, type) and issubclass(value, Carrier):
        return TypeError(f"{name} must be {expected}, not the class {value.__name__} "
                         f"(did you mean `{value.__name__}()`?)")
    return TypeError(f"{name} must be {expected}, not {type(value).__name__}")
