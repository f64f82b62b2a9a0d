"""Streaming layer weights from files through NumPy matmuls (issue 24), side by side.

    .venv/bin/python benches/bench_stream_weights.py [--quick] [--layers 16] [--size 2048]
                                                     [--batch 64] [--passes 7]

A pass multiplies an activation (batch × size) through `layers` weight matrices (size × size
Float32, 16 × 2048² = 256 MiB by default), page cache warm. Ways, each pass interleaved with
the others so all see the same machine load (each round in another, seeded order, with dirty
pages written out, untimed, before every pass); min and median of `passes`:
  in RAM          every weight in a NumPy array
  np.memmap       one read-only memmap per layer file
  reader thread   a hand-written thread `preadv`s layer k + 1 into the other of two buffers
                  while layer k is multiplied
  Evictable       per layer `promote()`, compute on the primary's DLPack view, `evict()`
                  (the old way: every eviction writes the layer back)
  clean+async     Evictable(retain_clean=True): one-layer-ahead `promote_async()`, and an
                  `evict()` that writes nothing (examples/stream_weights.py)
  in RAM, page-aligned / reader thread, page-aligned
                  the same two ways with the weights (the reader's buffers) at page-aligned
                  addresses, as every tier's memory is and as `np.memmap`'s is. NumPy's own
                  arrays sit at 16 mod 64 bytes (glibc's malloc), and the OpenBLAS that NumPy
                  bundles runs this batch-64 sgemm 25-30% faster on such a weight matrix than on
                  a 64-byte-aligned one on some CPUs (this machine's Xeon among them); these
                  rows show the I/O's cost apart from that. The alignment probe after the
                  table shows the effect alone: the same matmuls on one pair of weight
                  matrices at +0, +16 and +64 bytes from a page boundary.
One BLAS thread (OPENBLAS_NUM_THREADS=1 unless set). Printed: ms per pass and the ratio ÷ in RAM, best
and median (goal for clean+async, on the best: ≤ 1.15 and ahead of the reader thread), and the
same goal against the page-aligned rows.

The larger-than-memory variant runs np.memmap, clean+async and a residency-policy row in a
child process inside a memory cgroup of its own (v2 `memory.max`, or v1
`memory.limit_in_bytes`; as root), whose limit is what the child uses once set up plus half
the weights: the weights cannot all be resident, in memory or in page cache, and every pass
reads from the file system again. The policy row keeps every layer as one tile of a single
TiledEvictable (FileBacked secondary, retain_clean) under `ResidencyPolicy(2 layers' bytes)`,
iterates a `residency_plan` of one step per layer (the next layer prefetched while this one
is multiplied), and multiplies by the step's tile projected into one reused CPU carrier (a
TiledEvictable exports no DLPack, so that is one 16 MiB host copy per layer the Evictable
rows do not make). Before and after every step's work it reads the carrier's resident bytes
through the public API (its tiles on primary) and fails if they ever pass the budget. It
prints ms per pass, each row ÷ np.memmap (goal ≤ 1.0), the resident maximum beside the
budget, and the cgroup's peak beside its limit; where no cgroup can be made it prints why
and skips.
`--quick`: 16 layers of 512² (a few seconds; the larger-than-memory variant 16 of 1024²).
"""
from __future__ import annotations

import argparse
import os
import queue
import random
import tempfile
import threading
import time
from typing import Callable

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


def page_aligned(a: np.ndarray) -> np.ndarray:
    """A copy of `a` whose data starts on a page boundary."""
    raw = np.empty(a.nbytes + 4096, dtype=np.uint8)
    start = -raw.ctypes.data % 4096
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def at_offset(a: np.ndarray, offset: int) -> np.ndarray:
    """A copy of `a` whose data starts `offset` bytes after a page boundary."""
    raw = np.empty(a.nbytes + 8192, dtype=np.uint8)
    start = -raw.ctypes.data % 4096 + offset
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def alignment_probe(x0: np.ndarray, w: np.ndarray, layers: int, rounds: int = 5) -> dict[int, float]:
    """Seconds (best of `rounds`) for `layers` of the pass's step, alternating two copies of
    `w`, with the copies' data at each offset from a page boundary: what the BLAS makes of
    the weights' address alone."""
    best = {}
    for offset in (0, 16, 64):
        pair = [at_offset(w, offset) for _ in range(2)]
        times = []
        for _ in range(rounds):
            start, x = time.perf_counter(), x0
            for k in range(layers):
                x = np.tanh(x @ pair[k % 2])
            times.append(time.perf_counter() - start)
        best[offset] = min(times)
    return best


