"""A TiledEvictable whose secondary tier is a RayObjectCarrier (issue 14): `tiled.to_cpu` and
projections read every evicted tile where it lives, in Ray's object store, and land exactly
its values. Checked against NumPy on random data for 1-D, gapped (every other tile evicted,
selections with holes and in reverse order) and hierarchical (rank-3 grid) geometries, Float32
and full-range Int32, with tiles put on this node or fetched from another one, and under
concurrent readers.

Runs on a real two-node Ray cluster (`ray_cluster`); skipped only when `ray` is not installed.
"""
import pickle

import numpy as np
import pytest
from ray_cluster import two_node_cluster  # before Ray: it keeps Ray on loopback

ray = pytest.importorskip("ray")

import strideweave as sw  # noqa: E402
from strideweave.carriers.tiled_evictable import TiledEvictable, TileSelection, TileSet  # noqa: E402
from strideweave.ray import RayObjectCarrier  # noqa: E402
from tiled_data import F32, I32, NP, full, grid_tiles, run_threads  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")

GEOMETRIES = {"1-D": ((5,), (4,)), "gapped": ((4, 3), (2, 3)), "hierarchical": ((2, 3, 2), (3, 2, 5))}


@pytest.fixture(scope="module")
def cluster():
    yield from two_node_cluster()


@ray.remote(num_cpus=0)
class Maker:
    """On node B: builds a tiled tensor whose tiles are all put there, and sends it back."""

    def tiled(self, data, grid, tile):
        """Every tile evicted; the tensor travels back pickled (one reference per tile)."""
        import strideweave as sw
        from strideweave.carriers.tiled_evictable import TiledEvictable, TileSelection
        from strideweave.ray import RayObjectCarrier
        dtype = sw.DType.Int32 if data.dtype == np.int32 else sw.DType.Float32
        primary = sw.CPU(0, dtype=dtype).new_like(data.ravel(order="F").tolist())
        te = TiledEvictable(primary, RayObjectCarrier(dtype=dtype), grid, tile)
        te.evict(TileSelection([list(range(g)) for g in grid]))
        return sw.Tensor(te, 0, sw.Layout.canonical(sw.Shape([g * t for g, t in zip(grid, tile)])))


