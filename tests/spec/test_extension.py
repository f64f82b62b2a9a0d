"""extension-and-tiling.md §1–§5: value types, storage callbacks, definition-backed carriers,
sealing, facets, and the route resolution / preparation / completion contracts the move layer
builds on (the full move scenarios are in test_extension_slab.py).

Definitions bind a class for the life of the process, so every test makes fresh classes.
"""
import threading

import pytest

import strideweave as sw
from strideweave import _autograd
from strideweave.carriers import extension as ext
from strideweave.carriers.extension import (CarrierDefinition, CarrierFacet, PreparedTransfer,
                                            ProviderCompletion, StorageProvider, TransferProvider,
                                            TransferRequest, TransferRoute, Unsupported,
                                            register_carrier_definition)

F32 = sw.DType.Float32
I32 = sw.DType.Int32
PUBLIC = ["CarrierDefinition", "StorageProvider", "TransferProvider", "TransferRoute",
          "TransferRequest", "PreparedTransfer", "Unsupported", "ProviderCompletion",
          "CarrierFacet", "register_carrier_definition"]


# ----- helpers ----------------------------------------------------------------------------

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


def noop_provider():
    return TransferProvider(lambda request: PreparedTransfer(lambda: None))


def flat(n, stride=1):
    return sw.Layout(sw.Shape([n]), sw.Stride([stride]))


# ----- §1 imports -------------------------------------------------------------------------

