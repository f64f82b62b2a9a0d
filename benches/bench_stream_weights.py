"""Streaming layer weights from files through NumPy matmuls (issue 24), side by side.

    .venv/bin/python benches/bench_stream_weights.py [--quick] [--layers 16] [--size 2048]
                                                     [--batch 64] [--passes 3]

A pass multiplies an activation (batch × size) through `layers` weight matrices (size × size
Float32, 16 × 2048² = 256 MiB by default), page cache warm. Ways, each pass interleaved with
the others so all see the same machine load; min of `passes`:
  in RAM          every weight in a NumPy array
  np.memmap       one read-only memmap per layer file
  reader thread   a hand-written thread `preadv`s layer k + 1 into the other of two buffers
                  while layer k is multiplied
  Evictable       per layer `promote()`, compute on the primary's DLPack view, `evict()`
                  (the old way: every eviction writes the layer back)
  clean+async     Evictable(retain_clean=True): one-layer-ahead `promote_async()`, and an
                  `evict()` that writes nothing (examples/stream_weights.py)
One BLAS thread (OPENBLAS_NUM_THREADS=1 unless set). Printed: ms per pass and the ratio ÷ in RAM (goal for clean+async: ≤ 1.15 and ahead of the
reader thread).

The larger-than-memory variant runs np.memmap and clean+async in a child process inside a
memory cgroup of its own (v2 `memory.max`, or v1 `memory.limit_in_bytes`; as root), whose
limit is what the child uses once imported plus half the weights: the weights cannot all be
resident, in memory or in page cache, and every pass reads from the file system again. It
prints ms per pass, the ratio clean+async ÷ np.memmap (goal ≤ 1.0), and the cgroup's peak
beside its limit; where no cgroup can be made it prints why and skips.
`--quick`: 16 layers of 512² (a few seconds).
"""
from __future__ import annotations

import argparse
import os
import queue
import tempfile
import threading
import time
from typing import Callable, cast

# One BLAS thread unless the caller says otherwise: on a small shared machine OpenBLAS's own
# spinning threads fight every other thread (the reader, the engine) and the figures become
# noise. The same setting applies to every way compared.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402 - after the thread setting

import strideweave as sw  # noqa: E402

F32 = sw.DType.Float32


