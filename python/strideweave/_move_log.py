"""Log records of moves and residency changes (issue 26), in one place.

Loggers, children of `logging.getLogger("strideweave")` like the Rust core's:
- `strideweave.move`: one DEBUG record per move at its terminal completion ("move CPU ->
  FileBacked: 4096 bytes via CpuToFileBackedMoveOperation in 0.12 ms"), and one WARNING per
  failed move (same fields, "failed");
- `strideweave.residency`: one DEBUG record per residency change of a composite carrier
  (`Evictable`, `TiledEvictable` evict/promote and the Ray carrier's tier copies): the move
  between its tiers, with pair, bytes and duration.

Cost when DEBUG is off: the native fast paths (`move_inline`, `move_async_builtin`, the
worker commit) are taken only when `enabled()` is False, one `Logger.isEnabledFor` call
(logging caches its answer per level and clears the cache on every `setLevel`, so a level
set later applies at the next move). When it is True, moves take the Python request, whose
commit calls `move_complete` (the hook `configure_move_request` registers), the way an
active profiler does. A failed move always warns: with its pair and route from the commit
while `strideweave.move` is at DEBUG, else from the handle's failure (`AwaitMove._fail`,
with its byte count); a failed residency change always warns.

Imports only the standard library: `carriers/move.py` imports it.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

__all__: list[str] = []

MOVE_LOG = logging.getLogger("strideweave.move")
RESIDENCY_LOG = logging.getLogger("strideweave.residency")
_DEBUG = logging.DEBUG
_is_enabled_for = MOVE_LOG.isEnabledFor


# The logger's own per-level answer cache (`Logger._cache`, cleared by logging on every
# setLevel/disable): one dict lookup on the move hot path instead of a method call.
_answers: dict[int, bool] = getattr(MOVE_LOG, "_cache", {})


def enabled() -> bool:
    """Whether per-move DEBUG records are wanted now (the fast paths step aside when True)."""
    answer = _answers.get(_DEBUG)
    return _is_enabled_for(_DEBUG) if answer is None else answer


class MoveLogToken:
    """What the Python request carries to its commit for the record: the profiler's own
    token (or None) travels inside it."""

    __slots__ = ("profiler_token", "pair", "nbytes", "route", "start")

    def __init__(self, profiler_token: Any, pair: str, nbytes: int, route: str) -> None:
        self.profiler_token = profiler_token
        self.pair = pair
        self.nbytes = nbytes
        self.route = route
        self.start = time.perf_counter_ns()


def begin(profiler_token: Any, source: Any, destination: Any, implementation: type, nbytes: int) -> Any:
    """The request's token: a `MoveLogToken` around `profiler_token` when DEBUG is on, else
    `profiler_token` itself (so a request that is neither logged nor profiled keeps the
    GIL-free worker commit, which only a token-less request takes)."""
    if not _is_enabled_for(_DEBUG):
        return profiler_token
    return MoveLogToken(profiler_token, f"{type(source).__name__} -> {type(destination).__name__}",
                        nbytes, implementation.__qualname__)


def profiler_token(token: Any) -> Any:
    """The profiler's token inside the request's token."""
    return token.profiler_token if isinstance(token, MoveLogToken) else token


def _describe(token: MoveLogToken) -> str:
    ms = (time.perf_counter_ns() - token.start) / 1e6
    return f"move {token.pair}: {token.nbytes} bytes via {token.route} in {ms:.3f} ms"


def completion_hook(profiler_complete: Callable[[Any, bool], None]) -> Callable[[Any, bool], None]:
    """The request's `move_complete` hook: the profiler's, then the log record."""

    def move_complete(token: Any, succeeded: bool) -> None:
        if not isinstance(token, MoveLogToken):
            profiler_complete(token, succeeded)
            return
        if token.profiler_token is not None:
            profiler_complete(token.profiler_token, succeeded)
        if not succeeded:
            MOVE_LOG.warning("failed %s", _describe(token))
        elif _is_enabled_for(_DEBUG):
            MOVE_LOG.debug(_describe(token))

    return move_complete


def failed(nbytes: int, error: BaseException) -> None:
    """A move that was not logged at DEBUG failed (`AwaitMove._fail`): its WARNING."""
    # The record keeps its arguments (pytest's capture, a buffering handler): a string, not the
    # exception, whose traceback would keep the failed request and its carriers alive.
    MOVE_LOG.warning("failed move of %d bytes: %s", nbytes, f"{type(error).__name__}: {error}")


def residency(source: Any, destination: Any, nbytes: int, start_ns: int, error: BaseException | None) -> None:
    """One residency change (a move between a composite carrier's tiers) has ended."""
    if error is None and not RESIDENCY_LOG.isEnabledFor(_DEBUG):
        return
    ms = (time.perf_counter_ns() - start_ns) / 1e6
    text = (f"residency move {type(source).__name__} -> {type(destination).__name__}: "
            f"{nbytes} bytes in {ms:.3f} ms")
    if error is None:
        RESIDENCY_LOG.debug(text)
    else:
        RESIDENCY_LOG.warning("failed %s: %s", text, str(error))  # a string: see `failed`
