"""Element access through `Tensor` against the same through a NumPy array (no assertions).

    .venv/bin/python benches/bench_tensor_access.py [--quick]

Build with `make build` (maturin --release) first.

Each row reads (or writes) every element of a 10^5-element Float32 tensor once, one
`t[key]` per element, and prints the mean cost per element (best of several repeats) next to
the same loop over a NumPy array, with ratio = strideweave / NumPy (lower is better; NumPy
scalar indexing is itself a Python-level call, so this compares per-call overheads).

Rows:
  int key        `t[k]`, k in range(n): layout `[n]:[1]`; NumPy `a[k]` on a 1-D array
  hier key       `t[(i, (j0, j1))]` on layout `[100, [25, 40]]` (n = 10^5); NumPy `a[i, j0, j1]`
                 on the 3-D array of the same shape
  int key hier   `t[k]` on that hierarchical layout (integer ordinal through three leaves)
  FileBacked     `t[k]` on a FileBacked Float32 carrier (every access is a positioned syscall)
The carriers are CPU Float32 unless named; writes store Python floats.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import strideweave as sw

N = 100_000


def per_element_ns(fn, count: int, repeats: int) -> float:
    fn()  # warm-up (and specialisation of the interpreter's inline caches)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best / count * 1e9


def row(label: str, ours: float, theirs: float) -> None:
    print(f"  {label:<28} {ours:9.1f} ns   numpy {theirs:8.1f} ns   ratio {ours / theirs:6.2f}x")


def main(quick: bool) -> None:
    repeats = 3 if quick else 7
    n = N
    flat = sw.Layout(sw.Shape(n), sw.Stride(1))
    hier = sw.Layout(sw.Shape([100, [25, 40]]), sw.Stride([1000, [40, 1]]))
    assert hier.size == n

    cpu = sw.CPU(n)
    t_flat = sw.Tensor(cpu, 0, flat)
    t_hier = sw.Tensor(cpu, 0, hier)
    a = np.zeros(n, dtype=np.float32)
    a3 = np.zeros((100, 25, 40), dtype=np.float32)
    int_keys = list(range(n))
    hier_keys = [(i, (j0, j1)) for i in range(100) for j0 in range(25) for j1 in range(40)]
    np_hier_keys = [(i, j0, j1) for i in range(100) for j0 in range(25) for j1 in range(40)]
    values = [float(k) for k in range(n)]

    def read_loop(obj, keys):
        def run():
            for k in keys:
                obj[k]
        return run

    def write_loop(obj, keys):
        def run():
            for k, v in zip(keys, values):
                obj[k] = v
        return run

    print(f"bench_tensor_access: {n} elements, Float32, best of {repeats}, ns per element")
    print(" reads")
    row("int key  [n]:[1]", per_element_ns(read_loop(t_flat, int_keys), n, repeats),
        per_element_ns(read_loop(a, int_keys), n, repeats))
    row("hier key (i,(j0,j1))", per_element_ns(read_loop(t_hier, hier_keys), n, repeats),
        per_element_ns(read_loop(a3, np_hier_keys), n, repeats))
    row("int key  hierarchical", per_element_ns(read_loop(t_hier, int_keys), n, repeats),
        per_element_ns(read_loop(a, int_keys), n, repeats))
    print(" writes")
    row("int key  [n]:[1]", per_element_ns(write_loop(t_flat, int_keys), n, repeats),
        per_element_ns(write_loop(a, int_keys), n, repeats))
    row("hier key (i,(j0,j1))", per_element_ns(write_loop(t_hier, hier_keys), n, repeats),
        per_element_ns(write_loop(a3, np_hier_keys), n, repeats))
    assert cpu.version > 0 and t_flat[n - 1] == float(n - 1)

    fb = sw.FileBacked(dtype=sw.DType.Float32)
    fb._allocate(n)  # framework hook: the same growth a move into it performs
    t_file = sw.Tensor(fb, 0, flat)
    print(" FileBacked (positioned I/O per element)")
    row("read int key", per_element_ns(read_loop(t_file, int_keys), n, repeats),
        per_element_ns(read_loop(a, int_keys), n, repeats))
    row("write int key", per_element_ns(write_loop(t_file, int_keys), n, repeats),
        per_element_ns(write_loop(a, int_keys), n, repeats))
    fb.release()


if __name__ == "__main__":
    main("--quick" in sys.argv[1:])
