"""layout-and-dtype.md §1–§7: Shape, Stride, Layout and Node.

Every example and every error row of the spec appears here verbatim; the hypothesis tests
at the end check indexing, cosize and injectivity against brute force on random small
hierarchical layouts.
"""
import itertools
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strideweave as sw
import strideweave.layout as swl
from strideweave import Layout, Node, Shape, Stride


def lay(shape, stride):
    """`[..]:[..]` notation of the spec: Layout(Shape(shape), Stride(stride))."""
    return Layout(Shape(shape), Stride(stride))


# --- §1 import surface -------------------------------------------------------------------


def test_import_surface_same_objects():
    for name in ["Shape", "Stride", "Layout", "Node"]:
        assert getattr(sw, name) is getattr(swl, name)
    assert swl.__all__ == ["Shape", "Stride", "Layout", "Node"]
    # The public classes are the native classes, not wrappers.
    assert sw.Shape is sw._native.Shape
    assert sw.Stride is sw._native.Stride
    assert sw.Layout is sw._native.Layout
    assert Shape.__module__ == "strideweave.layout" and Shape.__qualname__ == "Shape"


def test_node_enum_values():
    assert (Node.Leaf, Node.Push, Node.Pop) == (1, 2, 3)
    assert [m.name for m in Node] == ["Leaf", "Push", "Pop"]


# --- §2 Shape and Stride: items ------------------------------------------------------------


def test_items_rules():
    assert Shape().top_level == ()
    assert Stride().top_level == ()
    assert Shape(4) == Shape([4])
    assert Shape(4).top_level == (4,)
    assert Shape(2, [3, 4]) == Shape([2, [3, 4]])
    assert Shape((2, (3, 4))) == Shape([2, [3, 4]])
    assert Shape(2, [3, [4, [5]]]).top_level == (2, (3, (4, (5,))))
    assert Stride(1, [10, 100]).top_level == (1, (10, 100))


def test_same_class_elements():
    # One leaf adds that int; otherwise its modes become one nested mode.
    assert Shape(Shape(3), 4) == Shape(3, 4)
    assert Shape(Shape(2, 3), 4) == Shape([2, 3], 4)
    assert Shape([2, Shape(3, 4)]) == Shape(2, [3, 4])
    assert Stride(Stride(0), Stride(1, 2)) == Stride(0, [1, 2])
    # A single same-class item is the whole tree.
    assert Shape(Shape(2, [3, 4])) == Shape(2, [3, 4])
    # A rank-0 element would be an empty nested mode.
    with pytest.raises(ValueError):
        Shape(2, Shape())


def test_inputs_are_copied():
    items = [2, [3, 4]]
    s = Shape(items)
    items[1].append(5)
    items.append(6)
    assert s.top_level == (2, (3, 4))


