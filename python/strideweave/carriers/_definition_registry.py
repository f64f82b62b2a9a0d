"""Which exact carrier class has which CarrierDefinition, and sealing
(docs/spec/extension-and-tiling.md §4).

Definition state is per exact class and never inherited: lookups use class identity, never
the MRO. A class's state, including having no definition, is fixed ("sealed") the first time
the framework observes it; registration and observation share one lock (`LOCK`), so a class
cannot be defined while an instance of it is being built as definition-free, or vice versa.
"""
from __future__ import annotations

import sys
import threading
import weakref
from typing import Any, Iterable

from strideweave.carriers._definition_values import CarrierDefinition, check_carrier_class, check_type
from strideweave.carriers.base import Carrier

__all__: list[str] = []  # internal module: the public names live in strideweave.carriers.extension


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


def observe_and_lookup(cls: type) -> CarrierDefinition | None:
    """Seal and look up in one step (Carrier.__init__), so no registration slips between."""
    if cls in _sealed:
        return _definitions.get(cls)
    with _lock:
        _sealed.add(cls)
        return _definitions.get(cls)


def observe_and_lookup_pair(source_cls: type, dest_cls: type) -> tuple[CarrierDefinition | None,
                                                                      CarrierDefinition | None]:
    """Seal both classes of a move and look both up under one lock."""
    with _lock:
        _sealed.add(source_cls)
        _sealed.add(dest_cls)
        return _definitions.get(source_cls), _definitions.get(dest_cls)


def first_defined(classes: Iterable[Any]) -> type | None:
    """Seal every class among `classes` (other values are skipped) and return the first that
    has a definition, or None."""
    found = None
    with _lock:
        for cls in classes:
            if isinstance(cls, type):
                _sealed.add(cls)
                if found is None and cls in _definitions:
                    found = cls
    return found


def is_definition_backed(carrier_or_cls: Any) -> bool:
    """Whether the exact class (of a carrier instance, or the class itself) has a definition.

    This is a capability query, so it observes (seals) the class."""
    cls = carrier_or_cls if isinstance(carrier_or_cls, type) else type(carrier_or_cls)
    return observe_and_lookup(cls) is not None


def _register(carrier_class: Any, definition: Any, *, allow_shipped: bool) -> None:
    check_carrier_class(carrier_class, "carrier_class")
    check_type(definition, CarrierDefinition, "definition")
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
