"""Reverse-mode autograd: the `Operation` node, grad mode, the backward traversal, and the
gradient-layout rules (docs/spec/autograd-and-profiling.md §2–§6).

Layout of this module:

* grad mode (per thread, held in Rust) and ``no_grad`` / ``recording_disabled``;
* gradient-layout terms (canonical, broadcast-aliased, gradient layout) and cotangent
  validation;
* the gradients of broadcasts and moves, computed with `strideweave._compute` (the numeric
  plumbing every gradient and operation goes through);
* ``Operation`` and the recording helpers the move layer uses (``record_inputs``,
  ``attach_result``);
* the Tensor autograd surface (``tensor_grad_get`` … ``tensor_backward``) that
  ``strideweave.tensor.Tensor`` delegates to, and the traversal engine.
"""
from __future__ import annotations

import sys
import threading
from collections import deque
from types import TracebackType
from typing import Any, Callable, Iterable, Sequence, TypeVar, cast

from strideweave import _native
from strideweave import tensor as _tensor_layer
# `copy_to` is also reached as `_autograd.copy_to` by the move layer's backward.
from strideweave._compute import binary, copy_to, scatter_add
from strideweave.layout import Layout, Shape, Stride
from strideweave.tensor import Tensor

_C = TypeVar("_C", bound=Callable[..., Any])

__all__: list[str] = []  # internal module: the public names live in strideweave.operation


# ===== grad mode ==================================================================================
# Grad mode is per thread and lives in Rust (`_native.grad_enabled`/`set_grad_enabled`; every
# thread starts with recording on), where the native move reads it too.


def is_grad_enabled() -> bool:
    """Whether operations record autograd nodes on the calling thread (initially True)."""
    return _native.grad_enabled()


def set_grad_enabled(enabled: bool) -> None:
    """Turn recording on or off for the calling thread only."""
    if type(enabled) is not bool:
        raise TypeError(f"enabled must be a bool, not {type(enabled).__name__}")
    _native.set_grad_enabled(enabled)


class no_grad:
    """Context manager disabling recording on this thread; on exit (normal or by exception)
    it restores the state seen at entry, so nesting and re-use work.

    Also usable as a decorator: the wrapped function runs with recording disabled.
    """

    def __init__(self) -> None:
        self._saved: dict[int, list[bool]] = {}

    def __enter__(self) -> "no_grad":
        self._saved.setdefault(threading.get_ident(), []).append(_native.set_grad_enabled(False))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        stack = self._saved.get(threading.get_ident())
        if stack:
            _native.set_grad_enabled(stack.pop())
            if not stack:
                del self._saved[threading.get_ident()]
        return None

    def __call__(self, func: _C) -> _C:
        import functools

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with no_grad():
                return func(*args, **kwargs)

        return cast(_C, wrapper)


def recording_disabled() -> no_grad:
    """Internal alias used by the framework (node backward, moves between tiers)."""
    return no_grad()


# ===== layout terms ===============================================================================
_UNIT = None


def unit_layout() -> Layout:
    """`[1]:[1]`, the layout of a `sum` result."""
    global _UNIT
    if _UNIT is None:
        _UNIT = Layout(Shape([1]), Stride([1]))
    return _UNIT


def is_broadcast_aliased(layout: Layout) -> bool:
    """Non-injective, but injective once its stride-0 leaves are dropped."""
    if layout.is_injective():
        return False
    kept = [(e, s) for e, s in zip(layout.leaf_shape, layout.leaf_stride) if s != 0]
    if not kept:
        return True
    return Layout(Shape([e for e, _ in kept]), Stride([s for _, s in kept])).is_injective()


def gradient_layout(layout: Layout) -> Layout | None:
    """The layout a gradient of a Tensor with `layout` takes (§2), or None."""
    if layout.is_injective():
        return layout
    if is_broadcast_aliased(layout):
        return Layout.canonical(layout.shape)
    return None


def _output_layout(layout: Layout) -> Layout:
    """Gradient layout, or the canonical one where none exists (validation rejects it later)."""
    g = gradient_layout(layout)
    return g if g is not None else Layout.canonical(layout.shape)


def _tensor_cls() -> type[Tensor]:
    return Tensor


def _is_multi(t: Any) -> bool:
    return len(t._subtensors) != 1


