"""The per-process directory of FileBacked files: creation, exit cleanup, fork, crash reclaim.

Each process keeps its FileBacked files in one hidden directory under
`$STRIDEWEAVE_FILEBACKED_PARENT` (default: the temp directory), named

    .strideweave-filebacked-<boot:8><pidns:16><pid:8><start:16><random:16>

in fixed-width lowercase hex: the first 8 hex digits of the kernel boot id, the pid namespace
inode, the creating process's pid and start time (clock ticks since boot, from
/proc/<pid>/stat), and 64 random bits. The name alone identifies the creator, and mkdir
writes it atomically. (Without /proc the name is the 16 random digits only, which nobody
reclaims.)

- Cleanup at exit runs only in the process that created the directory: a fork()ed child
  inherits the atexit hook and must not remove its parent's files (the child gets its own
  directory on first use).
- A process killed before its cleanup (SIGKILL, a crash) leaves its directory behind. The
  first FileBacked of a later process reclaims every such directory in the same parent whose
  creator is provably dead: a previous boot, or, in the same boot and pid namespace, no
  process with that pid or one with another start time (the pid was recycled). A live
  process's directory, other users' directories and names in another format are never touched.
"""
from __future__ import annotations

import atexit
import os
import pathlib
import re
import secrets
import shutil
import stat
import tempfile
import threading

from strideweave._engine_exit import quiesce_at_exit

__all__ = ["filebacked_directory"]

_PREFIX = ".strideweave-filebacked-"
_NAME = re.compile(r"\.strideweave-filebacked-([0-9a-f]{8})([0-9a-f]{16})([0-9a-f]{8})([0-9a-f]{16})[0-9a-f]{16}")

_lock = threading.Lock()
_directory: pathlib.Path | None = None
_directory_pid: int | None = None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _start_time(pid: int) -> int | None:
    """Start time of process `pid` in clock ticks since boot, or None if there is none."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    # Fields after the parenthesised command name (which may hold spaces and parentheses);
    # starttime is field 22 of the whole line, index 19 after the name.
    fields = text[text.rfind(")") + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _identity() -> tuple[str, int] | None:
    """(boot id prefix, pid namespace inode) of this system, or None without /proc."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        pidns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    boot = (boot or "").strip().replace("-", "")[:8].lower()
    if re.fullmatch(r"[0-9a-f]{8}", boot) is None:
        return None
    return boot, pidns


def _creator_is_dead(boot: str, pidns: int, pid: int, start: int, here: tuple[str, int]) -> bool:
    if boot != here[0]:
        return True  # created during an earlier boot: every process of it is gone
    if pidns != here[1]:
        return False  # another pid namespace: its pids cannot be checked from here
    return _start_time(pid) != start


def _reclaim_dead(parent: pathlib.Path, here: tuple[str, int]) -> None:
    """Remove the directories in `parent` left by dead processes (see the module docstring)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    uid = os.getuid()
    for name in names:
        match = _NAME.fullmatch(name)
        if match is None:
            continue
        path = parent / name
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
            continue
        boot, pidns, pid, start = match.group(1), *(int(match.group(k), 16) for k in (2, 3, 4))
        if _creator_is_dead(boot, pidns, pid, start, here):
            # Another process may be reclaiming the same directory: errors are theirs too.
            shutil.rmtree(path, ignore_errors=True)


def _remove_if_creator(path: str, pid: int) -> None:
    """The atexit hook: only the creating process removes its directory, once the engine has
    no copy still writing into it."""
    if os.getpid() == pid:
        quiesce_at_exit()
        shutil.rmtree(path, ignore_errors=True)


def _make_directory(parent: pathlib.Path) -> pathlib.Path:
    pid = os.getpid()
    here = _identity()
    start = _start_time(pid) if here is not None else None
    if here is None or start is None:
        owner = ""  # no /proc: an unverifiable name, never reclaimed by anyone
    else:
        _reclaim_dead(parent, here)
        owner = f"{here[0]}{here[1]:016x}{pid:08x}{start:016x}"
    while True:
        candidate = parent / f"{_PREFIX}{owner}{secrets.token_hex(8)}"
        try:
            candidate.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return candidate


def filebacked_directory() -> pathlib.Path:
    """The hidden directory of this process's FileBacked files, created on first use (in a
    fork()ed child: on the child's first use) and removed when the creating process exits."""
    global _directory, _directory_pid
    with _lock:
        if _directory is None or _directory_pid != os.getpid() or not _directory.is_dir():
            parent = pathlib.Path(os.environ.get("STRIDEWEAVE_FILEBACKED_PARENT") or tempfile.gettempdir())
            _directory = _make_directory(parent)
            _directory_pid = os.getpid()
            atexit.register(_remove_if_creator, str(_directory), _directory_pid)
        return _directory


def _after_fork_in_child() -> None:
    # Another thread may have held the lock at fork(); the child has only this thread.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
