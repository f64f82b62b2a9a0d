"""docs/spec/tensor-and-carriers.md §3.2 Evictable, with tier hooks written the way users write
them and misbehaving: a tier class's `allocate_like`, which a transition into a released or
too small tier calls, reads, writes and releases the Evictable it is making a tier for, or
waits for another thread that reads it. The transition holds the Evictable while it runs, so
each is refused with RuntimeError ("pending move") and the transition still completes with
the values intact; and no lock is held across the hook, so a hook that waits for another
thread's read gets that read's refusal instead of a deadlock (issue 21: the Evictable runs on
the core's two-tier composite, which calls tier code with no lock of its own held)."""
import threading

import pytest

import strideweave as sw

F32 = sw.DType.Float32
PENDING = "cannot {} Evictable carrier: it participates in a pending move"


class PokingTier(sw.Generic):
    """A Generic tier whose `allocate_like` first runs `poke()` (set by the test)."""

    poke = None

    def allocate_like(self, size, *, mutable=True, dtype=None, empty=False):
        if PokingTier.poke is not None:
            PokingTier.poke()
        return PokingTier([0.0] * size)


@pytest.fixture(autouse=True)
def no_poke():
    yield
    PokingTier.poke = None


def test_a_tier_hook_that_reads_writes_or_releases_the_evictable_is_refused_and_the_evict_completes():
    ev = sw.Evictable(PokingTier([1.0, 2.0]), PokingTier([]))
    seen = {}

    def poke():
        for action, attempt in (("read", lambda: ev[1]), ("write to", lambda: ev.__setitem__(0, 9.0)),
                                ("release", ev.release)):
            with pytest.raises(RuntimeError, match=PENDING.format(action)):
                attempt()
            seen[action] = True

    PokingTier.poke = poke
    ev.evict()
    assert seen == {"read": True, "write to": True, "release": True}
    PokingTier.poke = None
    assert ev.is_evicted() and ev.version == 0 and not ev.is_released()
    ev.promote()
    assert [ev[0], ev[1]] == [1.0, 2.0]
    ev.release()  # no claim left behind
    assert ev.is_released()


def test_a_tier_hook_on_an_engine_thread_is_refused_as_well_during_promote_async():
    ev = sw.Evictable(PokingTier([1.0, 2.0]), PokingTier([]))
    ev.evict()  # the primary is released: the promote makes a fresh one
    refused = []

    def poke():
        with pytest.raises(RuntimeError, match=PENDING.format("release")):
            ev.release()
        refused.append(threading.current_thread().name)

    PokingTier.poke = poke
    ev.promote_async().wait()
    assert len(refused) == 1
    assert not ev.is_evicted() and [ev[0], ev[1]] == [1.0, 2.0] and ev.version == 0
    ev.release()


def test_a_tier_hook_that_waits_for_another_threads_read_of_the_evictable_finishes():
    ev = sw.Evictable(PokingTier([1.0, 2.0]), PokingTier([]))
    read = []

    def reader():
        try:
            read.append(ev[0])
        except RuntimeError as exc:
            read.append(str(exc))

    def poke():
        thread = threading.Thread(target=reader)
        thread.start()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the reader waited for the transition's hook"

    PokingTier.poke = poke
    ev.evict()
    assert read == [PENDING.format("read")] and ev.is_evicted()
    PokingTier.poke = None
    ev.promote()
    assert [ev[0], ev[1]] == [1.0, 2.0]


def test_a_failing_tier_hook_leaves_the_evictable_as_it_was():
    ev = sw.Evictable(PokingTier([1.0, 2.0]), PokingTier([]))

    def poke():
        raise MemoryError("no room for the tier")

    PokingTier.poke = poke
    with pytest.raises(MemoryError, match="no room for the tier"):
        ev.evict()
    assert not ev.is_evicted() and [ev[0], ev[1]] == [1.0, 2.0] and ev.version == 0
    PokingTier.poke = None
    ev.evict()  # nothing was left claimed
    assert ev.is_evicted()


@pytest.mark.parametrize("inner", ["evict", "promote", "evict_async", "promote_async"])
@pytest.mark.parametrize("outer", ["evict", "evict_async"])
def test_a_tier_hook_that_starts_a_transition_of_its_own_evictable_is_refused_instead_of_waiting_for_itself(
        outer, inner):
    # A transition started while another runs waits for it (§3.2); from the running
    # transition's own hook that would wait forever, so it is refused as the held Evictable
    # refuses everything else.
    ev = sw.Evictable(PokingTier([1.0, 2.0]), PokingTier([]))
    refused = []

    def poke():
        action = inner.removesuffix("_async")
        with pytest.raises(RuntimeError, match=PENDING.format(action)):
            getattr(ev, inner)()
        refused.append(inner)

    PokingTier.poke = poke

    def run_outer():
        started = getattr(ev, outer)()
        if started is not None:
            started.wait()

    # On a thread of its own, so that a transition waiting for itself fails the test.
    runner = threading.Thread(target=run_outer, daemon=True)
    runner.start()
    runner.join(timeout=10)
    assert not runner.is_alive(), "the hook's transition waited for the transition running it"
    assert refused == [inner]
    PokingTier.poke = None
    assert ev.is_evicted() and ev.version == 0
    ev.promote()
    assert [ev[0], ev[1]] == [1.0, 2.0]
    ev.release()  # no claim left behind
