"""Observability (issue 13): the `strideweave` logger is fed by the Rust core through the
`log` crate and pyo3-log, and a Profiler exports a Chrome/Perfetto trace in which every
move's submit and completion pair up."""
from __future__ import annotations

import json
import logging
import pathlib

import pytest
from blockdev_fixture import scratch_loop_device, shrink  # noqa: F401  (fixture used by name)

import strideweave as sw

F32 = sw.DType.Float32


def cpu_tensor(values, shape=None, stride=None):
    c = sw.CPU(len(values))
    for i, v in enumerate(values):
        c[i] = v
    shape = [len(values)] if shape is None else shape
    stride = [1] if stride is None else stride
    return sw.Tensor(c, 0, sw.Layout(sw.Shape(shape), sw.Stride(stride)))


# ----- logging --------------------------------------------------------------------------------

def test_rust_core_logs_into_the_strideweave_logger(caplog):
    caplog.set_level(logging.DEBUG, logger="strideweave")
    f = sw.FileBacked(dtype=F32)
    path = str(f.path)
    f.release()
    rust = [r for r in caplog.records if r.name == "strideweave.storage"]
    messages = [r.getMessage() for r in rust]
    assert f"created file storage {path}" in messages
    assert f"removed file storage {path}" in messages
    assert all(r.levelno == logging.DEBUG for r in rust)


def test_the_level_set_in_python_is_honoured_at_once(caplog):
    caplog.set_level(logging.DEBUG, logger="strideweave")
    sw.FileBacked().release()
    assert any(r.name == "strideweave.storage" for r in caplog.records)
    caplog.clear()
    caplog.set_level(logging.INFO, logger="strideweave")  # no cache keeps the old level
    sw.FileBacked().release()
    assert not [r for r in caplog.records if r.name.startswith("strideweave")]


def test_a_block_device_open_and_fault_are_logged(scratch_loop_device, caplog):
    caplog.set_level(logging.DEBUG, logger="strideweave")
    MiB = 1 << 20
    dev = sw.BlockDevice(scratch_loop_device.path)
    opened = [r for r in caplog.records if r.name == "strideweave.blockdev"]
    assert len(opened) == 1 and opened[0].levelno == logging.DEBUG
    assert opened[0].getMessage().startswith(f"opened block device {scratch_loop_device.path}:")
    low = dev.allocate(MiB)  # 4 MiB of Float32 slots
    high = dev.allocate(2 * MiB)  # the next 8 MiB
    low[0] = 1.0
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    shrink(scratch_loop_device, 8 * MiB)  # the device ends inside `high`
    with pytest.raises(RuntimeError, match="zero-byte read"):
        high[MiB]
    with pytest.raises(RuntimeError, match="faulted"):
        low[0]  # refused by the sticky fault: no second warning
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].name == "strideweave.blockdev"
    assert "zero-byte read" in warnings[0].getMessage()
    low.release()
    high.release()
    del low, high
    dev.close()


def test_the_package_logger_is_quiet_by_default():
    logger = logging.getLogger("strideweave")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)


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
