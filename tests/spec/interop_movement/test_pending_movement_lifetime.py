"""docs/spec/interop-movement.md, "Requirement: Pending movement preserves lifetime through completion",
up to interpreter exit: a process that moves data and exits at once must exit cleanly.

An engine worker still finishing a job (a move's commit, the deferred close of a file) while
the interpreter finalizes used to be stopped inside CPython and abort the process ("Fatal
Python error: Aborted", sometimes with a bus error): 2 of 60 such runs on a loaded machine.
The package now lets the engine go quiet at exit (an atexit hook; the native call it makes is
tested in tests/internal/test_engine.py)."""
import concurrent.futures
import gc
import subprocess
import sys
import threading
import time

from gated_moves import GateCompletion, start


def wait_until(predicate, seconds=60.0):
    """Poll a condition another thread makes true; the deadline is a hang guard, not a bound."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached (hung)")
        time.sleep(0.005)


def accepts_writes(carrier):
    """True once no pending move holds `carrier`: a public write of slot 0 goes through
    (a participant of a pending move refuses it with RuntimeError)."""
    try:
        carrier[0] = 4.0
    except RuntimeError:
        return False
    return True


def test_drop_a_pending_handle():
    completion = GateCompletion()
    t, dest, handle = start([4.0, 5.0], completion)
    source = t.carrier
    held = [handle]
    del handle

    def drop_the_last_reference():
        held.clear()
        gc.collect()

    # The gate opens only after the drop returns, so a drop that waited for the transfer
    # would never return: the join's timeout is a hang guard, not a speed bound.
    dropper = threading.Thread(target=drop_the_last_reference)
    dropper.start()
    dropper.join(60)
    assert not dropper.is_alive(), "dropping the pending handle blocked on its transfer"
    assert not source.is_released()
    completion.gate.set()
    wait_until(source.is_released)
    wait_until(lambda: accepts_writes(dest))
    assert [dest[0], dest[1]] == [4.0, 5.0]


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


NEVER_ENDING_PROVIDER = """
import threading, strideweave as sw
from strideweave import CPU, Carrier, Layout, Shape, Stride, Tensor
from strideweave.carriers.extension import (CarrierDefinition, PreparedTransfer, StorageProvider,
                                            TransferProvider, TransferRoute, register_carrier_definition)
F32 = sw.DType.Float32
class Never:
    done = False
    def wait(self):
        threading.Event().wait()
class Stuck(Carrier): pass
def prepare(request):
    return PreparedTransfer(lambda: Never())
def allocate(c, n): c.cells = [0.0] * n
def release(c): c.cells = []
def read(c, i): return c.cells[i]
def write(c, i, v): c.cells[i] = float(v)
register_carrier_definition(Stuck, CarrierDefinition(StorageProvider(lambda c, d: d is F32, lambda c: len(c.cells), allocate, release, read, write),
    transfers=(TransferRoute(Stuck, CPU, "stuck.to_cpu", TransferProvider(prepare)),)))
t = Tensor(Stuck(2, dtype=F32), 0, Layout(Shape([2]), Stride([1])))
with sw.no_grad():
    h = sw.move_async(t, CPU(2))
print("exiting", flush=True)
"""


def test_a_provider_wait_that_never_ends_does_not_hold_the_exit():
    # The exit hook waits for the engine a bounded time (_engine_exit.EXIT_WAIT_SECONDS), once,
    # so a completion nobody will finish cannot keep the process alive. The timeout below only
    # turns a hang into a failure; it is not a speed goal.
    result = subprocess.run([sys.executable, "-c", NEVER_ENDING_PROVIDER], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-500:]
    assert "exiting" in result.stdout
