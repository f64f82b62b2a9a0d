"""Evictable residency transitions vs NumPy file round trips, side by side (prints ratios).

    .venv/bin/python benches/bench_evict.py [--quick] [MiB] [rounds]

One round of each, interleaved so both see the same machine load and page-cache state:
  evict+promote   Evictable(CPU primary, FileBacked secondary): evict() writes the values to
                  a fresh file, promote() reads them into fresh CPU memory (each transition is
                  one move between tiers: a positioned transfer on an engine thread)
  tofile+fromfile ndarray.tofile(path) then np.fromfile(path), then unlinking the file (the
                  Evictable's promote deletes its file too), same bytes, same directory
Reported: best and median seconds per round and the throughput ratio
(tofile+fromfile time / evict+promote time; goal >= 0.8).
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

import strideweave as sw
from strideweave.carriers.file_backed import filebacked_directory


def main(mib: int, rounds: int) -> None:
    n = mib * (1 << 20) // 4
    primary = sw.CPU(n)
    view = np.from_dlpack(sw.Tensor(primary, 0, sw.Layout.canonical(sw.Shape(n))))
    view[:] = np.arange(n, dtype=np.float32)
    del view
    reference = np.arange(n, dtype=np.float32)
    ev = sw.Evictable(primary, sw.FileBacked(dtype=sw.DType.Float32))
    path = filebacked_directory() / f"bench-reference-{os.getpid()}.bin"

    def ours() -> float:
        start = time.perf_counter()
        ev.evict()
        ev.promote()
        return time.perf_counter() - start

    def numpy_round() -> float:
        start = time.perf_counter()
        reference.tofile(path)
        back = np.fromfile(path, dtype=np.float32)
        os.unlink(path)
        elapsed = time.perf_counter() - start
        assert back.shape == reference.shape
        return elapsed

    ours()  # warm-up: first-touch page faults, engine thread start
    numpy_round()
    ours_times, numpy_times = [], []
    for _ in range(rounds):
        ours_times.append(ours())
        numpy_times.append(numpy_round())
    check = np.from_dlpack(sw.Tensor(ev.primary, 0, sw.Layout.canonical(sw.Shape(n))))
    assert check[n - 1] == n - 1 and not ev.is_evicted() and ev.version == 0
    del check
    ev.release()

    print(f"Evictable evict+promote vs tofile+fromfile, {mib} MiB Float32, {rounds} rounds "
          f"(numpy {np.__version__}, dir {path.parent.parent})")
    print(f"{'round trip':18} {'best s':>8} {'median s':>9} {'GiB/s (best)':>13}")
    gib = 2 * mib / 1024  # bytes written + read per round
    for name, times in (("evict+promote", ours_times), ("tofile+fromfile", numpy_times)):
        print(f"{name:18} {min(times):8.3f} {statistics.median(times):9.3f} {gib / min(times):13.2f}")
    best = min(numpy_times) / min(ours_times)
    median = statistics.median(numpy_times) / statistics.median(ours_times)
    print(f"speed ratio (tofile+fromfile time / evict+promote time): best {best:.2f}, "
          f"median {median:.2f} (goal >= 0.8)")


if __name__ == "__main__":
    # `--quick` (make test's bench-quick): 16 MiB, 2 rounds.
    _quick = "--quick" in sys.argv
    _args = [a for a in sys.argv[1:] if a != "--quick"]
    main(int(_args[0]) if _args else (16 if _quick else 256),
         int(_args[1]) if len(_args) > 1 else (2 if _quick else 5))