def test_public_names_are_one_object_in_both_namespaces():
    assert sorted(ext.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(sw, name) is getattr(ext, name)


# ----- §2 value types ---------------------------------------------------------------------

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


class NotACarrier:
    pass


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


class FacetA(CarrierFacet):
    def __init__(self, tag=None):
        self.tag = tag


class FacetB(CarrierFacet):
    pass


class FacetASub(FacetA):
    pass


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


# ----- §3 storage callbacks -----------------------------------------------------------------

def test_callbacks_receive_the_exact_instance():
    log = Log()
    cls = defined_class(log=log)
    c = cls(3, dtype=F32)
    c[1] = 5.0
    assert c[1] == 5.0
    c.release()
    assert {name for name, *_ in log.calls} == {"supports_dtype", "allocate", "physical_size",
                                                  "read", "write", "release"}
    assert all(call[1] is c for call in log.calls)


@pytest.mark.parametrize("answer", [1, None, "yes", 0])
def test_supports_dtype_must_answer_bool(answer):
    cls = defined_class(supports_dtype=lambda c, d: answer)
    with pytest.raises(TypeError, match="supports_dtype"):
        cls(2, dtype=F32)


def test_supports_storage_dtype_uses_the_provider_even_after_release():
    log = Log()
    cls = defined_class(log=log, dtypes=(F32, I32))
    c = cls(2, dtype=F32)
    assert c.supports_storage_dtype(I32) is True
    assert c.supports_storage_dtype(sw.DType.Bool) is False
    c.release()
    assert c.supports_storage_dtype(I32) is True
    with pytest.raises(TypeError):
        c.supports_storage_dtype("Int32")


def test_supports_storage_dtype_rejects_a_non_bool_answer_later():
    answers = iter([True, "yes"])
    cls = defined_class(supports_dtype=lambda c, d: next(answers))
    c = cls(1, dtype=F32)
    with pytest.raises(TypeError, match="supports_dtype"):
        c.supports_storage_dtype(F32)


@pytest.mark.parametrize("size,error", [(2.0, TypeError), (True, TypeError), ("2", TypeError),
                                        (-1, ValueError)])
def test_physical_size_result_is_checked(size, error):
    state = {"size": 2}

    def allocate(c, n):
        c.cells = [0.0] * n

    cls = defined_class(allocate=allocate, physical_size=lambda c: state["size"])
    c = cls(2, dtype=F32)
    state["size"] = size
    with pytest.raises(error, match="physical_size"):
        c.size()
    # construction checks the size through the same callback
    with pytest.raises(error, match="physical_size"):
        cls(2, dtype=F32)


def test_physical_size_is_not_called_once_released():
    log = Log()
    cls = defined_class(log=log)
    c = cls(3, dtype=F32)
    c.release()
    log.calls.clear()
    assert c.size() == 0
    assert "physical_size" not in log.names()


def test_allocate_must_return_none_and_reach_the_size():
    def allocate_wrong(c, n):
        c.cells = [0.0] * (n + 1)

    def allocate_returns(c, n):
        c.cells = [0.0] * n
        return n

    with pytest.raises(ValueError, match="allocate"):
        defined_class(allocate=allocate_wrong)(2, dtype=F32)
    with pytest.raises(TypeError, match="allocate"):
        defined_class(allocate=allocate_returns)(2, dtype=F32)


def test_release_called_by_first_release_only():
    log = Log()
    cls = defined_class(log=log)
    c = cls(2, dtype=F32)
    assert c.release() is None
    assert c.release() is None
    assert log.names().count("release") == 1
    assert c.is_released() and c.size() == 0


def test_release_returning_a_value_leaves_the_carrier_live():
    calls = []

    def release(c):
        calls.append(c)
        return "done"

    cls = defined_class(release=release)
    c = cls(2, dtype=F32)
    c[0] = 4.0
    with pytest.raises(TypeError, match="release"):
        c.release()
    assert not c.is_released()
    assert c[0] == 4.0 and c.size() == 2


def test_release_exception_propagates_and_leaves_the_carrier_live():
    def release(c):
        raise OSError("device busy")

    c = defined_class(release=release)(2, dtype=F32)
    with pytest.raises(OSError, match="device busy"):
        c.release()
    assert not c.is_released() and c.size() == 2


def test_read_checks_run_before_the_callback():
    log = Log()
    c = defined_class(log=log)(3, dtype=F32)
    log.calls.clear()
    with pytest.raises(TypeError):
        c["1"]
    with pytest.raises(TypeError):
        c[1.0]
    with pytest.raises(IndexError):
        c[3]
    with pytest.raises(IndexError):
        c[-1]
    assert "read" not in log.names()
    c.release()
    with pytest.raises(RuntimeError, match="released"):
        c[0]
    with pytest.raises(RuntimeError, match="released"):
        c["x"]  # released is checked first
    assert "read" not in log.names()


def test_write_checks_and_version():
    log = Log()
    cls = defined_class(log=log)
    c = cls(3, dtype=F32)
    assert c.version == 0
    c[2] = 7.0
    assert c.version == 1 and c.cells == [0.0, 0.0, 7.0] and c[2] == 7.0
    log.calls.clear()
    for key, error in (("2", TypeError), (3, IndexError)):
        with pytest.raises(error):
            c[key] = 1.0
    frozen = cls(2, dtype=F32, mutable=False)
    with pytest.raises(RuntimeError, match="not mutable"):
        frozen[0] = 1.0
    assert "write" not in log.names()
    assert c.version == 1 and frozen.version == 0
    c.release()
    with pytest.raises(RuntimeError, match="released"):
        c[0] = 1.0


def test_write_returning_a_value_is_a_type_error_without_version():
    def write(c, i, v):
        return v

    c = defined_class(write=write)(2, dtype=F32)
    with pytest.raises(TypeError, match="write"):
        c[0] = 1.0
    assert c.version == 0


def test_write_exception_propagates_without_version():
    def write(c, i, v):
        raise ValueError("cannot store that")

    c = defined_class(write=write)(2, dtype=F32)
    with pytest.raises(ValueError, match="cannot store"):
        c[0] = "x"
    assert c.version == 0 and c.cells == [0.0, 0.0]


# ----- §4 registration and sealing ----------------------------------------------------------

def shipped_classes():
    classes = [sw.Generic, sw.CPU, sw.FileBacked]
    for name in ("BlockDeviceCarrier", "Evictable", "TiledEvictable"):
        if hasattr(sw, name):
            classes.append(getattr(sw, name))
    return classes


@pytest.mark.parametrize("bad", [sw.Carrier, int, NotACarrier, None, "Slab"])
def test_register_rejects_non_carrier_classes(bad):
    with pytest.raises(TypeError, match="carrier_class"):
        register_carrier_definition(bad, "also bad")  # class checked before definition


def test_register_rejects_a_non_definition():
    cls = fresh_class()
    with pytest.raises(TypeError, match="definition"):
        register_carrier_definition(cls, list_storage())
    register_carrier_definition(cls, CarrierDefinition(list_storage()))  # unchanged: still free


def test_register_rejects_an_instance_of_a_carrier_class():
    with pytest.raises(TypeError, match="carrier_class"):
        register_carrier_definition(sw.CPU(1), CarrierDefinition(list_storage()))


@pytest.mark.parametrize("shipped", shipped_classes(), ids=lambda c: c.__name__)
def test_register_rejects_shipped_classes(shipped):
    before = ext.definition_of(shipped)  # TiledEvictable is defined on import (§7); the rest have none
    with pytest.raises(TypeError, match="definition"):  # check 2 comes before check 3
        register_carrier_definition(shipped, None)
    with pytest.raises(TypeError, match="shipped"):
        register_carrier_definition(shipped, CarrierDefinition(list_storage()))
    assert ext.definition_of(shipped) is before
    # A subclass of a shipped class is a user class, judged on its own (TiledEvictable alone
    # is final and cannot be subclassed at all).
    if shipped.__name__ == "TiledEvictable":
        with pytest.raises(TypeError, match="final"):
            type("My" + shipped.__name__, (shipped,), {})
        return
    register_carrier_definition(type("My" + shipped.__name__, (shipped,), {}),
                                CarrierDefinition(list_storage()))


def test_register_rejects_a_foreign_route_before_checking_the_seal():
    parent = fresh_class("Parent")
    cls = type("Child", (parent,), {})
    route = TransferRoute(parent, sw.CPU, "parent.to_cpu", noop_provider())
    with pytest.raises(TypeError, match="parent.to_cpu"):
        register_carrier_definition(cls, CarrierDefinition(list_storage(), transfers=[route]))
    cls()  # seal the child (definition-free)
    with pytest.raises(TypeError, match="parent.to_cpu"):  # check 4 before check 5
        register_carrier_definition(cls, CarrierDefinition(list_storage(), transfers=[route]))
    # The failed registration did not define or seal the parent.
    register_carrier_definition(parent, CarrierDefinition(list_storage(), transfers=[route]))
    assert ext.definition_of(parent).transfers == (route,)


def seal_by_instance(cls):
    cls()


def seal_by_route(cls):
    try:
        ext.resolve_route(cls, sw.CPU)
    except NotImplementedError:
        pass


def seal_by_destination_role(cls):
    ext.resolve_route(sw.CPU, cls)


def seal_by_legacy_registry(cls):
    from strideweave.carriers.move import dispatch_move
    dispatch_move(cls, sw.CPU)


def seal_by_capability_query(cls):
    ext.is_definition_backed(cls)


@pytest.mark.parametrize("seal", [seal_by_instance, seal_by_route, seal_by_destination_role,
                                  seal_by_legacy_registry, seal_by_capability_query])
def test_observed_class_is_sealed(seal):
    cls = fresh_class()
    seal(cls)
    definition = CarrierDefinition(list_storage())
    with pytest.raises(TypeError, match="sealed"):
        register_carrier_definition(cls, definition)
    assert ext.definition_of(cls) is None
    cls()  # still a working definition-free class


def test_second_registration_is_rejected():
    cls = defined_class()
    first = ext.definition_of(cls)
    with pytest.raises(TypeError, match="already has"):
        register_carrier_definition(cls, CarrierDefinition(list_storage()))
    assert ext.definition_of(cls) is first
    cls(1, dtype=F32)
    with pytest.raises(TypeError, match="sealed"):  # check 5 before check 6
        register_carrier_definition(cls, CarrierDefinition(list_storage()))


def test_registration_returns_none_and_lookup_is_exact():
    cls = fresh_class()
    definition = CarrierDefinition(list_storage())
    assert register_carrier_definition(cls, definition) is None
    assert ext.definition_of(cls) is definition
    sub = type("Sub", (cls,), {})
    assert ext.definition_of(sub) is None
    assert ext.is_definition_backed(cls) and not ext.is_definition_backed(sub)


def test_concurrent_registration_and_observation_agree():
    # Whichever wins the shared lock, an instance is definition-backed exactly when the
    # registration succeeded.
    for _ in range(50):
        cls = fresh_class()
        outcome = {}
        barrier = threading.Barrier(2)

        def register():
            barrier.wait()
            try:
                register_carrier_definition(cls, CarrierDefinition(list_storage()))
                outcome["registered"] = True
            except TypeError:
                outcome["registered"] = False

        def construct():
            barrier.wait()
            try:
                outcome["instance"] = cls(1, dtype=F32)
            except TypeError:
                outcome["instance"] = cls()

        threads = [threading.Thread(target=register), threading.Thread(target=construct)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert ext.is_definition_backed(outcome["instance"]) is outcome["registered"]


# ----- §4 construction ----------------------------------------------------------------------

def test_definition_free_class_rejects_configuration():
    cls = fresh_class()
    for kwargs in (dict(slots=1), dict(dtype=F32), dict(mutable=False)):
        with pytest.raises(TypeError, match="CarrierDefinition"):
            cls(**kwargs)


@pytest.mark.parametrize("args,kwargs,error,match", [
    ((), {}, TypeError, "slots"),
    ((4,), {}, TypeError, "dtype"),
    ((), dict(dtype=F32), TypeError, "slots"),
    ((True,), dict(dtype=F32), TypeError, "slots"),
    ((4.0,), dict(dtype=F32), TypeError, "slots"),
    (("4",), dict(dtype=F32), TypeError, "slots"),
    ((4,), dict(dtype="Float32"), TypeError, "dtype"),
    ((4,), dict(dtype=F32, mutable=1), TypeError, "mutable"),
    ((4,), dict(dtype=F32, mutable=None), TypeError, "mutable"),
    ((4,), dict(dtype=I32), TypeError, "Int32"),
    ((-1,), dict(dtype=F32), ValueError, "slots"),
])
def test_defined_construction_errors_come_before_allocate(args, kwargs, error, match):
    log = Log()
    cls = defined_class(log=log)
    with pytest.raises(error, match=match):
        cls(*args, **kwargs)
    assert "allocate" not in log.names()


def test_type_errors_come_before_the_negative_size():
    cls = defined_class()
    with pytest.raises(TypeError):
        cls(-1, dtype=I32)


def test_defined_construction_state():
    log = Log()
    cls = defined_class(log=log)
    c = cls(4, dtype=F32)
    assert ("allocate", c, 4) in log.calls
    assert c.size() == 4 and [c[i] for i in range(4)] == [0.0] * 4
    assert c.version == 0 and not c.is_owned() and not c.is_released()
    assert c.dtype() is F32 and c.is_mutable()
    assert not cls(2, dtype=F32, mutable=False).is_mutable()
    assert cls(0, dtype=F32).size() == 0


def test_subclass_of_defined_class_is_definition_free():
    cls = defined_class()
    sub = type("Sub", (cls,), {})
    with pytest.raises(TypeError):
        sub(4, dtype=F32)
    plain = sub()
    assert not ext.is_definition_backed(plain)
    with pytest.raises(NotImplementedError):
        plain.size()


def test_subclass_init_may_set_attributes_before_super():
    log = Log()

    class Tagged(sw.Carrier):
        def __init__(self, slots, *, dtype, mutable=True):
            self.tag = "set before super"
            super().__init__(slots, dtype=dtype, mutable=mutable)

    storage = list_storage(log)
    register_carrier_definition(Tagged, CarrierDefinition(storage))
    c = Tagged(2, dtype=F32)
    assert c.tag == "set before super" and c.size() == 2
    copy = c.new_like([1.0, 2.0, 3.0], mutable=False)
    assert type(copy) is Tagged and copy.tag == "set before super"
    assert [copy[i] for i in range(3)] == [1.0, 2.0, 3.0]
    assert type(c.allocate_like(5)) is Tagged


# ----- §4 behaviour -------------------------------------------------------------------------

def test_new_like_writes_values_at_version_zero_even_after_release():
    cls = defined_class()
    c = cls(2, dtype=F32)
    c[0] = 9.0
    c.release()
    n = c.new_like([1.0, 2.0, 3.0])
    assert type(n) is cls and n is not c
    assert n.size() == 3 and [n[i] for i in range(3)] == [1.0, 2.0, 3.0]
    assert n.version == 0 and n.is_mutable() and n.dtype() is F32
    frozen = c.new_like(iter([4.0]), mutable=False)
    assert frozen[0] == 4.0 and frozen.version == 0 and not frozen.is_mutable()


def test_new_like_arguments():
    cls = defined_class(dtypes=(F32, I32))
    c = cls(1, dtype=F32)
    assert c.new_like([1], dtype=I32).dtype() is I32
    with pytest.raises(TypeError, match="values"):
        c.new_like(5)
    with pytest.raises(TypeError, match="dtype"):
        c.new_like([1.0], dtype="Int32")
    with pytest.raises(TypeError):
        c.new_like([1.0], dtype=sw.DType.Bool)  # the provider cannot store it
    with pytest.raises(TypeError, match="mutable"):
        c.new_like([1.0], mutable=1)


def test_allocate_like_returns_fresh_zeroed_instances():
    cls = defined_class(dtypes=(F32, I32))
    c = cls(2, dtype=F32)
    c[0] = 3.0
    a = c.allocate_like(5)
    assert type(a) is cls and a is not c and a.size() == 5 and a.version == 0
    assert [a[i] for i in range(5)] == [0.0] * 5 and c[0] == 3.0
    assert not c.allocate_like(1, mutable=False).is_mutable()
    assert c.allocate_like(1, dtype=I32).dtype() is I32
    assert c.allocate_like(2, empty=True).size() == 2
    c.release()
    assert c.allocate_like(3).size() == 3
    with pytest.raises(TypeError):
        c.allocate_like(2.5)
    with pytest.raises(ValueError):
        c.allocate_like(-1)


def test_release_state_and_dtype_after_release():
    cls = defined_class()
    c = cls(2, dtype=F32)
    c.release()
    assert c.is_released() and c.size() == 0 and not c.is_mutable()
    assert c.dtype() is F32
    with pytest.raises(RuntimeError, match="released"):
        c[0] = 1.0


def test_dlpack_info_raises_buffer_error_unless_overridden():
    cls = defined_class()
    with pytest.raises(BufferError, match=cls.__name__):
        cls(1, dtype=F32).dlpack_info()

    class Exported(sw.Carrier):
        def dlpack_info(self):
            return {"pointer": 1, "device_type": 1, "device_id": 0}

    register_carrier_definition(Exported, CarrierDefinition(list_storage()))
    assert Exported(1, dtype=F32).dlpack_info()["device_type"] == 1


def test_tensor_over_a_defined_carrier_reads_and_writes_through_the_provider():
    cls = defined_class()
    c = cls(4, dtype=F32)
    t = sw.Tensor(c, 1, flat(3))
    t[2] = 8.0
    assert c.cells == [0.0, 0.0, 0.0, 8.0] and c.version == 1
    assert t.tolist() == [0.0, 0.0, 8.0]


# ----- §4 facets ----------------------------------------------------------------------------

def test_facets_match_the_exact_type():
    a, b = FacetA("a"), FacetB()
    cls = defined_class(facets=[a, b])
    c = cls(1, dtype=F32)
    assert c.facet(FacetA) is a and c.facet(FacetB) is b
    assert c.facet(FacetASub) is None
    assert c.require_facet(FacetB) is b
    with pytest.raises(NotImplementedError, match="FacetASub"):
        c.require_facet(FacetASub)
    c.release()
    assert c.facet(FacetA) is a
    only_sub = defined_class(facets=[FacetASub()])(1, dtype=F32)
    assert only_sub.facet(FacetA) is None  # exact type, not isinstance


def test_facet_type_must_be_a_carrier_facet_subclass():
    c = defined_class(facets=[FacetB()])(1, dtype=F32)
    for bad in (int, FacetB(), "FacetB", None):
        with pytest.raises(TypeError):
            c.facet(bad)
        with pytest.raises(TypeError):
            c.require_facet(bad)


def test_definition_free_carriers_have_no_facets():
    cpu = sw.CPU(1)
    assert cpu.facet(FacetA) is None
    with pytest.raises(NotImplementedError):
        cpu.require_facet(FacetA)
    with pytest.raises(TypeError):
        cpu.facet(object)
    parent = defined_class(facets=[FacetA()])
    sub = type("Sub", (parent,), {})()
    assert sub.facet(FacetA) is None  # not inherited


def test_carrier_facet_is_an_open_base():
    class Mine(CarrierFacet):
        def __init__(self, n):
            self.n = n

    assert Mine(3).n == 3 and isinstance(Mine(3), CarrierFacet)


# ----- §5 resolution ------------------------------------------------------------------------

def test_resolve_neither_defined_uses_the_legacy_registry():
    assert ext.resolve_route(sw.CPU, sw.Generic) is None
    assert ext.resolve_route(sw.CPU, sw.CPU) is None


def test_resolve_exact_route():
    other = fresh_class("Other")
    cls = defined_class(routes=lambda c: [TransferRoute(c, sw.CPU, "to_cpu", noop_provider()),
                                          TransferRoute(c, other, "to_other", noop_provider())])
    decision = ext.resolve_route(cls, sw.CPU)
    assert decision.route.route_id == "to_cpu" and decision.fallback is False
    assert ext.resolve_route(cls, other).route.route_id == "to_other"
    with pytest.raises(AttributeError):
        decision.route = None


def test_routes_are_not_inherited_on_either_side():
    cls = defined_class(routes=lambda c: [TransferRoute(c, sw.CPU, "to_cpu", noop_provider())])
    sub_source = type("SubSlab", (cls,), {})
    sub_dest = type("SubCPU", (sw.CPU,), {})
    assert ext.resolve_route(sub_source, sw.CPU) is None  # both definition-free: legacy
    with pytest.raises(NotImplementedError, match=r"SubCPU"):
        ext.resolve_route(cls, sub_dest)


def test_resolve_fallback_needs_both_defined_with_the_flag():
    a = defined_class("A", fallback=True)
    b = defined_class("B", fallback=True)
    c = defined_class("C", fallback=False)
    decision = ext.resolve_route(a, b)
    assert decision.route is None and decision.fallback is True
    for source, dest in ((a, c), (c, a)):
        with pytest.raises(NotImplementedError) as info:
            ext.resolve_route(source, dest)
        assert source.__name__ in str(info.value) and dest.__name__ in str(info.value)


def test_mixed_pairs_never_fall_back():
    a = defined_class("A", fallback=True)
    with pytest.raises(NotImplementedError, match=r"A.*CPU"):
        ext.resolve_route(a, sw.CPU)
    with pytest.raises(NotImplementedError, match=r"CPU.*A"):
        ext.resolve_route(sw.CPU, a)


def test_route_and_fallback_are_reported_together():
    dest = defined_class("Dest", fallback=True)
    src = defined_class("Src", fallback=True,
                        routes=lambda c: [TransferRoute(c, dest, "src.to_dest", noop_provider())])
    decision = ext.resolve_route(src, dest)
    assert decision.route.route_id == "src.to_dest" and decision.fallback is True


def test_require_no_definition():
    cls = defined_class()
    with pytest.raises(RuntimeError, match="TransferRoute") as info:
        ext.require_no_definition(sw.CPU, cls)
    assert cls.__name__ in str(info.value)
    ext.require_no_definition(sw.CPU, sw.FileBacked)
    free = fresh_class()
    ext.require_no_definition(free, sw.CPU)
    with pytest.raises(TypeError, match="sealed"):
        register_carrier_definition(free, CarrierDefinition(list_storage()))


# ----- §5 prepare -----------------------------------------------------------------------------

def route_class(prepare, *, fallback=False, dest=None):
    dest = dest or sw.CPU
    cls = defined_class(fallback=fallback,
                        routes=lambda c: [TransferRoute(c, dest, "test.route", TransferProvider(prepare))])
    return cls


def source_tensor(cls, n=3):
    c = cls(n, dtype=F32)
    for i in range(n):
        c[i] = float(i)
    return sw.Tensor(c, 0, flat(n))


def test_prepare_runs_on_the_callers_thread_with_graph_construction_off():
    seen = {}

    def prepare(request):
        seen["thread"] = threading.get_ident()
        seen["grad"] = _autograd.is_grad_enabled()
        seen["request"] = request
        return PreparedTransfer(lambda: None)

    cls = route_class(prepare)
    t = source_tensor(cls)
    dest = sw.CPU(3)
    decision = ext.resolve_route(cls, sw.CPU)
    assert _autograd.is_grad_enabled()
    prepared = ext.prepare_route(decision, t, dest)
    assert isinstance(prepared, PreparedTransfer)
    assert seen["thread"] == threading.get_ident() and seen["grad"] is False
    assert _autograd.is_grad_enabled()
    r = seen["request"]
    assert r.tensor is t and r.destination is dest and r.source_class is cls
    assert r.destination_class is sw.CPU and r.dtype is F32 and r.physical_span == 3


def test_unsupported_without_fallback_names_pair_route_and_reason():
    cls = route_class(lambda r: Unsupported("needs alignment"))
    t = source_tensor(cls)
    with pytest.raises(NotImplementedError) as info:
        ext.prepare_route(ext.resolve_route(cls, sw.CPU), t, sw.CPU(3))
    message = str(info.value)
    for word in (cls.__name__, "CPU", "test.route", "needs alignment"):
        assert word in message


def test_unsupported_with_fallback_returns_none():
    dest_cls = defined_class("Dest", fallback=True)
    cls = route_class(lambda r: Unsupported("later"), fallback=True, dest=dest_cls)
    decision = ext.resolve_route(cls, dest_cls)
    assert decision.fallback
    assert ext.prepare_route(decision, source_tensor(cls), dest_cls(3, dtype=F32)) is None


def test_no_route_means_fallback():
    a, b = defined_class("A", fallback=True), defined_class("B", fallback=True)
    assert ext.prepare_route(ext.resolve_route(a, b), source_tensor(a), b(3, dtype=F32)) is None


@pytest.mark.parametrize("result", [None, "prepared", Unsupported, lambda: None])
def test_prepare_other_return_is_a_type_error(result):
    cls = route_class(lambda r: result)
    with pytest.raises(TypeError, match="prepare"):
        ext.prepare_route(ext.resolve_route(cls, sw.CPU), source_tensor(cls), sw.CPU(3))


def test_prepare_exception_propagates():
    def prepare(r):
        raise KeyError("no device")

    cls = route_class(prepare)
    with pytest.raises(KeyError, match="no device"):
        ext.prepare_route(ext.resolve_route(cls, sw.CPU), source_tensor(cls), sw.CPU(3))


@pytest.mark.parametrize("mutation", ["source version", "destination version", "source release",
                                      "source size"])
def test_prepare_must_not_change_a_carrier(mutation):
    def prepare(r):
        if mutation == "source version":
            r.tensor.carrier[0] = 5.0
        elif mutation == "destination version":
            r.destination[0] = 5.0
        elif mutation == "source release":
            r.tensor.carrier.release()
        else:
            r.tensor.carrier.cells.append(0.0)
        return PreparedTransfer(lambda: None)

    cls = route_class(prepare)
    with pytest.raises(RuntimeError, match="prepare changed"):
        ext.prepare_route(ext.resolve_route(cls, sw.CPU), source_tensor(cls), sw.CPU(3))


# ----- §5 provider completion --------------------------------------------------------------

class Completion:
    def __init__(self, result=None, done_before=False, done_after=True, error=None):
        self._done = done_before
        self._after = done_after
        self._result = result
        self._error = error
        self.waits = 0

    @property
    def done(self):
        return self._done

    def wait(self):
        self.waits += 1
        self._done = self._after
        if self._error is not None:
            raise self._error
        return self._result


def test_completion_is_waited_on():
    c = Completion()
    assert ext.check_provider_completion(c) is None
    assert c.waits == 1


@pytest.mark.parametrize("completion", [
    Completion(result=0),
    Completion(done_after=False),
    Completion(done_before=0),
    Completion(done_after=1)], ids=["wait-returns", "still-not-done", "done-not-bool", "done-after-not-bool"])
def test_completion_contract_violations(completion):
    with pytest.raises(TypeError, match="ProviderCompletion"):
        ext.check_provider_completion(completion)


def test_awaitable_completion_is_rejected_without_waiting():
    class Awaitable(Completion):
        def __await__(self):
            yield

    c = Awaitable()
    with pytest.raises(TypeError, match="__await__"):
        ext.check_provider_completion(c)
    assert c.waits == 0


def test_non_completion_is_a_type_error():
    for obj in (3, "done", object()):
        with pytest.raises(TypeError):
            ext.check_provider_completion(obj)


def test_wait_exception_propagates():
    with pytest.raises(OSError, match="device lost"):
        ext.check_provider_completion(Completion(error=OSError("device lost")))


# ----- §5 allocate_destination ----------------------------------------------------------------

def test_allocate_destination_runs_the_checked_allocate():
    log = Log()
    cls = defined_class(log=log)
    c = cls(0, dtype=F32)
    ext.allocate_destination(c, 5)
    assert c.size() == 5 and c.version == 0
    assert log.names().count("allocate") == 2

    def bad(c, n):
        c.cells = [0.0] * (n and n - 1)

    broken = defined_class(allocate=bad)(0, dtype=F32)
    with pytest.raises(ValueError, match="allocate"):
        ext.allocate_destination(broken, 3)
