"""The value types of carrier definitions (docs/spec/extension-and-tiling.md §2): the storage
provider, transfer providers and routes, a provider's answers, the transfer request, facets,
the definition itself and the ProviderCompletion protocol.

Their public home is `strideweave.carriers.extension`, which re-exports them (and names
itself their module); this module holds their construction checks.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Protocol, TypeVar, runtime_checkable

from strideweave.carriers.base import Carrier, not_a_carrier
from strideweave.carriers.dtype import DType
from strideweave.layout import Layout

if TYPE_CHECKING:  # annotations only: the tensor module sits above this one
    from strideweave.tensor import Tensor

__all__: list[str] = []  # internal module: the public names live in strideweave.carriers.extension

_V = TypeVar("_V")


# ----- argument checks shared by the value types ------------------------------------------

def _is_carrier_class(value: Any) -> bool:
    """A strict subclass of Carrier (Carrier itself is not a carrier class)."""
    return isinstance(value, type) and issubclass(value, Carrier) and value is not Carrier


def _check_callable(value: Any, name: str) -> Callable[..., Any]:
    if not callable(value):
        raise TypeError(f"{name} must be callable, not {type(value).__name__}")
    return value


def check_carrier_class(value: Any, name: str) -> type[Carrier]:
    if not _is_carrier_class(value):
        shown = value.__name__ if isinstance(value, type) else type(value).__name__
        raise TypeError(f"{name} must be a Carrier subclass, not {shown}")
    return value


def check_type(value: Any, expected: type[_V], name: str) -> _V:
    """`value` if it is an instance of `expected`, else TypeError naming both types."""
    if not isinstance(value, expected):
        raise TypeError(f"{name} must be a {expected.__name__}, not {type(value).__name__}")
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


def class_name(cls: Any) -> str:
    return cls.__name__ if isinstance(cls, type) else repr(cls)


class FrozenValue:
    """Immutable value: fields are written once by `_sw_set` in `__init__`."""

    __slots__ = ()

    def _sw_set(self, **fields: Any) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot delete attribute {name!r}")


class KeyedValue(FrozenValue):
    """A FrozenValue compared and hashed by one field, its key: `a == b` when `b` is an
    instance of the class that named the key (`_sw_key_field`, set in the class body) and both
    keys are equal; `hash(a)` is its key's hash."""

    __slots__ = ()
    _sw_key_field: ClassVar[str]
    _sw_key_class: ClassVar[type]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_sw_key_field" in cls.__dict__:
            cls._sw_key_class = cls

    def __eq__(self, other: object) -> bool:
        key = self._sw_key_field
        return isinstance(other, self._sw_key_class) and getattr(other, key) == getattr(self, key)

    def __hash__(self) -> int:
        return hash(getattr(self, self._sw_key_field))


# ----- value types (§2) --------------------------------------------------------------------

class StorageProvider(FrozenValue):
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


class TransferProvider(FrozenValue):
    """The mechanics of one route: `prepare(request) -> PreparedTransfer | Unsupported`."""

    __slots__ = ("prepare",)
    prepare: Callable[[TransferRequest], PreparedTransfer | Unsupported]

    def __init__(self, prepare: Callable[[TransferRequest], PreparedTransfer | Unsupported]) -> None:
        self._sw_set(prepare=_check_callable(prepare, "prepare"))

    def __repr__(self) -> str:
        return f"TransferProvider({self.prepare!r})"


class TransferRoute(FrozenValue):
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
        check_carrier_class(source_class, "source_class")
        check_carrier_class(destination_class, "destination_class")
        check_type(route_id, str, "route_id")
        check_type(provider, TransferProvider, "provider")
        _check_nonempty(route_id, "route_id")
        self._sw_set(source_class=source_class, destination_class=destination_class,
                     route_id=route_id, provider=provider)

    def __repr__(self) -> str:
        return (f"TransferRoute({self.source_class.__name__}, {self.destination_class.__name__}, "
                f"{self.route_id!r})")


class Unsupported(FrozenValue):
    """A provider's answer declining a request without failing; `reason` says why."""

    __slots__ = ("reason",)
    reason: str

    def __init__(self, reason: str) -> None:
        check_type(reason, str, "reason")
        _check_nonempty(reason, "reason")
        self._sw_set(reason=reason)

    def __repr__(self) -> str:
        return f"Unsupported({self.reason!r})"


class PreparedTransfer(FrozenValue):
    """A prepared transfer: the move calls `submit()` at most once, on the caller's thread,
    while it holds both carriers. `submit()` returns None (done) or a ProviderCompletion."""

    __slots__ = ("submit",)
    submit: Callable[[], ProviderCompletion[None] | None]

    def __init__(self, submit: Callable[[], ProviderCompletion[None] | None]) -> None:
        self._sw_set(submit=_check_callable(submit, "submit"))

    def __repr__(self) -> str:
        return f"PreparedTransfer({self.submit!r})"


class TransferRequest(FrozenValue):
    """What a route's `prepare` is asked to move: the physical window
    `[tensor.offset, tensor.offset + physical_span)` of the source carrier into destination
    slots `[0, physical_span)`, wherever `layout` reaches."""

    __slots__ = ("tensor", "destination", "source_class", "destination_class", "dtype", "layout",
                 "physical_span", "output")
    tensor: Tensor
    destination: Carrier
    source_class: type[Carrier]
    destination_class: type[Carrier]
    dtype: DType
    layout: Layout
    physical_span: int
    #: The destination window `[0, physical_span)` as a flat Tensor, bound by the move once it
    #: has claimed and sized the destination (None before that, and for a request made by
    #: hand). How an asynchronous provider fills the destination: writes through it are the
    #: move's own from any thread until the move's terminal completion; the destination itself
    #: is writable only during the provider's own `submit()` call.
    output: Tensor | None

    def __init__(self, tensor: Tensor, destination: Carrier, source_class: type[Carrier],
                 destination_class: type[Carrier], dtype: DType, layout: Layout,
                 physical_span: int) -> None:
        from strideweave.tensor import Tensor

        check_type(tensor, Tensor, "tensor")
        if not isinstance(destination, Carrier):
            raise not_a_carrier("destination", destination)
        if source_class is not type(tensor.carrier):
            raise TypeError(f"source_class must be the tensor carrier's exact class "
                            f"{type(tensor.carrier).__name__}, not {class_name(source_class)}")
        if destination_class is not type(destination):
            raise TypeError(f"destination_class must be the destination's exact class "
                            f"{type(destination).__name__}, not {class_name(destination_class)}")
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
                     physical_span=physical_span, output=None)

    def _sw_bind_output(self, output: Tensor) -> None:
        """The move binds its window once (see `output`)."""
        if self.output is not None:
            raise AttributeError("TransferRequest.output is bound once")
        self._sw_set(output=output)

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


class CarrierDefinition(FrozenValue):
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
        check_type(storage, StorageProvider, "storage")
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
