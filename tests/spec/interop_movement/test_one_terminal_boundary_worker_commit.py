"""docs/spec/interop-movement.md, "Requirement: One asynchronous move publishes at one terminal boundary",
for moves committed on engine workers (issue 10: "a worker commits it without taking the
GIL"): moves too large to run on the caller's thread, between built-in carriers.

From 8 threads, many rounds: of racing moves of one source exactly one publishes with exact
values and the others raise RuntimeError; a release racing them either wins (every move
raises) or loses to the one move that published; writes racing a pending move raise; no
claim is left behind. (A failed worker transfer, e.g. ENOSPC, is in
test_one_terminal_boundary.py.)"""

import numpy as np
import pytest

import strideweave as sw
from racing import THREADS, frequent_thread_switches, run_together, unclaimed  # noqa: F401 (autouse fixture)
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor

F32 = sw.DType.Float32
ROUNDS = 60
N = (1 << 14) + 7  # above the caller-thread limit: the copy and the commit run on a worker


def flat(n):
    return Layout(Shape([n]), Stride([1]))


def filled(values, cls=CPU):
    if cls is CPU:
        c = CPU(len(values))
        np.from_dlpack(Tensor(c, 0, flat(len(values))))[:] = values
        return Tensor(c, 0, flat(len(values)))
    return sw.move(filled(values), FileBacked(dtype=F32))


def values_of(t):
    return np.from_dlpack(sw.move(Tensor(t.carrier, t.offset, t.layout), CPU(t.layout.cosize))) \
        if type(t.carrier) is FileBacked else np.from_dlpack(t)


@pytest.mark.parametrize("source_cls, destination_cls", [(CPU, CPU), (CPU, FileBacked), (FileBacked, CPU)],
                         ids=["cpu-cpu", "cpu-file", "file-cpu"])
def test_racing_worker_moves_of_one_source_publish_exactly_once(source_cls, destination_cls):
    values = np.arange(N, dtype=np.float32)
    for _ in range(ROUNDS):
        t = filled(values, source_cls)
        dests = [CPU(N) if destination_cls is CPU else FileBacked(dtype=F32) for _ in range(THREADS)]
        outcomes = run_together([(lambda d=d: sw.move_async(t, d).wait()) for d in dests])
        winners = [k for k, o in enumerate(outcomes) if o[0] == "ok"]
        assert len(winners) == 1, outcomes
        for k, (kind, value) in enumerate(outcomes):
            if k == winners[0]:
                assert value.carrier is dests[k] and np.array_equal(values_of(value), values)
            else:
                assert isinstance(value, RuntimeError), value
                assert dests[k].version == 0
        assert t.carrier.is_released()
        for d in dests:
            assert unclaimed(d)


def test_release_racing_pending_worker_moves():
    values = np.arange(N, dtype=np.float32)
    for _ in range(ROUNDS):
        t = filled(values)
        source = t.carrier
        dests = [CPU(N) for _ in range(THREADS // 2)]
        actions = [source.release] * (THREADS // 2) + [(lambda d=d: sw.move_async(t, d).wait()) for d in dests]
        outcomes = run_together(actions)
        for kind, value in outcomes:
            assert kind == "ok" or isinstance(value, RuntimeError), value
        moved = [o[1] for o in outcomes[THREADS // 2:] if o[0] == "ok"]
        assert len(moved) <= 1
        if moved:
            assert np.array_equal(np.from_dlpack(moved[0]), values)
        assert source.is_released()
        for d in dests:
            assert unclaimed(d)


def test_writes_against_a_pending_worker_move_raise_and_the_result_is_exact():
    values = np.arange(N, dtype=np.float32)
    for _ in range(ROUNDS):
        t = filled(values)
        dest = FileBacked(dtype=F32)
        handle = sw.move_async(t, dest)
        try:
            t[0] = -1.0
        except RuntimeError:
            pass  # pending (claimed) or already committed (released): either way refused
        else:
            raise AssertionError("a write to the source of a pending or finished move succeeded")
        out = handle.wait()
        assert np.array_equal(values_of(out), values)
        assert unclaimed(dest)
