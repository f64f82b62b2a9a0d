"""Moves between carriers against NumPy doing the same bytes, side by side (no assertions).

    .venv/bin/python benches/bench_move.py [--quick]

Build with `make build` (maturin --release) first. `--quick` runs 16 MiB only (32 MiB for move_async, 16 for the
overlap), fewer repeats: it checks that every row runs (make test), its figures are rough.

Issue 5 (blocking `sw.move`, grad mode off), at 16 MiB and 256 MiB of Float32 payload:
  CPU→FileBacked     fresh FileBacked + move          vs  ndarray.tofile(fresh path)
  FileBacked→CPU     fresh CPU(empty=True) + move     vs  np.fromfile(path)
  FileBacked→CPU warm  move into a warm CPU carrier   vs  f.readinto(warm array)
  CPU→CPU bulk       move into a warm CPU carrier     vs  np.copyto(warm array, src)
                     (the elementwise fallback over `[n]:[1]`, run in Rust on the engine)
  fallback, gapped   hierarchical `[[256, 4], r]:[[1, 320], 1280]` (runs of 256 slots,
                     64-slot holes; payload = the addressed slots), CPU→CPU into a warm
                     carrier, vs np.copyto between the same as_strided views
  fallback, stride 2 `[n]:[2]` (every other slot), same comparison
Files live in the FileBacked directory (same filesystem for both sides) and are written
to the page cache; sources are filled before the clock starts. A fresh destination comes
from each side's allocator: from 32 MiB both map new memory (faulted in by the copy, huge
pages on both sides); below it both reuse a freed heap block of glibc's when it has one,
which NumPy's repeated fromfile always finds, while our repetitions also allocate and free
a fresh 16 MiB source each, after which glibc sometimes returns the top of its heap to the
kernel and our destination is faulted in again. The warm row takes the allocator out. A move releases its source and
frees it (unmaps the buffer, closes the file) on an engine worker after the move returns;
NumPy's cleanup does that work synchronously, outside the clock, so every repetition waits
for the engine to be idle before its clock starts. Each figure is the best of the repeats;
"ratio" is NumPy time / strideweave time (≥ 1.0 means strideweave is faster; issue 5's
goals: ≥ 0.9 bulk, ≥ 1.0 fallback; issue 10's: ≥ 1.0 bulk at 256 MiB).

Issue 6 (`sw.move_async`):
  return vs completion   256 MiB CPU→CPU, CPU→FileBacked, FileBacked→CPU: time until
                         move_async returns, on the caller's clock and its CPU clock (issue 10's
                         goal: < 50 µs), best of the repeats, against the time until wait()
                         returns; each after one small move_async of the same pair (warm) and
                         straight after the 256 MiB fill (cold, for comparison); for scale,
                         np.empty(1) and waking a thread asleep in Event.wait() (what handing
                         the copy to a sleeping engine worker costs) measured the same way
  small-move overhead    1024-element CPU→CPU moves of fresh sources into one reused destination,
                         µs per blocking move, grad off and on, against `a.copy()` and against
                         NumPy doing the same work (`np.copyto` from fresh filled arrays into
                         one reused array)
  overlap                N = 2, 4 move_async in flight at once (submit all, then wait all)
                         against the same N blocking moves one after another, CPU→FileBacked
                         and FileBacked→CPU, 64 MiB each; and one move_async overlapping Python
                         arithmetic on the caller's thread (sum of the two alone / overlapped)

Issue 10 (the general move request, `_native.MoveRequest`):
  plain subclass /       1024-element moves from a user's CPU subclass that overrides nothing
  hooked subclass /      (served natively once its route is resolved, issue 21), from one that
  general request        overrides `_release` (native too, the hook called from Rust), and from
                         one that overrides `get_value` (the general request), grad off and on, against
                         `a.copy()` (the goal's reference) and against NumPy doing the same
                         work: `np.copyto` from fresh filled arrays into fresh `np.zeros`,
                         since each move's source and destination are fresh memory too; the
                         plain subclass also into one reused destination, as the small-move
                         row moves, so that the two rows differ only in the source's class
"""
from __future__ import annotations

import gc
import itertools
import os

# OpenBLAS worker threads spin on this 2-core class of machine and steal the CPU our engine
# threads need; nothing here uses BLAS. Must be set before NumPy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import statistics
import sys
import threading
import time
from typing import Any, Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

