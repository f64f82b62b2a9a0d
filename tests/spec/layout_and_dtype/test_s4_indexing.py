"""docs/spec/layout-and-dtype.md §4 Indexing: hierarchical and integer keys, the spec's
examples, and the bad-key table."""
import pytest

from strideweave import Layout, Shape, Stride


def lay(shape, stride):
    """`[..]:[..]` notation of the spec: Layout(Shape(shape), Stride(stride))."""
    return Layout(Shape(shape), Stride(stride))


def test_indexing_examples():
    L = lay([2, [3, 4]], [1, [10, 100]])
    assert L([1, [2, 3]]) == L([1, 11]) == L(23) == 321
    assert L((1, (2, 3))) == L.index([1, [2, 3]]) == Layout.get_index(L, 23) == 321
    M = lay([3, 4], [2, 10])
    assert M(5) == 14
    assert M([2, 1]) == 14
    assert M([2, 3]) == 34


def test_all_forms_agree():
    L = lay([2, [3, 4]], [1, [10, 100]])
    for k in range(L.size):
        c = L.shape.decode(k)
        assert L(k) == L(c) == L.index(c) == Layout.get_index(L, c)


@pytest.mark.parametrize(
    "key",
    [[3, 0], 12, -1, [0, 4], [-1, 0], [0], [1, 2, 3], [], [[1], 2], [1, [2]], 2**64, [2**64, 0]],
)
def test_bad_key_values(key):
    M = lay([3, 4], [2, 10])
    with pytest.raises(ValueError):
        M(key)
    with pytest.raises(ValueError):
        M.index(key)
    with pytest.raises(ValueError):
        Layout.get_index(M, key)


@pytest.mark.parametrize("key", [[1, [2, 3, 0]], [1, [2]], [1, [12]], [2, 0], [1, [[2], 3]], 24])
def test_bad_hierarchical_key_values(key):
    with pytest.raises(ValueError):
        lay([2, [3, 4]], [1, [10, 100]])(key)


@pytest.mark.parametrize(
    "key",
    [True, False, [True, 0], [0, False], 1.0, "1", None, [0, None], [0, 1.0], {0: 1}, [True], [0, [False]], (0, 0, "x")],
)
def test_bad_key_types(key):
    M = lay([3, 4], [2, 10])
    with pytest.raises(TypeError):
        M(key)
    with pytest.raises(TypeError):
        M.index(key)
    with pytest.raises(TypeError):
        Layout.get_index(M, key)


def test_bool_inside_nested_key_is_type_error():
    with pytest.raises(TypeError):
        lay([2, [3, 4]], [1, [10, 100]])([1, [2, True]])


@pytest.mark.parametrize("x", [Shape(2), (2,), None, lay(2, 1).shape])
def test_get_index_needs_a_layout(x):
    with pytest.raises(ValueError):
        Layout.get_index(x, 0)