def stream_arrays(x0: np.ndarray, weights: "list[np.ndarray] | list[np.memmap]") -> np.ndarray:
    """One pass over weights NumPy can read directly (in RAM, or `np.memmap`)."""
    x = x0
    for w in weights:
        x = np.tanh(x @ w)
    return x


def stream_clean_async(x0: np.ndarray, stack: list[sw.Evictable], size: int) -> np.ndarray:
    """One pass over `retain_clean` Evictables, promoting one layer ahead while computing on
    the current one's primary (its DLPack view), then evicting it (a clean evict writes
    nothing)."""
    x = x0
    pending = stack[0].promote_async()
    for k, ev in enumerate(stack):
        pending.wait()
        if k + 1 < len(stack):
            pending = stack[k + 1].promote_async()
        w = flat_view(ev.primary, size * size).reshape(size, size)
        x = np.tanh(x @ w)
        del w
        ev.evict()
    return x


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--size", type=int, default=None)
    parser.add_argument("--batch", type=int, default=64)
    # Seven, not the three: on a small shared machine a way's passes come out fast or
    # slow by 5-10% for stretches at a time, and three passes often catch no fast one.
    parser.add_argument("--passes", type=int, default=7)
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
            return stream_arrays(x0, in_ram)

        def pass_memmap() -> np.ndarray:
            return stream_arrays(x0, maps)

        in_ram_aligned = [page_aligned(w) for w in in_ram]

        def pass_in_ram_aligned() -> np.ndarray:
            return stream_arrays(x0, in_ram_aligned)

        fds = [os.open(p, os.O_RDONLY) for p in paths]

        def reader_thread(buffers: list[np.ndarray]) -> np.ndarray:
            ready: queue.Queue[int] = queue.Queue(maxsize=1)
            free: queue.Queue[int] = queue.Queue()
            free.put(0)
            free.put(1)

            def reader() -> None:
                for k in range(layers):
                    b = free.get()
                    view = buffers[b].data.cast("B")
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
        numpy_buffers = [np.empty((size, size), dtype=np.float32) for _ in range(2)]
        aligned_buffers = [page_aligned(b) for b in numpy_buffers]

        def pass_reader_thread() -> np.ndarray:
            return reader_thread(numpy_buffers)

        def pass_reader_aligned() -> np.ndarray:
            return reader_thread(aligned_buffers)

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
            return stream_clean_async(x0, clean_stack, size)

        ways: list[tuple[str, Callable[[], np.ndarray]]] = [
            ("in RAM", pass_in_ram), ("np.memmap", pass_memmap), ("reader thread", pass_reader_thread),
            ("Evictable (old way)", pass_evictable_old), ("clean+async Evictable", pass_clean_async),
            (ALIGNED_RAM, pass_in_ram_aligned), (ALIGNED_READER, pass_reader_aligned)]
        expected = pass_in_ram()
        times: dict[str, list[float]] = {name: [] for name, _ in ways}
        for name, run in ways:  # warm-up: page cache, first-touch faults, engine threads
            assert np.allclose(run(), expected, rtol=1e-4, atol=1e-5), name
        for rotation in range(args.passes):
            # Each round runs the ways in another order (a seeded shuffle), so no way always
            # follows the same other. The way after the old Evictable runs slower (that round
            # faults in and frees 256 MiB of fresh memory and writes it all back); with the
            # order only rotated, clean+async came right after it in every round but one, at
            # medians 8-30% above its best. The dirty pages a way leaves are written out before
            # the next way starts, untimed, instead of by the kernel's flusher threads competing
            # with whichever way comes next.
            for name, run in random.Random(rotation).sample(ways, len(ways)):
                os.sync()
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
    def median(name: str) -> float:
        return sorted(times[name])[len(times[name]) // 2]
    print(f"{'way':28} {'ms/pass':>9} {'÷ in RAM':>9} {'median ms':>10} {'÷ in RAM':>9}")
    for name, _ in ways:
        best = min(times[name])
        print(f"{name:28} {best * 1000:9.1f} {best / base:9.2f} {median(name) * 1000:10.1f} "
              f"{median(name) / median('in RAM'):9.2f}")
    ours = min(times["clean+async Evictable"])
    for ram, reader, what in (("in RAM", "reader thread", "NumPy's arrays"),
                              (ALIGNED_RAM, ALIGNED_READER, "page-aligned arrays")):
        ratio, ahead = ours / min(times[ram]), ours < min(times[reader])
        print(f"goal against {what}: clean+async ≤ 1.15 × {ram} ({ratio:.2f}: "
              f"{'met' if ratio <= 1.15 else 'not met'}) and ahead of the {reader} "
              f"({'ahead' if ahead else 'behind'}: {ours / min(times[reader]):.2f} × its time; "
              f"medians {median('clean+async Evictable') / median(reader):.2f})")
        # Paired by round: both ran within the same second or so, under the same load, so
        # the count is robust to the machine's slow stretches that move a best or a median.
        wins = sum(a < b for a, b in zip(times["clean+async Evictable"], times[reader]))
        print(f"  rounds in which clean+async beat the {reader}: {wins} of {args.passes}; "
              f"its time ÷ the {reader}'s, median over rounds: "
              f"{paired_median(times['clean+async Evictable'], times[reader]):.2f}")
    probe = alignment_probe(x0, in_ram[0], layers)
    print("alignment probe (the same matmuls on one weight pair, its data at +N bytes from a page): "
          + ", ".join(f"+{k} {v * 1000:.1f} ms" for k, v in probe.items())
          + f"; +0 ÷ +16 = {probe[0] / probe[16]:.2f}")
    # Quick or not, layers of at least 1024² (4 MiB): below that, what the process itself
    # grows by once running (allocator arenas of the engine's threads) is a sizeable part of
    # the half of the weights the limit leaves, and the child runs out of memory.
    larger_than_memory(layers, max(size, 1024), args.batch, args.passes)


def paired_median(ours: list[float], theirs: list[float]) -> float:
    """The median over rounds of ours ÷ theirs, each ratio within one round."""
    ratios = sorted(a / b for a, b in zip(ours, theirs))
    return ratios[len(ratios) // 2]


ALIGNED_RAM = "in RAM, page-aligned"
ALIGNED_READER = "reader thread, page-aligned"


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
            # The child's FileBacked files (the tiers' and the tiles' slab) live in `tmp` too,
            # so it can drop every one of them from the page cache.
            child = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--ltm-child", cgroup.path, cgroup.limit_file,
                 cgroup.usage_file, cgroup.peak_file, tmp, str(layers), str(size), str(batch), str(passes)],
                capture_output=True, text=True, timeout=1800, preexec_fn=join_cgroup,
                env={**os.environ, "STRIDEWEAVE_FILEBACKED_PARENT": tmp})
            if child.returncode != 0:
                print(f"larger-than-memory variant: failed (exit status {child.returncode}): "
                      f"{child.stderr.strip()[-800:]}")
                return
            got = json.loads(child.stdout.strip().splitlines()[-1])
            peak = cgroup.read(cgroup.peak_file)
    finally:
        cgroup.remove()
    weights = layers * size * size * 4
    print(f"larger than memory: {weights >> 20} MiB of weights under a cgroup limit of {got['limit'] >> 20} MiB "
          f"({got['baseline'] >> 20} MiB charged to the child once set up + half the weights); min of {passes} passes")
    print(f"  {'way':30} {'ms/pass':>9} {'÷ np.memmap':>12}")
    for name in LTM_WAYS:
        print(f"  {name:30} {got[name] * 1000:9.1f} {got[name] / got['np.memmap']:12.2f}")
    print(f"  goal: <= 1.0 x np.memmap; policy row: resident bytes max {got['resident max']} <= budget "
          f"{got['budget']} ({got['resident max'] >> 20} of {got['budget'] >> 20} MiB, read after every step); "
          f"cgroup peak {peak >> 20} MiB of {got['limit'] >> 20} MiB limit")


