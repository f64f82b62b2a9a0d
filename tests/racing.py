"""What the race tests share: run actions on threads released together, and check through
public API that a carrier is left unclaimed."""
import sys
import threading

import numpy as np
import pytest

import strideweave as sw

THREADS = 8


def run_together(actions, grad=None, join_seconds=60):
    """Run each zero-argument callable on its own thread (with grad mode `grad` there when
    given: grad mode is per thread), released together by a barrier; return
    ("ok", result) or ("raised", exception) per action, in order."""
    barrier = threading.Barrier(len(actions))
    outcomes = [None] * len(actions)

    def run(k):
        if grad is not None:
            sw.set_grad_enabled(grad)
        barrier.wait()
        try:
            outcomes[k] = ("ok", actions[k]())
        except BaseException as exc:  # noqa: BLE001 - the outcome is what is checked
            outcomes[k] = ("raised", exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(actions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_seconds)
        assert not t.is_alive(), "a racing action hung"
    return outcomes


def raised(outcomes):
    """The exceptions of `run_together`'s outcomes."""
    return [o[1] for o in outcomes if o[0] == "raised"]


def ok(outcomes):
    """The results of the actions that returned."""
    return [o[1] for o in outcomes if o[0] == "ok"]


def messages(outcomes):
    """The messages of the exceptions raised, each of which must be a RuntimeError (the loser
    of a race raises that)."""
    for exc in raised(outcomes):
        assert isinstance(exc, RuntimeError), repr(exc)
    return {str(exc) for exc in raised(outcomes)}


def unclaimed(carrier):
    """A carrier nobody claims accepts release() (idempotent on a released one)."""
    carrier.release()
    return carrier.is_released()


def one_source_won_each_race(outcomes, sources, final, step):
    """Racing moves of distinct sources into one destination (source k holding
    `arange + step * k`): at least one won, the destination holds one winner's values, each
    winner's source is released, and each loser raised RuntimeError, its source live,
    unchanged and unclaimed."""
    winners = [k for k, o in enumerate(outcomes) if o[0] == "ok"]
    assert winners, outcomes
    assert any(np.array_equal(final, np.arange(final.size, dtype=np.float32) + step * w) for w in winners)
    for k, s in enumerate(sources):
        if k in winners:
            assert s.carrier.is_released()
        else:
            assert isinstance(outcomes[k][1], RuntimeError), outcomes[k]
            assert not s.carrier.is_released() and s.carrier[0] == float(step * k)
            assert unclaimed(s.carrier)


def release_repeatedly_during(action, carriers):
    """Run `action` on one thread while the other THREADS - 1 call `release()` on `carriers`
    (in turn) again and again until it has returned: the window is whatever `action` commits
    last. Returns (`run_together`'s outcomes, the messages of the refused releases)."""
    finished = []
    refusals = []

    def attack(carrier):
        def go():
            while not finished:
                try:
                    carrier.release()
                except RuntimeError as exc:
                    refusals.append(str(exc))
        return go

    def run_action():
        try:
            action()
        finally:
            finished.append(True)
    outcomes = run_together([run_action] + [attack(carriers[k % len(carriers)]) for k in range(THREADS - 1)])
    return outcomes, refusals


def accepts_release(carrier):
    """True when `carrier` takes release() (and is then released): no pending move holds it.
    False while one does (release() raises RuntimeError there), so it can be polled."""
    try:
        carrier.release()
    except RuntimeError:
        return False
    return carrier.is_released()


@pytest.fixture(autouse=True)
def frequent_thread_switches():
    """Let the interpreter switch threads every microsecond instead of every 5 ms, so racing
    threads really interleave inside initiation, commit and release (autouse in every module
    that imports it)."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(saved)
