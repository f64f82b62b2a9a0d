"""Movement between carriers: `move`, `move_async`, the MoveOperation family and the legacy
exact-pair registry (docs/spec/interop-movement.md; docs/spec/extension-and-tiling.md §5).

One path serves every move. `move_async` validates in the specification's order, resolves
the exact-pair route (and, when recording, the reverse route first), claims both carriers,
sizes the destination, then submits the transfer. The request itself, its checks in the core's
table order and its one terminal commit, is native (`_native.MoveRequest`,
crates/strideweave-py/src/move_request.rs); this module supplies what the specification
writes in Python terms: routes, the MoveOperation hooks, providers, the autograd node. Bulk
transfers between Rust storages run on the engine's worker threads with the GIL released;
Python `_copy` hooks and provider `submit()` run on the caller's thread. Whatever finishes the
transfer calls `request.commit` exactly once: publish the result (and its autograd node),
release the source, drop the claims, record `move_complete`, and only then resolve the
`AwaitMove`. `move` is `move_async(...).wait()`.

`move` and `move_async` themselves are the native entry (`_native.move`/`move_async`,
crates/strideweave-py/src/move_entry.rs): it serves the built-in pairs at their default
routes natively and hands every other move to the request here.
"""
from __future__ import annotations

import contextlib
import operator
import threading
from types import TracebackType
from typing import Any, Callable, cast

import time

from strideweave import _autograd, _move_log, _native, profiler
from strideweave._autograd import Operation
from strideweave.carriers import extension
from strideweave.carriers.base import RELEASING, SUBMIT_WINDOW, Allocatable, Carrier, not_a_carrier
from strideweave.carriers.block_device import BlockDeviceCarrier
from strideweave.carriers.cpu import CPU
from strideweave.carriers.file_backed import FileBacked
from strideweave.core.representation import Subtensor
from strideweave.layout import Layout, Shape, Stride
from strideweave.carriers.move_handle import INLINE_SLOTS, AwaitMove, AwaitResult, _NativeTransfer, _worker_commit
from strideweave.tensor import Tensor

__all__ = [
    "move", "move_async", "AwaitResult", "AwaitMove",
    "MoveOperation", "ElementwiseMoveOperation", "CpuToFileBackedMoveOperation",
    "FileBackedToCpuMoveOperation", "CpuToBlockDeviceMoveOperation", "BlockDeviceToCpuMoveOperation",
    "dispatch_move", "register_move_operation", "unregister_move_operation", "registered_move_operation",
]

# ===== move operations ==========================================================================

