"""docs/spec/extension-and-tiling.md §5 Movement: route resolution, `prepare`, the
ProviderCompletion contract and the allocation of an empty destination, seen through `sw.move`:
which provider's `prepare` runs, the errors a move raises and the values that land.

Definitions bind a class for the life of the process, so every test makes fresh classes."""
import threading

import pytest

import strideweave as sw
from strideweave.carriers.extension import (CarrierDefinition, PreparedTransfer, TransferProvider,
                                            TransferRoute, Unsupported, register_carrier_definition)
from strideweave.carriers.move import (ElementwiseMoveOperation, dispatch_move, register_move_operation,
                                       unregister_move_operation)

from defined_carriers import Log, defined_class, fresh_class, list_storage

F32, I32 = sw.DType.Float32, sw.DType.Int32


def flat(n, stride=1):
    return sw.Layout(sw.Shape([n]), sw.Stride([stride]))


def source_tensor(cls, n=3, dtype=F32):
    c = cls(n, dtype=dtype)
    for i in range(n):
        c[i] = float(i) if dtype is F32 else i
    return sw.Tensor(c, 0, flat(n))


def slots(carrier):
    return [carrier[i] for i in range(carrier.size())]


def copying_provider(name, calls, decline=lambda: False):
    """A route's provider that notes `name` in `calls` when its prepare runs, declines with
    Unsupported while `decline()` is true, and otherwise copies the source's slots on submit."""
    def prepare(request):
        calls.append(name)
        if decline():
            return Unsupported(f"{name} declines")

        def submit():
            cells = request.tensor.carrier.cells
            for k in range(request.physical_span):
                request.destination[k] = cells[request.offset + k]
        return PreparedTransfer(submit)
    return TransferProvider(prepare)


def move(tensor, destination):
    with sw.no_grad():
        return sw.move(tensor, destination)


# ----- §5 resolution ------------------------------------------------------------------------

class NotedElementwise(ElementwiseMoveOperation):
    """The legacy registry's default operation, noting each transfer it runs."""
    copies = []

    def _copy(self, tensor, destination, output, element_count):
        NotedElementwise.copies.append((type(tensor.carrier), type(destination)))
        super()._copy(tensor, destination, output, element_count)


def test_resolve_neither_defined_uses_the_legacy_registry():
    source_cls, dest_cls = type("LegacyA", (sw.CPU,), {}), type("LegacyB", (sw.CPU,), {})
    register_move_operation(source_cls, dest_cls, NotedElementwise)
    try:
        out = move(source_tensor(source_cls), dest_cls(3))
    finally:
        unregister_move_operation(source_cls, dest_cls)
    assert NotedElementwise.copies == [(source_cls, dest_cls)]
    assert out.tolist() == [0.0, 1.0, 2.0]
    # the built-in pairs move by their registered defaults
    assert move(source_tensor(sw.CPU), sw.Generic([9.0] * 3, dtype=F32)).tolist() == [0.0, 1.0, 2.0]
    assert move(source_tensor(sw.CPU), sw.CPU(3)).tolist() == [0.0, 1.0, 2.0]


def test_resolve_exact_route():
    calls = []
    declining = []
    other = defined_class("Other")
    cls = defined_class(routes=lambda c: [
        TransferRoute(c, sw.CPU, "to_cpu", copying_provider("to_cpu", calls, lambda: bool(declining))),
        TransferRoute(c, other, "to_other", copying_provider("to_other", calls))])
    assert move(source_tensor(cls), sw.CPU(3)).tolist() == [0.0, 1.0, 2.0]
    assert calls == ["to_cpu"]
    to_other = other(0, dtype=F32)
    assert move(source_tensor(cls), to_other).tolist() == [0.0, 1.0, 2.0]
    assert calls == ["to_cpu", "to_other"] and to_other.cells == [0.0, 1.0, 2.0]
    # no fallback for (Slab, CPU): a declining route is the end of the move
    declining.append(True)
    t = source_tensor(cls)
    with pytest.raises(NotImplementedError, match="to_cpu declines"):
        move(t, sw.CPU(3))
    assert calls == ["to_cpu", "to_other", "to_cpu"] and not t.carrier.is_released()


