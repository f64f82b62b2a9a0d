"""The transfer engine's Python surface: the AwaitResult completion contract and the
submit/sync copy primitives the move layer builds on (interop-movement.md, "Await results
share one completion contract" and "Pending movement preserves lifetime through completion").

Framework-only entry points are used directly here; the public move API is tested elsewhere.
Event waits carry generous bounds only so that a broken engine fails instead of hanging.
"""

import collections
import errno
import gc
import inspect
import os
import sys
import threading
import weakref

import numpy as np
import pytest

from strideweave import _native

AwaitResult = _native.AwaitResult
new_completion = _native.new_completion
BOUND = 30.0  # seconds; a safety net against hangs, never a speed requirement


class AwaitMove(AwaitResult):
    """Stands in for the framework's Python subclass."""

    __slots__ = ()


def pending(cls=AwaitMove):
    return new_completion(cls)


def run_threads(n, target):
    results = [None] * n
    errors = []

    def body(i):
        try:
            results[i] = target(i)
        except BaseException as e:  # noqa: BLE001 - collected and re-checked by the caller
            results[i] = e
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    return threads, results, errors


class UnraisableRecorder:
    def __init__(self):
        self.records = []
        self.lock = threading.Lock()

    def __call__(self, rec):
        with self.lock:
            self.records.append(rec.exc_value)


@pytest.fixture
def unraisable(monkeypatch):
    rec = UnraisableRecorder()
    monkeypatch.setattr(sys, "unraisablehook", rec)
    return rec


# ---------------------------------------------------------------- completion contract


def test_concurrent_waiters_receive_the_identical_object():
    h = pending()
    value = object()
    started = threading.Barrier(5)

    def waiter(_):
        started.wait(BOUND)
        return h.wait()

    threads, results, errors = run_threads(4, waiter)
    for t in threads:
        t.start()
    started.wait(BOUND)  # all four are at (or about to enter) wait() before the commit
    assert h.done is False
    assert h._succeed(value) is True
    for t in threads:
        t.join(BOUND)
    assert not errors
    assert all(r is value for r in results)
    assert h.wait() is value and h.wait() is value


def test_every_wait_raises_the_identical_exception_object():
    h = pending()
    failure = OSError(errno.ENOSPC, "disk full")
    assert h._fail(failure) is True

    def waiter(_):
        seen = []
        for _ in range(3):
            with pytest.raises(OSError) as info:
                h.wait()
            seen.append(info.value)
        return seen

    threads, results, errors = run_threads(3, waiter)
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND)
    assert not errors
    assert all(e is failure for seen in results for e in seen)


def test_repeated_waits_do_not_grow_the_recorded_traceback():
    def fail_here():
        raise RuntimeError("transfer failed")

    try:
        fail_here()
    except RuntimeError as e:
        failure = e
    h = pending()
    h._fail(failure)
    depths = []
    for _ in range(3):
        try:
            h.wait()
        except RuntimeError as e:
            depth, tb = 0, e.__traceback__
            while tb is not None:
                depth, tb = depth + 1, tb.tb_next
            depths.append(depth)
    assert depths[0] == depths[1] == depths[2]


def test_done_flips_exactly_at_commit_and_before_callbacks_run():
    for commit in (lambda h: h._succeed(1), lambda h: h._fail(ValueError("x"))):
        h = pending()
        seen_in_callback = []
        h._add_done_callback(lambda hh: seen_in_callback.append(hh.done))
        assert h.done is False
        assert h._join(timeout=0) is False
        commit(h)
        assert h.done is True
        assert seen_in_callback == [True]


def test_second_commit_is_ignored():
    h = pending()
    first, second = object(), object()
    assert h._succeed(first) is True
    assert h._succeed(second) is False
    assert h._fail(RuntimeError("late")) is False
    assert h.wait() is first

    f = pending()
    err = KeyError("k")
    assert f._fail(err) is True
    assert f._succeed(first) is False
    with pytest.raises(KeyError) as info:
        f.wait()
    assert info.value is err


def test_concurrent_commits_have_exactly_one_winner():
    for _ in range(50):
        h = pending()
        go = threading.Barrier(6)
        values = [object() for _ in range(6)]

        def racer(i):
            go.wait(BOUND)
            return h._succeed(values[i]) if i % 2 else h._fail(RuntimeError(i))

        threads, results, errors = run_threads(6, racer)
        for t in threads:
            t.start()
        for t in threads:
            t.join(BOUND)
        assert not errors
        assert results.count(True) == 1
        winner = results.index(True)
        if winner % 2:
            assert h.wait() is values[winner]
        else:
            with pytest.raises(RuntimeError) as info:
                h.wait()
            assert info.value.args == (winner,)


