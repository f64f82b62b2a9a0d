"""DLPack export speed, side by side (no assertions; prints per-call times and ratios).

    .venv/bin/python benches/bench_dlpack.py [--quick] [iterations]

Rows:
  np.from_dlpack(tensor)      strideweave export + NumPy import (the full round trip)
  np.from_dlpack(ndarray)     NumPy's own round trip, the reference (a C fast path: NumPy
                              calls ndarray.__dlpack__ without a Python frame)
  np.from_dlpack(wrapped)     NumPy's own export behind a one-line Python __dlpack__
                              forwarder: what a Python-level __dlpack__ alone would cost
                              (Tensor.__dlpack__ is a native method of _native._TensorBase)
  tensor.__dlpack__()         export alone (legacy capsule, dropped unconsumed)
  tensor.__dlpack__(mv=1.0)   export alone (versioned capsule, dropped unconsumed)
  tensor.__dlpack_device__()  device query alone
The goal is np.from_dlpack(tensor) <= 1.5x np.from_dlpack(ndarray) (issue 10).
"""
from __future__ import annotations

import gc
import sys

import numpy as np
from _timing import best_per_call_ns

import strideweave as sw


class Wrapped:
    """An ndarray behind Python-level __dlpack__/__dlpack_device__ forwarders."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None):
        return self.array.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device,
                                     copy=copy)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def main(iterations: int) -> None:
    carrier = sw.CPU(24)
    tensor = sw.Tensor(carrier, 0, sw.Layout(sw.Shape([2, [3, 4]]), sw.Stride([1, [2, 6]])))
    ndarray = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    wrapped = Wrapped(ndarray)
    versioned = (1, 0)
    rows = [
        ("np.from_dlpack(tensor)", lambda: np.from_dlpack(tensor)),
        ("np.from_dlpack(ndarray)", lambda: np.from_dlpack(ndarray)),
        ("np.from_dlpack(wrapped)", lambda: np.from_dlpack(wrapped)),
        ("tensor.__dlpack__()", lambda: tensor.__dlpack__()),
        ("tensor.__dlpack__(mv=1.0)", lambda: tensor.__dlpack__(max_version=versioned)),
        ("ndarray.__dlpack__(mv=1.0)", lambda: ndarray.__dlpack__(max_version=versioned)),
        ("tensor.__dlpack_device__()", lambda: tensor.__dlpack_device__()),
        ("ndarray.__dlpack_device__()", lambda: ndarray.__dlpack_device__()),
    ]
    gc.disable()  # capsules and arrays are freed by refcount; keep collector pauses out
    times = best_per_call_ns(rows, iterations, repeats=25, warmup=min(iterations, 1000))
    gc.enable()
    reference = times["np.from_dlpack(ndarray)"]
    print(f"DLPack export, {iterations} calls x best of 25, rows interleaved (numpy {np.__version__})")
    print(f"{'call':30} {'ns/call':>10} {'vs np.from_dlpack(ndarray)':>28}")
    for name, _ in rows:
        print(f"{name:30} {times[name]:10.0f} {times[name] / reference:27.2f}x")
    ratio = times["np.from_dlpack(tensor)"] / reference
    print(f"round-trip ratio np.from_dlpack(tensor) / np.from_dlpack(ndarray) = {ratio:.2f} (goal <= 1.5, issue 10)")
    floor = times["np.from_dlpack(tensor)"] / times["np.from_dlpack(wrapped)"]
    print(f"round-trip ratio np.from_dlpack(tensor) / np.from_dlpack(wrapped) = {floor:.2f}")


if __name__ == "__main__":
    # `--quick` (make test's bench-quick): 200 calls per row.
    _args = [a for a in sys.argv[1:] if a != "--quick"]
    main(int(_args[0]) if _args else (200 if "--quick" in sys.argv else 2_000))
