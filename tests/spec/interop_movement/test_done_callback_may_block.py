"""A done-callback may block, even on a move of its own (issue 22 item 3; README: handles).

A callback runs on the thread that completes the handle; when that is an engine copy thread,
it runs on the engine's wait lane instead, so a blocking move inside it never waits for the
copy lane it occupies. With `STRIDEWEAVE_WORKERS=1` (one copy thread) a callback doing a
blocking CPU -> FileBacked move larger than the inline limit used to hang forever.

Each scenario runs in a fresh interpreter (the setting is read once at engine start); the
test fails on the subprocess timeout, never on a timed assertion."""
import os
import subprocess
import sys
import textwrap

BOUND = 120  # seconds; a safety net against hangs, never a speed requirement

SCRIPT = """
import sys, threading
import strideweave as sw

n = 1 << 15  # above the inline limit (16 Ki slots): the copies run on the engine
src = sw.Tensor(sw.CPU(n), 0, sw.Layout(sw.Shape([n]), sw.Stride([1])))
finished = threading.Event()
moved = []

def callback(handle):
    try:
        first = handle.wait()
        moved.append(sw.move(first, sw.FileBacked(dtype=sw.DType.Float32)))
        # And once more, through move_async(...).wait() on the same thread.
        moved.append(sw.move_async(moved[0], sw.CPU(n)).wait())
    finally:
        finished.set()

handle = sw.move_async(src, sw.CPU(n))
handle.add_done_callback(callback)
handle.wait()
finished.wait()
assert len(moved) == 2, moved
assert type(moved[0].carrier).__name__ == "FileBacked"
assert type(moved[1].carrier).__name__ == "CPU"
print("ok")
"""


def test_a_done_callback_doing_a_blocking_bulk_move_completes_with_one_worker():
    env = dict(os.environ, STRIDEWEAVE_WORKERS="1")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], env=env, capture_output=True,
                          text=True, timeout=BOUND)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.stdout.strip() == "ok"
