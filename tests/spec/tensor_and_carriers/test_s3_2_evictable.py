"""docs/spec/tensor-and-carriers.md §3.2 Evictable(primary, secondary): construction checks
in order with nothing owned on failure, promoted and evicted access; transitions as moves
between tiers that keep the version, add no autograd node and no profiling, and are
failure-atomic and retryable (failures injected during evict and during promote); release,
GC disowning, factories, the DLPack refusal in both residencies, and owned tiers that export
read-only and cannot be moved, released or written through."""
import gc
import threading

import pytest

import strideweave as sw
from strideweave.carriers.extension import (CarrierDefinition, PreparedTransfer,
                                            TransferProvider, TransferRoute,
                                            register_carrier_definition)
from strideweave.carriers.move import MoveOperation, registered_move_operation

from blockdev_fixture import block_device_path  # noqa: F401
from dlpack_structs import READ_ONLY, managed
from slab_carrier import slab_storage
from user_written_hooks import NodeWatchingMove

F32, I32 = sw.DType.Float32, sw.DType.Int32


def flat(carrier, n=None):
    n = carrier.size() if n is None else n
    return sw.Tensor(carrier, 0, sw.Layout.canonical(sw.Shape(n)))


def cpu(values, dtype=F32, mutable=True):
    """A fresh CPU carrier holding `values` (version 0)."""
    return sw.CPU(0, dtype=dtype).new_like(values, mutable=mutable)


def filebacked(dtype=F32):
    return sw.FileBacked(dtype=dtype)


def values(ev):
    return [ev[i] for i in range(ev.size())]


def state(ev):
    """Everything a failed transition must leave unchanged."""
    return (ev.is_evicted(), ev.primary, ev.secondary, ev.version, ev.primary.is_released(),
            ev.secondary.is_released(), ev.primary.is_owned(), ev.secondary.is_owned())


def tier_state(*tiers):
    return [(t.is_owned(), t.is_released(), t.version) for t in tiers]


def test_starts_promoted_and_owns_both_tiers():
    p, s = cpu([1.0, 2.0, 3.0]), filebacked()
    ev = sw.Evictable(p, s)
    assert not ev.is_evicted()
    assert ev.primary is p and ev.secondary is s
    assert p.is_owned() and s.is_owned()
    assert ev.size() == 3 and ev.dtype() is F32 and ev.version == 0
    assert values(ev) == [1.0, 2.0, 3.0]
    assert ev.is_mutable() and not ev.is_owned()
    assert p.version == 0 and s.version == 0  # construction changes no tier version


def test_supported_dtypes_are_those_both_tiers_support():
    ev = sw.Evictable(cpu([1.0]), filebacked())
    assert ev.supports_storage_dtype(F32) and ev.supports_storage_dtype(I32)
    assert not ev.supports_storage_dtype(sw.DType.Bool)       # FileBacked cannot
    assert not ev.supports_storage_dtype(sw.DType.Floating)   # CPU cannot
    with pytest.raises(TypeError):
        ev.supports_storage_dtype("Float32")
    ev.release()
    assert ev.supports_storage_dtype(I32)  # still answers after release


def test_mutability_is_the_primarys_at_construction():
    p = cpu([1.0, 2.0], mutable=False)
    ev = sw.Evictable(p, filebacked())
    assert not ev.is_mutable()
    with pytest.raises(RuntimeError, match="not mutable"):
        ev[0] = 5.0
    assert values(ev) == [1.0, 2.0] and ev.version == 0
    ev.evict()
    ev.promote()  # the fresh primary is framework storage; the Evictable stays immutable
    assert not ev.is_mutable() and values(ev) == [1.0, 2.0]
    with pytest.raises(RuntimeError, match="not mutable"):
        flat(ev)[1] = 0.0


# Evictables that must stay alive for a test's duration (their tiers stay owned meanwhile).
_KEEP = []


