"""docs/spec/interop-movement.md, "Requirement: Await results share one completion contract",
and what a Python user composes on top of it (issue 13): `wait(timeout=)`,
`exception(timeout=)`, a public `add_done_callback`, `future()` bridging to
`concurrent.futures` and `asyncio`, and a carrier's `with` block around a pending move.

Handles come from the public API only: a definition-backed `Gated` carrier (tests/gated_moves.py) whose route
to CPU completes only when the test opens a gate gives a deterministically pending
`AwaitMove`. Event waits carry generous bounds only so that a broken engine fails instead of
hanging; no assertion depends on how long anything takes."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

import strideweave as sw
from strideweave import CPU
from gated_moves import PREPARED, GateCompletion, gated_tensor
from gated_moves import pending_handle as start

BOUND = 30.0  # seconds; a safety net against hangs, never a speed requirement



# ----- wait(timeout=) and exception(timeout=) -------------------------------------------------

def test_wait_timeout_raises_timeout_error_and_the_handle_stays_usable():
    h, gate = start()
    with pytest.raises(TimeoutError, match="timeout"):
        h.wait(timeout=0)
    with pytest.raises(TimeoutError):
        h.wait(timeout=0.01)
    assert h.done is False
    gate.set()
    result = h.wait(timeout=BOUND)
    assert result.tolist() == [1.0, 2.0]
    assert h.wait() is result and h.wait(timeout=0) is result and h.wait(timeout=None) is result


def test_wait_timeout_argument_checks_change_nothing():
    h, gate = start()
    for bad, error in (("1", TypeError), (True, TypeError), ([1], TypeError), (-1, ValueError),
                       (float("nan"), ValueError)):
        with pytest.raises(error, match="timeout"):
            h.wait(timeout=bad)
        with pytest.raises(error, match="timeout"):
            h.exception(timeout=bad)
    assert h.done is False
    gate.set()
    assert h.wait(timeout=float("inf")).tolist() == [1.0, 2.0]


def test_exception_returns_the_recorded_failure_or_none():
    failure = OSError("device lost")
    h, gate = start(failure=failure)
    with pytest.raises(TimeoutError):
        h.exception(timeout=0)
    gate.set()
    assert h.exception(timeout=BOUND) is failure
    assert h.exception() is failure  # the same object every time, never raised
    with pytest.raises(OSError) as info:
        h.wait()
    assert info.value is failure

    ok, ok_gate = start()
    ok_gate.set()
    assert ok.exception() is None
    assert ok.wait().tolist() == [1.0, 2.0]


def test_timed_waits_from_many_threads_agree():
    h, gate = start()
    barrier = threading.Barrier(7)
    outcomes: list = []
    lock = threading.Lock()

    def waiter(i):
        barrier.wait(BOUND)
        try:
            value = h.wait(timeout=0 if i % 2 else BOUND)
        except TimeoutError:
            value = "timeout"
        with lock:
            outcomes.append((i, value))

    threads = [threading.Thread(target=waiter, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    barrier.wait(BOUND)
    for t in threads[1::2]:  # the zero-timeout waiters return first; the gate is still shut
        t.join(BOUND)
    gate.set()
    for t in threads:
        t.join(BOUND)
    values = {i: v for i, v in outcomes}
    assert all(values[i] == "timeout" for i in (1, 3, 5))
    results = [values[i] for i in (0, 2, 4)]
    assert all(r is results[0] for r in results) and results[0] is h.wait()


# ----- add_done_callback ----------------------------------------------------------------------

def test_add_done_callback_runs_exactly_once_with_the_handle():
    h, gate = start()
    calls = []
    ran = threading.Event()

    def callback(handle):
        calls.append((handle, handle.done, threading.get_ident()))
        ran.set()

    h.add_done_callback(callback)
    assert calls == []
    gate.set()
    assert ran.wait(BOUND)
    h.wait()
    assert len(calls) == 1 and calls[0][0] is h and calls[0][1] is True
    late = []
    h.add_done_callback(late.append)  # already done: runs now, on this thread
    assert late == [h]
    assert len(calls) == 1


def test_add_done_callback_errors():
    h, gate = start()
    with pytest.raises(TypeError, match="fn"):
        h.add_done_callback(42)
    gate.set()
    h.wait()


def test_a_raising_callback_is_reported_and_does_not_change_the_handle(monkeypatch):
    import sys

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))
    h, gate = start()
    boom = ZeroDivisionError("observer")

    def bad(_):
        raise boom

    others = []
    ran = threading.Event()
    h.add_done_callback(bad)
    h.add_done_callback(lambda handle: (others.append(handle), ran.set()))
    gate.set()
    result = h.wait()
    assert result.tolist() == [1.0, 2.0]
    assert ran.wait(BOUND)  # callbacks run on the committing thread, after done flips
    assert others == [h] and reported == [boom]
    assert h.wait() is result and h.exception() is None


def test_callbacks_registered_from_many_threads_each_run_once():
    h, gate = start()
    counts = [0] * 8
    lock = threading.Lock()
    barrier = threading.Barrier(9)

    def register(i):
        barrier.wait(BOUND)

        def cb(_h, i=i):
            with lock:
                counts[i] += 1
        h.add_done_callback(cb)

    threads = [threading.Thread(target=register, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    barrier.wait(BOUND)
    gate.set()  # races the registrations: each callback runs once either way
    for t in threads:
        t.join(BOUND)
    h.wait()
    assert counts == [1] * 8


# ----- future() -------------------------------------------------------------------------------

def test_future_resolves_with_the_same_value():
    h, gate = start()
    fut = h.future()
    assert isinstance(fut, concurrent.futures.Future)
    assert not fut.done()
    assert fut.cancel() is False  # moves cannot be cancelled
    gate.set()
    result = fut.result(timeout=BOUND)
    assert result is h.wait()
    assert h.future().result(timeout=0) is result  # a future of a done handle is done at once


def test_futures_taken_from_many_threads_while_the_move_completes_all_resolve():
    h, gate = start()
    barrier = threading.Barrier(9)
    futures: list = []
    lock = threading.Lock()

    def take():
        barrier.wait(BOUND)
        for _ in range(20):
            f = h.future()
            with lock:
                futures.append(f)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    barrier.wait(BOUND)
    gate.set()  # races the registrations: a future is resolved whichever side wins
    for t in threads:
        t.join(BOUND)
    result = h.wait()
    assert len(futures) == 160
    assert all(f.result(timeout=BOUND) is result for f in futures)


def test_future_carries_the_failure():
    failure = RuntimeError("provider failed")
    h, gate = start(failure=failure)
    fut = h.future()
    gate.set()
    assert fut.exception(timeout=BOUND) is failure
    with pytest.raises(RuntimeError) as info:
        fut.result()
    assert info.value is failure


def test_future_works_with_concurrent_futures_wait():
    handles = [start((float(i),)) for i in range(3)]
    futures = [h.future() for h, _ in handles]
    for _, gate in handles:
        gate.set()
    done, not_done = concurrent.futures.wait(futures, timeout=BOUND)
    assert not not_done
    assert sorted(f.result().tolist()[0] for f in done) == [0.0, 1.0, 2.0]


def test_await_asyncio_wrap_future():
    h, gate = start((3.0, 4.0))

    async def main():
        waiter = asyncio.wrap_future(h.future())
        asyncio.get_running_loop().call_later(0, gate.set)
        return await asyncio.wait_for(waiter, BOUND)

    result = asyncio.run(main())
    assert result is h.wait() and result.tolist() == [3.0, 4.0]


def test_no_coroutine_protocol():
    h, gate = start()
    assert not hasattr(h, "__await__") and not hasattr(type(h), "__await__")
    gate.set()
    h.wait()


# ----- a carrier's `with` block around a pending move -----------------------------------------

def test_leaving_a_with_block_while_its_carrier_is_in_a_pending_move_raises():
    completion = GateCompletion()
    PREPARED.append(completion)
    t = gated_tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="pending move"):
        with CPU(2) as dest:
            with sw.no_grad():
                h = sw.move_async(t, dest)
    assert not dest.is_released()  # the claim protected it; nothing changed
    completion.gate.set()
    assert h.wait(timeout=BOUND).tolist() == [1.0, 2.0]
    with dest:  # the claim is gone: the block releases it now
        pass
    assert dest.is_released()
