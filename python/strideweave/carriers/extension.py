"""Carrier definitions: storage providers, exact transfer routes and sealing
(extension-and-tiling.md §1–§6).

A user carrier can be a plain `class Slab(Carrier): pass` whose storage is supplied by a
`StorageProvider` registered for that exact class with `register_carrier_definition`. The
base class consults this module (through `base.DEFINITION_HOOKS`) to construct such carriers
and to run its default hooks, and the move layer (`carriers/move.py`) asks it which route an
exact carrier-class pair takes (`resolve_route`), to prepare that route (`prepare_route`) and
to check a provider's completion object (`check_provider_completion`).

Definition state is per exact class and never inherited: lookups use class identity, never
the MRO. A class's state, including having no definition, is fixed ("sealed") the first time
the framework observes it; registration and observation share one lock, so a class cannot be
defined while an instance of it is being built as definition-free, or vice versa.
"""
from __future__ import annotations

import operator
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, TypeVar, runtime_checkable

from strideweave.carriers import base as _base
from strideweave.carriers.base import Carrier, check_index, not_a_carrier
from strideweave.carriers.dtype import DType
from strideweave.layout import Layout

if TYPE_CHECKING:  # annotations only: the tensor module sits above this one
    from strideweave.tensor import Tensor

__all__ = ["CarrierDefinition", "StorageProvider", "TransferProvider", "TransferRoute",
           "TransferRequest", "PreparedTransfer", "Unsupported", "ProviderCompletion",
           "CarrierFacet", "register_carrier_definition"]


# ----- argument checks shared by the value types ------------------------------------------

def _is_carrier_class(value: Any) -> bool:
    """A strict subclass of Carrier (Carrier itself is not a carrier class)."""
    return isinstance(value, type) and issubclass(value, Carrier) and value is not Carrier


def _check_callable(value: Any, name: str) -> Callable[..., Any]:
    if not callable(value):
        raise TypeError(f"{name} must be callable, not {type(value).__name__}")
    return value


def _check_carrier_class(value: Any, name: str) -> type[Carrier]:
    if not _is_carrier_class(value):
        shown = value.__name__ if isinstance(value, type) else type(value).__name__
        raise TypeError(f"{name} must be a Carrier subclass, not {shown}")
    return value


def _check_str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def _check_nonempty(value: str, name: str) -> None:
    if value == "":
        raise ValueError(f"{name} must be a non-empty string")


def _consume(values: Any, name: str, entry_type: type) -> tuple[Any, ...]:
    """Consume an iterable exactly once into a tuple, checking every entry's type."""
    try:
        iterator = iter(values)
    except TypeError:
        raise TypeError(f"{name} must be an iterable of {entry_type.__name__}, "
                        f"not {type(values).__name__}") from None
    items = tuple(iterator)
    for k, item in enumerate(items):
        if not isinstance(item, entry_type):
            raise TypeError(f"{name}[{k}] must be a {entry_type.__name__}, not {type(item).__name__}")
    return items


def _class_name(cls: Any) -> str:
    return cls.__name__ if isinstance(cls, type) else repr(cls)


class _Frozen:
    """Immutable value: fields are written once by `_sw_set` in `__init__`."""

    __slots__ = ()

    def _sw_set(self, **fields: Any) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete attribute {name!r}")


# ----- value types (§2) --------------------------------------------------------------------

