"""Disposable block devices for the block-device tests.

The spec wants the device tests to run on a *real* block device: when the suite runs as root
with loop devices available, it makes its own loop device (a sparse file attached with
`losetup`) and detaches it afterwards, also when the test fails; `STRIDEWEAVE_TEST_BLOCK_DEVICE`
may name an existing disposable device instead. Only when neither is possible are the tests
skipped, and the skip reason says why (pytest prints it thanks to `-ra`).

Test modules import the fixtures by name::

    from blockdev_fixture import block_device_path, scratch_loop_device  # noqa: F401
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from typing import Iterator

import pytest

ENV_VAR = "STRIDEWEAVE_TEST_BLOCK_DEVICE"
DEFAULT_SIZE = 64 << 20


@dataclasses.dataclass(frozen=True)
class LoopDevice:
    """An attached loop device: its node and the sparse file behind it."""

    path: str
    backing: str
    direct_io: bool


def loop_unavailable_reason() -> str | None:
    """Why this process cannot attach loop devices, or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"block devices are Linux-only (platform {sys.platform})"
    if os.geteuid() != 0:
        return f"not root (euid {os.geteuid()}): cannot attach loop devices; set {ENV_VAR}"
    if shutil.which("losetup") is None:
        return "losetup not found on PATH"
    if not os.path.exists("/dev/loop-control"):
        return "/dev/loop-control missing (loop module not loaded?)"
    return None


def _losetup(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["losetup", *args], capture_output=True, text=True, check=False)


def _attach(backing: str, direct_io: bool) -> tuple[str, bool]:
    """Attaches `backing`; returns (node, whether the loop itself does direct I/O)."""
    if direct_io:
        r = _losetup("--find", "--show", "--direct-io=on", backing)
        if r.returncode == 0:
            return r.stdout.strip(), True
    # Older losetup, or a backing filesystem without O_DIRECT (tmpfs): attach buffered.
    r = _losetup("--find", "--show", backing)
    if r.returncode != 0:
        pytest.skip(f"losetup could not attach a loop device: {r.stderr.strip()}")
    return r.stdout.strip(), False


def _detach(node: str) -> None:
    r = _losetup("-d", node)
    if r.returncode != 0:
        # Never leave the failure silent: a stuck loop device leaks across runs.
        print(f"warning: losetup -d {node} failed: {r.stderr.strip()}", file=sys.stderr)


@contextlib.contextmanager
def loop_device(size: int = DEFAULT_SIZE, *, direct_io: bool = True) -> Iterator[LoopDevice]:
    """Attaches a fresh sparse file of `size` bytes as a loop device.

    The device is detached and the file deleted on exit, however the block exits. Skips the
    calling test (with the reason) when loop devices are unavailable.
    """
    reason = loop_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    tmpdir = tempfile.mkdtemp(prefix="strideweave-loop-", dir=_backing_dir())
    node = None
    try:
        backing = os.path.join(tmpdir, "backing.img")
        with open(backing, "wb") as f:
            f.truncate(size)
        node, dio = _attach(backing, direct_io)
        yield LoopDevice(node, backing, dio)
    finally:
        if node is not None:
            _detach(node)
        shutil.rmtree(tmpdir, ignore_errors=True)


def _backing_dir() -> str | None:
    # /var/tmp is usually a real filesystem (direct I/O works there), /tmp is often tmpfs.
    for d in ("/var/tmp",):
        if os.path.isdir(d) and os.access(d, os.W_OK):
            return d
    return None


def shrink(dev: LoopDevice, new_size: int) -> None:
    """Shrinks the backing file and makes the kernel re-read the loop device's capacity, so
    the device gets smaller under any open handle (a real device-level failure for I/O past
    the new end)."""
    os.truncate(dev.backing, new_size)
    r = _losetup("-c", dev.path)
    if r.returncode != 0:
        pytest.fail(f"losetup -c {dev.path} failed: {r.stderr.strip()}")


def raw_read(path: str, offset: int, n: int) -> bytes:
    """Reads device bytes through a separate buffered descriptor."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, n, offset)
    finally:
        os.close(fd)


def raw_write(path: str, offset: int, data: bytes) -> None:
    """Writes device bytes through a separate descriptor and flushes them."""
    fd = os.open(path, os.O_WRONLY)
    try:
        assert os.pwrite(fd, data, offset) == len(data)
        os.fsync(fd)
    finally:
        os.close(fd)


def set_read_only(node: str, read_only: bool) -> None:
    """Flips the kernel's read-only flag of a block device (`blockdev --setro/--setrw`);
    writes through an already open descriptor then fail with EPERM."""
    flag = "--setro" if read_only else "--setrw"
    r = subprocess.run(["blockdev", flag, node], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.fail(f"blockdev {flag} {node} failed: {r.stderr.strip()}")


@pytest.fixture
def block_device_path() -> Iterator[str]:
    """Path of a disposable block device: `$STRIDEWEAVE_TEST_BLOCK_DEVICE`, or a fresh 64 MiB
    loop device that is detached afterwards."""
    env = os.environ.get(ENV_VAR)
    if env:
        if not stat.S_ISBLK(os.stat(env).st_mode):
            pytest.fail(f"{ENV_VAR}={env!r} is not a block device")
        yield env
        return
    with loop_device() as dev:
        yield dev.path


@pytest.fixture
def scratch_loop_device() -> Iterator[LoopDevice]:
    """A fresh 16 MiB loop device this test may damage (shrink, make read-only). Always a
    loop device, even when `$STRIDEWEAVE_TEST_BLOCK_DEVICE` is set, because the tests that
    use it must control the backing file."""
    with loop_device(16 << 20) as dev:
        yield dev


@pytest.fixture
def device(block_device_path: str) -> Iterator[object]:
    """A `strideweave.BlockDevice` open on `block_device_path`, closed after the test once
    every carrier the test made has been collected."""
    import strideweave as sw

    d = sw.BlockDevice(block_device_path)
    yield d
    gc.collect()  # drop every carrier the test made so the device can close
    d.close()
