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


def _moved_blocking(t, dest):
    """`move`: the result, and no handle."""
    return sw.move(t, dest), None


def _moved_async(t, dest):
    """`move_async`: a small move runs whole at initiation, so its handle is done when returned."""
    handle = sw.move_async(t, dest)
    assert handle.done and t.carrier.is_released()
    return handle.wait(), handle


@pytest.mark.parametrize("entry", [_moved_blocking, _moved_async], ids=["move", "move_async"])
@pytest.mark.parametrize("grad", [True, False])
def test_a_small_cpu_move_runs_natively_with_the_same_outcome(python_requests, grad, entry):
    saved = sw.is_grad_enabled()
    sw.set_grad_enabled(grad)
    try:
        t = filled([1.0, 2.0, 3.0, 4.0])
        dest = CPU(6)
        out, handle = entry(t, dest)
    finally:
        sw.set_grad_enabled(saved)
    assert python_requests == []
    assert out.carrier is dest and out.offset == 0 and out.layout == t.layout and out.dtype() is t.dtype()
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0] and dest[4] == 0.0
    assert t.carrier.is_released() and dest.version == 0
    assert (out.autograd_ctx is not None) == grad
    if handle is not None:
        assert isinstance(handle, sw.AwaitMove) and handle.wait() is out
        assert handle.bytes_done == handle.bytes_total == 16
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
    """Overrides a hook a move runs through that the native move does not call itself, so the
    request always decides its moves (a plain subclass, or one overriding only `_is_mutable` or
    `_release`, is served natively once its route is resolved: see the tests at the end)."""

    def get_value(self, i):
        return super().get_value(i)


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


class ElementHookCPU(CPU):
    """Overrides an element hook: the native move does not call it, so the request moves it."""

    def get_value(self, i):
        return super().get_value(i)


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("pair", [(PlainCPU, CPU), (CPU, PlainCPU), (PlainCPU, PlainCPU)], ids=repr)
def test_a_plain_subclass_pair_runs_natively_once_its_route_is_resolved(python_requests, grad, pair):
    source_class, destination_class = pair
    assert PlainCPU._sw_native_move and PlainCPU._sw_move_hooks == 0
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


def test_a_subclass_that_overrides_a_hook_the_native_move_does_not_call_always_takes_the_request(
        python_requests):
    assert not ElementHookCPU._sw_native_move
    for _ in range(3):
        out = sw.move(filled([1.0], ElementHookCPU), CPU(1))
        assert out.tolist() == [1.0]
    assert len(python_requests) == 3


# ----- subclasses overriding the hooks the native move calls itself (issue 21: one model, hooks
# called only where a class overrides them) -------------------------------------------------------

def _resolved(source_class, destination_class, python_requests):
    sw.move(filled([0.0], source_class), destination_class(1))  # resolves the pair (and its reverse)
    python_requests.clear()


@pytest.mark.parametrize("grad", [True, False])
def test_a_source_whose_class_overrides_release_moves_natively_and_its_hook_runs_once(python_requests, grad):
    assert ReleaseNotingCPU._sw_native_move and ReleaseNotingCPU._sw_move_hooks == 2
    saved = sw.is_grad_enabled()
    sw.set_grad_enabled(grad)
    try:
        _resolved(ReleaseNotingCPU, CPU, python_requests)
        ReleaseNotingCPU.released = 0
        for k in range(3):
            t = filled([float(k), 2.0], ReleaseNotingCPU)
            out = sw.move(t, CPU(2))
            assert out.tolist() == [float(k), 2.0] and t.carrier.is_released()
    finally:
        sw.set_grad_enabled(saved)
    assert python_requests == [] and ReleaseNotingCPU.released == 3


def _failed_async(t, dest):
    """`move_async` whose commit fails: nothing raises at the call, the handle is done and
    holds the failure, as every transfer failure of an asynchronous move is its handle's."""
    handle = sw.move_async(t, dest)
    assert handle.done and handle.bytes_done == 0 and handle.bytes_total == 8
    handle.wait()