class StorageProvider(_Frozen):
    """The storage callbacks of a definition-backed carrier class (§3).

    Every callback receives the exact carrier instance first and may keep state on it:
    `supports_dtype(c, dtype) -> bool`, `physical_size(c) -> int`, `allocate(c, slots)`,
    `release(c)`, `read(c, i)` and `write(c, i, v)`. The framework checks their results and
    runs the slot checks before `read`/`write`. `elementwise_fallback=True` lets a move
    between two definition-backed classes without a route copy element by element.
    """

    __slots__ = ("supports_dtype", "physical_size", "allocate", "release", "read", "write",
                 "elementwise_fallback")
    supports_dtype: Callable[[Any, DType], bool]
    physical_size: Callable[[Any], int]
    # Each callback's first parameter is the exact carrier class the definition is registered
    # for (hence Any). allocate, release and write should return None; they are typed
    # `object` because the framework checks what they return (TypeError for anything else).
    allocate: Callable[[Any, int], object]
    release: Callable[[Any], object]
    read: Callable[[Any, int], Any]
    write: Callable[[Any, int, Any], object]
    elementwise_fallback: bool

    def __init__(self, supports_dtype: Callable[[Any, DType], bool],
                 physical_size: Callable[[Any], int], allocate: Callable[[Any, int], object],
                 release: Callable[[Any], object], read: Callable[[Any, int], Any],
                 write: Callable[[Any, int, Any], object],
                 elementwise_fallback: bool = False) -> None:
        _check_callable(supports_dtype, "supports_dtype")
        _check_callable(physical_size, "physical_size")
        _check_callable(allocate, "allocate")
        _check_callable(release, "release")
        _check_callable(read, "read")
        _check_callable(write, "write")
        if type(elementwise_fallback) is not bool:
            raise TypeError(f"elementwise_fallback must be exactly a bool, "
                            f"not {type(elementwise_fallback).__name__}")
        self._sw_set(supports_dtype=supports_dtype, physical_size=physical_size, allocate=allocate,
                     release=release, read=read, write=write,
                     elementwise_fallback=elementwise_fallback)

    def __repr__(self) -> str:
        return f"StorageProvider(elementwise_fallback={self.elementwise_fallback})"


class TransferProvider(_Frozen):
    """The mechanics of one route: `prepare(request) -> PreparedTransfer | Unsupported`."""

    __slots__ = ("prepare",)
    prepare: Callable[[TransferRequest], PreparedTransfer | Unsupported]

    def __init__(self, prepare: Callable[[TransferRequest], PreparedTransfer | Unsupported]) -> None:
        self._sw_set(prepare=_check_callable(prepare, "prepare"))

    def __repr__(self) -> str:
        return f"TransferProvider({self.prepare!r})"


class TransferRoute(_Frozen):
    """One direction of one exact carrier-class pair, owned by the source's definition.

    `route_id` names the route in error messages.
    """

    __slots__ = ("source_class", "destination_class", "route_id", "provider")
    source_class: type[Carrier]
    destination_class: type[Carrier]
    route_id: str
    provider: TransferProvider

    def __init__(self, source_class: type[Carrier], destination_class: type[Carrier], route_id: str,
                 provider: TransferProvider) -> None:
        _check_carrier_class(source_class, "source_class")
        _check_carrier_class(destination_class, "destination_class")
        _check_str(route_id, "route_id")
        if not isinstance(provider, TransferProvider):
            raise TypeError(f"provider must be a TransferProvider, not {type(provider).__name__}")
        _check_nonempty(route_id, "route_id")
        self._sw_set(source_class=source_class, destination_class=destination_class,
                     route_id=route_id, provider=provider)

    def __repr__(self) -> str:
        return (f"TransferRoute({self.source_class.__name__}, {self.destination_class.__name__}, "
                f"{self.route_id!r})")


class Unsupported(_Frozen):
    """A provider's answer declining a request without failing; `reason` says why."""

    __slots__ = ("reason",)
    reason: str

    def __init__(self, reason: str) -> None:
        _check_str(reason, "reason")
        _check_nonempty(reason, "reason")
        self._sw_set(reason=reason)

    def __repr__(self) -> str:
        return f"Unsupported({self.reason!r})"


class PreparedTransfer(_Frozen):
    """A prepared transfer: the move calls `submit()` at most once, on the caller's thread,
    while it holds both carriers. `submit()` returns None (done) or a ProviderCompletion."""

    __slots__ = ("submit",)
    submit: Callable[[], ProviderCompletion[None] | None]

    def __init__(self, submit: Callable[[], ProviderCompletion[None] | None]) -> None:
        self._sw_set(submit=_check_callable(submit, "submit"))

    def __repr__(self) -> str:
        return f"PreparedTransfer({self.submit!r})"


