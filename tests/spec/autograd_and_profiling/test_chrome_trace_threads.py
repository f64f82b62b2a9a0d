"""Issue 26: the Chrome/Perfetto trace names its rows. Every event's `tid` is the recording
thread's OS thread id (`threading.get_native_id()`), not Python's `get_ident()`, and each
thread has one `thread_name` metadata event (Trace Event Format: `"ph": "M"`, `"name":
"thread_name"`, `args.name`), so the viewer shows labelled rows."""
from __future__ import annotations

import json
import threading

import strideweave as sw

F32 = sw.DType.Float32

# The fields the Trace Event Format requires of every event, and the phases this trace uses.
REQUIRED = {"name", "ph", "pid", "tid"}
PHASES = {"X", "b", "e", "i", "M"}


def _trace(tmp_path):
    c = sw.CPU(4)
    a = sw.Tensor(c, 0, sw.Layout(sw.Shape([4]), sw.Stride([1])))
    with sw.profile() as prof:
        b = a + a
        sw.move_async(b, sw.FileBacked(dtype=F32)).wait()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    return prof, json.loads(path.read_text())["traceEvents"]


def test_every_event_is_well_formed(tmp_path):
    _, trace = _trace(tmp_path)
    for event in trace:
        assert REQUIRED <= set(event), event
        assert event["ph"] in PHASES and isinstance(event["tid"], int) and isinstance(event["pid"], int)
        if event["ph"] != "M":
            assert isinstance(event["ts"], float)


def test_tids_are_native_thread_ids_with_thread_name_metadata(tmp_path):
    prof, trace = _trace(tmp_path)
    here = threading.get_native_id()
    execute = [e for e in trace if e["ph"] == "X" and e["cat"] == "execute"]
    assert [e["tid"] for e in execute] == [here]
    assert execute[0]["args"]["thread_id"] == threading.get_ident()

    names = {e["tid"]: e["args"]["name"] for e in trace if e["ph"] == "M"}
    assert all(e["name"] == "thread_name" for e in trace if e["ph"] == "M")
    assert len([e for e in trace if e["ph"] == "M"]) == len(names)  # one per thread
    assert names[here] == threading.current_thread().name
    # every thread that recorded something (this one, the engine thread that committed the
    # move) has its label
    assert {e["tid"] for e in trace if e["ph"] != "M"} == set(names)
    assert {e.thread_id for e in prof.events()} == {
        e["args"]["thread_id"] for e in trace if e["ph"] != "M"}


def test_a_thread_recording_in_its_own_profiler_is_labelled_by_its_name(tmp_path):
    out = {}

    def worker():
        c = sw.CPU(2)
        a = sw.Tensor(c, 0, sw.Layout(sw.Shape([2]), sw.Stride([1])))
        with sw.profile() as prof:
            a + a
        path = tmp_path / "worker.json"
        prof.export_chrome_trace(path)
        out["trace"] = json.loads(path.read_text())["traceEvents"]
        out["native"] = threading.get_native_id()

    t = threading.Thread(target=worker, name="sw-test-worker")
    t.start()
    t.join()
    meta = [e for e in out["trace"] if e["ph"] == "M"]
    assert meta == [{"name": "thread_name", "ph": "M", "pid": meta[0]["pid"], "tid": out["native"],
                     "args": {"name": "sw-test-worker"}}]
