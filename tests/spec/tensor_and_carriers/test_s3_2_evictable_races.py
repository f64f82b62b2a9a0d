"""docs/spec/tensor-and-carriers.md §3.2 Evictable, with its transitions racing the other state
transitions of the Evictable and of its tiers (issue 10: a claim is taken atomically with the
checks that guard it): evict vs move, promote vs release, evict vs write, and the owner's
write into its primary tier vs a release or a move of that tier.

8 threads, 300 rounds each. Whatever the interleaving, of two conflicting transitions exactly
one takes effect and the other raises RuntimeError with the message of the state it met, the
values are exact, nothing crashes, and nothing stays claimed (checked through public API:
a carrier nobody claims accepts `release()`)."""
import pytest

import strideweave as sw
from racing import (THREADS, accepts_release, release_repeatedly_during, frequent_thread_switches, messages, ok,  # noqa: F401 (autouse fixture)
                     raised, run_together)

F32 = sw.DType.Float32
ROUNDS = 300
N = 64
VALUES = [float(i) for i in range(N)]
HALF = THREADS // 2


def flat(carrier, n=N):
    return sw.Tensor(carrier, 0, sw.Layout.canonical(sw.Shape(n)))


def evictable(evicted=False):
    ev = sw.Evictable(sw.CPU(0, dtype=F32).new_like(VALUES), sw.FileBacked(dtype=F32))
    if evicted:
        ev.evict()
    return ev


PENDING = "cannot {} Evictable carrier: it participates in a pending move"
BEING_RELEASED = "cannot {} Evictable carrier: it is being released"
RELEASED = "cannot {} a released Evictable carrier"
EVICTED = "Evictable carrier is evicted: promote() it before reading or writing its values"


def test_evict_racing_moves_of_the_evictable_never_both_take_effect():
    for _ in range(ROUNDS):
        ev = evictable()
        dests = [sw.CPU(N) for _ in range(HALF)]
        outcomes = run_together([ev.evict] * HALF + [(lambda d=d: sw.move(flat(ev), d)) for d in dests])
        evicts, moves = outcomes[:HALF], outcomes[HALF:]
        moved = ok(moves)
        assert len(moved) <= 1
        if moved:
            # The move won: every evict met its claim or the released Evictable.
            assert moved[0].tolist() == VALUES and ev.is_released()
            assert not ok(evicts)
            assert messages(evicts) <= {PENDING.format("evict"), BEING_RELEASED.format("evict"),
                                        RELEASED.format("evict")}
        else:
            # An eviction won: every move met its claim, or read the evicted values.
            assert len(ok(evicts)) >= 1 and ev.is_evicted() and not ev.is_released()
            assert [ev.secondary[i] for i in range(N)] == VALUES and ev.version == 0
            for exc in raised(moves):
                assert isinstance(exc, RuntimeError), repr(exc)
                assert str(exc) in {"cannot move Evictable carrier: it participates in a pending move"} \
                    or "evicted" in str(exc), str(exc)
            assert messages(evicts) <= {PENDING.format("evict")}
            assert accepts_release(ev)
        for d in dests:
            assert accepts_release(d)


def test_promote_racing_release_never_both_take_effect():
    for _ in range(ROUNDS):
        ev = evictable(evicted=True)
        outcomes = run_together([ev.promote] * HALF + [ev.release] * HALF)
        promotes, releases = outcomes[:HALF], outcomes[HALF:]
        assert ok(releases) or ok(promotes)
        assert messages(promotes) <= {BEING_RELEASED.format("promote"), RELEASED.format("promote")}
        # (A release meeting another release running its hook is refused too.)
        assert messages(releases) <= {PENDING.format("release"), BEING_RELEASED.format("release")}
        if PENDING.format("release") in messages(releases):
            # A release met a running promotion: that promotion took effect, whole.
            assert ok(promotes)
        if raised(promotes):
            # A promotion met a release: the release took effect.
            assert ev.is_released()
        if ev.is_released():
            assert ev.primary.is_released() and ev.secondary.is_released()
            assert not ev.primary.is_owned() and not ev.secondary.is_owned()
        else:
            # Every release lost to the promotion, which moved the values back whole.
            assert not ev.is_evicted() and [ev[i] for i in range(N)] == VALUES and ev.version == 0
            assert accepts_release(ev)
        assert ev.primary.is_released() and ev.secondary.is_released()


def test_evict_racing_writes_counts_and_keeps_exactly_the_writes_that_took_effect():
    for _ in range(ROUNDS):
        ev = evictable()

        def write(k):
            def go():
                ev[k] = 1000.0 + k
            return go
        outcomes = run_together([ev.evict] * HALF + [write(k) for k in range(HALF)])
        evicts, writes = outcomes[:HALF], outcomes[HALF:]
        # A write holds the Evictable's state while it stores, so every eviction goes ahead
        # (before or after it); a write arriving during or after the eviction is refused.
        assert len(ok(evicts)) == HALF and ev.is_evicted()
        assert messages(writes) <= {PENDING.format("write to"), EVICTED}
        written = {k for k, o in enumerate(writes) if o[0] == "ok"}
        expected = [1000.0 + i if i in written else v for i, v in enumerate(VALUES)]
        assert [ev.secondary[i] for i in range(N)] == expected
        assert ev.version == len(written)  # each write that took effect counted exactly once
        assert accepts_release(ev)


