"""Registers the native fast routes of the move entry (`move_inline`, the small blocking move, and
`move_async_builtin`, the initiation of a bulk move between built-ins) with what
they need from the Python layers: the classes they serve, the handle class, and the callback
that records a move's autograd node. See
crates/strideweave-py/src/inline_move.rs and async_move.rs.

Until this module is imported, `move_inline` steps aside on every call (it is unconfigured),
so the order of imports cannot change any outcome; `import strideweave` imports it.
"""
from __future__ import annotations

import operator
from typing import cast

from strideweave import _autograd, _move_log, _native
from strideweave.carriers.cpu import CPU
from strideweave.carriers.dtype import DType
from strideweave.carriers.file_backed import FileBacked
from strideweave.carriers.move import INLINE_SLOTS, AwaitMove, MoveOperation, _MoveState, _slot_bytes
from strideweave.tensor import Tensor

__all__: list[str] = []


def _record_native_move(tensor: Tensor, output: Tensor, route: _native.Route, state: _MoveState,
                        versions: tuple[tuple[int, int], ...]) -> MoveOperation:
    """The autograd node of a native move, attached to its result: what `_initiate` records
    and attaches for a recorded move between built-in carriers over the pair's default route
    (the native side checked grad mode, the dtype and both routes, and built the node's
    `_MoveState` from the tensor's carrier and layout, the destination and the reverse route
    backward takes, and `versions`, the tensor's `version_snapshot()`, all of which it had
    already read)."""
    op = cast(type[MoveOperation], route.operation_class)()
    op._sw_move = state
    _autograd.record_unary(op, tensor, output, versions)
    return op


_native.configure_inline_move({
    "cpu": CPU, "file_backed": FileBacked, "tensor": Tensor, "await_move": AwaitMove,
    "differentiable": (DType.Float32, DType.Floating), "max_slots": INLINE_SLOTS, "record": _record_native_move,
    "slot_bytes": [(d, _slot_bytes(d)) for d in (DType.Float32, DType.Floating, DType.Int32, DType.Bool)],
    "failed": _move_log.failed,
    # The hooks a native move calls for a class that overrides them (`_builtin._NATIVE_MOVE_HOOKS`).
    "is_mutable_hook": operator.methodcaller("_is_mutable"), "release_hook": operator.methodcaller("_release"),
})
