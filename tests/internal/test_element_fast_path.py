"""The Rust element-access fast path of Tensor (issue 2, "Speed") is behaviour-neutral.

`Tensor[key]` on a built-in CPU / FileBacked carrier goes through `_native.read_element` /
`write_element`; a subclass that overrides an element hook goes through the reference path
(`carrier[offset + layout.index(key)]`). Every test here runs the same operation on both and
requires identical outcomes: value, exception type and message, version, stored slots.
"""
import weakref
import pytest

import strideweave as sw
from strideweave import _native
from strideweave.carriers import base
from strideweave.carriers._builtin import RustBackedCarrier
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor

D = sw.DType


class ReferenceCPU(CPU):
    """Same storage, but overriding get_value/set_value opts out of the fast path."""

    def get_value(self, i):
        return super().get_value(i)

    def set_value(self, i, v):
        return super().set_value(i, v)

    __getitem__ = get_value
    __setitem__ = set_value


class ReferenceFileBacked(FileBacked):
    def get_value(self, i):
        return super().get_value(i)

    __getitem__ = get_value


class PlainCPU(CPU):
    """A subclass that overrides nothing on the element path keeps the fast path."""


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


HIER = L([2, [3, 2]], [1, [4, 2]])  # size 12, cosize 12, hierarchical, not first-mode-major
GAPPED = L([2, [2, 2]], [1, [6, 3]])  # size 8, cosize 11: slots 2 and 5 are holes


def pair(layout, cls_fast=CPU, cls_ref=ReferenceCPU, n=None, dtype=D.Float32):
    n = layout.cosize + 1 if n is None else n
    fast, ref = cls_fast(n, dtype=dtype), cls_ref(n, dtype=dtype)
    for c in (fast, ref):
        for i in range(n):
            c[i] = {D.Float32: i * 1.5, D.Int32: i, D.Bool: i % 2 == 1}[dtype]
    return Tensor(fast, 1, layout), Tensor(ref, 1, layout)


def outcome(fn):
    try:
        return ("ok", fn())
    except BaseException as exc:  # noqa: BLE001 - compared, not swallowed
        # Messages name the carrier class; the reference twins differ only in that name.
        return (type(exc), str(exc).replace("Reference", ""))


def slots(carrier):
    return [carrier[i] for i in range(carrier.size())]


KEYS = [
    0, 7, 11, 12, -1, 2**70, True, 1.0, "0", None, object(),
    (1, (2, 1)), [1, [2, 1]], (1, 5), [0, 3], (1, (3, 0)), (1, (2,)), (1, (2, 1, 0)), (1,),
    (1, (2, True)), (1, (2, 1.0)), (2, (0, 0)), (-1, (0, 0)), (1, [2, 1]), [(1, 2), 0],
    (1, (slice(None), 0)), [slice(None), 0], ((0,), (0, 0)),
]


def test_flags_are_decided_per_class():
    assert CPU._sw_fast_access and FileBacked._sw_fast_access and PlainCPU._sw_fast_access
    assert RustBackedCarrier._sw_fast_access
    assert not ReferenceCPU._sw_fast_access and not ReferenceFileBacked._sw_fast_access

    class SizeOverride(CPU):
        def size(self):
            return super().size()

    class MutabilityOverride(FileBacked):
        def _is_mutable(self):
            return True

    assert not SizeOverride._sw_fast_access and not MutabilityOverride._sw_fast_access


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_reads_match_the_reference_path(key):
    fast, ref = pair(HIER)
    got, want = outcome(lambda: fast[key]), outcome(lambda: ref[key])
    if got[0] == "ok" and isinstance(got[1], Tensor):  # a slicing key: compare the views
        got, want = ("view", got[1].offset, got[1].layout), ("view", want[1].offset, want[1].layout)
    assert got == want