def _slab_class(name, route_to_cpu):
    cls = type(name, (sw.Carrier,), {})
    storage = slab_storage(fallback=False)
    routes = ()
    if route_to_cpu:
        def prep(request):
            def submit():
                for k in range(request.physical_span):
                    request.destination[k] = request.tensor.carrier.cells[request.offset + k]
            return PreparedTransfer(submit)
        routes = (TransferRoute(cls, sw.CPU, f"{name}.to_cpu", TransferProvider(prep)),)
    register_carrier_definition(cls, CarrierDefinition(storage, transfers=routes))
    return cls


def _error_cases():
    """(label, build tiers, exception, message) per check, each case also violating every
    later check it can, so the ordering is what decides the error."""
    def block_like():
        from strideweave.carriers.block_device import BlockDeviceCarrier
        fake = BlockDeviceCarrier.__new__(BlockDeviceCarrier)
        sw.Carrier.__init__(fake)  # framework state only: isinstance is all check 2 reads
        return fake

    def released(c):
        c.release()
        return c

    def owned():
        inner = cpu([1.0])
        _KEEP.append(sw.Evictable(cpu([1.0]), inner))
        return inner

    return [
        ("1 not a carrier (primary)", lambda: ([1.0], filebacked()), TypeError, "Carrier"),
        ("1 not a carrier (secondary)", lambda: (cpu([1.0]), "file"), TypeError, "Carrier"),
        ("1 before 2", lambda: (block_like(), None), TypeError, "Carrier"),
        ("2 block tier", lambda: (block_like(), block_like()), TypeError, "BlockDeviceCarrier"),
        ("2 block secondary", lambda: (cpu([1.0]), block_like()), TypeError, "BlockDeviceCarrier"),
        ("3 distinct", lambda: (lambda c: (c, c))(released(cpu([]))), ValueError, "distinct"),
        ("4 released", lambda: (released(cpu([1.0])), owned()), RuntimeError, "released"),
        ("4 released secondary", lambda: (cpu([1.0]), released(filebacked())), RuntimeError, "released"),
        ("5 owned", lambda: (owned(), filebacked(I32)), RuntimeError, "already owned"),
        ("6 dtypes", lambda: (cpu([], dtype=I32), sw.Generic([], mutable=False, dtype=F32)),
         TypeError, "dtypes"),
        ("7 mutable", lambda: (cpu([]), sw.Generic([], mutable=False, dtype=F32)), RuntimeError, "mutable"),
        ("8 at least one", lambda: (cpu([]), _slab_class("NoRoute8", False)(0, dtype=F32)),
         ValueError, "at least one"),
        ("9 forward refused", lambda: (cpu([1.0]), _slab_class("NoRoute9", False)(0, dtype=F32)),
         NotImplementedError, "NoRoute9"),
        ("9 reverse refused", lambda: (_slab_class("OneWay", True)(2, dtype=F32), cpu([1.0, 2.0])),
         NotImplementedError, "OneWay"),
    ]


@pytest.mark.parametrize("label,build,exc,word", _error_cases(), ids=[c[0] for c in _error_cases()])
def test_construction_checks_in_order_and_own_nothing_on_failure(label, build, exc, word):
    primary, secondary = build()
    tiers = [t for t in (primary, secondary) if isinstance(t, sw.Carrier)]
    before = tier_state(*tiers)
    with pytest.raises(exc, match=word):
        sw.Evictable(primary, secondary)
    assert tier_state(*tiers) == before


def test_block_device_carrier_tier_is_refused_on_a_real_device(block_device_path):  # noqa: F811
    dev = sw.BlockDevice(block_device_path)
    b = dev.allocate(4)
    c = cpu([1.0, 2.0, 3.0, 4.0])
    for primary, secondary in ((b, c), (c, b)):
        with pytest.raises(TypeError, match="BlockDeviceCarrier"):
            sw.Evictable(primary, secondary)
    assert not b.is_owned() and not c.is_owned() and not b.is_released()
    b.release()
    del b, primary, secondary
    gc.collect()
    dev.close()


