"""docs/spec/layout-and-dtype.md §2 Shape and Stride: items, elements, copying and
freezing, the bad-input table, and the members table (indexing, depth, size, decode/encode,
concat/append, equality, repr, hash, pickling). Every example and error row of the section
appears here verbatim."""
import pickle

import pytest

from strideweave import Layout, Shape, Stride


def lay(shape, stride):
    """`[..]:[..]` notation of the spec: Layout(Shape(shape), Stride(stride))."""
    return Layout(Shape(shape), Stride(stride))


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