@pytest.mark.parametrize("key", KEYS, ids=repr)
@pytest.mark.parametrize("value", [2.25, 7, True, "x", None, 1e300])
def test_writes_match_the_reference_path(key, value):
    fast, ref = pair(HIER)
    got, want = outcome(lambda: fast.__setitem__(key, value)), outcome(lambda: ref.__setitem__(key, value))
    assert got == want
    assert fast.version == ref.version
    assert slots(fast.carrier) == slots(ref.carrier)


def test_the_fast_path_is_the_one_taken(monkeypatch):
    # The reference path reaches the carrier's `carrier[i]`; the native path reads and writes
    # the storage without it. Recording the built-in item hooks tells the two apart (the
    # per-class fast-path decision was taken when the classes were created, so patching
    # the hooks afterwards does not change which path runs).
    calls = []
    real_get, real_set = RustBackedCarrier.__getitem__, RustBackedCarrier.__setitem__
    monkeypatch.setattr(RustBackedCarrier, "__getitem__", lambda c, i: calls.append("r") or real_get(c, i))
    monkeypatch.setattr(RustBackedCarrier, "__setitem__", lambda c, i, v: calls.append("w") or real_set(c, i, v))
    fast, ref = pair(HIER)
    calls.clear()
    fast[3] = 1.0
    assert fast[3] == 1.0 and calls == []
    ref[3] = 1.0  # ReferenceCPU overrides the item hooks: its own run, not the patched ones
    assert ref[3] == 1.0 and calls == []
    plain = Tensor(PlainCPU(4), 0, L(4, 1))
    plain[1] = 2.0
    assert plain[1] == 2.0 and calls == []
    # A state the native path does not decide (an owned carrier) goes to the reference path.
    owned = Tensor(CPU(4), 0, L(4, 1))
    owned.carrier._sw_owner = object()
    with pytest.raises(RuntimeError, match="owned"):
        owned[1] = 2.0
    assert calls == ["w"]
    owned.carrier._sw_owner = None


def test_each_write_bumps_the_version_once_and_reads_do_not():
    fast, _ = pair(GAPPED)
    v = fast.version
    fast[(1, (1, 1))] = 3.0
    assert fast.version == v + 1
    fast[0]
    fast[(1, (1, 1))]
    assert fast.version == v + 1
    with pytest.raises(TypeError):
        fast[0] = "nope"
    with pytest.raises(ValueError):
        fast[8] = 1.0
    assert fast.version == v + 1
    assert fast.carrier[1 + 1 + 6 + 3] == 3.0  # offset 1 + layout index 10


def _states():
    """(name, apply, undo) carrier states every write must refuse in the reference order."""
    def owned(c):
        c._sw_owner = CPU(1)

    def unowned(c):
        c._sw_owner = None

    def immutable(c):
        c._mutable = False

    def mutable(c):
        c._mutable = True

    def claimed(c):
        c._sw_claim = object()

    def unclaimed(c):
        c._sw_claim = None

    return [("owned", owned, unowned), ("immutable", immutable, mutable), ("claimed", claimed, unclaimed)]


@pytest.mark.parametrize("state", _states(), ids=lambda s: s[0])
@pytest.mark.parametrize("key", [0, 12, 1.0, (1, (2, 1)), (1, (9, 0)), (slice(None), 0)], ids=repr)
@pytest.mark.parametrize("value", [2.0, "x"])
def test_refused_writes_match_the_reference_path(state, key, value):
    _, apply, undo = state
    fast, ref = pair(HIER)
    before = fast.version
    for t in (fast, ref):
        apply(t.carrier)
    got, want = outcome(lambda: fast.__setitem__(key, value)), outcome(lambda: ref.__setitem__(key, value))
    assert got == want and got[0] != "ok"
    assert fast.version == ref.version == before
    # Reads continue in every one of these states.
    assert outcome(lambda: fast[key])[0] == outcome(lambda: ref[key])[0]
    for t in (fast, ref):
        undo(t.carrier)
    assert slots(fast.carrier) == slots(ref.carrier)