def test_step_9_refusal_is_the_routes_own_error_and_leaves_definitions_usable():
    OneWay = _slab_class("OneWayB", True)
    slab, c = OneWay(2, dtype=F32), cpu([1.0, 2.0])
    with pytest.raises(NotImplementedError) as info:
        sw.Evictable(slab, c)
    assert "CPU" in str(info.value) and "OneWayB" in str(info.value)
    assert not slab.is_owned() and not c.is_owned()
    slab.release()
    c.release()


# ----- element access ------------------------------------------------------------------------------

def test_promoted_writes_go_to_the_primary_and_bump_the_wrapper_version_by_one():
    p = cpu([0.0, 0.0, 0.0])
    ev = sw.Evictable(p, filebacked())
    ev[1] = 2.5
    assert ev.version == 1 and p[1] == 2.5
    t = flat(ev)
    t[2] = 7.0
    assert ev.version == 2 and t.version == 2 and p[2] == 7.0
    ev.set_value(0, 1.0)  # a built-in set_value counts like carrier[i] = v
    assert ev.version == 3 and values(ev) == [1.0, 2.5, 7.0]
    assert p.is_owned()


def test_failed_writes_change_nothing():
    ev = sw.Evictable(cpu([1, 2], dtype=I32), filebacked(I32))
    with pytest.raises(IndexError):
        ev[2] = 1
    with pytest.raises(TypeError):
        ev["0"] = 1
    with pytest.raises(TypeError):
        ev[0] = 1.5           # Int32 slot
    with pytest.raises(OverflowError):
        ev[0] = 2**40
    assert ev.version == 0 and values(ev) == [1, 2]


def test_evicted_access_raises_evicted_and_changes_nothing():
    ev = sw.Evictable(cpu([1.0, 2.0]), filebacked())
    t = flat(ev)
    ev.evict()
    for action in (lambda: ev[0], lambda: t[1], lambda: t.tolist()):
        with pytest.raises(RuntimeError, match="evicted"):
            action()
    for action in (lambda: ev.__setitem__(0, 3.0), lambda: t.__setitem__(1, 3.0),
                   lambda: ev.set_value(0, 3.0)):
        with pytest.raises(RuntimeError, match="evicted"):
            action()
    assert ev.version == 0
    ev.promote()
    assert t.tolist() == [1.0, 2.0]


def test_index_checks_come_before_the_residency_check():
    ev = sw.Evictable(cpu([1.0]), filebacked())
    ev.evict()
    with pytest.raises(IndexError):
        ev[1]
    with pytest.raises(TypeError):
        ev[None]


# ----- transitions -----------------------------------------------------------------------------------

def test_evict_moves_values_to_a_fresh_secondary_and_releases_primary_and_replaced_secondary():
    p, s = cpu([1.0, 2.0, 3.0]), filebacked()  # empty secondary: replaced by a fresh one
    ev = sw.Evictable(p, s)
    ev[0] = 9.0
    assert ev.evict() is None
    assert ev.is_evicted() and ev.version == 1
    assert p.is_released() and s.is_released()
    fresh = ev.secondary
    assert type(fresh) is sw.FileBacked and fresh is not s and fresh.is_owned()
    assert [fresh[i] for i in range(3)] == [9.0, 2.0, 3.0]
    assert ev.size() == 3
    ev.evict()  # already evicted: nothing happens
    assert ev.secondary is fresh and ev.is_evicted() and ev.version == 1


def test_evict_reuses_a_live_secondary_with_enough_slots():
    s = filebacked()
    s._allocate(5)
    ev = sw.Evictable(cpu([1.0, 2.0, 3.0]), s)
    ev.evict()
    assert ev.secondary is s and not s.is_released() and s.is_owned()
    assert [s[i] for i in range(3)] == [1.0, 2.0, 3.0]
    assert s.version == 0 and ev.version == 0  # a move is not a mutation


