"""interop-movement.md: move_async, the shared completion contract, eager submission,
one terminal commit, pending protection, and move profiling (autograd-and-profiling.md §9).

A definition-backed `Gated` carrier whose route to CPU completes only when the test opens a
gate proves the asynchronous properties without timing assumptions."""
import gc
import threading
import time

import pytest

import strideweave as sw
from cells_storage import cells_storage
from strideweave import CPU, Carrier, FileBacked, Layout, Shape, Stride, Tensor
from strideweave.carriers.extension import (CarrierDefinition, PreparedTransfer,
                                            TransferProvider, TransferRoute, register_carrier_definition)

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


class GateCompletion:
    """A ProviderCompletion that finishes when the test says so."""

    def __init__(self, failure=None, result=None):
        self.gate = threading.Event()
        self.failure = failure
        self.result = result

    @property
    def done(self):
        return self.gate.is_set()

    def wait(self):
        self.gate.wait()
        if self.failure is not None:
            raise self.failure
        return self.result


class Gated(Carrier):
    pass


PREPARED = []


def _prepare(request):
    completion = PREPARED.pop(0) if PREPARED else None

    def submit():
        cells = request.tensor.carrier.cells
        for k in range(request.physical_span):
            request.destination[k] = cells[request.tensor.offset + k]
        return completion
    return PreparedTransfer(submit)


register_carrier_definition(Gated, CarrierDefinition(
    cells_storage(), transfers=(TransferRoute(Gated, CPU, "gated.to_cpu", TransferProvider(_prepare)),)))


def gated_tensor(values):
    c = Gated(len(values), dtype=D.Float32)
    for i, v in enumerate(values):
        c[i] = v
    return Tensor(c, 0, L(len(values), 1))


def start(values, completion):
    PREPARED.append(completion)
    t = gated_tensor(values)
    dest = CPU(len(values))
    with sw.no_grad():
        handle = sw.move_async(t, dest)
    return t, dest, handle


def wait_until(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.005)


# ----- eager submission, pending protection, one terminal commit ----------------------------

def test_return_while_a_transfer_is_pending_and_protect_participants():
    completion = GateCompletion()
    t, dest, handle = start([1.0, 2.0, 3.0], completion)
    source = t.carrier
    assert isinstance(handle, sw.AwaitMove) and handle.done is False
    # reads continue; mutation, release and another move of a participant fail
    assert t[1] == 2.0
    with pytest.raises(RuntimeError):
        t[0] = 9.0
    with pytest.raises(RuntimeError):
        source.release()
    with pytest.raises(RuntimeError):
        sw.move_async(t, CPU(3))
    # The destination stays open to writes until the provider's completion is done: the
    # provider may fill it from any thread of its own (issue 11; the spec protects sources).
    dest[0] = 1.0
    with pytest.raises(RuntimeError):
        dest.release()
    with pytest.raises(RuntimeError):
        sw.move_async(Tensor(dest, 0, L(3, 1)), CPU(3))
    assert source.version == 3 and not source.is_released()
    completion.gate.set()
    result = handle.wait()
    assert handle.done is True
    assert result.carrier is dest and result.tolist() == [1.0, 2.0, 3.0]
    assert source.is_released() and dest.version == 0
    dest[0] = 5.0  # the claim is gone
    assert handle.wait() is result


def test_drop_a_pending_handle():
    completion = GateCompletion()
    t, dest, handle = start([4.0, 5.0], completion)
    source = t.carrier
    started = time.monotonic()
    del handle
    gc.collect()
    assert time.monotonic() - started < 5.0  # dropping did not wait for the gate
    assert not source.is_released()
    completion.gate.set()
    wait_until(source.is_released)
    wait_until(lambda: dest._sw_claim is None)
    assert [dest[0], dest[1]] == [4.0, 5.0]


def test_fail_one_asynchronous_move():
    failure = OSError("device gone")
    completion = GateCompletion(failure=failure)
    t, dest, handle = start([1.0, 2.0], completion)
    source = t.carrier
    completion.gate.set()
    with pytest.raises(OSError) as first:
        handle.wait()
    with pytest.raises(OSError) as second:
        handle.wait()
    assert first.value is failure and second.value is failure
    assert handle.done
    assert not source.is_released() and t.tolist() == [1.0, 2.0]
    t[0] = 7.0  # the source is usable again
    assert source._sw_claim is None and dest._sw_claim is None


