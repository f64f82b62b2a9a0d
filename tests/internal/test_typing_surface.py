"""The typing surface at run time: the typed user script runs, and the static `__all__` lists
that type checkers read stay equal to the names the modules really export."""
import importlib
import pathlib
import runpy

import strideweave
from strideweave import carriers

SCRIPT = pathlib.Path(__file__).parents[1] / "typing" / "uses_every_api.py"
CARRIER_MODULES = ("dtype", "base", "generic", "cpu", "file_backed", "block_device", "evictable")


def test_the_typed_user_script_runs() -> None:
    namespace = runpy.run_path(str(SCRIPT))
    namespace["main"]()


def test_carriers_all_is_the_union_of_its_submodules() -> None:
    expected = []
    for name in CARRIER_MODULES:
        expected.extend(importlib.import_module(f"strideweave.carriers.{name}").__all__)
    assert sorted(carriers.__all__) == sorted(expected)
    assert len(set(carriers.__all__)) == len(carriers.__all__)
    for name in carriers.__all__:
        assert getattr(strideweave, name) is getattr(carriers, name)


def test_sum_and_dtype_members_are_public() -> None:
    assert strideweave.sum is strideweave.friendly.sum
    for name in ("Any", "Floating", "Integer", "Float32", "Float64", "Int32", "Bool", "E2M1", "E8M0", "MXFP4"):
        assert name in strideweave.DType.__annotations__
        assert getattr(strideweave.DType, name) is strideweave.DType.from_name(name)


def test_stubs_exist_only_for_compiled_modules() -> None:
    # A .pyi beside a .py hides the source from type checkers; annotate the .py instead.
    package = pathlib.Path(strideweave.__file__).parent
    for stub in package.rglob("*.pyi"):
        assert not stub.with_suffix(".py").exists(), f"{stub.name} shadows {stub.stem}.py"
        assert list(stub.parent.glob(f"{stub.stem}.*.so")), f"{stub.name} has no compiled module"


def test_the_typed_script_uses_every_public_name() -> None:
    # Public = exported at the top level, minus the submodules. A name missing here is a name
    # whose annotations no type checker sees from a user's side: use it in uses_every_api.py.
    import re
    import types

    text = SCRIPT.read_text()
    public = [n for n in dir(strideweave) if not n.startswith("_")
              and not isinstance(getattr(strideweave, n), types.ModuleType)]
    missing = [n for n in public if not re.search(rf"\bsw\.{n}\b", text)]
    assert not missing, f"tests/typing/uses_every_api.py does not use: {missing}"
