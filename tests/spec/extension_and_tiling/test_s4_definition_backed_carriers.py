"""docs/spec/extension-and-tiling.md §4 Definition-backed carriers:
register_carrier_definition's checks, sealing at first observation, construction, behaviour and
facets, and the TypeError a definition-free class raises for definition arguments.

Definitions bind a class for the life of the process, so every test makes fresh classes."""
import threading

import pytest

import strideweave as sw
from strideweave import Carrier
from strideweave.carriers.extension import (CarrierDefinition, CarrierFacet, TransferProvider, TransferRoute,
                                            Unsupported, register_carrier_definition)
from strideweave.carriers.tiled_evictable import TiledEvictable, TiledResidencyFacet

from defined_carriers import (FacetA, FacetASub, FacetB, Log, NotACarrier, defined_class, fresh_class,
                              legacy_registry_refuses, list_storage, sealed_by)

D = sw.DType


class Bare(Carrier):
    pass


def test_definition_free_classes_reject_definition_arguments():
    with pytest.raises(TypeError):
        Bare(4)
    with pytest.raises(TypeError):
        Bare(dtype=D.Float32)
    with pytest.raises(TypeError):
        Bare(mutable=False)


F32 = sw.DType.Float32
I32 = sw.DType.Int32


def flat(n, stride=1):
    return sw.Layout(sw.Shape([n]), sw.Stride([stride]))


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
    # TiledEvictable is defined on import (§7); the rest have none.
    defined_before = legacy_registry_refuses(shipped)
    assert defined_before is (shipped is TiledEvictable)
    log = Log()
    with pytest.raises(TypeError, match="definition"):  # check 2 comes before check 3
        register_carrier_definition(shipped, None)
    with pytest.raises(TypeError, match="shipped"):
        register_carrier_definition(shipped, CarrierDefinition(list_storage(log), facets=[FacetA()]))
    # Nothing changed: a definition-free class is still one, and TiledEvictable's instances are
    # still backed by its own definition (its residency facet), never by the refused one.
    assert legacy_registry_refuses(shipped) is defined_before
    if shipped is TiledEvictable:
        primary = sw.CPU(0, dtype=F32).new_like([float(i) for i in range(4)])
        te = TiledEvictable(primary, sw.FileBacked(dtype=F32), (2,), (2,))
        assert te.facet(TiledResidencyFacet) is not None and te.facet(FacetA) is None
        assert [te[i] for i in range(4)] == [0.0, 1.0, 2.0, 3.0]
        te.release()
    assert log.calls == []
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
    prepared = []

    def prepare(request):
        prepared.append(request)
        return Unsupported("parent route reached")

    route = TransferRoute(parent, sw.CPU, "parent.to_cpu", TransferProvider(prepare))
    with pytest.raises(TypeError, match="parent.to_cpu"):
        register_carrier_definition(cls, CarrierDefinition(list_storage(), transfers=[route]))
    cls()  # seal the child (definition-free)
    with pytest.raises(TypeError, match="parent.to_cpu"):  # check 4 before check 5
        register_carrier_definition(cls, CarrierDefinition(list_storage(), transfers=[route]))
    # The failed registration did not define or seal the parent.
    register_carrier_definition(parent, CarrierDefinition(list_storage(), transfers=[route]))
    # The parent's definition holds exactly that route: a move to CPU runs its prepare (which
    # declines, and with no fallback the move names it), and a move anywhere else has none.
    t = sw.Tensor(parent(2, dtype=F32), 0, flat(2))
    with sw.no_grad(), pytest.raises(NotImplementedError, match="parent route reached") as info:
        sw.move(t, sw.CPU(2))
    assert "'parent.to_cpu' for (Parent, CPU)" in str(info.value)
    assert [request.tensor for request in prepared] == [t]
    with sw.no_grad(), pytest.raises(NotImplementedError, match=r"no transfer route for \(Parent, "):
        sw.move(t, sw.Generic([0.0, 0.0], dtype=F32))
    assert len(prepared) == 1


def seal_by_instance(cls):
    cls()


def seal_by_legacy_registry(cls):
    from strideweave.carriers.move import dispatch_move
    dispatch_move(cls, sw.CPU)


# Sealing by resolving a move route alone is in tests/internal/test_definition_route_decision.py:
# a move needs instances, and constructing one seals the class first. Sealing by a capability
# query is in tests/internal/test_capability_query_seals.py: the query that asks a class for its
# capabilities is the framework's own, with no public caller that has not sealed the class first.
@pytest.mark.parametrize("seal", [seal_by_instance, seal_by_legacy_registry])
def test_observed_class_is_sealed(seal):
    cls = sealed_by(seal)
    assert not legacy_registry_refuses(cls)  # the refused definition was not bound
    cls()  # still a working definition-free class


def test_second_registration_is_rejected():
    first_log, second_log = Log(), Log()
    cls = defined_class(log=first_log)
    with pytest.raises(TypeError, match="already has"):
        register_carrier_definition(cls, CarrierDefinition(list_storage(second_log)))
    # The first definition still backs the class: construction calls its provider alone.
    c = cls(1, dtype=F32)
    assert ("allocate", c, 1) in first_log.calls and second_log.calls == []
    with pytest.raises(TypeError, match="sealed"):  # check 5 before check 6
        register_carrier_definition(cls, CarrierDefinition(list_storage()))


def test_registration_returns_none_and_lookup_is_exact():
    cls = fresh_class()
    log, facet = Log(), FacetA("this definition")
    assert register_carrier_definition(cls, CarrierDefinition(list_storage(log), facets=[facet])) is None
    # Exactly this definition backs the class: its provider allocates, its facet is the instance's.
    c = cls(2, dtype=F32)
    assert ("allocate", c, 2) in log.calls and c.facet(FacetA) is facet
    # Lookup never walks the MRO: the subclass has no definition at all.
    sub = type("Sub", (cls,), {})
    with pytest.raises(TypeError, match="CarrierDefinition"):
        sub(2, dtype=F32)
    assert sub().facet(FacetA) is None
    assert legacy_registry_refuses(cls) and not legacy_registry_refuses(sub)


def test_concurrent_registration_and_observation_agree():
    # Whichever wins the shared lock, an instance is definition-backed exactly when the
    # registration succeeded.
    facet = FacetA("registered")
    for _ in range(50):
        cls = fresh_class()
        outcome = {}
        barrier = threading.Barrier(2)

        def register():
            barrier.wait()
            try:
                register_carrier_definition(cls, CarrierDefinition(list_storage(), facets=[facet]))
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
        # The instance carries the definition's facet exactly when the registration won, and
        # the class is definition-backed to the legacy registry exactly then too.
        assert (outcome["instance"].facet(FacetA) is facet) is outcome["registered"]
        assert legacy_registry_refuses(cls) is outcome["registered"]


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
    cls = defined_class(facets=[FacetA()])
    sub = type("Sub", (cls,), {})
    with pytest.raises(TypeError):
        sub(4, dtype=F32)
    plain = sub()
    assert not legacy_registry_refuses(type(plain)) and plain.facet(FacetA) is None
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
