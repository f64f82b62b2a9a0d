"""docs/spec/tensor-and-carriers.md §3.2.1 clean tiers (`retain_clean=True`) and §3.2.2
asynchronous residency (`promote_async()` / `evict_async()`), issue 24."""
import threading

import pytest

import strideweave as sw
from strideweave import Evictable, Generic

from racing import accepts_release

F32 = sw.DType.Float32
N = 64
VALUES = [float(i) for i in range(N)]
PENDING = "cannot {} Evictable carrier: it participates in a pending move"


class CountingMove(sw.MoveOperation):
    """Generic → Generic moves through `output`, counted: how many transitions wrote."""

    count = 0

    def _copy(self, tensor, destination, output, element_count):
        CountingMove.count += 1
        for i in range(tensor.layout.size):
            output[i] = tensor[i]


@pytest.fixture
def counted():
    CountingMove.count = 0
    with sw.registered_move_operation(Generic, Generic, CountingMove):
        yield CountingMove


def file_evictable(**kw):
    return Evictable(sw.CPU(0, dtype=F32).new_like(VALUES), sw.FileBacked(dtype=F32), **kw)


def values(ev):
    return [ev[i] for i in range(N)]


# ----- §3.2.1 clean tiers ----------------------------------------------------------------------

def test_retain_clean_defaults_to_false_and_must_be_a_bool():
    assert file_evictable().retain_clean is False
    assert file_evictable(retain_clean=True).retain_clean is True
    primary, secondary = sw.CPU(0, dtype=F32).new_like(VALUES), sw.FileBacked(dtype=F32)
    with pytest.raises(TypeError, match="retain_clean"):
        Evictable(primary, secondary, retain_clean=1)
    assert not primary.is_owned() and not secondary.is_owned()  # refused before taking anything


def test_promote_with_retain_clean_copies_and_keeps_the_secondary_live_as_a_clean_copy():
    ev = file_evictable(retain_clean=True)
    ev.evict()
    secondary = ev.secondary
    ev.promote()
    assert not ev.is_evicted() and values(ev) == VALUES and ev.version == 0
    assert ev.secondary is secondary and not secondary.is_released() and secondary.is_owned()
    assert [secondary[i] for i in range(N)] == VALUES and ev.is_clean()
    with pytest.raises(RuntimeError, match="owned by Evictable"):
        secondary.release()
    assert accepts_release(ev) and secondary.is_released() and not secondary.is_owned()


def test_default_promote_still_releases_the_secondary():
    ev = file_evictable()
    ev.evict()
    secondary = ev.secondary
    ev.promote()
    assert secondary.is_released() and not ev.is_clean()


def test_evict_of_an_unchanged_primary_writes_nothing_and_a_changed_one_writes_back(counted):
    ev = Evictable(Generic(VALUES), Generic([]), retain_clean=True)
    ev.evict()
    assert counted.count == 1  # the first eviction has no clean copy: it moves
    ev.promote()
    assert counted.count == 1  # a copy, not a move
    primary = ev.primary
    ev.evict()
    assert counted.count == 1 and ev.is_evicted()  # clean: released without writing
    assert primary.is_released() and primary.is_owned()  # as a move's source: ours until release
    ev.promote()
    ev[3] = 100.0
    assert not ev.is_clean() and ev.secondary[3] == 3.0  # the copy is stale now: dirty
    ev.evict()
    assert counted.count == 2  # dirty: written back
    assert [ev.secondary[i] for i in range(N)] == [100.0 if i == 3 else v for i, v in enumerate(VALUES)]
    ev.promote()
    assert ev[3] == 100.0 and ev.version == 1


def test_without_retain_clean_every_evict_moves(counted):
    ev = Evictable(Generic(VALUES), Generic([]))
    for k in range(3):
        ev.evict()
        ev.promote()
        assert counted.count == 2 * (k + 1)


def test_a_move_into_a_clean_evictable_makes_it_dirty():
    ev = file_evictable(retain_clean=True)
    ev.evict()
    ev.promote()
    assert ev.is_clean()
    new = [v + 1000.0 for v in VALUES]
    sw.move(sw.Tensor(sw.CPU(0, dtype=F32).new_like(new), 0, sw.Layout.canonical(sw.Shape(N))), ev)
    assert not ev.is_clean()
    ev.evict()
    ev.promote()
    assert values(ev) == new


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_failed_clean_promote_changes_nothing(asynchronous):
    class RefusingGeneric(Generic):
        refuse = True

        def allocate_like(self, size, **kw):
            if RefusingGeneric.refuse:
                raise MemoryError("no room for the primary")
            return RefusingGeneric([0.0] * size)
    ev = Evictable(RefusingGeneric(VALUES), Generic([]), retain_clean=True)
    ev.evict()
    primary, secondary = ev.primary, ev.secondary
    with pytest.raises(MemoryError, match="no room"):
        ev.promote_async().wait(60) if asynchronous else ev.promote()
    assert ev.is_evicted() and ev.primary is primary and ev.secondary is secondary
    assert not secondary.is_released() and ev.version == 0 and ev.is_clean()
    RefusingGeneric.refuse = False
    ev.promote()
    assert values(ev) == VALUES and ev.is_clean()


