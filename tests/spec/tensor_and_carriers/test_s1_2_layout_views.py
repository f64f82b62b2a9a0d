"""tensor-and-carriers.md §1.2: the views built on the layout algebra (compose, tile,
permute, reshape, squeeze, unsqueeze, broadcast_in_dim, as_strided) — same carrier, no
copy, and their refusals."""

import numpy as np
import pytest

import strideweave as sw
from strideweave import Layout, Shape, Stride


def grid(rows=8, cols=6):
    c = sw.CPU(rows * cols)
    t = sw.Tensor(c, 0, Layout.canonical(Shape(rows, cols)))
    for k in range(rows * cols):
        t[k] = float(k)
    return c, t


def values(t):
    return [t[k] for k in range(t.layout.size)]


def test_tile_is_the_zipped_divide_and_a_tile_aliases_the_carrier():
    c, t = grid()
    tiled = t.tile((2, 3))
    assert tiled.layout == t.layout.zipped_divide((2, 3))
    assert tiled.carrier is c
    tile = tiled[:, 1]                       # the second tile: rows 2..3, columns 0..2
    a = np.from_dlpack(tile)
    assert a.tolist() == [[2.0, 10.0, 18.0], [3.0, 11.0, 19.0]]
    a[1, 2] = -1.0                           # a writes the carrier: no copy was made
    assert t[(3, 2)] == -1.0


def test_compose_views_through_the_composed_layout():
    c, t = grid()
    v = t.compose(Layout(Shape(4), Stride(2)))
    assert v.layout == t.layout.compose(Layout(Shape(4), Stride(2)))
    assert values(v) == [0.0, 2.0, 4.0, 6.0]
    assert v.carrier is c


def test_permute_and_reshape():
    _, t = grid(4, 6)
    p = t.permute(1, 0)
    assert p[(5, 3)] == t[(3, 5)]
    r = t.reshape((2, 12))
    assert values(r) == values(t)
    assert r.layout.shape == Shape(2, 12)
    with pytest.raises(ValueError, match="size"):
        t.reshape((5, 5))
    # The transposed 6x4 view read as 4x6 in first-mode-fastest order needs a copy.
    with pytest.raises(ValueError, match="needs a copy"):
        p.reshape((4, 6))
    with pytest.raises(TypeError, match="reshape shape"):
        t.reshape(2.0)


def test_squeeze_unsqueeze():
    c = sw.CPU(6)
    t = sw.Tensor(c, 0, Layout(Shape(1, 6, 1), Stride(0, 1, 0)))
    assert t.squeeze().layout == Layout(Shape(6), Stride(1))
    assert t.squeeze(2).layout == Layout(Shape(1, 6), Stride(0, 1))
    with pytest.raises(ValueError, match="size 6"):
        t.squeeze(1)
    with pytest.raises(IndexError):
        t.squeeze(3)
    u = t.squeeze().unsqueeze(0)
    assert u.layout == Layout(Shape(1, 6), Stride(0, 1))
    assert t.squeeze().unsqueeze(-1).layout == Layout(Shape(6, 1), Stride(1, 0))


def test_broadcast_in_dim():
    _, t = grid(1, 3)
    row = t.reshape(3)
    b = row.broadcast_in_dim((4, 3), (1,))
    assert b.layout == Layout(Shape(4, 3), Stride(0, 1))
    assert b[(2, 1)] == 1.0
    with pytest.raises(ValueError, match="cannot become output mode"):
        row.broadcast_in_dim((4, 5), (1,))
    with pytest.raises(ValueError, match="entries"):
        row.broadcast_in_dim((4, 3), (0, 1))


def test_as_strided():
    c, t = grid(2, 3)
    v = t.as_strided((3,), (2,), offset=0)
    assert values(v) == [0.0, 2.0, 4.0]
    assert v.carrier is c
    with pytest.raises(ValueError, match="exceeds carrier size"):
        t.as_strided((4,), (2,))


def test_algebra_refusals_leave_no_view():
    _, t = grid()
    with pytest.raises(ValueError, match="tiler has 3 modes"):
        t.tile((2, 2, 2))
    with pytest.raises(TypeError, match="zipped_divide tiler"):
        t.tile("x")
