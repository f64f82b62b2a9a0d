"""layout-and-dtype.md §9: the CuTe layout algebra on Layout — the spec's examples, the
static and instance forms, and the refusals (ValueError naming the unmet precondition,
TypeError naming the argument)."""

import pytest

from strideweave import Layout, Shape, Stride


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_compose_example_both_forms():
    a, b = L(20, 2), L([5, 4], [4, 1])
    assert Layout.compose(a, b) == L([5, 4], [8, 2])
    assert a.compose(b) == L([5, 4], [8, 2])


def test_compose_with_a_shape_is_its_compact_layout():
    a = L([4, 6], [1, 10])
    assert a.compose(Shape(2, 2)) == a.compose(Layout.canonical(Shape(2, 2)))
    assert a.compose(Shape(2, 2)) == L([2, 2], [1, 2])


def test_compose_by_mode_with_a_tuple():
    a = L([4, 6], [1, 10])
    out = a.compose((L(2, 2), None))
    assert out == L([2, 6], [2, 10])
    assert a.compose((2, 3)) == L([2, 3], [1, 10])
    for i in range(out.size):
        c0, c1 = i % 2, i // 2
        assert out(i) == a((2 * c0, c1))


def test_complement_example():
    assert Layout.complement(L([2, 2], [1, 6]), 24) == L([3, 2], [2, 12])
    # The default cotarget is the layout's cosize.
    assert L(4, 2).complement() == L(2, 1)


def test_divide_example():
    a = L([4, 2, 3], [2, 1, 8])
    assert Layout.divide(a, L(4, 2)) == L([[2, 2], [2, 3]], [[4, 1], [2, 8]])


def test_zipped_and_tiled_divide_gather_tiles_first():
    a = L([8, 6], [1, 8])
    z = a.zipped_divide((2, 3))
    assert z == L([[2, 3], [4, 2]], [[1, 8], [2, 24]])
    t = a.tiled_divide((2, 3))
    assert t == L([[2, 3], 4, 2], [[1, 8], 2, 24])


def test_coalesce_whole_and_by_profile():
    a = L([2, [3, 4]], [1, [2, 6]])
    assert a.coalesce() == L(24, 1)
    assert a.coalesce(Shape(1, 1)) == L([2, 12], [1, 2])
    assert a.coalesce((1, 1)) == L([2, 12], [1, 2])


def test_filter_drops_stride_zero_and_extent_one():
    assert L([2, 1, 3], [0, 5, 4]).filter() == L(3, 4)
    assert L([2, 2], [0, 0]).filter() == L(1, 0)


def test_products():
    assert L(2, 1).product(L(3, 1)) == L([2, 3], [1, 2])
    a, b = L([2, 2], [1, 2]), L([3, 2], [1, 3])
    assert Layout.blocked_product(a, b) == L([[2, 3], [2, 2]], [[1, 4], [2, 12]])
    assert Layout.raked_product(a, b) == L([[3, 2], [2, 2]], [[4, 1], [12, 2]])


def test_inverses():
    a = L([4, 2], [2, 1])
    r = a.right_inverse()
    assert r == L([2, 4], [4, 1])
    assert [a(r(i)) for i in range(r.size)] == list(range(r.size))
    lft = Layout.left_inverse(L([2, 3], [3, 1]))
    assert [lft(L([2, 3], [3, 1])(i)) for i in range(6)] == list(range(6))


@pytest.mark.parametrize("call, words", [
    (lambda: L([2, 2], [1, 1]).complement(8), "injective"),
    (lambda: L([2, 2], [2, 3]).complement(8), "stride divisibility"),
    (lambda: L([4, 3], [1, 10]).compose(L(6, 1)), "shape divisibility"),
    (lambda: L([3, 4], [1, 10]).compose(L(2, 2)), "stride divisibility"),
    (lambda: L([2, 2], [0, 1]).left_inverse(), "injective"),
    (lambda: L(4, 1).divide((2, 2)), "tiler has 2 modes"),
    (lambda: L(4, 1).coalesce((1, 1)), "profile has 2 modes"),
    (lambda: L(4, 1).complement(0), "cotarget"),
    (lambda: L(4, 1).divide(0), "divide tiler"),
])
def test_unmet_preconditions_raise_value_error_naming_them(call, words):
    with pytest.raises(ValueError, match=words):
        call()


@pytest.mark.parametrize("call, words", [
    (lambda: L(4, 1).compose("x"), "compose other"),
    (lambda: L(4, 1).divide(2.0), "divide tiler"),
    (lambda: L(4, 1).zipped_divide((L(2, 1), "x")), r"zipped_divide tiler\[1\]"),
    (lambda: L(4, 1).complement(2.5), "complement cotarget"),
    (lambda: L(4, 1).coalesce(object()), "coalesce profile"),
    (lambda: L(4, 1).blocked_product(None), "blocked_product other"),
])
def test_bad_argument_types_raise_type_error_naming_them(call, words):
    with pytest.raises(TypeError, match=words):
        call()
