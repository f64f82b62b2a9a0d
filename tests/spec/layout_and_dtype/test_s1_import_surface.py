"""docs/spec/layout-and-dtype.md §1 Import surface: every name is one object in each
module that exports it."""
import strideweave as sw
from strideweave import Shape
from strideweave.carriers import dtype as dtmod
from strideweave.carriers.dtype import BlockScaledDType, CompoundDType, DType
import strideweave.layout as swl


def test_import_surface_same_objects():
    for name in ["Shape", "Stride", "Layout", "Node"]:
        assert getattr(sw, name) is getattr(swl, name)
    assert swl.__all__ == ["Shape", "Stride", "Layout", "Node"]
    # The public classes are the native classes, not wrappers.
    assert sw.Shape is sw._native.Shape
    assert sw.Stride is sw._native.Stride
    assert sw.Layout is sw._native.Layout
    assert Shape.__module__ == "strideweave.layout" and Shape.__qualname__ == "Shape"


def test_import_surface_is_shared():
    import strideweave.carriers as carriers
    for name in ["DType", "DTypeCategory", "SimpleDType", "CompoundDType", "BlockScaledDType"]:
        assert getattr(sw, name) is getattr(carriers, name) is getattr(dtmod, name)
    assert issubclass(BlockScaledDType, CompoundDType) and issubclass(CompoundDType, DType)
