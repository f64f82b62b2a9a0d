"""docs/spec/layout-and-dtype.md §1 Import surface: every name is one object in each
module that exports it (that the layout names are the native classes themselves:
tests/internal/test_layout_classes_are_native.py)."""
import strideweave as sw
from strideweave.carriers import dtype as dtmod
from strideweave.carriers.dtype import BlockScaledDType, CompoundDType, DType


def test_import_surface_is_shared():
    import strideweave.carriers as carriers
    for name in ["DType", "DTypeCategory", "SimpleDType", "CompoundDType", "BlockScaledDType"]:
        assert getattr(sw, name) is getattr(carriers, name) is getattr(dtmod, name)
    assert issubclass(BlockScaledDType, CompoundDType) and issubclass(CompoundDType, DType)
