"""docs/spec/interop-movement.md, "Requirement: Versioned exports advertise mutability as an advisory read-only flag"."""
from __future__ import annotations

import ctypes

import numpy as np

from dlpack_sources import cpu_tensor
from dlpack_structs import LEGACY, READ_ONLY, DLManagedTensor, capsule_name, managed


def test_immutable_tensor_exports_read_only():
    t = cpu_tensor([1.0, 2.0], mutable=False)
    assert not t.is_mutable()
    assert managed(t.__dlpack__(max_version=(1, 0))).flags == READ_ONLY
    a = np.from_dlpack(t)
    assert not a.flags.writeable
    assert a.tolist() == [1.0, 2.0]


def test_mutable_tensor_flags_zero():
    t = cpu_tensor([1.0, 2.0])
    assert managed(t.__dlpack__(max_version=(1, 0))).flags == 0


def test_legacy_export_carries_no_flags():
    t = cpu_tensor([1.0, 2.0], mutable=False)
    cap = t.__dlpack__()
    assert capsule_name(cap) == LEGACY
    m = managed(cap)
    assert not hasattr(m, "flags") and ctypes.sizeof(m) == ctypes.sizeof(DLManagedTensor)
