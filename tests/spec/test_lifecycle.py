"""Process lifecycle (issue 11, items 6-8): fork, crash leftovers and the engine's thread bound.

Each scenario runs in a fresh interpreter (subprocess): a fork, a SIGKILL or an environment
setting read once at engine start must not disturb the pytest process. The scripts report
through stdout and their exit code. Waits carry generous bounds only so that a broken build
fails instead of hanging; nothing here measures speed.
"""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap

import pytest

BOUND = 120  # seconds; a safety net against hangs, never a speed requirement

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc and fork")


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


# ----- item 6: fork -------------------------------------------------------------------------

def test_a_forked_child_exiting_normally_keeps_the_parents_files(tmp_path):
    out = run_script("""
        import os, sys
        import strideweave as sw
        fb = sw.FileBacked().new_like([1.0, 2.0, 3.0])
        path, directory = fb.path, fb.path.parent
        pid = os.fork()
        if pid == 0:
            child = sw.FileBacked().new_like([4.0])  # the child's own file, in its own directory
            assert child.path.parent != directory
            sys.exit(0)  # a normal exit: atexit handlers and finalizers run in the child
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        print(path.exists(), directory.is_dir(), fb[1])
        fb.release()
        print(path.exists())
    """, env={"STRIDEWEAVE_FILEBACKED_PARENT": str(tmp_path)})
    assert out.split() == ["True", "True", "2.0", "False"]
    # Each process removed its own directory at exit, and only its own.
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".strideweave-filebacked-")]


def test_a_child_releasing_an_inherited_filebacked_keeps_the_parents_file(tmp_path):
    out = run_script("""
        import os
        import strideweave as sw
        fb = sw.FileBacked().new_like([1.0, 2.0])
        pid = os.fork()
        if pid == 0:
            fb.release()
            del fb
            os._exit(0)
        os.waitpid(pid, 0)
        print(fb.path.exists(), fb[0])
    """, env={"STRIDEWEAVE_FILEBACKED_PARENT": str(tmp_path)})
    assert out.split() == ["True", "1.0"]


def test_waiting_on_an_inherited_pending_handle_raises_in_the_child():
    out = run_script(GATED_PROVIDER + """
import os, threading
gate = threading.Event()
gated_slab(gate)
handle = gated_move([1.0, 2.0])
pid = os.fork()
if pid == 0:
    code = 3
    try:
        handle.wait()
        code = 1  # returned: impossible, the work lives in the parent
    except RuntimeError as e:
        code = 0 if "fork" in str(e) and str(os.getpid()) in str(e) else 2
    try:
        handle._join(1.0)
        code = code or 4
    except RuntimeError:
        pass
    os._exit(code)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
gate.set()
print(handle.wait().tolist())
""")
    assert out.split() == ["0", "[1.0,", "2.0]"]


def test_a_handle_done_before_fork_still_answers_in_the_child():
    out = run_script("""
        import os
        import strideweave as sw
        c = sw.CPU(2)
        c[1] = 5.0
        handle = sw.move_async(sw.Tensor(c, 0, sw.Layout(sw.Shape([2]), sw.Stride([1]))), sw.CPU(2))
        handle.wait()
        pid = os.fork()
        if pid == 0:
            os._exit(0 if handle.wait().tolist() == [0.0, 5.0] else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """)
    assert out.split() == ["0"]


# ----- item 7: crash leftovers --------------------------------------------------------------

# Moves a large CPU tensor into a FileBacked, reports the file, then sleeps until killed.
CRASHER = """
    import sys, time
    import strideweave as sw
    n = int(sys.argv[1])
    src = sw.CPU(n, empty=True)
    fb = sw.FileBacked(dtype=sw.DType.Float32)
    handle = sw.move_async(sw.Tensor(src, 0, sw.Layout(sw.Shape([n]), sw.Stride([1]))), fb)
    print(fb.path, flush=True)
    time.sleep(3600)
"""

# Creates a FileBacked (which reclaims dead processes' directories) and lists what is left.
LATER = """
    import json, os, sys
    import strideweave as sw
    fb = sw.FileBacked().new_like([1.0])
    print(json.dumps(sorted(os.listdir(sys.argv[1]))))
"""


def with_pid(name, pid):
    """`name` (.strideweave-filebacked-<boot:8><pidns:16><pid:8><start:16><random:16>, see
    carriers/_filebacked_dir.py) with its creator pid replaced by `pid`."""
    match = re.fullmatch(r"(\.strideweave-filebacked-[0-9a-f]{24})([0-9a-f]{8})([0-9a-f]{32})", name)
    assert match, name
    return f"{match.group(1)}{pid:08x}{match.group(3)}"


def start_crasher(tmp_path, n):
    env = dict(os.environ, STRIDEWEAVE_FILEBACKED_PARENT=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CRASHER), str(n)], env=env,
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line, "the crasher did not start"
    return proc, line


def test_a_later_process_reclaims_a_killed_processes_files_but_not_a_live_ones(tmp_path):
    victim, victim_file = start_crasher(tmp_path, 16 << 20)  # a 64 MiB move
    survivor, survivor_file = start_crasher(tmp_path, 1 << 10)
    try:
        victim.send_signal(signal.SIGKILL)  # while its move may still be running
        victim.wait(BOUND)
        victim_dir = pathlib.Path(victim_file).parent
        survivor_dir = pathlib.Path(survivor_file).parent
        assert victim_dir.is_dir() and os.path.exists(victim_file)  # the crash left them
        # A directory named for the live survivor's pid but another start time was made by an
        # earlier process that had the same pid: that process is dead, so it is reclaimed.
        recycled = tmp_path / with_pid(victim_dir.name, survivor.pid)
        assert recycled.name != victim_dir.name
        recycled.mkdir()
        (recycled / "carrier-0-0.bin").write_bytes(b"x")
        foreign = tmp_path / ".strideweave-filebacked-0123456789abcdef"  # not ours to judge
        foreign.mkdir()

        left = json.loads(run_script(LATER, tmp_path, env={"STRIDEWEAVE_FILEBACKED_PARENT": str(tmp_path)}))
        assert victim_dir.name not in left and not victim_dir.exists()
        assert recycled.name not in left
        assert survivor_dir.is_dir() and os.path.exists(survivor_file)
        assert foreign.is_dir()
        assert survivor.poll() is None  # the live process is untouched
    finally:
        for proc in (victim, survivor):
            if proc.poll() is None:
                proc.kill()
            proc.wait(BOUND)
            proc.stdout.close()


def test_several_processes_reclaiming_at_once_all_succeed(tmp_path):
    victim, victim_file = start_crasher(tmp_path, 1 << 10)
    victim.send_signal(signal.SIGKILL)
    victim.wait(BOUND)
    victim.stdout.close()
    victim_dir = pathlib.Path(victim_file).parent
    for k in range(6):  # more dead directories, so the reclaimers overlap
        (tmp_path / (with_pid(victim_dir.name, 0)[:-1] + str(k))).mkdir()
    env = dict(os.environ, STRIDEWEAVE_FILEBACKED_PARENT=str(tmp_path))
    later = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(LATER), str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for proc in later:
        out, err = proc.communicate(timeout=BOUND)
        assert proc.returncode == 0, err
    # Every dead directory is gone; each reclaimer also removed its own at exit.
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".strideweave-filebacked-")]


# ----- item 8: the engine's thread bound ----------------------------------------------------

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
