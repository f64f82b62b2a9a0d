"""Operation profiling (docs/spec/autograd-and-profiling.md §9).

Public surface: ``profile(*, carriers=None)`` / ``Profiler(*, carriers=None)`` return a new,
single-use context that records, on the thread that entered it, one ``execute`` event per
dispatched operation and a ``move_submit``/``move_complete`` pair per move; ``events()``
returns the immutable ``ProfilerEvent`` records, sorted by ``id``, after a successful exit.

Times are ``time.monotonic_ns()`` host nanoseconds; only differences mean anything. Nothing
here ever waits for a device.

Internal API for the rest of the package
----------------------------------------

Execute events (operation dispatch; ``strideweave.operation`` uses it, so may any
carrier-dispatched operation)::

    with profiler._execute(name, carrier_type, implementation_type):
        result = operation.forward(*inputs)   # includes the "result is a Tensor" check

Open it only after argument validation: validation failures must record nothing. While a
profiler is active on the thread, every such scope (selected or not) is timed so that the
enclosing scope's ``self_time_ns`` excludes it; with no active profiler it costs one
thread-local lookup.

Move events (the move layer, ``carriers/move.py``), in this order::

    token = profiler._move_submit_begin(source_cls, dest_cls, impl_cls)
        # after validation and route resolution, on the submitting thread. Returns None
        # when no profiler is active on this thread or it selects neither exact class;
        # every other function accepts None and then does nothing.
    profiler._move_submit_end(token, handle)
        # when the handle is about to be returned. Records the move_submit event and
        # registers ``handle`` (anything with ``wait()``) so the profiler's __exit__ waits
        # for it. Equivalent to ``_track_pending(token, handle)`` + ``_move_submit_end(token)``.
    profiler._move_complete(token, succeeded)
        # exactly at terminal commit (after publication and source release, or after
        # failure restoration), from any thread, BEFORE the handle reports done. Records
        # the move_complete event once (later calls are ignored) into the submitting
        # profiler. It may run before _move_submit_end (a synchronous ``_copy`` hook
        # completes inside move_async); the event is then recorded when the submit closes,
        # so its id still follows the submit's and its duration still covers the submit.
    profiler._move_submit_abort(token)
        # the request failed before it was submitted (nothing may be recorded for it):
        # forget the token; its reserved id is left unused.

``Profiler.__exit__`` (on the entering thread) first deactivates the profiler, then calls
``wait()`` on every registered handle, swallowing any exception, then waits until every
token it handed out has completed or been aborted, so each ``move_submit`` has exactly one
``move_complete``. A token whose handle was never registered and that never completes is
given up on after ``_ORPHAN_WAIT_S`` seconds rather than hanging the exit.
"""
from __future__ import annotations

import json
import os
import threading
import time
from types import TracebackType
from dataclasses import dataclass
from typing import Any, Iterable

from strideweave import _native

__all__ = ["profile", "Profiler", "ProfilerEvent"]

_now = time.monotonic_ns
_ORPHAN_WAIT_S = 30.0

_NEW, _CONSUMED, _ACTIVE, _EXITING, _EXITED, _DROPPED = range(6)


@dataclass(frozen=True)
class ProfilerEvent:
    """One immutable profiling record; all 14 fields are required (see §9's field table).

    Not `slots=True`: on CPython 3.11 a frozen slotted dataclass answers the assignment of an
    unknown attribute with a TypeError from its generated `__setattr__` instead of the
    AttributeError every other immutable value here raises."""

    id: int
    parent_id: int | None
    name: str
    carrier_type: type
    implementation_type: type
    input_shapes: Any
    start_time_ns: int
    duration_ns: int
    self_time_ns: int
    thread_id: int
    succeeded: bool
    phase: str
    destination_type: type | None
    correlation_id: int | None


def _check_carriers(carriers: Any) -> frozenset | None:
    if carriers is None:
        return None
    if isinstance(carriers, (str, bytes)):
        raise TypeError("carriers must be None or an iterable of Carrier classes, not a string")
    try:
        items = list(carriers)
    except TypeError:
        raise TypeError(f"carriers must be None or an iterable of Carrier classes, "
                        f"not {type(carriers).__name__}") from None
    from strideweave.carriers.base import Carrier

    for item in items:
        if not (isinstance(item, type) and issubclass(item, Carrier)):
            raise TypeError(f"carriers must contain Carrier classes, got {item!r}")
    return frozenset(items)


class _Frame:
    """One open dispatched operation on this thread while a profiler is active."""

    __slots__ = ("profiler", "id", "parent_id", "start", "child_ns")

    def __init__(self, profiler: "Profiler", event_id: int | None, parent_id: int | None) -> None:
        self.profiler = profiler
        self.id = event_id  # None when the profiler does not select the carrier
        self.parent_id = parent_id
        self.start = 0
        self.child_ns = 0  # summed durations of immediately nested dispatched scopes


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.profiler: Profiler | None = None
        self.frames: list[_Frame] = []


