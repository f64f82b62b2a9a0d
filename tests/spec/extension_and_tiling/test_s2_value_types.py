"""docs/spec/extension-and-tiling.md §2 Value types: immutability, argument checks in order,
StorageProvider, TransferProvider, PreparedTransfer, Unsupported, TransferRoute,
TransferRequest, CarrierDefinition and the structural ProviderCompletion.

Definitions bind a class for the life of the process, so every test makes fresh classes."""
import pytest

import strideweave as sw
from strideweave.carriers.extension import (CarrierDefinition, PreparedTransfer, ProviderCompletion,
                                            StorageProvider, TransferProvider, TransferRequest,
                                            TransferRoute, Unsupported)

from defined_carriers import (FacetA, FacetASub, FacetB, NotACarrier, defined_class, fresh_class,
                              list_storage, noop_provider)

F32 = sw.DType.Float32
I32 = sw.DType.Int32


def flat(n, stride=1):
    return sw.Layout(sw.Shape([n]), sw.Stride([stride]))


def value_instances():
    cls = defined_class()
    c = cls(2, dtype=F32)
    t = sw.Tensor(c, 0, flat(2))
    dest = sw.CPU(2)
    return {
        "StorageProvider": (list_storage(), "elementwise_fallback"),
        "TransferProvider": (noop_provider(), "prepare"),
        "TransferRoute": (TransferRoute(cls, sw.CPU, "r", noop_provider()), "route_id"),
        "Unsupported": (Unsupported("why"), "reason"),
        "PreparedTransfer": (PreparedTransfer(lambda: None), "submit"),
        "TransferRequest": (TransferRequest(t, dest, cls, sw.CPU, F32, t.layout, 2), "physical_span"),
        "CarrierDefinition": (CarrierDefinition(list_storage()), "transfers"),
    }


@pytest.mark.parametrize("kind", ["StorageProvider", "TransferProvider", "TransferRoute", "Unsupported",
                                  "PreparedTransfer", "TransferRequest", "CarrierDefinition"])
def test_values_are_immutable(kind):
    value, field = value_instances()[kind]
    before = getattr(value, field)
    with pytest.raises(AttributeError):
        setattr(value, field, before)
    with pytest.raises(AttributeError):
        setattr(value, "extra", 1)
    with pytest.raises(AttributeError):
        delattr(value, field)
    assert getattr(value, field) is before


STORAGE_ARGS = ["supports_dtype", "physical_size", "allocate", "release", "read", "write"]


@pytest.mark.parametrize("position", range(6))
def test_storage_provider_callback_must_be_callable(position):
    args = [lambda *a: None] * 6
    args[position] = 42
    with pytest.raises(TypeError, match=STORAGE_ARGS[position]):
        StorageProvider(*args)


def test_storage_provider_checks_arguments_in_order():
    with pytest.raises(TypeError, match="physical_size"):
        StorageProvider(print, None, print, print, None, print, elementwise_fallback=1)


@pytest.mark.parametrize("flag", [1, 0, None, "yes", 1.0])
def test_storage_provider_flag_must_be_exactly_bool(flag):
    cb = [lambda *a: None] * 6
    with pytest.raises(TypeError, match="elementwise_fallback"):
        StorageProvider(*cb, elementwise_fallback=flag)
    assert StorageProvider(*cb).elementwise_fallback is False
    assert StorageProvider(*cb, elementwise_fallback=True).elementwise_fallback is True


def test_storage_provider_keeps_callbacks():
    cbs = [lambda *a, k=k: k for k in range(6)]
    sp = StorageProvider(*cbs)
    assert [getattr(sp, n) for n in STORAGE_ARGS] == cbs


def test_transfer_provider_and_prepared_transfer_need_callables():
    with pytest.raises(TypeError, match="prepare"):
        TransferProvider("not callable")
    with pytest.raises(TypeError, match="submit"):
        PreparedTransfer(None)
    f = lambda: None  # noqa: E731
    assert PreparedTransfer(f).submit is f
    assert TransferProvider(f).prepare is f


def test_unsupported_reason():
    assert Unsupported("broadcast").reason == "broadcast"
    with pytest.raises(ValueError, match="reason"):
        Unsupported("")
    with pytest.raises(TypeError, match="reason"):
        Unsupported(None)


@pytest.mark.parametrize("bad", [sw.Carrier, NotACarrier, int, "CPU", None])
def test_transfer_route_classes_must_be_carrier_classes(bad):
    cls = fresh_class()
    with pytest.raises(TypeError, match="source_class"):
        TransferRoute(bad, sw.CPU, "r", noop_provider())
    with pytest.raises(TypeError, match="destination_class"):
        TransferRoute(cls, bad, "r", noop_provider())


