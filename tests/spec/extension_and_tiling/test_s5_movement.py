"""docs/spec/extension-and-tiling.md §5 Movement: route resolution, `prepare`, the
ProviderCompletion contract and the allocation of an empty destination, exercised through the
resolution and preparation the move layer builds on.

Definitions bind a class for the life of the process, so every test makes fresh classes."""
import threading

import pytest

import strideweave as sw
from strideweave.carriers import extension as ext
from strideweave.carriers.extension import (CarrierDefinition, PreparedTransfer, TransferProvider,
                                            TransferRoute, Unsupported, register_carrier_definition)

from defined_carriers import Log, defined_class, fresh_class, list_storage, noop_provider

F32 = sw.DType.Float32


def flat(n, stride=1):
    return sw.Layout(sw.Shape([n]), sw.Stride([stride]))


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
        seen["grad"] = sw.is_grad_enabled()
        seen["request"] = request
        return PreparedTransfer(lambda: None)

    cls = route_class(prepare)
    t = source_tensor(cls)
    dest = sw.CPU(3)
    decision = ext.resolve_route(cls, sw.CPU)
    assert sw.is_grad_enabled()
    prepared = ext.prepare_route(decision, t, dest)
    assert isinstance(prepared, PreparedTransfer)
    assert seen["thread"] == threading.get_ident() and seen["grad"] is False
    assert sw.is_grad_enabled()
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