import strideweave as sw
from strideweave import _native
from strideweave.carriers.file_backed import filebacked_directory
from strideweave.carriers.move_handle import INLINE_SLOTS

MiB = 1 << 20
F32 = sw.DType.Float32
_paths = itertools.count()


def flat(n: int) -> sw.Layout:
    return sw.Layout(sw.Shape(n), sw.Stride(1))


def cpu_filled(values: np.ndarray) -> sw.CPU:
    """A CPU Float32 carrier holding `values` (written through a DLPack view, no Python loop)."""
    carrier = sw.CPU(values.size, empty=True)
    np.from_dlpack(sw.Tensor(carrier, 0, flat(values.size)))[:] = values
    return carrier


def view(carrier: sw.Carrier) -> np.ndarray:
    return np.from_dlpack(sw.Tensor(carrier, 0, flat(carrier.size())))


def numpy_path() -> str:
    return str(filebacked_directory() / f"numpy-{os.getpid()}-{next(_paths)}.bin")


def timed(run: Callable[[Any], Any], setup: Callable[[], Any] = lambda: None,
          cleanup: Callable[[Any, Any], None] = lambda state, out: None, repeats: int = 5) -> float:
    """Best wall time of `run(setup())` over `repeats` (setup and cleanup not timed)."""
    best = float("inf")
    for _ in range(repeats):
        state = setup()
        engine_idle()
        start = time.perf_counter()
        out = run(state)
        elapsed = time.perf_counter() - start
        cleanup(state, out)
        best = min(best, elapsed)
    return best


def engine_idle() -> None:
    """Wait until the engine has finished the frees earlier releases queued (see the module
    docs), then collect garbage: nothing left over competes with the next timed run."""
    _native.engine_quiesce(30.0)
    gc.collect()


def row(label: str, nbytes: int, ours: float, theirs: float, their_name: str) -> None:
    gbs = lambda t: nbytes / t / 1e9  # noqa: E731
    print(f"  {label:<22} ours {ours * 1e3:8.2f} ms ({gbs(ours):5.2f} GB/s)   "
          f"{their_name:<9} {theirs * 1e3:8.2f} ms ({gbs(theirs):5.2f} GB/s)   ratio {theirs / ours:5.2f}")


# ----- issue 5 --------------------------------------------------------------------------------

def bench_bulk(nbytes: int, repeats: int) -> None:
    n = nbytes // 4
    data = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    lay = flat(n)
    print(f" {nbytes // MiB} MiB ({n} Float32)")

    # CPU -> FileBacked vs ndarray.tofile
    def ours_to_file(t: sw.Tensor) -> sw.Tensor:
        return sw.move(t, sw.FileBacked(dtype=F32))

    ours = timed(ours_to_file, lambda: sw.Tensor(cpu_filled(data), 0, lay),
                 lambda s, out: out.carrier.release(), repeats)

    def np_to_file(path: str) -> None:
        data.tofile(path)

    theirs = timed(np_to_file, numpy_path, lambda path, out: os.unlink(path), repeats)
    row("CPU→FileBacked", nbytes, ours, theirs, "tofile")

    # FileBacked -> CPU vs np.fromfile
    def file_source() -> sw.Tensor:
        return sw.move(sw.Tensor(cpu_filled(data), 0, lay), sw.FileBacked(dtype=F32))

    def ours_from_file(t: sw.Tensor) -> sw.Tensor:
        return sw.move(t, sw.CPU(n, empty=True))

    checked: list[bool] = []

    def check_and_release(state: Any, out: sw.Tensor) -> None:
        if not checked:
            assert np.array_equal(view(out.carrier), data)
            checked.append(True)
        out.carrier.release()

    ours = timed(ours_from_file, file_source, check_and_release, repeats)
    path = numpy_path()
    data.tofile(path)
    theirs = timed(lambda _: np.fromfile(path, dtype=np.float32), repeats=repeats)
    row("FileBacked→CPU", nbytes, ours, theirs, "fromfile")

    # The same into a warm destination on both sides: an existing CPU carrier vs f.readinto
    # of an existing array (no allocator in the comparison; see the module docs).
    dst = sw.CPU(n)
    sw.move(file_source(), dst)  # faults the destination's pages in
    ours = timed(lambda t: sw.move(t, dst), file_source, repeats=repeats)
    assert np.array_equal(view(dst), data)
    dst.release()
    warm = np.zeros_like(data)

    def np_read_into(_: Any) -> None:
        with open(path, "rb", buffering=0) as f:
            f.readinto(warm)  # type: ignore[arg-type]

    theirs = timed(np_read_into, repeats=repeats)
    assert np.array_equal(warm, data)
    del warm
    os.unlink(path)
    row("FileBacked→CPU warm", nbytes, ours, theirs, "readinto")

    # CPU -> CPU bulk into a warm destination vs np.copyto into a warm array
    dst = sw.CPU(n)
    sw.move(sw.Tensor(cpu_filled(data), 0, lay), dst)  # faults the destination's pages in
    ours = timed(lambda t: sw.move(t, dst), lambda: sw.Tensor(cpu_filled(data), 0, lay), repeats=repeats)
    assert np.array_equal(view(dst), data)
    dst.release()
    warm = np.empty_like(data)
    np.copyto(warm, data)
    theirs = timed(lambda _: np.copyto(warm, data), repeats=repeats)
    row("CPU→CPU bulk", nbytes, ours, theirs, "copyto")
    del warm
    # A move releases its source, which NumPy's copies never pay for: show that share.
    cpu_release = timed(lambda c: c.release(), lambda: cpu_filled(data), repeats=repeats)
    file_release = timed(lambda t: t.carrier.release(), file_source, repeats=repeats)
    print(f"  (of which releasing the source: CPU {cpu_release * 1e3:.2f} ms, "
          f"FileBacked {file_release * 1e3:.2f} ms, timed alone)")


