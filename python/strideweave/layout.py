"""Hierarchical layouts: ``Shape``, ``Stride``, ``Layout``, the ``Node`` profile markers, and
``Tree`` / ``Node.id(n)``, which describe the output of ``Layout.rearrange``.

``Shape``, ``Stride`` and ``Layout`` are the native classes themselves (implemented in Rust,
``strideweave._native``), re-exported here so that ``strideweave.layout.Shape is
strideweave._native.Shape``. ``Node`` is a plain Python enum because the spec makes it an
``IntEnum``-style value set that user code compares and prints like any other enum.
``Tree`` and ``NodeId`` (what ``Node.id(n)`` returns) are native, validated once when built.
"""
from enum import IntEnum

from strideweave._native import Layout, NodeId, Shape, Stride, Tree

__all__ = ["Shape", "Stride", "Layout", "Node", "Tree", "NodeId"]


class Node(IntEnum):
    """Marker of ``Layout.profile``: ``Leaf`` for an int mode, ``Push``/``Pop`` around a nested one."""

    Leaf = 1
    Push = 2
    Pop = 3

    @staticmethod
    def id(n: int) -> NodeId:
        """The n-th sublayout of a ``Layout.rearrange`` selection, as a ``Tree`` child or output.

        TypeError unless ``n`` is an int (bools refused); ValueError if it is negative.
        """
        return NodeId(n)
