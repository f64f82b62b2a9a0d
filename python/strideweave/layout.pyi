"""Type stub for strideweave.layout (layout-and-dtype.md §1–§7).

``Shape``, ``Stride`` and ``Layout`` are implemented in Rust (``strideweave._native``) and
re-exported; they are immutable (setting or deleting any attribute raises AttributeError),
hashable, and compare equal only to the same class with the same tree.

API shape decisions: ``size``, ``cosize``, ``depth``, ``is_leaf``, ``leaf_shape``,
``leaf_stride``, ``profile``, ``top_level``, ``shape`` and ``stride`` are properties;
``is_injective()``, ``infix()``, ``index()``, ``decode()``, ``encode()``, ``broadcast_to()``,
``concat()``, ``append()`` and ``permute()`` are methods.
"""
from enum import IntEnum
from typing import Iterator, Sequence, SupportsIndex, Union, overload

__all__ = ["Shape", "Stride", "Layout", "Node"]

# An element of a Shape/Stride constructor: int (bool counts as 0/1), nested list/tuple, or
# a same-class tree.
_Item = Union[int, Sequence["_Item"], "Shape", "Stride"]
# A nested tuple of ints as returned by ``top_level`` and ``Shape.decode``.
_NestedInts = tuple[Union[int, "_NestedInts"], ...]
# An index key: an int ordinal, or a list/tuple congruent with the shape where an int may
# replace any subtree. Bools are rejected (TypeError).
_Key = Union[int, Sequence["_Key"]]

class Node(IntEnum):
    """Marker of ``Layout.profile``: Leaf for an int mode, Push … Pop around a nested mode."""

    Leaf = 1
    Push = 2
    Pop = 3

