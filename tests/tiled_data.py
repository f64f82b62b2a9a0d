"""Shared by the TiledEvictable tests: random logical arrays, tiers seeded with them (first mode
fastest, the carrier's slot order), a TiledEvictable's slots read back as an array, grid
coordinates in tile-index order, racing threads, and tier classes whose factories note the
carriers they make (the tiles a TiledEvictable builds with them), and the §7 tests' small
TiledEvictables over the values 0..n-1 with their readers."""
import threading

import numpy as np

import strideweave as sw
from strideweave.carriers.tiled_evictable import TiledEvictable

F32, I32 = sw.DType.Float32, sw.DType.Int32
NP = {F32: np.float32, I32: np.int32}


def full(te):
    return sw.Tensor(te, 0, sw.Layout.canonical(sw.Shape(list(te.logical_shape))))


def random_logical(logical, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype is F32:
        return rng.standard_normal(logical).astype(np.float32)
    return rng.integers(-1000, 1000, size=logical).astype(np.int32)


def seeded(cls, data, dtype):
    """A `cls` carrier holding `data`'s slots first mode fastest (the logical order)."""
    values = data.ravel(order="F").tolist()
    return cls(0, dtype=dtype).new_like(values) if cls is sw.CPU else cls(dtype=dtype).new_like(values)


def logical_array(te):
    """Every slot of `te`, read through the carrier, as a logical (first mode fastest) array."""
    values = [te[i] for i in range(te.size())]
    return np.array(values, dtype=NP[te.dtype()]).reshape(te.logical_shape, order="F")


def grid_tiles(grid):
    out = []
    for k in range(int(np.prod(grid))):
        coord = []
        for g in grid:
            k, r = divmod(k, g)
            coord.append(r)
        out.append(tuple(coord))
    return out


def run_threads(targets, timeout=60):
    """Start a thread for each callable of `targets`, join them all; True when all finished
    within `timeout` seconds each."""
    threads = [threading.Thread(target=target) for target in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return not any(t.is_alive() for t in threads)


class NotesFactories:
    """Mixin for a tier class: `new_like` and `allocate_like` note every carrier they make in
    `NotesFactories.made`. A TiledEvictable makes each tile of a tier whose class is not
    exactly CPU or FileBacked with that tier's factories (extension-and-tiling.md §7), so a
    test sees its tiles there, and the private copies its moves make and release."""

    made: list = []

    def new_like(self, values, **kwargs):
        made = super().new_like(values, **kwargs)
        NotesFactories.made.append(made)
        return made

    def allocate_like(self, size, **kwargs):
        made = super().allocate_like(size, **kwargs)
        NotesFactories.made.append(made)
        return made


class NotedCPU(NotesFactories, sw.CPU):
    pass


class NotedFileBacked(NotesFactories, sw.FileBacked):
    pass


class NotedGeneric(NotesFactories, sw.Generic):
    pass


def live_made(*, but=()):
    """The noted carriers still live, leaving out those in `but` (by identity)."""
    return [c for c in NotesFactories.made if not c.is_released() and not any(c is b for b in but)]


def cpu(values, dtype=F32, mutable=True, cls=sw.CPU):
    return cls(0, dtype=dtype).new_like(values, mutable=mutable)


def tiled(n_values=16, grid=(2, 2), tile=(2, 2), dtype=F32, primary_cls=sw.CPU,
          secondary_cls=sw.FileBacked, mutable=True):
    """Values 0..n-1 seeded from the primary; an empty secondary."""
    kind = float if dtype is F32 else int
    p = cpu([kind(i) for i in range(n_values)], dtype, mutable, primary_cls)
    s = secondary_cls(dtype=dtype)
    return TiledEvictable(p, s, grid, tile)


def values(c):
    return [c[i] for i in range(c.size())]


def snapshot(te):
    return (values(te), te.version, te.primary_tiles, te.secondary_tiles, te.is_released())