_tls = _ThreadState()


def _active() -> "Profiler | None":
    p = _tls.profiler
    if p is not None and p._state == _ACTIVE:
        return p
    return None


def _enclosing_selected(profiler: "Profiler") -> int | None:
    for frame in reversed(_tls.frames):
        if frame.id is not None and frame.profiler is profiler:
            return frame.id
    return None


class Profiler:
    """A single-use profiling context; see the module docstring and §9."""

    def __init__(self, *, carriers: Iterable[type] | None = None) -> None:
        self._filter = _check_carriers(carriers)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._events: list[ProfilerEvent] = []
        self._next_id = 0
        self._state = _NEW
        self._thread: int | None = None
        self._handles: list[Any] = []
        self._open_moves: set[_MoveToken] = set()

    def __repr__(self) -> str:
        state = ("new", "consumed", "active", "exiting", "exited", "dropped")[self._state]
        return f"<Profiler {state} events={len(self._events)}>"

    # ----- context protocol -------------------------------------------------------------
    def __enter__(self) -> "Profiler":
        with self._lock:
            if self._state != _NEW:
                raise RuntimeError("a Profiler is single-use and cannot be entered again")
            self._state = _CONSUMED  # every entry attempt consumes it, even a refused one
        if _active() is not None:
            raise RuntimeError("another Profiler is already active on this thread")
        self._thread = threading.get_ident()
        self._state = _ACTIVE
        _native.count_active_profilers(1)  # the native move steps aside while any is active
        _tls.profiler = self
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._state != _ACTIVE:
            raise RuntimeError("this Profiler is not active")
        _native.count_active_profilers(-1)
        if threading.get_ident() != self._thread:
            with self._lock:
                self._state = _DROPPED
                self._events = []
                self._changed.notify_all()
            raise RuntimeError("a Profiler must be exited on the thread that entered it; its events are dropped")
        with self._lock:
            self._state = _EXITING  # stops new work on this thread; move completions still land
        if _tls.profiler is self:
            _tls.profiler = None
        self._wait_for_moves()
        with self._lock:
            self._state = _EXITED
        return None

    def _wait_for_moves(self) -> None:
        with self._lock:
            handles, self._handles = self._handles, []
        for handle in handles:
            try:
                handle.wait()
            except Exception:  # noqa: BLE001 - __exit__ must not raise for a failed move
                pass
        deadline = time.monotonic() + _ORPHAN_WAIT_S
        with self._lock:
            while self._open_moves:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)

    def events(self) -> list[ProfilerEvent]:
        """The recorded events sorted by id; only after a successful exit."""
        if self._state != _EXITED:
            raise RuntimeError("events() is available only after the Profiler has exited successfully")
        with self._lock:
            return sorted(self._events, key=lambda e: e.id)

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> None:
        """Write the events as a Chrome/Perfetto trace (JSON) to `path`: execute and
        move_submit slices per thread, and one async slice per move from submit to its
        terminal completion (see `strideweave._chrome_trace`). Only after a successful exit
        (RuntimeError otherwise, like `events()`); nothing is written on a refused call."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
        from strideweave._chrome_trace import chrome_trace

        document = chrome_trace(self.events(), dict(_THREADS))
        with open(path, "w", encoding="utf-8") as out:
            json.dump(document, out)

    # ----- recording helpers --------------------------------------------------------------
    def _selects(self, carrier_type: Any) -> bool:
        return self._filter is None or carrier_type in self._filter

    def _new_id(self) -> int:
        with self._lock:
            i = self._next_id
            self._next_id += 1
            return i

    def _record(self, event: ProfilerEvent) -> None:
        with self._lock:
            if self._state in (_ACTIVE, _EXITING):
                self._events.append(event)


# `threading.get_ident()` (an event's `thread_id`, §9) -> (OS thread id, thread name), noted by
# the recording thread itself, so the Chrome trace can show real thread ids and names even for
# threads that have exited since. A reused ident is overwritten by the newer thread, which is
# the one that records under it from then on.
_THREADS: dict[int, tuple[int, str]] = {}


def _recording_thread() -> int:
    """The current thread's `get_ident()`, noting its native id and name on first use."""
    ident = threading.get_ident()
    if ident not in _THREADS:
        _THREADS[ident] = (threading.get_native_id(), threading.current_thread().name)
    return ident


def profile(*, carriers: Iterable[type] | None = None) -> Profiler:
    """A new single-use `Profiler` (`carriers`: None for all, else exact Carrier classes)."""
    return Profiler(carriers=carriers)


