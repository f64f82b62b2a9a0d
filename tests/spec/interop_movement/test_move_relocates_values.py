"""docs/spec/interop-movement.md, "Requirement: move relocates values into a caller-supplied carrier":
the scenarios and the validation table, every row for its error and for nothing changed."""
import gc

import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Generic, Layout, Shape, Stride, Tensor
from strideweave.core.representation import PLANAR_FLOAT32_PAIR, Subtensor, tensor_from_subtensors

from move_sources import cpu_tensor, filebacked_directory, snapshot

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_move_relocates_and_releases_the_source():
    t = cpu_tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], L([2, 3], [1, 2]))
    source = t.carrier
    dest = CPU(6)
    with sw.no_grad():
        r = sw.move(t, dest)
    assert r.carrier is dest and r.offset == 0 and r.layout == t.layout
    assert r.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert source.is_released()


def test_move_uses_the_offset_window_and_result_starts_at_zero():
    t = cpu_tensor([7.0, 8.0], L(2, 1), offset=3)
    with sw.no_grad():
        r = sw.move(t, FileBacked(dtype=D.Float32))
    assert r.offset == 0 and r.tolist() == [7.0, 8.0] and r.carrier.size() == 2
    r.carrier.release()


def test_allocate_an_empty_destination_to_cosize():
    gapped = L([2, 3], [1, 4])  # size 6, cosize 10
    t = cpu_tensor([float(i) for i in range(6)], gapped)
    dest = FileBacked(dtype=D.Float32)
    assert dest.size() == 0
    with sw.no_grad():
        r = sw.move(t, dest)
    assert dest.size() == 10 and dest.version == 0
    assert r.layout == gapped and r.tolist() == [float(i) for i in range(6)]
    dest.release()


def test_move_a_broadcast_view_without_materializing():
    base = cpu_tensor([1.0, 2.0], L([2, 1], [1, 2]))
    b = sw.broadcast_to(base, Shape([2, 3]))
    assert b.layout == L([2, 3], [1, 0])
    dest = FileBacked(dtype=D.Float32)
    with sw.no_grad():
        r = sw.move(b, dest)
    assert dest.size() == 2 and r.layout == L([2, 3], [1, 0])
    assert r.tolist() == [1.0, 2.0] * 3
    small = CPU(2)
    with sw.no_grad():
        r2 = sw.move(sw.move(b2 := sw.broadcast_to(cpu_tensor([3.0, 4.0], L([2, 1], [1, 2])), Shape([2, 3])),
                             FileBacked(dtype=D.Float32)), small)
    assert r2.layout == b2.layout and r2.tolist() == [3.0, 4.0] * 3
    dest.release()


@pytest.mark.parametrize("make_dest", [lambda: CPU(8), lambda: FileBacked(dtype=D.Float32),
                                       lambda: Generic([0.0] * 8, dtype=D.Float32)])
@pytest.mark.parametrize("make_source", ["cpu", "generic", "file"])
def test_values_are_identical_whichever_route_runs(make_dest, make_source):
    layout = L([2, [2, 2]], [1, [3, 6]])  # nested and gapped: cosize 1+1+3+6 = 11
    values = [float(10 + k) for k in range(layout.size)]
    if make_source == "cpu":
        t = cpu_tensor(values, layout)
    else:
        carrier = Generic([0.0] * 11, dtype=D.Float32) if make_source == "generic" else FileBacked(dtype=D.Float32)
        if make_source == "file":
            carrier._allocate(11)
        t = Tensor(carrier, 0, layout)
        for k, v in enumerate(values):
            t[k] = v
    dest = make_dest()
    if dest.size() not in (0,) and dest.size() < layout.cosize:
        dest = dest.allocate_like(layout.cosize)
    with sw.no_grad():
        r = sw.move(t, dest)
    assert r.tolist() == values and r.layout == layout and t.carrier.is_released()


# ----- the validation table -------------------------------------------------------------------

def _unchanged(*carriers):
    return [snapshot(c) for c in carriers]


def test_reject_a_non_tensor():
    with pytest.raises(TypeError):
        sw.move([1.0], CPU(1))


def test_reject_a_released_source_before_checking_the_destination():
    t = cpu_tensor([1.0])
    t.carrier.release()
    with pytest.raises(RuntimeError, match="released"):
        sw.move(t, "not a carrier")