def test_promote_moves_back_into_fresh_storage_of_the_primary_class():
    class MyCPU(sw.CPU):
        pass

    p = MyCPU(3)
    for i in range(3):
        p[i] = i + 0.5
    ev = sw.Evictable(p, filebacked())
    ev.evict()
    secondary = ev.secondary
    assert ev.promote() is None
    assert not ev.is_evicted() and ev.version == 0
    assert type(ev.primary) is MyCPU and ev.primary is not p and ev.primary.is_owned()
    assert secondary.is_released()
    assert values(ev) == [0.5, 1.5, 2.5]
    ev.promote()  # already promoted: nothing happens
    ev[2] = 4.0
    assert ev.version == 1 and ev.primary[2] == 4.0


def test_round_trips_keep_values_and_version_for_int32_and_generic_tiers():
    ev = sw.Evictable(cpu([5, -6, 7], dtype=I32), filebacked(I32))
    for _ in range(3):
        ev.evict()
        ev.promote()
    assert values(ev) == [5, -6, 7] and ev.version == 0
    g = sw.Evictable(sw.Generic(["a", ("b",), None], dtype=sw.DType.Any),
                     sw.Generic([], dtype=sw.DType.Any))
    g.evict()
    assert g.secondary[1] == ("b",)
    g.promote()
    assert values(g) == ["a", ("b",), None] and g.version == 0


class WatchedCPU(sw.CPU):
    """Tier classes of our own, so a MoveOperation of ours carries the transitions."""


class WatchedFile(sw.FileBacked):
    pass


def test_transitions_are_moves_between_tiers_with_no_autograd_node_and_no_profiling():
    ev = sw.Evictable(cpu([1.0, 2.0]), filebacked())
    assert sw.is_grad_enabled()
    with sw.profile() as prof:
        ev.evict()
        ev.promote()
    assert prof.events() == []
    # Between tier classes whose move is ours, the node is observable: the operation saved no
    # inputs at forward entry and the transfer's output got no autograd_ctx.
    NodeWatchingMove.seen = []
    with registered_move_operation(WatchedCPU, WatchedFile, NodeWatchingMove), \
            registered_move_operation(WatchedFile, WatchedCPU, NodeWatchingMove):
        ev = sw.Evictable(WatchedCPU(0).new_like([1.0, 2.0]), WatchedFile(dtype=F32))
        with sw.profile() as prof:
            ev.evict()
            ev.promote()
        assert prof.events() == [] and values(ev) == [1.0, 2.0]
        assert [(inputs, output.autograd_ctx) for _, inputs, output in NodeWatchingMove.seen] == [
            ((), None), ((), None)]
        # the same pair moved publicly is profiled and recorded, so the assertions above bite
        NodeWatchingMove.seen = []
        source = flat(WatchedCPU(0).new_like([1.0, 2.0]))
        with sw.profile() as prof:
            moved = sw.move(source, WatchedFile(dtype=F32))
        ((node, inputs, output),) = NodeWatchingMove.seen
        assert prof.events() and len(inputs) == 1 and inputs[0] is source and output is moved and moved.autograd_ctx is node
    with sw.profile() as prof:
        sw.move(flat(cpu([1.0, 2.0])), filebacked())
    assert prof.events()


def test_transitions_on_released_or_owned_evictable_raise():
    ev = sw.Evictable(cpu([1.0]), filebacked())
    outer = sw.Evictable(ev, sw.Generic([], dtype=F32))  # only an Evictable owns carriers
    assert ev.is_owned()
    for transition in (ev.evict, ev.promote):
        with pytest.raises(RuntimeError, match="owned"):
            transition()
    assert not ev.is_evicted()
    outer.evict()  # the owner moves it (a move between tiers): reads through the promoted inner Evictable
    assert outer.secondary[0] == 1.0 and ev.is_released()
    outer.release()
    other = sw.Evictable(cpu([1.0]), filebacked())
    other.release()
    for transition in (other.evict, other.promote):
        with pytest.raises(RuntimeError, match="released"):
            transition()


