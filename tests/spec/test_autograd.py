"""Autograd: the Operation node (§3), Tensor surface (§4), traversal (§5), grad mode (§6) and
the worked example (§8) of autograd-and-profiling.md."""
import threading

import numpy as np
import pytest

import strideweave as sw
from strideweave import CPU, DType, Generic, Layout, Shape, Stride, Tensor


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def cpu(slots, layout, offset=0, cls=CPU):
    """A CPU Float32 tensor over exactly `slots` (raw storage order)."""
    c = cls(len(slots))
    for i, v in enumerate(slots):
        c[i] = v
    return Tensor(c, offset, layout)


def gen(slots, layout, dtype=DType.Floating):
    return Tensor(Generic(slots, dtype=dtype), 0, layout)


def rows(t):
    """[[t[i, j] for j] for i] of a rank-2 tensor."""
    n0, n1 = t.layout.shape.top_level
    return [[t[i, j] for j in range(n1)] for i in range(n0)]


def slots_of(t):
    return [t.carrier[i] for i in range(t.carrier.size())]


# ----- §8 worked example -----------------------------------------------------------------------
@pytest.fixture
def example():
    x = cpu([1, 2, 3], L([1, 3], [1, 1]))
    w = cpu([10, 1, 20, 2, 30, 3], L([2, 3], [1, 2]))
    b = sw.broadcast_to(x, Shape([2, 3]))
    p = b * w
    y = sw.sum(p)
    return x, w, b, p, y


def test_example_forward(example):
    x, w, b, p, y = example
    assert b.layout == L([2, 3], [0, 1])
    assert b.carrier is x.carrier and b.offset == x.offset
    assert y.tolist() == [154.0]
    assert y.layout == L([1], [1])


def test_example_backward(example):
    x, w, b, p, y = example
    assert y.backward() is None
    assert x.grad.tolist() == [11.0, 22.0, 33.0]
    assert x.grad.layout == L([1, 3], [1, 1])
    assert rows(w.grad) == [[1, 2, 3], [1, 2, 3]]
    assert w.grad.layout == w.layout
    assert b.grad is None and p.grad is None and y.grad is None


def test_example_retained_broadcast_grad_is_aggregated_per_slot(example):
    x, w, b, p, y = example
    b.retain_grad()
    y.backward()
    assert rows(b.grad) == [[11, 22, 33], [11, 22, 33]]
    assert b.grad.layout == L([2, 3], [1, 2])
    # The broadcast node still received the unaggregated cotangent.
    assert x.grad.tolist() == [11.0, 22.0, 33.0]


def test_example_second_backward_names_retain_graph(example):
    *_, y = example
    y.backward()
    with pytest.raises(RuntimeError, match=r"retain_graph=True"):
        y.backward()


def test_example_retain_graph_twice_accumulates(example):
    x, *_, y = example
    y.backward(retain_graph=True)
    y.backward(retain_graph=True)
    assert x.grad.tolist() == [22.0, 44.0, 66.0]


def test_example_in_place_write_rejects_backward_without_effects(example):
    x, w, b, p, y = example
    b.retain_grad()
    w[0, 0] = 5.0
    with pytest.raises(RuntimeError, match="in-place modification"):
        y.backward()
    assert x.grad is None and w.grad is None and b.grad is None
    # Nothing was released either.
    assert y.autograd_ctx.inputs() == (p,)
    assert p.autograd_ctx.inputs() == (b, w)


def test_example_dlpack_foreign_write_is_not_detected(example):
    x, w, b, p, y = example
    version = w.version
    array = np.from_dlpack(w)
    array[0, 0] = 5.0
    assert w.version == version and w[0, 0] == 5.0
    y.backward()
    assert x.grad.tolist() == [6.0, 22.0, 33.0]


def test_example_pointer_foreign_write_is_not_detected(example):
    import ctypes

    x, w, b, p, y = example
    slot = w.offset + w.layout.index([0, 0])
    ctypes.c_float.from_address(w.carrier.pointer() + 4 * slot).value = 5.0
    y.backward()
    assert x.grad.tolist() == [6.0, 22.0, 33.0]


def test_example_broadcast_leaf_gradient_sums_per_storage_slot():
    z = cpu([7, 8], L([4, 2], [0, 1]))
    c = cpu([float(v) for v in range(8)], L([4, 2], [1, 4]))  # c[k, j] = k + 4j
    z.backward(c)
    assert z.grad.layout == L([4, 2], [1, 4])
    for i in range(4):
        for j in range(2):
            assert z.grad[i, j] == sum(c[k, j] for k in range(4))


# ----- §3 Operation ------------------------------------------------------------------------------
class Twice(sw.Operation):
    """A Python-level node: 2·a (+ b), saving every positional Tensor."""

    calls = 0

    def _forward(self, a, b=None, scale=2.0):
        self.ctx["scale"] = scale
        out = sw.mul(a, scale)
        return out if b is None else sw.add(out, b)

    def backward(self, gradient):
        type(self).calls += 1
        grads = [sw.mul(gradient, self.ctx["scale"])]
        if len(self.inputs()) == 2:
            grads.append(sw.add(gradient, sw.mul(gradient, 0.0)))
        return tuple(grads)


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


# ----- §4 Tensor surface ------------------------------------------------------------------------
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


# ----- §5 traversal ------------------------------------------------------------------------------
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


# ----- §6 grad mode --------------------------------------------------------------------------------
def test_grad_mode_set_and_restore():
    assert sw.is_grad_enabled() is True
    assert sw.set_grad_enabled(False) is None
    try:
        assert sw.is_grad_enabled() is False
    finally:
        sw.set_grad_enabled(True)
    with pytest.raises(TypeError):
        sw.set_grad_enabled(1)
    assert sw.is_grad_enabled()


def test_no_grad_nesting_and_exceptions():
    with sw.no_grad():
        assert not sw.is_grad_enabled()
        with sw.no_grad():
            assert not sw.is_grad_enabled()
        assert not sw.is_grad_enabled()
    assert sw.is_grad_enabled()
    with pytest.raises(KeyError):
        with sw.no_grad():
            raise KeyError("x")
    assert sw.is_grad_enabled()
    sw.set_grad_enabled(False)
    try:
        with sw.no_grad():
            pass
        assert not sw.is_grad_enabled()  # restores the state seen at entry
    finally:
        sw.set_grad_enabled(True)


def test_grad_mode_is_thread_local():
    seen = []
    inside = threading.Event()
    release = threading.Event()

    def other():
        inside.wait()
        seen.append(sw.is_grad_enabled())
        release.set()

    t = threading.Thread(target=other)
    t.start()
    with sw.no_grad():
        inside.set()
        release.wait()
        assert not sw.is_grad_enabled()
    t.join()
    assert seen == [True]


def test_results_under_no_grad_are_leaves():
    x = cpu([1, 2], L([2], [1]))
    with sw.no_grad():
        y = sw.mul(x, 2.0)
        b = sw.broadcast_to(cpu([1], L([1], [1])), Shape([3]))
    assert y.autograd_ctx is None and b.autograd_ctx is None
    sw.sum(y).backward()
    assert y.grad.tolist() == [1.0, 1.0] and x.grad is None
