"""Issue 26: every index-like key (an object with `__index__`, such as `np.int64`) is accepted
wherever an int key is: tensor element keys (flat and hierarchical, read and write), a
carrier's `[]`, `Layout.index`, and Shape/Stride/Layout mode selection. A bool-like key
(numpy's bool, whose `__index__` refuses) stays a TypeError, as `True` is."""
from __future__ import annotations

import numpy as np
import pytest

import strideweave as sw


class Idx:
    """A user type with `__index__` (not an int subclass)."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


def matrix():
    c = sw.CPU(6)
    for i in range(6):
        c[i] = float(i)
    return sw.Tensor(c, 0, sw.Layout(sw.Shape([2, 3]), sw.Stride([1, 2])))


@pytest.mark.parametrize("index", [np.int64, np.int32, np.uint8, np.intp, Idx])
def test_tensor_keys(index):
    t = matrix()
    assert t[index(1), index(2)] == t[1, 2] == 5.0
    assert t[index(4)] == t[4]
    assert t[[index(1), index(2)]] == 5.0
    t[index(1), index(2)] = 7.0
    assert t[1, 2] == 7.0
    t[index(0)] = 9.0
    assert t[0] == 9.0


def test_hierarchical_coordinates():
    layout = sw.Layout(sw.Shape([2, [3, 4]]), sw.Stride([1, [2, 6]]))
    assert layout.index((np.int64(1), (np.int64(2), np.int64(3)))) == layout.index((1, (2, 3)))
    c = sw.CPU(layout.cosize)
    t = sw.Tensor(c, 0, layout)
    t[np.int64(1), (np.int64(2), Idx(3))] = 4.0
    assert t[1, (2, 3)] == 4.0


def error_of(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - compared, type and text
        return type(exc), str(exc)
    raise AssertionError("no error")


def test_out_of_range_index_like_keys_are_the_int_errors():
    t = matrix()
    assert error_of(lambda: t[np.int64(2), 0]) == error_of(lambda: t[2, 0])
    assert error_of(lambda: t[np.int64(6)]) == error_of(lambda: t[6])


def test_bool_like_keys_stay_type_errors():
    t = matrix()
    with pytest.raises(TypeError):
        t[np.True_, 0]
    with pytest.raises(TypeError):
        t[True, 0]
    with pytest.raises(TypeError):
        t[1.0, 0]


def test_carrier_keys():
    c = sw.CPU(3)
    c[np.int64(2)] = 3.0
    assert c[np.int64(2)] == c[Idx(2)] == 3.0


@pytest.mark.parametrize("index", [np.int64, Idx])
def test_mode_selection(index):
    shape, stride = sw.Shape([2, [3, 4]]), sw.Stride([1, [2, 6]])
    layout = sw.Layout(shape, stride)
    assert shape[index(1)] == shape[1]
    assert stride[index(-1)] == stride[-1]
    assert layout[index(1)] == layout[1]
    with pytest.raises(IndexError):
        layout[index(3)]
    with pytest.raises(TypeError):
        layout[np.True_]


@pytest.mark.parametrize("index", [np.int64, Idx])
def test_slicing_keys(index):
    t = matrix()
    assert t[index(1), :].tolist() == t[1, :].tolist() == [1.0, 3.0, 5.0]
    assert t[:, index(2)].tolist() == t[:, 2].tolist() == [4.0, 5.0]
    with pytest.raises(TypeError):
        t[np.True_, :]


def test_index_like_slice_bounds():
    c = sw.CPU(6)
    for i in range(6):
        c[i] = float(i)
    t = sw.Tensor(c, 0, sw.Layout(sw.Shape([6]), sw.Stride([1])))
    view = t[np.int64(1):np.int64(5):np.int64(2)]
    assert view.tolist() == [1.0, 3.0]
    with pytest.raises(TypeError):
        t[np.bool_(True):4]