@pytest.mark.parametrize("entry", [sw.move, _failed_async], ids=["move", "move_async"])
def test_a_release_hook_that_raises_fails_the_native_move_with_its_exception_and_a_warning(
        python_requests, caplog, entry):
    class Stubborn(CPU):
        refuse = True
        calls = 0

        def _release(self):
            Stubborn.calls += 1
            if Stubborn.refuse:
                raise OSError("cannot free")
            super()._release()

    Stubborn.refuse = False
    _resolved(Stubborn, CPU, python_requests)
    Stubborn.refuse, Stubborn.calls = True, 0
    t, dest = filled([1.0, 2.0], Stubborn), CPU(2)
    with caplog.at_level("WARNING", logger="strideweave.move"):
        with pytest.raises(OSError, match="cannot free"):
            entry(t, dest)
    assert python_requests == [] and Stubborn.calls == 1
    assert sum("failed move of 8 bytes: OSError: cannot free" in r.getMessage() for r in caplog.records) == 1
    # The contract of a failed move: the source live with its values, the destination unclaimed.
    assert not t.carrier.is_released() and t.tolist() == [1.0, 2.0]
    dest[0] = 5.0
    dest.release()
    Stubborn.refuse = False
    assert sw.move(t, CPU(2)).tolist() == [1.0, 2.0]


def test_a_release_hook_that_releases_or_moves_its_own_carrier_is_refused_and_the_move_holds(python_requests):
    seen = []

    class Meddling(CPU):
        def _release(self):
            for attempt in (self.release, lambda: sw.move(Tensor(self, 0, flat(self.size())), CPU(self.size())),
                            lambda: self.__setitem__(0, 9.0)):
                try:
                    attempt()
                    seen.append("accepted")
                except RuntimeError as e:
                    seen.append(str(e))
            super()._release()

    _resolved(Meddling, CPU, python_requests)
    seen.clear()
    t, dest = filled([1.0, 2.0], Meddling), CPU(2)
    out = sw.move(t, dest)
    # The move ran natively; only the hook's own refused move went to the request, which words
    # the refusal.
    assert [d for _, d in python_requests if d is dest] == []
    assert len(seen) == 3 and all("pending move" in s for s in seen), seen
    assert out.tolist() == [1.0, 2.0] and t.carrier.is_released() and dest.version == 0


def test_a_destination_whose_class_overrides_is_mutable_is_asked_once_per_native_move(python_requests):
    class Asked(CPU):
        answer = True
        asked = 0

        def _is_mutable(self):
            Asked.asked += 1
            if isinstance(Asked.answer, BaseException):
                raise Asked.answer
            return Asked.answer

    assert Asked._sw_native_move and Asked._sw_move_hooks == 1
    _resolved(CPU, Asked, python_requests)
    Asked.asked = 0
    out = sw.move(filled([3.0]), Asked(1))
    assert out.tolist() == [3.0] and Asked.asked == 1 and python_requests == []
    # Refused by the hook: its words, the hook asked once, nothing changed.
    for answer, error, words in [(False, RuntimeError, "the destination Asked carrier is not publicly mutable"),
                                 (ValueError("no answer"), ValueError, "no answer")]:
        Asked.answer, Asked.asked = answer, 0
        t, dest = filled([4.0]), Asked(1)
        with pytest.raises(error, match=words):
            sw.move(t, dest)
        assert Asked.asked == 1 and python_requests == []
        assert not t.carrier.is_released() and t.tolist() == [4.0] and dest.version == 0
        Asked.answer = True
        assert sw.move(t, dest).tolist() == [4.0]  # nothing stayed claimed


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


@pytest.mark.parametrize("entry", [sw.move, lambda t, d: sw.move_async(t, d).wait()], ids=["move", "move_async"])
def test_a_bulk_move_between_hooked_subclasses_runs_natively_and_calls_each_hook_once(
        python_requests, monkeypatch, entry):
    """A bulk span takes the native `move_async` route (a blocking move reaches it through the
    asynchronous entry), so no general request is initiated; each overridden hook runs once."""
    initiated = []
    real_initiate = move_module._initiate
    calls = []

    class Noting(CPU):
        def _release(self):
            calls.append("release")
            super()._release()

    class Asking(CPU):
        def _is_mutable(self):
            calls.append("is_mutable")
            return super()._is_mutable()

    n = move_module.INLINE_SLOTS + 1  # past the inline move: the bulk native route
    _resolved(Noting, Asking, python_requests)
    monkeypatch.setattr(move_module, "_initiate", lambda *a, **k: initiated.append(a) or real_initiate(*a, **k))
    calls.clear()
    c = Noting(n)
    np.from_dlpack(Tensor(c, 0, flat(n)))[:] = np.arange(n, dtype=np.float32)
    out = entry(Tensor(c, 0, flat(n)), Asking(n))
    assert initiated == [] and calls == ["is_mutable", "release"]
    assert np.array_equal(np.from_dlpack(out), np.arange(n, dtype=np.float32)) and c.is_released()


