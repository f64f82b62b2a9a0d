"""The carrier state transitions `_CarrierBase` exposes from the core's state cell
(crates/strideweave-py/src/carrier_state.rs): each checks and changes in one step, so of
racing calls exactly one wins, the losers raise RuntimeError, and nothing stays claimed.
Each race runs 8 threads for 300 rounds (tests/racing.py switches threads every microsecond)."""
import gc
import threading
import weakref

import pytest

from strideweave import CPU
from strideweave.carriers.base import RELEASING, drop_claims, take_claims
from racing import THREADS, frequent_thread_switches, run_together, unclaimed  # noqa: F401

ROUNDS = 300


class Claim:
    """A pending move's claim, as the request object is."""


def raised(outcomes):
    return [o[1] for o in outcomes if o[0] == "raised"]


def winners(outcomes):
    return [k for k, o in enumerate(outcomes) if o[0] == "ok"]


def claim_one(carrier, claim):
    return lambda: take_claims(claim, ((carrier, "source", "move"),))


def test_racing_claims_of_one_carrier_have_exactly_one_winner():
    for _ in range(ROUNDS):
        c = CPU(1)
        claims = [Claim() for _ in range(THREADS)]
        outcomes = run_together([claim_one(c, claim) for claim in claims])
        (won,) = winners(outcomes)
        assert c._sw_claim is claims[won]
        for exc in raised(outcomes):
            assert isinstance(exc, RuntimeError)
            assert str(exc) == "cannot move CPU carrier: it participates in a pending move"
        drop_claims(claims[won], (c,))
        assert c._sw_claim is None and unclaimed(c)


def test_racing_claims_of_two_carriers_in_either_order_have_exactly_one_winner():
    for _ in range(ROUNDS):
        a, b = CPU(1), CPU(1)
        claims = [Claim() for _ in range(THREADS)]

        def claim_pair(k):
            pair = ((a, "source", "move"), (b, "destination", "move into"))
            return lambda: take_claims(claims[k], pair if k % 2 else pair[::-1])
        outcomes = run_together([claim_pair(k) for k in range(THREADS)])
        (won,) = winners(outcomes)
        assert a._sw_claim is b._sw_claim is claims[won]
        assert all(isinstance(exc, RuntimeError) for exc in raised(outcomes))
        drop_claims(claims[won], (a, b))
        assert unclaimed(a) and unclaimed(b)


def test_a_refused_batch_claims_none_of_its_carriers():
    a, b = CPU(1), CPU(1)
    b.release()
    with pytest.raises(RuntimeError, match="^the destination CPU carrier is released$"):
        take_claims(Claim(), ((a, "source", "move"), (b, "destination", "move into")))
    assert a._sw_claim is None and unclaimed(a)


def test_a_release_racing_claims_has_exactly_one_winner():
    for _ in range(ROUNDS):
        c = CPU(1)
        claims = [Claim() for _ in range(THREADS - 1)]
        outcomes = run_together([c.release] + [claim_one(c, claim) for claim in claims])
        (won,) = winners(outcomes)
        losses = raised(outcomes)
        assert all(isinstance(exc, RuntimeError) for exc in losses)
        if won == 0:
            assert c.is_released() and c._sw_claim is None
            assert {str(e) for e in losses} <= {"the source CPU carrier is released",
                                                 "cannot move CPU carrier: it is being released"}
        else:
            assert not c.is_released() and c._sw_claim is claims[won - 1]
            assert "cannot release CPU carrier: it participates in a pending move" in map(str, losses)
            drop_claims(claims[won - 1], (c,))
            assert unclaimed(c)


def against_a_claim(action):
    """Each round, a claim races 7 calls `action(c)` on a fresh carrier: no call counts in the
    version once the claim is in (each checks and counts in one step). Yields the carrier and
    the calls' outcomes, then drops the claim and checks that nothing stays claimed."""
    for _ in range(ROUNDS):
        c = CPU(1)
        claim = Claim()

        def claim_then_read_version():
            take_claims(claim, ((c, "source", "move"),))
            return c.version
        outcomes = run_together([claim_then_read_version] + [action(c)] * (THREADS - 1))
        assert outcomes[0][0] == "ok", "neither a mutation nor a write count blocks a claim"
        assert c.version == outcomes[0][1], "a call counted after the claim was taken"
        yield c, outcomes[1:]
        drop_claims(claim, (c,))
        assert unclaimed(c)


def test_mutations_racing_a_claim_count_exactly_the_ones_that_won():
    for c, outcomes in against_a_claim(lambda c: c._increment_version):
        for exc in raised(outcomes):
            assert isinstance(exc, RuntimeError)
            assert str(exc) == "cannot mutate CPU carrier: it participates in a pending move"
        assert c.version == len(winners(outcomes))


def test_counted_writes_racing_a_claim_are_exactly_the_ones_before_it():
    for c, outcomes in against_a_claim(lambda c: c._sw_count_write):
        counted = [result for _, result in outcomes]
        assert all(isinstance(k, bool) for k in counted)
        assert c.version == sum(counted)


def test_a_release_that_fails_restores_the_state_and_hooks_run_outside_the_lock():
    seen = []

    class Failing(CPU):
        def _release(self):
            # Reading the state from the hook would deadlock if it ran inside the cell's lock.
            seen.append((self._sw_claim is RELEASING, self.is_released()))
            raise OSError("cannot free")
    c = Failing(1)
    with pytest.raises(OSError, match="cannot free"):
        c.release()
    assert seen == [(True, False)]
    assert c._sw_claim is None and not c.is_released()


def test_a_displaced_claim_is_dropped_after_the_lock():
    c = CPU(1)
    read = []

    class Reading(Claim):
        def __del__(self):
            read.append(c._sw_claim)  # would deadlock if dropped inside the cell's lock

    def claim_and_drop():
        take_claims(Reading(), ((c, "source", "move"),))
        (claim,) = [c._sw_claim]
        drop_claims(claim, (c,))
        del claim
    t = threading.Thread(target=claim_and_drop)
    t.start()
    t.join(30)
    assert not t.is_alive(), "dropping a claim deadlocked"
    assert read == [None]


def test_the_garbage_collector_sees_the_owner_and_the_claim_once_each():
    # Each payload the carrier state holds is one reference of the carrier's, reported by
    # its `__traverse__`; a cycle through the claim or the owner is collected.
    c = CPU(1)
    claim, owner = Claim(), Claim()
    take_claims(claim, ((c, "source", "move"),))
    c._sw_owner = owner
    assert [sum(r is held for r in gc.get_referents(c)) for held in (claim, owner)] == [1, 1]
    claim.carrier, owner.carrier = c, c
    dead = weakref.ref(c), weakref.ref(claim), weakref.ref(owner)
    del c, claim, owner
    gc.collect()
    assert [ref() for ref in dead] == [None, None, None]
