"""interop-movement.md: move, the exact-pair registry, the copy hook, pinning, autograd across
the move, and the validation table (every row for its error and for nothing changed)."""
import gc

import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Generic, Layout, Shape, Stride, Tensor
from strideweave.carriers import move as mv
from strideweave.carriers.move import (dispatch_move, register_move_operation, registered_move_operation,
                                       unregister_move_operation)
from strideweave.core.representation import PLANAR_FLOAT32_PAIR, Subtensor, tensor_from_subtensors

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def cpu_tensor(values, layout=None, offset=0, dtype=D.Float32, mutable=True):
    layout = layout if layout is not None else L(len(values), 1)
    c = CPU(offset + layout.cosize, dtype=dtype)
    for k, v in enumerate(values):
        c[offset + layout.index(k)] = v
    if not mutable:
        c._mutable = False
    return Tensor(c, offset, layout)


def snapshot(carrier):
    return (carrier.is_released(), carrier.version, carrier.size(),
            [carrier[i] for i in range(carrier.size())] if not carrier.is_released() else None)


# ----- move relocates values into a caller-supplied carrier --------------------------------

def test_move_relocates_and_releases_the_source():
    t = cpu_tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], L([2, 3], [1, 2]))
    source = t.carrier
    dest = CPU(6)
    with sw.no_grad():
        r = sw.move(t, dest)
    assert r.carrier is dest and r.offset == 0 and r.layout == t.layout
    assert r.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert source.is_released()


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


def test_move_uses_the_offset_window_and_result_starts_at_zero():
    t = cpu_tensor([7.0, 8.0], L(2, 1), offset=3)
    with sw.no_grad():
        r = sw.move(t, FileBacked(dtype=D.Float32))
    assert r.offset == 0 and r.tolist() == [7.0, 8.0] and r.carrier.size() == 2
    r.carrier.release()


def test_allocate_an_empty_destination_to_cosize():
    gapped = L([2, 3], [1, 4])  # size 6, cosize 10
    t = cpu_tensor([float(i) for i in range(6)], gapped)
    dest = FileBacked(dtype=D.Float32)
    assert dest.size() == 0
    with sw.no_grad():
        r = sw.move(t, dest)
    assert dest.size() == 10 and dest.version == 0
    assert r.layout == gapped and r.tolist() == [float(i) for i in range(6)]
    dest.release()


def test_move_a_broadcast_view_without_materializing():
    base = cpu_tensor([1.0, 2.0], L([2, 1], [1, 2]))
    b = sw.broadcast_to(base, Shape([2, 3]))
    assert b.layout == L([2, 3], [1, 0])
    dest = FileBacked(dtype=D.Float32)
    with sw.no_grad():
        r = sw.move(b, dest)
    assert dest.size() == 2 and r.layout == L([2, 3], [1, 0])
    assert r.tolist() == [1.0, 2.0] * 3
    small = CPU(2)
    with sw.no_grad():
        r2 = sw.move(sw.move(b2 := sw.broadcast_to(cpu_tensor([3.0, 4.0], L([2, 1], [1, 2])), Shape([2, 3])),
                             FileBacked(dtype=D.Float32)), small)
    assert r2.layout == b2.layout and r2.tolist() == [3.0, 4.0] * 3
    dest.release()


@pytest.mark.parametrize("make_dest", [lambda: CPU(8), lambda: FileBacked(dtype=D.Float32),
                                       lambda: Generic([0.0] * 8, dtype=D.Float32)])
@pytest.mark.parametrize("make_source", ["cpu", "generic", "file"])
def test_values_are_identical_whichever_route_runs(make_dest, make_source):
    layout = L([2, [2, 2]], [1, [3, 6]])  # nested and gapped: cosize 1+1+3+6 = 11
    values = [float(10 + k) for k in range(layout.size)]
    if make_source == "cpu":
        t = cpu_tensor(values, layout)
    else:
        carrier = Generic([0.0] * 11, dtype=D.Float32) if make_source == "generic" else FileBacked(dtype=D.Float32)
        if make_source == "file":
            carrier._allocate(11)
        t = Tensor(carrier, 0, layout)
        for k, v in enumerate(values):
            t[k] = v
    dest = make_dest()
    if dest.size() not in (0,) and dest.size() < layout.cosize:
        dest = dest.allocate_like(layout.cosize)
    with sw.no_grad():
        r = sw.move(t, dest)
    assert r.tolist() == values and r.layout == layout and t.carrier.is_released()


# ----- the validation table -------------------------------------------------------------------

def _unchanged(*carriers):
    return [snapshot(c) for c in carriers]


def test_reject_a_non_tensor():
    with pytest.raises(TypeError):
        sw.move([1.0], CPU(1))


def test_reject_a_released_source_before_checking_the_destination():
    t = cpu_tensor([1.0])
    t.carrier.release()
    with pytest.raises(RuntimeError, match="released"):
        sw.move(t, "not a carrier")


