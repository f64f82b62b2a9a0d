import os
from typing import Any, Iterable

__all__ = ["profile", "Profiler", "ProfilerEvent"]

class ProfilerEvent:
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
    def __init__(
        self,
        id: int,
        parent_id: int | None,
        name: str,
        carrier_type: type,
        implementation_type: type,
        input_shapes: Any,
        start_time_ns: int,
        duration_ns: int,
        self_time_ns: int,
        thread_id: int,
        succeeded: bool,
        phase: str,
        destination_type: type | None,
        correlation_id: int | None,
    ) -> None: ...

class Profiler:
    def __init__(self, *, carriers: Iterable[type] | None = ...) -> None: ...
    def __enter__(self) -> Profiler: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool: ...
    def events(self) -> list[ProfilerEvent]: ...
    def export_chrome_trace(self, path: str | os.PathLike[str]) -> None: ...

def profile(*, carriers: Iterable[type] | None = ...) -> Profiler: ...
