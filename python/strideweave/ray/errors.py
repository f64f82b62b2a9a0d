"""The one place where Ray's errors become the package's (issue 22.8), and the bounded wait of
a fetch.

Every call into Ray that the carrier makes (`ray.put`, `ray.get`) goes through `ray_call`:
- no Ray in this process (never initialised, or after `ray.shutdown()`): RuntimeError saying
  so, before any effect, whatever Ray itself would raise (after a shutdown a stale reference
  makes Ray raise ValueError "owner is unknown", and `ray.put` would start a new local Ray);
- a fetch that does not finish within `STRIDEWEAVE_RAY_FETCH_TIMEOUT` seconds, or any other
  Ray failure (node or owner died, object lost or freed): RayObjectLostError naming the object.
"""
from __future__ import annotations

import os
from typing import Any, Callable, TypeVar

import ray

__all__ = ["RayObjectLostError", "FETCH_TIMEOUT_ENV", "fetch_timeout", "ray_call", "require_ray"]

_R = TypeVar("_R")

FETCH_TIMEOUT_ENV = "STRIDEWEAVE_RAY_FETCH_TIMEOUT"
# Long enough for a large object from another node of a busy cluster; short next to the wait
# Ray itself would give an object whose node died.
DEFAULT_FETCH_TIMEOUT = 10.0


class RayObjectLostError(RuntimeError):
    """A Ray object could not be fetched: its node or owner died, it was freed, or it did not
    arrive within `STRIDEWEAVE_RAY_FETCH_TIMEOUT` seconds. The message names the object (its
    hex id)."""


def fetch_timeout() -> float:
    """Seconds a fetch of one Ray object may take: `STRIDEWEAVE_RAY_FETCH_TIMEOUT` (a positive
    number; read at each fetch), default 10. ValueError naming the variable for anything else."""
    raw = os.environ.get(FETCH_TIMEOUT_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_FETCH_TIMEOUT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not (seconds > 0 and seconds != float("inf")):
        raise ValueError(f"{FETCH_TIMEOUT_ENV} must be a positive number of seconds, not {raw!r}")
    return seconds


def no_ray(action: str) -> RuntimeError:
    return RuntimeError(f"cannot {action}: no Ray is running in this process "
                        "(call ray.init() first, or run inside a Ray task or actor)")


def require_ray(action: str) -> None:
    """RuntimeError unless this process is connected to Ray (checked before any effect)."""
    if not ray.is_initialized():
        raise no_ray(action)


def describe(ref: Any) -> str:
    return f"Ray object {ref.hex()}"


def ray_call(action: str, ref: Any, call: Callable[[], _R], *, timeout: float | None = None) -> _R:
    """`call()` (one Ray API call about `ref`, or about a new object when `ref` is None) with
    Ray's errors mapped to the package's; `timeout` is the fetch bound `call` was given."""
    require_ray(action)
    try:
        return call()
    except ray.exceptions.GetTimeoutError as exc:
        raise RayObjectLostError(f"{describe(ref)} could not be fetched within {timeout} seconds "
                                 f"({FETCH_TIMEOUT_ENV}); its node may be lost") from exc
    except (ray.exceptions.RayError, ValueError) as exc:
        if not ray.is_initialized():
            raise no_ray(action) from exc
        if isinstance(exc, ValueError) and ref is None:
            raise
        text = str(exc).strip()
        first = text.splitlines()[0] if text else ""
        what = describe(ref) if ref is not None else "a new Ray object"
        raise RayObjectLostError(f"{what} could not be {'fetched' if ref is not None else 'stored'} "
                                 f"({type(exc).__name__}): {first}") from exc