def test_routes_are_not_inherited_on_either_side():
    calls = []
    cls = defined_class(routes=lambda c: [TransferRoute(c, sw.CPU, "to_cpu", copying_provider("to_cpu", calls))])
    sub_source = type("SubSlab", (cls,), {})
    sub_dest = type("SubCPU", (sw.CPU,), {})
    # both definition-free: the legacy registry, which refuses every definition-backed class
    assert dispatch_move(sub_source, sw.CPU) is ElementwiseMoveOperation
    t = source_tensor(cls)
    with pytest.raises(NotImplementedError, match=r"SubCPU"):
        move(t, sub_dest(3))
    assert calls == [] and not t.carrier.is_released()


def test_resolve_fallback_needs_both_defined_with_the_flag():
    a = defined_class("A", fallback=True)
    b = defined_class("B", fallback=True)
    c = defined_class("C", fallback=False)
    dest = b(0, dtype=F32)
    assert move(source_tensor(a), dest).tolist() == [0.0, 1.0, 2.0] and dest.cells == [0.0, 1.0, 2.0]
    for source, dest in ((a, c), (c, a)):
        t = source_tensor(source)
        with pytest.raises(NotImplementedError) as info:
            move(t, dest(0, dtype=F32))
        assert source.__name__ in str(info.value) and dest.__name__ in str(info.value)
        assert not t.carrier.is_released()


def test_mixed_pairs_never_fall_back():
    a = defined_class("A", fallback=True, dtypes=(F32, I32))
    with pytest.raises(NotImplementedError, match=r"A.*CPU"):
        move(source_tensor(a), sw.CPU(3))
    # Int32 is not differentiable, so the (D, S) resolution for autograd is not what refuses
    with pytest.raises(NotImplementedError, match=r"CPU.*A"):
        move(source_tensor(sw.CPU, dtype=I32), a(0, dtype=I32))


def test_route_and_fallback_are_reported_together():
    calls = []
    declining = []
    dest = defined_class("Dest", fallback=True)
    src = defined_class("Src", fallback=True, routes=lambda c: [
        TransferRoute(c, dest, "src.to_dest", copying_provider("src.to_dest", calls, lambda: bool(declining)))])
    # the route is taken although the fallback is permitted ...
    assert move(source_tensor(src), dest(0, dtype=F32)).tolist() == [0.0, 1.0, 2.0]
    assert calls == ["src.to_dest"]
    # ... and the fallback is what a declining route leaves
    declining.append(True)
    landed = dest(0, dtype=F32)
    assert move(source_tensor(src), landed).tolist() == [0.0, 1.0, 2.0]
    assert calls == ["src.to_dest", "src.to_dest"] and landed.cells == [0.0, 1.0, 2.0]


def test_require_no_definition():
    cls = defined_class()
    with pytest.raises(RuntimeError, match="TransferRoute") as info:
        dispatch_move(sw.CPU, cls)
    assert cls.__name__ in str(info.value)
    dispatch_move(sw.CPU, sw.FileBacked)
    free = fresh_class()
    dispatch_move(free, sw.CPU)
    with pytest.raises(TypeError, match="sealed"):
        register_carrier_definition(free, CarrierDefinition(list_storage()))


# ----- §5 prepare -----------------------------------------------------------------------------

def route_class(prepare, *, fallback=False, dest=None, dtypes=(F32,)):
    dest = dest or sw.CPU
    cls = defined_class(fallback=fallback, dtypes=dtypes,
                        routes=lambda c: [TransferRoute(c, dest, "test.route", TransferProvider(prepare))])
    return cls


def test_prepare_runs_on_the_callers_thread_with_graph_construction_off():
    seen = {}
    submitted = []

    def prepare(request):
        seen["thread"] = threading.get_ident()
        seen["grad"] = sw.is_grad_enabled()
        seen["request"] = request
        return PreparedTransfer(lambda: submitted.append(True))

    # Int32 is not differentiable: the move needs no reverse route with graph construction on
    cls = route_class(prepare, dtypes=(F32, I32))
    t = source_tensor(cls, dtype=I32)
    dest = sw.CPU(3, dtype=I32)
    assert sw.is_grad_enabled()
    out = sw.move(t, dest)
    assert submitted == [True] and out.carrier is dest  # the PreparedTransfer continued the move
    assert seen["thread"] == threading.get_ident() and seen["grad"] is False
    assert sw.is_grad_enabled()
    r = seen["request"]
    assert r.tensor is t and r.destination is dest and r.source_class is cls
    assert r.destination_class is sw.CPU and r.dtype is I32 and r.physical_span == 3