def test_reject_an_owned_source():
    t = cpu_tensor([1.0])
    t.carrier._sw_owner = CPU(1)
    dest = CPU(1)
    try:
        before = _unchanged(t.carrier, dest)
        with pytest.raises(RuntimeError):
            sw.move(t, dest)
        assert _unchanged(t.carrier, dest) == before
    finally:
        t.carrier._sw_owner = None


@pytest.mark.parametrize("bad", [None, "x", [CPU(1)], 3])
def test_reject_a_non_carrier_destination(bad):
    t = cpu_tensor([1.0])
    with pytest.raises(TypeError):
        sw.move(t, bad)
    assert not t.carrier.is_released()


def test_reject_the_tensors_own_carrier():
    t = cpu_tensor([1.0, 2.0])
    before = _unchanged(t.carrier)
    with pytest.raises(ValueError):
        sw.move(t, t.carrier)
    assert _unchanged(t.carrier) == before


def test_reject_a_released_destination():
    t = cpu_tensor([1.0])
    dest = CPU(1)
    dest.release()
    with pytest.raises(RuntimeError, match="released"):
        sw.move(t, dest)
    assert not t.carrier.is_released()


def test_reject_an_immutable_destination():
    t = cpu_tensor([1.0])
    dest = CPU(1, mutable=False)
    before = _unchanged(t.carrier, dest)
    with pytest.raises(RuntimeError):
        sw.move(t, dest)
    assert _unchanged(t.carrier, dest) == before


def test_reject_an_owned_destination():
    t = cpu_tensor([1.0])
    dest = CPU(1)
    dest._sw_owner = CPU(1)
    try:
        with pytest.raises(RuntimeError):
            sw.move(t, dest)
    finally:
        dest._sw_owner = None
    assert not t.carrier.is_released() and dest.version == 0


def test_reject_a_destination_of_another_dtype():
    t = cpu_tensor([1.0])
    dest = CPU(1, dtype=D.Int32)
    before = _unchanged(t.carrier, dest)
    with pytest.raises(TypeError):
        sw.move(t, dest)
    assert _unchanged(t.carrier, dest) == before


def test_reject_a_destination_that_is_too_small_and_cannot_allocate():
    t = cpu_tensor([1.0, 2.0, 3.0], L([3], [2]))  # cosize 5
    dest = CPU(4)
    before = _unchanged(t.carrier, dest)
    with pytest.raises(ValueError, match="too small"):
        sw.move(t, dest)
    assert _unchanged(t.carrier, dest) == before
    with pytest.raises(ValueError, match="too small"):
        sw.move(t, CPU(0))  # empty but CPU cannot allocate


def test_validation_order_dtype_before_size():
    t = cpu_tensor([1.0, 2.0])
    with pytest.raises(TypeError):
        sw.move(t, CPU(0, dtype=D.Int32))


def test_reject_a_multi_subtensor_tensor_first():
    a, b = CPU(4), CPU(2)
    t = tensor_from_subtensors(PLANAR_FLOAT32_PAIR,
                               [Subtensor(D.Float32, a, 0, L([2, 2], [1, 2])), Subtensor(D.Float32, b, 0, L(2, 1))],
                               [L([2, 2], [0, 1])])
    with pytest.raises(NotImplementedError, match="multi-subtensor"):
        sw.move(t, "not even a carrier")
    with pytest.raises(NotImplementedError, match="multi-subtensor"):
        sw.move_async(t, CPU(4))
    with pytest.raises(NotImplementedError, match="multi-subtensor"):
        sw.move_async(t, [CPU(4)])  # even before the sequence rejection
    assert a.version == b.version == 0 and not a.is_released() and not b.is_released()


def test_failed_validation_leaves_no_file_behind():
    from strideweave.carriers import file_backed
    directory = file_backed.filebacked_directory()
    t = cpu_tensor([1.0])
    dest = FileBacked(dtype=D.Int32)
    names = sorted(p.name for p in directory.iterdir())
    with pytest.raises(TypeError):
        sw.move(t, dest)
    assert sorted(p.name for p in directory.iterdir()) == names and dest.size() == 0
    dest.release()


# ----- dispatch and the legacy registry --------------------------------------------------------

class MyCPU(CPU):
    pass


class MyFile(FileBacked):
    pass


def test_builtin_registry_entries():
    assert dispatch_move(CPU, FileBacked) is sw.CpuToFileBackedMoveOperation
    assert dispatch_move(FileBacked, CPU) is sw.FileBackedToCpuMoveOperation
    assert dispatch_move(CPU, CPU) is sw.ElementwiseMoveOperation
    assert dispatch_move(Generic, CPU) is sw.ElementwiseMoveOperation


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


class Recorder(sw.MoveOperation):
    calls: list = []

    def _copy(self, tensor, destination, output, element_count):
        Recorder.calls.append((tensor, destination, output, element_count))
        for k in range(tensor.size()):
            output[k] = tensor[k] * 10


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


