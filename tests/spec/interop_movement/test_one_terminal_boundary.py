"""docs/spec/interop-movement.md, "Requirement: One asynchronous move publishes at one terminal boundary",
also with a real write failure: FileBacked on a tiny tmpfs that fills up (needs root to mount
the tmpfs; the move runs in a subprocess whose FileBacked directory lives on that tmpfs, so the
failure is the kernel's ENOSPC, not a simulated one)."""
import os
import subprocess
import sys
import tempfile
import textwrap
import threading

import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor

from gated_moves import GateCompletion, start
from racing import accepts_release

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_fail_one_asynchronous_move():
    failure = OSError("device gone")
    completion = GateCompletion(failure=failure)
    t, dest, handle = start([1.0, 2.0], completion)
    source = t.carrier
    completion.gate.set()
    with pytest.raises(OSError) as first:
        handle.wait()
    with pytest.raises(OSError) as second:
        handle.wait()
    assert first.value is failure and second.value is failure
    assert handle.done
    assert not source.is_released() and t.tolist() == [1.0, 2.0]
    t[0] = 7.0  # the source is usable again
    assert accepts_release(source) and accepts_release(dest)  # nothing is left claimed


def test_provider_completion_protocol_violation_is_the_terminal_failure():
    completion = GateCompletion(result="not None")
    t, dest, handle = start([1.0], completion)
    completion.gate.set()
    with pytest.raises(TypeError):
        handle.wait()
    assert not t.carrier.is_released()


def test_a_thousand_concurrent_moves_from_eight_threads():
    n_threads, per_thread = 8, 125
    results = [[] for _ in range(n_threads)]
    errors = []

    def worker(w):
        try:
            pending = []
            for j in range(per_thread):
                c = CPU(16)
                tag = float(w * 1000 + j)
                for k in range(16):
                    c[k] = tag + k / 100
                t = Tensor(c, 0, L([4, 4], [1, 4]))
                dest = CPU(16) if j % 2 else FileBacked(dtype=D.Float32)
                with sw.no_grad():
                    pending.append((tag, c, sw.move_async(t, dest)))
            for tag, c, h in pending:
                r = h.wait()
                results[w].append((tag, c.is_released(), r.tolist()))
                if isinstance(r.carrier, FileBacked):
                    r.carrier.release()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors
    flat = [r for rs in results for r in rs]
    assert len(flat) == 1000
    assert len({tag for tag, _, _ in flat}) == 1000
    for tag, released, values in flat:
        assert released and values == [pytest.approx(tag + k / 100, rel=1e-6) for k in range(16)]


CHILD = textwrap.dedent("""
    import errno, os, sys
    import strideweave as sw
    n = 1 << 18                      # 1 MiB of Float32: larger than the 256 KiB tmpfs
    src = sw.CPU(n)
    for i in (0, 1, n - 1):
        src[i] = float(i + 1)
    t = sw.Tensor(src, 0, sw.Layout(sw.Shape(n), sw.Stride(1)))
    dest = sw.FileBacked(dtype=sw.DType.Float32)
    version = src.version
    for blocking in (True, False):
        try:
            if blocking:
                sw.move(t, dest)
            else:
                sw.move_async(t, dest).wait()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        else:
            raise AssertionError("the move should have failed")
        # nothing is lost: the source is live, unchanged and usable; the destination is
        # unpublished, unversioned and shrunk back to empty
        assert not src.is_released() and src.version == version
        assert (src[0], src[1], src[n - 1]) == (1.0, 2.0, float(n))
        assert dest.version == 0 and dest.size() == 0 and not dest.is_released()
        # and nothing is left claimed: the next move of src into dest (and the last move of
        # src below) would raise RuntimeError, not OSError, on a claimed carrier
    dest.release()  # a claimed carrier would refuse this with RuntimeError
    # and the source can still move somewhere with room
    with sw.no_grad():
        r = sw.move(t, sw.CPU(n))
    assert r[n - 1] == float(n) and src.is_released()
    print("ok")
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_filesystem_during_a_move_loses_nothing():
    mount_point = tempfile.mkdtemp(prefix="sw-tiny-tmpfs-")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", mount_point],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        os.rmdir(mount_point)
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        env = dict(os.environ, STRIDEWEAVE_FILEBACKED_PARENT=mount_point)
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.strip() == "ok"
        assert os.listdir(mount_point) == []  # the per-process directory and its file are gone
    finally:
        subprocess.run(["umount", mount_point], check=False)
        os.rmdir(mount_point)


class _GrowthFails(FileBacked):
    """A destination whose growth (the move's `_allocate(cosize)` of an empty carrier) fails:
    the move is refused before its transfer is submitted, so no handle exists."""

    def _allocate(self, size):
        if size > 0:
            raise OSError(28, "no space to grow")
        super()._allocate(size)


class _GrowthFailsToo(FileBacked):
    def _allocate(self, size):
        if size > 0:
            raise MemoryError("cannot grow")
        super()._allocate(size)


@pytest.mark.parametrize("destination_class, error", [(_GrowthFails, OSError), (_GrowthFailsToo, MemoryError)])
@pytest.mark.parametrize("entry", ["move", "move_async"])
def test_a_failure_while_the_request_is_prepared_changes_nothing(destination_class, error, entry):
    """Past the claims and before the submission (growth here) a failure abandons the request:
    it raises from the call, the source stays live with its values and version, the
    destination stays empty, and neither carrier is left claimed."""
    source = CPU(3, dtype=D.Float32)
    for k, v in enumerate((1.0, 2.0, 3.0)):
        source[k] = v
    t = Tensor(source, 0, L([3], [1]))
    destination = destination_class(dtype=D.Float32)
    version = source.version
    with pytest.raises(error):
        getattr(sw, entry)(t, destination)
    assert not source.is_released() and t.tolist() == [1.0, 2.0, 3.0] and source.version == version
    assert destination.size() == 0
    assert sw.move(t, FileBacked(dtype=D.Float32)).tolist() == [1.0, 2.0, 3.0]  # the source was unclaimed
    assert accepts_release(destination)
