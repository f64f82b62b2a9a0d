"""docs/spec/autograd-and-profiling.md §5 Backward traversal: the implicit cotangent,
cotangent validation, order, accumulation, saved versions, release and the all-or-nothing
decision."""
import pytest

import strideweave as sw
from strideweave import CPU, DType, Generic, Layout, Shape, Stride, Tensor

from python_operations import Twice
from slot_tensors import cpu, gen


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def slots_of(t):
    return [t.carrier[i] for i in range(t.carrier.size())]


@pytest.mark.parametrize("layout", [L([1, 1], [1, 1]), L([2], [1]), L([1, 2], [1, 1])])
def test_implicit_cotangent_needs_one_extent_one_leaf(layout):
    t = cpu([0.0] * layout.cosize, layout)
    with pytest.raises(ValueError):
        t.backward()
    assert t.grad is None


def test_implicit_cotangent_is_one_under_root_layout():
    t = cpu([0.0, 0.0, 0.0], L([1], [2]), offset=2)
    t.backward()
    assert t.grad.tolist() == [1.0] and t.grad.layout == L([1], [2]) and t.grad.offset == 0
    assert type(t.grad.carrier) is CPU


def test_root_cotangent_validation():
    inj = cpu([0] * 6, L([2, 3], [1, 2]))
    with pytest.raises(TypeError):
        inj.backward(1.0)
    with pytest.raises(ValueError):  # same shape, other injective layout
        inj.backward(cpu([0] * 6, L([2, 3], [3, 1])))
    inj.backward(cpu([1] * 6, L([2, 3], [1, 2])))
    bc = cpu([1, 2], L([4, 2], [0, 1]))
    bc.backward(cpu([1] * 8, L([4, 2], [2, 1])))  # any injective layout of the shape
    with pytest.raises(ValueError):
        bc.backward(cpu([1] * 2, L([4, 2], [0, 1])))  # not injective
    with pytest.raises(ValueError):
        bc.backward(cpu([1] * 8, L([8], [1])))  # wrong shape
    other = cpu([1, 2, 3, 4, 5], L([4, 2], [1, 1]))
    with pytest.raises(ValueError):
        other.backward(cpu([1] * 8, L([4, 2], [1, 4])))


def test_add_of_same_tensor_receives_both_contributions():
    x = cpu([1, 2], L([2], [1]))
    sw.sum(x + x).backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_diamond_runs_each_node_once_after_all_consumers():
    x = cpu([1, 2], L([2], [1]))
    Twice.calls = 0
    shared = Twice().forward(x)
    d = sw.add(sw.mul(shared, 3.0), sw.mul(shared, 5.0))
    sw.sum(d).backward()
    assert Twice.calls == 1
    assert x.grad.tolist() == [16.0, 16.0]


def test_node_returning_wrong_length_or_layout_fails():
    x = cpu([1, 2], L([2], [1]))

    class Bad(sw.Operation):
        def __init__(self, result):
            super().__init__()
            self.result = result

        def _forward(self, x):
            return sw.mul(x, 1.0)

        def backward(self, gradient):
            return self.result

    with pytest.raises(ValueError):
        sw.sum(Bad(()).forward(x)).backward()
    with pytest.raises(ValueError):
        sw.sum(Bad((cpu([1, 1], L([1, 2], [1, 1])),)).forward(x)).backward()
    with pytest.raises(TypeError):
        sw.sum(Bad((1.0,)).forward(x)).backward()
    assert x.grad is None


def test_none_entries_and_non_differentiable_inputs_are_skipped():
    x = cpu([1, 2], L([2], [1]))
    i = Tensor(CPU(2, dtype=DType.Int32), 0, L([2], [1]))

    class Mixed(sw.Operation):
        def _forward(self, x, i, y):
            return sw.mul(x, 1.0)

        def backward(self, gradient):
            return (None, "ignored: non-differentiable", sw.mul(gradient, 1.0))

    y = cpu([5, 6], L([2], [1]))
    upstream = sw.mul(x, 2.0)
    out = Mixed().forward(upstream, i, y)
    root = sw.sum(out)
    root.backward()
    assert x.grad is None  # upstream got no cotangent, so its node did not run
    assert y.grad.tolist() == [1.0, 1.0]
    # Every discovered node was released, even the one that got no cotangent.
    assert upstream.autograd_ctx.inputs() == ()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        sw.sum(upstream).backward()


