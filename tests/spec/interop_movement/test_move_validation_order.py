"""docs/spec/interop-movement.md, the move validation table: "Every other validation SHALL
happen before submission in this order". A call wrong in two ways reports the earlier row, for
each pair of adjacent rows, and changes nothing.

A carrier held by a pending move (issue 10: claims) is not publicly mutable while the move is
pending; its rows sit beside the table's own: a claimed source after "owned", a claimed
destination after "not publicly mutable", each refused with RuntimeError before any later row.
"""
import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor
from strideweave.carriers.move import ElementwiseMoveOperation, registered_move_operation

from gated_moves import GateCompletion, start
from move_sources import cpu_tensor

D = sw.DType
PENDING = "it participates in a pending move"


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def unchanged(*carriers):
    return [(c.version, c.is_released()) for c in carriers]


def moving(tensor, destination):
    with sw.no_grad():
        return sw.move(tensor, destination)


def test_a_released_owned_source_reports_released_before_owned():
    t = cpu_tensor([1.0, 2.0])
    evictable = sw.Evictable(t.carrier, FileBacked(dtype=D.Float32))
    evictable.evict()  # the tier is released and still owned by the Evictable
    assert t.carrier.is_released() and t.carrier.is_owned()
    with pytest.raises(RuntimeError, match="source CPU carrier is released"):
        moving(t, CPU(2))


def test_an_owned_source_reports_owned_before_a_destination_that_is_not_a_carrier():
    t = cpu_tensor([1.0, 2.0])
    evictable = sw.Evictable(t.carrier, FileBacked(dtype=D.Float32))
    assert t.carrier.is_owned() and evictable.primary is t.carrier
    with pytest.raises(RuntimeError, match="owned by Evictable"):
        moving(t, "not a carrier")
    assert not t.carrier.is_released()


def test_one_immutable_carrier_in_both_roles_reports_the_same_carrier_before_mutability():
    source = CPU(2).new_like([1.0, 2.0], mutable=False)
    t = Tensor(source, 0, L(2, 1))
    with pytest.raises(ValueError, match="different carrier"):
        moving(t, source)
    assert unchanged(source) == [(0, False)]


def test_a_released_immutable_destination_reports_released_before_mutability():
    t = cpu_tensor([1.0, 2.0])
    destination = CPU(2).new_like([0.0, 0.0], mutable=False)
    destination.release()
    with pytest.raises(RuntimeError, match="destination CPU carrier is released"):
        moving(t, destination)
    assert not t.carrier.is_released()


def test_an_immutable_destination_of_another_dtype_reports_mutability_before_dtype():
    t = cpu_tensor([1.0, 2.0])
    destination = CPU(2, dtype=D.Int32).new_like([0, 0], mutable=False)
    before = unchanged(t.carrier, destination)
    with pytest.raises(RuntimeError, match="not publicly mutable"):
        moving(t, destination)
    assert unchanged(t.carrier, destination) == before


def test_a_pinned_operation_that_refuses_the_pair_reports_before_a_destination_too_small():
    class SubCPU(CPU):
        pass

    class PinnedToCpuSources(ElementwiseMoveOperation):
        source_class = CPU
        destination_class = CPU

    t = Tensor(SubCPU(3), 0, L(3, 1))
    destination = CPU(1)
    with registered_move_operation(SubCPU, CPU, PinnedToCpuSources):
        with pytest.raises(TypeError, match="requires a CPU source carrier, not SubCPU"):
            moving(t, destination)
    assert unchanged(t.carrier, destination) == [(0, False), (0, False)]


class TestAPendingMovesCarriers:
    """The source and destination of a move held pending by its provider's completion."""

    @pytest.fixture
    def pending(self):
        completion = GateCompletion()
        source, destination, handle = start([1.0, 2.0], completion)
        yield source, destination
        completion.gate.set()
        assert handle.wait().tolist() == [1.0, 2.0]

    def test_a_claimed_source_reports_the_claim_before_a_destination_that_is_not_a_carrier(self, pending):
        source, _ = pending
        with pytest.raises(RuntimeError, match=f"cannot move Gated carrier: {PENDING}"):
            moving(source, "not a carrier")

    def test_a_claimed_source_reports_the_claim_before_the_same_carrier_in_both_roles(self, pending):
        source, _ = pending
        with pytest.raises(RuntimeError, match=f"cannot move Gated carrier: {PENDING}"):
            moving(source, source.carrier)

    def test_a_claimed_destination_reports_the_claim_before_a_dtype_mismatch(self, pending):
        _, destination = pending
        t = Tensor(CPU(2, dtype=D.Int32), 0, L(2, 1))
        with pytest.raises(RuntimeError, match=f"cannot move into CPU carrier: {PENDING}"):
            moving(t, destination)
        assert unchanged(t.carrier) == [(0, False)]

    def test_a_claimed_destination_reports_the_claim_before_it_is_too_small(self, pending):
        _, destination = pending
        t = cpu_tensor([1.0, 2.0, 3.0])
        before = unchanged(t.carrier)
        with pytest.raises(RuntimeError, match=f"cannot move into CPU carrier: {PENDING}"):
            moving(t, destination)
        assert unchanged(t.carrier) == before