class TransferRequest(_Frozen):
    """What a route's `prepare` is asked to move: the physical window
    `[tensor.offset, tensor.offset + physical_span)` of the source carrier into destination
    slots `[0, physical_span)`, wherever `layout` reaches."""

    __slots__ = ("tensor", "destination", "source_class", "destination_class", "dtype", "layout",
                 "physical_span")
    tensor: Tensor
    destination: Carrier
    source_class: type[Carrier]
    destination_class: type[Carrier]
    dtype: DType
    layout: Layout
    physical_span: int

    def __init__(self, tensor: Tensor, destination: Carrier, source_class: type[Carrier],
                 destination_class: type[Carrier], dtype: DType, layout: Layout,
                 physical_span: int) -> None:
        from strideweave.tensor import Tensor

        if not isinstance(tensor, Tensor):
            raise TypeError(f"tensor must be a Tensor, not {type(tensor).__name__}")
        if not isinstance(destination, Carrier):
            raise not_a_carrier("destination", destination)
        if source_class is not type(tensor.carrier):
            raise TypeError(f"source_class must be the tensor carrier's exact class "
                            f"{type(tensor.carrier).__name__}, not {_class_name(source_class)}")
        if destination_class is not type(destination):
            raise TypeError(f"destination_class must be the destination's exact class "
                            f"{type(destination).__name__}, not {_class_name(destination_class)}")
        if dtype is not tensor.dtype():
            raise TypeError(f"dtype must be the tensor's dtype {tensor.dtype().name}, not {dtype!r}")
        own = tensor.layout
        if not isinstance(layout, Layout) or (layout is not own and layout != own):
            raise TypeError(f"layout must be the tensor's own Layout {own!r}, not {layout!r}")
        if isinstance(physical_span, bool) or not isinstance(physical_span, int):
            raise TypeError(f"physical_span must be an int, not {type(physical_span).__name__}")
        if physical_span != own.cosize:
            raise ValueError(f"physical_span must be the layout's cosize {own.cosize}, "
                             f"not {physical_span}")
        self._sw_set(tensor=tensor, destination=destination, source_class=source_class,
                     destination_class=destination_class, dtype=dtype, layout=layout,
                     physical_span=physical_span)

    @property
    def offset(self) -> int:
        """First source slot of the window (the tensor's offset)."""
        return self.tensor.offset

    def __repr__(self) -> str:
        return (f"TransferRequest({self.source_class.__name__} -> {self.destination_class.__name__}, "
                f"dtype={self.dtype.name}, layout={self.layout!r}, offset={self.offset}, "
                f"physical_span={self.physical_span})")


class CarrierFacet:
    """Open marker base class of per-carrier capability objects, which are immutable.

    A CarrierDefinition lists facet instances; `carrier.facet(T)` returns the one whose exact
    type is `T`.
    """

    __slots__ = ()