def flat_view(carrier: sw.Carrier, n: int) -> np.ndarray:
    return np.from_dlpack(sw.Tensor(carrier, 0, sw.Layout.canonical(sw.Shape(n))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--size", type=int, default=None)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    size = args.size or (512 if args.quick else 2048)
    layers, n = args.layers, size * size
    rng = np.random.default_rng(0)
    in_ram = [rng.standard_normal((size, size), dtype=np.float32) / np.float32(np.sqrt(size))
              for _ in range(layers)]
    x0 = rng.standard_normal((args.batch, size), dtype=np.float32)

    with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
        paths = [os.path.join(tmp, f"layer{k}.bin") for k in range(layers)]
        for w, path in zip(in_ram, paths):
            w.tofile(path)
        maps = [np.memmap(p, dtype=np.float32, mode="r", shape=(size, size)) for p in paths]

        def make_evictables(retain_clean: bool) -> list[sw.Evictable]:
            stack = []
            for w in in_ram:
                primary = sw.CPU(n, dtype=F32)
                flat_view(primary, n)[:] = w.reshape(-1)
                ev = sw.Evictable(primary, sw.FileBacked(dtype=F32), retain_clean=retain_clean)
                ev.evict()
                stack.append(ev)
            return stack
        old_stack = make_evictables(False)
        clean_stack = make_evictables(True)

        def pass_in_ram() -> np.ndarray:
            x = x0
            for w in in_ram:
                x = np.tanh(x @ w)
            return x

        def pass_memmap() -> np.ndarray:
            x = x0
            for w in maps:
                x = np.tanh(x @ w)
            return x

        buffers = [np.empty((size, size), dtype=np.float32) for _ in range(2)]
        fds = [os.open(p, os.O_RDONLY) for p in paths]

        def pass_reader_thread() -> np.ndarray:
            ready: queue.Queue[int] = queue.Queue(maxsize=1)
            free: queue.Queue[int] = queue.Queue()
            free.put(0)
            free.put(1)

            def reader() -> None:
                for k in range(layers):
                    b = free.get()
                    view = memoryview(buffers[b]).cast("B")
                    got = 0
                    while got < len(view):
                        got += os.preadv(fds[k], [view[got:]], got)
                    ready.put(b)
            t = threading.Thread(target=reader)
            t.start()
            x = x0
            for _ in range(layers):
                b = ready.get()
                x = np.tanh(x @ buffers[b])
                free.put(b)
            t.join()
            return x

        def pass_evictable_old() -> np.ndarray:
            x = x0
            for ev in old_stack:
                ev.promote()
                w = flat_view(ev.primary, n).reshape(size, size)
                x = np.tanh(x @ w)
                del w
                ev.evict()
            return x

        def pass_clean_async() -> np.ndarray:
            x = x0
            pending = clean_stack[0].promote_async()
            for k, ev in enumerate(clean_stack):
                pending.wait()
                if k + 1 < layers:
                    pending = clean_stack[k + 1].promote_async()
                w = flat_view(ev.primary, n).reshape(size, size)
                x = np.tanh(x @ w)
                del w
                ev.evict()
            return x

        ways: list[tuple[str, Callable[[], np.ndarray]]] = [
            ("in RAM", pass_in_ram), ("np.memmap", pass_memmap), ("reader thread", pass_reader_thread),
            ("Evictable (old way)", pass_evictable_old), ("clean+async Evictable", pass_clean_async)]
        expected = pass_in_ram()
        times: dict[str, list[float]] = {name: [] for name, _ in ways}
        for name, run in ways:  # warm-up: page cache, first-touch faults, engine threads
            assert np.allclose(run(), expected, rtol=1e-4, atol=1e-5), name
        for _ in range(args.passes):
            for name, run in ways:
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
        for fd in fds:
            os.close(fd)
        for ev in old_stack + clean_stack:
            ev.release()
        del maps

    base = min(times["in RAM"])
    print(f"streaming {layers} layers of {size}x{size} Float32 ({layers * n * 4 >> 20} MiB), batch "
          f"{args.batch}, warm page cache, min of {args.passes} passes (numpy {np.__version__})")
    print(f"{'way':24} {'ms/pass':>9} {'÷ in RAM':>9}")
    for name, _ in ways:
        best = min(times[name])
        print(f"{name:24} {best * 1000:9.1f} {best / base:9.2f}")
    print("goal: clean+async ≤ 1.15 × in RAM and ahead of the reader thread")
    larger_than_memory(layers, size, args.batch, args.passes)


# ----- larger than memory ---------------------------------------------------------------------

class MemoryCgroup:
    """A memory cgroup of this bench's own (v2, else v1), removed on exit; `None` from
    `make` with the reason when none can be made here."""

    def __init__(self, path: str, limit_file: str, peak_file: str, usage_file: str) -> None:
        self.path, self.limit_file, self.peak_file, self.usage_file = path, limit_file, peak_file, usage_file

    @staticmethod
    def make() -> "tuple[MemoryCgroup | None, str]":
        if os.geteuid() != 0:
            return None, "not root"
        name = f"strideweave-bench-{os.getpid()}"
        v2 = "/sys/fs/cgroup/cgroup.controllers"
        if os.path.exists(v2):
            with open(v2, encoding="utf-8") as f:
                if "memory" not in f.read().split():
                    return None, "no memory controller in the cgroup v2 hierarchy"
            parent, limit, peak, usage = "/sys/fs/cgroup", "memory.max", "memory.peak", "memory.current"
        else:
            # v1: the memory hierarchy, under this process's own memory cgroup.
            own = ""
            with open("/proc/self/cgroup", encoding="utf-8") as f:
                for line in f:
                    _, controllers, where = line.rstrip("\n").split(":", 2)
                    if "memory" in controllers.split(","):
                        own = where
            root = "/sys/fs/cgroup/memory"
            if not os.path.isdir(root):
                return None, "no cgroup v2 hierarchy and no v1 memory hierarchy at /sys/fs/cgroup/memory"
            parent, limit, peak, usage = (root + own, "memory.limit_in_bytes", "memory.max_usage_in_bytes",
                                          "memory.usage_in_bytes")
        path = os.path.join(parent, name)
        try:
            os.mkdir(path)
        except OSError as e:
            return None, f"cannot make a cgroup under {parent}: {e.strerror}"
        return MemoryCgroup(path, limit, peak, usage), ""

    def read(self, file: str) -> int:
        with open(os.path.join(self.path, file), encoding="utf-8") as f:
            return int(f.read().split()[0])

    def remove(self) -> None:
        try:
            os.rmdir(self.path)
        except OSError:
            pass  # a straggler still inside: the kernel frees it when it exits


def larger_than_memory(layers: int, size: int, batch: int, passes: int) -> None:
    cgroup, why = MemoryCgroup.make()
    if cgroup is None:
        print(f"larger-than-memory variant: skipped: {why}")
        return
    import json
    import subprocess
    import sys
    try:
        with tempfile.TemporaryDirectory(prefix="bench-stream-ltm-") as tmp:
            procs = os.path.join(cgroup.path, "cgroup.procs")

            def join_cgroup() -> None:  # in the child before it execs: all its memory is charged
                with open(procs, "w", encoding="utf-8") as f:
                    f.write(str(os.getpid()))
            child = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--ltm-child", cgroup.path, cgroup.limit_file,
                 cgroup.usage_file, cgroup.peak_file, tmp, str(layers), str(size), str(batch), str(passes)],
                capture_output=True, text=True, timeout=1800, preexec_fn=join_cgroup)
            if child.returncode != 0:
                print(f"larger-than-memory variant: failed: {child.stderr.strip()[-800:]}")
                return
            got = json.loads(child.stdout.strip().splitlines()[-1])
            peak = cgroup.read(cgroup.peak_file)
    finally:
        cgroup.remove()
    weights = layers * size * size * 4
    print(f"larger than memory: {weights >> 20} MiB of weights under a cgroup limit of {got['limit'] >> 20} MiB "
          f"({got['baseline'] >> 20} MiB charged to the child once set up + half the weights); min of {passes} passes")
    for name in ("np.memmap", "clean+async Evictable"):
        print(f"  {name:22} {got[name] * 1000:9.1f} ms/pass")
    ratio = got["clean+async Evictable"] / got["np.memmap"]
    print(f"  clean+async ÷ np.memmap {ratio:5.2f} (goal <= 1.0); cgroup peak {peak >> 20} MiB of "
          f"{got['limit'] >> 20} MiB limit")


