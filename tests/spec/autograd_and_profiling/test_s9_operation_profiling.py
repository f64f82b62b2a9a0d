"""docs/spec/autograd-and-profiling.md §9 Operation profiling: the context, the event
record, execute events, and the pairs real moves record (the section's example, exit waiting
for submitted moves, failed and rejected requests, and the reverse transfer a move node's
backward starts). The recording API the framework calls (nested intervals against a fixed
clock, move events with fake handles) is tested in tests/internal/test_profiler_recording.py.

Also a Profiler's export as a Chrome/Perfetto trace (issue 13), in which every move's submit
and completion pair up."""
from __future__ import annotations

import dataclasses
import json
import pathlib
import threading

import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Generic, Layout, Shape, Stride, Tensor
from strideweave.profiler import ProfilerEvent

from gated_moves import PREPARED, GateCompletion, gated_tensor

F32 = sw.DType.Float32


def cpu_tensor(values, shape=None, stride=None):
    c = sw.CPU(len(values))
    for i, v in enumerate(values):
        c[i] = v
    shape = [len(values)] if shape is None else shape
    stride = [1] if stride is None else stride
    return sw.Tensor(c, 0, sw.Layout(sw.Shape(shape), sw.Stride(stride)))


# ----- Chrome / Perfetto trace ----------------------------------------------------------------

def _profiled_run():
    a = cpu_tensor([1.0, 2.0, 3.0, 4.0])
    b = cpu_tensor([10.0, 20.0, 30.0, 40.0])
    with sw.profile() as prof:
        c = a + b
        h = sw.move_async(c, sw.FileBacked(dtype=F32))
        moved = h.wait()
        back = sw.move(moved, sw.CPU(4))
        with sw.no_grad():
            third = sw.move_async(cpu_tensor([1.0]), sw.CPU(1))
        third.wait()
    return prof, back


def test_export_chrome_trace_pairs_every_submit_with_its_completion(tmp_path):
    prof, back = _profiled_run()
    assert back.tolist() == [11.0, 22.0, 33.0, 44.0]
    path = tmp_path / "trace.json"
    assert prof.export_chrome_trace(path) is None
    document = json.loads(path.read_text())
    trace = document["traceEvents"]
    events = prof.events()
    submits = [e for e in events if e.phase == "move_submit"]
    completes = [e for e in events if e.phase == "move_complete"]
    assert len(submits) == len(completes) == 3

    begins = {t["id"]: t for t in trace if t["ph"] == "b"}
    ends = {t["id"]: t for t in trace if t["ph"] == "e"}
    assert set(begins) == set(ends) == {e.id for e in submits}
    for key, begin in begins.items():
        end = ends[key]
        assert begin["name"] == end["name"] == "move" and begin["cat"] == end["cat"] == "move"
        assert end["ts"] >= begin["ts"]
        assert begin["args"]["phase"] == "move_submit" and end["args"]["phase"] == "move_complete"
        assert end["args"]["correlation_id"] == key
    instants = [t for t in trace if t["ph"] == "i"]
    assert sorted(t["args"]["correlation_id"] for t in instants) == sorted(begins)

    slices = [t for t in trace if t["ph"] == "X"]
    assert [t["name"] for t in slices if t["cat"] == "execute"] == ["add"]
    assert len([t for t in slices if t["name"] == "move_submit"]) == 3
    assert all(t["dur"] >= 0 and t["ts"] >= 0 for t in slices)
    assert begins[submits[0].id]["args"]["destination_type"].endswith("FileBacked")


def test_export_chrome_trace_accepts_a_str_path(tmp_path):
    prof, _ = _profiled_run()
    path = tmp_path / "trace-str.json"
    prof.export_chrome_trace(str(path))
    assert json.loads(path.read_text())["traceEvents"]


def test_export_before_exit_or_with_a_bad_path_writes_nothing(tmp_path):
    path = tmp_path / "never.json"
    prof = sw.profile()
    with pytest.raises(RuntimeError):
        prof.export_chrome_trace(path)
    with prof:
        with pytest.raises(RuntimeError):
            prof.export_chrome_trace(path)
    with pytest.raises(TypeError, match="path"):
        prof.export_chrome_trace(42)
    assert not path.exists()
    assert list(pathlib.Path(tmp_path).iterdir()) == []


