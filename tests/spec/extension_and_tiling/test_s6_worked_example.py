"""docs/spec/extension-and-tiling.md §6 Worked example: the `Slab` carrier, row by row,
through the public move surface.

`Slab` keeps its slots in a list `c.cells`: Float32 only, zeros on allocate, cleared on
release, `elementwise_fallback=True`, and one route `slab.to_cpu` whose prepare declines a
non-injective layout with `Unsupported("broadcast")` and whose submit copies
`cells[offset+k]` into `destination[k]` for every `k < span`."""
import threading

import pytest

import strideweave as sw
from strideweave.carriers.extension import CarrierDefinition, register_carrier_definition
from strideweave.carriers.move import (ElementwiseMoveOperation, MoveOperation, dispatch_move,
                                       register_move_operation, registered_move_operation,
                                       unregister_move_operation)

from slab_carrier import make_slab, slab_storage, slab_tensor

F32 = sw.DType.Float32


def test_row_construct():
    Slab, _ = make_slab()
    c = Slab(4, dtype=F32)
    assert c.size() == 4 and [c[i] for i in range(4)] == [0.0] * 4 and c.version == 0
    assert c.cells == [0.0] * 4


def test_row_move_to_cpu_keeps_layout_and_values_and_releases_the_slab():
    Slab, trace = make_slab()
    t = slab_tensor(Slab, [1.0, 2.0, 3.0, 4.0])
    source = t.carrier
    dest = sw.CPU(4, empty=True)
    with sw.no_grad():
        out = sw.move(t, dest)
    assert out.carrier is dest and out.offset == 0 and out.layout == t.layout
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert source.is_released() and source.cells == []
    # prepare ran on the caller's thread with graph construction off, submit once on it too
    ((request, thread, grad),) = trace.prepared
    assert thread == threading.get_ident() and grad is False
    assert trace.submitted == [threading.get_ident()]
    assert request.source_class is Slab and request.destination_class is sw.CPU


def test_row_move_a_window_of_a_gapped_layout():
    Slab, _ = make_slab()
    layout = sw.Layout(sw.Shape([2, 2]), sw.Stride([3, 1]))  # cosize 5, holes at 2
    t = slab_tensor(Slab, [9.0, 1.0, 2.0, 7.0, 3.0, 4.0], layout=layout, offset=1)
    expected = t.tolist()
    with sw.no_grad():
        out = sw.move(t, sw.CPU(5))
    assert out.layout == layout and out.tolist() == expected
    assert [out.carrier[i] for i in range(5)] == [1.0, 2.0, 7.0, 3.0, 4.0]


def test_row_non_differentiable_move_needs_no_reverse_route():
    # "t without grad": Slab stores Float32 only (always differentiable), so graph
    # construction is off for the move; no reverse route is needed then.
    Slab, _ = make_slab()
    t = slab_tensor(Slab, [5.0, 6.0])
    with sw.no_grad():
        out = sw.move(t, sw.CPU(2))
    assert sw.is_grad_enabled()
    assert out.tolist() == [5.0, 6.0] and out.grad is None


def test_row_broadcast_is_declined_without_fallback():
    Slab, trace = make_slab()
    t = slab_tensor(Slab, [1.0, 2.0])
    with sw.no_grad():
        b = sw.broadcast_to(sw.Tensor(t.carrier, 0, sw.Layout(sw.Shape([2, 1]), sw.Stride([1, 2]))),
                            sw.Shape([2, 3]))
    assert not b.layout.is_injective()
    dest = sw.CPU(2)
    with sw.no_grad(), pytest.raises(NotImplementedError) as info:
        sw.move(b, dest)
    message = str(info.value)
    for word in ("Slab", "CPU", "slab.to_cpu", "broadcast"):
        assert word in message
    assert trace.submitted == []
    assert not t.carrier.is_released() and t.carrier.cells == [1.0, 2.0]
    assert dest.version == 0 and [dest[i] for i in range(2)] == [0.0, 0.0]


def test_row_move_to_generic_is_not_implemented():
    Slab, trace = make_slab()
    t = slab_tensor(Slab, [1.0, 2.0])
    dest = sw.Generic([0.0, 0.0], dtype=F32)
    with sw.no_grad(), pytest.raises(NotImplementedError, match=r"Slab.*Generic"):
        sw.move(t, dest)
    assert trace.prepared == [] and not t.carrier.is_released()
    assert dest.version == 0 and [dest[i] for i in range(2)] == [0.0, 0.0]


