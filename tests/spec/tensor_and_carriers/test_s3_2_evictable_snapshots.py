"""docs/spec/tensor-and-carriers.md §3.2.1 (issue 24): a `retain_clean` promote of a FileBacked
secondary of at least 4 MiB into a fresh CPU primary maps the file copy-on-write instead of
copying it when the page cache holds the file's bytes (and copies it when it does not). To
everybody who reads or writes the primary it is still a copy: it shows the file's values, whether
they were in the page cache or not, its writes never reach the file until a
(dirty) evict writes them back, and a clean evict writes nothing. Races (8 threads × 300 rounds)
of asynchronous promotes of such a primary against writes and releases."""
import os

import numpy as np
import pytest

import strideweave as sw
from strideweave import Evictable, FileBacked
from page_cache import drop_page_cache
from racing import (THREADS, accepts_release, frequent_thread_switches, messages, ok,  # noqa: F401 (autouse fixture)
                    raised, run_together)

F32 = sw.DType.Float32
BIG = 1 << 20  # Float32 slots: 4 MiB, the smallest promote that maps the file
EXPECTED = np.arange(BIG, dtype=np.float32)
PAGES = (0, 1, 1023, 1024, 4096, 300_000, BIG - 1)  # slots on different pages
ROUNDS = 300
HALF = THREADS // 2
PENDING = "cannot {} Evictable carrier: it participates in a pending move"
BEING_RELEASED = "cannot {} Evictable carrier: it is being released"
RELEASED = "cannot {} a released Evictable carrier"
EVICTED = "Evictable carrier is evicted: promote() it before reading or writing its values"


def flat(carrier, n=BIG):
    return sw.Tensor(carrier, 0, sw.Layout.canonical(sw.Shape(n)))


def big_evictable():
    """Evicted, retain_clean, over a FileBacked secondary holding EXPECTED."""
    primary = sw.CPU(BIG, dtype=F32)
    np.from_dlpack(flat(primary))[:] = EXPECTED
    ev = Evictable(primary, FileBacked(dtype=F32), retain_clean=True)
    ev.evict()
    return ev


def primary_values(ev):
    return np.from_dlpack(flat(ev.primary)).copy()


def file_values(ev):
    return np.fromfile(ev.secondary.path, dtype=np.float32)


def promote(ev, how):
    if how == "promote":
        ev.promote()
    else:
        ev.promote_async().wait(60)


@pytest.mark.parametrize("cache", ["cached", "dropped"])
@pytest.mark.parametrize("how", ["promote", "promote_async"])
def test_a_large_clean_promote_shows_the_files_values_and_its_writes_reach_the_file_only_by_evict(how, cache):
    ev = big_evictable()
    if cache == "dropped":
        drop_page_cache(ev.secondary.path)
    promote(ev, how)
    assert not ev.is_evicted() and ev.is_clean() and ev.version == 0
    assert np.array_equal(primary_values(ev), EXPECTED)
    for k in PAGES:
        ev[k] = -1.0 - k
    written = EXPECTED.copy()
    written[list(PAGES)] = [-1.0 - k for k in PAGES]
    assert np.array_equal(primary_values(ev), written)
    assert np.array_equal(file_values(ev), EXPECTED), "a write to the primary reached the file"
    assert [ev.secondary[k] for k in PAGES] == [float(k) for k in PAGES]
    assert not ev.is_clean() and ev.version == len(PAGES)
    ev.evict()  # dirty: written back
    assert np.array_equal(file_values(ev), written)
    promote(ev, how)
    assert np.array_equal(primary_values(ev), written) and ev.is_clean()
    assert accepts_release(ev)


def test_a_clean_evict_of_a_large_promote_writes_nothing():
    ev = big_evictable()
    before = os.stat(ev.secondary.path).st_mtime_ns
    for _ in range(3):
        ev.promote_async().wait(60)
        assert np.array_equal(primary_values(ev), EXPECTED)
        ev.evict()
    assert os.stat(ev.secondary.path).st_mtime_ns == before
    assert np.array_equal(file_values(ev), EXPECTED)
    assert accepts_release(ev)


def test_a_view_of_a_large_promote_is_read_only_and_a_released_primary_frees_its_mapping():
    ev = big_evictable()
    ev.promote()
    primary = ev.primary
    view = np.from_dlpack(flat(primary))
    assert not view.flags.writeable  # an owned tier exports read-only
    ev.evict()
    assert primary.is_released() and np.array_equal(file_values(ev), EXPECTED)
    assert accepts_release(ev)


def test_async_promotes_of_a_large_file_racing_writes_keep_exactly_the_writes_that_took_effect():
    ev = big_evictable()
    for _ in range(ROUNDS):
        def write(k):
            def go():
                ev[PAGES[k]] = -1.0
            return go
        outcomes = run_together([lambda: ev.promote_async().wait(60)] * HALF + [write(k) for k in range(HALF)])
        promotes, writes = outcomes[:HALF], outcomes[HALF:]
        assert not raised(promotes), raised(promotes)
        assert messages(writes) <= {PENDING.format("write to"), EVICTED}
        written = [PAGES[k] for k, o in enumerate(writes) if o[0] == "ok"]
        expected = EXPECTED.copy()
        expected[written] = -1.0
        assert np.array_equal(primary_values(ev), expected)
        assert np.array_equal(file_values(ev), EXPECTED)  # the writes are the primary's only
        if written:
            assert not ev.is_clean()
            ev.evict()  # written back
            assert np.array_equal(file_values(ev), expected)
            for k in written:  # restore the file for the next round
                ev.promote()
                ev[k] = float(k)
                ev.evict()
            assert np.array_equal(file_values(ev), EXPECTED)
        else:
            assert ev.is_clean()
            ev.evict()
    assert accepts_release(ev)


def test_async_promotes_of_a_large_file_racing_release_never_both_take_effect():
    for _ in range(ROUNDS):
        ev = big_evictable()
        outcomes = run_together([lambda: ev.promote_async().wait(60)] * HALF + [ev.release] * HALF)
        promotes, releases = outcomes[:HALF], outcomes[HALF:]
        assert ok(releases) or ok(promotes)
        assert messages(promotes) <= {BEING_RELEASED.format("promote"), RELEASED.format("promote")}
        assert messages(releases) <= {PENDING.format("release"), BEING_RELEASED.format("release")}
        if PENDING.format("release") in messages(releases):
            assert ok(promotes)
        if not ev.is_released():
            assert not ev.is_evicted() and np.array_equal(primary_values(ev), EXPECTED)
            assert accepts_release(ev)
        for tier in (ev.primary, ev.secondary):
            assert tier.is_released() and not tier.is_owned()