def bench_gapped(nbytes: int, repeats: int) -> None:
    n = nbytes // 4
    rng = np.random.default_rng(1)

    # Runs of 256 slots, four per row with 64-slot holes, rows 1280 slots apart.
    rows = n // 1024
    lay = sw.Layout(sw.Shape([[256, 4], rows]), sw.Stride([[1, 320], 1280]))
    np_shape, np_strides = (rows, 4, 256), (1280 * 4, 320 * 4, 4)
    _gapped_row("gapped [[256,4],r]", lay, np_shape, np_strides, rng, repeats)

    # Every other slot: a one-slot run per element, the worst case for a gather.
    lay = sw.Layout(sw.Shape(n), sw.Stride(2))
    _gapped_row("gapped [n]:[2]", lay, (n,), (8,), rng, repeats)


def _gapped_row(label: str, lay: sw.Layout, np_shape: tuple, np_strides: tuple,
                rng: np.random.Generator, repeats: int) -> None:
    cosize, payload = lay.cosize, lay.size * 4
    data = rng.standard_normal(cosize, dtype=np.float32)
    dst = sw.CPU(cosize)
    sw.move(sw.Tensor(cpu_filled(data), 0, lay), dst)  # warm destination
    view(dst)[:] = 0
    ours = timed(lambda t: sw.move(t, dst), lambda: sw.Tensor(cpu_filled(data), 0, lay), repeats=repeats)
    got = view(dst)
    src_v = as_strided(data, np_shape, np_strides)
    assert np.array_equal(as_strided(got, np_shape, np_strides), src_v)
    dst.release()
    warm = np.zeros(cosize, dtype=np.float32)
    dst_v = as_strided(warm, np_shape, np_strides)
    np.copyto(dst_v, src_v)
    theirs = timed(lambda _: np.copyto(dst_v, src_v), repeats=repeats)
    row(label, payload, ours, theirs, "copyto")


# ----- issue 6 --------------------------------------------------------------------------------

