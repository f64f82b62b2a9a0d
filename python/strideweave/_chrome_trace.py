"""Chrome / Perfetto trace JSON of profiler events (the "Trace Event Format").

`Profiler.export_chrome_trace(path)` writes what `chrome_trace(events)` returns; open the file
in https://ui.perfetto.dev or chrome://tracing. Layout of the timeline:

- each `execute` event is a complete slice (`"ph": "X"`) on its recording thread, nested
  under its parent the way the profiler measured it;
- each `move_submit` event is a complete slice on the submitting thread (host enqueue time);
- each move, submit to terminal completion, is an async slice pair keyed by its correlation
  id: `"ph": "b"` at submit start and `"ph": "e"` at completion, so a move that outlives its
  submit shows as a bar spanning the asynchronous storage or device work. An instant event
  (`"ph": "i"`) marks the completion on the thread that committed it.

Times are microseconds since the earliest event (Chrome's unit); every event carries the
profiler's own fields in `args` (`args.thread_id` is the profiler's `threading.get_ident()`).
`tid` is the OS thread id (`threading.get_native_id()`) where the profiler noted it, and one
`thread_name` metadata event (`"ph": "M"`) per thread labels the viewer's rows.
"""
from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

__all__ = ["chrome_trace"]


def _class_name(cls: Any) -> str | None:
    return None if cls is None else f"{cls.__module__}.{cls.__qualname__}"


def chrome_trace(events: Iterable[Any],
                 threads: Mapping[int, tuple[int, str]] | None = None) -> dict[str, Any]:
    """The trace document of `ProfilerEvent`s (any objects with the 14 fields). `threads`
    maps an event's `thread_id` to (OS thread id, thread name); an unmapped thread keeps its
    `thread_id` as `tid` and is named after it."""
    events = list(events)
    threads = threads or {}

    def tid(thread_id: int) -> int:
        return threads[thread_id][0] if thread_id in threads else thread_id

    origin = min((e.start_time_ns for e in events), default=0)
    pid = os.getpid()

    def us(ns: int) -> float:
        return (ns - origin) / 1000.0

    trace: list[dict[str, Any]] = []
    for e in events:
        args = {"id": e.id, "parent_id": e.parent_id, "phase": e.phase,
                "carrier_type": _class_name(e.carrier_type),
                "implementation_type": _class_name(e.implementation_type),
                "destination_type": _class_name(e.destination_type),
                "correlation_id": e.correlation_id, "succeeded": e.succeeded,
                "self_time_ns": e.self_time_ns, "thread_id": e.thread_id}
        common = {"pid": pid, "tid": tid(e.thread_id), "args": args}
        if e.phase == "execute":
            trace.append({"name": e.name, "cat": "execute", "ph": "X", "ts": us(e.start_time_ns),
                          "dur": e.duration_ns / 1000.0, **common})
        elif e.phase == "move_submit":
            trace.append({"name": "move_submit", "cat": "move", "ph": "X", "ts": us(e.start_time_ns),
                          "dur": e.duration_ns / 1000.0, **common})
            trace.append({"name": "move", "cat": "move", "ph": "b", "id": e.correlation_id,
                          "ts": us(e.start_time_ns), **common})
        elif e.phase == "move_complete":
            end = us(e.start_time_ns + e.duration_ns)
            trace.append({"name": "move", "cat": "move", "ph": "e", "id": e.correlation_id,
                          "ts": end, **common})
            trace.append({"name": "move_complete", "cat": "move", "ph": "i", "s": "t", "ts": end,
                          **common})
    for thread_id in sorted({e.thread_id for e in events}):
        name = threads[thread_id][1] if thread_id in threads else f"thread {thread_id}"
        trace.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid(thread_id),
                      "args": {"name": name}})
    return {"traceEvents": trace, "displayTimeUnit": "ns"}
