"""docs/spec/layout-and-dtype.md §3 Layout construction: congruence, the Shape and
Stride arguments, overflow, the members and the rank-0 layout."""
import pytest

from strideweave import Layout, Shape, Stride


def lay(shape, stride):
    """`[..]:[..]` notation of the spec: Layout(Shape(shape), Stride(stride))."""
    return Layout(Shape(shape), Stride(stride))


def test_congruence():
    with pytest.raises(ValueError):
        Layout(Shape([2, [3, 4]]), Stride([1, 2, 6]))
    assert Layout(Shape(2), Stride([1])) == lay(2, 1)
    for sh, stv in [([2, 3], [1]), ([2, 3], [1, [2]]), ([[2]], [1]), ([], [0])]:
        with pytest.raises(ValueError):
            lay(sh, stv)


@pytest.mark.parametrize(
    "args",
    [((2, 3), (1, 2)), (Stride(2), Shape(1)), (Shape(2), Shape(1)), (Stride(2), Stride(1)), (Shape(2), [1])],
)
def test_layout_needs_shape_and_stride(args):
    with pytest.raises(ValueError):
        Layout(*args)


def test_size_or_cosize_overflow():
    with pytest.raises(OverflowError):
        lay([2**62, 4], [0, 0])  # size 2**64
    with pytest.raises(OverflowError):
        lay(3, 2**62)  # cosize 2**63 + 1
    edge = lay(2**63 - 1, 1)  # size and cosize exactly 2**63 - 1 still fit
    assert edge.size == edge.cosize == 2**63 - 1
    assert edge(2**63 - 2) == 2**63 - 2


def test_layout_members():
    L = lay([2, [3, 4]], [1, [10, 100]])
    assert L.shape == Shape(2, [3, 4])
    assert L.stride == Stride(1, [10, 100])
    assert len(L) == 2
    assert list(L) == [L[0], L[1]] == [lay(2, 1), lay([3, 4], [10, 100])]
    assert L.depth == 2 == L.shape.depth
    assert not L.is_leaf
    assert lay(4, 1).is_leaf
    assert not lay([[4]], [[1]]).is_leaf
    assert not lay([4, 1], [1, 1]).is_leaf
    assert not Layout(Shape(), Stride()).is_leaf
    assert repr(lay([2, 3], [1, 0])) == "Layout(Shape<(2, 3)>, Stride<(1, 0)>)"
    assert lay([2, 3], [1, 0]) == Layout(Shape(2, 3), Stride(1, 0))
    assert lay([2, 3], [1, 0]) != lay([2, 3], [1, 2])
    assert lay([2, 3], [1, 0]) != Shape(2, 3)


def test_rank_zero_layout():
    r0 = Layout(Shape(), Stride())
    assert r0.size == 1
    assert r0.cosize == 1
    assert r0(0) == r0(()) == r0([]) == 0
    assert r0.leaf_shape == ()
    assert r0.profile == []
    assert len(r0) == 0 and list(r0) == []
    with pytest.raises(ValueError):
        r0(1)
    with pytest.raises(ValueError):
        r0((0,))
