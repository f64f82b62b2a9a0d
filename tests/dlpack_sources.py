"""Tensors for the DLPack export tests: CPU tensors holding given values under a
layout, and a CPU subclass whose dlpack_info hook a test sets."""
from __future__ import annotations

import strideweave as sw

F32, I32, BOOL = sw.DType.Float32, sw.DType.Int32, sw.DType.Bool


def layout(shape, stride):
    return sw.Layout(sw.Shape(shape), sw.Stride(stride))


def cpu_tensor(values, shape=None, stride=None, *, offset=0, dtype=F32, mutable=True, size=None):
    """A CPU tensor whose carrier holds `values` (padded to `size`), viewed through a layout."""
    n = len(values) if size is None else size
    carrier = sw.CPU(n, dtype=dtype)
    for i, v in enumerate(values):
        carrier[i] = v
    if not mutable:
        carrier = carrier.new_like([carrier[i] for i in range(n)], mutable=False)
    if shape is None:
        shape, stride = [n - offset], [1]
    return sw.Tensor(carrier, offset, layout(shape, stride))


class HookCPU(sw.CPU):
    """A CPU subclass whose dlpack_info answer is whatever the test sets."""
    answer = None
    calls = 0

    def dlpack_info(self):
        type(self).calls += 1
        answer = type(self).answer
        if isinstance(answer, BaseException):
            raise answer
        return answer(self) if callable(answer) else answer
