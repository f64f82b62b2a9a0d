"""layout-and-dtype.md §9, "Rearrange": ``Tree``, ``Node.id(n)``, ``Layout.rearrange`` and
``Layout.uniform_preimage_extent``, with their refusals."""


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cute_strategies import layouts
from strideweave import Layout, Node, NodeId, Shape, Stride, Tree
import strideweave.layout as swl


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_names_are_importable_from_both_namespaces():
    assert swl.Tree is Tree and swl.NodeId is NodeId
    assert isinstance(Node.id(3), NodeId) and Node.id(3).index == 3


def test_spec_example():
    a = L((2, 3), (1, 2))
    assert a.rearrange(Tree(Node.id(1), Node.Leaf, Node.id(0))) == L((3, 1, 2), (2, 0, 1))
    assert Layout.rearrange(a, Tree(Node.id(1), Node.Leaf, Node.id(0))) == L((3, 1, 2), (2, 0, 1))


def test_a_nested_tree_is_a_nested_mode_and_ids_may_repeat_or_be_left_out():
    a = L((2, 3, 4), (1, 2, 6))
    assert a.rearrange(Tree(Tree(Node.id(2), Node.id(0)))) == L(((4, 2),), ((6, 1),))
    assert a.rearrange(Tree(Node.id(0), Node.id(0))) == L((2, 2), (1, 1))
    # One id alone is that sublayout as the whole result.
    assert a.rearrange(Node.id(1)) == L((3,), (2,))


def test_selection_paths_pick_nested_modes():
    a = L((4, (3, 2)), (1, (8, 4)))
    # An int is a top-level mode, a tuple steps into nested modes, () is the whole layout.
    got = a.rearrange(Tree(Node.id(0), Node.id(1), Node.id(2)), selection=[(1, 1), 0, ()])
    assert got == L((2, 4, (4, (3, 2))), (4, 1, (1, (8, 4))))
    # A selected nested mode stays one nested mode.
    assert a.rearrange(Tree(Node.id(0)), selection=[1]) == L(((3, 2),), ((8, 4),))


def test_value_types_compare_hash_and_print():
    t = Tree(Node.id(1), Node.Leaf, Tree(Node.id(0)))
    assert t == Tree(Node.id(1), Node.Leaf, Tree(Node.id(0)))
    assert t != Tree(Node.id(0), Node.Leaf, Tree(Node.id(0)))
    assert hash(t) == hash(Tree(Node.id(1), Node.Leaf, Tree(Node.id(0))))
    assert len(t) == 3 and t.children[1] is Node.Leaf and t.children[0] == Node.id(1)
    assert repr(t) == "Tree(Node.id(1), Node.Leaf, Tree(Node.id(0)))"
    assert {Node.id(2): 1}[Node.id(2)] == 1


@pytest.mark.parametrize(
    ("build", "exc", "match"),
    [
        (lambda: Tree(), ValueError, "at least one child"),
        (lambda: Tree(1), TypeError, "Tree child 0"),
        (lambda: Tree(Node.id(0), Node.Push), TypeError, "Tree child 1"),
        (lambda: Tree(Layout(Shape(2), Stride(1))), TypeError, "Tree child 0"),
        (lambda: Node.id(-1), ValueError, ">= 0"),
        (lambda: Node.id(True), TypeError, "must be an int"),
        (lambda: Node.id(1.0), TypeError, "must be an int"),
    ],
)
def test_bad_trees_are_refused(build, exc, match):
    with pytest.raises(exc, match=match):
        build()


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda a: a.rearrange(Tree(Node.id(2))), ValueError, r"Node.id\(2\).*2 sublayouts"),
        (lambda a: a.rearrange(Tree(Node.id(1)), selection=[0]), ValueError, "1 sublayouts"),
        (lambda a: a.rearrange(Node.id(0), selection=[(0, 0)]), ValueError, "selection path"),
        (lambda a: a.rearrange(Node.id(0), selection=[5]), ValueError, "selection path"),
        (lambda a: a.rearrange(Node.id(0), selection=[-1]), ValueError, r"selection\[0\] must be >= 0"),
        (lambda a: a.rearrange(Node.id(0), selection=[1.5]), TypeError, r"selection\[0\]"),
        (lambda a: a.rearrange(Node.id(0), selection=3), TypeError, "selection must be"),
        (lambda a: a.rearrange((0, 1)), TypeError, "output must be a Tree"),
        (lambda a: a.uniform_preimage_extent("3"), TypeError, "target must be a Shape"),
        (lambda a: a.uniform_preimage_extent(0), ValueError, "target must be >= 1"),
    ],
)
def test_bad_rearrange_arguments_are_refused(call, exc, match):
    a = L((2, 3), (1, 2))
    with pytest.raises(exc, match=match):
        call(a)
    assert a == L((2, 3), (1, 2))


def test_uniform_preimage_extent_spec_example():
    assert L((4, 3), (0, 1)).uniform_preimage_extent(Shape(3)) == 4
    assert L((4, 3), (0, 1)).uniform_preimage_extent(3) == 4
    assert L((4, 3), (0, 1)).uniform_preimage_extent(Shape(4)) is None
    # A bijection is extent 1; overlapping strides are not provably uniform.
    assert L((2, 3), (3, 1)).uniform_preimage_extent(Shape((2, 3))) == 1
    assert L((2, 2), (1, 1)).uniform_preimage_extent(3) is None


@settings(max_examples=300, deadline=None)
@given(layouts(), st.integers(1, 40))
def test_uniform_preimage_extent_counts_every_index(a, target):
    k = a.uniform_preimage_extent(target)
    if k is not None:
        counts = [0] * target
        for i in range(a.size):
            counts[a(i)] += 1
        assert counts == [k] * target


@settings(max_examples=300, deadline=None)
@given(layouts().filter(lambda a: len(a) > 0))
def test_the_identity_tree_rebuilds_the_layout(a):
    assert a.rearrange(Tree(*(Node.id(i) for i in range(len(a))))) == a
