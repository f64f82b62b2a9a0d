"""docs/spec/interop-movement.md, "Requirement: move_async validates one movement request"."""
import pytest

import strideweave as sw
from strideweave import CPU, Layout, Shape, Stride, Tensor

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_reject_batched_movement_before_any_effect():
    t = Tensor(CPU(2), 0, L(2, 1))
    dest = CPU(2)
    with pytest.raises(TypeError):
        sw.move_async([t], dest)
    with pytest.raises(TypeError):
        sw.move_async(t, [dest])
    with pytest.raises(TypeError):
        sw.move_async((t,), (dest,))
    assert not t.carrier.is_released() and dest.version == 0


def test_a_released_source_is_reported_before_a_sequence_destination():
    t = Tensor(CPU(2), 0, L(2, 1))
    t.carrier.release()
    with pytest.raises(RuntimeError, match="released"):
        sw.move_async(t, [CPU(2)])


def test_same_carrier_in_both_roles():
    t = Tensor(CPU(2), 0, L(2, 1))
    with pytest.raises(ValueError):
        sw.move_async(t, t.carrier)
    assert not t.carrier.is_released() and t.version == 0


def test_validation_errors_raise_directly_and_return_no_handle():
    t = Tensor(CPU(2), 0, L(2, 1))
    with pytest.raises(TypeError):
        sw.move_async(t, CPU(2, dtype=D.Int32))