def test_a_transition_refuses_while_a_pending_move_holds_the_evictable():
    entered, proceed = threading.Event(), threading.Event()

    class HeldEv(sw.Evictable):
        pass

    class Slow(MoveOperation):
        def _copy(self, tensor, destination, output, element_count):
            entered.set()
            proceed.wait(10)
            for i in range(element_count):
                output[i] = tensor[i]

    ev = HeldEv(cpu([1.0, 2.0]), filebacked())
    outcome = []
    with registered_move_operation(HeldEv, sw.CPU, Slow):
        worker = threading.Thread(target=lambda: outcome.append(sw.move(flat(ev), sw.CPU(2))))
        worker.start()
        assert entered.wait(10)
        try:
            for action in (ev.evict, ev.release, lambda: ev.__setitem__(0, 5.0)):
                with pytest.raises(RuntimeError, match="pending move"):
                    action()
            assert not ev.is_evicted() and ev.version == 0
        finally:
            proceed.set()
            worker.join(10)
    assert outcome[0].tolist() == [1.0, 2.0] and ev.is_released()


# ----- failure atomicity ----------------------------------------------------------------------------

class TrackedCPU(sw.CPU):
    created: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        TrackedCPU.created.append(self)


class TrackedFile(sw.FileBacked):
    created: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        TrackedFile.created.append(self)


class Injected(OSError):
    pass


class FailingMove(MoveOperation):
    """Writes part of the destination, then fails: the partial write must not leak."""

    def _copy(self, tensor, destination, output, element_count):
        output[0] = -1
        raise Injected("injected transfer failure")


def tracked_evictable(vals, secondary_slots=0):
    p = TrackedCPU(len(vals))
    for i, v in enumerate(vals):
        p[i] = v
    s = TrackedFile(dtype=F32)
    if secondary_slots:
        s._allocate(secondary_slots)
    return sw.Evictable(p, s)


def test_injected_failure_during_evict_is_atomic_and_retryable():
    ev = tracked_evictable([1.0, 2.0, 3.0])
    ev[2] = 4.0
    before = state(ev)
    TrackedFile.created.clear()
    with registered_move_operation(TrackedCPU, TrackedFile, FailingMove):
        with pytest.raises(Injected, match="injected"):
            ev.evict()
    assert state(ev) == before and values(ev) == [1.0, 2.0, 4.0] and ev.version == 1
    (fresh,) = TrackedFile.created
    assert fresh.is_released() and not fresh.is_owned()
    assert ev.primary.version == 4  # 3 fills + 1 write through the Evictable, nothing more
    ev.evict()  # retry, now through the ordinary route
    assert ev.is_evicted() and ev.version == 1
    assert [ev.secondary[i] for i in range(3)] == [1.0, 2.0, 4.0]


def test_injected_failure_during_evict_into_the_kept_secondary_keeps_it():
    ev = tracked_evictable([1.0, 2.0], secondary_slots=2)
    before = state(ev)
    with registered_move_operation(TrackedCPU, TrackedFile, FailingMove):
        with pytest.raises(Injected):
            ev.evict()
    assert state(ev) == before and values(ev) == [1.0, 2.0]
    assert not ev.secondary.is_released() and ev.secondary.is_owned()
    ev.evict()
    assert ev.is_evicted() and ev.secondary is before[2]


