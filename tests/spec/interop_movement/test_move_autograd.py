"""docs/spec/interop-movement.md, "Requirement: Move participates in autograd across the carrier boundary"."""
import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Layout, Shape, Stride

from gated_moves import PREPARED, gated_tensor
from move_sources import cpu_tensor

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_move_attaches_one_node_and_backward_returns_to_the_source_class():
    x = cpu_tensor([1.0, 2.0, 3.0])
    moved = sw.move(x, FileBacked(dtype=D.Float32))
    node = moved.autograd_ctx
    assert isinstance(node, sw.CpuToFileBackedMoveOperation) and node.inputs() == (x,)
    back = sw.move(moved, CPU(3))
    assert isinstance(back.autograd_ctx, sw.FileBackedToCpuMoveOperation)
    y = sw.sum(back * back)
    y.backward()
    assert type(x.grad.carrier) is CPU and x.grad.tolist() == [2.0, 4.0, 6.0]
    assert x.grad.autograd_ctx is None and x.grad.layout == x.layout


def test_move_backward_directly():
    x = cpu_tensor([1.0, 2.0])
    moved = sw.move(x, FileBacked(dtype=D.Float32))
    g = cpu_tensor([5.0, 6.0])
    with sw.no_grad():
        g_file = sw.move(g, FileBacked(dtype=D.Float32))
    (grad,) = moved.autograd_ctx.backward(g_file)
    assert type(grad.carrier) is CPU and grad.tolist() == [5.0, 6.0] and grad.layout == x.layout
    assert not g_file.carrier.is_released()  # the caller's cotangent is not consumed
    assert grad.autograd_ctx is None


def test_move_backward_checks_its_cotangent():
    x = cpu_tensor([1.0, 2.0])
    moved = sw.move(x, CPU(2))
    node = moved.autograd_ctx
    with pytest.raises(TypeError):
        node.backward([1.0, 2.0])
    with pytest.raises(ValueError):
        node.backward(cpu_tensor([1.0, 2.0, 3.0]))
    broadcast = sw.broadcast_to(cpu_tensor([1.0], L([1], [1])), Shape([2]))
    with pytest.raises(ValueError, match="injective"):
        node.backward(broadcast)
    gone = cpu_tensor([1.0, 2.0])
    gone.carrier.release()
    with pytest.raises(RuntimeError):
        node.backward(gone)


def test_moved_broadcast_view_hands_an_injective_gradient_to_the_broadcast_node():
    x = cpu_tensor([1.0, 2.0], L([2, 1], [1, 2]))
    b = sw.broadcast_to(x, Shape([2, 3]))
    moved = sw.move(b, FileBacked(dtype=D.Float32))
    (g,) = moved.autograd_ctx.backward(sw.Tensor(FileBacked(dtype=D.Float32).new_like([1.0] * 6), 0,
                                                 Layout.canonical(Shape([2, 3]))))
    assert g.layout == Layout.canonical(Shape([2, 3])) and type(g.carrier) is CPU and g.tolist() == [1.0] * 6
    back = sw.move(moved, CPU(2))
    sw.sum(back).backward()
    assert x.grad.tolist() == [3.0, 3.0] and x.grad.layout == x.layout


def test_no_node_without_graph_construction():
    x = cpu_tensor([1.0])
    with sw.no_grad():
        r = sw.move(x, CPU(1))
    assert r.autograd_ctx is None
    i = cpu_tensor([1], dtype=D.Int32)
    assert sw.move(i, CPU(1, dtype=D.Int32)).autograd_ctx is None


def test_move_is_not_an_in_place_mutation_of_the_destination():
    x = cpu_tensor([1.0, 2.0])
    dest = CPU(2)
    r = sw.move(x, dest)
    assert dest.version == 0
    sw.sum(r * 2.0).backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_move_backward_accepts_a_cotangent_on_any_carrier_class():
    x = cpu_tensor([1.0, 2.0])
    moved = sw.move(x, FileBacked(dtype=D.Float32))
    (grad,) = moved.autograd_ctx.backward(cpu_tensor([3.0, 4.0]))
    assert type(grad.carrier) is CPU and grad.tolist() == [3.0, 4.0]


def test_reject_a_differentiable_one_way_route_before_submission():
    calls = []
    t = gated_tensor([1.0, 2.0])

    original = PREPARED[:]
    PREPARED.clear()
    try:
        PREPARED.append(None)
        with pytest.raises(NotImplementedError, match="CPU.*Gated|Gated.*CPU"):
            sw.move_async(t, CPU(2))  # graph construction is on; (CPU, Gated) has no route
        calls.append(len(PREPARED))
    finally:
        PREPARED[:] = original
    assert calls == [1]  # prepare never ran: the reverse route is resolved first
    assert not t.carrier.is_released()
