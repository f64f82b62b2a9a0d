"""docs/spec/layout-and-dtype.md §5 Size, cosize, leaf modes: the table of
sizes, cosizes and leaf modes."""
import pytest

from strideweave import Layout, Shape, Stride


def lay(shape, stride):
    """`[..]:[..]` notation of the spec: Layout(Shape(shape), Stride(stride))."""
    return Layout(Shape(shape), Stride(stride))


@pytest.mark.parametrize(
    "layout, size, cosize, leaf_shape, leaf_stride",
    [
        (lay([2, 3], [1, 4]), 6, 10, (2, 3), (1, 4)),
        (lay([2, 3], [1, 0]), 6, 2, (2, 3), (1, 0)),
        (lay(4, 0), 4, 1, (4,), (0,)),
        (lay([2, [3, 4]], [1, [10, 100]]), 24, 322, (2, 3, 4), (1, 10, 100)),
        (Layout(Shape(), Stride()), 1, 1, (), ()),
    ],
)
def test_size_cosize_table(layout, size, cosize, leaf_shape, leaf_stride):
    assert layout.size == size
    assert layout.cosize == cosize
    assert layout.leaf_shape == leaf_shape
    assert layout.leaf_stride == leaf_stride
    assert layout.infix() == list(zip(leaf_shape, leaf_stride))
    assert isinstance(layout.leaf_shape, tuple) and isinstance(layout.infix(), list)
