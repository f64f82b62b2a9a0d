"""docs/spec/layout-and-dtype.md §6 Structural queries: profile (and the Node
enum it is made of), is_injective, broadcast_to and the canonical injective layout.

The hypothesis test at the end checks indexing, cosize and injectivity against brute force on
random small hierarchical layouts (the section's "the result always equals the brute-force
definition")."""
import itertools

from hypothesis import given, settings
import pytest

from strideweave import Layout, Node, Shape, Stride

from layout_strategies import fill_leaves, random_layouts


def lay(shape, stride):
    """`[..]:[..]` notation of the spec: Layout(Shape(shape), Stride(stride))."""
    return Layout(Shape(shape), Stride(stride))


def test_node_enum_values():
    assert (Node.Leaf, Node.Push, Node.Pop) == (1, 2, 3)
    assert [m.name for m in Node] == ["Leaf", "Push", "Pop"]


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


def _all_coords(tree, extents):
    """Every hierarchical coordinate, built from the flat leaf coordinates."""
    for flat in itertools.product(*(range(e) for e in extents)):
        yield fill_leaves(tree, iter(flat)), flat


@settings(max_examples=300, deadline=None)
@given(random_layouts())
def test_properties_against_brute_force(spec):
    tree, extents, strides = spec
    L = Layout(Shape(fill_leaves(tree, iter(extents))), Stride(fill_leaves(tree, iter(strides))))
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