def validate_cotangent(value: Any, target: Any, what: str = "gradient") -> None:
    """The cotangent rules of §5 for `value` flowing into Tensor `target`."""
    Tensor = _tensor_cls()
    if not isinstance(value, Tensor):
        raise TypeError(f"{what} must be a Tensor, not {type(value).__name__}")
    if _is_multi(value):
        raise NotImplementedError(f"{what}: a multi-subtensor Tensor cannot be a cotangent")
    layout = target._layout
    if layout.is_injective():
        if value._layout != layout:
            raise ValueError(f"{what} must have exactly the target's layout {layout!r}, got {value._layout!r}")
    elif is_broadcast_aliased(layout):
        if value._layout.shape != layout.shape:
            raise ValueError(f"{what} must have the target's shape {layout.shape!r}, got {value._layout.shape!r}")
        if not value._layout.is_injective():
            raise ValueError(f"{what} for a broadcast-aliased target must have an injective layout, "
                             f"got {value._layout!r}")
    else:
        raise ValueError(f"{what}: the target layout {layout!r} aliases storage beyond broadcasting, "
                         f"so it has no gradient layout")


# ===== gradients of broadcasts and moves ========================================================
def reduce_broadcast(g: Any, source: Any) -> Any:
    """Gradient of a broadcast of `source`: each source coordinate receives the sum of `g`
    over the coordinates reading it, in the source's gradient layout and carrier class."""
    out_layout = _output_layout(source._layout)
    strides = [0 if e == 1 else s for e, s in zip(source._layout.leaf_shape, out_layout.leaf_stride)]
    carrier = scatter_add(g, source._carrier, out_layout.cosize, strides)
    return _tensor_cls()(carrier, 0, out_layout)


def gradient_for(source: Any, g: Any) -> Any:
    """`g`'s values as a fresh detached gradient for `source` (its class, gradient layout)."""
    return copy_to(g, source._carrier, _output_layout(source._layout))


# ===== Operation ==================================================================================
def version_token(t: Any) -> tuple:
    """Immutable token: (carrier identity, version) per distinct carrier of `t`."""
    return t.version_snapshot()


class Operation:
    """An autograd node (§3). Subclasses override ``_forward(*inputs) -> Tensor`` and
    ``backward(gradient) -> tuple``; ``forward`` records the node when recording is on and
    some positional Tensor input is differentiable."""

    # The class-level defaults are a fresh node's state, so there is no ``__init__`` to run:
    # every recorded operation makes a node, and the call cost about 150 ns of each. A subclass
    # that skips ``super().__init__()`` is as usable as one that calls it. The values are
    # immutable; recording assigns the instance's own.
    _sw_inputs: tuple[Tensor, ...] = ()
    _sw_versions: tuple[Any, ...] = ()
    _sw_released: bool = False
    _sw_ctx: dict[str, Any]  # made by `ctx` on first use: most nodes never touch it

    @property
    def ctx(self) -> dict[str, Any]:
        """A dict for subclass state; emptied when the graph is released."""
        try:
            return self._sw_ctx
        except AttributeError:
            self._sw_ctx = {}
            return self._sw_ctx

    @ctx.setter
    def ctx(self, value: dict[str, Any]) -> None:
        if not isinstance(value, dict):
            raise TypeError(f"ctx must be a dict, not {type(value).__name__}")
        self._sw_ctx = value

    def forward(self, *inputs: Any, options: Any = None) -> Any:
        """Run the node: record inputs, call ``_forward``, attach the result (§3)."""
        recorded = record_inputs(self, inputs)
        try:
            result = self._forward(*inputs)
            if not isinstance(result, _tensor_cls()):
                raise TypeError(f"{type(self).__name__}._forward must return a Tensor, "
                                f"not {type(result).__name__}")
        except BaseException:
            self._sw_clear()
            raise
        attach_result(self, result, recorded)
        return result

    def _forward(self, *inputs: Any) -> Any:
        raise TypeError(f"{type(self).__name__} does not implement _forward")

    def backward(self, gradient: Any) -> tuple[Any, ...]:
        """One cotangent Tensor (or None) per saved input; the base class has none."""
        raise RuntimeError(f"{type(self).__name__} does not implement backward")

    def inputs(self) -> tuple[Tensor, ...]:
        """The saved Tensors, one per positional Tensor occurrence; () if none or released."""
        return self._sw_inputs

    def input_versions(self) -> tuple[Any, ...]:
        """One immutable version token per saved input, taken at forward entry."""
        return self._sw_versions

    def validate_input_versions(self) -> None:
        """RuntimeError (`in-place modification`) if any saved input changed since forward."""
        for position, (t, token) in enumerate(zip(self._sw_inputs, self._sw_versions)):
            if version_token(t) != token:
                raise RuntimeError(
                    f"{type(self).__name__}: saved input {position} was changed by an in-place "
                    f"modification after the forward pass (version {token} -> {version_token(t)})")

    def _sw_clear(self) -> None:
        self._sw_inputs = ()
        self._sw_versions = ()

    def _sw_release(self) -> None:
        """Graph release: forget saved state; the node stays attached to its result."""
        self._sw_clear()
        self.ctx.clear()
        self._sw_released = True

    def _sw_is_released(self) -> bool:
        return self._sw_released


