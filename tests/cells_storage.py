"""A StorageProvider keeping a definition-backed carrier's slots in a Python list (`c.cells`),
shared by the tests that define gated carriers (a route whose completion the test controls)."""
import strideweave as sw
from strideweave.carriers.extension import StorageProvider


def cells_storage(dtypes=(sw.DType.Float32,)):
    def allocate(c, n):
        c.cells = [0.0] * n

    def release(c):
        c.cells = []

    def read(c, i):
        return c.cells[i]

    def write(c, i, v):
        c.cells[i] = float(v)

    return StorageProvider(lambda c, d: d in dtypes, lambda c: len(c.cells), allocate, release, read, write)
