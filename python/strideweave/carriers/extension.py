"""Carrier definitions: storage providers, exact transfer routes and sealing
(docs/spec/extension-and-tiling.md §1–§6).

A user carrier can be a plain `class Slab(Carrier): pass` whose storage is supplied by a
`StorageProvider` registered for that exact class with `register_carrier_definition`. This
module is the public home of the definition API and the behaviour of definition-backed
carriers; its parts live beside it:

* `_definition_values.py`: the value types (`CarrierDefinition`, `StorageProvider`,
  `TransferRoute`, ...) and their construction checks (§2);
* `_definition_registry.py`: which exact class has which definition, and sealing (§4);
* `_definition_routes.py`: how a move between definition-backed classes runs (§5):
  `resolve_route`, `prepare_route`, `check_provider_completion`, `require_no_definition`.

The base class consults this module through `base.DEFINITION_HOOKS` (filled in at the end of
this file) to construct definition-backed carriers and to run their default hooks; the move
layer (`carriers/move.py`) calls the route functions, re-exported here.
"""
from __future__ import annotations

import operator
from typing import Any, Iterable

from strideweave.carriers import base as _base
# Besides the public names, the move layer and the tiled carrier reach the registry and route
# functions through this module.
from strideweave.carriers._definition_registry import (_register_shipped_definition, definition_of,
                                                       is_definition_backed, observe, observe_and_lookup,
                                                       register_carrier_definition)
from strideweave.carriers._definition_routes import (RouteDecision, check_provider_completion,
                                                     prepare_route, require_no_definition, resolve_route)
from strideweave.carriers._definition_values import (CarrierDefinition, CarrierFacet, PreparedTransfer,
                                                     ProviderCompletion, StorageProvider, TransferProvider,
                                                     TransferRequest, TransferRoute, Unsupported)
from strideweave.carriers.base import Carrier, check_index
from strideweave.carriers.dtype import DType, check_dtype_argument

__all__ = ["CarrierDefinition", "StorageProvider", "TransferProvider", "TransferRoute",
           "TransferRequest", "PreparedTransfer", "Unsupported", "ProviderCompletion",
           "CarrierFacet", "register_carrier_definition"]

# The definition API's documented home is this module.
for _public in (CarrierDefinition, StorageProvider, TransferProvider, TransferRoute, TransferRequest,
                PreparedTransfer, Unsupported, ProviderCompletion, CarrierFacet,
                register_carrier_definition):
    _public.__module__ = __name__


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
    check_dtype_argument(dtype)
    _base.check_bool_argument(mutable, "mutable")
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
    _base.check_bool_argument(mutable, "mutable")
    if dtype is None:
        return carrier._sw_def_dtype
    return check_dtype_argument(dtype)


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
    definition = observe_and_lookup(type(carrier))
    if definition is None:
        return None
    return definition._facets.get(facet_type)


# ----- wiring into the base class ----------------------------------------------------------

# The base class's placeholders (see _DefinitionHooks) are replaced on purpose: instance
# attributes of the one DEFINITION_HOOKS object, so its class keeps the defaults. The hooks in
# _SAME_NAME_HOOKS are this module's functions of the same name.
_SAME_NAME_HOOKS = ("observe", "init_defined", "defined_size", "defined_dtype", "defined_get", "defined_set",
                    "defined_new_like", "defined_allocate_like", "defined_is_mutable",
                    "defined_supports_dtype", "defined_release")
vars(_base.DEFINITION_HOOKS).update({name: globals()[name] for name in _SAME_NAME_HOOKS},
                                    definition_for=observe_and_lookup, facet_of=_facet_of)