def test_unsupported_without_fallback_names_pair_route_and_reason():
    cls = route_class(lambda r: Unsupported("needs alignment"))
    t = source_tensor(cls)
    with pytest.raises(NotImplementedError) as info:
        move(t, sw.CPU(3))
    message = str(info.value)
    for word in (cls.__name__, "CPU", "test.route", "needs alignment"):
        assert word in message
    assert not t.carrier.is_released()


def test_unsupported_with_fallback_falls_back():
    calls = []
    dest_cls = defined_class("Dest", fallback=True)

    def prepare(request):
        calls.append(request)
        return Unsupported("later")

    cls = route_class(prepare, fallback=True, dest=dest_cls)
    landed = dest_cls(3, dtype=F32)
    assert move(source_tensor(cls), landed).tolist() == [0.0, 1.0, 2.0]
    assert len(calls) == 1 and landed.cells == [0.0, 1.0, 2.0]


def test_no_route_means_fallback():
    a, b = defined_class("A", fallback=True), defined_class("B", fallback=True)
    landed = b(3, dtype=F32)
    assert move(source_tensor(a), landed).tolist() == [0.0, 1.0, 2.0] and landed.cells == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("result", [None, "prepared", Unsupported, lambda: None])
def test_prepare_other_return_is_a_type_error(result):
    cls = route_class(lambda r: result)
    t = source_tensor(cls)
    with pytest.raises(TypeError, match="prepare"):
        move(t, sw.CPU(3))
    assert not t.carrier.is_released()


def test_prepare_exception_propagates():
    def prepare(r):
        raise KeyError("no device")

    cls = route_class(prepare)
    with pytest.raises(KeyError, match="no device"):
        move(source_tensor(cls), sw.CPU(3))


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
        move(source_tensor(cls), sw.CPU(3))


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


def completing_class(completion):
    """A Slab whose route to CPU copies on submit and returns `completion`."""
    def prepare(request):
        def submit():
            for k in range(request.physical_span):
                request.destination[k] = request.tensor.carrier.cells[k]
            return completion
        return PreparedTransfer(submit)
    return route_class(prepare)


def test_completion_is_waited_on():
    c = Completion()
    assert move(source_tensor(completing_class(c)), sw.CPU(3)).tolist() == [0.0, 1.0, 2.0]
    assert c.waits == 1


@pytest.mark.parametrize("completion", [
    Completion(result=0),
    Completion(done_after=False),
    Completion(done_before=0),
    Completion(done_after=1)], ids=["wait-returns", "still-not-done", "done-not-bool", "done-after-not-bool"])
def test_completion_contract_violations(completion):
    with pytest.raises(TypeError, match="ProviderCompletion"):
        move(source_tensor(completing_class(completion)), sw.CPU(3))


def test_awaitable_completion_is_rejected_without_waiting():
    class Awaitable(Completion):
        def __await__(self):
            yield

    c = Awaitable()
    with pytest.raises(TypeError, match="__await__"):
        move(source_tensor(completing_class(c)), sw.CPU(3))
    assert c.waits == 0


def test_non_completion_is_a_type_error():
    for obj in (3, "done", object()):
        with pytest.raises(TypeError):
            move(source_tensor(completing_class(obj)), sw.CPU(3))


def test_wait_exception_propagates():
    with pytest.raises(OSError, match="device lost"):
        move(source_tensor(completing_class(Completion(error=OSError("device lost")))), sw.CPU(3))


# ----- §5 allocate_destination ----------------------------------------------------------------

def test_allocate_destination_runs_the_checked_allocate():
    seen = []

    def into(dest_cls):
        """A Slab whose route to `dest_cls` notes the destination's size and version at submit."""
        def prepare(request):
            def submit():
                seen.append((request.destination.size(), request.destination.version))
                for k in range(request.physical_span):
                    request.destination[k] = float(k)
            return PreparedTransfer(submit)
        return route_class(prepare, dest=dest_cls)

    log = Log()
    cls = defined_class(log=log)
    c = cls(0, dtype=F32)
    move(source_tensor(into(cls), n=5), c)
    assert seen == [(5, 0)]  # allocated to the cosize before submit, and not versioned
    assert c.size() == 5 and c.cells == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert log.names().count("allocate") == 2

    def bad(c, n):
        c.cells = [0.0] * (n and n - 1)

    broken_cls = defined_class(allocate=bad)
    broken = broken_cls(0, dtype=F32)
    with pytest.raises(ValueError, match="allocate"):
        move(source_tensor(into(broken_cls)), broken)
    assert len(seen) == 1
