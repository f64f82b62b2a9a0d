"""Issue 26: moves and residency changes log through `logging.getLogger("strideweave")`.

`strideweave.move`: one DEBUG record per move at its terminal completion (pair, bytes, route,
duration) and a WARNING for a failed one; `strideweave.residency`: one DEBUG record per
residency change of an Evictable (evict, promote). Nothing is logged while the level is above
DEBUG, and a level set later applies at the next move."""
from __future__ import annotations

import logging
import re

import pytest

import strideweave as sw
from strideweave.carriers.move import registered_move_operation

from move_sources import MyCPU, MyFile

F32 = sw.DType.Float32
RECORD = re.compile(r"^move (?P<pair>\w+ -> \w+): (?P<bytes>\d+) bytes via (?P<route>[\w.]+) in "
                    r"(?P<ms>[0-9.]+) ms$")


def flat(carrier):
    return sw.Tensor(carrier, 0, sw.Layout.canonical(sw.Shape(carrier.size())))


def cpu(n):
    c = sw.CPU(n)
    for i in range(n):
        c[i] = float(i)
    return c


def move_records(caplog):
    return [r for r in caplog.records if r.name == "strideweave.move"]


def test_a_blocking_move_logs_one_debug_record(caplog):
    caplog.set_level(logging.DEBUG, logger="strideweave.move")
    moved = sw.move(flat(cpu(4)), sw.CPU(4))
    assert moved.tolist() == [0.0, 1.0, 2.0, 3.0]
    [record] = move_records(caplog)
    assert record.levelno == logging.DEBUG
    m = RECORD.match(record.getMessage())
    assert m is not None, record.getMessage()
    assert m["pair"] == "CPU -> CPU" and m["bytes"] == "16" and float(m["ms"]) >= 0


def test_an_async_move_to_a_file_logs_its_pair_and_route(caplog):
    caplog.set_level(logging.DEBUG, logger="strideweave.move")
    moved = sw.move_async(flat(cpu(1024)), sw.FileBacked(dtype=F32)).wait()
    assert moved[1023] == 1023.0
    [record] = move_records(caplog)
    m = RECORD.match(record.getMessage())
    assert m is not None and m["pair"] == "CPU -> FileBacked" and m["bytes"] == "4096"
    assert m["route"].endswith("MoveOperation")


def test_nothing_is_logged_above_debug_and_a_later_level_applies_at_once(caplog):
    caplog.set_level(logging.DEBUG, logger="strideweave.move")  # restored after the test
    logging.getLogger("strideweave.move").setLevel(logging.INFO)
    sw.move(flat(cpu(4)), sw.CPU(4))
    sw.move_async(flat(cpu(4)), sw.FileBacked(dtype=F32)).wait()
    assert move_records(caplog) == []
    logging.getLogger("strideweave.move").setLevel(logging.DEBUG)
    sw.move(flat(cpu(4)), sw.CPU(4))
    assert len(move_records(caplog)) == 1


class Exploding(sw.MoveOperation):
    def _copy(self, tensor, destination, output, element_count):
        raise OSError("disk on fire")


def fail_a_move():
    """A move of 8 bytes whose `_copy` raises OSError."""
    with registered_move_operation(MyCPU, MyFile, Exploding):
        with pytest.raises(OSError, match="disk on fire"):
            sw.move(flat(MyCPU(2)), MyFile(dtype=F32))


def test_a_failed_move_logs_a_warning(caplog):
    caplog.set_level(logging.DEBUG, logger="strideweave.move")
    fail_a_move()
    [record] = move_records(caplog)
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith("failed move MyCPU -> MyFile: 8 bytes via Exploding")


def test_evict_and_promote_each_log_a_residency_change(caplog):
    caplog.set_level(logging.DEBUG, logger="strideweave.residency")
    ev = sw.Evictable(cpu(3), sw.FileBacked(dtype=F32))
    ev.evict()
    ev.promote()
    assert [ev[i] for i in range(3)] == [0.0, 1.0, 2.0]
    records = [r.getMessage() for r in caplog.records if r.name == "strideweave.residency"]
    assert len(records) == 2, records
    assert re.match(r"^residency move CPU -> FileBacked: 12 bytes in [0-9.]+ ms$", records[0])
    assert re.match(r"^residency move FileBacked -> CPU: 12 bytes in [0-9.]+ ms$", records[1])


def test_the_loggers_are_children_of_the_package_logger():
    assert logging.getLogger("strideweave.move").parent is logging.getLogger("strideweave")
    assert logging.getLogger("strideweave.residency").parent is logging.getLogger("strideweave")


def test_a_failed_move_warns_with_debug_off(caplog):
    caplog.set_level(logging.WARNING, logger="strideweave.move")
    fail_a_move()
    [record] = move_records(caplog)
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "failed move of 8 bytes: OSError: disk on fire"


def test_a_tiled_evict_and_promote_each_log_a_residency_change(caplog):
    from strideweave.carriers.tiled_evictable import TiledEvictable, TileSet
    caplog.set_level(logging.DEBUG, logger="strideweave.residency")
    te = TiledEvictable(cpu(4), sw.FileBacked(dtype=F32), (2,), (2,))
    te.evict(TileSet([(0,), (1,)]))
    te.promote(TileSet([(1,)]))
    assert [te[i] for i in range(4)] == [0.0, 1.0, 2.0, 3.0]
    records = [r.getMessage() for r in caplog.records if r.name == "strideweave.residency"]
    assert len(records) == 2, records
    assert re.match(r"^residency move CPU -> FileBacked: 16 bytes in [0-9.]+ ms$", records[0])
    assert re.match(r"^residency move FileBacked -> CPU: 8 bytes in [0-9.]+ ms$", records[1])
