"""docs/spec/interop-movement.md, "Requirement: A move operation may pin the carrier pair it supports"."""
import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Generic, Layout, Shape, Stride, Tensor
from strideweave.carriers.move import registered_move_operation

from move_sources import MyCPU, MyFile, cpu_tensor

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


class PinnedToCpu(sw.MoveOperation):
    source_class = CPU

    def _copy(self, tensor, destination, output, element_count):
        for k in range(tensor.size()):
            output[k] = tensor[k]


def test_reject_a_mismatched_pinned_class_through_the_registry():
    with registered_move_operation(Generic, MyFile, PinnedToCpu):
        t = Tensor(Generic([1.0, 2.0], dtype=D.Float32), 0, L(2, 1))
        dest = MyFile(dtype=D.Float32)
        with pytest.raises(TypeError, match="PinnedToCpu.*CPU"):
            sw.move(t, dest)
        assert not t.carrier.is_released() and dest.size() == 0
        dest.release()


def test_reject_a_mismatched_pinned_class_on_direct_forward():
    t = Tensor(Generic([1.0, 2.0], dtype=D.Float32), 0, L(2, 1))
    with pytest.raises(TypeError, match="CPU"):
        sw.CpuToFileBackedMoveOperation().forward(t, FileBacked(dtype=D.Float32))
    assert not t.carrier.is_released()
    good = cpu_tensor([3.0, 4.0])
    op = sw.CpuToFileBackedMoveOperation()
    r = op.forward(good, FileBacked(dtype=D.Float32))
    assert r.tolist() == [3.0, 4.0] and r.autograd_ctx is op and op.inputs() == (good,)
    assert good.carrier.is_released()


def test_pinned_destination_mismatch():
    class ToFileOnly(sw.MoveOperation):
        destination_class = FileBacked

        def _copy(self, tensor, destination, output, element_count):
            pass

    with registered_move_operation(MyCPU, MyFile, ToFileOnly):
        t = Tensor(MyCPU(1), 0, L(1, 1))
        with pytest.raises(TypeError, match="FileBacked"):
            sw.move(t, MyFile(dtype=D.Float32))
        assert not t.carrier.is_released()