class CarrierDefinition(_Frozen):
    """Everything the framework needs to host one exact carrier class: its storage provider,
    its outgoing transfer routes and its facets. `kernels` and `composite` are reserved (LATER)
    and must be None."""

    __slots__ = ("storage", "kernels", "transfers", "composite", "facets", "_routes", "_facets")
    storage: StorageProvider
    kernels: None
    transfers: tuple[TransferRoute, ...]
    composite: None
    facets: tuple[CarrierFacet, ...]
    _routes: dict[type[Carrier], TransferRoute]
    _facets: dict[type[CarrierFacet], CarrierFacet]

    def __init__(self, storage: StorageProvider, kernels: None = None,
                 transfers: Iterable[TransferRoute] = (), composite: None = None,
                 facets: Iterable[CarrierFacet] = ()) -> None:
        if not isinstance(storage, StorageProvider):
            raise TypeError(f"storage must be a StorageProvider, not {type(storage).__name__}")
        if kernels is not None:
            raise TypeError("kernels must be None: kernel providers are not supported yet")
        routes = _consume(transfers, "transfers", TransferRoute)
        if composite is not None:
            raise TypeError("composite must be None: composite providers are not supported yet")
        facet_items = _consume(facets, "facets", CarrierFacet)
        by_pair: dict[tuple[type[Carrier], type[Carrier]], TransferRoute] = {}
        for route in routes:
            pair = (route.source_class, route.destination_class)
            if pair in by_pair:
                raise ValueError(f"transfers declares two routes for ({pair[0].__name__}, "
                                 f"{pair[1].__name__}): {by_pair[pair].route_id!r} and "
                                 f"{route.route_id!r}")
            by_pair[pair] = route
        by_type: dict[type[CarrierFacet], CarrierFacet] = {}
        for facet in facet_items:
            if type(facet) in by_type:
                raise ValueError(f"facets declares two facets of type {type(facet).__name__}")
            by_type[type(facet)] = facet
        # Registration guarantees every route's source is the defined class, so routes are
        # looked up by destination class alone.
        self._sw_set(storage=storage, kernels=None, transfers=routes, composite=None,
                     facets=facet_items,
                     _routes={dest: route for (_, dest), route in by_pair.items()},
                     _facets=by_type)

    def __repr__(self) -> str:
        return (f"CarrierDefinition(storage={self.storage!r}, transfers={self.transfers!r}, "
                f"facets={self.facets!r})")


T_co = TypeVar("T_co", covariant=True)


@runtime_checkable
class ProviderCompletion(Protocol[T_co]):
    """Structural protocol of a provider's pending work: any object with `done` and `wait()`.

    It must be thread-safe, `done` must turn True exactly when the work ends, and every
    `wait()` must give the same result or exception. It must not be awaitable.
    """

    @property
    def done(self) -> bool: ...

    def wait(self) -> T_co: ...


# ----- registry and sealing (§4) -----------------------------------------------------------

_lock = threading.Lock()
# Weak keys: a fresh class that dies takes its definition and seal with it.
_definitions: "weakref.WeakKeyDictionary[type, CarrierDefinition]" = weakref.WeakKeyDictionary()
_sealed: "weakref.WeakSet[type]" = weakref.WeakSet()

_SHIPPED = (("strideweave.carriers.generic", "Generic"), ("strideweave.carriers.cpu", "CPU"),
            ("strideweave.carriers.file_backed", "FileBacked"),
            ("strideweave.carriers.block_device", "BlockDeviceCarrier"),
            ("strideweave.carriers.evictable", "Evictable"),
            ("strideweave.carriers.tiled_evictable", "TiledEvictable"),
            ("strideweave.ray.carrier", "RayObjectCarrier"))


def _is_shipped(cls: type) -> bool:
    # A shipped class can only be passed in once its module is imported, so looking modules
    # up in sys.modules avoids importing (and cycling through) modules that import this one.
    for module_name, name in _SHIPPED:
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, name, None) is cls:
            return True
    return False


def definition_of(cls: Any) -> CarrierDefinition | None:
    """The definition registered for exactly `cls` (never a base class's); does not seal."""
    try:
        return _definitions.get(cls)
    except TypeError:  # not weak-referenceable, so certainly not a carrier class
        return None


def observe(cls: Any) -> None:
    """Seal `cls`: its definition state, including having none, is fixed from now on."""
    if not isinstance(cls, type) or cls in _sealed:
        return None
    with _lock:
        _sealed.add(cls)
    return None


def _observe_and_lookup(cls: type) -> CarrierDefinition | None:
    """Seal and look up in one step (Carrier.__init__), so no registration slips between."""
    if cls in _sealed:
        return _definitions.get(cls)
    with _lock:
        _sealed.add(cls)
        return _definitions.get(cls)


