"""A write is one transition even when its store runs Python code (tensor-and-carriers.md §2):
from its checks to its store, a claim or a release from another thread waits for it, and one
from the write's own code is refused with RuntimeError; the carrier's state cell is the only
lock of carrier state (issue 21: no Python state lock)."""
import threading

import pytest

import strideweave as sw
from list_carrier import ListCarrier
from racing import THREADS, messages, run_together, unclaimed

F32 = sw.DType.Float32


def flat(n):
    return sw.Layout(sw.Shape(n), sw.Stride(1))


class Hooked(ListCarrier):
    """A user's carrier whose `set_value` hook, the store of `carrier[i] = v`, runs
    `during(self)` before storing."""

    during = None

    def __init__(self, n):
        super().__init__([0.0] * n)

    def set_value(self, i, v):
        if self.during is not None:
            self.during(self)
        super().set_value(i, v)


def test_a_write_hook_that_releases_its_own_carrier_is_refused():
    carrier = Hooked(2)
    carrier.during = lambda c: c.release()
    with pytest.raises(RuntimeError, match="cannot release Hooked carrier: a write to it is in progress"):
        carrier[0] = 5.0
    assert not carrier.is_released() and carrier.version == 0 and carrier[0] == 0.0


def test_a_write_hook_that_moves_its_own_carrier_is_refused_and_the_move_leaves_nothing_behind():
    carrier = Hooked(2)
    destination = sw.CPU(2)
    carrier.during = lambda c: sw.move(sw.Tensor(c, 0, flat(2)), destination)
    with pytest.raises(RuntimeError, match="a write to it is in progress"):
        carrier[1] = 5.0
    assert not carrier.is_released() and carrier.version == 0 and carrier[1] == 0.0
    carrier.during = None
    assert unclaimed(destination) and unclaimed(carrier)


def test_a_write_hook_that_moves_into_its_own_carrier_is_refused():
    carrier = Hooked(2)
    source = sw.Tensor(sw.CPU(2).new_like([1.0, 2.0]), 0, flat(2))
    carrier.during = lambda c: sw.move(source, c)
    with pytest.raises(RuntimeError, match="a write to it is in progress"):
        carrier[1] = 5.0
    assert not source.carrier.is_released() and carrier[1] == 0.0 and carrier.version == 0


@pytest.mark.parametrize("action", ["release", "move"])
def test_a_release_or_move_from_another_thread_waits_for_the_write_in_progress(action):
    carrier = Hooked(2)
    entered, go_on = threading.Event(), threading.Event()

    def hold(c):
        entered.set()
        assert go_on.wait(10)
    carrier.during = hold
    writer = threading.Thread(target=carrier.__setitem__, args=(1, 5.0))
    writer.start()
    assert entered.wait(10)
    destination = sw.CPU(2)
    results = []

    def other():
        if action == "release":
            carrier.release()
        else:
            results.append(sw.move(sw.Tensor(carrier, 0, flat(2)), destination))
    waiting = threading.Thread(target=other)
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive(), f"the {action} went ahead while the write was storing"
    assert not carrier.is_released()
    go_on.set()
    writer.join(10)
    waiting.join(10)
    assert not writer.is_alive() and not waiting.is_alive()
    assert carrier.is_released()
    if action == "move":  # the write landed first, and the move carried it
        assert results[0][1] == 5.0


def test_writes_with_hooks_racing_moves_and_releases():
    """8 threads x 300 rounds: writes whose store runs a Python hook, moves of the carrier and
    releases. Each write lands (the move that follows carries it) or is refused with the loser's
    RuntimeError; of the moves at most one wins; nothing is left claimed."""
    losses = {"Hooked carrier is released", "cannot write to Hooked carrier: it participates in a pending move",
              "cannot write to Hooked carrier: it is being released",
              "the source Hooked carrier is released",
              "cannot move Hooked carrier: it participates in a pending move",
              "cannot move Hooked carrier: it is being released"}
    for _ in range(300):
        carrier = Hooked(THREADS)
        carrier.during = lambda c: None  # a hook on the store path: the Python write
        destinations = [sw.CPU(THREADS), sw.CPU(THREADS)]

        def mover(d):
            tensor = sw.Tensor(carrier, 0, flat(THREADS))
            return lambda: sw.move(tensor, d)

        def writer(k):
            def go():
                carrier[k] = float(k + 1)
            return go
        actions = [mover(destinations[0]), mover(destinations[1]), carrier.release] + \
                  [writer(k) for k in range(THREADS - 3)]
        outcomes = run_together(actions)
        assert messages(outcomes) <= losses, sorted(messages(outcomes))
        assert carrier.is_released()
        moved = [o[1] for o in outcomes[:2] if o[0] == "ok"]
        assert len(moved) <= 1
        for result in moved:  # the writes that landed before the move, and no other
            landed = {k for k in range(THREADS - 3) if outcomes[3 + k][0] == "ok"}
            for k in range(THREADS - 3):
                assert result[k] == (float(k + 1) if k in landed else 0.0)
        for d in destinations:
            assert unclaimed(d)


def test_an_owner_write_admits_the_owner_not_the_thread():
    """An Evictable writing its primary tier admits itself as the tier's owner; a `set_value`
    hook that the store runs and that writes the same tier is a public write, refused while
    the tier is owned (nothing is lifted for the writing thread), and the Evictable's write
    fails whole."""
    primary = Hooked(2)
    evictable = sw.Evictable(primary, Hooked(0))
    evictable[0] = 1.0  # an ordinary owner write goes through
    assert evictable[0] == 1.0
    before = (evictable.version, primary.version)
    primary.during = lambda c: c.__setitem__(1, 9.0)
    with pytest.raises(RuntimeError, match="Hooked carrier is not mutable: owned by Evictable"):
        evictable[0] = 2.0
    primary.during = None
    assert (evictable[0], evictable[1]) == (1.0, 0.0)
    assert (evictable.version, primary.version) == before
    # Nothing was left claimed or open: the Evictable (and with it its tiers) releases.
    evictable.release()
    assert primary.is_released()
