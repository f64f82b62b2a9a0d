"""Array-user entry points, side by side (no assertions; prints per-call times and ratios).

    .venv/bin/python benches/bench_arrays.py [--quick]

Rows:
  np.asarray(tensor)          Tensor.__array__: the zero-copy np.from_dlpack view
  np.from_dlpack(tensor)      what a user would otherwise call
  np.asarray(ndarray view)    NumPy's own no-op conversion, for scale
  str(tensor), 10^6 elements  summarised text, reading only the 6 x 6 shown elements
  str(ndarray), same shape    NumPy's own summarised text of the same values
  float(one-element tensor)   vs reading the element t[0]
"""
from __future__ import annotations

import gc
import sys
from typing import Callable

import numpy as np
from _timing import best_per_call_ns

import strideweave as sw


def main(quick: bool) -> None:
    iterations = 200 if quick else 2_000
    carrier = sw.CPU(24)
    tensor = sw.Tensor(carrier, 0, sw.Layout(sw.Shape([2, [3, 4]]), sw.Stride([1, [2, 6]])))
    view = np.from_dlpack(tensor)
    big = sw.Tensor(sw.CPU(1_000_000), 0, sw.Layout(sw.Shape([1000, 1000]), sw.Stride([1000, 1])))
    big_np = np.from_dlpack(big).copy()
    one = sw.Tensor(sw.CPU(1), 0, sw.Layout(sw.Shape(1), sw.Stride(1)))
    groups: list[tuple[str, list[tuple[str, Callable[[], object]]]]] = [
        ("conversion", [("np.asarray(tensor)", lambda: np.asarray(tensor)),
                        ("np.from_dlpack(tensor)", lambda: np.from_dlpack(tensor)),
                        ("np.asarray(ndarray view)", lambda: np.asarray(view))]),
        ("str of 10^6 elements", [("str(tensor)", lambda: str(big)),
                                  ("str(ndarray)", lambda: str(big_np))]),
        ("scalar", [("float(tensor)", lambda: float(one)), ("tensor[0]", lambda: one[0])]),
    ]
    gc.disable()
    for title, rows in groups:
        n = max(1, iterations // 20) if title.startswith("str") else iterations
        times = best_per_call_ns(rows, n, repeats=15)
        reference = times[rows[1][0]]
        print(f"{title}: {n} calls x best of 15, rows interleaved")
        for name, _ in rows:
            print(f"  {name:28} {times[name]:10.0f} ns/call {times[name] / reference:8.2f}x vs {rows[1][0]}")
    gc.enable()


if __name__ == "__main__":
    main("--quick" in sys.argv)