def is_definition_backed(carrier_or_cls: Any) -> bool:
    """Whether the exact class (of a carrier instance, or the class itself) has a definition.

    This is a capability query, so it observes (seals) the class."""
    cls = carrier_or_cls if isinstance(carrier_or_cls, type) else type(carrier_or_cls)
    return _observe_and_lookup(cls) is not None


def _register(carrier_class: Any, definition: Any, *, allow_shipped: bool) -> None:
    if not _is_carrier_class(carrier_class):
        shown = carrier_class.__name__ if isinstance(carrier_class, type) else type(carrier_class).__name__
        raise TypeError(f"carrier_class must be a Carrier subclass, not {shown}")
    if not isinstance(definition, CarrierDefinition):
        raise TypeError(f"definition must be a CarrierDefinition, not {type(definition).__name__}")
    if not allow_shipped and _is_shipped(carrier_class):
        raise TypeError(f"{carrier_class.__name__} is a shipped carrier class: its movement and "
                        "storage are built in and it cannot take a CarrierDefinition")
    for route in definition.transfers:
        if route.source_class is not carrier_class:
            raise TypeError(f"route {route.route_id!r} has source {route.source_class.__name__}, "
                            f"not {carrier_class.__name__}: a definition only declares routes "
                            "out of its own exact class")
    with _lock:
        if carrier_class in _sealed:
            raise TypeError(f"{carrier_class.__name__} is sealed: it was already observed "
                            "(instantiated, moved, or queried) without this definition")
        if carrier_class in _definitions:
            raise TypeError(f"{carrier_class.__name__} already has a CarrierDefinition")
        _definitions[carrier_class] = definition


def register_carrier_definition(carrier_class: type[Carrier], definition: CarrierDefinition) -> None:
    """Bind `definition` to exactly `carrier_class` for the life of the process.

    TypeError, checked in order: not a Carrier subclass; not a CarrierDefinition; a shipped
    class; a route whose source is not `carrier_class`; the class is already sealed (observed);
    it already has a definition. A failed registration changes nothing. Subclasses of
    `carrier_class` stay definition-free.
    """
    _register(carrier_class, definition, allow_shipped=False)
    return None


def _register_shipped_definition(carrier_class: type[Carrier], definition: CarrierDefinition) -> None:
    """Registration for a shipped class that is itself definition-backed (TiledEvictable),
    called once by its own module at import; every other check still applies."""
    _register(carrier_class, definition, allow_shipped=True)


# ----- definition-backed carrier behaviour (§3, §4) -----------------------------------------

def _storage(carrier: Carrier) -> StorageProvider:
    storage: StorageProvider = carrier._sw_definition.storage
    return storage


def _checked_supports(storage: StorageProvider, carrier: Carrier, dtype: DType) -> bool:
    answer = storage.supports_dtype(carrier, dtype)
    if type(answer) is not bool:
        raise TypeError(f"{type(carrier).__name__} storage provider's supports_dtype returned "
                        f"{type(answer).__name__}, not bool")
    return answer


def _checked_allocate(storage: StorageProvider, carrier: Carrier, slots: int) -> None:
    result = storage.allocate(carrier, slots)
    if result is not None:
        raise TypeError(f"{type(carrier).__name__} storage provider's allocate returned "
                        f"{type(result).__name__}, not None")
    size = defined_size(carrier)
    if size != slots:
        raise ValueError(f"{type(carrier).__name__} storage provider's allocate left {size} slots, "
                         f"not the {slots} requested")


def _checked_write(storage: StorageProvider, carrier: Carrier, i: int, v: Any) -> None:
    result = storage.write(carrier, i, v)
    if result is not None:
        raise TypeError(f"{type(carrier).__name__} storage provider's write returned "
                        f"{type(result).__name__}, not None")


