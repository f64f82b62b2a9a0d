"""How a TiledEvictable reads the tiles of a RayObjectCarrier tier (`tiled_tiles`): through the
declared Protocols `HostReadableTile` (a whole tile lands in a bare HostStorage with one native
copy from the local object-store view) and `ShareableTile` (a private copy shares the sealed
object), checked with isinstance, never through `tile[k]`. Runs on a fresh single-node Ray
(`address="local"`); skipped only when `ray` is not installed.
"""
import threading

import numpy as np
import pytest
from ray_cluster import MiB  # before Ray: it keeps Ray on loopback

ray = pytest.importorskip("ray")

import strideweave as sw  # noqa: E402
from strideweave import _native  # noqa: E402
from strideweave.carriers import tiled_tiles  # noqa: E402
from strideweave.carriers.tiled_evictable import TiledEvictable, TileSelection  # noqa: E402
from strideweave.ray import RayObjectCarrier  # noqa: E402
from tiled_data import F32, I32, full  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(address="local", num_cpus=1, object_store_memory=100 * MiB, include_dashboard=False,
             log_to_driver=False, logging_level="ERROR")
    try:
        yield
    finally:
        ray.shutdown()


def sealed(values, dtype=F32):
    return RayObjectCarrier(dtype=dtype).new_like(values)


def test_a_ray_carrier_declares_both_tile_capabilities_and_built_ins_neither():
    c = sealed([1.0, 2.0])
    assert isinstance(c, tiled_tiles.HostReadableTile) and isinstance(c, tiled_tiles.ShareableTile)
    for other in (sw.CPU(2), sw.Generic([1.0], dtype=F32), sw.FileBacked(dtype=F32)):
        assert not isinstance(other, tiled_tiles.HostReadableTile)
        assert not isinstance(other, tiled_tiles.ShareableTile)


def test_a_host_snapshot_holds_exactly_the_slots():
    ints = [-(2 ** 31), 2 ** 31 - 1, 16777217, -7]  # 16777217 has no exact float32
    for values, dtype, kind in (([1.5, -0.1, 3e38, -0.0], F32, "f32"), (ints, I32, "i32")):
        c = sealed(values, dtype)
        snap = c._sw_host_snapshot()
        assert type(snap) is _native.HostStorage and snap.kind == kind and snap.is_owned()
        assert snap.to_list() == [c[k] for k in range(4)]
        assert tiled_tiles.read_all(c, 4) == [c[k] for k in range(4)]
        assert tiled_tiles.storages_of([c])[0].to_list() == snap.to_list()
    big = np.arange((2 << 20) // 4 + 3, dtype=np.float32) * np.float32(0.5)  # a mapped snapshot
    c = RayObjectCarrier()
    with sw.no_grad():
        sw.move(sw.Tensor(sw.CPU(0).new_like(big.tolist()), 0, sw.Layout.canonical(sw.Shape(big.size))), c)
    assert np.array_equal(np.array(c._sw_host_snapshot().to_list(), dtype=np.float32), big)
    pending = RayObjectCarrier().allocate_like(3, empty=True)  # unsealed: reads zero
    assert pending._sw_host_snapshot().to_list() == [0.0] * 3 == [pending[k] for k in range(3)]
    gone = sealed([1.0])
    gone.release()
    with pytest.raises(RuntimeError, match="released"):
        gone._sw_host_snapshot()


def test_a_private_copy_shares_the_sealed_object():
    c = sealed([4.0, 5.0])
    copy = tiled_tiles.carrier_copy(c, RayObjectCarrier(), 2)
    assert type(copy) is RayObjectCarrier and copy is not c and copy.object_ref == c.object_ref
    copy.release()
    assert [c[0], c[1]] == [4.0, 5.0] and c.is_sealed()


def test_carrier_copy_uses_any_declared_shareable_tile():
    """The capability is structural: any carrier with `_sw_shared_copy` is shared, not read."""
    class Frozen(sw.Generic):
        def get_value(self, i):
            raise AssertionError("a shareable tile must not be read element by element")

        def _sw_shared_copy(self):
            return sw.Generic([9.0, 9.0], dtype=F32)

    tile = Frozen([1.0, 2.0], dtype=F32)
    assert isinstance(tile, tiled_tiles.ShareableTile)
    copy = tiled_tiles.carrier_copy(tile, sw.Generic([], dtype=F32), 2)
    assert [copy[0], copy[1]] == [9.0, 9.0]


def test_the_tiled_reads_never_read_a_ray_tile_element_by_element(monkeypatch):
    data = np.arange(48, dtype=np.float32).reshape((4, 12), order="F") * np.float32(1.5)
    primary = sw.CPU(0).new_like(data.ravel(order="F").tolist())
    te = TiledEvictable(primary, RayObjectCarrier(), (2, 3), (2, 4))
    te.evict(TileSelection([[0, 1], [0, 2]]))

    def refuse(self, i):
        raise AssertionError("a Ray tile was read element by element")
    monkeypatch.setattr(RayObjectCarrier, "get_value", refuse)
    with sw.no_grad():
        out = te.project(full(te), TileSelection([[1, 0], [2, 0]])).wait()
        expected = data[np.ix_([2, 3, 0, 1], list(range(8, 12)) + list(range(4)))]
        np.testing.assert_array_equal(np.from_dlpack(out).reshape((4, 8), order="F"), expected)
        moved = sw.move(full(te), sw.CPU(48))
    np.testing.assert_array_equal(np.from_dlpack(moved).reshape((4, 12), order="F"), data)


def test_a_failed_tile_fetch_fails_the_projection_handle_not_project(monkeypatch):
    """Reading a Ray tile fetches it: that runs on the engine, so `project()` returns at once
    and a fetch failure (a lost object) fails the handle, with every pin and claim given back."""
    data = np.arange(48, dtype=np.float32) * np.float32(0.5)
    te = TiledEvictable(sw.CPU(0).new_like(data.tolist()), RayObjectCarrier(), (2, 3), (2, 4))
    te.evict(TileSelection([[0], [0, 1]]))
    entered, gate = threading.Event(), threading.Event()

    def lost(self):
        entered.set()
        gate.wait(60)  # a hang guard: the test opens the gate once project() has returned
        raise RuntimeError(f"object {self.object_ref} is lost")
    monkeypatch.setattr(RayObjectCarrier, "_sw_host_snapshot", lost)
    destination = sw.CPU(16)
    with sw.no_grad():
        handle = te.project(full(te), TileSelection([[0], [0, 1]]), destination)
        assert entered.wait(60) and not handle.done  # the fetch runs on another thread
        gate.set()
        with pytest.raises(RuntimeError, match="is lost"):
            handle.wait()
    monkeypatch.undo()
    destination.release()  # unclaimed again
    te.promote(TileSelection([[0], [0, 1]]))  # no tile left pinned
    assert [te[k] for k in range(48)] == data.tolist()
