"""Running a test script in a fresh interpreter (for fork, SIGKILL and settings
read once at engine start), and the gated-provider script several such tests start from."""
import os
import subprocess
import sys
import textwrap

BOUND = 120  # seconds; a safety net against hangs, never a speed requirement


def run_script(script, *args, env=None):
    """Run `script` in a fresh interpreter; `env` entries set to None are removed."""
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        full_env.pop(key, None)
        if value is not None:
            full_env[key] = value
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
                          env=full_env, capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


# A provider move whose completion stays pending until `gate` is set (public extension API).
GATED_PROVIDER = """
import threading
import strideweave as sw
from strideweave import (CarrierDefinition, PreparedTransfer, StorageProvider, TransferProvider,
                         TransferRoute, register_carrier_definition)

F32 = sw.DType.Float32
Slab = type("Slab", (sw.Carrier,), {})


def _allocate(c, n):
    c.cells = [0.0] * n


def _release(c):
    c.cells = []


def _write(c, i, v):
    c.cells[i] = v


class GatedCompletion:
    def __init__(self, gate, before=None):
        self.gate, self.before = gate, before

    @property
    def done(self):
        return self.gate.is_set()

    def wait(self):
        if self.before is not None:
            self.before()
        self.gate.wait()


def gated_slab(gate, before=None):
    def prepare(request):
        def submit():
            for k in range(request.physical_span):
                request.destination[k] = request.tensor.carrier.cells[request.offset + k]
            return GatedCompletion(gate, before)
        return PreparedTransfer(submit)

    storage = StorageProvider(lambda c, d: d is F32, lambda c: len(c.cells), _allocate, _release,
                              lambda c, i: c.cells[i], _write, elementwise_fallback=True)
    route = TransferRoute(Slab, sw.CPU, "test.gated", TransferProvider(prepare))
    register_carrier_definition(Slab, CarrierDefinition(storage, transfers=[route]))


def gated_move(values):
    c = Slab(len(values), dtype=F32)
    for i, v in enumerate(values):
        c[i] = v
    t = sw.Tensor(c, 0, sw.Layout(sw.Shape([len(values)]), sw.Stride([1])))
    with sw.no_grad():
        return sw.move_async(t, sw.CPU(len(values)))
"""
