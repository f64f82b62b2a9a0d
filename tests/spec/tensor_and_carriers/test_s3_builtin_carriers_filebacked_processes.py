"""docs/spec/tensor-and-carriers.md §3 Built-in carriers, FileBacked's
per-process directory across processes (issue 11, items 6-7): a forked child keeps the
parent's files, and a later process reclaims a killed process's directory but not a live one's.

Each scenario runs in a fresh interpreter (subprocess): a fork or a SIGKILL must not disturb
the pytest process. Waits carry generous bounds only so that a broken build fails instead of
hanging; nothing here measures speed."""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from fresh_interpreter import run_script

BOUND = 120  # seconds; a safety net against hangs, never a speed requirement

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc and fork")


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
