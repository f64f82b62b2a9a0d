"""docs/spec/interop-movement.md, "Requirement: DLPack is export-only"."""
from __future__ import annotations

import pytest

import strideweave as sw

from dlpack_sources import cpu_tensor


def layout(shape, stride):
    return sw.Layout(sw.Shape(shape), sw.Stride(stride))


def test_no_dlpack_import_path():
    import importlib
    import pkgutil

    modules = [sw]
    for info in pkgutil.walk_packages(sw.__path__, "strideweave."):
        if info.name.split(".")[-1].startswith("_"):
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:
            continue
    for module in modules:
        names = [n for n in dir(module) if not n.startswith("_")]
        assert not [n for n in names if "from_dlpack" in n.lower()], module.__name__
        for name in names:
            obj = getattr(module, name)
            if isinstance(obj, type):
                assert not [n for n in dir(obj) if "from_dlpack" in n.lower()], (module.__name__, name)
    # The Tensor and carrier constructors do not consume capsules.
    cap = cpu_tensor([1.0]).__dlpack__()
    with pytest.raises(TypeError):
        sw.Tensor(cap, 0, layout([1], [1]))
    with pytest.raises(TypeError):
        sw.CPU(cap)