def record_inputs(node: Operation, inputs: Iterable[Any]) -> bool:
    """§3 step 1: save positional Tensor inputs and version tokens if recording is on here and
    some input is differentiable. Returns whether it recorded (pass that to `attach_result`)."""
    Tensor = _tensor_cls()
    tensors = tuple(x for x in inputs if isinstance(x, Tensor))
    if not (is_grad_enabled() and any(t.is_differentiable() for t in tensors)):
        node._sw_clear()
        return False
    node._sw_versions = tuple(version_token(t) for t in tensors)
    node._sw_inputs = tensors
    node._sw_released = False
    return True


def record_unary(node: Operation, tensor: Any, result: Any, versions: Any = None) -> None:
    """`record_inputs(node, (tensor,))` then `attach_result(node, result, True)`, for a caller
    that already knows recording is on on this thread and both tensors are differentiable
    (the native moves): the same saved inputs, version token and result link. `versions`: the
    tensor's `version_snapshot()` when the caller has read it already."""
    node._sw_versions = (tensor.version_snapshot() if versions is None else versions,)
    node._sw_inputs = (tensor,)
    node._sw_released = False
    result._autograd_ctx = node


def attach_result(node: Operation, result: Any, recorded: bool) -> None:
    """§3 step 3: make `node` the result's autograd_ctx, or drop what was saved. May run on
    another thread than `record_inputs` (asynchronous moves): `recorded` carries the
    decision made at initiation."""
    if recorded and result.is_differentiable():
        result._autograd_ctx = node
    else:
        node._sw_clear()


# ===== Tensor surface ==============================================================================
def tensor_grad_get(t: Any) -> Any:
    if not t.is_differentiable():
        raise RuntimeError(f"a {t._dtype.name} Tensor is not differentiable and has no .grad")
    return t._grad


def tensor_grad_set(t: Any, value: Any) -> None:
    if value is None:
        t._grad = None
        return
    if not isinstance(value, _tensor_cls()):
        raise TypeError(f"grad must be a Tensor or None, not {type(value).__name__}")
    if not t.is_differentiable():
        raise RuntimeError(f"a {t._dtype.name} Tensor is not differentiable; only grad = None is allowed")
    t._grad = value


def tensor_ctx_set(t: Any, value: Any) -> None:
    if value is None:
        t._autograd_ctx = None
        return
    if not isinstance(value, Operation):
        raise TypeError(f"autograd_ctx must be an Operation or None, not {type(value).__name__}")
    if not t.is_differentiable():
        raise RuntimeError(f"a {t._dtype.name} Tensor is not differentiable and cannot have an autograd_ctx")
    t._autograd_ctx = value


def tensor_retain_grad(t: Any, retain: Any = True) -> None:
    if type(retain) is not bool:
        raise TypeError(f"retain must be a bool, not {type(retain).__name__}")
    if not t.is_differentiable():
        raise RuntimeError(f"a {t._dtype.name} Tensor is not differentiable; it cannot retain a gradient")
    t._retain_grad = retain


def tensor_backward(root: Any, gradient: Any, retain_graph: Any, kwargs: dict) -> None:
    """`Tensor.backward(gradient=None, retain_graph=False)` (§4, §5)."""
    if kwargs:
        name = next(iter(kwargs))
        raise TypeError(f"backward() got an unexpected keyword argument {name!r}"
                        + (" (higher-order differentiation is not supported)" if name == "create_graph" else ""))
    if _is_multi(root):
        raise NotImplementedError("backward is not implemented for a multi-subtensor Tensor")
    if not root.is_differentiable():
        raise RuntimeError(f"backward needs a differentiable Tensor; {root._dtype.name} is not")
    if type(retain_graph) is not bool:
        raise TypeError(f"retain_graph must be a bool, not {type(retain_graph).__name__}")
    if gradient is None:
        cotangent = _implicit_cotangent(root)
    else:
        validate_cotangent(gradient, root, "gradient")
        cotangent = gradient
    run_backward(root, cotangent, retain_graph)


