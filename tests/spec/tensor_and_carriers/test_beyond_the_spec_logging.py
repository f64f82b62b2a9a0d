"""Beyond the spec (closest: docs/spec/tensor-and-carriers.md §3), logging (issue
13): the `strideweave` logger is fed by the Rust core through the `log` crate and pyo3-log,
honours the level set in Python at once, reports a block device's open and fault, and is quiet
by default. No section of the specification covers logging."""
from __future__ import annotations

import logging

import pytest

import strideweave as sw

from blockdev_fixture import scratch_loop_device, shrink  # noqa: F401  (fixture used by name)

F32 = sw.DType.Float32


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
