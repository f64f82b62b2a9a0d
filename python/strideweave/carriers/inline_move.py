"""Registers the native inline move (`_native.move_inline`) with what it needs from the
Python layers: the classes it serves, the state lock and claim object it takes, and the
callback that records a move's autograd node. See crates/strideweave-py/src/inline_move.rs.

Until this module is imported, `move_inline` steps aside on every call (it is unconfigured),
so the order of imports cannot change any outcome; `import strideweave` imports it.
"""
from __future__ import annotations

from strideweave import _autograd, _native
from strideweave.carriers.base import STATE_LOCK
from strideweave.carriers.cpu import CPU
from strideweave.carriers.dtype import DType
from strideweave.carriers.move import INLINE_SLOTS, ElementwiseMoveOperation, _lookup_route, _MoveState
from strideweave.tensor import Tensor

__all__: list[str] = []


class _InlineMoveClaim:
    """The claim both carriers of a native inline move hold while its copy runs: to every
    other thread they participate in a pending move."""

    __slots__ = ()


def _record_inline_move(tensor: Tensor, output: Tensor) -> None:
    """The autograd node of a committed native inline move: what `_initiate` records and
    `_publish_and_release` attaches for a recorded CPU→CPU move over the default route."""
    op = ElementwiseMoveOperation()
    op._sw_move = _MoveState(tensor.carrier, output.carrier, tensor.layout, _lookup_route(CPU, CPU))
    _autograd.record_unary(op, tensor, output)  # the native side checked grad mode and dtype


_native.configure_inline_move({
    "cpu": CPU, "tensor": Tensor, "state_lock": STATE_LOCK, "claim": _InlineMoveClaim(),
    "differentiable": (DType.Float32, DType.Floating), "max_slots": INLINE_SLOTS,
    "record": _record_inline_move,
})