def test_provider_completion_protocol_violation_is_the_terminal_failure():
    completion = GateCompletion(result="not None")
    t, dest, handle = start([1.0], completion)
    completion.gate.set()
    with pytest.raises(TypeError):
        handle.wait()
    assert not t.carrier.is_released()


def test_wait_for_a_move_more_than_once_from_two_threads():
    completion = GateCompletion()
    t, dest, handle = start([1.0, 2.0], completion)
    seen = []
    barrier = threading.Barrier(3)

    def waiter():
        barrier.wait()
        seen.append(handle.wait())

    threads = [threading.Thread(target=waiter) for _ in range(2)]
    for th in threads:
        th.start()
    barrier.wait()
    completion.gate.set()
    for th in threads:
        th.join(10)
    assert len(seen) == 2 and seen[0] is seen[1] is handle.wait()


def test_immediate_provider_completes_before_returning():
    t = gated_tensor([3.0])
    with sw.no_grad():
        handle = sw.move_async(t, CPU(1))
    assert handle.done and handle.wait().tolist() == [3.0]


# ----- move_async validation ----------------------------------------------------------------

def test_reject_batched_movement_before_any_effect():
    t = Tensor(CPU(2), 0, L(2, 1))
    dest = CPU(2)
    with pytest.raises(TypeError):
        sw.move_async([t], dest)
    with pytest.raises(TypeError):
        sw.move_async(t, [dest])
    with pytest.raises(TypeError):
        sw.move_async((t,), (dest,))
    assert not t.carrier.is_released() and dest.version == 0


def test_a_released_source_is_reported_before_a_sequence_destination():
    t = Tensor(CPU(2), 0, L(2, 1))
    t.carrier.release()
    with pytest.raises(RuntimeError, match="released"):
        sw.move_async(t, [CPU(2)])


def test_same_carrier_in_both_roles():
    t = Tensor(CPU(2), 0, L(2, 1))
    with pytest.raises(ValueError):
        sw.move_async(t, t.carrier)
    assert not t.carrier.is_released() and t.version == 0


def test_validation_errors_raise_directly_and_return_no_handle():
    t = Tensor(CPU(2), 0, L(2, 1))
    with pytest.raises(TypeError):
        sw.move_async(t, CPU(2, dtype=D.Int32))


def test_reject_a_differentiable_one_way_route_before_submission():
    calls = []
    t = gated_tensor([1.0, 2.0])

    original = PREPARED[:]
    PREPARED.clear()
    try:
        PREPARED.append(None)
        with pytest.raises(NotImplementedError, match="CPU.*Gated|Gated.*CPU"):
            sw.move_async(t, CPU(2))  # graph construction is on; (CPU, Gated) has no route
        calls.append(len(PREPARED))
    finally:
        PREPARED[:] = original
    assert calls == [1]  # prepare never ran: the reverse route is resolved first
    assert not t.carrier.is_released()


# ----- the completion interface ---------------------------------------------------------------

def test_completion_interface_has_no_coroutine_protocol():
    handle = sw.move_async(Tensor(CPU(1), 0, L(1, 1)), CPU(1))
    assert not hasattr(handle, "__await__") and not hasattr(handle, "await")
    assert handle.wait() is handle.wait()
    with pytest.raises(TypeError):
        sw.AwaitMove()
    with pytest.raises(TypeError):
        sw.AwaitResult()
    assert sw.AwaitMove[sw.Tensor] is not None


def test_handles_are_read_only():
    handle = sw.move_async(Tensor(CPU(1), 0, L(1, 1)), CPU(1))
    handle.wait()
    with pytest.raises(AttributeError):
        handle.done = False


# ----- concurrency ----------------------------------------------------------------------------

def test_a_thousand_concurrent_moves_from_eight_threads():
    n_threads, per_thread = 8, 125
    results = [[] for _ in range(n_threads)]
    errors = []

    def worker(w):
        try:
            pending = []
            for j in range(per_thread):
                c = CPU(16)
                tag = float(w * 1000 + j)
                for k in range(16):
                    c[k] = tag + k / 100
                t = Tensor(c, 0, L([4, 4], [1, 4]))
                dest = CPU(16) if j % 2 else FileBacked(dtype=D.Float32)
                with sw.no_grad():
                    pending.append((tag, c, sw.move_async(t, dest)))
            for tag, c, h in pending:
                r = h.wait()
                results[w].append((tag, c.is_released(), r.tolist()))
                if isinstance(r.carrier, FileBacked):
                    r.carrier.release()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors
    flat = [r for rs in results for r in rs]
    assert len(flat) == 1000
    assert len({tag for tag, _, _ in flat}) == 1000
    for tag, released, values in flat:
        assert released and values == [pytest.approx(tag + k / 100, rel=1e-6) for k in range(16)]


