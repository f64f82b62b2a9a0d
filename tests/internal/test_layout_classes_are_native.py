"""The layout names of docs/spec/layout-and-dtype.md §1 are one object in every module that
exports them, and that object is the `_native` pyclass itself, not a Python wrapper around it
(the public-surface tests of §1 are in tests/spec/layout_and_dtype/test_s1_import_surface.py)."""
import strideweave as sw
from strideweave import Shape
import strideweave.layout as swl


def test_layout_names_are_the_native_classes_in_every_module():
    for name in ["Shape", "Stride", "Layout", "Node", "Tree", "NodeId"]:
        assert getattr(sw, name) is getattr(swl, name)
    assert swl.__all__ == ["Shape", "Stride", "Layout", "Node", "Tree", "NodeId"]
    assert sw.Tree is sw._native.Tree and sw.NodeId is sw._native.NodeId
    # The public classes are the native classes, not wrappers.
    assert sw.Shape is sw._native.Shape
    assert sw.Stride is sw._native.Stride
    assert sw.Layout is sw._native.Layout
    assert Shape.__module__ == "strideweave.layout" and Shape.__qualname__ == "Shape"
