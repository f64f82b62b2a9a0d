"""docs/spec/interop-movement.md, "Requirement: Move registration is explicit, validated, and process-global":
the legacy registry's built-in entries, duplicates, argument checks, the scoped registration,
and the names importable from the package."""
import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Generic
from strideweave.carriers import move as mv
from strideweave.carriers.move import (dispatch_move, register_move_operation, registered_move_operation,
                                       unregister_move_operation)

from move_sources import MyCPU, MyFile, Recorder


def test_move_is_importable_everywhere():
    from strideweave.carriers.move import AwaitMove, AwaitResult, move, move_async
    assert sw.move is move and sw.move_async is move_async
    assert sw.AwaitResult is AwaitResult and sw.AwaitMove is AwaitMove and issubclass(AwaitMove, AwaitResult)
    for name in ["MoveOperation", "ElementwiseMoveOperation", "CpuToFileBackedMoveOperation",
                 "FileBackedToCpuMoveOperation", "CpuToBlockDeviceMoveOperation", "BlockDeviceToCpuMoveOperation"]:
        assert getattr(sw, name) is getattr(mv, name)
    import strideweave.operation as op
    assert op.MoveOperation is sw.MoveOperation
    assert issubclass(sw.MoveOperation, sw.Operation)


def test_builtin_registry_entries():
    assert dispatch_move(CPU, FileBacked) is sw.CpuToFileBackedMoveOperation
    assert dispatch_move(FileBacked, CPU) is sw.FileBackedToCpuMoveOperation
    assert dispatch_move(CPU, CPU) is sw.ElementwiseMoveOperation
    assert dispatch_move(Generic, CPU) is sw.ElementwiseMoveOperation


def test_refuse_to_overwrite_a_registration():
    with pytest.raises(ValueError, match="CPU.*FileBacked"):
        register_move_operation(CPU, FileBacked, Recorder)
    assert dispatch_move(CPU, FileBacked) is sw.CpuToFileBackedMoveOperation
    register_move_operation(MyCPU, CPU, Recorder)
    try:
        with pytest.raises(ValueError):
            register_move_operation(MyCPU, CPU, sw.ElementwiseMoveOperation)
        assert dispatch_move(MyCPU, CPU) is Recorder
    finally:
        unregister_move_operation(MyCPU, CPU)


@pytest.mark.parametrize("args,name", [
    ((int, CPU, Recorder), "source_class"),
    ((CPU, "FileBacked", Recorder), "destination_class"),
    ((MyCPU, CPU, object), "operation_class"),
    ((MyCPU, CPU, Recorder()), "operation_class"),
])
def test_registration_type_errors_name_the_argument(args, name):
    with pytest.raises(TypeError, match=name):
        register_move_operation(*args)
    with pytest.raises(TypeError, match=name):
        registered_move_operation(*args)
    assert dispatch_move(MyCPU, CPU) is sw.ElementwiseMoveOperation


def test_scope_a_registration_to_a_block():
    with registered_move_operation(MyCPU, MyFile, Recorder) as op:
        assert op is Recorder and dispatch_move(MyCPU, MyFile) is Recorder
    assert dispatch_move(MyCPU, MyFile) is sw.ElementwiseMoveOperation
    with pytest.raises(LookupError, match="boom"):
        with registered_move_operation(MyCPU, MyFile, Recorder):
            raise LookupError("boom")
    assert dispatch_move(MyCPU, MyFile) is sw.ElementwiseMoveOperation
    with pytest.raises(ValueError, match="CPU.*FileBacked"):
        registered_move_operation(CPU, FileBacked, Recorder)
    assert dispatch_move(CPU, FileBacked) is sw.CpuToFileBackedMoveOperation
    scoped = registered_move_operation(MyCPU, MyFile, Recorder)
    register_move_operation(MyCPU, MyFile, sw.ElementwiseMoveOperation)
    try:
        with pytest.raises(ValueError):
            with scoped:
                pass
        assert dispatch_move(MyCPU, MyFile) is sw.ElementwiseMoveOperation
    finally:
        unregister_move_operation(MyCPU, MyFile)
