"""docs/spec/interop-movement.md, "pending-move protection", and
docs/spec/extension-and-tiling.md §5 "What a claim admits" (issue 21): from submission to
terminal completion a move's carriers are protected from conflicting mutation, release and
movement, and that protection does not lift for the thread that runs the move's own hooks.

A claim admits exactly what the transfer was handed: a `_copy` writes through its `output`,
a provider writes through `TransferRequest.output` (from any thread, until the move's
terminal completion) or through the destination during its own `submit()` call. Release,
`_allocate`, version bumps and moves of a participating carrier are refused with RuntimeError
from every thread and from every hook, including the hooks the move itself calls.

Each test here failed before claims were held by capability: the hooks' thread had the
move's claims lifted for it."""
import threading

import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor
from strideweave.carriers.extension import (CarrierDefinition, PreparedTransfer, TransferProvider,
                                            TransferRoute, register_carrier_definition)

from cells_storage import cells_storage
from list_carrier import ListCarrier
from output_filling_provider import OutputFilled, pending_move
from racing import accepts_release

D = sw.DType


def L(n):
    return Layout(Shape([n]), Stride([1]))


def cpu_tensor(values):
    c = CPU(len(values))
    for i, v in enumerate(values):
        c[i] = v
    return Tensor(c, 0, L(len(values)))


def values_of(t):
    return [t[i] for i in range(t.layout.size)]


# ----- a `_copy` hook that turns on its own move's carriers ------------------------------------

class _HookMove(sw.MoveOperation):
    """Runs `attempt(tensor, destination, output)` inside `_copy`, notes what it raised, then
    copies through `output` as a well-behaved hook does."""

    attempt = None
    refused: list = []

    def _copy(self, tensor, destination, output, element_count):
        try:
            type(self).attempt(tensor, destination, output)
        except RuntimeError as exc:
            type(self).refused.append(exc)
        for i in range(tensor.layout.size):
            output[i] = tensor[i]


class _Src(CPU):
    pass


class _Dst(CPU):
    pass


def _run_hook_move(attempt):
    _HookMove.attempt = staticmethod(attempt)
    _HookMove.refused = []
    t = Tensor(_Src(3), 0, L(3))
    for i, v in enumerate([1.0, 2.0, 3.0]):
        t.carrier[i] = v
    dst = _Dst(3)
    with sw.registered_move_operation(_Src, _Dst, _HookMove):
        with sw.no_grad():
            result = sw.move(t, dst)
    return t, dst, result, _HookMove.refused


def test_copy_hook_cannot_release_its_destination():
    t, dst, result, refused = _run_hook_move(lambda tensor, destination, output: destination.release())
    assert len(refused) == 1 and "pending move" in str(refused[0])
    assert not dst.is_released()
    assert values_of(result) == [1.0, 2.0, 3.0]
    assert t.carrier.is_released()


def test_copy_hook_cannot_release_its_source():
    t, dst, result, refused = _run_hook_move(lambda tensor, destination, output: tensor.carrier.release())
    assert len(refused) == 1
    assert values_of(result) == [1.0, 2.0, 3.0]


def test_copy_hook_cannot_move_its_source_again():
    t, dst, result, refused = _run_hook_move(lambda tensor, destination, output: sw.move(tensor, CPU(3)))
    assert len(refused) == 1 and "pending move" in str(refused[0])
    assert values_of(result) == [1.0, 2.0, 3.0]


def test_copy_hook_cannot_bump_a_participants_version():
    def bump(tensor, destination, output):
        destination._increment_version()
    t, dst, result, refused = _run_hook_move(bump)
    assert len(refused) == 1
    assert dst.version == 0


def test_copy_hook_cannot_write_its_destination_except_through_output():
    def write(tensor, destination, output):
        destination[0] = 7.0
    t, dst, result, refused = _run_hook_move(write)
    assert len(refused) == 1
    assert values_of(result) == [1.0, 2.0, 3.0]


def test_copy_hook_cannot_resize_a_participating_file():
    class _F(FileBacked):
        pass

    class Resizing(sw.MoveOperation):
        refused: list = []

        def _copy(self, tensor, destination, output, element_count):
            try:
                destination._allocate(0)
            except RuntimeError as exc:
                Resizing.refused.append(exc)
            for i in range(tensor.layout.size):
                output[i] = tensor[i]

    t = Tensor(_Src(2), 0, L(2))
    t.carrier[0], t.carrier[1] = 4.0, 5.0
    dst = _F(dtype=D.Float32)
    with sw.registered_move_operation(_Src, _F, Resizing):
        with sw.no_grad():
            result = sw.move(t, dst)
    assert len(Resizing.refused) == 1
    assert dst.size() == 2 and values_of(result) == [4.0, 5.0]


def test_a_refused_hook_that_raises_fails_the_move_and_keeps_the_source():
    class Raising(sw.MoveOperation):
        def _copy(self, tensor, destination, output, element_count):
            destination.release()

    t = Tensor(_Src(2), 0, L(2))
    t.carrier[0], t.carrier[1] = 4.0, 5.0
    dst = _Dst(2)
    with sw.registered_move_operation(_Src, _Dst, Raising):
        with sw.no_grad(), pytest.raises(RuntimeError, match="pending move"):
            sw.move(t, dst)
    assert not t.carrier.is_released() and values_of(t) == [4.0, 5.0]
    assert not dst.is_released() and accepts_release(dst)


