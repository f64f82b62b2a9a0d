"""docs/spec/interop-movement.md, "Requirement: One asynchronous move publishes at one terminal boundary",
for blocking small moves between exact CPU carriers (issue 10): they run whole in one native
call, and race every other state transition exactly as the Python request does.

From 8 threads, many rounds, with the interpreter switching threads every microsecond:
exactly one side wins, the loser raises RuntimeError, the values are exact, nothing
crashes, and no claim is left behind (checked through public API: a carrier that is still
claimed refuses `release()` and writes). Grad mode on and off both run here, because a
recorded move makes its autograd node on the same native path."""

import numpy as np
import pytest

import strideweave as sw
from racing import (THREADS, frequent_thread_switches, one_source_won_each_race, run_together,  # noqa: F401
                    unclaimed)
from strideweave import CPU, Layout, Shape, Stride, Tensor

ROUNDS = 300


@pytest.fixture(params=[True, False], ids=["grad-on", "grad-off"])
def grad_mode(request):
    """Grad mode is per thread: each racing thread sets it (see `run_together`)."""
    return request.param


def flat(n):
    return Layout(Shape([n]), Stride([1]))


def filled(values):
    c = CPU(len(values))
    np.from_dlpack(Tensor(c, 0, flat(len(values))))[:] = values
    return Tensor(c, 0, flat(len(values)))


def test_racing_blocking_moves_of_one_source_publish_exactly_once(grad_mode):
    values = np.arange(1024, dtype=np.float32)
    for _ in range(ROUNDS):
        t = filled(values)
        dests = [CPU(1024) for _ in range(THREADS)]
        outcomes = run_together([(lambda d=d: sw.move(t, d)) for d in dests], grad_mode)
        winners = [k for k, o in enumerate(outcomes) if o[0] == "ok"]
        assert len(winners) == 1, outcomes
        for k, (kind, value) in enumerate(outcomes):
            if k == winners[0]:
                assert value.carrier is dests[k] and value.offset == 0 and value.layout == t.layout
                assert np.array_equal(np.from_dlpack(value), values)
                assert (value.autograd_ctx is not None) == grad_mode
            else:
                assert isinstance(value, RuntimeError), value
                assert dests[k].version == 0 and dests[k][0] == 0.0 and dests[k][1023] == 0.0
        assert t.carrier.is_released()
        for d in dests:
            assert unclaimed(d)


def test_racing_blocking_moves_into_one_destination_never_mix_sources(grad_mode):
    n = 512
    for _ in range(ROUNDS // 3):
        sources = [filled(np.arange(n, dtype=np.float32) + 1000 * k) for k in range(THREADS)]
        dest = CPU(n)
        outcomes = run_together([(lambda s=s: sw.move(s, dest)) for s in sources], grad_mode)
        final = np.from_dlpack(Tensor(dest, 0, flat(n))).copy()
        one_source_won_each_race(outcomes, sources, final, 1000)
        assert unclaimed(dest)


def test_release_racing_blocking_moves_never_lets_both_take_effect(grad_mode):
    values = np.arange(256, dtype=np.float32)
    for _ in range(ROUNDS // 3):
        t = filled(values)
        source = t.carrier
        dests = [CPU(256) for _ in range(THREADS // 2)]
        actions = [source.release] * (THREADS // 2) + [(lambda d=d: sw.move(t, d)) for d in dests]
        outcomes = run_together(actions, grad_mode)
        for kind, value in outcomes:
            assert kind == "ok" or isinstance(value, RuntimeError), value
        moved = [o[1] for o in outcomes[THREADS // 2:] if o[0] == "ok"]
        assert len(moved) <= 1
        if moved:
            assert np.array_equal(np.from_dlpack(moved[0]), values)
        for k, d in enumerate(dests):
            if outcomes[THREADS // 2 + k][0] != "ok":
                assert d.version == 0 and d[0] == 0.0 and d[255] == 0.0
            assert unclaimed(d)
        assert source.is_released()


def test_writes_racing_a_blocking_move_land_in_the_result_or_raise(grad_mode):
    n = 64
    for _ in range(ROUNDS // 3):
        t = filled(np.zeros(n, dtype=np.float32))
        dest = CPU(n)
        writers = THREADS - 1

        def write(k):
            landed = []
            for i in range(k, n, writers):
                try:
                    t[i] = float(100 + i)
                except RuntimeError:
                    return landed
                landed.append(i)
            return landed

        outcomes = run_together([lambda: sw.move(t, dest)] + [(lambda k=k: write(k)) for k in range(writers)],
                                grad_mode)
        kind, moved = outcomes[0]
        assert kind == "ok", moved
        got = np.from_dlpack(moved)
        for kind, landed in outcomes[1:]:
            assert kind == "ok", landed
            for i in landed:  # every write that returned happened before the move claimed
                assert got[i] == 100 + i
        assert unclaimed(dest) and t.carrier.is_released()
