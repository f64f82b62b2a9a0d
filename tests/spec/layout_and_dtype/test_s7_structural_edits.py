"""docs/spec/layout-and-dtype.md §7 Structural edits: layout[key], concat and `+`,
append and permute, with a hypothesis test that the inverse order restores the original."""
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from strideweave import Layout, Shape, Stride

from layout_strategies import fill_leaves, random_layouts


def lay(shape, stride):
    """`[..]:[..]` notation of the spec: Layout(Shape(shape), Stride(stride))."""
    return Layout(Shape(shape), Stride(stride))


# --- §7 structural edits -------------------------------------------------------------------

def test_layout_getitem():
    L = lay([1, 2, [3, 4]], [1, 1, [2, 6]])
    assert L[1:] == lay([2, [3, 4]], [1, [2, 6]])
    assert L[2] == lay([3, 4], [2, 6])
    assert L[-3] == lay(1, 1)
    assert L[3:] == Layout(Shape(), Stride())
    assert len(L[3:]) == 0
    for bad in [3, -4]:
        with pytest.raises(IndexError):
            L[bad]
    for bad in ["1", 1.0, None, [0]]:
        with pytest.raises(TypeError):
            L[bad]


def test_concat():
    a, b = lay([1, 2], [1, 2]), lay(3, 6)
    expected = lay([1, 2, 3], [1, 2, 6])
    assert a + b == expected
    assert Layout.concat(a, b) == expected
    assert a.concat(b) == expected
    assert lay(2, 1) + lay([3, 4], [2, 6]) == lay([2, 3, 4], [1, 2, 6])
    assert lay([2, [3, 4]], [1, [2, 6]]) + Layout(Shape(), Stride()) == lay([2, [3, 4]], [1, [2, 6]])


@pytest.mark.parametrize("other", [Shape(3), Stride(6), 1, None, (3,)])
def test_concat_and_add_need_layouts(other):
    a = lay([1, 2], [1, 2])
    with pytest.raises(TypeError):
        Layout.concat(a, other)
    with pytest.raises(TypeError):
        a.concat(other)
    with pytest.raises(TypeError):
        Layout.concat(other, a)
    with pytest.raises(TypeError):
        a + other
    with pytest.raises(TypeError):
        other + a


def test_append():
    assert Layout.append(lay([1, 2], [1, 2]), lay([3, 4], [3, 12])).shape == Shape([1, 2, [3, 4]])
    assert Layout.append(lay(1, 1), lay([2, 3], [2, 6])) == lay([1, [2, 3]], [1, [2, 6]])
    assert lay(1, 1).append(lay([2, 3], [2, 6])) == lay([1, [2, 3]], [1, [2, 6]])
    a = lay([1, 2], [1, 2])
    assert Layout.append(a, Layout(Shape(), Stride())) == a
    assert Layout.append(a, lay(3, 6)) == Layout.concat(a, lay(3, 6))
    assert Layout.append(a, lay([[3, 4]], [[1, 3]])) == lay([1, 2, [[3, 4]]], [1, 2, [[1, 3]]])


@pytest.mark.parametrize("other", [Shape(3), Stride(6), 1, None])
def test_append_needs_layouts(other):
    a = lay([1, 2], [1, 2])
    with pytest.raises(TypeError):
        Layout.append(a, other)
    with pytest.raises(TypeError):
        a.append(other)
    with pytest.raises(TypeError):
        Layout.append(other, a)


def test_permute():
    L = lay([2, [3, 4], 5], [1, [2, 6], 24])
    expected = lay([[3, 4], 2, 5], [[2, 6], 1, 24])
    assert Layout.permute(L, 1, 0, 2) == expected
    assert Layout.permute(L, (1, 0, 2)) == expected
    assert Layout.permute(L, [1, 0, 2]) == expected
    assert L.permute(1, 0, 2) == expected
    assert L.permute([1, 0, 2]) == expected
    assert expected.permute(1, 0, 2) == L  # (1,0,2) is its own inverse
    P = L.permute(2, 0, 1)
    assert P == lay([5, 2, [3, 4]], [24, 1, [2, 6]])
    assert P.permute(1, 2, 0) == L
    assert lay(7, 1).permute(0) == lay(7, 1)
    assert Layout(Shape(), Stride()).permute() == Layout(Shape(), Stride())


def test_permute_keeps_one_child_nested_mode():
    L = lay([2, [5]], [1, [2]])
    P = L.permute(1, 0)
    assert P.shape.top_level == ((5,), 2)
    assert P == lay([[5], 2], [[2], 1])


class _MyInt(int):
    pass


@pytest.mark.parametrize("order", [(True, 0, 2), (1, 0, 2.0), ("1", 0, 2), (1, 0, None), (_MyInt(1), 0, 2), ([1, False, 2],)])
def test_permute_entries_must_be_exact_ints(order):
    L = lay([2, [3, 4], 5], [1, [2, 6], 24])
    with pytest.raises(TypeError):
        L.permute(*order)
    with pytest.raises(TypeError):
        Layout.permute(L, *order)


@pytest.mark.parametrize("order", [(0, 0, 1), (0, 1), (0, 1, 3), (-1, 0, 1), (0, 1, 2, 3), (), (2**70, 0, 1)])
def test_permute_needs_a_permutation(order):
    L = lay([2, [3, 4], 5], [1, [2, 6], 24])
    with pytest.raises(ValueError):
        L.permute(*order)
    with pytest.raises(ValueError):
        L.permute(list(order))


def test_permute_needs_a_layout():
    with pytest.raises(TypeError):
        Layout.permute(Shape(2, 3), 1, 0)


@settings(max_examples=200, deadline=None)
@given(random_layouts(), st.randoms(use_true_random=False))
def test_permute_inverse_restores(spec, rnd):
    tree, extents, strides = spec
    L = Layout(Shape(fill_leaves(tree, iter(extents))), Stride(fill_leaves(tree, iter(strides))))
    order = list(range(len(L)))
    rnd.shuffle(order)
    inverse = [order.index(i) for i in range(len(L))]
    P = L.permute(order)
    assert [P[j] for j in range(len(L))] == [L[i] for i in order]
    assert P.permute(inverse) == L
