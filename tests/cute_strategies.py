"""Random hierarchical layouts for the §9 algebra tests, and conversions to pycute.

A layout is drawn as a random tree (depth <= 3, at most 6 leaves) with a bounded size, so
every test can compare images index by index. ``tractable_layouts`` gives injective layouts
whose strides, in increasing order, are multiples of what the smaller modes reach (the
inputs on which CuTe's complement and divide preconditions hold); ``layouts`` gives any.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from strideweave import Layout, Shape, Stride

MAX_SIZE = 256


@st.composite
def _tree(draw: Any, depth: int, budget: list[int]) -> Any:
    """A nested list of leaf placeholders (None); ``budget[0]`` counts leaves left."""
    n = draw(st.integers(1, 3))
    out: list[Any] = []
    for _ in range(n):
        if budget[0] <= 0:
            break
        if depth < 3 and draw(st.integers(0, 3)) == 0:
            out.append(draw(_tree(depth + 1, budget)))
        else:
            budget[0] -= 1
            out.append(None)
    return out or [None]


def _fill(tree: Any, values: list[int]) -> Any:
    return [_fill(t, values) if isinstance(t, list) else values.pop(0) for t in tree]


def _count(tree: Any) -> int:
    return sum(_count(t) if isinstance(t, list) else 1 for t in tree)


@st.composite
def _shape_tree(draw: Any) -> tuple[Any, list[int]]:
    tree = draw(_tree(1, [6]))
    n = _count(tree)
    extents, size = [], 1
    for _ in range(n):
        e = draw(st.integers(1, max(1, min(4, MAX_SIZE // size))))
        extents.append(e)
        size *= e
    return tree, extents


@st.composite
def layouts(draw: Any) -> Layout:
    """Any layout: strides 0..12."""
    tree, extents = draw(_shape_tree())
    strides = [draw(st.integers(0, 12)) for _ in extents]
    return Layout(Shape(_fill(tree, list(extents))), Stride(_fill(tree, strides)))


@st.composite
def tractable_layouts(draw: Any) -> Layout:
    """Injective, strides (in increasing order) multiples of what the smaller modes reach."""
    tree, extents = draw(_shape_tree())
    order = draw(st.permutations(range(len(extents))))
    strides = [0] * len(extents)
    running = 1
    for i in order:
        strides[i] = running * draw(st.integers(1, 2))
        running = strides[i] * extents[i]
    return Layout(Shape(_fill(tree, list(extents))), Stride(_fill(tree, strides)))


def to_pycute(layout: Layout) -> Any:
    """The pycute layout of the same function: a rank-1 layout with an int mode is pycute's
    integer layout ``s:d``, anything else a tuple layout."""
    import pycute

    shape, stride = layout.shape.top_level, layout.stride.top_level
    if len(shape) == 1 and isinstance(shape[0], int):
        return pycute.Layout(shape[0], stride[0])
    return pycute.Layout(shape, stride)


def from_pycute(layout: Any) -> Layout:
    def lists(t: Any) -> Any:
        return [lists(x) for x in t] if isinstance(t, tuple) else t

    if isinstance(layout.shape, int):
        return Layout(Shape(layout.shape), Stride(layout.stride))
    return Layout(Shape(lists(layout.shape)), Stride(lists(layout.stride)))


def image(layout: Any) -> list[int]:
    """Index at every ordinal (works for both strideweave and pycute layouts)."""
    n = layout.size if isinstance(layout, Layout) else layout.size()
    return [layout(i) for i in range(n)]


def top_modes(layout: Any) -> list[Any]:
    """Top-level modes: an integer pycute layout is its own single mode."""
    if isinstance(layout, Layout):
        return list(layout)
    if isinstance(layout.shape, int):
        return [layout]
    return [layout[i] for i in range(len(layout.shape))]