# ----- execute events ---------------------------------------------------------------------
class _ExecuteScope:
    __slots__ = ("_name", "_carrier_type", "_impl", "_frame")

    def __init__(self, name: str, carrier_type: type, implementation_type: type) -> None:
        self._name = name
        self._carrier_type = carrier_type
        self._impl = implementation_type
        self._frame: _Frame | None = None

    def __enter__(self) -> None:
        p = _active()
        if p is None:
            return
        event_id = p._new_id() if p._selects(self._carrier_type) else None
        frame = _Frame(p, event_id, _enclosing_selected(p))
        _tls.frames.append(frame)
        self._frame = frame
        frame.start = _now()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        frame = self._frame
        if frame is None:
            return None
        end = _now()
        frames = _tls.frames
        while frames and frames.pop() is not frame:
            pass  # a scope left open by a broken nesting is discarded with ours
        duration = end - frame.start
        if frames:
            frames[-1].child_ns += duration
        if frame.id is not None:
            frame.profiler._record(ProfilerEvent(
                frame.id, frame.parent_id, self._name, self._carrier_type, self._impl, None,
                frame.start, duration, max(0, duration - frame.child_ns), _recording_thread(),
                exc_type is None, "execute", None, None))
        return None


def _execute(name: str, carrier_type: type, implementation_type: type) -> _ExecuteScope:
    """Scope of one dispatched operation (see the module docstring)."""
    return _ExecuteScope(name, carrier_type, implementation_type)


# ----- move events --------------------------------------------------------------------------
class _MoveToken:
    """One profiled move request, from submit to terminal commit."""

    __slots__ = ("profiler", "submit_id", "parent_id", "start", "submit_end", "source", "destination",
                 "implementation", "done", "early")

    def __init__(self, profiler: Profiler, source: type, destination: type, implementation: type) -> None:
        self.profiler = profiler
        self.source = source
        self.destination = destination
        self.implementation = implementation
        self.parent_id = _enclosing_selected(profiler)
        self.submit_id = profiler._new_id()
        self.submit_end: int | None = None
        self.done = False
        self.early: tuple | None = None  # (succeeded, time, thread) of a completion before submit end
        self.start = _now()


def _move_submit_begin(source_cls: type, dest_cls: type, impl_cls: type) -> _MoveToken | None:
    """Open a move_submit on this thread's active profiler if it selects either class."""
    p = _active()
    if p is None or not (p._selects(source_cls) or p._selects(dest_cls)):
        return None
    token = _MoveToken(p, source_cls, dest_cls, impl_cls)
    with p._lock:
        p._open_moves.add(token)
    return token


def _track_pending(token: _MoveToken | None, handle: Any) -> None:
    """Make the submitting profiler's __exit__ wait for `handle` (exceptions swallowed)."""
    if token is None:
        return
    with token.profiler._lock:
        token.profiler._handles.append(handle)


def _move_submit_end(token: _MoveToken | None, handle: Any = None) -> None:
    """Close and record the move_submit event (and register `handle` if given)."""
    if token is None:
        return
    if handle is not None:
        _track_pending(token, handle)
    end = _now()
    p = token.profiler
    duration = end - token.start
    p._record(ProfilerEvent(
        token.submit_id, token.parent_id, "move", token.source, token.implementation, None,
        token.start, duration, duration, _recording_thread(), True, "move_submit",
        token.destination, token.submit_id))
    with p._lock:
        token.submit_end = end
        early = token.early
    if early is not None:
        _record_complete(token, *early)


def _move_complete(token: _MoveToken | None, succeeded: bool) -> None:
    """Record the move_complete event once, from whichever thread commits."""
    if token is None:
        return
    now = _now()
    with token.profiler._lock:
        if token.done or token.early is not None:
            return
        if token.submit_end is None:
            token.early = (bool(succeeded), now, _recording_thread())
            return
    _record_complete(token, bool(succeeded), now, _recording_thread())


def _record_complete(token: _MoveToken, succeeded: bool, when: int, thread_id: int) -> None:
    p = token.profiler
    with p._lock:
        if token.done:
            return
        token.done = True
        end = max(when, token.submit_end if token.submit_end is not None else when)
        duration = end - token.start
        event_id = p._next_id
        p._next_id += 1
        if p._state in (_ACTIVE, _EXITING):
            p._events.append(ProfilerEvent(
                event_id, None, "move", token.source, token.implementation, None, token.start,
                duration, duration, thread_id, succeeded, "move_complete", token.destination,
                token.submit_id))
        p._open_moves.discard(token)
        p._changed.notify_all()


def _move_submit_abort(token: _MoveToken | None) -> None:
    """Forget a request rejected before submission; it records nothing."""
    if token is None:
        return
    p = token.profiler
    with p._lock:
        token.done = True
        p._open_moves.discard(token)
        p._changed.notify_all()