def bench_async(repeats: int, nbytes: int = 256 * MiB) -> None:
    n = nbytes // 4
    data = np.random.default_rng(2).standard_normal(n, dtype=np.float32)
    # The smallest move that still runs on the engine (larger than the caller-thread limit):
    # one of the same pair first, so the figure is the request path, not first-call or
    # cold-cache costs of the interpreter after the 256 MiB fill evicted everything.
    warm_n = INLINE_SLOTS + 1

    def cpu_source(count: int) -> sw.Tensor:
        return sw.Tensor(cpu_filled(data[:count]), 0, flat(count))

    def file_source(count: int) -> sw.Tensor:
        return sw.move(cpu_source(count), sw.FileBacked(dtype=F32))

    pairs = (("CPU→CPU", cpu_source, lambda count: sw.CPU(count, empty=True)),
             ("CPU→FileBacked", cpu_source, lambda count: sw.FileBacked(dtype=F32)),
             ("FileBacked→CPU", file_source, lambda count: sw.CPU(count, empty=True)))
    print(f"  move_async of {nbytes // MiB} MiB returns (best of {repeats}, caller wall / caller CPU time; goal < 50 µs):")
    for label, make_source, make_destination in pairs:
        runs: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": []}
        completes, done_at_return = [], 0
        for k in range(2 * repeats):
            state = "warm" if k % 2 else "cold"
            t, d = make_source(n), make_destination(n)
            engine_idle()
            if state == "warm":
                warm = make_source(warm_n)
                sw.move_async(warm, make_destination(warm_n)).wait().carrier.release()
            start, cpu_start = time.perf_counter(), time.thread_time()
            handle = sw.move_async(t, d)
            returned, cpu_returned = time.perf_counter(), time.thread_time()
            was_done = handle.done
            out = handle.wait()
            finished = time.perf_counter()
            runs[state].append((returned - start, cpu_returned - cpu_start))
            if state == "warm":
                completes.append(finished - start)
                done_at_return += was_done
            out.carrier.release()

        def figures(state: str) -> str:
            walls, cpus = [w for w, _ in runs[state]], [c for _, c in runs[state]]
            return (f"{min(walls) * 1e6:6.0f} / {min(cpus) * 1e6:4.0f} µs "
                    f"(median {statistics.median(walls) * 1e6:.0f} / {statistics.median(cpus) * 1e6:.0f})")
        print(f"    {label:<15} {figures('warm')}; right after the fill, nothing warmed: {figures('cold')}")
        print(f"    {'':<15} completes in {min(completes) * 1e3:.1f} ms; return/completion "
              f"{min(w for w, _ in runs['warm']) / min(completes):.5f}; done already at return in "
              f"{done_at_return} of {repeats}")

    bench_cold_reference(data, repeats)

    # Fixed per-request cost: tiny moves, where the copy is negligible, against what a NumPy
    # user pays for the same bytes (`a.copy()`), and against NumPy doing the same work (a fresh
    # filled source copied into one reused destination, as the moves do); grad mode off and on
    # (a recorded move makes its autograd node). Issue 21's goals: <= 4x grad off, <= 10x grad
    # on (issue 10's were 10x and 20x).
    small = 1024
    small_data = np.arange(small, dtype=np.float32)
    dst = sw.CPU(small)
    count = 300 if repeats <= 3 else 2000
    best = small_move_costs(lambda: sw.Tensor(cpu_filled(small_data), 0, flat(small)), lambda: dst, small_data, count,
                            reused_destination=True)
    per_move = best[True]
    for grad in (False, True):
        print(f"  small move (1024 Float32 CPU→CPU, blocking), grad {'on ' if grad else 'off'}: "
              f"{best[grad] * 1e6:6.2f} µs   a.copy() {best['numpy'] * 1e6:5.2f} µs   "
              f"ratio {best[grad] / best['numpy']:5.1f}x (goal <= {10 if grad else 4}x)   "
              f"same work in NumPy (copyto into one reused array) {best['same work'] * 1e6:5.2f} µs, "
              f"ratio {best[grad] / best['same work']:4.1f}x")
    sources = [sw.Tensor(cpu_filled(small_data), 0, flat(small)) for _ in range(count)]
    destinations = [sw.CPU(small, empty=True) for _ in range(count)]
    gc.collect()
    start, cpu_start = time.perf_counter(), time.thread_time()
    handles = [sw.move_async(s, d) for s, d in zip(sources, destinations)]
    per_submit = (time.perf_counter() - start) / count
    per_submit_cpu = (time.thread_time() - cpu_start) / count
    for h in handles:
        h.wait()
    print(f"  small moves (1024 Float32 CPU→CPU): {per_move * 1e6:.1f} µs per blocking move; "
          f"{per_submit * 1e6:.1f} µs per move_async in a burst of {count} "
          f"({per_submit_cpu * 1e6:.1f} µs of it on the caller's CPU)")
    del sources
    gc.collect()


class UserCPU(sw.CPU):
    """A user's CPU subclass that overrides nothing: once its pair's route is resolved, the
    native move serves it as (CPU, CPU) (issue 21)."""


class HookedCPU(sw.CPU):
    """A user's CPU subclass that overrides `_release`, a hook the native move calls itself (at
    the commit): served natively once its route is resolved, the hook called from Rust."""

    def _release(self) -> None:
        super()._release()


class RequestCPU(sw.CPU):
    """A user's CPU subclass that overrides an element hook the native move does not call:
    every move of it is the general request."""

    def get_value(self, i: Any) -> Any:
        return super().get_value(i)