def init_defined(carrier: Carrier, definition: CarrierDefinition, slots: Any, dtype: Any,
                 mutable: Any) -> None:
    """`Carrier.__init__` of a definition-backed instance: check, allocate, check the size."""
    cls = type(carrier)
    if slots is None or dtype is None:
        missing = " and ".join(n for n, v in (("slots", slots), ("dtype", dtype)) if v is None)
        raise TypeError(f"{cls.__name__} is definition-backed: Carrier.__init__ requires {missing} "
                        f"(call {cls.__name__}(slots, dtype=...))")
    if isinstance(slots, bool):
        raise TypeError("slots must be an int, not bool")
    try:
        n = operator.index(slots)
    except TypeError:
        raise TypeError(f"slots must be an int, not {type(slots).__name__}") from None
    if not isinstance(dtype, DType):
        raise TypeError(f"dtype must be a DType, not {type(dtype).__name__}")
    if not isinstance(mutable, bool):
        raise TypeError(f"mutable must be a bool, not {type(mutable).__name__}")
    storage = definition.storage
    if not _checked_supports(storage, carrier, dtype):
        raise TypeError(f"{cls.__name__} cannot store dtype {dtype.name}")
    if n < 0:
        raise ValueError(f"slots must be non-negative, got {n}")
    carrier._sw_definition = definition
    carrier._sw_def_dtype = dtype
    carrier._sw_def_mutable = mutable
    _checked_allocate(storage, carrier, n)


def defined_size(carrier: Carrier) -> int:
    if carrier._sw_released:
        return 0
    size = _storage(carrier).physical_size(carrier)
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"{type(carrier).__name__} storage provider's physical_size returned "
                        f"{type(size).__name__}, not int")
    if size < 0:
        raise ValueError(f"{type(carrier).__name__} storage provider's physical_size returned "
                         f"a negative size {size}")
    return size


def defined_dtype(carrier: Carrier) -> DType:
    return carrier._sw_def_dtype


def defined_get(carrier: Carrier, i: Any) -> Any:
    return _storage(carrier).read(carrier, check_index(carrier, i))


def defined_set(carrier: Carrier, i: Any, v: Any) -> None:
    # The storage hook only: `carrier[i] = v` has already checked mutability and bumps the
    # version itself, and a move's fill writes without versioning.
    _checked_write(_storage(carrier), carrier, check_index(carrier, i), v)


def defined_is_mutable(carrier: Carrier) -> bool:
    return carrier._sw_def_mutable


def defined_supports_dtype(carrier: Carrier, d: DType) -> bool:
    return _checked_supports(_storage(carrier), carrier, d)


def defined_release(carrier: Carrier) -> None:
    result = _storage(carrier).release(carrier)
    if result is not None:
        raise TypeError(f"{type(carrier).__name__} storage provider's release returned "
                        f"{type(result).__name__}, not None; the carrier stays live")


def _factory_args(carrier: Carrier, mutable: Any, dtype: Any) -> DType:
    if not isinstance(mutable, bool):
        raise TypeError(f"mutable must be a bool, not {type(mutable).__name__}")
    if dtype is None:
        return carrier._sw_def_dtype
    if not isinstance(dtype, DType):
        raise TypeError(f"dtype must be a DType, not {type(dtype).__name__}")
    return dtype


def defined_new_like(carrier: Carrier, values: Iterable[Any], *, mutable: Any = True,
                     dtype: Any = None) -> Carrier:
    """A fresh instance of the exact class holding `values`, at version 0 (works after
    release: it reads nothing from `carrier`)."""
    d = _factory_args(carrier, mutable, dtype)
    try:
        items = list(values)
    except TypeError:
        raise TypeError(f"values must be iterable, not {type(values).__name__}") from None
    fresh = type(carrier)(len(items), dtype=d, mutable=mutable)
    storage = _storage(fresh)
    try:
        # Straight to the provider: filling a fresh instance is construction, not a versioned
        # write, and must succeed for an immutable one too.
        for k, v in enumerate(items):
            _checked_write(storage, fresh, k, v)
    except BaseException:
        try:
            fresh.release()
        except Exception:  # the write failure is the one to report
            pass
        raise
    return fresh


