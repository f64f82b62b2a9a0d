"""The CuTe layout algebra from Python (layout-and-dtype.md §9) beside pycute, CUTLASS's
reference implementation, on the same layouts: compose and divide of layouts of depth <= 3 and
<= 8 leaves. Prints microseconds per call and the pycute/strideweave ratio (the issue's goal:
<= 2 us per operation from Python).

    .venv/bin/python benches/bench_layout_algebra.py [--quick]
"""
from __future__ import annotations

import sys
import timeit

from strideweave import Layout, Shape, Stride

try:
    import pycute  # type: ignore[import-untyped]  # no stubs; the reference's figures only
except ImportError:  # requirements-pycute.txt not installed: strideweave's figures alone
    pycute = None

QUICK = "--quick" in sys.argv
NUMBER = 2_000 if QUICK else 20_000
REPEAT = 3 if QUICK else 7


def lists(t):
    return [lists(x) for x in t] if isinstance(t, tuple) else t


def both(shape, stride):
    ours = Layout(Shape(lists(shape)), Stride(lists(stride)))
    theirs = pycute.Layout(shape, stride) if pycute else None
    return ours, theirs


# (name, A, B): depth <= 3, <= 8 leaves each.
CASES = [
    ("compose 20:2 o (5,4):(4,1)", both((20,), (2,)), both((5, 4), (4, 1))),
    ("compose ((4,2),(2,4)) o (8,8)", both(((4, 2), (2, 4)), ((1, 32), (4, 8))), both((8, 8), (1, 8))),
    ("divide (4,2,3) / 4:2", both((4, 2, 3), (2, 1, 8)), both(4, 2)),
    ("divide ((2,4),((2,2),4),2) / 8:2",
     both(((2, 4), ((2, 2), 4), 2), ((1, 2), ((8, 16), 32), 128)), both(8, 2)),
]
OPS = {"compose": ("compose", "composition"), "divide": ("divide", "logical_divide")}


def per_call_us(fn) -> float:
    return min(timeit.repeat(fn, number=NUMBER, repeat=REPEAT)) / NUMBER * 1e6


def main() -> None:
    print(f"{'case':40} {'strideweave us':>15} {'pycute us':>10} {'ratio':>7}")
    for name, (a, pa), (b, pb) in CASES:
        ours_name, theirs_name = OPS[name.split()[0]]
        op = getattr(Layout, ours_name)
        ours = per_call_us(lambda: op(a, b))
        line = f"{name:40} {ours:15.2f}"
        if pycute is not None:
            ref = getattr(pycute, theirs_name)
            theirs = per_call_us(lambda: ref(pa, pb))
            line += f" {theirs:10.2f} {theirs / ours:6.1f}x"
        print(line, flush=True)
    print("(ratio: pycute time / strideweave time; goal <= 2 us per strideweave call)")


if __name__ == "__main__":
    main()