# ----- the source's `_release()` at the commit -------------------------------------------------

def test_release_hook_at_commit_cannot_move_the_source_again():
    published = []
    refused = []

    class Reentrant(CPU):
        tensor = None

        def _release(self):
            try:
                published.append(sw.move(Reentrant.tensor, CPU(2)))
            except RuntimeError as exc:
                refused.append(exc)
            super()._release()

    src = Reentrant(2)
    src[0], src[1] = 4.0, 5.0
    t = Tensor(src, 0, L(2))
    Reentrant.tensor = t
    with sw.no_grad():
        result = sw.move(t, CPU(2))
    assert published == [] and len(refused) == 1 and "pending move" in str(refused[0])
    assert values_of(result) == [4.0, 5.0]
    assert src.is_released()


# ----- a source hook that releases its own carrier ---------------------------------------------

def test_get_value_cannot_release_its_own_carrier_during_a_move():
    refused = []

    class SelfReleasing(ListCarrier):
        def get_value(self, i):
            if i == 1:
                try:
                    self.release()
                except RuntimeError as exc:
                    refused.append(exc)
            return super().get_value(i)

    src = SelfReleasing([1.0, 2.0, 3.0])
    t = Tensor(src, 0, L(3))
    with sw.no_grad():
        result = sw.move(t, CPU(3))
    assert len(refused) == 1 and "pending move" in str(refused[0])
    assert values_of(result) == [1.0, 2.0, 3.0]
    assert src.is_released()  # by the commit, not by the hook


def test_get_value_whose_release_raises_fails_the_move_with_the_source_intact():
    class SelfReleasing(ListCarrier):
        def get_value(self, i):
            if i == 1:
                self.release()
            return super().get_value(i)

    src = SelfReleasing([1.0, 2.0, 3.0])
    t = Tensor(src, 0, L(3))
    dst = CPU(3)
    with sw.no_grad(), pytest.raises(RuntimeError, match="pending move"):
        sw.move(t, dst)
    assert not src.is_released() and src.values == [1.0, 2.0, 3.0]
    assert accepts_release(dst)


# ----- providers: request.output from any thread, the destination only during submit ----------

def test_an_asynchronous_provider_fills_the_destination_through_request_output():
    dst = CPU(3)
    t, handle, go, finish = pending_move([4.0, 5.0, 6.0], dst)
    finish.set()
    # Pending: nobody else writes the destination, whichever thread it is.
    with pytest.raises(RuntimeError, match="pending move"):
        dst[0] = 9.0
    outcome = []
    other = threading.Thread(target=lambda: outcome.append(_attempt_write(dst)))
    other.start()
    other.join(60)
    assert outcome == ["refused"]
    assert dst.version == 0
    go.set()
    result = handle.wait(timeout=60)
    assert values_of(result) == [4.0, 5.0, 6.0]
    assert t.carrier.is_released()


def _attempt_write(carrier):
    try:
        carrier[0] = 9.0
    except RuntimeError:
        return "refused"
    return "written"


def test_a_pending_providers_destination_refuses_the_callers_write():
    from gated_moves import GateCompletion, start
    completion = GateCompletion()
    t, dst, handle = start([4.0, 5.0], completion)
    with pytest.raises(RuntimeError, match="pending move"):
        dst[0] = 5.0
    assert dst.version == 0
    completion.gate.set()
    result = handle.wait(timeout=60)
    assert values_of(result) == [4.0, 5.0]


def test_transfer_request_output_is_none_outside_a_move():
    from strideweave.carriers.extension import TransferRequest
    c = OutputFilled(1, dtype=D.Float32)
    t = Tensor(c, 0, L(1))
    request = TransferRequest(t, CPU(1), OutputFilled, CPU, D.Float32, t.layout, 1)
    assert request.output is None


# ----- issue 22 item 6: every provider callback runs with graph construction off --------------

class _GradNoting:
    """A ProviderCompletion that notes the grad mode of the thread running `done`/`wait()`."""

    seen: list = []

    @property
    def done(self):
        _GradNoting.seen.append(("done", sw.is_grad_enabled()))
        return True

    def wait(self):
        _GradNoting.seen.append(("wait", sw.is_grad_enabled()))


class Noting(sw.Carrier):
    pass


def _prepare_noting(request):
    def submit():
        for k in range(request.physical_span):
            request.destination[k] = request.tensor.carrier.cells[request.tensor.offset + k]
        return _GradNoting()
    return PreparedTransfer(submit)


register_carrier_definition(Noting, CarrierDefinition(
    cells_storage(), transfers=(TransferRoute(Noting, CPU, "noting.to_cpu", TransferProvider(_prepare_noting)),)))


def test_a_provider_completion_is_waited_on_with_graph_construction_off():
    _GradNoting.seen = []
    c = Noting(2, dtype=D.Float32)
    c[0], c[1] = 1.0, 2.0
    with sw.no_grad():  # the reverse route (CPU -> Noting) does not exist
        result = sw.move(Tensor(c, 0, L(2)), CPU(2))
    assert values_of(result) == [1.0, 2.0]
    assert _GradNoting.seen and all(grad is False for _, grad in _GradNoting.seen), _GradNoting.seen
    assert sw.is_grad_enabled()
