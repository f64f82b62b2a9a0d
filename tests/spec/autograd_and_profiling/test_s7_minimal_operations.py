"""docs/spec/autograd-and-profiling.md §7 Minimal operations: the binary validation
order, executors, results, sum, broadcast_to and every operation's gradient."""
import pytest

import strideweave as sw
from strideweave import CPU, DType, FileBacked, Generic, Layout, Shape, Stride, Tensor
import strideweave.operation as op


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def cpu(slots, layout, offset=0):
    c = CPU(len(slots))
    for i, v in enumerate(slots):
        c[i] = v
    return Tensor(c, offset, layout)


def gen(slots, layout, dtype=DType.Floating):
    return Tensor(Generic(slots, dtype=dtype), 0, layout)


def by_coordinate(t):
    return [t[k] for k in range(t.size())]


# ----- binary validation order -------------------------------------------------------------------

def test_non_tensor_operand_is_type_error():
    a = cpu([1, 2], L([2], [1]))
    for call in (lambda: a + 1, lambda: sw.add(a, 1.0), lambda: sw.add(1.0, a),
                 lambda: sw.elementwise_mul(a, 2.0), lambda: sw.mul(2.0, a)):
        with pytest.raises(TypeError):
            call()


def test_released_before_class_before_shape():
    a = cpu([1, 2], L([2], [1]))
    dead = cpu([1, 2], L([2], [1]))
    dead.carrier.release()
    g3 = gen([1.0, 2.0, 3.0], L([3], [1]))
    with pytest.raises(TypeError):  # non-Tensor wins over released
        sw.add(dead, 1)
    with pytest.raises(RuntimeError):  # released wins over class mismatch
        sw.add(dead, g3)
    with pytest.raises(RuntimeError):
        sw.mul(dead, 2.0)
    with pytest.raises(TypeError):  # class mismatch wins over shape mismatch
        sw.add(a, g3)
    with pytest.raises(ValueError):
        sw.add(a, cpu([1, 2, 3], L([3], [1])))
    with pytest.raises(ValueError):
        sw.elementwise_mul(a, cpu([1, 2], L([1, 2], [1, 1])))


def test_exact_carrier_class_is_required():
    class MyCPU(CPU):
        pass

    a = cpu([1, 2], L([2], [1]))
    b = Tensor(MyCPU(2), 0, L([2], [1]))
    with pytest.raises(TypeError):
        sw.add(a, b)


def test_strides_may_differ():
    a = cpu([1, 2, 3, 4, 5, 6], L([2, 3], [1, 2]))
    b = cpu([10, 20, 30, 40, 50, 60], L([2, 3], [3, 1]))
    r = a + b
    assert by_coordinate(r) == [a[k] + b[k] for k in range(6)]


def test_result_is_fresh_canonical_first_operand_class():
    # Hierarchical, gapped and offset inputs: [2,[3,4]]:[1,[10,100]] at offset 3.
    lay = L([2, [3, 4]], [1, [10, 100]])
    a = cpu([float(i) for i in range(3 + lay.cosize)], lay, offset=3)
    b = cpu([float(i % 7) for i in range(24)], L([2, [3, 4]], [12, [1, 3]]))
    for r, f in ((a + b, lambda x, y: x + y), (sw.elementwise_mul(a, b), lambda x, y: x * y),
                 (a * b, lambda x, y: x * y)):
        assert type(r.carrier) is CPU and r.carrier is not a.carrier and r.offset == 0
        assert r.layout == L([2, [3, 4]], [1, [2, 6]]) == Layout.canonical(lay.shape)
        assert r.dtype() is DType.Float32
        assert by_coordinate(r) == [f(a[k], b[k]) for k in range(24)]


def test_elementwise_mul_and_mul_agree():
    a = cpu([1.5, 2, 3], L([3], [1]))
    b = cpu([2, 4, 0.5], L([3], [1]))
    assert sw.elementwise_mul(a, b).tolist() == sw.mul(a, b).tolist() == (a * b).tolist() == [3.0, 8.0, 1.5]


def test_scalar_multiplication():
    a = cpu([1, 2, 3], L([3], [1]))
    assert (a * 2.5).tolist() == [2.5, 5.0, 7.5]
    assert (2.5 * a).tolist() == [2.5, 5.0, 7.5]
    assert sw.mul(a, 2).tolist() == [2.0, 4.0, 6.0]
    with pytest.raises(TypeError):
        a * "x"
    with pytest.raises(TypeError):
        sw.mul(a, None)
    s = a * 3.0
    assert s.autograd_ctx.inputs() == (a,)
    sw.sum(s).backward()
    assert a.grad.tolist() == [3.0, 3.0, 3.0]


