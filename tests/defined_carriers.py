"""Definition-backed carrier classes for the extension-and-tiling.md §2-§5 tests:
a StorageProvider keeping slots in `c.cells` (the §6 Slab provider) that logs every callback,
fresh classes with and without a definition, a no-op transfer provider, and facet types."""
import pytest

import strideweave as sw
from strideweave.carriers.extension import (CarrierDefinition, CarrierFacet, PreparedTransfer,
                                            StorageProvider, TransferProvider, register_carrier_definition)
from strideweave.carriers.move import dispatch_move

F32 = sw.DType.Float32


class Log:
    """Records every storage callback as (name, carrier, *args)."""

    def __init__(self):
        self.calls = []

    def names(self):
        return [c[0] for c in self.calls]


def list_storage(log=None, *, dtypes=(F32,), fallback=False, **override):
    """A StorageProvider keeping slots in `c.cells` (the §6 Slab provider), with optional
    per-callback overrides and a call log."""
    log = log if log is not None else Log()

    def supports_dtype(c, d):
        log.calls.append(("supports_dtype", c, d))
        return any(d is x for x in dtypes)

    def physical_size(c):
        log.calls.append(("physical_size", c))
        return len(c.cells)

    def allocate(c, n):
        log.calls.append(("allocate", c, n))
        c.cells = [0.0] * n

    def release(c):
        log.calls.append(("release", c))
        c.cells = []

    def read(c, i):
        log.calls.append(("read", c, i))
        return c.cells[i]

    def write(c, i, v):
        log.calls.append(("write", c, i, v))
        c.cells[i] = v

    callbacks = dict(supports_dtype=supports_dtype, physical_size=physical_size, allocate=allocate,
                     release=release, read=read, write=write)
    callbacks.update(override)
    return StorageProvider(**callbacks, elementwise_fallback=fallback)


def fresh_class(name="Slab"):
    return type(name, (sw.Carrier,), {})


def defined_class(name="Slab", log=None, *, storage=None, routes=lambda cls: (), facets=(), **kw):
    cls = fresh_class(name)
    storage = storage if storage is not None else list_storage(log, **kw)
    register_carrier_definition(cls, CarrierDefinition(storage, transfers=routes(cls), facets=facets))
    return cls


def sealed_by(observe):
    """A fresh class after `observe(cls)`, checked to refuse a definition as sealed (TypeError)."""
    cls = fresh_class()
    observe(cls)
    with pytest.raises(TypeError, match="sealed"):
        register_carrier_definition(cls, CarrierDefinition(list_storage()))
    return cls


def legacy_registry_refuses(cls):
    """Whether `cls` is definition-backed, as the public legacy registry tells it: §5 has
    `dispatch_move` refuse a pair naming a definition-backed class with RuntimeError, naming the
    class and pointing to TransferRoute, and answer ElementwiseMoveOperation (or the registered
    operation) otherwise. Like every legacy registry call naming a class, it seals it (§4)."""
    try:
        dispatch_move(cls, sw.CPU)
    except RuntimeError as refusal:
        assert cls.__name__ in str(refusal) and "TransferRoute" in str(refusal)
        return True
    return False


def noop_provider():
    return TransferProvider(lambda request: PreparedTransfer(lambda: None))


class NotACarrier:
    pass


class FacetA(CarrierFacet):
    def __init__(self, tag=None):
        self.tag = tag


class FacetB(CarrierFacet):
    pass


class FacetASub(FacetA):
    pass
