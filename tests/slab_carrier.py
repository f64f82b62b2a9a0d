"""The extension-and-tiling.md §6 `Slab` carrier: a fresh definition-backed class per
call, with the route `slab.to_cpu` and a trace of what its callbacks saw."""
import threading

import strideweave as sw
from strideweave.carriers.extension import (CarrierDefinition, PreparedTransfer, StorageProvider,
                                            TransferProvider, TransferRoute, Unsupported,
                                            register_carrier_definition)

F32 = sw.DType.Float32


def slab_storage(fallback=True):
    def allocate(c, n):
        c.cells = [0.0] * n

    def release(c):
        c.cells = []

    def write(c, i, v):
        c.cells[i] = v

    return StorageProvider(lambda c, d: d is F32, lambda c: len(c.cells), allocate, release,
                           lambda c, i: c.cells[i], write, elementwise_fallback=fallback)


class Trace:
    """What the route's callbacks saw."""

    def __init__(self):
        self.prepared = []
        self.submitted = []


def make_slab(trace=None, completion=None):
    """A fresh Slab class with the §6 definition; `completion(request)` may supply what
    submit returns after copying."""
    trace = trace if trace is not None else Trace()
    Slab = type("Slab", (sw.Carrier,), {})

    def prep(request):
        trace.prepared.append((request, threading.get_ident(), sw.is_grad_enabled()))
        if not request.layout.is_injective():
            return Unsupported("broadcast")

        def submit():
            trace.submitted.append(threading.get_ident())
            cells, offset = request.tensor.carrier.cells, request.offset
            for k in range(request.physical_span):
                request.destination[k] = cells[offset + k]
            return None if completion is None else completion(request)

        return PreparedTransfer(submit)

    route = TransferRoute(Slab, sw.CPU, "slab.to_cpu", TransferProvider(prep))
    register_carrier_definition(Slab, CarrierDefinition(slab_storage(), transfers=[route]))
    return Slab, trace


def slab_tensor(Slab, values, layout=None, offset=0):
    c = Slab(len(values), dtype=F32)
    for i, v in enumerate(values):
        c[i] = v
    layout = layout or sw.Layout(sw.Shape([len(values)]), sw.Stride([1]))
    return sw.Tensor(c, offset, layout)
