"""BlockDeviceCarrier hands no Rust storage to the bulk and compute paths.

`_sw_storage()` is how the CPU/FileBacked bulk moves, the tiled tiles and the kernels find a
carrier's native storage; a BlockDeviceCarrier answers None, so none of them can touch its
extent directly (tensor-and-carriers.md §3.1: scatter and computation are refused, DLPack is
refused). The spec names no public API for that answer, so this lives here, beside the
public refusals it goes with."""
from __future__ import annotations

import pytest

from blockdev_fixture import block_device_path, device  # noqa: F401  (pytest fixtures are used by name)


def test_block_carrier_refuses_dlpack_and_scatter_and_hands_no_storage_to_bulk_paths(device):
    c = device.allocate(4)
    with pytest.raises(BufferError, match="BlockDeviceCarrier"):
        c.dlpack_info()
    with pytest.raises(NotImplementedError):
        c.scatter([0], [1.0])
    assert c._sw_storage() is None
