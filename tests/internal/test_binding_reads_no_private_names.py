"""The binding reads no private Python attribute by name (issue 21): it calls the spec's public
hooks and fields, and the package's own functions reach it through the `configure_*`
registrations, where a rename fails the import instead of a move or an access at run time."""
from __future__ import annotations

import pathlib
import re

import pytest

import strideweave as sw
from strideweave import _native

BINDING = pathlib.Path(__file__).resolve().parents[2] / "crates" / "strideweave-py" / "src"

# A Python attribute named in a lookup: `intern!(py, "_x")` (the only way the binding spells a
# looked-up name), `getattr("_x")`, `call_method0("_x")`, `setattr("_x", ..)`, ... Dunders are
# the language's protocol, not the package's private names.
_LOOKUP = re.compile(r'(?:intern!\(\s*[\w.()]+\s*,|getattr(?:_opt)?\(|call_method[01]?\(|setattr\(|hasattr\()'
                     r'\s*"(_[A-Za-z0-9][A-Za-z0-9_]*)"')


def _private_lookups(text: str) -> list[str]:
    return [m.group(1) for m in _LOOKUP.finditer(text) if not m.group(1).startswith("__")]


def test_the_scan_sees_each_lookup_form() -> None:
    # The pattern would miss nothing the binding has used: each form, as it was written.
    for line in ('x.getattr(intern!(py, "_sw_owner"))', 'h.setattr(intern!(py, "_progress"), &p)',
                 'n.call_method0(intern!(py, "_sw_clear"))', 'b.getattr("_is_mutable")',
                 't.getattr_opt(pyo3::intern!(py, "_sw_fast_access"))'):
        assert _private_lookups(line), line
    assert _private_lookups('e.getattr("__traceback__")') == []


def test_no_binding_source_looks_up_a_private_python_name() -> None:
    found = {str(path.relative_to(BINDING)): names
             for path in sorted(BINDING.rglob("*.rs"))
             if (names := _private_lookups(path.read_text()))}
    assert found == {}


def test_each_registration_is_made_once() -> None:
    with pytest.raises(ValueError, match="configured once"):
        _native.configure_element_access({"getitem": None, "setitem": None, "keeps_builtin_element_path": None,
                                          "keeps_builtin_mutability": None})


def test_a_move_handle_counts_bytes_on_its_native_counter() -> None:
    # The request gives the handle its counter natively (no attribute set by name).
    tensor = sw.Tensor(sw.CPU(1024), 0, sw.Layout(sw.Shape(1024), sw.Stride(1)))
    handle = sw.move_async(tensor, sw.CPU(1024))
    assert handle.bytes_total == 4096
    handle.wait()
    assert handle.bytes_done == 4096
