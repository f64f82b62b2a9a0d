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


ROUNDS = 300


def test_eight_threads_racing_transitions_writes_and_release_while_tier_hooks_re_enter():
    # Every round: an Evictable whose tier hooks try to write, release and transition it,
    # raced by 8 threads that evict, promote (blocking and async), read, write and release it.
    # Exactly what the rules allow happens: each hook's attempt is refused, every write that
    # succeeded is counted once, nothing waits for itself, and no claim is left behind.
    for round_ in range(ROUNDS):
        ev = sw.Evictable(PokingTier([1.0, 2.0]), PokingTier([]))
        hook_refusals = []

        def poke(ev=ev, hook_refusals=hook_refusals):
            for attempt in (lambda: ev.__setitem__(0, 9.0), ev.release, ev.promote, ev.evict):
                try:
                    attempt()
                except RuntimeError:
                    hook_refusals.append(True)
                else:
                    hook_refusals.append(False)

        PokingTier.poke = poke
        barrier = threading.Barrier(8)
        writes, errors = [], []

        def worker(k, ev=ev, barrier=barrier, writes=writes, errors=errors):
            barrier.wait()
            try:
                action = (k + round_) % 6
                if action == 0:
                    ev.evict()
                elif action == 1:
                    ev.promote()
                elif action == 2:
                    ev.promote_async().wait(timeout=10)
                elif action == 3:
                    ev[1] = float(k)
                    writes.append(k)
                elif action == 4:
                    ev[0]
                else:
                    ev.release()
            except RuntimeError:
                pass  # refused: released, evicted, or held by a running transition
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads), f"round {round_}: a thread waited forever"
        PokingTier.poke = None
        assert errors == [], f"round {round_}: {errors!r}"
        assert all(hook_refusals), f"round {round_}: a hook's attempt was admitted"
        assert ev.version == len(writes), f"round {round_}: every successful write counted once"
        if not ev.is_released():
            ev.release()  # no claim left behind
        assert ev.is_released() and ev.primary.is_released() and ev.secondary.is_released()