def test_racing_moves_releases_and_writes_of_a_source_whose_release_hook_re_moves_it(python_requests):
    """8 threads × 300 rounds against one source of a class overriding `_release`, moved
    natively: four move it, two release it, two write into it, at once. The hook runs exactly
    once (at the winning move's commit or in the winning release), its own attempt to move the
    source again is refused, at most one move publishes, every loser raises RuntimeError, and
    no claim is left behind."""
    from racing import THREADS, run_together, unclaimed

    class Racing(CPU):
        calls = 0
        refused = 0

        def _release(self):
            Racing.calls += 1
            try:
                sw.move(Tensor(self, 0, flat(self.size())), CPU(self.size()))
            except RuntimeError:
                Racing.refused += 1
            super()._release()

    n = 64
    values = [float(i) for i in range(1, n + 1)]
    _resolved(Racing, CPU, python_requests)
    with sw.no_grad():
        for _ in range(300):
            Racing.calls = Racing.refused = 0
            t = filled(values, Racing)
            dests = [CPU(n) for _ in range(THREADS // 2)]
            actions = [(lambda d=d: sw.move(t, d)) for d in dests]
            actions += [t.carrier.release] * (THREADS // 4)
            actions += [(lambda: t.carrier.__setitem__(0, -1.0))] * (THREADS // 4)
            outcomes = run_together(actions)
            for kind, value in outcomes:
                assert kind == "ok" or isinstance(value, RuntimeError), value
            assert t.carrier.is_released() and Racing.calls == 1
            moved = [(d, o[1]) for d, o in zip(dests, outcomes) if o[0] == "ok"]
            assert len(moved) <= 1
            if moved:
                (dest, out), = moved
                assert Racing.refused == 1  # the hook ran at the move's commit, source claimed
                assert out.carrier is dest and out.tolist()[1:] == values[1:] and out[0] in (1.0, -1.0)
            for d in dests:
                if not any(d is m for m, _ in moved):
                    assert d.version == 0 and d[0] == 0.0
                assert unclaimed(d)


def test_racing_small_move_asyncs_releases_and_writes_of_one_source(python_requests):
    """8 threads × 300 rounds against one plain CPU source: four `move_async` it (each served
    whole at initiation, its handle done), two release it, two write into it, at once. At most
    one move publishes; every other move, release or write raises RuntimeError at its call (a
    move refused at its claim raises before any handle exists); no claim is left behind."""
    from racing import THREADS, run_together, unclaimed

    n = 64
    values = [float(i) for i in range(1, n + 1)]
    with sw.no_grad():
        for _ in range(300):
            t = filled(values)
            dests = [CPU(n) for _ in range(THREADS // 2)]
            actions = [(lambda d=d: sw.move_async(t, d)) for d in dests]
            actions += [t.carrier.release] * (THREADS // 4)
            actions += [(lambda: t.carrier.__setitem__(0, -1.0))] * (THREADS // 4)
            outcomes = run_together(actions)
            for kind, value in outcomes:
                assert kind == "ok" or isinstance(value, RuntimeError), value
            assert t.carrier.is_released()
            handles = [(d, o[1]) for d, o in zip(dests, outcomes) if o[0] == "ok"]
            assert len(handles) <= 1
            for dest, handle in handles:
                assert handle.done
                out = handle.wait()
                assert out.carrier is dest and out.tolist()[1:] == values[1:] and out[0] in (1.0, -1.0)
            for d in dests:
                if not any(d is m for m, _ in handles):
                    assert d.version == 0 and d[0] == 0.0
                assert unclaimed(d)


def test_a_recorded_native_move_saves_the_same_version_token_as_the_request(python_requests):
    # The native route reads the token from the carrier's state instead of calling
    # `version_snapshot()`; it must be the token the request saves: ((id(carrier), version),).
    tokens = []
    for cls in (CPU, ElementHookCPU):  # native, then the general request
        t = filled([1.0, 2.0], cls)  # two public writes: version 2
        source = t.carrier
        expected = t.version_snapshot()
        out = sw.move(t, CPU(2))
        assert expected == ((id(source), 2),)
        tokens.append(out.autograd_ctx._sw_versions)
        assert out.autograd_ctx._sw_versions == (expected,)
    assert len(python_requests) == 1  # the second only
    assert all(type(part) is int for token in tokens for part in token[0][0])
