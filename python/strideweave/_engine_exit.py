"""Letting the transfer engine go quiet before the interpreter finalizes.

A worker still inside a job when Python finalizes may call back into the interpreter (a
move's commit, a provider wait, a forwarded log record) and be stopped there by CPython,
which aborts the process. `quiesce_at_exit` waits for the engine to have no queued or
running job, once per process and for at most `EXIT_WAIT_SECONDS` (a job that never ends,
such as a provider completion nobody will finish, must not hold the exit for long), then
stops forwarding Rust log records. The package registers it with `atexit`; FileBacked's
directory cleanup calls it first, so no copy is still writing a file it removes.
"""
from __future__ import annotations

from strideweave import _native

__all__: list[str] = []

EXIT_WAIT_SECONDS = 5.0

_done = False


def quiesce_at_exit() -> None:
    global _done
    if _done:
        return
    _done = True
    _native.engine_quiesce(EXIT_WAIT_SECONDS, stop_logging=True)
