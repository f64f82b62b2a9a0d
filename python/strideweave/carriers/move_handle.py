"""The handle of a move request and the shape of a framework transfer in Rust.

`AwaitMove` is what `move_async` returns; `_NativeTransfer` is how a framework operation hands
its copy to a `_native` transfer function (on the caller's thread when small, else on the
engine); `_worker_commit` is the GIL-free success commit of an engine-run request. All sit
below `carriers.move`, which re-exports the public names.
"""
from __future__ import annotations

from typing import Any, Callable

from strideweave import _autograd, _move_log, _native
from strideweave.carriers.cpu import CPU
from strideweave.carriers.file_backed import FileBacked
from strideweave.tensor import Tensor

__all__ = ["AwaitResult", "AwaitMove"]

AwaitResult = _native.AwaitResult


class AwaitMove(AwaitResult[Tensor]):
    """Completion handle of one `move_async` request; `wait()` returns the moved Tensor
    (the same object every time) or raises the request's terminal failure.

    `bytes_done` / `bytes_total` report progress: the moved span is `layout.cosize` slots of
    the dtype's size. Bulk transfers on the engine count every 8 MiB chunk as it lands; other
    transfers (hooks, providers, small inline copies) report 0 until they complete."""

    __slots__ = ()

    # The byte counter is the native handle's (`AwaitResult._progress`), given by the request
    # that made the handle; every AwaitMove has one.
    @property
    def bytes_done(self) -> int:
        """Bytes of the moved span copied so far."""
        return _counter(self).done

    @property
    def bytes_total(self) -> int:
        """Bytes of the moved span (`layout.cosize` times the dtype's slot size)."""
        return _counter(self).total

    def _fail(self, exc: BaseException) -> bool:
        """The move's terminal failure; it is also a WARNING on `strideweave.move`, whatever
        the level (a request logged at DEBUG has already warned with its pair and route)."""
        failed = super()._fail(exc)
        if failed and not _move_log.enabled():
            _move_log.failed(_counter(self).total, exc)
        return failed


def _counter(handle: AwaitMove) -> _native.TransferProgress:
    progress = handle._progress
    if progress is None:  # a move's handle is made with its counter; this is a framework bug
        raise RuntimeError("this move handle has no byte counter")
    return progress



# A transfer of at most this many slots runs on the caller's thread (GIL released for the
# copy) and commits there: handing a 4 KiB memcpy to a worker costs ~50 µs of thread wake-up
# and GIL hand-over for a copy of well under 1 µs. Larger ones go to the engine, so that
# move_async returns at once.
INLINE_SLOTS = 1 << 14


class _NativeTransfer:
    """A framework transfer in Rust: `blocking(*args)` on this thread, or `submit(*args, then)`
    on an engine worker. `slots` (None: never inline) decides which."""

    __slots__ = ("blocking", "submit", "slots", "args")

    def __init__(self, blocking: Callable | None, submit: Callable, slots: int | None, args: tuple) -> None:
        self.blocking = blocking
        self.submit = submit
        self.slots = slots
        self.args = args

    def runs_inline(self) -> bool:
        return self.slots is not None and self.slots <= INLINE_SLOTS

    def progress_argument(self, progress: Any) -> dict:
        """`progress=` for the submit functions that count chunks (the span copies)."""
        return {"progress": progress} if self.submit is _native.submit_span else {}


# Source classes whose release is exactly their storage's, so a worker can commit their moves.
_WORKER_COMMITTED = (CPU, FileBacked)


def _worker_commit(request: Any, transfer: _NativeTransfer) -> Any:
    """The GIL-free success commit (`_native.MoveCommit`, crates/strideweave-py/src/commit.rs)
    of an engine-run transfer, when nothing else has to happen at its end: no profiling event
    to close, no composite owner, a built-in source. The autograd node is attached to the
    result now (nobody can reach the result before the handle completes; a failure clears
    the node in `_commit`). None: the Python commit runs, as for every other request."""
    if (request.token is not None or request.between_tiers or type(request.source) not in _WORKER_COMMITTED
            or transfer.submit not in (_native.submit_span, _native.submit_layout)):
        return None
    if request.node is not None:
        _autograd.attach_result(request.node, request.output, request.recorded)
    return _native.MoveCommit(request.source, request.destination, request.handle, request.output,
                              request.handle._progress)
