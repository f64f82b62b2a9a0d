"""docs/spec/interop-movement.md, "Requirement: One asynchronous move publishes at one terminal boundary",
for moves committed on engine workers (issue 10: "a worker commits it without taking the
GIL"): moves too large to run on the caller's thread, between built-in carriers.

From 8 threads, many rounds, for each built-in pair and in both grad modes: of racing moves of
one source exactly one publishes with exact values and the others raise RuntimeError; racing
moves into one destination leave it holding exactly one source's values; a release racing
them either wins (every move raises) or loses to the one move that published; writes racing a
pending move raise; no claim is left behind. (A failed worker transfer, e.g. ENOSPC, is in
test_one_terminal_boundary.py.)"""

import numpy as np
import pytest

import strideweave as sw
from racing import (THREADS, frequent_thread_switches, one_source_won_each_race, run_together,  # noqa: F401
                    unclaimed)
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor

F32 = sw.DType.Float32
ROUNDS = 30
N = (1 << 14) + 7  # above the caller-thread limit: the copy and the commit run on a worker
PAIRS = [(CPU, CPU), (CPU, FileBacked), (FileBacked, CPU)]
PAIR_IDS = ["cpu-cpu", "cpu-file", "file-cpu"]


@pytest.fixture(params=[True, False], ids=["grad-on", "grad-off"])
def grad_mode(request):
    """Grad mode is per thread: each racing thread sets it (see `run_together`)."""
    return request.param


def flat(n):
    return Layout(Shape([n]), Stride([1]))


def filled(values, cls=CPU):
    if cls is CPU:
        c = CPU(len(values))
        np.from_dlpack(Tensor(c, 0, flat(len(values))))[:] = values
        return Tensor(c, 0, flat(len(values)))
    with sw.no_grad():
        return sw.move(filled(values), FileBacked(dtype=F32))


def values_of(t):
    if type(t.carrier) is FileBacked:
        return np.array(t.tolist(), dtype=np.float32)
    return np.from_dlpack(t)


def fresh(cls):
    return CPU(N) if cls is CPU else FileBacked(dtype=F32)


@pytest.mark.parametrize("source_cls, destination_cls", PAIRS, ids=PAIR_IDS)
def test_racing_worker_moves_of_one_source_publish_exactly_once(source_cls, destination_cls, grad_mode):
    values = np.arange(N, dtype=np.float32)
    for _ in range(ROUNDS):
        t = filled(values, source_cls)
        dests = [fresh(destination_cls) for _ in range(THREADS)]
        outcomes = run_together([(lambda d=d: sw.move_async(t, d).wait()) for d in dests], grad_mode)
        winners = [k for k, o in enumerate(outcomes) if o[0] == "ok"]
        assert len(winners) == 1, outcomes
        for k, (kind, value) in enumerate(outcomes):
            if k == winners[0]:
                assert value.carrier is dests[k] and np.array_equal(values_of(value), values)
                assert (value.autograd_ctx is not None) == grad_mode
            else:
                assert isinstance(value, RuntimeError), value
                assert dests[k].version == 0
        assert t.carrier.is_released()
        for d in dests:
            assert unclaimed(d)


@pytest.mark.parametrize("source_cls, destination_cls", PAIRS, ids=PAIR_IDS)
def test_racing_worker_moves_into_one_destination_never_mix_sources(source_cls, destination_cls, grad_mode):
    # Moves into one destination exclude each other while pending; once one commits, the next
    # may legitimately move in. The destination always holds exactly one source's values.
    for _ in range(ROUNDS // 3):
        sources = [filled(np.arange(N, dtype=np.float32) + 100_000 * k, source_cls) for k in range(THREADS)]
        dest = fresh(destination_cls)
        outcomes = run_together([(lambda s=s: sw.move_async(s, dest).wait()) for s in sources], grad_mode)
        one_source_won_each_race(outcomes, sources, values_of(Tensor(dest, 0, flat(N))), 100_000)
        assert unclaimed(dest)


@pytest.mark.parametrize("source_cls, destination_cls", PAIRS, ids=PAIR_IDS)
def test_release_racing_pending_worker_moves(source_cls, destination_cls, grad_mode):
    values = np.arange(N, dtype=np.float32)
    for _ in range(ROUNDS):
        t = filled(values, source_cls)
        source = t.carrier
        dests = [fresh(destination_cls) for _ in range(THREADS // 2)]
        actions = [source.release] * (THREADS // 2) + [(lambda d=d: sw.move_async(t, d).wait()) for d in dests]
        outcomes = run_together(actions, grad_mode)
        for kind, value in outcomes:
            assert kind == "ok" or isinstance(value, RuntimeError), value
        moved = [o[1] for o in outcomes[THREADS // 2:] if o[0] == "ok"]
        assert len(moved) <= 1
        if moved:
            assert np.array_equal(values_of(moved[0]), values)
        for k, d in enumerate(dests):
            if outcomes[THREADS // 2 + k][0] != "ok":  # untouched: never grown, or still zero
                assert d.version == 0 and d.size() == (N if destination_cls is CPU else 0)
                assert destination_cls is not CPU or (d[0] == 0.0 and d[N - 1] == 0.0)
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