def test_callbacks_run_exactly_once_with_the_handle():
    h = pending()
    calls = []
    h._add_done_callback(lambda hh: calls.append(("a", hh)))
    h._add_done_callback(lambda hh: calls.append(("b", hh)))
    assert calls == []
    h._succeed(5)
    h._succeed(6)
    h._fail(ValueError())
    h._add_done_callback(lambda hh: calls.append(("late", hh)))
    assert [c[0] for c in calls] == ["a", "b", "late"]
    assert all(c[1] is h for c in calls)
    assert type(calls[0][1]) is AwaitMove


def test_callbacks_run_on_the_committing_thread(unraisable):
    h = pending()
    ran_on = []
    finished = threading.Event()

    def callback(hh):
        ran_on.append(threading.get_ident())
        finished.set()

    h._add_done_callback(callback)
    _native.submit_python(h, lambda: h._succeed("worker"))
    assert finished.wait(BOUND)
    assert h.wait() == "worker"
    assert ran_on != [threading.get_ident()] and len(ran_on) == 1
    assert unraisable.records == []


def test_a_failing_callback_is_reported_and_others_still_run(unraisable):
    h = pending()
    boom = ZeroDivisionError("observer")
    calls = []

    def bad(_):
        raise boom

    h._add_done_callback(bad)
    h._add_done_callback(lambda hh: calls.append(hh))
    assert h._succeed(1) is True
    assert calls == [h]
    assert unraisable.records == [boom]
    assert h.wait() == 1


def test_internal_argument_checks():
    h = pending()
    with pytest.raises(TypeError, match="exc"):
        h._fail("not an exception")
    with pytest.raises(TypeError, match="exc"):
        h._fail(ValueError)  # the class, not an instance
    with pytest.raises(TypeError, match="fn"):
        h._add_done_callback(42)
    with pytest.raises(ValueError, match="timeout"):
        h._join(timeout=-1)
    assert h.done is False  # none of the refused calls committed anything


def test_join_waits_without_raising():
    h = pending()
    _native.submit_python(h, lambda: h._fail(RuntimeError("quiet")))
    assert h._join() is True
    assert h._join(timeout=0) is True
    with pytest.raises(RuntimeError, match="quiet"):
        h.wait()


def test_no_coroutine_protocol():
    h = pending(AwaitResult)
    m = pending()
    for obj in (h, m, AwaitResult, AwaitMove):
        assert not hasattr(obj, "__await__")
        assert not hasattr(obj, "await")
    assert not inspect.isawaitable(h)
    assert not inspect.isawaitable(m)


def test_users_cannot_construct_handles():
    for cls in (AwaitResult, AwaitMove):
        with pytest.raises(TypeError, match="cannot create"):
            cls()
        with pytest.raises(TypeError, match="cannot create"):
            cls(object())
        with pytest.raises(TypeError, match="cannot create"):
            cls.__new__(cls)
        with pytest.raises(TypeError, match="cannot create"):
            cls.__new__(cls, None)


def test_new_completion_builds_pending_handles_of_the_requested_subclass():
    for cls in (AwaitResult, AwaitMove):
        h = new_completion(cls)
        assert type(h) is cls
        assert h.done is False
    for bad in (int, object, 5, None, "AwaitResult"):
        with pytest.raises(TypeError, match="cls"):
            new_completion(bad)


def test_handles_are_generic_weakly_referenceable_and_read_only():
    assert AwaitResult[int].__origin__ is AwaitResult
    assert AwaitMove[str].__origin__ is AwaitMove
    h = pending(AwaitResult)
    assert weakref.ref(h)() is h
    with pytest.raises(AttributeError):
        h.done = True
    assert h.done is False
    assert AwaitResult.__module__ == "strideweave"


# ---------------------------------------------------------------- lifetime and volume


