"""A process that moves data and exits at once must exit cleanly.

An engine worker still finishing a job (a move's commit, the deferred close of a file) while
the interpreter finalizes used to be stopped inside CPython and abort the process ("Fatal
Python error: Aborted", sometimes with a bus error): 2 of 60 such runs on a loaded machine.
The package now lets the engine go quiet at exit (`_native.engine_quiesce`, via atexit)."""
import concurrent.futures
import subprocess
import sys

SCRIPT = """
import strideweave as sw
n = 1 << 20
t = sw.Tensor(sw.CPU(n), 0, sw.Layout(sw.Shape(n), sw.Stride(1)))
y = sw.move(t, sw.FileBacked(dtype=sw.DType.Float32))
y.carrier.release()
z = sw.move_async(sw.Tensor(sw.CPU(n), 0, sw.Layout(sw.Shape(n), sw.Stride(1))), sw.CPU(n))
"""


def run_once(_):
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", SCRIPT],
                          capture_output=True, text=True, timeout=120)


def test_processes_that_exit_right_after_moving_exit_cleanly():
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run_once, range(24)))
    failures = [(r.returncode, r.stderr[-500:]) for r in results if r.returncode != 0]
    assert not failures, failures


def test_quiesce_checks_its_argument_and_reports_a_quiet_engine():
    import pytest

    from strideweave import _native
    assert _native.engine_quiesce(5.0) is True
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout_seconds"):
            _native.engine_quiesce(bad)
