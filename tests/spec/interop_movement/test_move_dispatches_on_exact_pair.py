"""docs/spec/interop-movement.md, "Requirement: Move dispatches on the exact carrier class pair"."""
import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor
from strideweave.carriers.move import dispatch_move, unregister_move_operation

from move_sources import MyCPU, MyFile

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_registrations_are_not_inherited():
    assert dispatch_move(MyCPU, FileBacked) is sw.ElementwiseMoveOperation
    assert dispatch_move(CPU, MyFile) is sw.ElementwiseMoveOperation
    with pytest.raises(KeyError):
        unregister_move_operation(MyCPU, FileBacked)


def test_subclass_pair_moves_through_the_fallback():
    t = Tensor(MyCPU(3), 0, L(3, 1))
    t[2] = 5.0
    with sw.no_grad():
        r = sw.move(t, MyFile(dtype=D.Float32))
    assert type(r.carrier) is MyFile and r.tolist() == [0.0, 0.0, 5.0]
    r.carrier.release()