def test_all_or_nothing_on_node_failure():
    a = cpu([1, 2], L([2], [1]))
    b = cpu([3, 4], L([2], [1]))

    class Fails(sw.Operation):
        fail = True

        def _forward(self, t):
            return sw.mul(t, 1.0)

        def backward(self, gradient):
            if Fails.fail:
                raise ArithmeticError("boom")
            return (sw.mul(gradient, 1.0),)

    root = sw.add(sw.mul(a, 2.0), Fails().forward(b))
    a.grad = cpu([100, 100], L([2], [1]))
    before = a.grad
    with pytest.raises(ArithmeticError):
        sw.sum(root).backward()
    assert a.grad is before and b.grad is None
    Fails.fail = False
    sw.sum(root).backward()  # nothing was released by the failure
    assert a.grad.tolist() == [102.0, 102.0] and b.grad.tolist() == [1.0, 1.0]


def test_accumulation_across_graphs_until_reset():
    x = cpu([1, 2], L([2], [1]))
    sw.sum(sw.mul(x, 2.0)).backward()
    sw.sum(sw.mul(x, 3.0)).backward()
    assert x.grad.tolist() == [5.0, 5.0]
    first = x.grad
    sw.sum(x).backward()
    assert x.grad is not first and first.tolist() == [5.0, 5.0]  # fresh, not in place
    x.grad = None
    sw.sum(x).backward()
    assert x.grad.tolist() == [1.0, 1.0]


def test_gapped_leaf_gradient_keeps_layout_with_zero_holes():
    g = cpu([float(v) for v in range(10)], L([2, 3], [1, 4]), offset=0)
    sw.sum(sw.mul(g, 2.0)).backward()
    assert g.grad.layout == L([2, 3], [1, 4]) and g.grad.offset == 0
    assert slots_of(g.grad) == [2.0, 2.0, 0.0, 0.0, 2.0, 2.0, 0.0, 0.0, 2.0, 2.0]


def test_gradient_storage_is_the_exact_carrier_class():
    class MyCPU(CPU):
        pass

    x = cpu([1, 2], L([2], [1]), cls=MyCPU)
    sw.sum(sw.mul(x, 2.0)).backward()
    assert type(x.grad.carrier) is MyCPU
    y = gen([1.0, 2.0], L([2], [1]))
    sw.sum(sw.mul(y, 2.0)).backward()
    assert type(y.grad.carrier) is Generic and y.grad.tolist() == [2.0, 2.0]


def test_leaf_gradient_after_its_carrier_was_released():
    x = cpu([1, 2], L([2], [1]))
    c = cpu([1, 1], L([2], [1]))
    s = sw.sum(sw.add(x, c))
    x.carrier.release()
    s.backward()  # add's backward does not read its inputs
    assert type(x.grad.carrier) is CPU and x.grad.tolist() == [1.0, 1.0]


def test_reading_a_released_saved_input_raises():
    a = cpu([1, 2], L([2], [1]))
    b = cpu([3, 4], L([2], [1]))
    s = sw.sum(a * b)
    a.carrier.release()
    with pytest.raises(RuntimeError):
        s.backward()
    assert b.grad is None


def test_view_source_write_is_detected():
    x = cpu([1, 2], L([2], [1]))
    view = x[0:2]
    s = sw.sum(view * view)
    x[1] = 7.0  # write through the view's source
    with pytest.raises(RuntimeError, match="in-place modification"):
        s.backward()


def test_retained_root_receives_its_own_cotangent():
    x = cpu([1, 2], L([2], [1]))
    m = sw.mul(x, 3.0)
    m.retain_grad()
    m.backward(cpu([1, 2], L([2], [1])))
    assert m.grad.tolist() == [1.0, 2.0]
    assert x.grad.tolist() == [3.0, 6.0]


def test_release_reaches_from_any_root():
    x = cpu([1, 2], L([2], [1]))
    shared = sw.mul(x, 2.0)
    y1, y2 = sw.sum(shared), sw.sum(sw.mul(shared, 1.0))
    y1.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y2.backward()


def test_recording_is_disabled_while_a_node_backward_runs():
    x = cpu([1, 2], L([2], [1]))
    seen = {}

    class Probe(sw.Operation):
        def _forward(self, x):
            return sw.mul(x, 1.0)

        def backward(self, gradient):
            seen["enabled"] = sw.is_grad_enabled()
            result = sw.add(gradient, gradient)
            seen["ctx"] = result.autograd_ctx
            return (result,)

    sw.sum(Probe().forward(x)).backward()
    assert seen == {"enabled": False, "ctx": None}
    assert sw.is_grad_enabled()
    assert x.grad.tolist() == [2.0, 2.0]


def test_generic_graph():
    x = gen([1.0, 2.0, 3.0], L([3], [1]))
    y = gen([4.0, 5.0, 6.0], L([3], [1]))
    s = sw.sum(x * y + x)
    assert s.tolist() == [1 * 4 + 2 * 5 + 3 * 6 + 6.0]
    s.backward()
    assert x.grad.tolist() == [5.0, 6.0, 7.0] and y.grad.tolist() == [1.0, 2.0, 3.0]