def test_an_empty_profile_exports_an_empty_trace(tmp_path):
    with sw.profile() as prof:
        pass
    prof.export_chrome_trace(tmp_path / "empty.json")
    assert json.loads((tmp_path / "empty.json").read_text())["traceEvents"] == []


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def cpu(values):
    c = CPU(len(values))
    for i, v in enumerate(values):
        c[i] = v
    return Tensor(c, 0, L([len(values)], [1]))


FIELDS = ["id", "parent_id", "name", "carrier_type", "implementation_type", "input_shapes", "start_time_ns",
          "duration_ns", "self_time_ns", "thread_id", "succeeded", "phase", "destination_type", "correlation_id"]


# ----- the event record ------------------------------------------------------------------------------

def test_event_has_exactly_the_fourteen_fields_and_is_immutable():
    assert [f.name for f in dataclasses.fields(ProfilerEvent)] == FIELDS
    values = list(range(14))
    e = ProfilerEvent(*values)
    assert ProfilerEvent(**dict(zip(FIELDS, values))) == e
    with pytest.raises(AttributeError):
        e.id = 5
    with pytest.raises(AttributeError):
        e.not_a_field = 1
    with pytest.raises(AttributeError):
        del e.name
    with pytest.raises(TypeError):
        ProfilerEvent(*values[:13])
    with pytest.raises(TypeError):
        ProfilerEvent(*values, 14)
    with pytest.raises(TypeError):
        ProfilerEvent(*values[:13], bogus=1)


# ----- the context ------------------------------------------------------------------------------------

def test_profile_and_profiler_return_new_profilers():
    p, q = sw.profile(), sw.Profiler()
    assert isinstance(p, sw.Profiler) and p is not sw.profile()
    assert isinstance(sw.profile(carriers=[CPU]), sw.Profiler)
    with pytest.raises(TypeError):
        sw.profile(None)  # keyword-only


@pytest.mark.parametrize("bad", [5, "CPU", [CPU, "Generic"], [int], [object]])
def test_carriers_argument_type_errors(bad):
    with pytest.raises(TypeError):
        sw.profile(carriers=bad)


def test_enter_returns_self_and_exit_does_not_swallow():
    p = sw.profile()
    with pytest.raises(KeyError):
        with p as entered:
            assert entered is p
            raise KeyError("x")
    assert p.events() == []


def test_single_use():
    p = sw.profile()
    with p:
        pass
    with pytest.raises(RuntimeError):
        p.__enter__()


def test_nested_activation_is_refused_and_consumes_the_profiler():
    outer, inner = sw.profile(), sw.profile()
    with outer:
        with pytest.raises(RuntimeError):
            inner.__enter__()
        sw.add(cpu([1.0]), cpu([2.0]))
    with pytest.raises(RuntimeError):
        inner.__enter__()  # the refused attempt consumed it
    assert [e.name for e in outer.events()] == ["add"]


def test_events_only_after_successful_exit():
    p = sw.profile()
    with pytest.raises(RuntimeError):
        p.events()
    with p:
        with pytest.raises(RuntimeError):
            p.events()
    assert p.events() == []


def test_exit_from_another_thread_raises_and_drops_events():
    p = sw.profile()
    p.__enter__()
    sw.add(cpu([1.0]), cpu([2.0]))
    errors = []

    def other():
        try:
            p.__exit__(None, None, None)
        except RuntimeError as e:
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1
    with pytest.raises(RuntimeError):
        p.events()
    # The entering thread is free again.
    with sw.profile() as q:
        pass
    assert q.events() == []


def test_only_the_entering_threads_work_is_recorded():
    a, b = cpu([1.0]), cpu([2.0])
    other_events = []

    def other():
        with sw.profile() as q:
            sw.mul(a, b)
        other_events.extend(q.events())

    with sw.profile() as p:
        t = threading.Thread(target=other)
        t.start()
        t.join()
        sw.add(a, b)
    assert [e.name for e in p.events()] == ["add"]
    assert [e.name for e in other_events] == ["mul"]
    assert other_events[0].thread_id != p.events()[0].thread_id == threading.get_ident()


