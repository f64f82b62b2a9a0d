"""The profiler's recording API the framework itself calls (docs/spec/autograd-and-profiling.md
§9): `profiler._execute` intervals (nesting, parents, self time against a deterministic clock)
and the move-event calls the move layer makes (`_move_submit_begin`/`_end`/`_abort`,
`_move_complete`), driven with fake handles. The pairs real moves record, through public API
only, are tested in tests/spec/autograd_and_profiling/test_s9_operation_profiling.py."""
from __future__ import annotations

import itertools
import threading

import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Generic, profiler

from move_sources import cpu_tensor as cpu


@pytest.fixture
def clock(monkeypatch):
    """Deterministic monotonic clock: every reading advances by 10 ns."""
    ticks = itertools.count(1000, 10)
    monkeypatch.setattr(profiler, "_now", lambda: next(ticks))


def test_nested_dispatch_parent_and_self_time(clock):
    class Outer(sw.Operation):
        pass

    a = cpu([1.0])
    with sw.profile() as p:
        with profiler._execute("outer", Generic, Outer):
            sw.add(a, a)
            sw.mul(a, 3.0)
    outer, add, mul = sorted(p.events(), key=lambda e: e.start_time_ns)
    assert (outer.name, add.name, mul.name) == ("outer", "add", "mul")
    assert add.parent_id == mul.parent_id == outer.id and outer.parent_id is None
    assert outer.self_time_ns == outer.duration_ns - add.duration_ns - mul.duration_ns
    assert add.self_time_ns == add.duration_ns


def test_unselected_nested_intervals_still_count_and_parent_skips_them(clock):
    class Outer(sw.Operation):
        pass

    class Middle(sw.Operation):
        pass

    a = cpu([1.0])
    with sw.profile(carriers=[Generic]) as p:
        with profiler._execute("outer", Generic, Outer):
            before = profiler._now()
            with profiler._execute("middle", CPU, Middle):  # not selected
                with profiler._execute("inner", Generic, Outer):
                    pass
            after = profiler._now()
    outer, inner = sorted(p.events(), key=lambda e: e.id)
    assert inner.parent_id == outer.id  # nearest *selected* enclosing event
    # The middle interval lies strictly between `before` and `after` readings.
    middle_max = after - before - 10
    assert outer.duration_ns - middle_max <= outer.self_time_ns < outer.duration_ns


class Impl(sw.Operation):
    """Stands in for the resolved MoveOperation class."""


class FakeHandle:
    def __init__(self, done: threading.Event, error=None):
        self.done, self.error = done, error
        self.waits = 0

    def wait(self):
        self.waits += 1
        self.done.wait()
        if self.error:
            raise self.error


def test_spec_example_sequence():
    a, b = cpu([1.0]), cpu([2.0])
    with sw.profile() as p:
        c = a + b
        token = profiler._move_submit_begin(CPU, FileBacked, Impl)
        done = threading.Event()
        handle = FakeHandle(done)
        profiler._move_submit_end(token, handle)

        def worker():
            profiler._move_complete(token, True)
            done.set()

        threading.Thread(target=worker).start()
        handle.wait()
        handle.wait()
    rows = [(e.id, e.phase, e.name, e.carrier_type, e.destination_type, e.correlation_id) for e in p.events()]
    assert rows == [(0, "execute", "add", CPU, None, None),
                    (1, "move_submit", "move", CPU, FileBacked, 1),
                    (2, "move_complete", "move", CPU, FileBacked, 1)]
    submit, complete = p.events()[1:]
    assert submit.implementation_type is complete.implementation_type is Impl
    assert complete.start_time_ns == submit.start_time_ns
    assert complete.duration_ns == complete.self_time_ns >= submit.duration_ns
    assert complete.parent_id is None and submit.succeeded and complete.succeeded
    assert c.tolist() == [3.0]


def test_complete_is_recorded_once_from_the_committing_thread(clock):
    with sw.profile() as p:
        token = profiler._move_submit_begin(CPU, Generic, Impl)
        profiler._move_submit_end(token)
        ident = []

        def commit():
            ident.append(threading.get_ident())
            profiler._move_complete(token, False)

        t = threading.Thread(target=commit)
        t.start()
        t.join()
        profiler._move_complete(token, True)  # ignored
    submit, complete = p.events()
    assert complete.phase == "move_complete" and complete.succeeded is False
    assert complete.thread_id == ident[0] != submit.thread_id


def test_completion_before_submit_end_still_follows_the_submit(clock):
    with sw.profile() as p:
        token = profiler._move_submit_begin(CPU, FileBacked, Impl)
        profiler._move_complete(token, True)  # synchronous _copy committed inside move_async
        profiler._move_submit_end(token)
    submit, complete = p.events()
    assert (submit.phase, complete.phase) == ("move_submit", "move_complete")
    assert complete.id > submit.id and complete.duration_ns >= submit.duration_ns


def test_exit_waits_for_pending_moves_and_swallows_their_errors():
    done = threading.Event()
    with sw.profile() as p:
        token = profiler._move_submit_begin(CPU, FileBacked, Impl)
        handle = FakeHandle(done, error=OSError("disk gone"))
        profiler._move_submit_end(token, handle)

        def worker():
            profiler._move_complete(token, False)
            done.set()

        timer = threading.Timer(0.05, worker)
        timer.start()
    assert handle.waits == 1
    assert [(e.phase, e.succeeded) for e in p.events()] == [("move_submit", True), ("move_complete", False)]


def test_selection_and_rejected_requests():
    with sw.profile(carriers=[Generic]) as p:
        assert profiler._move_submit_begin(CPU, FileBacked, Impl) is None
        profiler._move_submit_end(None)
        profiler._move_complete(None, True)
        t = profiler._move_submit_begin(CPU, Generic, Impl)  # destination selected
        profiler._move_submit_abort(t)  # rejected before submission: nothing recorded
        t2 = profiler._move_submit_begin(Generic, CPU, Impl)
        profiler._move_submit_end(t2)
        profiler._move_complete(t2, True)
    assert [(e.phase, e.carrier_type, e.destination_type) for e in p.events()] == [
        ("move_submit", Generic, CPU), ("move_complete", Generic, CPU)]
    assert profiler._move_submit_begin(CPU, CPU, Impl) is None  # no active profiler


def test_move_submit_parent_is_the_enclosing_execute():
    with sw.profile() as p:
        with profiler._execute("backward_like", CPU, Impl):
            token = profiler._move_submit_begin(FileBacked, CPU, Impl)
            profiler._move_submit_end(token)
            profiler._move_complete(token, True)
    outer, submit, complete = p.events()
    assert submit.parent_id == outer.id and complete.parent_id is None
