"""Handles work where a `concurrent.futures.Future` does (issue 22 item 7, issue 26 handles):
`concurrent.futures.wait` and `as_completed` accept them, `result(timeout=)`, `cancel()`
(False: a handle's work started when it was made), `cancelled()`, `running()`. `wait`,
`exception`, `add_done_callback` and `future()` stay; there is no `await handle`, since
interop-movement.md forbids `__await__` on the completion interface (asyncio goes through
`future()`).

Pending handles come from the public API: a definition-backed `Gated` carrier
(tests/gated_moves.py) completes its move only when the test opens the gate. Bounds are
safety nets against hangs, never speed requirements."""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading

import pytest

import strideweave as sw
from strideweave import CPU
from gated_moves import pending_handle as start

BOUND = 30.0



def bulk_move(n=1 << 15):
    """A move that runs on the engine (above the inline limit)."""
    return sw.move_async(sw.Tensor(CPU(n), 0, sw.Layout(sw.Shape([n]), sw.Stride([1]))), CPU(n))


def test_cf_wait_sees_pending_and_finished_handles():
    a, gate_a = start()
    b, gate_b = start((3.0, 4.0))
    done, not_done = cf.wait([a, b], timeout=0)
    assert done == set() and not_done == {a, b}
    gate_a.set()
    done, not_done = cf.wait([a, b], timeout=BOUND, return_when=cf.FIRST_COMPLETED)
    assert done == {a} and not_done == {b}
    gate_b.set()
    done, not_done = cf.wait([a, b], timeout=BOUND)
    assert done == {a, b} and not_done == set()
    assert b.result().tolist() == [3.0, 4.0]


def test_cf_wait_first_exception_returns_at_the_failure():
    ok, gate_ok = start()
    bad, gate_bad = start(failure=OSError(5, "gate failed"))
    gate_bad.set()
    done, not_done = cf.wait([ok, bad], timeout=BOUND, return_when=cf.FIRST_EXCEPTION)
    assert done == {bad} and not_done == {ok}
    assert isinstance(bad.exception(), OSError)
    gate_ok.set()
    assert ok.wait(timeout=BOUND).tolist() == [1.0, 2.0]


def test_as_completed_yields_in_completion_order():
    handles = [start((float(k), 0.0)) for k in range(3)]
    order = [2, 0, 1]
    seen = []

    def opener():
        for k in order:
            handles[k][1].set()
            # The next gate opens only after as_completed yielded this one.
            assert yielded.wait(BOUND)
            yielded.clear()

    yielded = threading.Event()
    thread = threading.Thread(target=opener)
    thread.start()
    for h in cf.as_completed([h for h, _ in handles], timeout=BOUND):
        seen.append(h)
        yielded.set()
    thread.join(BOUND)
    assert seen == [handles[k][0] for k in order]


def test_as_completed_over_engine_moves_yields_each_once():
    handles = [bulk_move() for _ in range(6)]
    assert sorted(map(id, cf.as_completed(handles, timeout=BOUND))) == sorted(map(id, handles))


def test_result_is_wait_with_a_timeout():
    h, gate = start()
    with pytest.raises(TimeoutError):
        h.result(timeout=0)
    with pytest.raises(cf.TimeoutError):
        h.result(timeout=0.01)
    gate.set()
    value = h.result()
    assert value is h.wait() and h.result(timeout=BOUND) is value


def test_result_raises_the_recorded_failure():
    h, gate = start(failure=OSError(5, "gate failed"))
    gate.set()
    with pytest.raises(OSError) as caught:
        h.result(timeout=BOUND)
    assert caught.value is h.exception()


def test_cancel_is_false_and_changes_nothing():
    h, gate = start()
    assert h.cancel() is False
    assert h.cancelled() is False and h.running() is True and h.done is False
    gate.set()
    assert h.wait(timeout=BOUND).tolist() == [1.0, 2.0]
    assert h.cancel() is False and h.cancelled() is False and h.running() is False


def test_asyncio_bridges_through_future_since_the_spec_forbids_await():
    """interop-movement.md: the completion interface exposes no `__await__`; `future()` is the
    asyncio bridge, and it carries the same outcome objects."""
    h, gate = start((5.0, 6.0))
    bad, gate_bad = start(failure=OSError(5, "gate failed"))
    assert not hasattr(h, "__await__")

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, gate.set)
        loop.call_later(0.01, gate_bad.set)
        value = await asyncio.wrap_future(h.future())
        with pytest.raises(OSError) as caught:
            await asyncio.wrap_future(bad.future())
        assert caught.value is bad.exception()
        return value

    value = asyncio.run(main())
    assert value is h.wait() and value.tolist() == [5.0, 6.0]


def test_cf_wait_racing_completion_never_hangs_or_miscounts():
    """8 threads x 300 rounds: a handle completes on the engine while `cf.wait` installs its
    waiter; every wait returns with every handle done."""
    failures = []

    def worker():
        try:
            for _ in range(300):
                hs = [sw.move_async(sw.Tensor(CPU(64), 0, sw.Layout(sw.Shape([64]), sw.Stride([1]))), CPU(64)),
                      bulk_move((1 << 14) + 1)]
                done, not_done = cf.wait(hs, timeout=BOUND)
                if not_done or not all(h.done for h in done):
                    failures.append((done, not_done))
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert failures == []


@pytest.mark.parametrize("call", [
    lambda h: h.set_result(None), lambda h: h.set_exception(OSError("forged")),
    lambda h: h.set_running_or_notify_cancel()], ids=["set_result", "set_exception", "set_running"])
def test_the_completing_methods_of_a_future_are_refused_and_change_nothing(call):
    """The stubs present a handle as a Future (so type checkers accept `cf.wait([handle])`);
    the methods a Future's producer completes it with exist, but a handle is read-only
    (interop-movement.md: "the read-only public completion base"): RuntimeError, and the
    pending move completes with the source's values."""
    handle, gate = start((5.0, 6.0))
    with pytest.raises(RuntimeError, match="read-only"):
        call(handle)
    assert handle.done is False and handle.running()
    gate.set()
    assert handle.wait(timeout=BOUND).tolist() == [5.0, 6.0]
    with pytest.raises(RuntimeError, match="read-only"):
        call(handle)
    assert handle.exception(timeout=0) is None
