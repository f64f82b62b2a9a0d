"""The timing loop the call-rate benches share (imported by `bench_arrays.py` and
`bench_dlpack.py`; not a benchmark itself, so `run_all.py` does not run it)."""
from __future__ import annotations

import time
from typing import Callable, Sequence


def best_per_call_ns(rows: Sequence[tuple[str, Callable[[], object]]], iterations: int, repeats: int,
                     warmup: int = 0) -> dict[str, float]:
    """Best-of-`repeats` mean time per call of every row, in nanoseconds.

    Each row is first called `warmup` times untimed. The rows are then timed round-robin
    (each repeat times every row once) rather than one row after another, so a burst of load
    from other processes on the shared machine hits all rows alike instead of inflating
    whichever row happened to run during it; the minimum then filters what noise remains.
    The ratios are what these benches are read for."""
    for _, fn in rows:
        for _ in range(warmup):
            fn()
    best = {name: float("inf") for name, _ in rows}
    for _ in range(repeats):
        for name, fn in rows:
            start = time.perf_counter_ns()
            for _ in range(iterations):
                fn()
            best[name] = min(best[name], (time.perf_counter_ns() - start) / iterations)
    return best
