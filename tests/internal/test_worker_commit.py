"""A built-in move run on an engine worker is committed there without the GIL (issue 10).

The main thread keeps the GIL for as long as it spins (the switch interval is set far beyond
the spin), polling `handle.done`, a native read that never releases it. A commit that needed
the GIL could not happen before the spin ends; one that does not completes meanwhile. The
spin's limit is no speed bound: a commit that needs the GIL never completes during it, so the
limit only turns that case into a failure instead of a hang (HANG_GUARD_SECONDS). The Python
commit path (an active profiler records the move) is the control: it needs the GIL, so the
handle stays pending for the whole spin, however long the spin lasts.
"""
import sys
import time

import numpy as np

import strideweave as sw
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor

N = 1 << 16
HANG_GUARD_SECONDS = 60.0


def flat(n):
    return Layout(Shape([n]), Stride([1]))


def submit_and_spin(submit, seconds):
    """Submit (`submit()` returns a handle), then hold the GIL (no blocking call, a switch
    interval far beyond `seconds`, set before the submission so the worker's wait for the GIL
    uses it too) until the handle is done or `seconds` pass. Returns (handle, done)."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(10 * HANG_GUARD_SECONDS)
    try:
        handle = submit()
        end = time.perf_counter() + seconds
        while not handle.done and time.perf_counter() < end:
            pass
        return handle, handle.done
    finally:
        sys.setswitchinterval(saved)


def source():
    c = CPU(N)
    np.from_dlpack(Tensor(c, 0, flat(N)))[:] = np.arange(N, dtype=np.float32)
    return Tensor(c, 0, flat(N))


def test_the_worker_commits_without_the_gil():
    for destination in (CPU(N), FileBacked(dtype=sw.DType.Float32)):
        t = source()
        handle, done = submit_and_spin(lambda: sw.move_async(t, destination), HANG_GUARD_SECONDS)
        assert done, "the commit waited for the GIL"
        out = handle.wait()
        assert out.carrier is destination and t.carrier.is_released()
        assert handle.bytes_done == handle.bytes_total == 4 * N
        destination.release()  # unclaimed


def test_a_profiled_move_commits_in_python_with_the_gil():
    t = source()
    with sw.profile():
        handle, done = submit_and_spin(lambda: sw.move_async(t, CPU(N)), 0.5)
        assert not done  # its commit records the profiling event, with the GIL (a window, not a bound)
        handle.wait()
