"""CPU carriers whose slot i holds i, and the layout shorthand the
tensor-and-carriers.md §1 tests use."""
import strideweave as sw
from strideweave import CPU

D = sw.DType


def filled(n, dtype=D.Float32):
    c = CPU(n, dtype=dtype)
    for i in range(n):
        c[i] = float(i) if dtype is D.Float32 else i
    return c