def ltm_child(cgroup: str, limit_file: str, usage_file: str, peak_file: str, tmp: str, layers: int, size: int,
              batch: int, passes: int) -> None:
    """The larger-than-memory passes, in the cgroup (joined before exec): files written and
    dropped from the page cache first, then the limit set to what the cgroup is charged now
    plus half the weights, and its peak reset where the kernel allows."""
    import json

    def cgroup_file(name: str, value: int | None = None) -> int:
        if value is not None:
            with open(os.path.join(cgroup, name), "w", encoding="utf-8") as f:
                f.write(str(value))
            return value
        with open(os.path.join(cgroup, name), encoding="utf-8") as f:
            return int(f.read().split()[0])
    n = size * size
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((batch, size), dtype=np.float32)
    paths = [os.path.join(tmp, f"layer{k}.bin") for k in range(layers)]
    stack: list[sw.Evictable] = []
    for path in paths:
        w = rng.standard_normal((size, size), dtype=np.float32) / np.float32(np.sqrt(size))
        w.tofile(path)
        primary = sw.CPU(n, dtype=F32)
        flat_view(primary, n)[:] = w.reshape(-1)
        ev = sw.Evictable(primary, sw.FileBacked(dtype=F32), retain_clean=True)
        ev.evict()
        stack.append(ev)
        del w
    # Nothing of the weights stays cached: written back, then dropped from the page cache.
    os.sync()
    # (The secondary an eviction leaves is the FileBacked file the layer now lives in.)
    tier_paths = [str(cast(sw.FileBacked, ev.secondary).path) for ev in stack]
    for path in paths + tier_paths:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    baseline = cgroup_file(usage_file)
    limit = cgroup_file(limit_file, baseline + layers * n * 4 // 2)
    try:
        cgroup_file(peak_file, 0)  # v1 resets its peak; a v2 kernel that cannot keeps the setup's
    except OSError:
        pass
    maps = [np.memmap(p, dtype=np.float32, mode="r", shape=(size, size)) for p in paths]

    def pass_memmap() -> np.ndarray:
        x = x0
        for w in maps:
            x = np.tanh(x @ w)
        return x

    def pass_clean_async() -> np.ndarray:
        x = x0
        pending = stack[0].promote_async()
        for k, ev in enumerate(stack):
            pending.wait()
            if k + 1 < layers:
                pending = stack[k + 1].promote_async()
            w = flat_view(ev.primary, n).reshape(size, size)
            x = np.tanh(x @ w)
            del w
            ev.evict()
        return x

    ways = {"np.memmap": pass_memmap, "clean+async Evictable": pass_clean_async}
    expected = pass_memmap()
    assert np.allclose(pass_clean_async(), expected, rtol=1e-4, atol=1e-5)
    best = {name: float("inf") for name in ways}
    for _ in range(passes):
        for name, run in ways.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    for ev in stack:
        ev.release()
    print(json.dumps({**best, "limit": limit, "baseline": baseline}))


if __name__ == "__main__":
    import sys
    if len(sys.argv) > 1 and sys.argv[1] == "--ltm-child":
        c, lf, uf, pf, t, *rest = sys.argv[2:]
        ltm_child(c, lf, uf, pf, t, *(int(v) for v in rest))
    else:
        main()
