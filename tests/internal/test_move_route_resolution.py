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