def test_the_owners_writes_never_show_its_tier_unowned_to_a_racing_release_or_move():
    for _ in range(ROUNDS):
        ev = evictable()
        tier = ev.primary
        seen_unowned = []

        def write(k):
            def go():
                for j in range(4):
                    ev[4 * k + j] = 1000.0 + 4 * k + j
            return go

        def release_tier():
            seen_unowned.append(not tier.is_owned())
            tier.release()

        def move_tier():
            seen_unowned.append(not tier.is_owned())
            return sw.move(flat(tier), sw.CPU(N))
        attacks = [release_tier, move_tier] * (HALF // 2)
        outcomes = run_together([write(k) for k in range(HALF)] + attacks)
        writes, attacked = outcomes[:HALF], outcomes[HALF:]
        assert not raised(writes) and not any(seen_unowned)
        assert not ok(attacked)
        for exc in raised(attacked):
            assert isinstance(exc, RuntimeError) and "owned by Evictable" in str(exc), repr(exc)
        assert tier.is_owned() and not tier.is_released() and ev.version == 4 * HALF
        expected = [1000.0 + i if i < 4 * HALF else v for i, v in enumerate(VALUES)]
        assert [ev[i] for i in range(N)] == expected
        assert accepts_release(ev) and tier.is_released()


def test_the_tier_an_evict_leaves_goes_from_owned_and_live_to_owned_and_released():
    """The source tier of a transition is released for the Evictable at the move's commit and
    stays owned: racing readers never see it unowned while live, and a racing release or
    move of it is refused as owned (before) or as released (after)."""
    for _ in range(ROUNDS):
        ev = evictable()
        tier = ev.primary
        on_tier = flat(tier)  # made while live: a released carrier has no slots to view
        seen = []

        def watch():
            for _ in range(50):
                seen.append((tier.is_owned(), tier.is_released()))

        def release_tier():
            tier.release()

        def move_tier():
            return sw.move(on_tier, sw.CPU(N))
        outcomes = run_together([ev.evict] + [watch] * (HALF - 1) + [release_tier, move_tier] * (HALF // 2))
        assert not raised(outcomes[:HALF])
        assert (False, False) not in seen and all(owned for owned, _ in seen)
        attacked = outcomes[HALF:]
        assert not ok(attacked)
        for exc in raised(attacked):
            assert isinstance(exc, RuntimeError), repr(exc)
            assert "owned by Evictable" in str(exc) or "released" in str(exc), repr(exc)
        assert tier.is_owned() and tier.is_released() and ev.is_evicted()
        assert [ev.secondary[i] for i in range(N)] == VALUES
        assert accepts_release(ev)


@pytest.mark.parametrize("evicted", [False, True])
def test_racing_transitions_of_one_evictable_leave_it_unclaimed(evicted):
    # Transitions serialize: each either moves the values or finds them in place.
    for _ in range(ROUNDS // 3):
        ev = evictable(evicted)
        outcomes = run_together([ev.evict, ev.promote] * HALF)
        assert not raised(outcomes)
        tier = ev.secondary if ev.is_evicted() else ev.primary
        assert [tier[i] for i in range(N)] == VALUES and ev.version == 0
        assert accepts_release(ev)


def _still_usable(ev):
    """The Evictable works on: both transitions and reads succeed, the values are exact."""
    ev.promote()
    assert [ev[i] for i in range(N)] == VALUES and ev.version == 0
    ev.evict()
    ev.promote()
    assert [ev[i] for i in range(N)] == VALUES


@pytest.mark.parametrize("evicted", [False, True])
def test_a_release_of_a_tier_object_racing_a_transition_never_bricks_the_evictable(evicted):
    """Issue 22 item 1: any user can hold the tier objects (`ev.primary`, `ev.secondary`) and
    release them while a transition runs. The tiers are the Evictable's: such a release is
    refused (owned) or finds the tier already released, and the transition completes whole
    (tiers, residency, values), never raising after its move committed."""
    for _ in range(ROUNDS):
        ev = evictable(evicted)
        tiers = [ev.primary, ev.secondary]
        transition = ev.promote if evicted else ev.evict
        outcomes, refusals = release_repeatedly_during(transition, tiers)
        assert not raised(outcomes), raised(outcomes)
        assert all("owned by Evictable" in m or "released" in m for m in refusals), set(refusals)
        assert ev.is_evicted() != evicted and not ev.is_released()
        live = ev.secondary if ev.is_evicted() else ev.primary
        assert live.is_owned() and not live.is_released()
        assert [live[i] for i in range(N)] == VALUES and ev.version == 0
        _still_usable(ev)
        assert accepts_release(ev)
