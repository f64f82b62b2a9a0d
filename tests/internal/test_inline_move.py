"""The native inline move (the move entry's `move_inline` route, issue 10) is taken exactly when it applies,
and steps aside, having changed nothing, whenever the Python request must decide.

Which path ran is observed by replacing the Python request's entry (`move_async` in
`strideweave.carriers.move`) with one that records the call.
"""
import numpy as np
import pytest

import strideweave as sw
from strideweave import CPU, Layout, Shape, Stride, Tensor
from strideweave.carriers import move as move_module


def flat(n):
    return Layout(Shape([n]), Stride([1]))


def filled(values, cls=CPU):
    c = cls(len(values))
    for i, v in enumerate(values):
        c[i] = v
    return Tensor(c, 0, flat(len(values)))


@pytest.fixture
def python_requests(monkeypatch):
    """The list of moves that went through the Python request."""
    calls = []
    real = move_module.move_async
    monkeypatch.setattr(move_module, "move_async", lambda t, d: calls.append((t, d)) or real(t, d))
    sw.move(filled([1.0]), CPU(1))  # the first (CPU, CPU) move resolves the route
    calls.clear()
    return calls


@pytest.mark.parametrize("grad", [True, False])
def test_a_small_cpu_move_runs_natively_with_the_same_outcome(python_requests, grad):
    saved = sw.is_grad_enabled()
    sw.set_grad_enabled(grad)
    try:
        t = filled([1.0, 2.0, 3.0, 4.0])
        dest = CPU(6)
        out = sw.move(t, dest)
    finally:
        sw.set_grad_enabled(saved)
    assert python_requests == []
    assert out.carrier is dest and out.offset == 0 and out.layout == t.layout and out.dtype() is t.dtype()
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0] and dest[4] == 0.0
    assert t.carrier.is_released() and dest.version == 0
    assert (out.autograd_ctx is not None) == grad
    if grad:
        sw.sum(out).backward()
        assert t.grad is not None and t.grad.tolist() == [1.0, 1.0, 1.0, 1.0]


def test_a_gapped_layout_at_an_offset_moves_natively(python_requests):
    c = CPU(20)
    np.from_dlpack(Tensor(c, 0, flat(20)))[:] = np.arange(20, dtype=np.float32)
    t = Tensor(c, 3, Layout(Shape([2, 3]), Stride([1, 5])))
    out = sw.move(t, CPU(t.layout.cosize))
    assert python_requests == [] and out.tolist() == [3.0, 4.0, 8.0, 9.0, 13.0, 14.0]


class SubCPU(CPU):
    """Overrides a hook a move runs through, so the request always decides its moves (a plain
    subclass is served natively once its route is resolved: see the tests at the end)."""

    def _is_mutable(self):
        return super()._is_mutable()


@pytest.mark.parametrize("case", ["subclass source", "subclass destination", "profiler", "registered",
                                  "too small", "released source", "int32 into float32", "large"])
def test_the_python_request_decides_everything_else(python_requests, case):
    t, dest = filled([1.0, 2.0]), CPU(2)
    if case == "subclass source":
        t = filled([1.0, 2.0], SubCPU)
    elif case == "subclass destination":
        dest = SubCPU(2)
    elif case == "too small":
        dest = CPU(1)
    elif case == "released source":
        t.carrier.release()
    elif case == "int32 into float32":
        c = CPU(2, dtype=sw.DType.Int32)
        t = Tensor(c, 0, flat(2))
    elif case == "large":
        n = move_module.INLINE_SLOTS + 1
        t, dest = Tensor(CPU(n), 0, flat(n)), CPU(n)
    before = (dest.version, t.carrier.is_released())
    if case == "profiler":
        with sw.profile() as p:
            sw.move(t, dest)
        assert [e.name for e in p.events()] == ["move", "move"]  # submit and completion
    elif case == "registered":
        class Counting(move_module.ElementwiseMoveOperation):
            runs = 0

            def _copy(self, tensor, destination, output, element_count):
                Counting.runs += 1
                super()._copy(tensor, destination, output, element_count)

        with sw.registered_move_operation(CPU, CPU, Counting):
            sw.move(t, dest)
        assert Counting.runs == 1
    elif case in ("too small", "released source", "int32 into float32"):
        with pytest.raises((ValueError, RuntimeError, TypeError)):
            sw.move(t, dest)
        assert (dest.version, t.carrier.is_released()) == before
    else:
        sw.move(t, dest)
    assert len(python_requests) == 1
    # Once the registry is back to the default, the native path serves (CPU, CPU) again.
    python_requests.clear()
    sw.move(filled([5.0]), CPU(1))
    sw.move(filled([5.0]), CPU(1))
    assert len(python_requests) <= 1  # the first may re-resolve the route after a change