def test_a_large_file_move_returns_before_the_copy_finishes_and_completes():
    n = 1 << 22
    c = CPU(n)
    c[n - 1] = 3.0
    t = Tensor(c, 0, L(n, 1))
    dest = FileBacked(dtype=D.Float32)
    with sw.no_grad():
        handle = sw.move_async(t, dest)
    r = handle.wait()
    assert r[n - 1] == 3.0 and c.is_released()
    dest.release()


# ----- profiling --------------------------------------------------------------------------------

def test_profile_distinguishes_submission_from_completion():
    completion = GateCompletion()
    PREPARED.append(completion)
    t = gated_tensor([1.0, 2.0])
    with sw.profile() as prof:
        with sw.no_grad():
            handle = sw.move_async(t, CPU(2))
        time.sleep(0.05)
        completion.gate.set()
        handle.wait()
        handle.wait()
        assert handle.done
    events = prof.events()
    assert [e.phase for e in events] == ["move_submit", "move_complete"]
    submit, complete = events
    assert submit.name == complete.name == "move"
    assert submit.carrier_type is Gated and submit.destination_type is CPU
    assert submit.correlation_id == submit.id and complete.correlation_id == submit.id
    assert complete.start_time_ns == submit.start_time_ns
    assert complete.duration_ns >= submit.duration_ns and complete.duration_ns >= 50_000_000
    assert complete.parent_id is None and complete.succeeded and submit.succeeded
    assert submit.implementation_type is TransferProvider


def test_profile_example_of_the_contract():
    a = Tensor(CPU(2), 0, L(2, 1))
    b = Tensor(CPU(2), 0, L(2, 1))
    with sw.profile() as prof:
        c = a + b
        h = sw.move_async(c, FileBacked(dtype=D.Float32))
        h.wait()
        h.wait()
    rows = [(e.id, e.phase, e.name, e.carrier_type, e.destination_type, e.correlation_id) for e in prof.events()]
    assert rows == [(0, "execute", "add", CPU, None, None),
                    (1, "move_submit", "move", CPU, FileBacked, 1),
                    (2, "move_complete", "move", CPU, FileBacked, 1)]
    assert prof.events()[1].implementation_type is sw.CpuToFileBackedMoveOperation
    h.wait().carrier.release()


def test_profiler_exit_waits_for_submitted_moves():
    completion = GateCompletion()
    PREPARED.append(completion)
    t = gated_tensor([1.0])
    timer = threading.Timer(0.1, completion.gate.set)
    with sw.profile() as prof:
        with sw.no_grad():
            sw.move_async(t, CPU(1))
        timer.start()
    assert [e.phase for e in prof.events()] == ["move_submit", "move_complete"]
    assert t.carrier.is_released()


def test_failed_move_records_an_unsuccessful_completion():
    completion = GateCompletion(failure=RuntimeError("late failure"))
    PREPARED.append(completion)
    t = gated_tensor([1.0])
    with sw.profile() as prof:
        with sw.no_grad():
            h = sw.move_async(t, CPU(1))
        completion.gate.set()
        with pytest.raises(RuntimeError):
            h.wait()
    submit, complete = prof.events()
    assert submit.succeeded and not complete.succeeded


def test_rejected_request_records_nothing():
    with sw.profile() as prof:
        with pytest.raises(TypeError):
            sw.move_async(Tensor(CPU(1), 0, L(1, 1)), CPU(1, dtype=D.Int32))
    assert prof.events() == []


def test_backward_reverse_transfer_is_profiled():
    x = Tensor(CPU(2), 0, L(2, 1))
    moved = sw.move(x, FileBacked(dtype=D.Float32))
    back = sw.move(moved, CPU(2))
    y = sw.sum(back)
    with sw.profile() as prof:
        y.backward()
    moves = [e for e in prof.events() if e.name == "move"]
    assert [e.phase for e in moves].count("move_submit") == 2
    assert {(e.carrier_type, e.destination_type) for e in moves} == {(CPU, FileBacked), (FileBacked, CPU)}
