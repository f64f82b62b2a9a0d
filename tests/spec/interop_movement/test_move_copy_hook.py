"""docs/spec/interop-movement.md, "Requirement: A move operation performs its transfer through the copy hook"."""
import pytest

import strideweave as sw
from strideweave import CPU, Layout, Shape, Stride, Tensor
from strideweave.carriers.move import (dispatch_move, register_move_operation, registered_move_operation,
                                       unregister_move_operation)

from move_sources import MyCPU, MyFile, Recorder, snapshot

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_register_dispatch_and_run_a_custom_copy():
    Recorder.calls = []
    assert register_move_operation(MyCPU, MyFile, Recorder) is None
    try:
        assert dispatch_move(MyCPU, MyFile) is Recorder
        assert dispatch_move(CPU, MyFile) is sw.ElementwiseMoveOperation
        src = MyCPU(7)
        t = Tensor(src, 1, L([2, 2], [1, 4]))  # cosize 6
        for k in range(4):
            t[k] = float(k + 1)
        dest = MyFile(dtype=D.Float32)
        with sw.no_grad():
            r = sw.move(t, dest)
        (tensor, destination, output, count), = Recorder.calls
        assert tensor is t and destination is dest and output.carrier is dest and count == 6
        assert r.tolist() == [10.0, 20.0, 30.0, 40.0] and src.is_released()
        assert dest.version == 0  # a move's own writes are relocation, not mutation
        r[0] = 1.0
        assert dest.version == 1  # after the move, writes count again
    finally:
        assert unregister_move_operation(MyCPU, MyFile) is Recorder
    with pytest.raises(KeyError):
        unregister_move_operation(MyCPU, MyFile)
    dest.release()


class Exploding(sw.MoveOperation):
    def _copy(self, tensor, destination, output, element_count):
        output[0] = 99.0  # a partial write, through output as users write
        raise OSError("disk on fire")


def test_a_failing_copy_leaves_the_source_live_and_unchanged():
    with registered_move_operation(MyCPU, MyFile, Exploding):
        src = MyCPU(2)
        src[0], src[1] = 1.0, 2.0
        t = Tensor(src, 0, L(2, 1))
        dest = MyFile(dtype=D.Float32)
        before = snapshot(src)
        with pytest.raises(OSError, match="disk on fire"):
            sw.move(t, dest)
        assert snapshot(src) == before and dest.version == 0
        assert dest.size() == 0  # the grown destination is shrunk back
        # nothing stays claimed: the source can move again and be written
        src[0] = 5.0
        with sw.no_grad():
            assert sw.move(t, CPU(2)).tolist() == [5.0, 2.0]
        dest.release()


def test_copy_hook_must_return_none():
    class ReturnsSomething(sw.MoveOperation):
        def _copy(self, tensor, destination, output, element_count):
            return 1

    with registered_move_operation(MyCPU, MyFile, ReturnsSomething):
        t = Tensor(MyCPU(1), 0, L(1, 1))
        with pytest.raises(TypeError):
            sw.move(t, MyFile(dtype=D.Float32))
        assert not t.carrier.is_released()