def test_a_dropped_handle_still_completes_and_is_then_freed(unraisable):
    gate = threading.Event()
    finished = threading.Event()
    observed = []
    value = object()

    h = pending()
    h._add_done_callback(lambda hh: (observed.append(hh.wait()), finished.set()))
    box = [h]

    def job():
        assert gate.wait(BOUND)
        box.pop()._succeed(value)

    _native.submit_python(h, job)
    ref = weakref.ref(h)
    del h
    gc.collect()
    assert ref() is not None  # kept alive by the pending work, not by the caller
    assert not finished.is_set()
    gate.set()
    assert finished.wait(BOUND)
    assert observed == [value]
    # Once the commit has run, nothing in the engine keeps the handle alive.
    deadline = threading.Event()
    for _ in range(1000):
        gc.collect()
        if ref() is None:
            break
        deadline.wait(0.01)
    assert ref() is None
    assert unraisable.records == []


def test_thousand_jobs_from_eight_threads_complete_exactly_once(unraisable):
    per_thread = 125
    runs = collections.Counter()
    callbacks = collections.Counter()
    lock = threading.Lock()
    handles = {}
    all_done = threading.Semaphore(0)

    def submitter(t):
        for k in range(per_thread):
            key = (t, k)
            h = pending()
            handles[key] = h

            def on_done(hh, key=key):
                with lock:
                    callbacks[key] += 1
                all_done.release()

            h._add_done_callback(on_done)

            def job(key=key, h=h):
                with lock:
                    runs[key] += 1
                h._succeed(key)

            _native.submit_python(h, job)

    threads, _, errors = run_threads(8, submitter)
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND)
    assert not errors
    for _ in range(8 * per_thread):
        assert all_done.acquire(timeout=BOUND)
    assert len(handles) == 1000
    assert set(runs) == set(handles) and set(runs.values()) == {1}
    assert set(callbacks) == set(handles) and set(callbacks.values()) == {1}
    assert all(h.wait() == key for key, h in handles.items())
    assert unraisable.records == []


def test_an_escaping_job_exception_is_reported_and_fails_its_pending_handle(unraisable):
    h = pending()
    boom = RuntimeError("job escaped")

    def job():
        raise boom

    _native.submit_python(h, job)
    assert h._join(BOUND)
    with pytest.raises(RuntimeError) as info:
        h.wait()
    assert info.value is boom
    assert unraisable.records == [boom]


def test_submit_python_argument_checks():
    with pytest.raises(TypeError, match="handle"):
        _native.submit_python(object(), lambda: None)
    with pytest.raises(TypeError, match="job"):
        _native.submit_python(None, 3)
    finished = threading.Event()
    _native.submit_python(None, finished.set)
    assert finished.wait(BOUND)


# ---------------------------------------------------------------- copy primitives


class Then:
    """Collects the `then(error_or_None)` call of one submitted copy."""

    def __init__(self):
        self.event = threading.Event()
        self.args = []
        self.threads = []

    def __call__(self, err):
        self.args.append(err)
        self.threads.append(threading.get_ident())
        self.event.set()

    def result(self):
        assert self.event.wait(BOUND)
        assert len(self.args) == 1
        return self.args[0]


def host(values, kind="i32"):
    """A HostStorage holding `values` (the storages are what the transfer functions take)."""
    storage = _native.HostStorage(kind, len(values))
    storage.set_values([v.item() if hasattr(v, "item") else v for v in values])
    return storage


def file_storage(path, count, kind="i32"):
    storage = _native.FileStorage(path, kind)
    storage.resize(count)
    return storage


def test_host_to_host_span_sync_and_async():
    values = list(range(1000))
    src = host(values)
    dst = _native.HostStorage("i32", 1000)
    _native.copy_span(src, 0, dst, 0, 1000)
    assert dst.to_list() == values

    dst2 = _native.HostStorage("i32", 1010)
    then = Then()
    _native.submit_span(src, 100, dst2, 10, 900, then)
    assert then.result() is None
    assert then.threads != [threading.get_ident()]
    assert dst2.to_list() == [0] * 10 + values[100:] + [0] * 100