LTM_WAYS = ("np.memmap", "clean+async Evictable", "policy plan TiledEvictable")


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
    # The policy row's weights, all layers one after the other, seeded into a file below. It
    # and each layer's primary wrap NumPy's memory: a freed buffer of the library's own would
    # stay among its few recycled host buffers, charged to the cgroup when the baseline is
    # read, and raise the limit.
    seed_view = np.empty(layers * n, dtype=np.float32)
    for k, path in enumerate(paths):
        w = rng.standard_normal((size, size), dtype=np.float32) / np.float32(np.sqrt(size))
        w.tofile(path)
        seed_view[k * n:(k + 1) * n] = w.reshape(-1)
        # (`w` stays alive until the eviction has written it.)
        ev = sw.Evictable(sw.CPU(n, w.ctypes.data, dtype=F32), sw.FileBacked(dtype=F32), retain_clean=True)
        ev.evict()
        stack.append(ev)
        del w
    # Layer k is tile (k,) of one TiledEvictable seeded from a file; no tile is on primary
    # until a promote, and at most `budget` bytes ever.
    seed_file = sw.FileBacked(dtype=F32)
    seed = sw.CPU(layers * n, seed_view.ctypes.data, dtype=F32)
    sw.move(sw.Tensor(seed, 0, sw.Layout.canonical(sw.Shape(layers * n))), seed_file)  # releases `seed`
    del seed_view
    tile_bytes = n * 4
    budget = 2 * tile_bytes  # the layer multiplied and the one prefetched
    tiled = sw.TiledEvictable(sw.CPU(0, dtype=F32), seed_file, (layers,), (n,), retain_clean=True,
                              residency_policy=sw.ResidencyPolicy(budget))
    # Nothing of the weights stays cached: written back, then dropped from the page cache
    # (the memmaps' files, and every FileBacked file of this process: STRIDEWEAVE_FILEBACKED_PARENT
    # is `tmp`, so those are the evicted layers' tiers and the tiles' slab).
    os.sync()
    for where, _, names in os.walk(tmp):
        for name in names:
            fd = os.open(os.path.join(where, name), os.O_RDONLY)
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
        return stream_arrays(x0, maps)

    def pass_clean_async() -> np.ndarray:
        return stream_clean_async(x0, stack, size)

    full = sw.Tensor(tiled, 0, sw.Layout.canonical(sw.Shape(layers * n)))
    plan = tiled.residency_plan([sw.TileSet([(k,)]) for k in range(layers)])
    destination = sw.CPU(n, dtype=F32)  # the projected layer, reused by every step
    weights = flat_view(destination, n).reshape(size, size)
    resident_max = 0

    def check_resident() -> None:
        """The carrier's resident bytes, read through the public API (its tiles on primary);
        past the budget is a failure, not a figure. (A pending prefetch's fresh tile is not
        visible here; the cgroup's peak covers it.)"""
        nonlocal resident_max
        resident = len(tiled.primary_tiles) * tile_bytes
        assert resident <= budget, f"resident bytes {resident} above the residency policy's budget {budget}"
        resident_max = max(resident_max, resident)

    def pass_policy() -> np.ndarray:
        x = x0
        with sw.no_grad():  # a projection of a Float32 tensor records no graph
            for k, _ in enumerate(plan):  # step k resident, step k + 1 on its way
                check_resident()
                tiled.project(full, [[k]], destination).wait()
                x = np.tanh(x @ weights)
                check_resident()
        return x

    ways = {"np.memmap": pass_memmap, "clean+async Evictable": pass_clean_async,
            "policy plan TiledEvictable": pass_policy}
    assert tuple(ways) == LTM_WAYS
    expected = pass_memmap()
    assert np.allclose(pass_clean_async(), expected, rtol=1e-4, atol=1e-5)
    assert np.allclose(pass_policy(), expected, rtol=1e-4, atol=1e-5)
    best = {name: float("inf") for name in ways}
    for _ in range(passes):
        for name, run in ways.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    del weights
    for ev in stack:
        ev.release()
    tiled.release()
    destination.release()
    print(json.dumps({**best, "limit": limit, "baseline": baseline, "budget": budget,
                      "resident max": resident_max}))


if __name__ == "__main__":
    import sys
    if len(sys.argv) > 1 and sys.argv[1] == "--ltm-child":
        c, lf, uf, pf, t, *rest = sys.argv[2:]
        ltm_child(c, lf, uf, pf, t, *(int(v) for v in rest))
    else:
        main()
