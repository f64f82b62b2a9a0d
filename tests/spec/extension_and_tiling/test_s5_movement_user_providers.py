"""docs/spec/extension-and-tiling.md §5 Movement, with providers written the
way users write them, through public API only (issue 11, items 1, 3 and 4): an asynchronous
provider fills the destination from its own thread, resources captured by the prepared
transfer live until completion, and submit records no autograd node."""
import gc
import threading
import weakref

import strideweave as sw
from strideweave import CPU, Carrier, Layout, Shape, Stride, Tensor
from strideweave.carriers.extension import (CarrierDefinition, PreparedTransfer,
                                            TransferProvider, TransferRoute, register_carrier_definition)

from cells_storage import cells_storage

F32 = sw.DType.Float32


def flat(n):
    return Layout(Shape([n]), Stride([1]))


class Gate:
    """A ProviderCompletion finished by the provider's own worker thread."""

    def __init__(self):
        self.finished = threading.Event()
        self.error = None

    @property
    def done(self):
        return self.finished.is_set()

    def wait(self):
        self.finished.wait(30)
        if self.error is not None:
            raise self.error


def defined_source(prepare, name, dtypes=(F32,)):
    cls = type(name, (Carrier,), {})
    register_carrier_definition(cls, CarrierDefinition(
        cells_storage(dtypes), transfers=(TransferRoute(cls, CPU, f"{name}.to_cpu", TransferProvider(prepare)),)))
    return cls


def tensor_of(cls, values, dtype=F32):
    c = cls(len(values), dtype=dtype)
    for i, v in enumerate(values):
        c[i] = v
    return Tensor(c, 0, flat(len(values)))


# ----- 1. an asynchronous provider fills its destination from its own thread --------------------

def test_an_async_provider_fills_the_destination_from_its_own_thread():
    opened = threading.Event()
    seen = {}

    def prepare(request):
        gate = Gate()

        def work():
            opened.wait(30)
            try:
                # From its own thread a provider writes through `request.output` (issue 21:
                # the destination itself is writable only during its own submit() call).
                for k in range(request.physical_span):
                    request.output[k] = request.tensor[k] * 10
                try:
                    request.destination[0] = 7.0  # nor through the destination from here
                except RuntimeError as exc:
                    seen["destination write"] = exc
                try:
                    request.tensor.carrier[0] = 99.0  # the source stays protected
                except RuntimeError as exc:
                    seen["source write"] = exc
            except BaseException as exc:  # noqa: BLE001 - reported through the completion
                gate.error = exc
            gate.finished.set()

        def submit():
            threading.Thread(target=work).start()
            return gate
        return PreparedTransfer(submit)

    cls = defined_source(prepare, "AsyncFilled")
    t = tensor_of(cls, [1.0, 2.0, 3.0])
    dest = CPU(3)
    with sw.no_grad():
        handle = sw.move_async(t, dest)
    opened.set()
    result = handle.wait()
    assert result.tolist() == [10.0, 20.0, 30.0]
    assert t.carrier.is_released() and dest.version == 0
    assert "pending move" in str(seen["source write"])
    assert "pending move" in str(seen["destination write"])


# ----- 3. prepared-transfer resources live until the move completes -----------------------------

def test_resources_captured_by_the_prepared_transfer_live_until_completion():
    class Staging:
        """A staging buffer only the PreparedTransfer holds."""

        def __init__(self, values):
            self.values = list(values)

    gates, staged = [], []

    def prepare(request):
        staging = Staging(request.tensor.tolist())
        staged.append(weakref.ref(staging))
        gate = Gate()
        gates.append(gate)

        def finish():
            gate.finished.wait(30)

        def submit():
            for k, v in enumerate(staging.values):
                request.destination[k] = v
            # The completion does not reference the staging buffer; only `submit` does.
            return _Waiting(gate)
        return PreparedTransfer(submit)

    cls = defined_source(prepare, "Staged")
    t = tensor_of(cls, [4.0, 5.0])
    dest = CPU(2)
    with sw.no_grad():
        handle = sw.move_async(t, dest)
    del handle  # the caller drops its handle while the move is pending
    gc.collect()
    assert staged[0]() is not None, "the staging buffer died while the move was pending"
    gates[0].finished.set()
    for _ in range(200):
        if t.carrier.is_released():
            break
        threading.Event().wait(0.01)
    assert t.carrier.is_released() and dest[0] == 4.0 and dest[1] == 5.0


class _Waiting:
    def __init__(self, gate):
        self._gate = gate

    @property
    def done(self):
        return self._gate.done

    def wait(self):
        self._gate.finished.wait(30)


# ----- 4. a provider's submit() runs with autograd recording off --------------------------------

def test_provider_submit_records_no_autograd_node():
    seen = {}

    def prepare(request):
        def submit():
            x = sw.Tensor(CPU(2), 0, flat(2))
            seen["grad"] = sw.is_grad_enabled()
            seen["ctx"] = sw.add(x, x).autograd_ctx
            for k in range(request.physical_span):
                request.destination[k] = int(request.tensor[k])
        return PreparedTransfer(submit)

    # Int32 is not differentiable, so the move itself records nothing and needs no reverse
    # route, while graph construction stays on around it.
    cls = defined_source(prepare, "Quiet", dtypes=(sw.DType.Int32,))
    t = tensor_of(cls, [1, 2], dtype=sw.DType.Int32)
    assert sw.is_grad_enabled()
    assert sw.move(t, CPU(2, dtype=sw.DType.Int32)).tolist() == [1, 2]
    assert seen == {"grad": False, "ctx": None}
    assert sw.is_grad_enabled()