class _Request:
    """Stands for a move request: what a grant refers to (weakly) and its destination."""

    def __init__(self, destination):
        self.destination = destination


def test_a_running_move_writes_its_claimed_destination_only_through_what_it_granted():
    fast, ref = pair(HIER)
    for t in (fast, ref):
        request = _Request(t.carrier)
        t.carrier._sw_claim = request
        with pytest.raises(RuntimeError, match="pending move"):
            t[0] = 9.0
        granted = sw.Tensor(t.carrier, t.offset, t.layout)
        granted._sw_grant = weakref.ref(request)
        try:
            granted[0] = 9.0
            with pytest.raises(RuntimeError, match="pending move"):
                t[0] = 8.0  # the same carrier, through a Tensor the move did not hand out
        finally:
            t.carrier._sw_claim = None
        assert t[0] == 9.0
    assert fast.version == ref.version


@pytest.mark.parametrize("key", [0, (1, (2, 1)), 1.0, (slice(None), 0)], ids=repr)
def test_released_carriers_match_the_reference_path(key):
    fast, ref = pair(HIER)
    fast.carrier.release()
    ref.carrier.release()
    assert outcome(lambda: fast[key]) == outcome(lambda: ref[key])
    assert outcome(lambda: fast.__setitem__(key, 1.0)) == outcome(lambda: ref.__setitem__(key, 1.0))


@pytest.mark.parametrize("dtype,value", [(D.Int32, 2**31), (D.Int32, 1.5), (D.Int32, -7), (D.Bool, 1),
                                         (D.Bool, True)])
def test_typed_writes_match_the_reference_path(dtype, value):
    fast, ref = pair(L(4, 1), dtype=dtype, n=5)
    got, want = outcome(lambda: fast.__setitem__(2, value)), outcome(lambda: ref.__setitem__(2, value))
    assert got == want and fast.version == ref.version
    assert slots(fast.carrier) == slots(ref.carrier)


def test_filebacked_matches_the_reference_path():
    carriers = []
    try:
        for cls in (FileBacked, ReferenceFileBacked):
            c = cls(dtype=D.Float32)
            c._allocate(12)
            carriers.append(c)
        fast, ref = (Tensor(c, 0, L([3, 4], [4, 1])) for c in carriers)
        for key in [(2, 3), 5, 12, (3, 0), 1.0]:
            for value in (0.5, "x"):
                assert outcome(lambda: fast.__setitem__(key, value)) == \
                    outcome(lambda: ref.__setitem__(key, value))
            assert outcome(lambda: fast[key]) == outcome(lambda: ref[key])
        assert slots(carriers[0]) == slots(carriers[1]) and fast.version == ref.version
    finally:
        for c in carriers:
            c.release()


def test_multi_subtensor_is_refused_first():
    from strideweave.core.representation import PLANAR_FLOAT32_PAIR, Subtensor, tensor_from_subtensors
    F = D.Float32
    a, b = CPU(4), CPU(2)
    t = tensor_from_subtensors(PLANAR_FLOAT32_PAIR,
                               [Subtensor(F, a, 0, L([2, 2], [1, 2])), Subtensor(F, b, 0, L(2, 1))],
                               [L([2, 2], [0, 1])])
    for key in (1.0, (slice(None),), 0):
        with pytest.raises(NotImplementedError):
            t[key]
        with pytest.raises(NotImplementedError):
            t[key] = "x"
    assert a.version == b.version == 0


def test_a_reassigned_storage_is_the_one_read_and_written():
    # The storage slot is read without a lock while it keeps its first value; an assignment
    # afterwards (no built-in does that) must still be seen by every later access.
    c = CPU(4)
    t = Tensor(c, 0, L(4, 1))
    t[1] = 1.5
    other = _native.HostStorage("f32", 4)
    other.set_values([7.0, 8.0, 9.0, 10.0])
    c._storage = other
    assert c._storage is other and t[1] == 8.0
    t[2] = 2.5
    assert other.to_list() == [7.0, 8.0, 2.5, 10.0]