@pytest.mark.parametrize(
    "obj",
    [Shape(2, [3, 4]), Stride(1, 2), lay([2, 3], [1, 2])],
    ids=["Shape", "Stride", "Layout"],
)
def test_frozen(obj):
    for attr in ["top_level", "shape", "size", "new_attribute"]:
        with pytest.raises(AttributeError):
            setattr(obj, attr, 1)
        with pytest.raises(AttributeError):
            delattr(obj, attr)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Shape(0),
        lambda: Shape(2, 0),
        lambda: Shape([2, [3, -1]]),
        lambda: Stride(-1),
        lambda: Stride([0, [1, -5]]),
        lambda: Shape(False),
    ],
)
def test_bad_values_raise_value_error(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize(
    "make",
    [
        lambda: Shape(2.0),
        lambda: Shape("2"),
        lambda: Shape(None),
        lambda: Shape([2, 3.0]),
        lambda: Shape(2, [3, "4"]),
        lambda: Shape({2: 3}),
        lambda: Shape(Stride(2)),
        lambda: Stride(Shape(1)),
        lambda: Shape(2, Stride(3)),
    ],
)
def test_bad_element_types_raise_value_error(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize(
    "make", [lambda: Shape([2, []]), lambda: Shape([[]]), lambda: Stride(1, ()), lambda: Shape(2, [[3], []])]
)
def test_empty_nested_mode_raises_value_error(make):
    with pytest.raises(ValueError):
        make()


def test_only_top_level_may_be_empty():
    assert Shape([]) == Shape()
    assert Stride(()) == Stride()
    assert len(Shape([])) == 0


@pytest.mark.parametrize(
    "make", [lambda: Shape(2**63), lambda: Shape([2, [2**64]]), lambda: Stride(-(2**63) - 1)]
)
def test_int_outside_64_bits_raises_overflow_error(make):
    with pytest.raises(OverflowError):
        make()


def test_64_bit_bounds_accepted():
    assert Shape(2**63 - 1).top_level == (2**63 - 1,)
    assert Stride(2**63 - 1).top_level == (2**63 - 1,)


def test_bool_counts_at_construction():
    assert Shape(True) == Shape(1)
    assert Stride(False) == Stride(0)
    assert Shape([True, [2, True]]) == Shape(1, [2, 1])


# --- §2 members ------------------------------------------------------------------------------


def test_member_table():
    x = Shape(2, [3, 4])
    assert x.top_level == (2, (3, 4))
    assert len(x) == 2
    assert x[1] == Shape(3, 4)
    assert x[0] == Shape(2)
    assert x[5:] == Shape()
    assert x[-1] == Shape(3, 4)
    assert x[:] == x
    assert x[::-1] == Shape([3, 4], 2)
    assert x.depth == 2
    assert x.size == 24
    assert Stride(1, [10, 100])[1] == Stride(10, 100)


def test_getitem_errors():
    x = Shape(2, [3, 4])
    for bad in [2, -3, 10**30]:
        with pytest.raises(IndexError):
            x[bad]
    for bad in ["0", 1.0, None, (0,)]:
        with pytest.raises(TypeError):
            x[bad]


def test_depth_and_size_edge_cases():
    assert Shape().depth == 1
    assert Shape(2, 3).depth == 1
    assert Shape([[2, [3]]]).depth == 3
    assert Shape(1, [[2, [3]]]).depth == 4
    assert Shape().size == 1
    assert Shape(5).size == 5


def test_decode_encode():
    s = Shape(5, [20, 4])
    assert s.decode(214) == (4, (2, 2))
    assert s.encode((4, 42)) == s.encode((4, (2, 2))) == 214
    assert s.encode([4, [2, 2]]) == 214
    assert s.encode(214) == 214
    assert Shape().decode(0) == ()
    assert Shape(3).decode(2) == (2,)


@pytest.mark.parametrize("bad", [True, False, 1.0, "1", None, [1]])
def test_decode_type_errors(bad):
    with pytest.raises(TypeError):
        Shape(5, [20, 4]).decode(bad)


@pytest.mark.parametrize("bad", [-1, 400, 401, 10**30])
def test_decode_range_errors(bad):
    with pytest.raises(ValueError):
        Shape(5, [20, 4]).decode(bad)


def test_encode_errors_follow_layout_keys():
    s = Shape(5, [20, 4])
    for bad in [(5, 0), (0, 80), (-1, 0), 400, -1, (4,), (4, 2, 2), ([4], 2), (4, (2, 2, 0))]:
        with pytest.raises(ValueError):
            s.encode(bad)
    for bad in [(True, 0), (4, (2, False)), 1.5, "x", None, (4, None)]:
        with pytest.raises(TypeError):
            s.encode(bad)


def test_shape_concat_append():
    assert Shape.concat(Shape(1, 2), Shape(3)) == Shape(1, 2, 3)
    assert Shape.append(Shape(1, 2), Shape(3, 4)) == Shape(1, 2, [3, 4])
    assert Shape.append(Shape(1, 2), Shape(3)) == Shape(1, 2, 3)
    assert Shape.append(Shape(1, 2), Shape()) == Shape(1, 2)
    assert Stride.concat(Stride(1), Stride(0, [2, 3])) == Stride(1, 0, [2, 3])
    assert Shape(1).concat(Shape(2)) == Shape(1, 2)
    for a, b in [(Shape(1), Stride(2)), (Shape(1), (2,)), (Shape(1), lay(2, 1))]:
        with pytest.raises(TypeError):
            Shape.concat(a, b)
        with pytest.raises(TypeError):
            Shape.append(a, b)
    with pytest.raises(TypeError):
        Shape.concat((1,), Shape(2))


def test_equality():
    assert Shape(1) != Stride(1)
    assert not (Shape(1) == Stride(1))
    assert Shape([2, 3]) != (2, 3)
    assert (2, 3) != Shape([2, 3])
    assert Shape(2, [3, 4]) == Shape([2, (3, 4)])
    assert Shape(2, [3, 4]) != Shape(2, 3, 4)
    assert Shape([4]) != Shape([[4]])


def test_repr():
    assert repr(Shape(2, [3, 4])) == "Shape<(2, (3, 4))>"
    assert repr(Shape(4)) == "Shape<(4,)>"
    assert repr(Stride()) == "Stride<()>"
    assert repr(Shape([[5]])) == "Shape<((5,),)>"
    for x in [Shape(2, [3, 4]), Stride(), lay([2, 3], [1, 0])]:
        assert str(x) == repr(x)


def test_hash_agrees_with_equality():
    assert hash(Shape(2, [3, 4])) == hash(Shape([2, [3, 4]]))
    assert hash(Stride(1, 0)) == hash(Stride([1, 0]))
    assert hash(lay([2, 3], [1, 0])) == hash(lay([2, 3], [1, 0]))
    assert len({Shape(2, 3), Shape([2, 3]), Shape(3, 2)}) == 2
    assert len({lay([2, 3], [1, 0]), lay([2, 3], [1, 0]), lay([2, 3], [1, 2])}) == 2


def test_pickle_round_trip():
    for x in [Shape(2, [3, 4]), Stride(), Shape(4), lay([2, [3, 4]], [1, [10, 100]])]:
        assert pickle.loads(pickle.dumps(x)) == x


# --- §3 Layout construction ----------------------------------------------------------------


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


# --- §4 indexing ---------------------------------------------------------------------------


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


# --- §5 size, cosize, leaf modes -------------------------------------------------------------


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


# --- §6 profile -------------------------------------------------------------------------------


def test_profile():
    expect = [Node.Leaf, Node.Push, Node.Leaf, Node.Leaf, Node.Pop]
    assert lay([2, [3, 4]], [1, [1, 1]]).profile == expect
    assert lay([7, [8, 9]], [0, [0, 0]]).profile == expect
    assert lay([[2, 3], 4], [[1, 2], 6]).profile == [Node.Push, Node.Leaf, Node.Leaf, Node.Pop, Node.Leaf]
    got = lay([2, [3, 4]], [1, [1, 1]]).profile
    assert all(type(n) is Node for n in got)
    assert got[0] is Node.Leaf


def test_profile_is_a_fresh_list():
    L = lay([2, [3, 4]], [1, [1, 1]])
    p = L.profile
    p.clear()
    assert len(L.profile) == 5
    assert L.profile is not L.profile


# --- §6 is_injective ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "layout, expected",
    [
        (lay([2, 3], [1, 4]), True),  # step 3, gapped
        (lay([1, 3], [0, 1]), True),  # step 3, stride 0 on extent 1
        (lay([2, [4, 3]], [1, [0, 2]]), False),  # step 1
        (lay([4, 2], [1, 1]), False),  # step 2
        (lay([4, 3], [2, 3]), False),  # step 4: (3,0) and (0,2) both give 6
        (lay([3, 2], [2, 3]), True),  # step 5: image 0,2,4,3,5,7
        (Layout(Shape(), Stride()), True),
    ],
)
def test_is_injective_table(layout, expected):
    assert layout.is_injective() is expected


def test_is_injective_never_enumerates_huge_layouts():
    # Each of these would need ~10**18 steps to enumerate; steps 1-4 decide them.
    assert lay([10**9, 10**9], [0, 1]).is_injective() is False  # step 1
    assert lay([10**9, 10**9], [1, 10**9]).is_injective() is True  # step 3
    assert lay([10**9, 10**9], [1, 2]).is_injective() is False  # step 2
    assert lay([10**9, 10**9], [2, 10**9]).is_injective() is False  # step 4
    # Step 5 with a separable outer leaf: only the spec's [3,2]:[2,3] part is examined.
    assert lay([3, 2, 10**9], [2, 3, 100]).is_injective() is True
    assert lay([3, 3, 3], [1000, 1001, 1002]).is_injective() is False  # 1000+1002 == 2*1001


# --- §6 broadcast_to ------------------------------------------------------------------------


def test_broadcast_to():
    src = lay([2, [1, 3]], [1, [2, 2]])
    assert src.broadcast_to(Shape([2, [4, 3]])) == lay([2, [4, 3]], [1, [0, 2]])
    assert lay([2, 1], [1, 2]).broadcast_to(Shape([2, 3])) == lay([2, 3], [1, 0])
    assert lay([2, 3], [1, 2]).broadcast_to(Shape(2, 3)) == lay([2, 3], [1, 2])


@pytest.mark.parametrize(
    "layout, target",
    [
        (lay([2, 3], [1, 2]), Shape([2, 4])),
        (lay([2, 1, 3], [1, 2, 2]), Shape([2, [4, 3]])),
        (lay(3, 1), Shape(2, 3)),  # no rank alignment
        (lay([1, 3], [0, 1]), Shape(3)),  # no removal
        (lay([2, 3], [1, 2]), Shape([[2, 3]])),
        (lay([3, 2], [1, 3]), Shape(2, 3)),  # no reordering
    ],
)
def test_broadcast_to_value_errors(layout, target):
    with pytest.raises(ValueError):
        layout.broadcast_to(target)


@pytest.mark.parametrize("target", [Stride(2, 3), (2, 3), [2, 3], None, lay([2, 3], [1, 0])])
def test_broadcast_to_needs_a_shape(target):
    with pytest.raises(TypeError):
        lay([2, 1], [1, 2]).broadcast_to(target)


# --- §6 canonical ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, stride",
    [
        (Shape([4, 2]), Stride([1, 4])),
        (Shape([2, [3, 4]]), Stride([1, [2, 6]])),
        (Shape([[2, 3], 4]), Stride([[1, 2], 6])),
        (Shape([2, [1, 3]]), Stride([1, [2, 2]])),
        (Shape(5), Stride(1)),
        (Shape(), Stride()),
        # autograd-and-profiling.md §2 examples
        (Shape([1]), Stride([1])),
        (Shape([1, 3]), Stride([1, 1])),
        (Shape([2, [4, 3]]), Stride([1, [2, 8]])),
    ],
)
def test_canonical_table(shape, stride):
    c = Layout.canonical(shape)
    assert c == Layout(shape, stride)
    assert c.cosize == c.size
    assert c.is_injective()
    assert [c(k) for k in range(c.size)] == list(range(c.size))


