"""The transfer engine's environment settings, checked when strideweave is imported.

`STRIDEWEAVE_WORKERS` sets how many threads run bulk copies (an integer from 1 to 256;
default: the CPU count clamped to 4..8). The engine reads it when its first job starts
(crates/strideweave-core/src/engine/pool.rs, README "Engine threads"); a bad value is refused
here, at import, instead of being ignored silently later.
"""
from __future__ import annotations

import os
import re

__all__: list[str] = []

WORKERS_ENV = "STRIDEWEAVE_WORKERS"
MAX_WORKERS = 256  # pool.rs MAX_COPY_WORKERS

# The integers Rust's usize parser accepts (no "1_000", no "1.0"), around optional blanks.
_INTEGER = re.compile(r"\s*\+?[0-9]+\s*")


def check_environment() -> None:
    value = os.environ.get(WORKERS_ENV)
    if value is None or value == "":
        return
    if _INTEGER.fullmatch(value) is None or not 1 <= int(value) <= MAX_WORKERS:
        raise ValueError(f"{WORKERS_ENV} must be an integer from 1 to {MAX_WORKERS} (the transfer "
                         f"engine's copy threads), not {value!r}")


check_environment()