class _Tree:
    def __init__(self, *items: _Item) -> None:
        """No items: rank 0. One item: the whole tree (an int gives rank 1, a list/tuple
        supplies the top-level modes). Several items: the top-level modes.

        Raises ValueError for a bad value, a bad element type or an empty nested mode, and
        OverflowError for an int outside signed 64 bits."""
    @property
    def top_level(self) -> _NestedInts:
        """The tree as a nested tuple of ints."""
    @property
    def depth(self) -> int:
        """1 if flat (rank 0 included), else 1 + the greatest child depth."""
    def __len__(self) -> int:
        """Rank: the number of top-level modes."""
    def __iter__(self) -> Iterator["_Tree"]: ...
    def __hash__(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...

class Shape(_Tree):
    """Immutable hierarchical tree of extents (each >= 1)."""

    @overload
    def __getitem__(self, key: SupportsIndex) -> "Shape":
        """Top-level mode (a nested mode's children become the top level). IndexError out
        of range; TypeError for other key types."""
    @overload
    def __getitem__(self, key: slice) -> "Shape": ...
    def __iter__(self) -> Iterator["Shape"]: ...
    @property
    def size(self) -> int:
        """Product of the extents (1 for rank 0). OverflowError beyond 2**63-1."""
    def decode(self, i: int) -> _NestedInts:
        """Coordinate of ordinal ``i`` (mixed radix, first mode fastest).
        TypeError for a non-int or bool; ValueError outside [0, size)."""
    def encode(self, c: _Key) -> int:
        """Inverse of ``decode``; an int may replace any subtree. Errors as for layout keys."""
    def concat(self, other: "Shape") -> "Shape":
        """``Shape.concat(a, b)``: the top-level modes of a, then of b. TypeError for a non-Shape."""
    def append(self, other: "Shape") -> "Shape":
        """``Shape.append(a, b)``: a if b is rank 0, the concat if b is a leaf, else b as one
        new last mode. TypeError for a non-Shape."""

class Stride(_Tree):
    """Immutable hierarchical tree of strides (each >= 0)."""

    @overload
    def __getitem__(self, key: SupportsIndex) -> "Stride": ...
    @overload
    def __getitem__(self, key: slice) -> "Stride": ...
    def __iter__(self) -> Iterator["Stride"]: ...
    def concat(self, other: "Stride") -> "Stride":
        """``Stride.concat(a, b)``: the top-level modes of a, then of b."""
    def append(self, other: "Stride") -> "Stride":
        """``Stride.append(a, b)``: as ``Shape.append``."""

class Layout:
    """Immutable hierarchical layout: a congruent Shape and Stride."""

    def __init__(self, shape: Shape, stride: Stride) -> None:
        """ValueError unless ``shape`` is a Shape, ``stride`` a Stride and they are congruent;
        OverflowError if the size or cosize exceeds 2**63-1."""
    @property
    def shape(self) -> Shape: ...
    @property
    def stride(self) -> Stride: ...
    def __len__(self) -> int:
        """Rank: the number of top-level modes."""
    def __iter__(self) -> Iterator["Layout"]:
        """``layout[0]``, ``layout[1]``, …"""
    @overload
    def __getitem__(self, key: SupportsIndex) -> "Layout":
        """``Layout(shape[key], stride[key])``: a selected nested mode's children become the
        top-level modes. IndexError out of range; TypeError for other key types."""
    @overload
    def __getitem__(self, key: slice) -> "Layout": ...
    @property
    def depth(self) -> int:
        """``shape.depth``."""
    @property
    def is_leaf(self) -> bool:
        """Rank 1 with an int mode."""
    def __call__(self, key: _Key) -> int:
        """Σ leaf coordinate × leaf stride. ValueError for out-of-range, negative, missing or
        extra components; TypeError for a bool anywhere or a non-int, non-list/tuple."""
    def index(self, key: _Key) -> int:
        """Same as ``layout(key)``."""
    @staticmethod
    def get_index(layout: "Layout", key: _Key) -> int:
        """Same as ``layout(key)``; ValueError if ``layout`` is not a Layout."""
    @property
    def size(self) -> int:
        """Number of coordinates (``shape.size``)."""
    @property
    def cosize(self) -> int:
        """1 + Σ (extent−1)·stride over the leaves: one past the greatest index reached."""
    @property
    def leaf_shape(self) -> tuple[int, ...]:
        """Leaf extents, depth-first, left to right."""
    @property
    def leaf_stride(self) -> tuple[int, ...]:
        """Leaf strides matching ``leaf_shape``."""
    def infix(self) -> list[tuple[int, int]]:
        """``(extent, stride)`` of every leaf, depth-first."""
    @property
    def profile(self) -> list[Node]:
        """A fresh depth-first list of Node markers (values ignored)."""
    def is_injective(self) -> bool:
        """True iff distinct coordinates give distinct indices (a method, not a property)."""
    def broadcast_to(self, target: Shape) -> "Layout":
        """Per leaf: equal extent keeps its stride, extent 1 takes the target extent with
        stride 0. TypeError for a non-Shape; ValueError for another profile or extent change."""
    @staticmethod
    def canonical(shape: Shape) -> "Layout":
        """The canonical injective layout: each leaf's stride is the product of the earlier
        leaves' extents. TypeError for a non-Shape."""
    def concat(self, other: "Layout") -> "Layout":
        """``Layout.concat(a, b)`` / ``a.concat(b)`` / ``a + b``: a's top-level modes, then
        b's. TypeError for a non-Layout operand."""
    def __add__(self, other: "Layout") -> "Layout": ...
    def append(self, other: "Layout") -> "Layout":
        """``Layout.append(a, b)``: a if b is rank 0, the concat if b is a leaf, else b's
        whole tree as one new last mode. TypeError for a non-Layout operand."""
    @overload
    def permute(self, *order: int) -> "Layout":
        """``Layout.permute(layout, *order)``: ``order[j]`` is the source top-level mode at
        j; variadic or one list/tuple. TypeError for a non-int entry (bools included);
        ValueError unless a permutation of range(rank)."""
    @overload
    def permute(self, order: Sequence[int], /) -> "Layout": ...
    def __hash__(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...