def random_data(logical, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype is F32:
        return rng.standard_normal(logical).astype(np.float32)
    # The whole Int32 range: a value read through a float would lose low bits.
    return rng.integers(-(2 ** 31), 2 ** 31, size=logical, dtype=np.int64).astype(np.int32)


def ray_tiled(data, grid, tile, evict_every=2):
    """A full tensor on a TiledEvictable over `data` (a CPU primary, an empty RayObjectCarrier
    secondary) with every `evict_every`-th tile moved to Ray."""
    dtype = F32 if data.dtype == np.float32 else I32
    primary = sw.CPU(0, dtype=dtype).new_like(data.ravel(order="F").tolist())
    te = TiledEvictable(primary, RayObjectCarrier(dtype=dtype), grid, tile)
    te.evict(TileSet(grid_tiles(grid)[::evict_every]))
    return full(te)


def blocks(data, per_axis, tile):
    """What a projection of `per_axis` must hold: the selected tiles of `data`, compacted."""
    rows = [np.concatenate([np.arange(i * t, (i + 1) * t) for i in axis]) for axis, t in zip(per_axis, tile)]
    return data[np.ix_(*rows)]


def as_array(tensor, shape):
    """The slots of a projection or moved tensor (read through the carrier) in logical order."""
    c = tensor.carrier
    values = [c[i] for i in range(c.size())]
    return np.array(values, dtype=NP[c.dtype()]).reshape(shape, order="F")


def selections(grid):
    """Every other tile (holes), every tile in reverse order, and the last tile of each axis."""
    return [[list(range(0, g, 2)) for g in grid], [list(range(g))[::-1] for g in grid], [[g - 1] for g in grid]]


def check_projections(t, data, grid, tile):
    te = t.carrier
    for per_axis in selections(grid):
        with sw.no_grad():
            out = te.project(t, TileSelection(per_axis)).wait()
        assert type(out.carrier) is sw.CPU
        expected = blocks(data, per_axis, tile)
        np.testing.assert_array_equal(as_array(out, expected.shape), expected)


@pytest.mark.parametrize("dtype", [F32, I32], ids=["f32", "i32"])
@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_projections_and_the_move_to_cpu_read_ray_tiles_exactly(cluster, name, dtype):
    grid, tile = GEOMETRIES[name]
    logical = tuple(g * t for g, t in zip(grid, tile))
    data = random_data(logical, dtype, seed=len(name))
    t = ray_tiled(data, grid, tile)
    te = t.carrier
    evicted = TileSet(grid_tiles(grid)[::2])
    assert te.secondary_tiles == evicted
    check_projections(t, data, grid, tile)
    # Into a caller's destination, and with every tile on Ray.
    te.evict(TileSet(grid_tiles(grid)))
    per_axis = [list(range(g))[::-1] for g in grid]
    expected = blocks(data, per_axis, tile)
    destination = sw.CPU(expected.size, dtype=dtype)
    with sw.no_grad():
        out = te.project(t, TileSelection(per_axis), destination).wait()
    assert out.carrier is destination
    np.testing.assert_array_equal(as_array(out, expected.shape), expected)
    assert te.version == 0 and not any(te.tile_state(c).pinned for c in grid_tiles(grid))
    with sw.no_grad():
        moved = sw.move(t, sw.CPU(te.size(), dtype=dtype))
    assert type(moved.carrier) is sw.CPU and moved.layout == t.layout and te.is_released()
    np.testing.assert_array_equal(np.from_dlpack(moved).reshape(logical, order="F"), data)


def test_tiles_put_on_another_node_are_fetched_and_read_exactly(cluster):
    grid, tile = GEOMETRIES["hierarchical"]
    logical = tuple(g * t for g, t in zip(grid, tile))
    data = random_data(logical, I32, seed=5)
    maker = Maker.options(resources={"node_b": 1}).remote()
    t = ray.get(maker.tiled.remote(data, grid, tile))
    assert t.carrier.secondary_tiles == TileSet(grid_tiles(grid))
    check_projections(t, data, grid, tile)
    with sw.no_grad():
        moved = sw.move(t, sw.CPU(t.carrier.size(), dtype=I32))
    np.testing.assert_array_equal(np.from_dlpack(moved).reshape(logical, order="F"), data)


def test_concurrent_projections_fetch_and_read_the_same_ray_tiles_exactly(cluster):
    """Threads project overlapping selections of tiles none of them has fetched yet (a clone
    rebuilt from references): every result is exact and no tile stays pinned."""
    grid, tile = GEOMETRIES["gapped"]
    logical = tuple(g * t for g, t in zip(grid, tile))
    data = random_data(logical, F32, seed=3)
    sender = ray_tiled(data, grid, tile, evict_every=1)
    t = pickle.loads(pickle.dumps(sender))
    te = t.carrier
    picks = selections(grid) * 2
    results: list = [None] * len(picks)

    def project(k):
        def run():
            with sw.no_grad():
                results[k] = te.project(t, TileSelection(picks[k])).wait()
        return run

    assert run_threads([project(k) for k in range(len(picks))])
    for per_axis, out in zip(picks, results):
        expected = blocks(data, per_axis, tile)
        np.testing.assert_array_equal(as_array(out, expected.shape), expected)
    assert not any(te.tile_state(c).pinned for c in grid_tiles(grid))


def test_tiles_of_megabytes_read_exactly(cluster):
    """Tiles of 2.25 MiB each (a host snapshot of that size is allocated differently from a
    small one), half of them on Ray: projections and the move to CPU match NumPy."""
    grid, tile = (2, 2), (768, 768)
    logical = (1536, 1536)
    data = random_data(logical, F32, seed=9)
    t = ray_tiled(data, grid, tile)
    te = t.carrier
    for per_axis in ([[1], [0]], [[1, 0], [1, 0]]):
        with sw.no_grad():
            out = te.project(t, TileSelection(per_axis)).wait()
        expected = blocks(data, per_axis, tile)
        np.testing.assert_array_equal(np.from_dlpack(out).reshape(expected.shape, order="F"), expected)
    with sw.no_grad():
        moved = sw.move(t, sw.CPU(te.size()))
    np.testing.assert_array_equal(np.from_dlpack(moved).reshape(logical, order="F"), data)