def test_float32_rounding():
    a = cpu([0.1], L([1], [1]))
    b = cpu([0.2], L([1], [1]))
    import struct

    f32 = lambda v: struct.unpack("f", struct.pack("f", v))[0]  # noqa: E731
    assert (a + b).tolist() == [f32(f32(0.1) + f32(0.2))]
    assert (a * (1 / 3)).tolist() == [f32(f32(0.1) * (1 / 3))]


def test_filebacked_refuses_computation():
    fb = FileBacked(dtype=DType.Float32).new_like([1.0, 2.0])
    t = Tensor(fb, 0, L([2], [1]))
    for call in (lambda: t + t, lambda: t * t, lambda: t * 2.0, lambda: sw.sum(t)):
        with pytest.raises(NotImplementedError):
            call()
    # broadcast_to is a view, not computation.
    v = sw.broadcast_to(Tensor(fb, 0, L([1], [1])), Shape([3]))
    assert v.carrier is fb and v.tolist() == [1.0, 1.0, 1.0]


def test_multi_subtensor_is_refused():
    from strideweave.core.representation import PLANAR_FLOAT32_PAIR, Subtensor, tensor_from_subtensors

    f = DType.Float32
    m = tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [Subtensor(f, CPU(2), 0, L([2], [1])),
                                                     Subtensor(f, CPU(2), 0, L([2], [1]))], [L([2], [1])])
    for call in (lambda: sw.add(m, m), lambda: sw.mul(m, 2.0), lambda: sw.sum(m),
                 lambda: sw.broadcast_to(m, Shape([2]))):
        with pytest.raises(NotImplementedError, match="multi-subtensor"):
            call()


# ----- Generic executor ---------------------------------------------------------------------------

def test_generic_operations_and_dtypes():
    x = gen([1.0, 2.0], L([2], [1]))
    y = gen([3.0, 5.0], L([2], [1]))
    for r in (x + y, x * y, x * 2, sw.sum(x)):
        assert type(r.carrier) is Generic and r.dtype() is DType.Floating and r.offset == 0
    assert (x + y).tolist() == [4.0, 7.0] and (x * y).tolist() == [3.0, 10.0]
    assert sw.sum(x).tolist() == [3.0]
    f = gen([0.1, 0.2], L([2], [1]), DType.Float32)
    assert (f + f).dtype() is DType.Float32


def test_int32_operations_are_not_differentiable():
    c = CPU(3, dtype=DType.Int32)
    for i, v in enumerate([1, 2, 3]):
        c[i] = v
    t = Tensor(c, 0, L([3], [1]))
    s = sw.sum(t + t)
    assert s.tolist() == [12] and s.dtype() is DType.Int32 and s.autograd_ctx is None
    with pytest.raises(TypeError):
        t * 0.5
    with pytest.raises(TypeError):
        t + cpu([1, 2, 3], L([3], [1]))  # dtypes differ


def test_bool_has_no_arithmetic():
    t = Tensor(CPU(2, dtype=DType.Bool), 0, L([2], [1]))
    with pytest.raises(NotImplementedError):
        t + t


# ----- sum ---------------------------------------------------------------------------------------------

def test_sum_any_layout():
    lay = L([2, [3, 4]], [1, [10, 100]])
    t = cpu([float(i) for i in range(lay.cosize)], lay)
    s = sw.sum(t)
    assert s.layout == L([1], [1]) and s.offset == 0
    assert s.tolist() == [float(sum(t[k] for k in range(24)))]
    assert sw.sum(cpu([2.5], L([4], [0]))).tolist() == [10.0]  # each coordinate counts
    assert sw.sum(cpu([7.0], Layout(Shape(), Stride()))).tolist() == [7.0]


def test_sum_accumulates_beyond_float32():
    t = cpu([2.0 ** 24] + [1.0] * 16, L([17], [1]))
    assert sw.sum(t).tolist() == [2.0 ** 24 + 16]