def test_span_rejects_bad_arguments_without_copying(tmp_path):
    src = host(list(range(16)))
    dst = _native.HostStorage("i32", 16)
    with pytest.raises(ValueError, match="count"):
        _native.copy_span(src, 0, dst, 0, -1)
    with pytest.raises(ValueError, match="src_slot"):
        _native.copy_span(src, -1, dst, 0, 4)
    with pytest.raises(ValueError, match="src_slot 10"):
        _native.copy_span(src, 10, dst, 0, 8)
    with pytest.raises(ValueError, match="dst_slot 9"):
        _native.copy_span(src, 0, dst, 9, 8)
    with pytest.raises(ValueError, match="overlap"):
        _native.copy_span(src, 0, src, 4, 8)
    with pytest.raises(TypeError, match="f32"):
        _native.copy_span(src, 0, _native.HostStorage("f32", 16), 0, 4)
    with pytest.raises(TypeError, match="src must be a HostStorage or FileStorage"):
        _native.copy_span(12345, 0, dst, 0, 4)
    with pytest.raises(TypeError, match="then"):
        _native.submit_span(src, 0, dst, 0, 16, None)
    gone = host([1, 2])
    gone.release()
    with pytest.raises(RuntimeError, match="src storage is released"):
        _native.copy_span(gone, 0, dst, 0, 1)
    assert dst.to_list() == [0] * 16


def test_a_submitted_copy_keeps_its_storages_alive_through_a_release():
    # The job holds the buffers by reference: releasing both storages while it is queued or
    # running frees nothing under it, and the copy completes.
    n = 1 << 22
    src = _native.HostStorage("f32", n)
    dst = _native.HostStorage("f32", n)
    then = Then()
    _native.submit_span(src, 0, dst, 0, n, then)
    src.release()
    dst.release()
    assert then.result() is None


def test_host_file_round_trip_at_an_offset(tmp_path):
    values = list(range(3 << 20))  # 12 MiB of i32: more than one 8 MiB chunk
    src = host(values)
    f = file_storage(tmp_path / "store.bin", 1024 + len(values))
    _native.copy_span(src, 0, f, 1024, len(values))
    assert os.path.getsize(tmp_path / "store.bin") == 4 * (1024 + len(values))
    with open(tmp_path / "store.bin", "rb") as raw:
        raw.seek(4096)
        assert raw.read(16) == np.arange(4, dtype=np.int32).tobytes()
    back = _native.HostStorage("i32", len(values))
    _native.copy_span(f, 1024, back, 0, len(values))
    assert back.to_list() == values


def test_async_host_file_round_trip(tmp_path):
    values = np.random.default_rng(1).standard_normal(1 << 16).tolist()
    src = host(values, "f64")
    f = file_storage(tmp_path / "store.bin", 2 + len(values), "f64")
    w = Then()
    _native.submit_span(src, 0, f, 2, len(values), w)
    assert w.result() is None
    back = _native.HostStorage("f64", len(values))
    r = Then()
    _native.submit_span(f, 2, back, 0, len(values), r)
    assert r.result() is None
    assert back.to_list() == values


def test_span_ranges_are_checked_against_the_live_file(tmp_path):
    f = file_storage(tmp_path / "store.bin", 64)
    back = _native.HostStorage("i32", 64)
    # The file shrinks behind the storage's back after the range check: the read comes up short.
    r = Then()
    os.truncate(tmp_path / "store.bin", 0)
    with pytest.raises(ValueError, match="run past the end of src"):
        _native.submit_span(f, 0, back, 0, 64, r)
    f.resize(64)
    then = Then()
    _native.submit_span(f, 0, back, 0, 64, then)
    assert then.result() is None


def test_file_to_file_copy(tmp_path):
    data = list(range(100_000))
    a = file_storage(tmp_path / "a.bin", len(data))
    _native.copy_span(host(data), 0, a, 0, len(data))
    b = file_storage(tmp_path / "b.bin", 10_001)
    _native.copy_span(a, 100, b, 1, 10_000)
    assert b.to_list()[1:] == data[100:10_100]
    then = Then()
    _native.submit_span(b, 1, a, 0, 10_000, then)
    assert then.result() is None
    assert a.to_list()[:10_000] == data[100:10_100]


def addressed(extents, strides):
    """Every layout index Σ c_i*s_i, first leaf fastest (the definition)."""
    idx = np.zeros(1, dtype=np.int64)
    for e, s in zip(extents, strides):
        idx = (idx[None, :] + (np.arange(e, dtype=np.int64) * s)[:, None]).reshape(-1)
    return idx


@pytest.mark.parametrize("kind,dtype", [("f32", np.float32), ("f64", np.float64), ("i32", np.int32)])
def test_layout_copy_of_a_gapped_hierarchical_layout(kind, dtype):
    # Layout ((2, 3), (4, 2)) : ((1, 5), (20, 100)): pairs with gaps, blocks with gaps.
    extents, strides = [2, 3, 4, 2], [1, 5, 20, 100]
    src_offset = 7
    span = 1 + 1 + 10 + 60 + 100
    values = (np.arange(src_offset + span + 5) % 251).astype(dtype)
    src = host(values.tolist(), kind)
    dst = host([99] * (span + 3), kind)
    _native.copy_layout(src, src_offset, dst, 0, extents, strides)
    idx = addressed(extents, strides)
    expect = np.full(span + 3, 99, dtype=dtype)
    expect[idx] = values[src_offset + idx]
    assert np.array_equal(np.array(dst.to_list(), dtype=dtype), expect)


