"""The native move request (`_native.MoveRequest`, crates/strideweave-py/src/move_request.rs;
issue 10): the request every move runs that the two native moves do not take whole. It
walks the core's validation table and finishes through the core's terminal commit.

These tests drive a request by hand, as `carriers.move._initiate` does, to reach what no
public call can time: racing finishers, a failure before submission, and the order of a
failed commit's steps. The public behaviour (messages, validation order, races of public
calls) is in tests/spec.
"""
import gc
import threading
import weakref

import numpy as np
import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor
from strideweave.carriers import move as move_module
from strideweave.carriers.base import take_claims
from strideweave.core.representation import Subtensor

from racing import THREADS, accepts_release, run_together

F32 = sw.DType.Float32
N = 16


def flat(n=N):
    return Layout(Shape([n]), Stride([1]))


def filled(values):
    c = CPU(len(values))
    np.from_dlpack(Tensor(c, 0, flat(len(values))))[:] = values
    return Tensor(c, 0, flat(len(values)))


def claimed_request(t, destination, *, grow=False):
    """A request past its checks and claims (what `_initiate` does before submitting), its
    result bound; `grow` grows an empty destination as the request does."""
    request = move_module._MoveRequest(t, destination, False)
    take_claims(request, ((t.carrier, "source", "move"), (destination, "destination", "move into")))
    if grow:
        destination._sw_allocate_claimed(request, N)
        request.grown = True
    request.output = Tensor._from_subtensors(F32, (Subtensor(F32, destination, 0, t.layout),), ())
    return request


def test_the_request_is_the_claim_its_carriers_hold_until_it_commits():
    t, dest = filled(np.arange(N, dtype=np.float32)), CPU(N)
    request = claimed_request(t, dest)
    assert t.carrier._sw_claim is request and dest._sw_claim is request
    with pytest.raises(RuntimeError, match="participates in a pending move"):
        dest.release()
    request.commit(None)
    assert request.committed and request.handle.done
    assert t.carrier.is_released() and dest._sw_claim is None
    assert request.handle.wait() is request.output


def test_of_racing_finishers_exactly_one_commits_and_nothing_stays_claimed():
    for round_ in range(300):
        t, dest = filled(np.arange(N, dtype=np.float32) + round_), CPU(N)
        request = claimed_request(t, dest)
        errors = [None if k % 2 == 0 else RuntimeError(f"finisher {k}") for k in range(THREADS)]
        outcomes = run_together([(lambda e=e: request.commit(e)) for e in errors])
        assert all(o == ("ok", None) for o in outcomes), outcomes
        failure = request.handle.exception()
        if failure is None:
            # A success committed: the source was released as the request's own act.
            assert t.carrier.is_released() and request.handle.wait().carrier is dest
        else:
            # A failure committed: the source stays live, with its values.
            assert str(failure).startswith("finisher") and not t.carrier.is_released()
            assert t.carrier[0] == float(round_) and accepts_release(t.carrier)
        assert accepts_release(dest)


def test_a_failed_commit_shrinks_a_grown_destination_while_it_is_still_claimed():
    seen = []

    class Watched(FileBacked):
        def _allocate(self, size):
            seen.append((size, self._sw_claim is not None))
            super()._allocate(size)

    t, dest = filled(np.arange(N, dtype=np.float32)), Watched(dtype=F32)
    request = claimed_request(t, dest, grow=True)
    request.commit(OSError("the copy failed"))
    # Shrunk first, while no other move could claim the grown destination and start filling
    # it; then the claims end.
    assert seen == [(N, True), (0, True)]
    assert dest.size() == 0 and accepts_release(dest)
    assert not t.carrier.is_released() and accepts_release(t.carrier)
    with pytest.raises(OSError, match="the copy failed"):
        request.handle.wait()


def test_a_release_that_fails_in_the_commit_fails_the_move_and_leaves_the_source_live():
    class Stubborn(CPU):
        refuse = True

        def _release(self):
            if self.refuse:
                raise OSError("cannot free")
            super()._release()

    c = Stubborn(N)
    t, dest = Tensor(c, 0, flat()), CPU(N)
    request = claimed_request(t, dest)
    request.commit(None)
    with pytest.raises(OSError, match="cannot free"):
        request.handle.wait()
    assert not c.is_released() and accepts_release(dest)
    Stubborn.refuse = False
    assert accepts_release(c)


def test_abandoning_before_submission_undoes_everything_and_later_commits_do_nothing():
    t, dest = filled(np.arange(N, dtype=np.float32)), FileBacked(dtype=F32)
    request = claimed_request(t, dest, grow=True)
    request.abandon()
    assert dest.size() == 0 and not request.handle.done
    request.commit(None)  # a finisher arriving late changes nothing
    assert not request.handle.done and not t.carrier.is_released()
    assert accepts_release(dest) and accepts_release(t.carrier)


