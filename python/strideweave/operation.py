"""strideweave.operation: autograd nodes, grad mode, the minimal differentiable operations
and profiling (docs/spec/autograd-and-profiling.md §1, §3, §6, §7, §9).

Every public operation validates its arguments in the specified order, then dispatches one
`Operation` inside a profiler execute scope (named by its dispatch name), so argument errors
record no event and failures inside the operation record ``succeeded=False``.

Executors: CPU Float32 runs the Rust kernels over any hierarchical layout; Generic (and
CPU Int32) run elementwise in Python; every other carrier (FileBacked, BlockDeviceCarrier,
Evictable, user carriers without kernels) raises NotImplementedError. Results are fresh
storage of the first operand's exact carrier class at offset 0 with the canonical injective
layout; `broadcast_to` alone is a view.
"""
from __future__ import annotations

import numbers
import sys
from typing import TYPE_CHECKING, Any

from strideweave import _autograd, _compute, profiler as _profiler
from strideweave import tensor as _tensor_layer
from strideweave._autograd import Operation, is_grad_enabled, no_grad, set_grad_enabled
from strideweave.layout import Layout, Shape
from strideweave.profiler import Profiler, ProfilerEvent, profile

if TYPE_CHECKING:  # annotations only: the tensor module sits below this one
    from strideweave.tensor import Tensor
    # Resolved lazily at run time by __getattr__ below (the move module imports this one).
    from strideweave.carriers.move import MoveOperation as MoveOperation

__all__ = ["Operation", "no_grad", "is_grad_enabled", "set_grad_enabled", "add", "elementwise_mul",
           "mul", "broadcast_to", "profile", "Profiler", "ProfilerEvent", "BroadcastOperation"]


# ===== validation and dispatch ====================================================================
def _tensor_cls() -> type[Tensor]:
    from strideweave.tensor import Tensor

    return Tensor


def _check_tensor(value: Any, name: str, operation: str) -> None:
    if not isinstance(value, _tensor_cls()):
        raise TypeError(f"{operation}: {name} must be a Tensor, not {type(value).__name__}")
    if len(value._subtensors) != 1:
        raise NotImplementedError(f"{operation} is not implemented for a multi-subtensor Tensor ({name})")


def _check_live(value: Any, name: str, operation: str) -> None:
    if value._carrier.is_released():
        raise RuntimeError(f"{operation}: the {type(value._carrier).__name__} carrier of {name} is released")


def _check_binary(a: Any, b: Any, operation: str) -> None:
    _check_tensor(a, "a", operation)
    _check_tensor(b, "b", operation)
    _check_live(a, "a", operation)
    _check_live(b, "b", operation)
    if type(a._carrier) is not type(b._carrier):
        raise TypeError(f"{operation}: operands live on different carrier classes "
                        f"({type(a._carrier).__name__} and {type(b._carrier).__name__})")
    if a._layout.shape != b._layout.shape:
        raise ValueError(f"{operation}: shapes differ ({a._layout.shape!r} and {b._layout.shape!r})")
    if a._dtype is not b._dtype:
        raise TypeError(f"{operation}: dtypes differ ({a._dtype.name} and {b._dtype.name})")


def _dispatch(name: str, carrier_type: type, op: Operation, *inputs: Any) -> Any:
    with _profiler._execute(name, carrier_type, type(op)):
        return op.forward(*inputs)


def _executor(t: Any, operation: str) -> str:
    """"rust" for CPU Float32, "python" for Generic and CPU Int32; otherwise refuse."""
    from strideweave.carriers.cpu import CPU
    from strideweave.carriers.dtype import DType
    from strideweave.carriers.generic import Generic

    carrier = t._carrier
    if t._dtype is DType.Bool:
        raise NotImplementedError(f"{operation} is not implemented for Bool tensors")
    if isinstance(carrier, CPU):
        return "rust" if t._dtype is DType.Float32 else "python"
    if isinstance(carrier, Generic):
        return "python"
    raise NotImplementedError(f"{operation} is not implemented for {type(carrier).__name__} tensors "
                              f"(computation runs on CPU and Generic carriers)")


def _result_layout(t: Any) -> Layout:
    return Layout.canonical(t._layout.shape)


# ===== operations =================================================================================
class AddOperation(Operation):
    """`a + b`; backward `(g, g)`, each a fresh copy in its input's gradient layout."""

    def _forward(self, a: Any, b: Any) -> Any:
        _executor(a, "add")
        return _compute.binary("add", a, b, a._carrier, _result_layout(a))

    def backward(self, gradient: Any) -> tuple[Any, ...]:
        return tuple(_autograd.gradient_for(x, gradient) for x in self.inputs())


class ElementwiseMulOperation(Operation):
    """`a ⊙ b`; backward `(g⊙b, g⊙a)` from the saved inputs' current values."""

    def _forward(self, a: Any, b: Any) -> Any:
        _executor(a, "mul")
        return _compute.binary("mul", a, b, a._carrier, _result_layout(a))

    def backward(self, gradient: Any) -> tuple[Any, ...]:
        a, b = self.inputs()
        _compute.check_live(a, "saved input 0")
        _compute.check_live(b, "saved input 1")
        ga = _compute.binary("mul", gradient, b, a._carrier, _autograd._output_layout(a._layout))
        gb = _compute.binary("mul", gradient, a, b._carrier, _autograd._output_layout(b._layout))
        return (ga, gb)


