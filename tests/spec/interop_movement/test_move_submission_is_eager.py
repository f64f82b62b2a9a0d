"""docs/spec/interop-movement.md, "Requirement: Move submission is eager but does not force host synchronization",
and the protection of the participants while the move is pending."""
import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor

from gated_moves import GateCompletion, gated_tensor, start

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_return_while_a_transfer_is_pending_and_protect_participants():
    completion = GateCompletion()
    t, dest, handle = start([1.0, 2.0, 3.0], completion)
    source = t.carrier
    assert isinstance(handle, sw.AwaitMove) and handle.done is False
    # reads continue; mutation, release and another move of a participant fail
    assert t[1] == 2.0
    with pytest.raises(RuntimeError):
        t[0] = 9.0
    with pytest.raises(RuntimeError):
        source.release()
    with pytest.raises(RuntimeError):
        sw.move_async(t, CPU(3))
    # The destination is protected as well: a provider's own threads fill it through
    # `request.output` (issue 21), so nobody else writes it while the move is pending.
    with pytest.raises(RuntimeError, match="pending move"):
        dest[0] = 5.0
    with pytest.raises(RuntimeError):
        dest.release()
    with pytest.raises(RuntimeError):
        sw.move_async(Tensor(dest, 0, L(3, 1)), CPU(3))
    assert source.version == 3 and not source.is_released()
    completion.gate.set()
    result = handle.wait()
    assert handle.done is True
    assert result.carrier is dest and result.tolist() == [1.0, 2.0, 3.0]
    assert source.is_released() and dest.version == 0
    dest[0] = 5.0  # the claim is gone
    assert handle.wait() is result


def test_immediate_provider_completes_before_returning():
    t = gated_tensor([3.0])
    with sw.no_grad():
        handle = sw.move_async(t, CPU(1))
    assert handle.done and handle.wait().tolist() == [3.0]


def test_a_large_file_move_returns_before_the_copy_finishes_and_completes():
    n = 1 << 22
    c = CPU(n)
    c[n - 1] = 3.0
    t = Tensor(c, 0, L(n, 1))
    dest = FileBacked(dtype=D.Float32)
    with sw.no_grad():
        handle = sw.move_async(t, dest)
    r = handle.wait()
    assert r[n - 1] == 3.0 and c.is_released()
    dest.release()