def small_move_costs(make_source: Callable[[], sw.Tensor], make_destination: Callable[[], sw.Carrier],
                     data: np.ndarray, count: int, *, reused_destination: bool = False) -> dict:
    """Best seconds per blocking move of `count` fresh sources, grad off (`False`) and on
    (`True`), per `data.copy()` (`"numpy"`: the same bytes a NumPy user copies, from and into
    memory the loop keeps hot), and per `np.copyto` of `count` fresh filled arrays into `count`
    fresh `np.zeros` (`"same work"`: NumPy doing what the moves do, memory as cold), or into
    one reused array when the moves reuse one destination (`reused_destination`)."""
    best = {"numpy": float("inf"), "same work": float("inf"), False: float("inf"), True: float("inf")}
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(count):
            data.copy()
        best["numpy"] = min(best["numpy"], (time.perf_counter() - start) / count)
        reused = np.zeros_like(data)
        arrays = [(data.copy(), reused if reused_destination else np.zeros_like(data)) for _ in range(count)]
        start = time.perf_counter()
        for source_array, destination_array in arrays:
            np.copyto(destination_array, source_array)
        best["same work"] = min(best["same work"], (time.perf_counter() - start) / count)
        del arrays
        for grad in (False, True):
            pairs = [(make_source(), make_destination()) for _ in range(count)]
            sw.set_grad_enabled(grad)
            start = time.perf_counter()
            for source, destination in pairs:
                sw.move(source, destination)
            best[grad] = min(best[grad], (time.perf_counter() - start) / count)
            sw.set_grad_enabled(True)
            del pairs
    return best


def bench_general_request(repeats: int) -> None:
    # The per-request cost of the general move request (`_native.MoveRequest`), which every
    # move the native moves do not take runs: user subclasses, hooks, definition routes,
    # profiled moves. Compared with the same bytes through `a.copy()`.
    small = 1024
    small_data = np.arange(small, dtype=np.float32)

    for cls, what, goal in ((UserCPU, "plain subclass UserCPU→CPU", " (goal <= 6x)"),
                            (HookedCPU, "hooked subclass (_release) HookedCPU→CPU", ""),
                            (RequestCPU, "general request RequestCPU→CPU", "")):
        def user_source() -> sw.Tensor:
            c = cls(small)
            np.from_dlpack(sw.Tensor(c, 0, flat(small)))[:] = small_data
            return sw.Tensor(c, 0, flat(small))

        best = small_move_costs(user_source, lambda: sw.CPU(small), small_data, 300 if repeats <= 3 else 2000)
        for grad in (False, True):
            print(f"  {what} (1024 Float32, blocking), grad {'on ' if grad else 'off'}: "
                  f"{best[grad] * 1e6:6.2f} µs   a.copy() {best['numpy'] * 1e6:5.2f} µs   "
                  f"ratio {best[grad] / best['numpy']:5.1f}x{goal if not grad else ''}   "
                  f"same work in NumPy (copyto into fresh zeros) {best['same work'] * 1e6:5.2f} µs, "
                  f"ratio {best[grad] / best['same work']:4.1f}x")
        if cls is UserCPU:
            # The rows above move into a fresh CPU each time; the built-in "small move" row
            # moves into one destination it reuses. The same here, so the two rows differ only
            # in the source's class.
            reused = sw.CPU(small)
            same = small_move_costs(user_source, lambda: reused, small_data, 300 if repeats <= 3 else 2000,
                                    reused_destination=True)
            print(f"  {what}, into one reused CPU as the small-move row, grad off: "
                  f"{same[False] * 1e6:6.2f} µs   a.copy() {same['numpy'] * 1e6:5.2f} µs   "
                  f"ratio {same[False] / same['numpy']:5.1f}x")
        gc.collect()