@pytest.mark.parametrize("bad", [Stride(2), (2, 3), [2], 4, None, lay(2, 1)])
def test_canonical_needs_a_shape(bad):
    with pytest.raises(TypeError):
        Layout.canonical(bad)


def test_canonical_overflow():
    with pytest.raises(OverflowError):
        Layout.canonical(Shape(2**62, 4))


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


# --- property tests against brute force ------------------------------------------------------


def _structure(depth):
    """A random tree structure: lists of None leaves, nesting at most `depth` deep."""
    if depth == 0:
        return st.none()
    return st.one_of(st.none(), st.lists(_structure(depth - 1), min_size=1, max_size=3))


_trees = st.lists(_structure(3), min_size=0, max_size=3).filter(lambda t: _count(t) <= 6)


def _count(t):
    return 1 if t is None else sum(_count(c) for c in t)


def _fill(t, values):
    """Replace the None leaves of `t`, depth-first, by the next items of `values`."""
    if t is None:
        return next(values)
    return [_fill(c, values) for c in t]


@st.composite
def _layouts(draw):
    tree = draw(_trees)
    n = _count(tree)
    extents = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    strides = draw(st.lists(st.integers(0, 7), min_size=n, max_size=n))
    return tree, extents, strides


def _all_coords(tree, extents):
    """Every hierarchical coordinate, built from the flat leaf coordinates."""
    for flat in itertools.product(*(range(e) for e in extents)):
        yield _fill(tree, iter(flat)), flat