def defined_allocate_like(carrier: Carrier, size: Any, *, mutable: Any = True, dtype: Any = None,
                          empty: Any = False) -> Carrier:
    """A fresh instance of the exact class with `size` slots as the provider allocates them."""
    n = _base.check_size_argument(size)
    d = _factory_args(carrier, mutable, dtype)
    _base.check_bool_argument(empty, "empty")
    return type(carrier)(n, dtype=d, mutable=mutable)


def allocate_destination(carrier: Carrier, slots: int) -> None:
    """Allocate an empty definition-backed move destination to `slots` (§5 step 3)."""
    definition = carrier._sw_definition or definition_of(type(carrier))
    if definition is None:
        raise TypeError(f"{type(carrier).__name__} is not definition-backed")
    _checked_allocate(definition.storage, carrier, slots)


def _facet_of(carrier: Carrier, facet_type: Any) -> Any:
    """`carrier.facet(facet_type)`: the definition's facet of exactly that type, or None."""
    if not (isinstance(facet_type, type) and issubclass(facet_type, CarrierFacet)):
        shown = facet_type.__name__ if isinstance(facet_type, type) else type(facet_type).__name__
        raise TypeError(f"facet type must be a CarrierFacet subclass, not {shown}")
    definition = _observe_and_lookup(type(carrier))
    if definition is None:
        return None
    return definition._facets.get(facet_type)


# ----- movement (§5) -----------------------------------------------------------------------

class RouteDecision(_Frozen):
    """How a definition-backed exact pair moves: `route` (or None) and whether the elementwise
    fallback is permitted when there is no route or the route declines."""

    __slots__ = ("source_class", "destination_class", "route", "fallback")
    source_class: type[Carrier]
    destination_class: type[Carrier]
    route: TransferRoute | None
    fallback: bool

    def __init__(self, source_class: type[Carrier], destination_class: type[Carrier], route: TransferRoute | None,
                 fallback: bool) -> None:
        self._sw_set(source_class=source_class, destination_class=destination_class, route=route,
                     fallback=fallback)

    def __repr__(self) -> str:
        return f"RouteDecision(route={self.route!r}, fallback={self.fallback})"


def _pair(source_cls: type, dest_cls: type) -> str:
    return f"({_class_name(source_cls)}, {_class_name(dest_cls)})"


def resolve_route(source_cls: type, dest_cls: type) -> RouteDecision | None:
    """Resolve an exact pair per §5; None when neither class is definition-backed."""
    with _lock:
        _sealed.add(source_cls)
        _sealed.add(dest_cls)
        source_def = _definitions.get(source_cls)
        dest_def = _definitions.get(dest_cls)
    if source_def is None and dest_def is None:
        return None
    if source_def is None:
        raise NotImplementedError(
            f"no transfer route for {_pair(source_cls, dest_cls)}: {_class_name(dest_cls)} is "
            f"definition-backed and {_class_name(source_cls)} is not; routes belong to the "
            "source's CarrierDefinition")
    route = source_def._routes.get(dest_cls)
    fallback = (dest_def is not None and source_def.storage.elementwise_fallback
                and dest_def.storage.elementwise_fallback)
    if route is None and not fallback:
        raise NotImplementedError(
            f"no transfer route for {_pair(source_cls, dest_cls)}: {_class_name(source_cls)}'s "
            "CarrierDefinition declares none to that exact class and the elementwise fallback "
            "needs both classes defined with elementwise_fallback=True")
    return RouteDecision(source_cls, dest_cls, route, fallback)


def _state(carrier: Carrier) -> tuple[int, bool, int]:
    return (carrier.version, carrier.is_released(), carrier.size())


