"""The core's residency rule (`_native.Residency`, the TiledEvictable's per tile): which
transition an evict or a promote is, and what the residency is after it; and the Evictable's
tiers and residency, kept by the core's two-tier composite (`_native.TwoTier`), the Rust
`Evictable`'s (crates/strideweave-core: `model::residency`, `model::two_tier`)."""
from __future__ import annotations

import pytest

from strideweave import _native


def test_without_retain_clean_every_transition_moves_the_values():
    r = _native.Residency(False)
    assert (r.is_evicted(), r.retains_clean(), r.plan(False, 0)) == (False, False, None)
    evict = r.plan(True, 0)
    assert (evict.evicts, evict.transfers, evict.copies) == (True, True, False)
    r.commit(evict, 0)
    assert r.is_evicted() and r.is_clean(0) and r.plan(True, 0) is None
    promote = r.plan(False, 0)
    assert (promote.evicts, promote.transfers, promote.copies) == (False, True, False)
    r.commit(promote, 0)
    assert not r.is_clean(0)


def test_a_retained_clean_copy_is_dropped_instead_of_written_until_a_write_or_a_move_into_it():
    r = _native.Residency(True)
    r.commit(r.plan(True, 5), 5)
    promote = r.plan(False, 5)
    assert promote.copies and not promote.evicts
    r.commit(promote, 5)
    assert r.is_clean(5) and not r.is_clean(6)
    drop = r.plan(True, 5)
    assert (drop.evicts, drop.transfers) == (True, False)
    assert r.plan(True, 6) == r.plan(True, 0) != drop  # written since: an ordinary eviction
    r.mark_dirty()
    assert r.plan(True, 5).transfers, "a move into the composite made the copy stale"


def test_the_evictable_keeps_its_tiers_and_residency_in_the_core_two_tier_composite():
    import strideweave as sw
    f32 = sw.DType.Float32
    ev = sw.Evictable(sw.CPU(0, dtype=f32).new_like([1.0, 2.0]), sw.FileBacked(dtype=f32), retain_clean=True)
    assert isinstance(ev._tiers, _native.TwoTier)
    ev.evict()
    ev.promote()
    assert ev._tiers.is_clean(ev.version) and ev.is_clean()
    assert (ev._tiers.primary, ev._tiers.secondary) == (ev.primary, ev.secondary)
    ev[0] = 3.0
    assert not ev._tiers.is_clean(ev.version) and not ev.is_clean()


def test_bad_arguments_are_type_errors():
    with pytest.raises(TypeError):
        _native.Residency("yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _native.Residency(False).commit("move", 0)  # type: ignore[arg-type]


def test_the_tiled_evictable_keeps_its_tiles_in_the_core_tile_book():
    import strideweave as sw
    from strideweave.carriers.tiled_evictable import TiledEvictable
    f32 = sw.DType.Float32
    te = TiledEvictable(sw.CPU(0, dtype=f32).new_like([float(v) for v in range(8)]), sw.FileBacked(dtype=f32),
                        (4,), (2,), retain_clean=True)
    assert isinstance(te._book, _native.TileBook)
    te.evict(sw.TileSet([(1,), (3,)]))
    assert te._book.tiles_on(False) == [1, 3]
    te.promote(sw.TileSet([(1,)]))
    assert te._book.state(1) == (True, False, True), "on primary, unpinned, its clean copy kept"
    te[2] = 20.0
    assert te._book.state(1) == (True, False, False)
    te.release()
    assert te._book.is_released() and te._book.state(0) is None
