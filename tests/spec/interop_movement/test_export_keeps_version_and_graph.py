"""docs/spec/interop-movement.md, "Requirement: Export changes neither version tracking nor gradient tracking"."""
from __future__ import annotations

import numpy as np

import strideweave as sw

from dlpack_sources import cpu_tensor


def test_export_and_foreign_writes_leave_version_unchanged():
    t = cpu_tensor([1.0, 2.0, 3.0])
    t[0] = 1.0
    before = t.carrier.version
    snapshot = t.version_snapshot()
    a = np.from_dlpack(t)
    legacy = t.__dlpack__()
    assert t.carrier.version == before
    a[2] = 30.0
    assert t.carrier.version == before
    assert t.version_snapshot() == snapshot
    assert t[2] == 30.0
    del legacy


def _worked_example():
    x = cpu_tensor([1.0, 2.0, 3.0], [1, 3], [1, 1])
    w = cpu_tensor([10.0, 1.0, 20.0, 2.0, 30.0, 3.0], [2, 3], [1, 2])
    b = sw.broadcast_to(x, sw.Shape([2, 3]))
    p = b * w
    y = sw.sum(p)
    return x, w, b, p, y


def test_backward_over_foreign_modified_storage():
    x, w, b, p, y = _worked_example()
    version = w.carrier.version
    np.from_dlpack(w)[0, 0] = 5.0  # a DLPack consumer writes w[0,0] = 5.0
    assert w.carrier.version == version
    y.backward()
    assert [x.grad[0, j] for j in range(3)] == [6.0, 22.0, 33.0]


def test_export_does_not_disturb_the_graph():
    x, w, b, p, y = _worked_example()
    ctx, grad = p.autograd_ctx, p.grad
    versions = (x.carrier.version, w.carrier.version, p.carrier.version)
    assert ctx is not None
    caps = [p.__dlpack__(), p.__dlpack__(max_version=(1, 0)), np.from_dlpack(p)]
    assert p.autograd_ctx is ctx and p.grad is grad and y.grad is None
    assert (x.carrier.version, w.carrier.version, p.carrier.version) == versions
    y.backward()
    assert [x.grad[0, j] for j in range(3)] == [11.0, 22.0, 33.0]
    # A gradient tensor exports under the same rules.
    assert np.from_dlpack(x.grad).tolist() == [[11.0, 22.0, 33.0]]
    del caps