def prepare_route(decision: RouteDecision, tensor: Tensor, destination: Carrier) -> PreparedTransfer | None:
    """Run the decided route's `prepare` (§5 steps 1–2). None means: use the elementwise
    fallback (no route, or the route declined and fallback is permitted)."""
    from strideweave import _autograd

    route = decision.route
    if route is None:
        return None
    source = tensor.carrier
    request = TransferRequest(tensor, destination, type(source), type(destination), tensor.dtype(),
                              tensor.layout, tensor.layout.cosize)
    before = (_state(source), _state(destination))
    with _autograd.no_grad():
        result = route.provider.prepare(request)
    pair = _pair(type(source), type(destination))
    if isinstance(result, PreparedTransfer):
        pass
    elif isinstance(result, Unsupported):
        if not decision.fallback:
            raise NotImplementedError(f"transfer route {route.route_id!r} for {pair} declined the "
                                      f"request: {result.reason}")
    else:
        raise TypeError(f"transfer route {route.route_id!r} for {pair}: prepare returned "
                        f"{type(result).__name__}, not PreparedTransfer or Unsupported")
    # The move continues either way, so prepare must have left both carriers as they were.
    if (_state(source), _state(destination)) != before:
        raise RuntimeError(f"transfer route {route.route_id!r} for {pair}: prepare changed a "
                           "carrier's version, size or release state")
    return result if isinstance(result, PreparedTransfer) else None


def check_provider_completion(obj: Any) -> None:
    """Wait for a `submit()` result that is not None and check the ProviderCompletion
    contract (§5 step 5). Runs on a move worker thread; a TypeError raised here, or any
    exception `wait()` raises, becomes the move's terminal failure."""
    name = type(obj).__name__
    if hasattr(obj, "__await__"):
        raise TypeError(f"submit() returned an awaitable {name}: a ProviderCompletion has done "
                        "and wait() and no __await__")
    try:
        done = obj.done
        wait = obj.wait
    except AttributeError:
        raise TypeError(f"submit() returned {name}, which is neither None nor a ProviderCompletion "
                        "(an object with done and wait())") from None
    if type(done) is not bool:
        raise TypeError(f"ProviderCompletion {name}.done is {type(done).__name__}, not bool")
    if not callable(wait):
        raise TypeError(f"ProviderCompletion {name}.wait is not callable")
    result = wait()
    if result is not None:
        raise TypeError(f"ProviderCompletion {name}.wait() returned {type(result).__name__}, "
                        "not None")
    done = obj.done
    if type(done) is not bool:
        raise TypeError(f"ProviderCompletion {name}.done is {type(done).__name__}, not bool")
    if not done:
        raise TypeError(f"ProviderCompletion {name}.done is still False after wait() returned")


def require_no_definition(*classes: Any) -> None:
    """Legacy registry guard (§5): observe the named classes, then RuntimeError if either exact
    class is definition-backed."""
    found = None
    with _lock:
        for cls in classes:
            if isinstance(cls, type):
                _sealed.add(cls)
                if found is None and cls in _definitions:
                    found = cls
    if found is not None:
        raise RuntimeError(f"{found.__name__} is definition-backed: the legacy move registry does "
                           "not apply to it; declare its movement as a TransferRoute in its "
                           "CarrierDefinition")


# ----- wiring into the base class ----------------------------------------------------------

_hooks = _base.DEFINITION_HOOKS
# The base class's placeholder static methods are replaced on purpose (see _DefinitionHooks).
_hooks.definition_for = _observe_and_lookup  # type: ignore[method-assign]
_hooks.observe = observe  # type: ignore[method-assign]
_hooks.init_defined = init_defined  # type: ignore[method-assign]
_hooks.defined_size = defined_size
_hooks.defined_dtype = defined_dtype
_hooks.defined_get = defined_get
_hooks.defined_set = defined_set
_hooks.defined_new_like = defined_new_like
_hooks.defined_allocate_like = defined_allocate_like
_hooks.defined_is_mutable = defined_is_mutable
_hooks.defined_supports_dtype = defined_supports_dtype
_hooks.defined_release = defined_release
_hooks.facet_of = _facet_of
