"""docs/spec/tensor-and-carriers.md, "Imports": the carriers are importable from the package
and from `strideweave.carriers` as the same objects, and the package loads."""
import strideweave as sw


def test_native_module_loads():
    assert sw.__version__ == "0.1.0"


def test_import_surface():
    import strideweave.carriers as c
    for name in ["Carrier", "Generic", "CPU", "FileBacked"]:
        assert getattr(sw, name) is getattr(c, name)


def test_importable_from_package_and_carriers():
    import strideweave.carriers as carriers
    from strideweave.carriers.evictable import Evictable
    assert sw.Evictable is carriers.Evictable is Evictable
