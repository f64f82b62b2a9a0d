"""Route resolution by class pair (`carriers.move._resolve`), which every move runs before any
effect: a block device pair admits only the block operations (docs/spec/tensor-and-carriers.md
§4), whichever operation `dispatch_move` names for the pair. The refusal as a user meets it,
through a move, is tested in tests/spec/tensor_and_carriers/test_s4_storage_side_of_move.py."""
import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Generic
from strideweave.carriers import move as mv
from strideweave.carriers.move import dispatch_move


def test_resolution_refuses_block_device_pairs_with_other_carriers():
    from strideweave.carriers.block_device import BlockDeviceCarrier
    assert dispatch_move(CPU, BlockDeviceCarrier) is sw.CpuToBlockDeviceMoveOperation
    assert dispatch_move(BlockDeviceCarrier, CPU) is sw.BlockDeviceToCpuMoveOperation
    with pytest.raises(NotImplementedError):
        mv._resolve(Generic, BlockDeviceCarrier)
    with pytest.raises(NotImplementedError):
        mv._resolve(BlockDeviceCarrier, FileBacked)


# ----- routes are data: frozen native decisions in the core's cache ------------------------------

class _PlainCPU(CPU):
    """Overrides no hook a move runs through: moves as CPU does."""


class _HookedCPU(CPU):
    def get_value(self, i):
        return super().get_value(i)


class _CountingOperation(sw.MoveOperation):
    def _copy(self, tensor, destination, output, element_count):
        for k in range(element_count):
            output[k] = tensor[k]


def test_a_pair_resolves_once_into_a_frozen_native_decision():
    first = mv._lookup_route(CPU, FileBacked)
    assert type(first) is sw._native.Route and mv._lookup_route(CPU, FileBacked) is first
    assert sw._native.cached_route(CPU, FileBacked) is first
    with pytest.raises(AttributeError):
        first.native = False  # frozen
    assert first.operation_class is sw.CpuToFileBackedMoveOperation and first.native


@pytest.mark.parametrize("pair, native", [
    ((CPU, CPU), True), ((CPU, FileBacked), True), ((FileBacked, CPU), True),
    ((_PlainCPU, CPU), True), ((CPU, _PlainCPU), True), ((_HookedCPU, CPU), False),
    ((FileBacked, FileBacked), False), ((Generic, CPU), False),
])
def test_the_decision_says_whether_the_native_fast_routes_serve_the_pair(pair, native):
    assert mv._lookup_route(*pair).native is native


def test_a_registry_edit_drops_every_decision_and_the_next_lookup_sees_it():
    before = mv._lookup_route(CPU, CPU)
    mv._lookup_route(CPU, FileBacked)
    with sw.registered_move_operation(CPU, CPU, _CountingOperation):
        assert sw._native.cached_route(CPU, FileBacked) is None  # all forgotten, not just the pair
        during = mv._lookup_route(CPU, CPU)
        assert during.operation_class is _CountingOperation and not during.native
    after = mv._lookup_route(CPU, CPU)
    assert after is not before and after.operation_class is sw.ElementwiseMoveOperation and after.native


def test_a_resolution_that_began_before_a_registry_edit_is_not_cached():
    stale_generation = sw._native.route_generation()
    stale = mv._resolve_uncached(CPU, CPU)
    mv._forget_routes()  # what a registry edit does
    assert sw._native.remember_route(CPU, CPU, stale, stale_generation) is stale
    assert sw._native.cached_route(CPU, CPU) is None
    fresh = mv._lookup_route(CPU, CPU)
    assert sw._native.cached_route(CPU, CPU) is fresh


def test_a_refused_pair_is_cached_with_its_refusal_raised_only_when_checked():
    from strideweave.carriers.block_device import BlockDeviceCarrier
    route = mv._lookup_route(Generic, BlockDeviceCarrier)
    assert route.refusal and not route.native
    with pytest.raises(NotImplementedError, match="BlockDeviceCarrier moves only to and from exact CPU"):
        route.check_permitted()
    assert mv._lookup_route(CPU, CPU).check_permitted() is mv._lookup_route(CPU, CPU)
