"""Beyond the spec (closest: docs/spec/interop-movement.md), the engine's
thread bound (issue 11, item 8): a burst of moves stays within the worker limit while a
provider completion blocks one worker, and a bad STRIDEWEAVE_WORKERS setting is refused at
import, naming it. No requirement bounds the engine's threads.

Each scenario runs in a fresh interpreter (subprocess), because the setting is read once at
engine start."""
import json
import os
import subprocess
import sys

import pytest

from fresh_interpreter import GATED_PROVIDER, run_script

BOUND = 120  # seconds; a safety net against hangs, never a speed requirement

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc and fork")
BURST = GATED_PROVIDER + """
import json, os, sys, threading

def engine_threads():
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:
            pass
    return sum(1 for n in names if n.startswith(("sw-", "strideweave")))

burst_handles = []
burst_submitted = threading.Event()
gate = threading.Event()

def wait_for_the_burst():
    # Runs inside the provider's wait(), on an engine thread: it blocks until every move of
    # the burst is done, so the burst must progress while this wait holds its thread.
    burst_submitted.wait()
    for h in burst_handles:
        h.wait()
    gate.set()

gated_slab(gate, before=wait_for_the_burst)
blocked = gated_move([1.0, 2.0])
peaks = []
n = int(sys.argv[1])

def submit_burst(count):
    # Four submitting threads: the bound holds however the submits interleave.
    peak = 0
    for k in range(count):
        c = sw.CPU(4)
        burst_handles.append(sw.move_async(sw.Tensor(c, 0, sw.Layout(sw.Shape([4]), sw.Stride([1]))), sw.CPU(4)))
        if k % 500 == 0:
            peak = max(peak, engine_threads())
    peaks.append(peak)

submitters = [threading.Thread(target=submit_burst, args=(n // 4,)) for _ in range(4)]
for th in submitters:
    th.start()
for th in submitters:
    th.join()
peak = max(peaks + [engine_threads()])
burst_submitted.set()
print(json.dumps({"result": blocked.wait().tolist(), "peak": max(peak, engine_threads()),
                  "all_done": all(h.done for h in burst_handles)}))
"""


@pytest.mark.parametrize("workers", ["1", "3", None])
def test_a_burst_stays_within_the_worker_limit_while_a_completion_blocks(workers):
    report = json.loads(run_script(BURST, 20000, env={"STRIDEWEAVE_WORKERS": workers}))
    assert report["result"] == [1.0, 2.0] and report["all_done"]
    copy_limit = int(workers) if workers else 8  # the default is at most 8 (README)
    assert report["peak"] <= copy_limit + 1  # + the one wait thread the blocked completion needs


@pytest.mark.parametrize("value", ["0", "-2", "many", "1.5"])
def test_a_bad_worker_setting_is_refused_at_import_with_its_name(value):
    done = subprocess.run([sys.executable, "-c", "import strideweave"], capture_output=True, text=True,
                          env=dict(os.environ, STRIDEWEAVE_WORKERS=value), timeout=BOUND)
    assert done.returncode != 0
    assert "ValueError" in done.stderr and "STRIDEWEAVE_WORKERS" in done.stderr and repr(value) in done.stderr
