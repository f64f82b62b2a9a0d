"""A thread that waits, without a timeout, for a natively initiated move runs the move's
queued job itself when no engine worker has started it (`jobs::QueuedJob`, run from
`AwaitResult.block_until`): a blocking move (`move_async(...).wait()`) then never waits for a
worker to wake, nor to be woken in turn. The outcome is the one a worker reaches.

The copy lane is kept busy: more one-slot copies than it has threads go first, each holding
its worker in its `then` callback until a gate opens, so no worker can reach the move's job.
The caller must run it, or it would wait until the gate opens (a timer opens it after
BOUND seconds, so a waiter that does not run the job fails instead of hanging).
"""
import contextlib
import os
import threading

import numpy as np
import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor, _native
from strideweave.carriers.move_handle import INLINE_SLOTS

F32 = sw.DType.Float32
N = (16 << 20) // 4 + 7  # large enough to be split into pieces, whose helpers queue too
BLOCKERS = 300  # more than the copy lane can have threads (STRIDEWEAVE_WORKERS <= 256)
BOUND = 30.0  # seconds; a safety net against hangs, never a speed requirement


def flat(n):
    return Layout(Shape([n]), Stride([1]))


def cpu_tensor(values):
    carrier = CPU(len(values), empty=True)
    np.from_dlpack(Tensor(carrier, 0, flat(len(values))))[:] = values
    return Tensor(carrier, 0, flat(len(values)))


@contextlib.contextmanager
def copy_lane_busy():
    gate = threading.Event()
    one = _native.HostStorage("f32", 1), _native.HostStorage("f32", 1)
    for _ in range(BLOCKERS):
        _native.submit_span(one[0], 0, one[1], 0, 1, lambda err: gate.wait(BOUND))
    safety = threading.Timer(BOUND, gate.set)
    safety.start()
    try:
        yield
    finally:
        gate.set()
        safety.cancel()
        _native.engine_quiesce(BOUND)


@pytest.fixture(autouse=True)
def routes_known():
    # The first move of a pair resolves its route on the Python path; later ones are native.
    for make_destination in (lambda n: CPU(n, empty=True), lambda n: FileBacked(dtype=F32)):
        sw.move_async(cpu_tensor(np.zeros(INLINE_SLOTS + 1, np.float32)), make_destination(INLINE_SLOTS + 1)).wait()
    file_source = sw.move(cpu_tensor(np.zeros(INLINE_SLOTS + 1, np.float32)), FileBacked(dtype=F32))
    sw.move_async(file_source, CPU(INLINE_SLOTS + 1)).wait()


def finishing_threads(handle):
    threads = []
    handle.add_done_callback(lambda h: threads.append(threading.get_ident()))
    return threads


@pytest.mark.parametrize("block", ["wait", "exception"])
@pytest.mark.parametrize("pair", ["cpu-cpu", "cpu-file", "file-cpu"])
def test_the_waiter_runs_a_queued_move_itself(pair, block):
    values = np.arange(N, dtype=np.float32) * 3 - 1
    source = cpu_tensor(values)
    if pair == "file-cpu":
        source = sw.move(source, FileBacked(dtype=F32))
    destination = FileBacked(dtype=F32) if pair == "cpu-file" else CPU(N, empty=True)
    with copy_lane_busy():
        handle = sw.move_async(source, destination)
        threads = finishing_threads(handle)
        assert not handle.done  # the lane is busy: nothing ran it yet
        if block == "wait":
            out = handle.wait()
        else:
            assert handle.exception() is None
            out = handle.wait()
        assert threads == [threading.get_ident()]
    assert out.carrier is destination and source.carrier.is_released()
    got = np.fromfile(destination.path, np.float32) if pair == "cpu-file" else np.from_dlpack(out)
    assert np.array_equal(got, values)
    destination.release()  # not left claimed


def test_a_wait_with_a_timeout_leaves_the_job_to_the_workers():
    source = cpu_tensor(np.ones(N, np.float32))
    with copy_lane_busy():
        handle = sw.move_async(source, CPU(N, empty=True))
        threads = finishing_threads(handle)
        with pytest.raises(TimeoutError):
            handle.wait(timeout=0.01)
        assert not handle.done and threads == []
    # The gate is open again: a worker ran it (the waiter above gave up; nobody else waited).
    assert handle.done and threads != [threading.get_ident()]
    assert np.array_equal(np.from_dlpack(handle.wait()), np.ones(N, np.float32))


def test_a_failure_in_the_job_the_waiter_runs_rolls_the_move_back():
    """As `test_a_failed_commit_release_rolls_the_native_request_back` (test_async_move.py),
    with the waiter running the job: the commit's release of the FileBacked source fails (a
    directory has taken its file's name), the rollback runs with the GIL on the waiter, and
    the handle fails with that OSError, neither carrier left claimed."""
    source = sw.move(cpu_tensor(np.ones(N, np.float32)), FileBacked(dtype=F32))
    path = source.carrier.path
    os.unlink(path)
    os.mkdir(path)
    try:
        destination = CPU(N)
        with copy_lane_busy():
            with sw.no_grad():
                handle = sw.move_async(source, destination)
            threads = finishing_threads(handle)
            with pytest.raises(OSError):
                handle.wait()
            assert threads == [threading.get_ident()]
        assert destination.version == 0
        destination.release()
        source.carrier.release()
        assert destination.is_released() and source.carrier.is_released()
    finally:
        os.rmdir(path)


def test_racing_waiters_and_workers_run_each_move_exactly_once():
    """Several threads wait for one handle while a worker may take its job: it completes
    once (one done-callback, on whichever thread ran it: a worker runs it after the waiters
    may have returned), every waiter gets the identical result, the values are exact, and
    nothing stays claimed."""
    n = INLINE_SLOTS + 1
    waiters = 4
    for round_ in range(60):
        values = np.arange(n, dtype=np.float32) + round_
        destination = CPU(n, empty=True)
        handle = sw.move_async(cpu_tensor(values), destination)
        # One callback both counts and signals: a second callback, added after a worker has
        # marked the handle done, runs at once on this thread and may set the signal before
        # the worker has run the first (as with concurrent.futures.Future).
        threads = []
        called = threading.Event()
        handle.add_done_callback(lambda h: (threads.append(threading.get_ident()), called.set()))
        start = threading.Barrier(waiters)
        results = [None] * waiters

        def wait(i):
            start.wait(BOUND)
            results[i] = handle.wait()

        pool = [threading.Thread(target=wait, args=(i,)) for i in range(waiters)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(BOUND)
        assert called.wait(BOUND) and len(threads) == 1
        assert all(r is results[0] for r in results) and results[0] is not None
        assert np.array_equal(np.from_dlpack(results[0]), values)
        destination.release()  # not left claimed
