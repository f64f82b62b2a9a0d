"""docs/spec/tensor-and-carriers.md §1.1 Representation and multi-subtensor Tensors:
tensor_from_subtensors' checks in order, the planar example, frozen Subtensor records, and the
queries-only boundary of a multi-subtensor Tensor."""
import pytest

import strideweave as sw
from strideweave import CPU, Generic, Layout, Shape, Stride
from strideweave.core.representation import PLANAR_FLOAT32_PAIR, Subtensor, tensor_from_subtensors

from filled_carriers import filled

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def planar():
    F = D.Float32
    a, b = CPU(4), CPU(2)
    t = tensor_from_subtensors(PLANAR_FLOAT32_PAIR,
                               [Subtensor(F, a, 0, L([2, 2], [1, 2])), Subtensor(F, b, 0, L(2, 1))],
                               [L([2, 2], [0, 1])])
    return t, a, b


def test_planar_example():
    t, a, b = planar()
    assert t.carrier is a and t.size() == 4 and not t.is_mutable()
    assert t.version_snapshot() == ((id(a), 0), (id(b), 0))
    assert t.dtype() is PLANAR_FLOAT32_PAIR and len(t.subtensors) == 2
    assert t.adjacent_layouts == (L([2, 2], [0, 1]),)


def test_multi_subtensor_supports_only_queries():
    t, a, b = planar()
    calls = [lambda: t[0], lambda: t.__setitem__(0, 1.0), lambda: t[0:1, :], lambda: sw.broadcast_to(t, Shape([2, 2]))]
    for call in calls:
        with pytest.raises(NotImplementedError, match="multi-subtensor"):
            call()
    assert a.version == 0 and b.version == 0


def test_subtensor_is_frozen():
    s = Subtensor(D.Float32, CPU(1), 0, L(1, 1))
    with pytest.raises(AttributeError):
        s.offset = 1


def test_single_plane_representation_is_an_ordinary_tensor():
    c = filled(3)
    t = tensor_from_subtensors(D.Float32, [Subtensor(D.Float32, c, 0, L(3, 1))])
    assert t[2] == 2.0 and t.is_mutable()


def test_representation_checks_in_order():
    F = D.Float32
    a, b = CPU(4), CPU(2)
    good = [Subtensor(F, a, 0, L([2, 2], [1, 2])), Subtensor(F, b, 0, L(2, 1))]
    adj = [L([2, 2], [0, 1])]
    with pytest.raises(TypeError):
        tensor_from_subtensors("pair", good, adj)
    with pytest.raises(TypeError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [1, 2], adj)
    with pytest.raises(ValueError, match="no Tensor storage schema"):
        tensor_from_subtensors(D.Integer, good, adj)
    with pytest.raises(ValueError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, good[:1], adj)
    with pytest.raises(ValueError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, good, [])
    with pytest.raises(ValueError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [Subtensor(D.Int32, a, 0, L(2, 1)), good[1]], adj)
    with pytest.raises(ValueError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [Subtensor(F, a, -1, L(2, 1)), good[1]], adj)
    with pytest.raises(ValueError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [Subtensor(F, a, 3, L(2, 1)), good[1]], adj)
    with pytest.raises(ValueError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [Subtensor(F, CPU(4, dtype=D.Int32), 0, L(2, 1)), good[1]], adj)
    with pytest.raises(TypeError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [Subtensor(F, "a", 0, L(2, 1)), good[1]], adj)
    with pytest.raises(TypeError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [Subtensor(F, a, 0.0, L(2, 1)), good[1]], adj)
    gone = CPU(4)
    gone.release()
    with pytest.raises(RuntimeError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [Subtensor(F, gone, 0, L(2, 1)), good[1]], adj)
    # the ValueErrors of step 4 are listed before "released"
    gone_int = CPU(4, dtype=D.Int32)
    gone_int.release()
    with pytest.raises(ValueError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [Subtensor(F, gone_int, 0, L(2, 1)), good[1]], adj)
    with pytest.raises(ValueError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [Subtensor(F, gone, -1, L(2, 1)), good[1]], adj)
    g = Generic([0.0, 0.0], dtype=F)
    with pytest.raises(TypeError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [good[0], Subtensor(F, g, 0, L(2, 1))], adj)
    with pytest.raises(ValueError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, good, [L([4], [0])])
    with pytest.raises(ValueError):
        tensor_from_subtensors(PLANAR_FLOAT32_PAIR, good, [L([2, 2], [1, 2])])  # cosize 4 > size 2
    assert a.version == 0 and b.version == 0 and not a.is_released()
