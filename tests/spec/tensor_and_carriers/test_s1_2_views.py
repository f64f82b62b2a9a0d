"""docs/spec/tensor-and-carriers.md §1.2 Views: slicing views that share the carrier, their
errors, and `sw.broadcast_to`."""
import pytest

import strideweave as sw
from strideweave import CPU, Layout, Shape, Stride, Tensor

from filled_carriers import filled


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_slicing_view_shares_the_carrier():
    c = filled(12)
    t = Tensor(c, 0, L([3, 4], [1, 3]))
    v = t[1:3, ::2]
    assert v.carrier is c and v.layout == L([2, 2], [1, 6]) and v.offset == 1
    assert v.tolist() == [1.0, 2.0, 7.0, 8.0]
    before = c.version
    v[0, 1] = -1.0
    assert t[1, 2] == -1.0 and c.version == before + 1


def test_slicing_int_entries_remove_modes():
    c = filled(12)
    t = Tensor(c, 0, L([3, 4], [1, 3]))
    row = t[2, :]
    assert row.layout == L([4], [3]) and row.offset == 2
    assert row.tolist() == [2.0, 5.0, 8.0, 11.0]


def test_slicing_nested_modes():
    c = filled(24)
    t = Tensor(c, 0, L([2, [3, 4]], [1, [2, 6]]))
    v = t[1, :]
    assert v.layout == L([[3, 4]], [[2, 6]]) and v.offset == 1
    w = t[:, 5]
    assert w.offset == t.layout.index([0, 5]) and w.layout == L([2], [1])
    with pytest.raises(ValueError):
        t[:, 0:2]


def test_slicing_errors():
    t = Tensor(filled(12), 0, L([3, 4], [1, 3]))
    with pytest.raises(ValueError):
        t[0:1]  # one entry for two modes
    with pytest.raises(TypeError):
        t[0:1, "a"]
    with pytest.raises(TypeError):
        t[0.5:1, :]
    with pytest.raises(ValueError):
        t[::-1, :]
    with pytest.raises(ValueError):
        t[2:1, :]
    with pytest.raises(ValueError):
        t[3, :]
    no_extra_even_division = t[0:3:2, :]
    assert no_extra_even_division.layout.shape == Shape([2, 4])
    t.carrier.release()
    with pytest.raises(RuntimeError):
        t[0:1, :]


def test_broadcast_view():
    c = CPU(2)
    c[0], c[1] = 1.0, 2.0
    t = Tensor(c, 0, L([2, 1], [1, 2]))
    b = sw.broadcast_to(t, Shape([2, 3]))
    assert b.layout == L([2, 3], [1, 0]) and b.layout.cosize == 2 and b.carrier is c
    assert b[1, 2] == 2.0 and c.version == 2  # the two setup writes only
    with pytest.raises(TypeError):
        sw.broadcast_to(t, (2, 3))
    with pytest.raises(ValueError):
        sw.broadcast_to(t, Shape([3, 3]))
    with pytest.raises(ValueError):
        sw.broadcast_to(t, Shape([2, [1, 3]]))