def _implicit_cotangent(root: Any) -> Any:
    layout = root._layout
    if not (len(layout) == 1 and layout.is_leaf and layout.size == 1):
        raise ValueError(
            f"gradient can be omitted only for a Tensor with exactly one top-level mode, a leaf of "
            f"extent 1; this one has layout {layout!r}: pass gradient=")
    carrier = root._carrier.new_like([1.0] * layout.cosize)
    return _tensor_cls()(carrier, 0, layout)


def _released_error(node: Operation) -> RuntimeError:
    return RuntimeError(
        f"{type(node).__name__}: the graph through this node was already released by a previous "
        f"backward; call backward(retain_graph=True) to traverse it more than once")


def _sum_contributions(target: Any, parts: list) -> Any:
    if len(parts) == 1:
        return parts[0]
    layout = _output_layout(target._layout)
    like = parts[0]._carrier
    acc = binary("add", parts[0], parts[1], like, layout)
    for p in parts[2:]:
        acc = binary("add", acc, p, like, layout)
    return acc


def _accumulated(target: Any, cot: Any) -> Any:
    """The new `.grad` of `target` after receiving `cot` (nothing is assigned here)."""
    layout = target._layout
    glayout = cast(Layout, gradient_layout(layout))  # not None: validation rejected other aliasing
    like = target._carrier
    if layout.is_injective():
        fresh = copy_to(cot, like, glayout)
    else:
        # Broadcast-aliased: each logical position gets the sum over its storage slot.
        slots = scatter_add(cot, like, layout.cosize, layout.leaf_stride)
        fresh = copy_to(_tensor_cls()(slots, 0, layout), like, glayout)
    existing = target._grad
    if existing is None:
        return fresh
    if _is_multi(existing) or existing._layout.shape != layout.shape:
        raise ValueError(f"the existing .grad has shape {existing._layout.shape!r}, "
                         f"not the Tensor's {layout.shape!r}; set .grad = None first")
    return binary("add", existing, fresh, like, glayout)


def run_backward(root: Any, cotangent: Any, retain_graph: bool) -> None:
    """Iterative topological traversal from `root` with a validated `cotangent` (§5)."""
    # Discovery: each differentiable tensor reachable through saved inputs, with the number
    # of its discovered consumers (one per saved occurrence).
    entries: dict[int, list] = {id(root): [root, 0]}
    nodes: dict[int, Operation] = {}
    stack = [root]
    while stack:
        t = stack.pop()
        node = t._autograd_ctx
        if node is None:
            continue
        nodes.setdefault(id(node), node)
        for u in node.inputs():
            if not u.is_differentiable():
                continue
            entry = entries.get(id(u))
            if entry is None:
                entries[id(u)] = [u, 1]
                stack.append(u)
            else:
                entry[1] += 1

    # Execution: a tensor is processed once all its discovered consumers contributed.
    contributions: dict[int, list] = {id(root): [cotangent]}
    buffered: list[tuple[Any, Any]] = []
    ready = deque([root])
    processed = 0
    while ready:
        t = ready.popleft()
        processed += 1
        parts = contributions.pop(id(t), None)
        cot = _sum_contributions(t, parts) if parts else None
        node = t._autograd_ctx
        if cot is not None and (node is None or t._retain_grad):
            buffered.append((t, _accumulated(t, cot)))
        if node is None:
            continue
        saved = node.inputs()
        results: Any = None
        if cot is not None:
            if node._sw_is_released():
                raise _released_error(node)
            node.validate_input_versions()
            with recording_disabled():
                results = node.backward(cot)
            if not isinstance(results, (tuple, list)):
                raise TypeError(f"{type(node).__name__}.backward must return a tuple, "
                                f"not {type(results).__name__}")
            if len(results) != len(saved):
                raise ValueError(f"{type(node).__name__}.backward returned {len(results)} entries "
                                 f"for {len(saved)} saved inputs")
        for position, u in enumerate(saved):
            if not u.is_differentiable():
                continue
            entry = entries[id(u)]
            if results is not None and results[position] is not None:
                validate_cotangent(results[position], u,
                                   f"{type(node).__name__}.backward entry {position}")
                contributions.setdefault(id(u), []).append(results[position])
            entry[1] -= 1
            if entry[1] == 0:
                ready.append(u)
    if processed != len(entries):
        raise RuntimeError("the autograd graph has a cycle; backward cannot order it")

    # Success: publish every buffered .grad, then release the graph.
    for t, g in buffered:
        t._grad = g
    if not retain_graph:
        for node in nodes.values():
            node._sw_release()


# The Tensor's autograd surface (`grad`, `backward`, …) delegates here; the tensor module sits
# below this one, so this module installs itself when it is imported.
_tensor_layer.LAYERS.autograd = sys.modules[__name__]