def test_fields_set_to_none_read_back_as_none():
    t, dest = filled(np.arange(N, dtype=np.float32)), CPU(N)
    request = claimed_request(t, dest)
    request.prepared = object()
    request.prepared = None
    assert request.prepared is None and request.node is None
    request.abandon()


def test_a_failed_request_in_a_reference_cycle_is_collected():
    # The failure's traceback holds the finished frame, whose locals hold the request, whose
    # handle holds the failure: the collector must see through the native request (and its
    # handle) to free that cycle.
    def fail_with_the_request_in_a_local():
        t, dest = filled(np.arange(N, dtype=np.float32)), CPU(N)
        request = claimed_request(t, dest)
        try:
            raise RuntimeError("fails with the request in a local")
        except RuntimeError as exc:
            request.commit(exc)
        return weakref.ref(request)

    gone = fail_with_the_request_in_a_local()
    gc.collect()
    assert gone() is None


def test_check_walks_the_core_table_and_resolves_the_route_only_after_the_arguments():
    t = filled(np.arange(N, dtype=np.float32))
    asked = []

    def resolve():
        asked.append(True)
        return move_module._lookup_route(CPU, CPU), None, False

    with pytest.raises(TypeError, match="destination must be a Carrier"):
        move_module._MoveRequest.check(t, 3, False, resolve)
    assert asked == []  # an argument row refused: no route was resolved
    route, reverse, recording, grow = move_module._MoveRequest.check(t, CPU(N), False, resolve)
    assert asked == [True] and route.operation_class is move_module.ElementwiseMoveOperation
    assert (reverse, recording, grow) == (None, False, False)
    assert move_module._MoveRequest.check(t, FileBacked(dtype=F32), False,
                                          lambda: (move_module._lookup_route(CPU, FileBacked), None, False))[3]


def test_the_handle_reaches_its_outcome_even_when_clearing_the_node_raises():
    class Unclearable:
        def _sw_clear(self):
            raise ValueError("cannot clear")

    t, dest = filled(np.arange(N, dtype=np.float32)), CPU(N)
    request = claimed_request(t, dest)
    request.node = Unclearable()
    with pytest.raises(ValueError, match="cannot clear"):
        request.commit(OSError("the copy failed"))
    # A waiter sees the move's own failure, and nothing stays claimed.
    with pytest.raises(OSError, match="the copy failed"):
        request.handle.wait(timeout=60)
    assert accepts_release(dest) and accepts_release(t.carrier)


class _ElementHookedCPU(CPU):
    """A source class with an element hook: every move of it is the general request."""

    def get_value(self, i):
        return super().get_value(i)


class _PlainDestinationCPU(CPU):
    """A destination subclass that overrides nothing: the request asks its `is_mutable()`,
    `dtype()` and `size()` in Python, where an exact `CPU` is read natively."""


def _general_source(n=N):
    c = _ElementHookedCPU(n)
    np.from_dlpack(Tensor(c, 0, flat(n)))[:] = np.arange(n, dtype=np.float32)
    return Tensor(c, 0, flat(n))


def _refusal(destination):
    """How the general request refuses `destination` (type, message with the class named
    generically), with nothing changed: the source live and unclaimed, the destination as it
    was."""
    t = _general_source()
    before = (destination.size(), destination.version, destination.is_released())
    with pytest.raises(Exception) as raised:
        sw.move(t, destination)
    assert not t.carrier.is_released() and t.carrier._sw_claim is None
    assert (destination.size(), destination.version, destination.is_released()) == before
    assert destination._sw_claim is None
    return type(raised.value), str(raised.value).replace(type(destination).__name__, "<carrier>")


@pytest.mark.parametrize("state", ["immutable", "owned", "dtype", "too small", "released"])
def test_an_exact_builtin_destination_refuses_as_a_subclass_does(state):
    # The request reads an exact CPU's mutability, dtype and size natively; a subclass's are
    # asked in Python. Both must refuse alike, in the same words.
    owners = []  # an Evictable that is collected lets its tier go

    def make(cls):
        if state == "immutable":
            return cls(N, mutable=False)
        if state == "dtype":
            return cls(N, dtype=sw.DType.Int32)
        if state == "too small":
            return cls(N // 2)
        carrier = cls(N)
        if state == "owned":
            owners.append(sw.Evictable(carrier, FileBacked(dtype=F32)))
        if state == "released":
            carrier.release()
        return carrier
    assert _refusal(make(CPU)) == _refusal(make(_PlainDestinationCPU))


def test_an_exact_builtin_destination_takes_a_general_move_and_an_empty_one_grows():
    for destination in (CPU(N), FileBacked(dtype=F32)):
        moved = sw.move(_general_source(), destination)
        assert moved.carrier is destination and destination.size() == N
        assert np.array_equal(np.array([moved[i] for i in range(N)]), np.arange(N, dtype=np.float32))