class ScalarMulOperation(Operation):
    """`a·s` for a real Python number `s` (``forward(a, s)``); saves `(a,)`, backward `(g·s,)`."""

    def _forward(self, a: Any, scalar: Any) -> Any:
        _executor(a, "mul")
        from strideweave.carriers.dtype import DType

        if a._dtype is DType.Int32 and not isinstance(scalar, numbers.Integral):
            raise TypeError(f"mul: an Int32 tensor can only be scaled by an integer, not {type(scalar).__name__}")
        self.ctx["scalar"] = scalar
        return _compute.scaled(a, scalar, a._carrier, _result_layout(a))

    def backward(self, gradient: Any) -> tuple[Any, ...]:
        (a,) = self.inputs()
        return (_compute.scaled(gradient, self.ctx["scalar"], a._carrier, _autograd._output_layout(a._layout)),)


class SumOperation(Operation):
    """Total over every logical coordinate, layout `[1]:[1]`; backward fills `g[0]`."""

    def _forward(self, t: Any) -> Any:
        _executor(t, "reduce_sum")
        value = _compute.total(t)
        return _tensor_cls()(t._carrier.new_like([value]), 0, _autograd.unit_layout())

    def backward(self, gradient: Any) -> tuple[Any, ...]:
        (t,) = self.inputs()
        return (_compute.filled(gradient, t._carrier, _autograd._output_layout(t._layout)),)


class BroadcastOperation(Operation):
    """The `broadcast_to` node (``forward(tensor, shape)``): the result is a view (same carrier
    and offset, widened extent-1 leaves get stride 0); backward sums the cotangent over the
    coordinates that read each source coordinate."""

    def _forward(self, tensor: Any, shape: Any) -> Any:
        self.ctx["shape"] = shape
        return tensor._broadcast_view(shape)

    def backward(self, gradient: Any) -> tuple[Any, ...]:
        (source,) = self.inputs()
        if not isinstance(gradient, _tensor_cls()):
            raise TypeError(f"gradient must be a Tensor, not {type(gradient).__name__}")
        target = self.ctx.get("shape")
        if target is not None and gradient._layout.shape != target:
            raise ValueError(f"gradient must have the broadcast target shape {target!r}, "
                             f"got {gradient._layout.shape!r}")
        if not gradient._layout.is_injective():
            raise ValueError(f"gradient of broadcast_to must have an injective layout, got {gradient._layout!r}")
        return (_autograd.reduce_broadcast(gradient, source),)


def add(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise `a + b` (dispatch name ``add``), recorded for autograd."""
    _check_binary(a, b, "add")
    return _dispatch("add", type(a._carrier), AddOperation(), a, b)


def elementwise_mul(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise product of two Tensors (dispatch name ``elementwise_mul``)."""
    _check_binary(a, b, "elementwise_mul")
    return _dispatch("elementwise_mul", type(a._carrier), ElementwiseMulOperation(), a, b)


def mul(a: Tensor, b: Tensor | float) -> Tensor:
    """`a * b` for two Tensors (elementwise) or a Tensor and a real number (dispatch ``mul``)."""
    Tensor = _tensor_cls()
    if isinstance(b, Tensor) or not isinstance(a, Tensor):
        _check_binary(a, b, "mul")
        return _dispatch("mul", type(a._carrier), ElementwiseMulOperation(), a, b)
    if isinstance(b, bool) or not isinstance(b, numbers.Real):
        raise TypeError(f"mul: the scalar must be a real number, not {type(b).__name__}")
    _check_tensor(a, "a", "mul")
    _check_live(a, "a", "mul")
    return _dispatch("mul", type(a._carrier), ScalarMulOperation(), a, b)


def broadcast_to(tensor: Tensor, shape: Shape) -> Tensor:
    """View `tensor` with `shape` (extent-1 leaves widen with stride 0); recorded as a
    `BroadcastOperation` node whose backward sums over the widened coordinates."""
    _check_tensor(tensor, "tensor", "broadcast_to")
    if not isinstance(shape, Shape):
        raise TypeError(f"broadcast_to: shape must be a Shape, not {type(shape).__name__}")
    tensor._layout.broadcast_to(shape)  # ValueError for an incompatible target, before any event
    _check_live(tensor, "tensor", "broadcast_to")
    return _dispatch("broadcast_to", type(tensor._carrier), BroadcastOperation(), tensor, shape)


def reduce_sum(tensor: Tensor) -> Tensor:
    """Implementation of `strideweave.sum` (dispatch name ``reduce_sum``)."""
    _check_tensor(tensor, "tensor", "sum")
    _check_live(tensor, "tensor", "sum")
    return _dispatch("reduce_sum", type(tensor._carrier), SumOperation(), tensor)


# ===== MoveOperation (owned by strideweave.carriers.move, re-exported here) =======================
def _resolve_move_operation() -> Any:
    import sys

    module = sys.modules.get("strideweave.carriers.move")
    if module is None:
        try:
            import strideweave.carriers.move as module
        except ImportError:
            return None
    return getattr(module, "MoveOperation", None)


def __getattr__(name: str) -> Any:
    if name == "MoveOperation":
        cls = _resolve_move_operation()
        if cls is not None:
            globals()["MoveOperation"] = cls
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if _resolve_move_operation() is not None:
    __all__.append("MoveOperation")


# Tensor's `+` and `*` delegate here: the one registration of the operator methods (the tensor
# module sits below this one).
_tensor_layer.LAYERS.operations = sys.modules[__name__]
