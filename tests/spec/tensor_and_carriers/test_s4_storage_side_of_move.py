"""docs/spec/tensor-and-carriers.md §4 Storage side of move: the CPU↔BlockDeviceCarrier
bulk moves and the refusal of every other pair involving a BlockDeviceCarrier, on a real
(loop) block device; also a MoveOperation used directly on such a pair (issue 11, item 5)."""
from __future__ import annotations

import pytest

import strideweave as sw
from strideweave import CPU, BlockDevice, FileBacked, Generic, Layout, Shape, Stride, Tensor

from blockdev_fixture import block_device_path, scratch_loop_device, shrink  # noqa: F401
from racing import accepts_release
from user_written_hooks import OutputWritingMove

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def cpu_tensor(values, layout, offset=0):
    c = CPU(offset + layout.cosize)
    for k, v in enumerate(values):
        c[offset + layout.index(k)] = v
    return Tensor(c, offset, layout)


def test_cpu_to_block_and_back_round_trips_a_gapped_layout(block_device_path):
    layout = L([3, [2, 2]], [1, [4, 9]])  # size 12, cosize 1+2+4+9 = 16
    values = [float(k) + 0.5 for k in range(layout.size)]
    with BlockDevice(block_device_path) as dev:
        t = cpu_tensor(values, layout, offset=3)
        source = t.carrier
        block = dev.allocate(layout.cosize)
        on_device = sw.move(t, block)
        assert on_device.carrier is block and on_device.layout == layout and on_device.offset == 0
        assert on_device.tolist() == values and source.is_released() and block.version == 0
        assert isinstance(on_device.autograd_ctx, sw.CpuToBlockDeviceMoveOperation)
        back = sw.move(on_device, CPU(layout.cosize))
        assert back.tolist() == values and block.is_released()
        assert isinstance(back.autograd_ctx, sw.BlockDeviceToCpuMoveOperation)
        del on_device, back, block, t
        import gc
        gc.collect()


def test_block_pairs_dispatch_to_the_pinned_bulk_operations():
    from strideweave.carriers.block_device import BlockDeviceCarrier
    assert sw.carriers.move.dispatch_move(CPU, BlockDeviceCarrier) is sw.CpuToBlockDeviceMoveOperation
    assert sw.carriers.move.dispatch_move(BlockDeviceCarrier, CPU) is sw.BlockDeviceToCpuMoveOperation


def test_moving_a_large_span_through_the_engine(block_device_path):
    n = 1 << 20
    with BlockDevice(block_device_path) as dev:
        c = CPU(n)
        c[0], c[n - 1] = 1.0, 2.0
        with sw.no_grad():
            handle = sw.move_async(Tensor(c, 0, L(n, 1)), dev.allocate(n))
            on_device = handle.wait()
            assert on_device[0] == 1.0 and on_device[n - 1] == 2.0
            back = sw.move(on_device, CPU(n))
        assert back[n - 1] == 2.0
        del handle, on_device, back
        import gc
        gc.collect()


@pytest.mark.parametrize("other", ["generic", "file"])
def test_other_pairs_with_a_block_carrier_are_refused_before_effects(block_device_path, other):
    dev = BlockDevice(block_device_path)
    block = dev.allocate(4)
    peer = Generic([1.0] * 4, dtype=D.Float32) if other == "generic" else FileBacked(dtype=D.Float32)
    if other == "file":
        peer._allocate(4)
    t = Tensor(peer, 0, L(4, 1))
    with pytest.raises(NotImplementedError):
        sw.move(t, block)
    assert not peer.is_released() and block.version == 0
    bt = Tensor(block, 0, L(4, 1))
    with pytest.raises(NotImplementedError):
        sw.move(bt, peer.allocate_like(4))
    assert not block.is_released()
    block.release()
    peer.release()
    del block, bt
    import gc
    gc.collect()
    dev.close()


def test_the_block_refusal_comes_after_the_whole_validation_table(block_device_path):
    dev = BlockDevice(block_device_path)
    block = dev.allocate(4)
    t = Tensor(block, 0, L(4, 1))
    with pytest.raises(ValueError, match="too small"):
        sw.move(t, Generic([0.0], dtype=D.Float32))
    with pytest.raises(TypeError):
        sw.move(t, Generic([0] * 4, dtype=D.Int32))
    g = Tensor(Generic([0.0] * 6, dtype=D.Float32), 0, L(6, 1))
    with pytest.raises(ValueError, match="too small"):
        sw.move(g, dev.allocate(2))
    with pytest.raises(NotImplementedError):
        sw.move(t, Generic([0.0] * 4, dtype=D.Float32))
    assert not block.is_released() and block.version == 0
    del t, g
    block.release()
    del block
    import gc
    gc.collect()
    dev.close()


def test_a_device_fault_during_a_move_loses_nothing(scratch_loop_device):
    dev = BlockDevice(scratch_loop_device.path)
    pad = dev.allocate(1024)  # the first 4096 bytes
    n = 4096
    target = dev.allocate(n)
    assert target.device_offset_bytes == 4096
    shrink(scratch_loop_device, 4096)  # the device now ends where the target starts
    values = [float(k) for k in range(n)]
    t = cpu_tensor(values, L(n, 1))
    with sw.no_grad():
        with pytest.raises((OSError, RuntimeError)):
            sw.move(t, target)
    assert not t.carrier.is_released() and t.tolist() == values
    assert target.version == 0
    assert dev.is_faulted()
    pad.release()
    target.release()  # nothing is left claimed: a claimed carrier refuses release()
    assert accepts_release(t.carrier)
    del pad, target
    close_once_collected(dev)


def close_once_collected(dev, seconds=10.0):
    """`dev.close()` once the carriers are garbage: the engine thread that ran the failed
    transfer reports the failure before it has unwound the transfer's Python frames, which
    reference the carriers (so does the failure's traceback), and it needs the interpreter
    lock, which this thread holds, to finish; so for a moment after the move raised here the
    carriers are still alive and `close()` is rightly refused."""
    import gc
    import time
    deadline = time.monotonic() + seconds
    while True:
        gc.collect()
        try:
            dev.close()
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def flat(n):
    return Layout(Shape([n]), Stride([1]))


# ----- 5. a direct MoveOperation on a CPU -> BlockDeviceCarrier pair is refused -----------------

@pytest.mark.parametrize("operation", [sw.ElementwiseMoveOperation, OutputWritingMove])
def test_a_direct_non_block_operation_on_a_block_pair_is_refused_before_effects(block_device_path, operation):
    dev = BlockDevice(block_device_path)
    block = dev.allocate(4)
    c = CPU(4)
    for i in range(4):
        c[i] = float(i + 1)
    t = Tensor(c, 0, flat(4))
    with pytest.raises(NotImplementedError, match="BlockDeviceCarrier"):
        operation().forward(t, block)
    assert not c.is_released() and c.version == 4
    assert [block[i] for i in range(4)] == [0.0] * 4 and block.version == 0
    block.release()