@settings(max_examples=300, deadline=None)
@given(_layouts())
def test_properties_against_brute_force(spec):
    tree, extents, strides = spec
    L = Layout(Shape(_fill(tree, iter(extents))), Stride(_fill(tree, iter(strides))))
    assert L.leaf_shape == tuple(extents) and L.leaf_stride == tuple(strides)

    image = {}
    for coord, flat in _all_coords(tree, extents):
        naive = sum(c * s for c, s in zip(flat, strides))
        assert L(coord) == naive
        image.setdefault(naive, []).append(coord)
    assert L.size == len(list(itertools.product(*(range(e) for e in extents))))
    assert L.cosize == 1 + max(image)
    assert L.is_injective() == (sum(len(v) for v in image.values()) == len(image))

    canonical = Layout.canonical(L.shape)
    for k in range(L.size):
        c = L.shape.decode(k)
        assert L(k) == L(c)
        assert L.shape.encode(c) == k
        assert canonical(k) == k


@settings(max_examples=200, deadline=None)
@given(_layouts(), st.randoms(use_true_random=False))
def test_permute_inverse_restores(spec, rnd):
    tree, extents, strides = spec
    L = Layout(Shape(_fill(tree, iter(extents))), Stride(_fill(tree, iter(strides))))
    order = list(range(len(L)))
    rnd.shuffle(order)
    inverse = [order.index(i) for i in range(len(L))]
    P = L.permute(order)
    assert [P[j] for j in range(len(L))] == [L[i] for i in order]
    assert P.permute(inverse) == L