# ----- §3.2.2 asynchronous residency -----------------------------------------------------------

@pytest.mark.parametrize("retain_clean", [False, True])
def test_async_transitions_complete_through_the_handle_protocol(retain_clean):
    ev = file_evictable(retain_clean=retain_clean)
    h = ev.evict_async()
    assert isinstance(h, sw.AwaitResidency)
    assert h.wait(timeout=60) is None and h.done and h.exception() is None
    assert ev.is_evicted()
    h = ev.promote_async()
    seen = []
    called = threading.Event()
    h.add_done_callback(lambda handle: (seen.append(handle), called.set()))
    assert h.future().result(timeout=60) is None
    assert called.wait(60) and seen == [h]
    assert not ev.is_evicted() and values(ev) == VALUES and ev.version == 0
    assert ev.promote_async().wait() is None  # nothing to do: done at once
    assert accepts_release(ev)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_reads_writes_moves_and_release_are_refused_while_a_transition_is_pending(asynchronous):
    """Checked from inside the transition's own transfer (a user's `_copy` hook runs while
    the transition holds the Evictable), so the transition is pending for certain."""
    refusals = []

    class WatchingMove(sw.MoveOperation):
        def _copy(self, tensor, destination, output, element_count):
            attempts = [("read", lambda: ev[0]), ("write to", lambda: ev.__setitem__(0, 5.0)),
                        ("release", ev.release),
                        ("move", lambda: sw.move(sw.Tensor(ev, 0, sw.Layout.canonical(sw.Shape(N))),
                                                 Generic([0.0] * N)))]
            for action, attempt in attempts:
                try:
                    attempt()
                except RuntimeError as exc:
                    refusals.append((action, str(exc)))
            for i in range(tensor.layout.size):
                output[i] = tensor[i]
    with sw.registered_move_operation(Generic, Generic, WatchingMove):
        ev = Evictable(Generic(VALUES), Generic([]))
        if asynchronous:
            assert ev.evict_async().wait(60) is None
        else:
            ev.evict()
    assert refusals == [(a, PENDING.format(a)) for a in ("read", "write to", "release", "move")]
    assert ev.is_evicted() and ev.version == 0
    ev.promote()
    assert values(ev) == VALUES


def test_an_async_transition_returns_before_its_transfer_and_wait_sees_it_whole():
    big = 1 << 22  # 16 MiB: a bulk transfer on an engine thread
    ev = Evictable(sw.CPU(big, dtype=F32), sw.FileBacked(dtype=F32), retain_clean=True)
    ev[big - 1] = 7.0
    h = ev.evict_async()
    if not h.done:  # usually: the engine is still writing
        with pytest.raises(RuntimeError, match=PENDING.format("read")):
            ev[big - 1]
    h.wait(60)
    h = ev.promote_async()
    h.wait(60)
    assert ev[big - 1] == 7.0 and ev.is_clean()
    assert accepts_release(ev)


def test_a_transition_started_while_another_is_pending_waits_for_it():
    big = 1 << 22
    ev = Evictable(sw.CPU(big, dtype=F32), sw.FileBacked(dtype=F32))
    ev[5] = 3.0
    first = ev.evict_async()
    ev.promote()  # waits for the pending eviction, then promotes
    assert first.done and first.exception() is None
    assert not ev.is_evicted() and ev[5] == 3.0 and ev.version == 1


def test_a_failed_async_transition_changes_nothing_and_can_be_retried():
    class FailingMove(sw.MoveOperation):
        fail = True

        def _copy(self, tensor, destination, output, element_count):
            if FailingMove.fail:
                raise OSError("disk full")
            for i in range(tensor.layout.size):
                output[i] = tensor[i]
    with sw.registered_move_operation(Generic, Generic, FailingMove):
        ev = Evictable(Generic(VALUES), Generic([]))
        primary, secondary = ev.primary, ev.secondary
        h = ev.evict_async()
        with pytest.raises(OSError, match="disk full"):
            h.wait(60)
        assert isinstance(h.exception(), OSError)
        assert not ev.is_evicted() and ev.primary is primary and ev.secondary is secondary
        assert not primary.is_released() and values(ev) == VALUES and ev.version == 0
        FailingMove.fail = False
        assert ev.evict_async().wait(60) is None and ev.is_evicted()
        ev.promote()
        assert values(ev) == VALUES and accepts_release(ev)


def test_async_transitions_refuse_a_released_evictable_at_once():
    ev = file_evictable()
    ev.release()
    with pytest.raises(RuntimeError, match="released"):
        ev.promote_async()
    with pytest.raises(RuntimeError, match="released"):
        ev.evict_async()


def test_prefetching_the_next_layer_while_reading_this_one():
    layers = [file_evictable(retain_clean=True) for _ in range(4)]
    for ev in layers:
        ev.evict()
    pending = layers[0].promote_async()
    for k, ev in enumerate(layers):
        pending.wait(60)
        if k + 1 < len(layers):
            pending = layers[k + 1].promote_async()
        assert values(ev) == VALUES
        ev.evict()
        assert ev.is_evicted()
