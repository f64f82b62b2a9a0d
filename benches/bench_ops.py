"""`add` and `sum` over 10^6 Float32 elements against NumPy, side by side (no assertions).

    .venv/bin/python benches/bench_ops.py [--quick] [elements]

Build with `make build` (maturin --release) first: a debug build of the kernels is many
times slower and says nothing about the design.

Rows (best of 5 repeats, mean per call):
  compact       both operands canonical `[n]:[1]` (one contiguous run after leaf merging)
  hierarchical  `[[1000, n/1000]]`-style two-leaf layout walked transposed (stride n/1000, 1),
                against NumPy on the equivalent transposed view
Each strideweave call includes validation, dispatch, fresh zeroed output storage and the
Tensor construction; `add` also records an autograd node (grad mode on, the default).
"""
from __future__ import annotations

import sys
from typing import Any
import time

import numpy as np

import strideweave as sw


def per_call_s(fn, repeats: int = 5, inner: int = 10) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def filled_tensor(values: np.ndarray, layout: sw.Layout) -> sw.Tensor:
    """A CPU Float32 tensor whose storage holds `values` (written through a DLPack view)."""
    carrier = sw.CPU(values.size)
    flat = sw.Tensor(carrier, 0, sw.Layout(sw.Shape(values.size), sw.Stride(1)))
    np.from_dlpack(flat)[:] = values.ravel()
    return sw.Tensor(carrier, 0, layout)


def main(n: int) -> None:
    rng = np.random.default_rng(0)
    xa = rng.standard_normal(n, dtype=np.float32)
    xb = rng.standard_normal(n, dtype=np.float32)
    compact = sw.Layout(sw.Shape(n), sw.Stride(1))
    a, b = filled_tensor(xa, compact), filled_tensor(xb, compact)

    rows_, cols = 1000, n // 1000
    m = rows_ * cols
    ta = xa[:m].reshape(rows_, cols)  # row-major: element (i, j) at i*cols + j
    tb = xb[:m].reshape(rows_, cols)
    # Walk j fastest over storage that is contiguous in j: strideweave's first leaf is the
    # fastest, so put the stride-1 leaf first for the natural case and transpose it for the
    # hierarchical case (stride `cols` first).
    hier = sw.Layout(sw.Shape([[rows_, cols]]), sw.Stride([[cols, 1]]))
    ha, hb = filled_tensor(ta, hier), filled_tensor(tb, hier)
    na, nb = ta.T, tb.T  # NumPy's equivalent: an F-order walk of the same storage

    checks: list[tuple[np.ndarray, Any]] = [
        (np.asarray(np.from_dlpack(a + b)), xa + xb),
        (np.asarray(sw.sum(a).tolist()), np.float32(xa.astype(np.float64).sum())),
    ]
    for got, want in checks:
        assert np.allclose(got, want, rtol=1e-5, atol=1e-3), "strideweave disagrees with NumPy"

    rows = [
        ("add compact", lambda: a + b, lambda: xa + xb),
        ("sum compact", lambda: sw.sum(a), lambda: xa.sum()),
        ("add hierarchical", lambda: ha + hb, lambda: na + nb),
        ("sum hierarchical", lambda: sw.sum(ha), lambda: na.sum()),
    ]
    with sw.no_grad():
        rows.append(("add compact, no_grad", lambda: a + b, lambda: xa + xb))
    print(f"{n} Float32 elements (numpy {np.__version__}); best of 5 x 10 calls")
    print(f"{'case':26} {'strideweave ms':>15} {'numpy ms':>10} {'ratio':>8}")
    for name, ours, theirs in rows:
        if "no_grad" in name:
            with sw.no_grad():
                t_ours = per_call_s(ours)
        else:
            t_ours = per_call_s(ours)
        t_np = per_call_s(theirs)
        print(f"{name:26} {t_ours * 1e3:15.3f} {t_np * 1e3:10.3f} {t_ours / t_np:7.2f}x")


if __name__ == "__main__":
    # `--quick` (make test's bench-quick): 10^5 elements, so a broken bench shows in seconds.
    _args = [a for a in sys.argv[1:] if a != "--quick"]
    main(int(_args[0]) if _args else (100_000 if "--quick" in sys.argv else 1_000_000))
