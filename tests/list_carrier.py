"""A pure-Python Float32 carrier over a list: the required hooks plus set_value, as a user
writes one (docs/spec/tensor-and-carriers.md §2)."""
import strideweave as sw
from strideweave import Carrier

D = sw.DType


class ListCarrier(Carrier):
    """A pure-Python carrier implementing only the required hooks plus set_value."""

    def __init__(self, values, mutable=True):
        super().__init__()
        self.values = list(values)
        self.mutable = mutable

    def size(self):
        return 0 if self.is_released() else len(self.values)

    def dtype(self):
        return D.Float32

    def get_value(self, i):
        return self.values[i]

    def set_value(self, i, v):
        self.values[i] = float(v)

    def _is_mutable(self):
        return self.mutable

    def new_like(self, values, *, mutable=True, dtype=None):
        return ListCarrier(values, mutable)

    def allocate_like(self, size, *, mutable=True, dtype=None, empty=False):
        return ListCarrier([0.0] * size, mutable)

    def _release(self):
        self.values = []
