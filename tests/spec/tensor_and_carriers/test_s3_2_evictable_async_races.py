"""docs/spec/tensor-and-carriers.md §3.2.1–§3.2.2 (issue 24): asynchronous transitions
(`evict_async`, `promote_async`), with and without `retain_clean`, racing moves and releases
of the Evictable, writes, and releases of its tier objects. 8 threads × 300 rounds: of two
conflicting operations exactly one takes effect, the loser raises RuntimeError with the
message of the state it met, values are exact (a write that took effect before a clean
eviction is written back), and nothing stays claimed."""
import pytest

import strideweave as sw
from racing import (THREADS, accepts_release, release_repeatedly_during, frequent_thread_switches, messages, ok,  # noqa: F401 (autouse fixture)
                    raised, run_together)

F32 = sw.DType.Float32
ROUNDS = 300
N = 64
VALUES = [float(i) for i in range(N)]
HALF = THREADS // 2

PENDING = "cannot {} Evictable carrier: it participates in a pending move"
BEING_RELEASED = "cannot {} Evictable carrier: it is being released"
RELEASED = "cannot {} a released Evictable carrier"
EVICTED = "Evictable carrier is evicted: promote() it before reading or writing its values"


def flat(carrier, n=N):
    return sw.Tensor(carrier, 0, sw.Layout.canonical(sw.Shape(n)))


def evictable(retain_clean, evicted=False, cycled=False):
    """`cycled`: evicted and promoted once, so that with retain_clean the secondary is a
    clean copy."""
    ev = sw.Evictable(sw.CPU(0, dtype=F32).new_like(VALUES), sw.FileBacked(dtype=F32),
                      retain_clean=retain_clean)
    if evicted or cycled:
        ev.evict()
    if cycled:
        ev.promote()
    return ev


def evict_async(ev):
    return lambda: ev.evict_async().wait(60)


def promote_async(ev):
    return lambda: ev.promote_async().wait(60)


@pytest.mark.parametrize("retain_clean", [False, True])
def test_async_evict_racing_moves_of_the_evictable_never_both_take_effect(retain_clean):
    for _ in range(ROUNDS):
        ev = evictable(retain_clean, cycled=True)
        dests = [sw.CPU(N) for _ in range(HALF)]
        outcomes = run_together([evict_async(ev)] * HALF + [(lambda d=d: sw.move(flat(ev), d)) for d in dests])
        evicts, moves = outcomes[:HALF], outcomes[HALF:]
        moved = ok(moves)
        assert len(moved) <= 1
        if moved:
            assert moved[0].tolist() == VALUES and ev.is_released()
            assert not ok(evicts)
            assert messages(evicts) <= {PENDING.format("evict"), BEING_RELEASED.format("evict"),
                                        RELEASED.format("evict")}
        else:
            assert len(ok(evicts)) >= 1 and ev.is_evicted() and not ev.is_released()
            assert [ev.secondary[i] for i in range(N)] == VALUES and ev.version == 0
            for exc in raised(moves):
                assert isinstance(exc, RuntimeError), repr(exc)
                assert str(exc) == PENDING.format("move") or "evicted" in str(exc), str(exc)
            assert messages(evicts) <= {PENDING.format("evict")}
            assert accepts_release(ev)
        for d in dests:
            assert accepts_release(d)


@pytest.mark.parametrize("retain_clean", [False, True])
def test_async_promote_racing_release_never_both_take_effect(retain_clean):
    for _ in range(ROUNDS):
        ev = evictable(retain_clean, evicted=True)
        outcomes = run_together([promote_async(ev)] * HALF + [ev.release] * HALF)
        promotes, releases = outcomes[:HALF], outcomes[HALF:]
        assert ok(releases) or ok(promotes)
        assert messages(promotes) <= {BEING_RELEASED.format("promote"), RELEASED.format("promote")}
        assert messages(releases) <= {PENDING.format("release"), BEING_RELEASED.format("release")}
        if PENDING.format("release") in messages(releases):
            assert ok(promotes)  # a release met a pending promotion: it took effect, whole
        if raised(promotes):
            assert ev.is_released()
        if not ev.is_released():
            assert not ev.is_evicted() and [ev[i] for i in range(N)] == VALUES and ev.version == 0
            assert accepts_release(ev)
        for tier in (ev.primary, ev.secondary):
            assert tier.is_released() and not tier.is_owned()


@pytest.mark.parametrize("retain_clean", [False, True])
def test_async_evict_racing_writes_keeps_exactly_the_writes_that_took_effect(retain_clean):
    """With retain_clean the secondary starts as a clean copy: a write that takes effect
    before the eviction makes it dirty, so the eviction writes back; none, and it writes
    nothing. Either way the evicted values are exactly the writes that took effect."""
    for _ in range(ROUNDS):
        ev = evictable(retain_clean, cycled=True)

        def write(k):
            def go():
                ev[k] = 1000.0 + k
            return go
        outcomes = run_together([evict_async(ev)] * HALF + [write(k) for k in range(HALF)])
        evicts, writes = outcomes[:HALF], outcomes[HALF:]
        assert ev.is_evicted()
        assert messages(evicts) <= {PENDING.format("evict")}
        assert messages(writes) <= {PENDING.format("write to"), EVICTED}
        written = {k for k, o in enumerate(writes) if o[0] == "ok"}
        expected = [1000.0 + i if i in written else v for i, v in enumerate(VALUES)]
        assert [ev.secondary[i] for i in range(N)] == expected
        assert ev.version == len(written)
        ev.promote()
        assert [ev[i] for i in range(N)] == expected
        assert accepts_release(ev)


@pytest.mark.parametrize("retain_clean", [False, True])
def test_async_transitions_of_one_evictable_serialize(retain_clean):
    for _ in range(ROUNDS // 3):
        ev = evictable(retain_clean)
        outcomes = run_together([evict_async(ev), promote_async(ev)] * HALF)
        assert not raised(outcomes), raised(outcomes)
        tier = ev.secondary if ev.is_evicted() else ev.primary
        assert [tier[i] for i in range(N)] == VALUES and ev.version == 0
        assert accepts_release(ev)


@pytest.mark.parametrize("retain_clean", [False, True])
@pytest.mark.parametrize("state", ["new", "cycled", "evicted"])
def test_a_release_of_a_tier_object_racing_an_async_transition_never_bricks_the_evictable(state, retain_clean):
    """Issue 22 item 1 for the asynchronous transitions (their commit runs on the thread
    that completed the transfer). "new": the eviction replaces the live empty secondary."""
    evicted = state == "evicted"
    for _ in range(ROUNDS):
        ev = evictable(retain_clean, evicted=evicted, cycled=state == "cycled")
        tiers = [ev.primary, ev.secondary]
        outcomes, refusals = release_repeatedly_during(lambda: (ev.promote_async if evicted else ev.evict_async)().wait(60), tiers)
        assert not raised(outcomes), raised(outcomes)
        assert all("owned by Evictable" in m or "released" in m for m in refusals), set(refusals)
        assert ev.is_evicted() != evicted
        live = ev.secondary if ev.is_evicted() else ev.primary
        assert live.is_owned() and not live.is_released()
        assert [live[i] for i in range(N)] == VALUES and ev.version == 0
        ev.promote()
        assert [ev[i] for i in range(N)] == VALUES
        assert accepts_release(ev)