def test_row_cpu_tensor_into_a_slab_is_not_implemented():
    Slab, _ = make_slab()
    cpu = sw.CPU(2)
    cpu[0] = 3.0
    t = sw.Tensor(cpu, 0, sw.Layout(sw.Shape([2]), sw.Stride([1])))
    dest = Slab(2, dtype=F32)
    with sw.no_grad(), pytest.raises(NotImplementedError, match=r"CPU.*Slab"):
        sw.move(t, dest)
    assert not cpu.is_released() and cpu[0] == 3.0
    assert dest.version == 0 and dest.cells == [0.0, 0.0]


def test_row_requires_grad_with_grad_on_fails_before_submission():
    Slab, trace = make_slab()
    t = slab_tensor(Slab, [1.0, 2.0])
    assert sw.is_grad_enabled() and t.is_differentiable()
    dest = sw.CPU(2)
    with pytest.raises(NotImplementedError, match=r"CPU.*Slab"):  # the reverse pair
        sw.move_async(t, dest)
    assert trace.prepared == [] and trace.submitted == []
    assert not t.carrier.is_released() and t.carrier.version == 2
    assert dest.version == 0 and dest[0] == 0.0


def test_row_into_slab2_uses_the_elementwise_fallback():
    Slab, trace = make_slab()
    Slab2 = type("Slab2", (sw.Carrier,), {})
    register_carrier_definition(Slab2, CarrierDefinition(slab_storage(fallback=True)))
    t = slab_tensor(Slab, [1.0, 2.0, 3.0])
    dest = Slab2(3, dtype=F32)
    with sw.no_grad(), sw.profile() as prof:
        out = sw.move(t, dest)
    assert out.carrier is dest and out.tolist() == [1.0, 2.0, 3.0] and dest.cells == [1.0, 2.0, 3.0]
    assert t.carrier.is_released()
    assert trace.prepared == []  # no route to Slab2: the fallback, not slab.to_cpu
    implementations = {e.implementation_type for e in prof.events() if e.name.startswith("move")}
    assert implementations == {ElementwiseMoveOperation}


def test_row_into_an_empty_slab2_allocates_it_to_cosize():
    Slab, _ = make_slab()
    Slab2 = type("Slab2", (sw.Carrier,), {})
    register_carrier_definition(Slab2, CarrierDefinition(slab_storage(fallback=True)))
    layout = sw.Layout(sw.Shape([2]), sw.Stride([2]))  # cosize 3
    t = slab_tensor(Slab, [1.0, 0.5, 2.0], layout=layout)
    dest = Slab2(0, dtype=F32)
    with sw.no_grad():
        out = sw.move(t, dest)
    assert dest.size() == 3 and out.tolist() == [1.0, 2.0]


class Copy(MoveOperation):
    def _copy(self, tensor, destination, output, element_count):
        return None


@pytest.mark.parametrize("call", [
    lambda S: register_move_operation(S, sw.CPU, Copy),
    lambda S: register_move_operation(sw.CPU, S, Copy),
    lambda S: dispatch_move(S, sw.CPU),
    lambda S: unregister_move_operation(S, sw.CPU),
    lambda S: registered_move_operation(S, sw.CPU, Copy)],
    ids=["register", "register-dest", "dispatch", "unregister", "registered"])
def test_row_legacy_registry_refuses_a_defined_class(call):
    Slab, _ = make_slab()
    with pytest.raises(RuntimeError, match="TransferRoute") as info:
        call(Slab)
    assert "Slab" in str(info.value)
    # the definition-owned route still moves
    with sw.no_grad():
        assert sw.move(slab_tensor(Slab, [2.0]), sw.CPU(1)).tolist() == [2.0]


def test_legacy_type_checks_come_before_the_definition_check():
    Slab, _ = make_slab()
    with pytest.raises(TypeError, match="operation_class"):
        register_move_operation(Slab, sw.CPU, int)


def test_row_type_errors():
    Slab, _ = make_slab()
    with pytest.raises(TypeError):
        Slab(4, dtype=sw.DType.Int32)
    with pytest.raises(TypeError):
        Slab(4)
    with pytest.raises(TypeError):
        register_carrier_definition(Slab, CarrierDefinition(slab_storage()))

    class Sub(Slab):
        pass

    with pytest.raises(TypeError):
        Sub(4, dtype=F32)
