"""A real write failure during a move: FileBacked on a tiny tmpfs that fills up.

Needs root (to mount a tmpfs); the move runs in a subprocess whose FileBacked directory lives
on that tmpfs, so the failure is the kernel's ENOSPC, not a simulated one."""
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

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
        assert src._sw_claim is None and dest._sw_claim is None
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