# ----- plain subclasses (issue 21: the general path's cost for a class that overrides nothing) ---

class PlainCPU(CPU):
    """A user's CPU subclass that overrides no hook (an added method is not a hook)."""

    def describe(self):
        return "plain"


class ReleaseNotingCPU(CPU):
    released = 0

    def _release(self):
        ReleaseNotingCPU.released += 1
        super()._release()


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("pair", [(PlainCPU, CPU), (CPU, PlainCPU), (PlainCPU, PlainCPU)], ids=repr)
def test_a_plain_subclass_pair_runs_natively_once_its_route_is_resolved(python_requests, grad, pair):
    source_class, destination_class = pair
    assert PlainCPU._sw_plain_move and not ReleaseNotingCPU._sw_plain_move
    saved = sw.is_grad_enabled()
    sw.set_grad_enabled(grad)
    try:
        sw.move(filled([0.0], source_class), destination_class(1))  # resolves the pair (and its reverse)
        python_requests.clear()
        t, dest = filled([1.0, 2.0], source_class), destination_class(2)
        out = sw.move(t, dest)
    finally:
        sw.set_grad_enabled(saved)
    assert python_requests == []
    assert out.carrier is dest and out.tolist() == [1.0, 2.0] and t.carrier.is_released()
    assert (out.autograd_ctx is not None) == grad


def test_a_subclass_that_overrides_a_hook_always_takes_the_request(python_requests):
    ReleaseNotingCPU.released = 0
    for _ in range(3):
        sw.move(filled([1.0], ReleaseNotingCPU), CPU(1))
    assert len(python_requests) == 3 and ReleaseNotingCPU.released == 3


def test_a_registered_route_for_a_plain_pair_takes_the_request_until_unregistered(python_requests):
    class Counting(move_module.ElementwiseMoveOperation):
        runs = 0

        def _copy(self, tensor, destination, output, element_count):
            Counting.runs += 1
            super()._copy(tensor, destination, output, element_count)

    with sw.no_grad():
        sw.move(filled([0.0], PlainCPU), CPU(1))
        with sw.registered_move_operation(PlainCPU, CPU, Counting):
            sw.move(filled([1.0], PlainCPU), CPU(1))
            sw.move(filled([1.0], PlainCPU), CPU(1))
        assert Counting.runs == 2
        python_requests.clear()
        sw.move(filled([1.0], PlainCPU), CPU(1))  # re-resolves
        sw.move(filled([1.0], PlainCPU), CPU(1))
    assert len(python_requests) == 1 and Counting.runs == 2


def test_a_recorded_native_move_keeps_a_frozen_move_state_that_the_collector_sees(python_requests):
    import gc
    import weakref

    t = filled([1.0, 2.0])
    source, dest = t.carrier, CPU(2)
    out = sw.move(t, dest)
    assert python_requests == []
    node = out.autograd_ctx
    state = node._sw_move
    assert state.source_carrier is source and state.destination_carrier is dest
    assert state.source_layout == t.layout and state.reverse_route is not None
    with pytest.raises(AttributeError):
        state.source_carrier = dest  # the recorded move is history
    # A cycle through the state (destination -> node -> state -> destination) is collected:
    # the state shows the collector its references.
    dest.keep = node
    gone = weakref.ref(dest)
    del t, source, dest, out, node, state
    gc.collect()
    assert gone() is None
