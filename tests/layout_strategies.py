"""Hypothesis strategies for random small hierarchical layouts, shared by the
property tests of layout-and-dtype.md §6 and §7: a layout is drawn as a tree of None leaves
with one extent and one stride per leaf."""
from hypothesis import strategies as st


def tree_structures(depth):
    """A random tree structure: lists of None leaves, nesting at most `depth` deep."""
    if depth == 0:
        return st.none()
    return st.one_of(st.none(), st.lists(tree_structures(depth - 1), min_size=1, max_size=3))


trees = st.lists(tree_structures(3), min_size=0, max_size=3).filter(lambda t: count_leaves(t) <= 6)


def count_leaves(t):
    return 1 if t is None else sum(count_leaves(c) for c in t)


def fill_leaves(t, values):
    """Replace the None leaves of `t`, depth-first, by the next items of `values`."""
    if t is None:
        return next(values)
    return [fill_leaves(c, values) for c in t]


@st.composite
def random_layouts(draw):
    tree = draw(trees)
    n = count_leaves(tree)
    extents = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    strides = draw(st.lists(st.integers(0, 7), min_size=n, max_size=n))
    return tree, extents, strides
