"""The bare tiles of a TiledEvictable over the exact built-in tiers (CPU, FileBacked).

Such tiles are Rust storages (`HostStorage`, `FileRegion`) that no carrier wraps
(`carriers/tiled_tiles.py`), so nothing public can reach them; the route "tiled.to_cpu" must
still gather them at bulk speed and release every one of them. The tiles themselves are read
from the private `_tiles` list, hence this file lives here. (The same guarantees for tiers whose
tiles are carriers, observed through their factories, are in
tests/spec/extension_and_tiling/test_s7_tiled_evictable.py.)
"""
import numpy as np
import pytest

import strideweave as sw
from strideweave.carriers.tiled_evictable import TiledEvictable, TileSet
from tiled_data import F32, full, grid_tiles, random_logical, seeded

GEOMETRIES = [((3, 4), (2, 3)), ((4, 2), (8, 16)), ((2, 3, 2), (3, 2, 5))]


@pytest.mark.parametrize("grid,tile", GEOMETRIES, ids=[f"{g}x{t}" for g, t in GEOMETRIES])
def test_move_to_cpu_gathers_every_bare_tile_against_numpy_and_releases_them(grid, tile):
    logical = tuple(g * t for g, t in zip(grid, tile))
    data = random_logical(logical, F32, seed=7)
    te = TiledEvictable(seeded(sw.CPU, data, F32), sw.FileBacked(dtype=F32), grid, tile)
    tiles = grid_tiles(grid)
    te.evict(TileSet(tiles[::2]))
    held = te._book.inspect("pickle", lambda tiles: [tile for tile, _, _ in tiles])
    with sw.no_grad():
        out = sw.move(full(te), sw.CPU(te.size()))
    np.testing.assert_array_equal(np.from_dlpack(out), data)
    assert out.layout == sw.Layout.canonical(sw.Shape(list(logical)))
    assert te.is_released() and all(t.is_released() for t in held)
