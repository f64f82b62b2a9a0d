"""TiledEvictable's CarrierDefinition as registered (docs/spec/extension-and-tiling.md §7),
read from the private registry lookup `carriers.extension.definition_of`: the one route it
declares, and its storage provider's allocate, which only Carrier.__init__ calls, always with
the full size, so no public call reaches its refusal of any other. The route as a move meets
it is tested in tests/spec/extension_and_tiling/test_s7_tiled_evictable.py."""
import pytest

import strideweave as sw
from strideweave.carriers.extension import definition_of
from strideweave.carriers.tiled_evictable import TiledEvictable

F32 = sw.DType.Float32


def tiled():
    """Values 0..15 on a CPU primary, a 2x2 grid of 2x2 tiles, an empty FileBacked secondary."""
    primary = sw.CPU(0, dtype=F32).new_like([float(i) for i in range(16)])
    return TiledEvictable(primary, sw.FileBacked(dtype=F32), (2, 2), (2, 2))


def test_route_is_declared_as_tiled_to_cpu():
    (route,) = definition_of(TiledEvictable).transfers
    assert (route.source_class, route.destination_class, route.route_id) == (TiledEvictable, sw.CPU,
                                                                             "tiled.to_cpu")


def test_storage_provider_allocates_only_the_full_size():
    te = tiled()
    with pytest.raises(ValueError, match="full"):
        definition_of(TiledEvictable).storage.allocate(te, 3)
    assert [te[i] for i in range(16)] == [float(i) for i in range(16)]
    te.release()