def test_sum_backward_fills_every_coordinate():
    t = cpu([1, 2, 3, 4, 5, 6], L([2, 3], [3, 1]))
    sw.sum(t).backward(cpu([4.0], L([1], [1])))
    assert t.grad.layout == t.layout and by_coordinate(t.grad) == [4.0] * 6
    bc = cpu([1, 2], L([3, 2], [0, 1]))
    s = sw.sum(bc)
    node = s.autograd_ctx
    (g,) = node.backward(cpu([1.0], L([1], [1])))
    assert g.layout == L([3, 2], [1, 3])  # gradient layout of a broadcast-aliased input


# ----- broadcast_to --------------------------------------------------------------------------------

def test_broadcast_to_is_a_recorded_view():
    x = cpu([1, 2], L([2, 1], [1, 2]))
    b = sw.broadcast_to(x, Shape([2, 3]))
    assert b.layout == L([2, 3], [1, 0]) and b.carrier is x.carrier and b.offset == x.offset
    assert isinstance(b.autograd_ctx, op.BroadcastOperation) and b.autograd_ctx.inputs() == (x,)
    x[1, 0] = 9.0
    assert b[1, 2] == 9.0


def test_broadcast_to_errors():
    x = cpu([1, 2], L([2, 1], [1, 2]))
    with pytest.raises(TypeError):
        sw.broadcast_to(x, (2, 3))
    with pytest.raises(TypeError):
        sw.broadcast_to([1, 2], Shape([2, 3]))
    with pytest.raises(ValueError):
        sw.broadcast_to(x, Shape([3, 3]))
    with pytest.raises(ValueError):
        sw.broadcast_to(x, Shape([2, [1, 3]]))
    x.carrier.release()
    with pytest.raises(RuntimeError):
        sw.broadcast_to(x, Shape([2, 3]))


def test_broadcast_backward_sums_over_reading_coordinates():
    x = cpu([1, 2], L([2, [1, 1]], [1, [2, 2]]))
    b = sw.broadcast_to(x, Shape([2, [3, 4]]))
    g = cpu([float(i) for i in range(24)], Layout.canonical(Shape([2, [3, 4]])))
    (gx,) = b.autograd_ctx.backward(g)
    assert gx.layout == x.layout and type(gx.carrier) is CPU
    for i in range(2):
        assert gx[i, [0, 0]] == sum(g[i, [j, k]] for j in range(3) for k in range(4))


def test_broadcast_backward_rejects_bad_cotangents():
    x = cpu([1, 2], L([2, 1], [1, 2]))
    b = sw.broadcast_to(x, Shape([2, 3]))
    node = b.autograd_ctx
    with pytest.raises(ValueError):
        node.backward(cpu([1, 2, 3], L([2, 3], [1, 0])))  # not injective
    with pytest.raises(ValueError):
        node.backward(cpu([0.0] * 6, L([3, 2], [1, 3])))  # not the target shape


# ----- gradients of every operation ----------------------------------------------------------------

def test_operation_gradients_use_input_class_and_gradient_layout():
    a = cpu([1, 2, 3, 4, 5, 6, 0, 0, 0, 0], L([2, 3], [1, 4]))  # gapped
    b = cpu([2, 3], L([2, 3], [1, 0]))  # broadcast-aliased
    a.retain_grad()
    p = sw.elementwise_mul(a, b)
    q = sw.add(p, a)
    sw.sum(q).backward()
    assert a.grad.layout == a.layout
    assert by_coordinate(a.grad) == [b[k] + 1 for k in range(6)]
    assert b.grad.layout == L([2, 3], [1, 2])
    # b's two storage slots each collect the three coordinates reading them.
    col = [sum(a[i, j] for j in range(3)) for i in range(2)]
    assert by_coordinate(b.grad) == [col[k % 2] for k in range(6)]
    assert all(g.autograd_ctx is None for g in (a.grad, b.grad))


def test_mul_backward_reads_current_values_of_saved_inputs():
    a = cpu([1, 2], L([2], [1]))
    b = cpu([3, 4], L([2], [1]))
    p = a * b
    (ga, gb) = p.autograd_ctx.backward(cpu([1, 1], L([2], [1])))
    assert ga.tolist() == [3.0, 4.0] and gb.tolist() == [1.0, 2.0]


def test_large_hierarchical_add_matches_python():
    lay = L([[8, 9], [7, 5]], [[1, 8], [72, 504]])
    a = cpu([float(i % 13) for i in range(lay.cosize)], lay)
    b = cpu([float(i % 5) for i in range(lay.cosize)], lay)
    r = a + b
    assert r.layout == Layout.canonical(lay.shape)
    assert r.tolist() == [a[k] + b[k] for k in range(lay.size)]
