"""Races of the capability-held claims (issue 21; docs/spec/extension-and-tiling.md §5, "What
a claim admits"), 8 threads × 300 rounds: hooks that release, re-move and write their own
move's carriers, while other threads release, write and move the same carriers. The move's
hooks never get past its claims; whoever loses raises RuntimeError; at most one move of a
source wins and publishes the source's values; nothing stays claimed."""
import threading

import numpy as np

import strideweave as sw
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor

from output_filling_provider import pending_move
from racing import accepts_release, frequent_thread_switches, run_together  # noqa: F401 - autouse fixture

D = sw.DType
ROUNDS = 300
N = 4


def L(n):
    return Layout(Shape([n]), Stride([1]))


class _Src(CPU):
    pass


class _Dst(CPU):
    pass


class _Hostile(sw.MoveOperation):
    """A `_copy` that turns on its own move: releases the destination, moves the source
    again and bumps the destination's version, each refused, then copies through `output`."""

    runs: list = []
    lock = threading.Lock()

    def _copy(self, tensor, destination, output, element_count):
        attempts = (destination.release, lambda: sw.move(tensor, CPU(N)), destination._increment_version,
                    tensor.carrier.release)
        outcomes = []
        for attempt in attempts:
            try:
                attempt()
                outcomes.append("accepted")
            except RuntimeError:
                outcomes.append("refused")
        with _Hostile.lock:
            _Hostile.runs.append(outcomes)
        for i in range(tensor.layout.size):
            output[i] = tensor[i]


def _values(t):
    return [t[i] for i in range(t.layout.size)]


def test_hooks_and_other_threads_racing_one_moves_carriers():
    base = [float(k) for k in range(N)]
    with sw.registered_move_operation(_Src, _Dst, _Hostile), sw.no_grad():
        for _ in range(ROUNDS):
            _Hostile.runs = []
            src = _Src(N)
            for k, v in enumerate(base):
                src[k] = v
            t = Tensor(src, 0, L(N))
            dst = _Dst(N)

            def write_source():
                src[0] = 77.0

            actions = [
                lambda: sw.move(t, dst),                                 # 0 the hostile move
                lambda: sw.move(t, CPU(N)),                              # 1 a competing move
                lambda: sw.move(t, dst),                                 # 2 the hostile move again
                dst.release,                                             # 3
                lambda: dst.__setitem__(0, 9.0),                         # 4
                src.release,                                             # 5
                lambda: sw.move(t, FileBacked(dtype=D.Float32)),         # 6 a bulk competitor
                write_source,                                            # 7
            ]
            outcomes = run_together(actions, grad=False)
            for kind, value in outcomes:
                if kind == "raised":
                    assert isinstance(value, RuntimeError), repr(value)
            movers = [k for k in (0, 1, 2, 6) if outcomes[k][0] == "ok"]
            assert len(movers) <= 1, outcomes
            if movers:
                result = outcomes[movers[0]][1]
                assert src.is_released()
                # After the commit the result's carrier is free: the racing release or write
                # of `dst` may have come after it (and only then succeeded).
                if not result.carrier.is_released():
                    firsts = {0.0, 77.0}
                    if movers[0] in (0, 2) and outcomes[4][0] == "ok":
                        firsts.add(9.0)
                    values = _values(result)
                    assert values[0] in firsts and values[1:] == base[1:], (values, outcomes)
                assert accepts_release(result.carrier)
            else:
                assert src.is_released(), outcomes  # only a release keeps every move out
            # Every hook's attempt on its own move's carriers was refused.
            for run in _Hostile.runs:
                assert run == ["refused"] * 4, run
            assert len(_Hostile.runs) == sum(1 for k in (0, 2) if k in movers)
            if not dst.is_released() and movers not in ([0], [2]):
                assert dst.version in (0, 1)  # at most the racing public write
            assert accepts_release(dst) and accepts_release(src)


# ----- a provider writing through request.output from its own thread, racing writers ----------

def test_a_providers_output_writes_race_everybody_elses_and_only_they_land():
    values = [float(k) + 0.5 for k in range(N)]
    for _ in range(ROUNDS):
        dst = CPU(N)
        t, handle, go, finish = pending_move(values, dst)
        attacks = [lambda k=k: dst.__setitem__(k % N, -1.0) for k in range(4)] + [
            dst.release, lambda: sw.move(Tensor(dst, 0, L(N)), CPU(N)), dst._increment_version]
        outcomes = run_together([go.set] + attacks, grad=False)
        for kind, value in outcomes[1:]:
            assert kind == "raised" and isinstance(value, RuntimeError), (kind, value)
        assert dst.version == 0
        finish.set()
        result = handle.wait(timeout=60)
        assert np.array_equal(np.from_dlpack(result), np.array(values, dtype=np.float32))
        assert t.carrier.is_released() and accepts_release(dst)