class MoveOperation(Operation):
    """The autograd node and transfer hook of one move.

    Subclasses implement `_copy(tensor, destination, output, element_count)`, which fills
    `destination` (through `output`, the result Tensor already bound to it) and returns None.
    `element_count` is the layout's cosize. Pin `source_class` / `destination_class` to exact
    carrier classes to refuse other pairs with TypeError before anything is copied.
    """

    source_class: type[Carrier] | None = None
    destination_class: type[Carrier] | None = None
    _sw_move: _MoveState  # set when the move is recorded for autograd

    def _copy(self, tensor: Tensor, destination: Carrier, output: Tensor, element_count: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement _copy")

    def _sw_native_transfer(self, request: "_MoveRequest") -> "_NativeTransfer | None":
        """The framework's own transfer for this request, run in Rust instead of `_copy`, or
        None to run `_copy` on the caller's thread. Only the framework's operations return
        one, and only while their `_copy` is not overridden (a subclass's hook always runs)."""
        return None

    def _forward(self, tensor: Tensor, destination: Carrier) -> Tensor:
        """A direct `op.forward(tensor, destination)`: the ordinary move path with this
        operation as the transfer; `Operation.forward` records this node around it."""
        return _initiate(tensor, destination, operation=self, attach=False).handle.wait()

    def backward(self, gradient: Tensor) -> tuple[Tensor]:
        """Move the cotangent back through the captured reverse route into fresh storage of
        the source carrier's exact class."""
        state = getattr(self, "_sw_move", None)
        if state is None:
            raise RuntimeError(f"{type(self).__name__} has no recorded move to differentiate")
        if not isinstance(gradient, Tensor):
            raise TypeError(f"move backward takes a Tensor cotangent, not {type(gradient).__name__}")
        if gradient.carrier.is_released():
            raise RuntimeError("the move cotangent's carrier is released")
        source_layout: Layout = state.source_layout
        if gradient.layout.shape != source_layout.shape:
            raise ValueError(f"move cotangent shape {gradient.layout.shape!r} does not match the "
                             f"moved tensor's shape {source_layout.shape!r}")
        if not gradient.layout.is_injective():
            raise ValueError("move backward requires a cotangent with an injective gradient Layout, "
                             f"got {gradient.layout!r}")
        target = source_layout if source_layout.is_injective() else Layout.canonical(source_layout.shape)
        with _autograd.no_grad():
            # Stage a private copy in the forward destination's class (the reverse route's
            # source): the reverse move releases its source, and the cotangent belongs to the
            # caller or to the traversal, on whatever carrier class it arrived.
            staged = _autograd.copy_to(gradient, state.destination_carrier, target)
            fresh = state.source_carrier.allocate_like(0 if _grows_when_empty(state.source_carrier)
                                                       else target.cosize)
            result = _initiate(staged, fresh, route=state.reverse_route).handle.wait()
        return (result,)


class ElementwiseMoveOperation(MoveOperation):
    """The fallback: `output[i] = tensor[i]` for every logical index. Between Rust storages of
    one element kind it runs in Rust over the hierarchical layout (engine threads)."""

    def _copy(self, tensor: Tensor, destination: Carrier, output: Tensor, element_count: int) -> None:
        layout, offset, source = tensor.layout, tensor.offset, tensor.carrier
        for k in range(layout.size):
            j = layout.index(k)
            destination._sw_fill(j, source[offset + j])

    def _sw_native_transfer(self, request: "_MoveRequest") -> "_NativeTransfer | None":
        src = request.source._sw_storage()
        dst = request.destination._sw_storage()
        if type(self)._copy is not ElementwiseMoveOperation._copy or src is None or dst is None:
            return None
        if src.kind != dst.kind:
            return None
        layout, offset = request.layout, request.tensor.offset
        if isinstance(src, _native.HostStorage) and isinstance(dst, _native.HostStorage):
            return _NativeTransfer(_native.copy_layout, _native.submit_layout, request.cosize,
                                   (src, offset, dst, 0, list(layout.leaf_shape), list(layout.leaf_stride)))
        # A file is involved: carrying the whole cosize span (holes included) is allowed and
        # turns the fallback into one positioned transfer.
        return _NativeTransfer(_native.copy_span, _native.submit_span, request.cosize,
                               (src, offset, dst, 0, request.cosize))


class _BulkSpanMove(MoveOperation):
    """A bulk pair between Rust storages: the whole cosize span from the tensor's offset
    (holes included) in one positioned transfer, on an engine worker when not overridden."""

    def _copy(self, tensor: Tensor, destination: Carrier, output: Tensor, element_count: int) -> None:
        _native.copy_span(tensor.carrier._sw_storage(), tensor.offset, destination._sw_storage(), 0,
                          element_count)

    def _sw_native_transfer(self, request: "_MoveRequest") -> "_NativeTransfer | None":
        if type(self)._copy is not _BulkSpanMove._copy:
            return None
        return _NativeTransfer(_native.copy_span, _native.submit_span, request.cosize,
                               (request.source._sw_storage(), request.tensor.offset,
                                request.destination._sw_storage(), 0, request.cosize))


class CpuToFileBackedMoveOperation(_BulkSpanMove):
    """Bulk CPU → FileBacked: one positioned write of the cosize span."""

    source_class: type[Carrier] | None = CPU
    destination_class: type[Carrier] | None = FileBacked


class FileBackedToCpuMoveOperation(_BulkSpanMove):
    """Bulk FileBacked → CPU: one positioned read of the cosize span."""

    source_class: type[Carrier] | None = FileBacked
    destination_class: type[Carrier] | None = CPU


class WorkerMove(MoveOperation):
    """Base of the framework's bulk I/O pairs whose `_copy` blocks on a device or a remote
    store (CPU<->BlockDeviceCarrier, CPU<->RayObjectCarrier): it runs on an engine worker,
    which then commits, so `move_async` returns at once. Only a class that sets
    `_sw_runs_on_worker = True` in its own body gets this; a user's subclass that overrides
    `_copy` runs it on the caller's thread like any other hook."""

    _sw_runs_on_worker = False

    def _sw_native_transfer(self, request: "_MoveRequest") -> "_NativeTransfer | None":
        if not type(self).__dict__.get("_sw_runs_on_worker", False):
            return None

        def submit(then: Callable) -> None:
            def run() -> None:
                try:
                    self._copy(request.tensor, request.destination, request.output, request.cosize)
                except BaseException as exc:  # noqa: BLE001 - handed to the commit
                    then(exc)
                else:
                    then(None)
            _native.submit_python(request.handle, run)
        # Device or remote I/O always goes to a worker: never inline, whatever the size.
        return _NativeTransfer(None, submit, None, ())


class CpuToBlockDeviceMoveOperation(WorkerMove):
    """Bulk CPU → BlockDeviceCarrier (Float32): the cosize span in one aligned device write."""

    source_class: type[Carrier] | None = CPU
    destination_class: type[Carrier] | None = BlockDeviceCarrier
    _sw_runs_on_worker = True

    def _copy(self, tensor: Tensor, destination: Carrier, output: Tensor, element_count: int) -> None:
        handle, device_offset, _ = cast(Any, destination)._sw_block_extent()
        handle.write_from(tensor.carrier._sw_storage(), tensor.offset * 4, device_offset, element_count * 4)


class BlockDeviceToCpuMoveOperation(WorkerMove):
    """Bulk BlockDeviceCarrier → CPU (Float32): the cosize span in one aligned device read."""

    source_class: type[Carrier] | None = BlockDeviceCarrier
    destination_class: type[Carrier] | None = CPU
    _sw_runs_on_worker = True

    def _copy(self, tensor: Tensor, destination: Carrier, output: Tensor, element_count: int) -> None:
        handle, device_offset, _ = cast(Any, tensor.carrier)._sw_block_extent()
        handle.read_into(destination._sw_storage(), 0, device_offset + tensor.offset * 4, element_count * 4)


_BLOCK_OPERATIONS = (CpuToBlockDeviceMoveOperation, BlockDeviceToCpuMoveOperation)

# ===== the legacy registry ======================================================================

_registry_lock = threading.RLock()
_REGISTRY: dict[tuple[type, type], type] = {
    (CPU, FileBacked): CpuToFileBackedMoveOperation,
    (FileBacked, CPU): FileBackedToCpuMoveOperation,
    (CPU, BlockDeviceCarrier): CpuToBlockDeviceMoveOperation,
    (BlockDeviceCarrier, CPU): BlockDeviceToCpuMoveOperation,
}
# The default operation of each built-in pair the native moves serve (`_native.move_inline`,
# `_native.move_async_builtin`): they act on a pair only while its route is this one.
_NATIVE_DEFAULTS: dict[tuple[type, type], type[MoveOperation]] = {
    (CPU, CPU): ElementwiseMoveOperation,
    (CPU, FileBacked): CpuToFileBackedMoveOperation,
    (FileBacked, CPU): FileBackedToCpuMoveOperation,
}
# Resolved routes by exact pair live natively (`_native.cached_route`, the core's RouteCache;
# crates/strideweave-py/src/routes.rs): sound because resolving seals both classes (their
# definition state can no longer change); legacy registry edits forget them.


def _check_carrier_class(value: Any, name: str) -> type:
    if not (isinstance(value, type) and issubclass(value, Carrier) and value is not Carrier):
        raise TypeError(f"{name} must be a Carrier subclass, not {value!r}")
    return value


def _check_operation_class(value: Any) -> type:
    if not (isinstance(value, type) and issubclass(value, MoveOperation)):
        raise TypeError(f"operation_class must be a MoveOperation subclass, not {value!r}")
    return value


def _pair_name(source_class: type, destination_class: type) -> str:
    return f"({source_class.__name__}, {destination_class.__name__})"


def register_move_operation(source_class: type, destination_class: type, operation_class: type) -> None:
    """Record `operation_class` for the exact (source_class, destination_class) pair."""
    _check_carrier_class(source_class, "source_class")
    _check_carrier_class(destination_class, "destination_class")
    _check_operation_class(operation_class)
    extension.require_no_definition(source_class, destination_class)
    with _registry_lock:
        key = (source_class, destination_class)
        if key in _REGISTRY:
            raise ValueError(f"a move operation is already registered for {_pair_name(*key)}: "
                             f"{_REGISTRY[key].__name__}")
        _REGISTRY[key] = operation_class
        _forget_routes()
    return None


def dispatch_move(source_class: type, destination_class: type) -> type:
    """The operation registered for exactly this pair, else ElementwiseMoveOperation."""
    _check_carrier_class(source_class, "source_class")
    _check_carrier_class(destination_class, "destination_class")
    extension.require_no_definition(source_class, destination_class)
    with _registry_lock:
        return _REGISTRY.get((source_class, destination_class), ElementwiseMoveOperation)


def unregister_move_operation(source_class: type, destination_class: type) -> type:
    """Remove and return the operation registered for exactly this pair (KeyError if none)."""
    _check_carrier_class(source_class, "source_class")
    _check_carrier_class(destination_class, "destination_class")
    extension.require_no_definition(source_class, destination_class)
    with _registry_lock:
        try:
            removed = _REGISTRY.pop((source_class, destination_class))
        except KeyError:
            raise KeyError(f"no move operation is registered for "
                           f"{_pair_name(source_class, destination_class)}") from None
        _forget_routes()
        return removed


class registered_move_operation(contextlib.AbstractContextManager["type[MoveOperation]", None]):
    """`with registered_move_operation(S, D, Op) as op:` registers the pair for the block."""

    def __init__(self, source_class: type[Carrier], destination_class: type[Carrier],
                 operation_class: type[MoveOperation]) -> None:
        _check_carrier_class(source_class, "source_class")
        _check_carrier_class(destination_class, "destination_class")
        _check_operation_class(operation_class)
        extension.require_no_definition(source_class, destination_class)
        self._pair = (source_class, destination_class)
        self._operation_class = operation_class
        # Refuse a duplicate when the context is made, as register_move_operation would;
        # entering re-checks, since the registry may change in between.
        with _registry_lock:
            if self._pair in _REGISTRY:
                raise ValueError(f"a move operation is already registered for {_pair_name(*self._pair)}: "
                                 f"{_REGISTRY[self._pair].__name__}")

    def __enter__(self) -> type[MoveOperation]:
        register_move_operation(*self._pair, self._operation_class)
        return self._operation_class

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        unregister_move_operation(*self._pair)
        return None


# ===== routes ===================================================================================

# A resolved exact-pair route is a frozen native decision (`_native.Route`): its
# `operation_class` (a MoveOperation class), or a definition's `decision`, or the documented
# `refusal` of a pair no operation may serve (BlockDeviceCarrier with anything but CPU),
# raised by `check_permitted()` only after the whole validation table has passed; and whether
# the native fast routes serve the pair (`native`).
_Route = _native.Route


def _resolve(source_class: type, destination_class: type) -> _Route:
    """The permitted route for an exact pair; NotImplementedError where movement is refused."""
    return _lookup_route(source_class, destination_class).check_permitted()


def _lookup_route(source_class: type, destination_class: type) -> _Route:
    """The pair's route decision: cached natively, else resolved from the registries once
    and cached (unless a registry changed meanwhile)."""
    route = _native.cached_route(source_class, destination_class)
    if route is None:
        generation = _native.route_generation()
        route = _native.remember_route(source_class, destination_class,
                                       _resolve_uncached(source_class, destination_class), generation)
    return route


def _native_cpu(cls: type) -> bool:
    """CPU itself or a subclass of it the native moves serve (see
    `_builtin.RustBackedCarrier._sw_native_move`)."""
    return cls is CPU or (issubclass(cls, CPU) and bool(getattr(cls, "_sw_native_move", False)))


def _forget_routes() -> None:
    """The registry changed: every cached route decision is stale."""
    _native.forget_routes()


def _resolve_uncached(source_class: type, destination_class: type) -> _Route:
    decision = extension.resolve_route(source_class, destination_class)
    if decision is not None:
        return _Route(None, decision)
    with _registry_lock:
        operation_class = _REGISTRY.get((source_class, destination_class), ElementwiseMoveOperation)
    route = _operation_route(operation_class, source_class, destination_class)
    default = _NATIVE_DEFAULTS.get((source_class, destination_class))
    if default is None and _native_cpu(source_class) and _native_cpu(destination_class):
        # A pair of CPU subclasses moves as (CPU, CPU) does while its route is that pair's
        # default: the native fast route serves it then, calling the move hooks they override.
        default = _NATIVE_DEFAULTS[(CPU, CPU)]
    if default is not None and operation_class is default and route.refusal is None:
        return _Route(operation_class, None, None, True, getattr(source_class, "_sw_move_hooks", 0),
                      getattr(destination_class, "_sw_move_hooks", 0))
    return route


def _operation_route(operation_class: type, source_class: type, destination_class: type) -> _Route:
    """The route of one MoveOperation class for a pair, registered or called directly
    (`op.forward`): a block device pair only admits the block operations, whichever way the
    operation was reached (docs/spec/tensor-and-carriers.md §4 refuses the rest before any effect)."""
    if (issubclass(source_class, BlockDeviceCarrier) or issubclass(destination_class, BlockDeviceCarrier)) \
            and operation_class not in _BLOCK_OPERATIONS:
        return _Route(operation_class, refusal=(
            f"no movement between {source_class.__name__} and {destination_class.__name__}: "
            "BlockDeviceCarrier moves only to and from exact CPU carriers"))
    return _Route(operation_class)


def _grows_when_empty(carrier: Carrier) -> bool:
    return isinstance(carrier, Allocatable) or extension.is_definition_backed(carrier)


# ===== one request ===============================================================================

# What a move node keeps for backward (`source_carrier`, `destination_carrier`, `source_layout`,
# `reverse_route`): a frozen native value, since every recorded move makes one.
_MoveState = _native.MoveState


def _slot_bytes(dtype: Any) -> int:
    bits = getattr(dtype, "bits", None)
    return bits // 8 if isinstance(bits, int) and bits > 0 else 8


# One move between initiation and its terminal commit; it is also the claim its carriers
# hold. Native (crates/strideweave-py/src/move_request.rs): it walks the core's validation
# table and commits through the core's terminal commit, calling the hooks below.
# `prepared` keeps a provider's PreparedTransfer (and whatever it captured) alive until the
# commit. The request admits writes only through what it handed the transfer: `output` (and a
# provider's `TransferRequest.output`), each granted by a weak reference to the request.
_MoveRequest = _native.MoveRequest
_native.configure_move_request({
    "tensor": Tensor, "carrier": Carrier, "await_move": AwaitMove, "not_a_carrier": not_a_carrier,
    "releasing": RELEASING, "grows_when_empty": _grows_when_empty,
    "allocatable": Allocatable, "attach_result": _autograd.attach_result,
    "move_complete": _move_log.completion_hook(profiler._move_complete),
    "slot_bytes": _slot_bytes,
    # The package's own functions the native request calls, named here once so that a rename
    # fails this import, not a move (the binding reads no private attribute by name).
    "fail_move": AwaitMove._fail, "clear_node": operator.methodcaller("_sw_clear"),
    "release_for": Carrier._sw_release_for, "allocate_claimed": Carrier._sw_allocate_claimed,
    "tier_is_mutable": operator.methodcaller("_is_mutable"),
})


# The one initiation of the general request is native (crates/strideweave-py/src/initiate.rs):
# the validation table, the route decision, a definition route's prepare, the claims, the
# growth of an empty destination, `output`, the node, the submission and, past it, the one
# terminal commit. `_initiate(tensor, destination, *, between_tiers=False, route=None,
# operation=None, attach=True)` returns the request; what it calls back into is below.
_initiate = _native.initiate


def _log_begin(source: Carrier, destination: Carrier, implementation: type, nbytes: int) -> Any:
    """The move's log record and profiler event at its initiation; its token."""
    return _move_log.begin(profiler._move_submit_begin(type(source), type(destination), implementation),
                           source, destination, implementation, nbytes)


def _log_abort(token: Any) -> None:
    """A request abandoned before its submission (token None between tiers or when the log
    record itself failed)."""
    profiler._move_submit_abort(_move_log.profiler_token(token))


def _log_submitted(token: Any, handle: AwaitMove) -> None:
    profiler._move_submit_end(_move_log.profiler_token(token), handle)


def _output(tensor: Tensor, destination: Carrier, grant: Any) -> Tensor:
    """The Tensor the transfer writes through: the destination at offset 0 with the tensor's
    layout (valid by construction: live, at least cosize slots). The claim admits writes
    through it, never through the destination itself."""
    output = Tensor._from_subtensors(tensor.dtype(), (Subtensor(tensor.dtype(), destination, 0, tensor.layout),), ())
    output._sw_grant = grant
    return output


def _bind_window(transfer_request: Any, tensor: Tensor, destination: Carrier, grant: Any) -> None:
    transfer_request._sw_bind_output(_window(tensor, destination, grant))


def _record(request: _MoveRequest, op: MoveOperation, tensor: Tensor, source: Carrier, destination: Carrier,
            reverse: _Route | None) -> None:
    """The autograd node of a recorded move, attached to the result at the commit."""
    request.node = op
    request.recorded = _autograd.record_inputs(op, (tensor,))
    op._sw_move = _MoveState(source, destination, tensor.layout, reverse)


_Blocking = Callable[..., None]


def _window(tensor: Tensor, destination: Carrier, grant: Any) -> Tensor:
    """A provider's `TransferRequest.output`: the destination slots `[0, physical_span)` as a
    flat Tensor whose writes the move's claim admits, from any thread, until the move's
    terminal completion."""
    span = tensor.layout.cosize
    layout = Layout(Shape([span]), Stride([1])) if span > 0 else tensor.layout
    window = Tensor._from_subtensors(tensor.dtype(), (Subtensor(tensor.dtype(), destination, 0, layout),), ())
    window._sw_grant = grant
    return window


def _submit(request: _MoveRequest, op: MoveOperation, prepared: Any) -> None:
    if prepared is not None:
        # A provider may hand the copy to its own threads and report through a completion:
        # they write through `TransferRequest.output`; `submit()` itself may also write the
        # destination directly, during that call only.
        def submit() -> Any:
            saved, SUBMIT_WINDOW.request = SUBMIT_WINDOW.request, request
            try:
                with _autograd.no_grad():  # provider transfers create no visible node
                    return prepared.submit()
            finally:
                SUBMIT_WINDOW.request = saved
        outcome = _run_transfer(submit)
        if isinstance(outcome, BaseException):
            request.commit(outcome)
        elif outcome is None:
            request.commit(None)
        else:
            def finish_provider() -> None:
                try:
                    # A completion's `done`/`wait` run on an engine thread; they make no
                    # visible node either (interop-movement.md: provider transfers create no
                    # nested visible node).
                    with _autograd.no_grad():
                        extension.check_provider_completion(outcome)
                except BaseException as exc:  # noqa: BLE001 - any failure is the terminal one
                    request.commit(exc)
                else:
                    request.commit(None)
            _native.submit_python(request.handle, finish_provider)
        return
    transfer = op._sw_native_transfer(request)
    if transfer is not None:
        if transfer.runs_inline():
            # Set whenever it runs inline. (The cast's type is a constant: subscripting
            # `Callable` on every move cost a few microseconds.)
            blocking = cast(_Blocking, transfer.blocking)
            request.commit(_run_transfer(lambda: blocking(*transfer.args)))
        else:
            extra = transfer.progress_argument(request.handle._progress)
            commit = _worker_commit(request, transfer)
            if commit is not None:
                extra["commit"] = commit  # success commits on the worker; `then` hears failures
            transfer.submit(*transfer.args, lambda error: request.commit(error), **extra)
        return

    def copy() -> None:
        # A user hook may break its `-> None` contract; the result is checked, not used.
        returned = op._copy(  # type: ignore[func-returns-value]
            request.tensor, request.destination, request.output, request.cosize)
        if returned is not None:
            raise TypeError(f"{type(op).__name__}._copy must return None, not {type(returned).__name__}")

    request.commit(_run_transfer(copy))


def _run_transfer(fn: Callable) -> Any:
    """Run transfer code on this thread; returns its result, or the exception it raised (the
    move's terminal failure). Nothing is lifted for it: the move's claims admit only writes
    through what the transfer was handed."""
    try:
        return fn()
    except BaseException as exc:  # noqa: BLE001 - becomes the handle's terminal failure
        return exc


# ===== public entry points =======================================================================

# `move` and `move_async` are the native entry (crates/strideweave-py/src/move_entry.rs): a
# move between built-in carriers at their default routes runs there whole; any other is the
# request below, which the entry calls through these two functions. They read `move_async`
# and `_initiate` from this module at call time, so a test that replaces either sees it.
from strideweave._native import move as move, move_async as move_async  # noqa: E402


def _request_move_async(tensor: Tensor, destination: Carrier) -> AwaitMove:
    """The general request: validate, claim, submit; its handle."""
    return _initiate(tensor, destination).handle


def _request_move(tensor: Tensor, destination: Carrier) -> Tensor:
    """A blocking move the entry's inline route did not serve: the asynchronous entry (its
    bulk native route, else the request), then the wait."""
    return cast(Tensor, move_async(tensor, destination).wait())


_native.configure_initiate({
    "lookup_route": _lookup_route, "operation_route": _operation_route, "prepare_route": extension.prepare_route,
    "elementwise": ElementwiseMoveOperation, "move_operation": MoveOperation,
    "log_begin": _log_begin, "log_abort": _log_abort, "log_submitted": _log_submitted,
    "is_definition_backed": extension.is_definition_backed, "allocate_definition": extension.allocate_destination,
    "output": _output, "bind_window": _bind_window, "record": _record, "submit": _submit,
})

_native.configure_move_entry({
    "log_cache": _move_log._answers, "log_enabled": _move_log.enabled, "debug_level": _move_log._DEBUG,
    "request_move": _request_move, "request_move_async": _request_move_async,
})


def _move_between_tiers(tensor: Tensor, destination: Carrier) -> Tensor:
    """Framework-internal move for composite carriers (Evictable residency transitions): the
    same route and transfer, no autograd node, no profiling, ownership handled by the owner.
    Each is one residency change, logged by `_move_log.residency`."""
    return _start_move_between_tiers(tensor, destination).wait()


def _start_move_between_tiers(tensor: Tensor, destination: Carrier) -> AwaitMove:
    """`_move_between_tiers` without the wait: the request's handle, for a composite's
    asynchronous residency transition (Evictable.promote_async/evict_async). The residency
    record is made when the move ends, before any callback the composite registers after."""
    source = tensor.carrier
    nbytes = tensor.layout.cosize * _slot_bytes(tensor.dtype())
    start = time.perf_counter_ns()
    try:
        handle = _initiate(tensor, destination, between_tiers=True).handle
    except BaseException as exc:
        _move_log.residency(source, destination, nbytes, start, exc)
        raise
    handle._add_done_callback(
        lambda done: _move_log.residency(source, destination, nbytes, start, done.exception(timeout=0)))
    return handle
