"""docs/spec/extension-and-tiling.md §5 Movement, its steps seen through the
public move surface with the §6 `Slab`: a ProviderCompletion waited on by a worker, bad
completions and submit exceptions as the terminal failure with the source left live, and
prepare failures raised from move_async without a handle."""
import threading

import pytest

import strideweave as sw
from strideweave.carriers.extension import (CarrierDefinition, PreparedTransfer, TransferProvider,
                                            TransferRoute, register_carrier_definition)

from slab_carrier import make_slab, slab_storage, slab_tensor


class Completion:
    """A provider completion finished by a background thread."""

    def __init__(self, result=None, finish=True):
        self._event = threading.Event()
        self._result = result
        self._finish = finish
        self.wait_threads = []
        threading.Timer(0.01, self._event.set).start()

    @property
    def done(self):
        return self._event.is_set() and self._finish

    def wait(self):
        self.wait_threads.append(threading.get_ident())
        self._event.wait()
        return self._result


def test_provider_completion_is_waited_on_by_a_worker():
    completions = []

    def completion(request):
        completions.append(Completion())
        return completions[-1]

    Slab, _ = make_slab(completion=completion)
    t = slab_tensor(Slab, [1.0, 2.0])
    with sw.no_grad():
        handle = sw.move_async(t, sw.CPU(2))
    out = handle.wait()
    assert out.tolist() == [1.0, 2.0] and t.carrier.is_released()
    assert completions[0].wait_threads and threading.get_ident() not in completions[0].wait_threads


@pytest.mark.parametrize("bad", [lambda r: Completion(result=1), lambda r: Completion(finish=False),
                                 lambda r: "pending"], ids=["wait-returns", "never-done", "not-a-completion"])
def test_bad_completion_is_the_terminal_failure(bad):
    Slab, _ = make_slab(completion=bad)
    t = slab_tensor(Slab, [1.0, 2.0])
    with sw.no_grad():
        handle = sw.move_async(t, sw.CPU(2))
    with pytest.raises(TypeError):
        handle.wait()
    with pytest.raises(TypeError):  # every wait() gives the same failure
        handle.wait()
    assert not t.carrier.is_released() and t.carrier.cells == [1.0, 2.0]


def test_submit_exception_is_the_terminal_failure_and_the_source_stays_live():
    def completion(request):
        raise OSError("link down")

    Slab, _ = make_slab(completion=completion)
    t = slab_tensor(Slab, [1.0, 2.0])
    with sw.no_grad():
        with pytest.raises(OSError, match="link down"):
            sw.move(t, sw.CPU(2))
    assert not t.carrier.is_released() and t.carrier.cells == [1.0, 2.0]


def test_prepare_failures_raise_from_move_async_without_a_handle():
    Slab = type("Slab", (sw.Carrier,), {})

    def prep(request):
        request.tensor.carrier[0] = 9.0  # prepare must not version a carrier
        return PreparedTransfer(lambda: None)

    register_carrier_definition(Slab, CarrierDefinition(
        slab_storage(), transfers=[TransferRoute(Slab, sw.CPU, "slab.bad", TransferProvider(prep))]))
    t = slab_tensor(Slab, [1.0])
    with sw.no_grad(), pytest.raises(RuntimeError, match="prepare changed"):
        sw.move_async(t, sw.CPU(1))
    assert not t.carrier.is_released()