def test_reject_an_owned_source():
    t = cpu_tensor([1.0])
    evictable = sw.Evictable(t.carrier, CPU(1))  # owns its tiers
    assert t.carrier.is_owned() and evictable.primary is t.carrier
    dest = CPU(1)
    before = _unchanged(t.carrier, dest)
    with pytest.raises(RuntimeError):
        sw.move(t, dest)
    assert _unchanged(t.carrier, dest) == before


@pytest.mark.parametrize("bad", [None, "x", [CPU(1)], 3])
def test_reject_a_non_carrier_destination(bad):
    t = cpu_tensor([1.0])
    with pytest.raises(TypeError):
        sw.move(t, bad)
    assert not t.carrier.is_released()


def test_reject_the_tensors_own_carrier():
    t = cpu_tensor([1.0, 2.0])
    before = _unchanged(t.carrier)
    with pytest.raises(ValueError):
        sw.move(t, t.carrier)
    assert _unchanged(t.carrier) == before


def test_reject_a_released_destination():
    t = cpu_tensor([1.0])
    dest = CPU(1)
    dest.release()
    with pytest.raises(RuntimeError, match="released"):
        sw.move(t, dest)
    assert not t.carrier.is_released()


def test_reject_an_immutable_destination():
    t = cpu_tensor([1.0])
    dest = CPU(1, mutable=False)
    before = _unchanged(t.carrier, dest)
    with pytest.raises(RuntimeError):
        sw.move(t, dest)
    assert _unchanged(t.carrier, dest) == before


def test_reject_an_owned_destination():
    t = cpu_tensor([1.0])
    dest = CPU(1)
    evictable = sw.Evictable(dest, CPU(1))  # owns its tiers
    assert dest.is_owned() and evictable.primary is dest
    with pytest.raises(RuntimeError):
        sw.move(t, dest)
    assert not t.carrier.is_released() and dest.version == 0


def test_reject_a_destination_of_another_dtype():
    t = cpu_tensor([1.0])
    dest = CPU(1, dtype=D.Int32)
    before = _unchanged(t.carrier, dest)
    with pytest.raises(TypeError):
        sw.move(t, dest)
    assert _unchanged(t.carrier, dest) == before


def test_reject_a_destination_that_is_too_small_and_cannot_allocate():
    t = cpu_tensor([1.0, 2.0, 3.0], L([3], [2]))  # cosize 5
    dest = CPU(4)
    before = _unchanged(t.carrier, dest)
    with pytest.raises(ValueError, match="too small"):
        sw.move(t, dest)
    assert _unchanged(t.carrier, dest) == before
    with pytest.raises(ValueError, match="too small"):
        sw.move(t, CPU(0))  # empty but CPU cannot allocate


def test_validation_order_dtype_before_size():
    t = cpu_tensor([1.0, 2.0])
    with pytest.raises(TypeError):
        sw.move(t, CPU(0, dtype=D.Int32))


def test_reject_a_multi_subtensor_tensor_first():
    a, b = CPU(4), CPU(2)
    t = tensor_from_subtensors(PLANAR_FLOAT32_PAIR,
                               [Subtensor(D.Float32, a, 0, L([2, 2], [1, 2])), Subtensor(D.Float32, b, 0, L(2, 1))],
                               [L([2, 2], [0, 1])])
    with pytest.raises(NotImplementedError, match="multi-subtensor"):
        sw.move(t, "not even a carrier")
    with pytest.raises(NotImplementedError, match="multi-subtensor"):
        sw.move_async(t, CPU(4))
    with pytest.raises(NotImplementedError, match="multi-subtensor"):
        sw.move_async(t, [CPU(4)])  # even before the sequence rejection
    assert a.version == b.version == 0 and not a.is_released() and not b.is_released()


def test_failed_validation_leaves_no_file_behind():
    directory = filebacked_directory()
    t = cpu_tensor([1.0])
    dest = FileBacked(dtype=D.Int32)
    names = sorted(p.name for p in directory.iterdir())
    with pytest.raises(TypeError):
        sw.move(t, dest)
    assert sorted(p.name for p in directory.iterdir()) == names and dest.size() == 0
    dest.release()


def test_release_of_source_is_final_even_with_outstanding_references():
    x = cpu_tensor([1.0])
    source = x.carrier
    sw.move(x, CPU(1))
    del x
    gc.collect()
    assert source.is_released() and source.size() == 0