class Exploding(sw.MoveOperation):
    def _copy(self, tensor, destination, output, element_count):
        destination._sw_fill(0, 99.0)
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


def test_block_device_pairs_refuse_other_carriers():
    from strideweave.carriers.block_device import BlockDeviceCarrier
    assert dispatch_move(CPU, BlockDeviceCarrier) is sw.CpuToBlockDeviceMoveOperation
    assert dispatch_move(BlockDeviceCarrier, CPU) is sw.BlockDeviceToCpuMoveOperation
    with pytest.raises(NotImplementedError):
        mv._resolve(Generic, BlockDeviceCarrier)
    with pytest.raises(NotImplementedError):
        mv._resolve(BlockDeviceCarrier, FileBacked)


# ----- autograd across the carrier boundary -----------------------------------------------------

def test_move_attaches_one_node_and_backward_returns_to_the_source_class():
    x = cpu_tensor([1.0, 2.0, 3.0])
    moved = sw.move(x, FileBacked(dtype=D.Float32))
    node = moved.autograd_ctx
    assert isinstance(node, sw.CpuToFileBackedMoveOperation) and node.inputs() == (x,)
    back = sw.move(moved, CPU(3))
    assert isinstance(back.autograd_ctx, sw.FileBackedToCpuMoveOperation)
    y = sw.sum(back * back)
    y.backward()
    assert type(x.grad.carrier) is CPU and x.grad.tolist() == [2.0, 4.0, 6.0]
    assert x.grad.autograd_ctx is None and x.grad.layout == x.layout


def test_move_backward_directly():
    x = cpu_tensor([1.0, 2.0])
    moved = sw.move(x, FileBacked(dtype=D.Float32))
    g = cpu_tensor([5.0, 6.0])
    with sw.no_grad():
        g_file = sw.move(g, FileBacked(dtype=D.Float32))
    (grad,) = moved.autograd_ctx.backward(g_file)
    assert type(grad.carrier) is CPU and grad.tolist() == [5.0, 6.0] and grad.layout == x.layout
    assert not g_file.carrier.is_released()  # the caller's cotangent is not consumed
    assert grad.autograd_ctx is None


def test_move_backward_checks_its_cotangent():
    x = cpu_tensor([1.0, 2.0])
    moved = sw.move(x, CPU(2))
    node = moved.autograd_ctx
    with pytest.raises(TypeError):
        node.backward([1.0, 2.0])
    with pytest.raises(ValueError):
        node.backward(cpu_tensor([1.0, 2.0, 3.0]))
    broadcast = sw.broadcast_to(cpu_tensor([1.0], L([1], [1])), Shape([2]))
    with pytest.raises(ValueError, match="injective"):
        node.backward(broadcast)
    gone = cpu_tensor([1.0, 2.0])
    gone.carrier.release()
    with pytest.raises(RuntimeError):
        node.backward(gone)


def test_moved_broadcast_view_hands_an_injective_gradient_to_the_broadcast_node():
    x = cpu_tensor([1.0, 2.0], L([2, 1], [1, 2]))
    b = sw.broadcast_to(x, Shape([2, 3]))
    moved = sw.move(b, FileBacked(dtype=D.Float32))
    (g,) = moved.autograd_ctx.backward(sw.Tensor(FileBacked(dtype=D.Float32).new_like([1.0] * 6), 0,
                                                 Layout.canonical(Shape([2, 3]))))
    assert g.layout == Layout.canonical(Shape([2, 3])) and type(g.carrier) is CPU and g.tolist() == [1.0] * 6
    back = sw.move(moved, CPU(2))
    sw.sum(back).backward()
    assert x.grad.tolist() == [3.0, 3.0] and x.grad.layout == x.layout


def test_no_node_without_graph_construction():
    x = cpu_tensor([1.0])
    with sw.no_grad():
        r = sw.move(x, CPU(1))
    assert r.autograd_ctx is None
    i = cpu_tensor([1], dtype=D.Int32)
    assert sw.move(i, CPU(1, dtype=D.Int32)).autograd_ctx is None


def test_move_is_not_an_in_place_mutation_of_the_destination():
    x = cpu_tensor([1.0, 2.0])
    dest = CPU(2)
    r = sw.move(x, dest)
    assert dest.version == 0
    sw.sum(r * 2.0).backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_release_of_source_is_final_even_with_outstanding_references():
    x = cpu_tensor([1.0])
    source = x.carrier
    sw.move(x, CPU(1))
    del x
    gc.collect()
    assert source.is_released() and source.size() == 0


def test_move_backward_accepts_a_cotangent_on_any_carrier_class():
    x = cpu_tensor([1.0, 2.0])
    moved = sw.move(x, FileBacked(dtype=D.Float32))
    (grad,) = moved.autograd_ctx.backward(cpu_tensor([3.0, 4.0]))
    assert type(grad.carrier) is CPU and grad.tolist() == [3.0, 4.0]
