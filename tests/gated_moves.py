"""A definition-backed `Gated` carrier whose route to CPU completes only when the test
opens a gate: moves that stay pending for as long as a test needs, without timing assumptions."""
import threading

import strideweave as sw
from strideweave import CPU, Carrier, Layout, Shape, Stride, Tensor
from strideweave.carriers.extension import (CarrierDefinition, PreparedTransfer,
                                            TransferProvider, TransferRoute, register_carrier_definition)

from cells_storage import cells_storage

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


class GateCompletion:
    """A ProviderCompletion that finishes when the test says so."""

    def __init__(self, failure=None, result=None):
        self.gate = threading.Event()
        self.failure = failure
        self.result = result

    @property
    def done(self):
        return self.gate.is_set()

    def wait(self):
        self.gate.wait()
        if self.failure is not None:
            raise self.failure
        return self.result


class Gated(Carrier):
    pass


PREPARED = []


def _prepare(request):
    completion = PREPARED.pop(0) if PREPARED else None

    def submit():
        cells = request.tensor.carrier.cells
        for k in range(request.physical_span):
            request.destination[k] = cells[request.tensor.offset + k]
        return completion
    return PreparedTransfer(submit)


register_carrier_definition(Gated, CarrierDefinition(
    cells_storage(), transfers=(TransferRoute(Gated, CPU, "gated.to_cpu", TransferProvider(_prepare)),)))


def gated_tensor(values):
    c = Gated(len(values), dtype=D.Float32)
    for i, v in enumerate(values):
        c[i] = v
    return Tensor(c, 0, L(len(values), 1))


def start(values, completion):
    PREPARED.append(completion)
    t = gated_tensor(values)
    dest = CPU(len(values))
    with sw.no_grad():
        handle = sw.move_async(t, dest)
    return t, dest, handle


def pending_handle(values=(1.0, 2.0), failure=None):
    """A pending public AwaitMove of `values` and the gate that completes it (with `failure`,
    its terminal failure)."""
    completion = GateCompletion(failure)
    t, dest, handle = start(list(values), completion)
    assert handle.done is False
    return handle, completion.gate