def bench_cold_reference(data: np.ndarray, repeats: int) -> None:
    """What "right after the fill" costs calls that do next to nothing, measured as above
    (warm: the same call made just before; cold: straight after a 256 MiB fill): a trivial
    native call, and the wake-up of a thread asleep in `Event.wait()`, which every move_async
    pays once to hand its copy to a sleeping engine worker. The fill evicts the caches and TLBs
    the interpreter and the kernel run from."""
    fill = np.empty_like(data)

    def sleeper() -> threading.Event:
        event = threading.Event()
        threading.Thread(target=event.wait, daemon=True).start()
        while not event._cond._waiters:  # type: ignore[attr-defined]  # until it is asleep
            time.sleep(0.001)
        return event

    def timed_call(prepare: Callable[[], Callable[[], Any]], cold: bool) -> float:
        call = prepare()
        if cold:
            np.copyto(fill, data)
        gc.collect()
        if not cold:
            prepare()()
        start = time.perf_counter()
        call()
        return time.perf_counter() - start

    cases = (("np.empty(1)", lambda: lambda: np.empty(1)), ("waking a sleeping thread", lambda: sleeper().set))
    figures = []
    for label, prepare in cases:
        best = {cold: min(timed_call(prepare, cold) for _ in range(repeats)) for cold in (False, True)}
        figures.append(f"{label} {best[False] * 1e6:.0f} / {best[True] * 1e6:.0f} µs")
    print(f"    for scale, warm / right after the fill (best of {repeats}): {'; '.join(figures)}")


def bench_overlap(repeats: int, nbytes: int = 64 * MiB) -> None:
    n = nbytes // 4
    data = np.random.default_rng(3).standard_normal(n, dtype=np.float32)
    lay = flat(n)

    def release(state: Any, outs: list) -> None:
        for o in outs:
            o.carrier.release()

    for count in (2, 4):
        def sources() -> list:
            return [sw.Tensor(cpu_filled(data), 0, lay) for _ in range(count)]

        def file_sources() -> list:
            return [sw.move(t, sw.FileBacked(dtype=F32)) for t in sources()]

        for label, make, dest in (("CPU→FileBacked", sources, lambda: sw.FileBacked(dtype=F32)),
                                  ("FileBacked→CPU", file_sources, lambda: sw.CPU(n, empty=True))):
            def sequential(ts: list) -> list:
                return [sw.move(t, dest()) for t in ts]

            def concurrent(ts: list) -> list:
                handles = [sw.move_async(t, dest()) for t in ts]
                return [h.wait() for h in handles]

            seq = timed(sequential, make, release, repeats)
            conc = timed(concurrent, make, release, repeats)
            print(f"  {count} x {nbytes // MiB} MiB {label}: one after another {seq * 1e3:7.1f} ms, "
                  f"all in flight {conc * 1e3:7.1f} ms, speed-up {seq / conc:4.2f}x")

    # The caller keeps computing while a move is in flight: cache-resident Python arithmetic,
    # so the two compete for cores and not for memory bandwidth.
    def compute() -> None:
        total = 0
        for k in range(1_500_000):
            total += k * k

    compute_alone = timed(lambda _: compute(), repeats=repeats)
    move_alone = timed(lambda t: sw.move(t, sw.FileBacked(dtype=F32)),
                       lambda: sw.Tensor(cpu_filled(data), 0, lay), lambda s, out: out.carrier.release(), repeats)

    def overlapped(t: sw.Tensor) -> sw.Tensor:
        handle = sw.move_async(t, sw.FileBacked(dtype=F32))
        compute()
        return handle.wait()

    both = timed(overlapped, lambda: sw.Tensor(cpu_filled(data), 0, lay),
                 lambda s, out: out.carrier.release(), repeats)
    print(f"  {nbytes // MiB} MiB CPU→FileBacked move_async + caller compute: move {move_alone * 1e3:.1f} ms, "
          f"compute {compute_alone * 1e3:.1f} ms, both overlapped {both * 1e3:.1f} ms "
          f"(sum / overlapped {(move_alone + compute_alone) / both:4.2f}x)")


def main(quick: bool) -> None:
    repeats = 3 if quick else 5
    sizes = [16 * MiB] if quick else [16 * MiB, 256 * MiB]
    print(f"bench_move: best of {repeats}; ratio = NumPy time / strideweave time "
          f"(≥ 1 means strideweave is faster); os.cpu_count() = {os.cpu_count()}")
    with sw.no_grad():
        print("issue 5: blocking moves")
        for nbytes in sizes:
            bench_bulk(nbytes, repeats)
            bench_gapped(nbytes, repeats)
            gc.collect()
        print("issue 6: move_async")
        # --quick (make test's bench-quick) only checks that every row still runs: smaller.
        bench_async(repeats, 32 * MiB if quick else 256 * MiB)
        bench_overlap(repeats, 16 * MiB if quick else 64 * MiB)
        print("issue 10: the general move request")
        bench_general_request(repeats)


if __name__ == "__main__":
    main("--quick" in sys.argv[1:])
