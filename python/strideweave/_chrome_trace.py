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
profiler's own fields in `args`.
"""
from __future__ import annotations

import os
from typing import Any, Iterable

__all__ = ["chrome_trace"]


def _class_name(cls: Any) -> str | None:
    return None if cls is None else f"{cls.__module__}.{cls.__qualname__}"


def chrome_trace(events: Iterable[Any]) -> dict[str, Any]:
    """The trace document of `ProfilerEvent`s (any objects with the 14 fields)."""
    events = list(events)
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
                "self_time_ns": e.self_time_ns}
        common = {"pid": pid, "tid": e.thread_id, "args": args}
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
    return {"traceEvents": trace, "displayTimeUnit": "ns"}