# ----- execute events ----------------------------------------------------------------------------------

def test_execute_event_fields():
    a, b = cpu([1.0, 2.0]), cpu([3.0, 4.0])
    with sw.profile() as p:
        c = a + b
        s = sw.sum(c)
        m = sw.mul(c, 2.0)
        e = sw.elementwise_mul(c, c)
        v = sw.broadcast_to(cpu([1.0]), Shape([3]))
    events = p.events()
    assert [ev.id for ev in events] == [0, 1, 2, 3, 4]
    assert [ev.name for ev in events] == ["add", "reduce_sum", "mul", "elementwise_mul", "broadcast_to"]
    # The exact Operation class run: the class of the node each call recorded (the inputs are
    # Float32 and grad mode is on), five distinct built-in Operation subclasses.
    run = [type(c.autograd_ctx), type(s.autograd_ctx), type(m.autograd_ctx), type(e.autograd_ctx),
           sw.operation.BroadcastOperation]
    assert all(issubclass(cls, sw.Operation) and cls is not sw.Operation for cls in run)
    assert len(set(run)) == 5 and type(v.autograd_ctx) is sw.operation.BroadcastOperation
    assert [ev.implementation_type for ev in events] == run
    for ev in events:
        assert ev.phase == "execute" and ev.carrier_type is CPU and ev.succeeded is True
        assert ev.parent_id is None and ev.input_shapes is None
        assert ev.destination_type is None and ev.correlation_id is None
        assert ev.thread_id == threading.get_ident()
        assert ev.duration_ns >= 0 and 0 <= ev.self_time_ns <= ev.duration_ns
    assert events == sorted(events, key=lambda ev: ev.id)


def test_validation_failures_record_nothing_and_inner_failures_record_unsuccessful():
    a = cpu([1.0])
    fb = Tensor(FileBacked(dtype=sw.DType.Float32).new_like([1.0]), 0, L([1], [1]))
    with sw.profile() as p:
        with pytest.raises(TypeError):
            a + 1
        with pytest.raises(ValueError):
            sw.add(a, cpu([1.0, 2.0]))
        with pytest.raises(NotImplementedError):
            fb + fb
    (ev,) = p.events()
    assert ev.name == "add" and ev.carrier_type is FileBacked and ev.succeeded is False


def test_directly_constructed_operations_record_nothing():
    class Mine(sw.Operation):
        def _forward(self, t):
            return t

    add_operation = type((cpu([1.0]) + cpu([2.0])).autograd_ctx)  # the built-in add's Operation class
    assert issubclass(add_operation, sw.Operation) and add_operation is not Mine
    with sw.profile() as p:
        Mine().forward(cpu([1.0]))
        add_operation().forward(cpu([1.0]), cpu([2.0]))
    assert p.events() == []


def test_carrier_selection_is_by_exact_class():
    class MyCPU(CPU):
        pass

    a = cpu([1.0])
    m = Tensor(MyCPU(1), 0, L([1], [1]))
    g = Tensor(Generic([1.0]), 0, L([1], [1]))
    with sw.profile(carriers=[CPU]) as p:
        a + a
        m + m
        g + g
    assert [e.carrier_type for e in p.events()] == [CPU]
    with sw.profile(carriers=[]) as q:
        a + a
    assert q.events() == []
    with sw.profile(carriers=(c for c in [MyCPU, Generic])) as r:
        a + a
        m + m
        g + g
    assert [e.carrier_type for e in r.events()] == [MyCPU, Generic]


def test_backward_internals_are_not_dispatched():
    a = cpu([1.0, 2.0])
    s = sw.sum(a * 2.0)
    with sw.profile() as p:
        s.backward()
    assert p.events() == []


# ----- move events ------------------------------------------------------------------------------------
# (the recording calls the move layer makes, with fake handles: tests/internal/test_profiler_recording.py)

D = sw.DType


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
