"""docs/spec/autograd-and-profiling.md §8 Worked example, row by row."""
import numpy as np
import pytest

import strideweave as sw
from strideweave import Layout, Shape, Stride

from slot_tensors import cpu


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def rows(t):
    """[[t[i, j] for j] for i] of a rank-2 tensor."""
    n0, n1 = t.layout.shape.top_level
    return [[t[i, j] for j in range(n1)] for i in range(n0)]


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
