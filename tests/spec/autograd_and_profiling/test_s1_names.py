"""docs/spec/autograd-and-profiling.md §1 Names: each name is one object in every module that
exports it."""
import pytest

import strideweave as sw
import strideweave.friendly
import strideweave.operation as op


@pytest.mark.parametrize("name", ["Operation", "no_grad", "is_grad_enabled", "set_grad_enabled", "add",
                                  "elementwise_mul", "mul", "broadcast_to", "profile", "Profiler",
                                  "ProfilerEvent"])
def test_names_are_identical_objects(name):
    assert getattr(sw, name) is getattr(op, name)
    assert name in op.__all__


def test_sum_and_broadcast_operation_names():
    assert sw.sum is strideweave.friendly.sum
    assert "BroadcastOperation" in op.__all__ and issubclass(op.BroadcastOperation, sw.Operation)


def test_move_operation_reexport():
    import strideweave.carriers.move as move
    assert op.MoveOperation is move.MoveOperation is sw.MoveOperation
    assert issubclass(op.MoveOperation, sw.Operation)