def test_transfer_route_fields_and_checks():
    cls = fresh_class()
    provider = noop_provider()
    route = TransferRoute(cls, sw.CPU, "slab.to_cpu", provider)
    assert (route.source_class, route.destination_class, route.route_id, route.provider) == \
        (cls, sw.CPU, "slab.to_cpu", provider)
    with pytest.raises(TypeError, match="route_id"):
        TransferRoute(cls, sw.CPU, 7, provider)
    with pytest.raises(ValueError, match="route_id"):
        TransferRoute(cls, sw.CPU, "", provider)
    with pytest.raises(TypeError, match="provider"):
        TransferRoute(cls, sw.CPU, "r", provider.prepare)
    with pytest.raises(TypeError, match="source_class"):  # in order: the first bad argument
        TransferRoute(None, sw.CPU, "", None)


class TestTransferRequest:
    def setup_method(self):
        self.cls = defined_class()
        self.carrier = self.cls(5, dtype=F32)
        self.tensor = sw.Tensor(self.carrier, 1, flat(2, 2))  # cosize 3, window [1, 4)
        self.dest = sw.CPU(3)

    def make(self, **changes):
        args = dict(tensor=self.tensor, destination=self.dest, source_class=self.cls,
                    destination_class=sw.CPU, dtype=F32, layout=self.tensor.layout, physical_span=3)
        args.update(changes)
        return TransferRequest(*args.values())

    def test_fields(self):
        r = self.make()
        assert r.tensor is self.tensor and r.destination is self.dest
        assert r.source_class is self.cls and r.destination_class is sw.CPU
        assert r.dtype is F32 and r.layout == self.tensor.layout and r.physical_span == 3
        assert r.offset == 1

    @pytest.mark.parametrize("field,value", [
        ("tensor", [1.0]), ("destination", "cpu"), ("source_class", sw.Carrier),
        ("destination_class", sw.Generic), ("dtype", I32), ("dtype", "Float32"),
        ("physical_span", 3.0), ("physical_span", True)])
    def test_wrong_types(self, field, value):
        with pytest.raises(TypeError, match=field):
            self.make(**{field: value})

    def test_classes_must_be_exact(self):
        sub = type("SubCPU", (sw.CPU,), {})
        with pytest.raises(TypeError, match="destination_class"):
            self.make(destination=sub(3), destination_class=sw.CPU)
        with pytest.raises(TypeError, match="source_class"):
            self.make(source_class=type("Other", (self.cls,), {}))

    def test_layout_must_be_the_tensors_own(self):
        with pytest.raises(TypeError, match="layout"):
            self.make(layout=flat(2, 1))
        with pytest.raises(TypeError, match="layout"):
            self.make(layout="layout")

    def test_span_must_be_cosize(self):
        with pytest.raises(ValueError, match="physical_span"):
            self.make(physical_span=4)


class TestCarrierDefinition:
    def test_defaults(self):
        sp = list_storage()
        d = CarrierDefinition(sp)
        assert d.storage is sp and d.kernels is None and d.composite is None
        assert d.transfers == () and d.facets == ()

    def test_iterables_are_consumed_once_into_tuples(self):
        cls = fresh_class()
        routes = [TransferRoute(cls, sw.CPU, "a", noop_provider()),
                  TransferRoute(cls, sw.Generic, "b", noop_provider())]
        facets = [FacetA(), FacetB()]
        consumed = []

        def gen(items):
            for item in items:
                consumed.append(item)
                yield item

        d = CarrierDefinition(list_storage(), transfers=gen(routes), facets=gen(facets))
        assert d.transfers == tuple(routes) and isinstance(d.transfers, tuple)
        assert d.facets == tuple(facets) and isinstance(d.facets, tuple)
        assert consumed == routes + facets

    @pytest.mark.parametrize("kwargs,name", [
        (dict(storage="sp"), "storage"),
        (dict(kernels=object()), "kernels"),
        (dict(transfers=5), "transfers"),
        (dict(transfers=["route"]), "transfers"),
        (dict(composite=object()), "composite"),
        (dict(facets=3), "facets"),
        (dict(facets=[FacetA, ]), "facets"),  # a class, not a facet instance
        (dict(facets=[object()]), "facets")])
    def test_type_errors(self, kwargs, name):
        args = dict(storage=list_storage())
        args.update(kwargs)
        with pytest.raises(TypeError, match=name):
            CarrierDefinition(**args)

    def test_duplicate_route_pair(self):
        cls = fresh_class()
        with pytest.raises(ValueError, match="two routes"):
            CarrierDefinition(list_storage(), transfers=[TransferRoute(cls, sw.CPU, "a", noop_provider()),
                                                         TransferRoute(cls, sw.CPU, "b", noop_provider())])

    def test_duplicate_exact_facet_type(self):
        with pytest.raises(ValueError, match="FacetA"):
            CarrierDefinition(list_storage(), facets=[FacetA(1), FacetA(2)])
        # Exact types: a subclass is a different facet type.
        d = CarrierDefinition(list_storage(), facets=[FacetA(1), FacetASub(2)])
        assert len(d.facets) == 2


def test_provider_completion_is_structural():
    class Done:
        done = True

        def wait(self):
            return None

    assert isinstance(Done(), ProviderCompletion)
    assert not isinstance(object(), ProviderCompletion)
    assert ProviderCompletion[None] is not None  # generic in its result type