def test_injected_failure_during_promote_is_atomic_and_retryable():
    ev = tracked_evictable([1.0, 2.0, 3.0])
    ev.evict()
    before = state(ev)
    secondary_values = [ev.secondary[i] for i in range(3)]
    TrackedCPU.created.clear()
    with registered_move_operation(TrackedFile, TrackedCPU, FailingMove):
        with pytest.raises(Injected):
            ev.promote()
    assert state(ev) == before and ev.is_evicted()
    assert [ev.secondary[i] for i in range(3)] == secondary_values
    (fresh,) = TrackedCPU.created
    assert fresh.is_released() and not fresh.is_owned()
    ev.promote()
    assert values(ev) == [1.0, 2.0, 3.0] and ev.version == 0 and ev.primary is not fresh


@pytest.mark.parametrize("which", ["evict", "promote"])
def test_allocation_failure_changes_nothing(which, monkeypatch):
    ev = tracked_evictable([1.0, 2.0])
    if which == "promote":
        ev.evict()
    before = state(ev)
    cls = TrackedFile if which == "evict" else TrackedCPU

    def refuse(self, *a, **k):
        raise MemoryError("injected allocation failure")

    monkeypatch.setattr(cls, "allocate_like", refuse)
    with pytest.raises(MemoryError):
        getattr(ev, which)()
    assert state(ev) == before
    monkeypatch.undo()
    getattr(ev, which)()
    assert ev.is_evicted() == (which == "evict")


# ----- release, GC, factories ------------------------------------------------------------------------

def test_release_releases_both_tiers_and_is_idempotent():
    p, s = cpu([1.0, 2.0]), filebacked()
    ev = sw.Evictable(p, s)
    assert ev.release() is None
    assert ev.is_released() and ev.size() == 0
    assert p.is_released() and s.is_released()
    assert not p.is_owned() and not s.is_owned()
    with pytest.raises(RuntimeError, match="released"):
        ev[0]
    with pytest.raises(RuntimeError, match="released"):
        ev[0] = 1.0
    ev.release()
    assert ev.version == 0


def test_release_after_eviction_releases_the_live_secondary():
    ev = sw.Evictable(cpu([1.0]), filebacked())
    ev.evict()
    secondary = ev.secondary
    path = secondary.path
    ev.release()
    assert secondary.is_released() and not path.exists()


def test_an_owned_evictable_cannot_be_released_directly():
    ev = sw.Evictable(cpu([1.0]), filebacked())
    outer = sw.Evictable(ev, sw.Generic([], dtype=F32))
    with pytest.raises(RuntimeError, match="owned"):
        ev.release()
    assert not ev.is_released()
    outer.release()
    assert ev.is_released()


@pytest.mark.parametrize("evicted", [False, True])
def test_gc_of_an_unreleased_evictable_disowns_but_does_not_release_its_tiers(evicted, collect):
    p, s = cpu([1.0, 2.0]), filebacked()
    ev = sw.Evictable(p, s)
    if evicted:
        ev.evict()
    live = ev.secondary if evicted else ev.primary
    other = ev.primary if evicted else ev.secondary
    del ev
    collect()
    assert not live.is_owned() and not live.is_released()
    assert not other.is_owned()
    assert [live[i] for i in range(2)] == [1.0, 2.0]
    live[0] = 3.0  # writable again, and movable
    moved = sw.move(flat(live, 2), sw.CPU(2))
    assert moved.tolist() == [3.0, 2.0] and live.is_released()


def test_a_tensor_keeps_the_evictable_and_its_ownership_alive(collect):
    p = cpu([1.0])
    t = flat(sw.Evictable(p, filebacked()))
    collect()
    assert p.is_owned() and t.tolist() == [1.0]


