"""Hierarchical layouts: ``Shape``, ``Stride``, ``Layout`` and the ``Node`` profile markers.

``Shape``, ``Stride`` and ``Layout`` are the native classes themselves (implemented in Rust,
``strideweave._native``), re-exported here so that ``strideweave.layout.Shape is
strideweave._native.Shape``. ``Node`` is a plain Python enum because the spec makes it an
``IntEnum``-style value set that user code compares and prints like any other enum.
"""
from enum import IntEnum

from strideweave._native import Layout, Shape, Stride

__all__ = ["Shape", "Stride", "Layout", "Node"]


class Node(IntEnum):
    """Marker of ``Layout.profile``: ``Leaf`` for an int mode, ``Push``/``Pop`` around a nested one."""

    Leaf = 1
    Push = 2
    Pop = 3
