"""A definition-backed `OutputFilled` carrier whose route to CPU copies on a thread of its own,
through `TransferRequest.output` (issue 21: how an asynchronous provider fills its
destination), once the test opens `go`, and reports done once the test opens `finish`: a
provider whose writes land while the move is pending, for as long as a test needs."""
import threading

import strideweave as sw
from strideweave import CPU, Layout, Shape, Stride, Tensor
from strideweave.carriers.extension import (CarrierDefinition, PreparedTransfer, TransferProvider,
                                            TransferRoute, register_carrier_definition)

from cells_storage import cells_storage


class OutputFillingCompletion:
    """A ProviderCompletion: its thread copies the source window through `request.output`
    after `go` is set; `done` once that copy ended and `finish` is set."""

    def __init__(self, request, go, finish):
        self.finished = threading.Event()
        self.failure = None

        def run():
            go.wait(60)
            try:
                cells = request.tensor.carrier.cells
                for k in range(request.physical_span):
                    request.output[k] = cells[request.tensor.offset + k]
            except BaseException as exc:  # noqa: BLE001 - reported through wait()
                self.failure = exc
            finish.wait(60)
            self.finished.set()
        threading.Thread(target=run, daemon=True).start()

    @property
    def done(self):
        return self.finished.is_set()

    def wait(self):
        self.finished.wait(60)
        if self.failure is not None:
            raise self.failure


class OutputFilled(sw.Carrier):
    pass


_EVENTS: list = []


def _prepare(request):
    go, finish = _EVENTS.pop()
    return PreparedTransfer(lambda: OutputFillingCompletion(request, go, finish))


register_carrier_definition(OutputFilled, CarrierDefinition(
    cells_storage(), transfers=(TransferRoute(OutputFilled, CPU, "output_filled.to_cpu", TransferProvider(_prepare)),)))


def pending_move(values, destination):
    """`(source tensor, handle, go, finish)`: a move of `values` into `destination` whose
    provider copies once `go` is set and completes once `finish` is set too."""
    go, finish = threading.Event(), threading.Event()
    _EVENTS.append((go, finish))
    c = OutputFilled(len(values), dtype=sw.DType.Float32)
    for i, v in enumerate(values):
        c[i] = v
    t = Tensor(c, 0, Layout(Shape([len(values)]), Stride([1])))
    with sw.no_grad():
        handle = sw.move_async(t, destination)
    return t, handle, go, finish
