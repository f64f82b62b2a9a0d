"""docs/spec/autograd-and-profiling.md §4 Tensor surface: is_differentiable, `.grad`,
`.autograd_ctx`, retain_grad and backward's arguments."""
import pytest

import strideweave as sw
from strideweave import CPU, DType, Layout, Shape, Stride, Tensor

from slot_tensors import cpu, gen


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_is_differentiable_by_logical_dtype():
    assert cpu([1], L([1], [1])).is_differentiable()
    assert gen([1.0], L([1], [1])).is_differentiable()  # Floating
    assert gen([1.0], L([1], [1]), DType.Float32).is_differentiable()
    assert not Tensor(CPU(1, dtype=DType.Int32), 0, L([1], [1])).is_differentiable()
    assert not Tensor(CPU(1, dtype=DType.Bool), 0, L([1], [1])).is_differentiable()
    assert not gen([1], L([1], [1]), DType.Any).is_differentiable()


def test_grad_property_rules():
    a = cpu([1], L([1], [1]))
    assert a.grad is None
    g = cpu([2], L([1], [1]))
    a.grad = g
    assert a.grad is g
    a.grad = None
    assert a.grad is None
    with pytest.raises(TypeError):
        a.grad = 1.0
    i = Tensor(CPU(1, dtype=DType.Int32), 0, L([1], [1]))
    i.grad = None
    with pytest.raises(RuntimeError):
        i.grad
    with pytest.raises(RuntimeError):
        i.grad = g


def test_autograd_ctx_property_rules():
    a = cpu([1], L([1], [1]))
    assert a.autograd_ctx is None
    op = sw.Operation()
    a.autograd_ctx = op
    assert a.autograd_ctx is op
    a.autograd_ctx = None
    with pytest.raises(TypeError):
        a.autograd_ctx = "node"
    i = Tensor(CPU(1, dtype=DType.Int32), 0, L([1], [1]))
    i.autograd_ctx = None
    with pytest.raises(RuntimeError):
        i.autograd_ctx = op


def test_retain_grad_rules():
    a = cpu([1, 2], L([2], [1]))
    m = sw.mul(a, 3.0)
    assert m.retain_grad() is None
    sw.sum(m).backward()
    assert m.grad.tolist() == [1.0, 1.0]
    m2 = sw.mul(a, 3.0)
    m2.retain_grad()
    m2.retain_grad(False)
    sw.sum(m2).backward()
    assert m2.grad is None
    with pytest.raises(RuntimeError):
        Tensor(CPU(1, dtype=DType.Int32), 0, L([1], [1])).retain_grad()


def test_backward_argument_errors():
    a = cpu([1], L([1], [1]))
    with pytest.raises(TypeError):
        a.backward(create_graph=True)
    with pytest.raises(TypeError):
        a.backward(inputs=[a])
    with pytest.raises(RuntimeError):
        Tensor(CPU(1, dtype=DType.Int32), 0, L([1], [1])).backward()
    from strideweave.core.representation import PLANAR_FLOAT32_PAIR, Subtensor, tensor_from_subtensors

    f = DType.Float32
    multi = tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [Subtensor(f, CPU(2), 0, L([2], [1])),
                                                         Subtensor(f, CPU(2), 0, L([2], [1]))],
                                   [L([2], [1])])
    with pytest.raises(NotImplementedError):
        multi.backward()
    assert a.grad is None


def test_gradients_are_detached():
    a = cpu([1, 2], L([2], [1]))
    sw.sum(sw.mul(a, a)).backward()
    assert a.grad.autograd_ctx is None
