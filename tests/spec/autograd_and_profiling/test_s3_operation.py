"""docs/spec/autograd-and-profiling.md §3 `Operation`, the autograd node: forward's steps,
saved inputs and version tokens, ctx, the base backward, and graph release."""
import pytest

import strideweave as sw
from strideweave import CPU, DType, Layout, Shape, Stride, Tensor

from python_operations import Twice
from slot_tensors import cpu


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_operation_forward_records_inputs_versions_and_ctx():
    a = cpu([1, 2], L([2], [1]))
    b = cpu([3, 4], L([2], [1]))
    op = Twice()
    out = op.forward(a, b, 3.0)
    assert out.autograd_ctx is op
    assert op.inputs() == (a, b)
    assert op.ctx == {"scale": 3.0}
    v = op.input_versions()
    assert len(v) == 2 and hash(v) is not None  # immutable, hashable tokens
    assert out.tolist() == [6.0, 10.0]
    # Each occurrence is saved, in order.
    op2 = Twice()
    op2.forward(a, a)
    assert op2.inputs() == (a, a)


def test_operation_forward_keywords():
    a = cpu([1], L([1], [1]))
    assert Twice().forward(a, options={"accumulator_dtype": None}).tolist() == [2.0]
    with pytest.raises(TypeError):
        Twice().forward(a, scale=4.0)


def test_operation_without_forward_or_tensor_result_raises_type_error():
    a = cpu([1], L([1], [1]))

    class NoForward(sw.Operation):
        pass

    class NotATensor(sw.Operation):
        def _forward(self, a):
            return 3.0

    with pytest.raises(TypeError):
        NoForward().forward(a)
    op = NotATensor()
    with pytest.raises(TypeError):
        op.forward(a)
    assert op.inputs() == ()


def test_base_operation_backward_raises_runtime_error():
    with pytest.raises(RuntimeError):
        sw.Operation().backward(None)
    assert sw.Operation().inputs() == () and sw.Operation().input_versions() == ()
    assert sw.Operation().ctx == {}


def test_validate_input_versions_detects_public_mutation():
    a = cpu([1, 2], L([2], [1]))
    op = Twice()
    op.forward(a)
    op.validate_input_versions()
    a[1] = 9.0
    with pytest.raises(RuntimeError, match="in-place modification"):
        op.validate_input_versions()


def test_no_recording_without_differentiable_input_or_grad_mode():
    i = Tensor(CPU(2, dtype=DType.Int32), 0, L([2], [1]))
    op = Twice()
    out = op.forward(i, None, 2)
    assert op.inputs() == () and out.autograd_ctx is None and out.tolist() == [0, 0]
    a = cpu([1, 2], L([2], [1]))
    with sw.no_grad():
        op = Twice()
        out = op.forward(a)
    assert op.inputs() == () and op.input_versions() == () and out.autograd_ctx is None


def test_non_differentiable_result_clears_saved_inputs():
    a = cpu([1, 2], L([2], [1]))

    class ToInt(sw.Operation):
        def _forward(self, a):
            return Tensor(CPU(2, dtype=DType.Int32), 0, L([2], [1]))

    op = ToInt()
    out = op.forward(a)
    assert out.autograd_ctx is None and op.inputs() == () and op.input_versions() == ()


def test_graph_release_keeps_node_attached():
    a = cpu([1, 2], L([2], [1]))
    s = sw.sum(sw.mul(a, 2.0))
    node = s.autograd_ctx
    s.backward()
    assert s.autograd_ctx is node
    assert node.inputs() == () and node.input_versions() == () and node.ctx == {}