@pytest.mark.parametrize("evicted", [False, True])
def test_new_like_and_allocate_like_give_new_promoted_evictables(evicted):
    class MyEv(sw.Evictable):
        pass

    ev = MyEv(cpu([1.0, 2.0]), filebacked())
    if evicted:
        ev.evict()
    made = ev.new_like([3.0, None, 5.0])
    assert type(made) is MyEv and not made.is_evicted() and made.version == 0
    assert values(made) == [3.0, 0.0, 5.0]
    assert type(made.primary) is sw.CPU and type(made.secondary) is sw.FileBacked
    assert made.secondary.size() == 0 and made.primary.is_owned() and made.secondary.is_owned()
    zeros = ev.allocate_like(4)
    assert type(zeros) is MyEv and values(zeros) == [0.0] * 4 and not zeros.is_evicted()
    ints = ev.new_like([1, 2], dtype=I32)
    assert ints.dtype() is I32 and ints.secondary.dtype() is I32 and values(ints) == [1, 2]
    frozen = ev.new_like([1.0], mutable=False)
    assert not frozen.is_mutable()
    assert ev.version == 0 and ev.is_evicted() == evicted


def test_factories_work_after_release_and_release_their_tiers_on_failure():
    ev = sw.Evictable(cpu([1.0]), filebacked())
    ev.release()
    assert values(ev.new_like([2.0])) == [2.0]
    with pytest.raises(ValueError, match="at least one"):
        ev.new_like([])
    with pytest.raises(ValueError):
        ev.allocate_like(1, dtype=sw.DType.Bool)  # FileBacked cannot store Bool
    with pytest.raises(TypeError):
        ev.new_like(5)


# ----- DLPack and the owned tiers ---------------------------------------------------------------------

@pytest.mark.parametrize("evicted", [False, True])
def test_dlpack_is_refused_in_both_residencies_naming_evictable(evicted):
    ev = sw.Evictable(cpu([1.0, 2.0]), filebacked())
    if evicted:
        ev.evict()
    t = flat(ev)
    for export in (t.__dlpack__, lambda: t.__dlpack__(max_version=(1, 0)), t.__dlpack_device__):
        with pytest.raises(BufferError, match="Evictable"):
            export()
    with pytest.raises(BufferError, match="Evictable"):
        ev.dlpack_info()
    assert ev.version == 0 and ev.is_evicted() == evicted


def test_dlpack_refusal_names_evictable_for_a_subclass_too():
    class Tiered(sw.Evictable):
        pass

    with pytest.raises(BufferError, match="Evictable"):
        flat(Tiered(cpu([1.0]), filebacked())).__dlpack__()


def test_an_owned_cpu_tier_exports_read_only_and_only_when_versioned():
    p = cpu([1.0, 2.0])
    t = flat(p)
    assert managed(t.__dlpack__(max_version=(1, 0))).flags == 0
    ev = sw.Evictable(p, filebacked())
    assert not t.is_mutable()
    m = managed(t.__dlpack__(max_version=(1, 0)))
    assert m.flags == READ_ONLY
    assert m.dl_tensor.data == p.pointer()  # still the alias, not a copy
    ev.release()


def test_owned_tiers_cannot_be_written_moved_or_released():
    p, s = cpu([1.0, 2.0]), filebacked()
    ev = sw.Evictable(p, s)
    t = flat(p)
    before = tier_state(p, s)
    with pytest.raises(RuntimeError, match="not mutable"):
        p[0] = 5.0
    with pytest.raises(RuntimeError, match="not mutable"):
        t[0] = 5.0
    with pytest.raises(RuntimeError, match="owned"):
        sw.move(t, sw.CPU(2))
    with pytest.raises(RuntimeError, match="owned"):
        sw.move_async(t, sw.FileBacked(dtype=F32))
    with pytest.raises(RuntimeError):
        sw.move(flat(cpu([7.0, 8.0])), s)  # an owned destination is not publicly mutable
    with pytest.raises(RuntimeError, match="owned"):
        p.release()
    with pytest.raises(RuntimeError, match="owned"):
        s.release()
    with pytest.raises(RuntimeError, match="owned"):
        p._increment_version()
    assert tier_state(p, s) == before and values(ev) == [1.0, 2.0] and ev.version == 0
    assert t.tolist() == [1.0, 2.0]  # owned tiers stay readable
