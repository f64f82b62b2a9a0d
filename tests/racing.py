"""What the race tests share: run actions on threads released together, and check through
public API that a carrier is left unclaimed."""
import sys
import threading

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