def test_async_layout_copy_with_broadcast_and_offset():
    extents, strides = [3, 2, 4], [0, 1, 2]  # a stride-0 leaf, addressing 8 distinct slots
    src = host(list(range(20)), "f32")
    dst = host([-1] * 12, "f32")
    then = Then()
    _native.submit_layout(src, 2, dst, 1, extents, strides, then)
    assert then.result() is None
    idx = addressed(extents, strides)
    expect = np.full(12, -1, dtype=np.float32)
    expect[1 + idx] = np.arange(20, dtype=np.float32)[2 + idx]
    assert np.array_equal(np.array(dst.to_list(), dtype=np.float32), expect)


def test_layout_copy_rejects_bad_layouts_without_copying(tmp_path):
    p = host(list(range(32)), "f32")
    q = _native.HostStorage("f32", 32)
    with pytest.raises(ValueError, match="leaf_strides"):
        _native.copy_layout(p, 0, q, 0, [2, 2], [1])
    with pytest.raises(ValueError, match="leaf_extents"):
        _native.copy_layout(p, 0, q, 0, [2, -2], [1, 2])
    with pytest.raises(ValueError, match="src_offset"):
        _native.copy_layout(p, 10, q, 0, [4, 4], [1, 8])
    with pytest.raises(ValueError, match="dst_offset"):
        _native.copy_layout(p, 0, q, 8, [4, 4], [1, 8])
    with pytest.raises(ValueError, match="same storage"):
        _native.copy_layout(p, 0, p, 0, [4], [1])
    with pytest.raises(TypeError, match="HostStorage"):
        _native.copy_layout(p, 0, file_storage(tmp_path / "f.bin", 32, "f32"), 0, [4], [1])
    then = Then()
    with pytest.raises(ValueError, match="src_offset"):
        _native.submit_layout(p, 10, q, 0, [4, 4], [1, 8], then)
    assert not then.event.is_set()
    assert q.to_list() == [0.0] * 32
    # An empty layout addresses nothing, wherever its offsets point.
    _native.copy_layout(p, 100, q, 100, [3, 0], [1, 3])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # JAX, if loaded, is not used by the child
def test_a_forked_child_gets_its_own_working_engine():
    # Start the parent's pool first, so the child inherits a pool whose threads are gone.
    warm = pending()
    _native.submit_python(warm, lambda: warm._succeed(None))
    assert warm._join(BOUND)
    pid = os.fork()
    if pid == 0:  # child: must not touch pytest machinery; report through the exit code
        code = 1
        try:
            h = new_completion(AwaitResult)
            _native.submit_python(h, lambda: h._succeed("child"))
            if h._join(BOUND) and h.wait() == "child":
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_failure_whose_traceback_refers_to_the_handle_is_collectable():
    def make():
        h = pending()
        try:
            raise RuntimeError(h)  # the exception (and its frame) refer back to the handle
        except RuntimeError as e:
            h._fail(e)
        return weakref.ref(h)

    ref = make()
    gc.collect()
    assert ref() is None


def test_a_blocked_wait_is_interruptible_from_the_main_thread():
    import _thread
    import signal

    # `interrupt_main` does nothing while SIGINT is ignored or at its OS default, which an
    # earlier test of the session (or a library it started) may have left so: Python's own
    # handler for this test's duration.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    h = pending()
    # If wait() ignored signals, this commit would end it and the test would fail, not hang.
    rescue = threading.Timer(BOUND, lambda: h._succeed("not interrupted"))
    interrupt = threading.Timer(0.05, _thread.interrupt_main)
    rescue.start()
    interrupt.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            h.wait()
    finally:
        rescue.cancel()
        interrupt.join()
        signal.signal(signal.SIGINT, previous)
    assert h.done is False


def test_quiesce_checks_its_argument_and_reports_a_quiet_engine():
    import pytest

    from strideweave import _native
    assert _native.engine_quiesce(5.0) is True
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout_seconds"):
            _native.engine_quiesce(bad)
