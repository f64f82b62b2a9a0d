"""tensor-and-carriers.md §1, §1.1, §1.2: Tensor, representations and views."""
import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Generic, Layout, Shape, Stride, Tensor
from strideweave.core.representation import PLANAR_FLOAT32_PAIR, Subtensor, tensor_from_subtensors

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def filled(n, dtype=D.Float32):
    c = CPU(n, dtype=dtype)
    for i in range(n):
        c[i] = float(i) if dtype is D.Float32 else i
    return c


# ----- construction ------------------------------------------------------------------------

def test_construction_checks_in_order():
    c = CPU(12)
    lay = L([2, 2], [1, 10])
    with pytest.raises(TypeError):
        Tensor("c", "bad offset", "bad layout")
    with pytest.raises(TypeError):
        Tensor(c, 0, "bad layout")
    with pytest.raises(TypeError):
        Tensor(c, True, lay)
    with pytest.raises(TypeError):
        Tensor(c, 0.0, lay)
    with pytest.raises(ValueError, match="non-negative"):
        Tensor(c, -1, lay)
    with pytest.raises(ValueError, match="exceeds carrier size"):
        Tensor(c, 1, lay)  # cosize 12, not size 4
    t = Tensor(c, 0, lay)
    assert t.size() == 4
    c.release()
    with pytest.raises(ValueError, match="non-negative"):
        Tensor(c, -1, lay)  # the offset check precedes the release check
    with pytest.raises(RuntimeError, match="released"):
        Tensor(c, 0, lay)


def test_queries():
    c = filled(6)
    lay = L([2, 3], [1, 2])
    t = Tensor(c, 0, lay)
    assert t.carrier is c and t.offset == 0 and t.layout == lay
    assert t.dtype() is D.Float32 and t.size() == 6 and t.carrier_type() is CPU
    assert t.version == c.version and t.is_mutable()
    assert len(t.subtensors) == 1 and t.subtensors[0].carrier is c and t.adjacent_layouts == ()
    assert t.version_snapshot() == ((id(c), c.version),)
    assert Tensor(CPU(1, mutable=False), 0, L(1, 1)).is_mutable() is False


def test_tensor_keeps_carrier_alive_and_never_releases_it():
    import gc
    import weakref
    c = CPU(2)
    ref = weakref.ref(c)
    t = Tensor(c, 0, L(2, 1))
    del c
    gc.collect()
    assert ref() is not None
    del t
    gc.collect()
    assert ref() is None


# ----- element access ----------------------------------------------------------------------

def test_read_by_integer_and_hierarchical_keys():
    c = filled(322)
    t = Tensor(c, 0, L([2, [3, 4]], [1, [10, 100]]))
    assert t[1, [2, 3]] == 321.0
    assert t[[1, [2, 3]]] == 321.0
    assert t[1, 11] == 321.0
    assert t[23] == 321.0
    assert t[0] == 0.0


def test_read_adds_offset():
    c = filled(10)
    t = Tensor(c, 3, L([2, 2], [1, 2]))
    assert [t[i] for i in range(4)] == [3.0, 4.0, 5.0, 6.0]
    assert t.tolist() == [3.0, 4.0, 5.0, 6.0]


def test_bad_keys():
    t = Tensor(filled(12), 0, L([3, 4], [1, 3]))
    for bad in (12, -1, (3, 0), (0, 4), (0, 1, 2), (0,)):
        with pytest.raises(ValueError):
            t[bad]
    for bad in (1.0, "a", None, True, (True, 0)):
        with pytest.raises(TypeError):
            t[bad]


def test_write_bumps_version_and_checks_carrier_state():
    c = filled(6)
    t = Tensor(c, 0, L([2, 3], [1, 2]))
    before = c.version
    t[1, 2] = 42.0
    assert c[5] == 42.0 and t.version == before + 1 == c.version
    with pytest.raises(TypeError):
        t[0:1, 0] = 1.0
    with pytest.raises(ValueError):
        t[6] = 1.0
    assert c.version == before + 1
    frozen = Tensor(CPU(2, mutable=False), 0, L(2, 1))
    with pytest.raises(RuntimeError):
        frozen[0] = 1.0
    c.release()
    with pytest.raises(RuntimeError, match="released"):
        t[0]
    with pytest.raises(RuntimeError, match="released"):
        t[0] = 1.0


def test_owned_carrier_write_raises():
    c = filled(2)
    t = Tensor(c, 0, L(2, 1))
    c._sw_owner = object()
    try:
        assert t[1] == 1.0
        with pytest.raises(RuntimeError):
            t[0] = 5.0
        assert not t.is_mutable()
    finally:
        c._sw_owner = None


def test_tensors_on_every_builtin_carrier():
    g = Tensor(Generic([1.0, 2.0, 3.0]), 0, L(3, 1))
    assert g.dtype() is D.Floating and g[2] == 3.0
    f = FileBacked(dtype=D.Int32)
    f._allocate(4)
    ft = Tensor(f, 1, L(3, 1))
    ft[2] = 7
    assert f[3] == 7 and ft.version == 1
    f.release()


# ----- views -------------------------------------------------------------------------------

def test_slicing_view_shares_the_carrier():
    c = filled(12)
    t = Tensor(c, 0, L([3, 4], [1, 3]))
    v = t[1:3, ::2]
    assert v.carrier is c and v.layout == L([2, 2], [1, 6]) and v.offset == 1
    assert v.tolist() == [1.0, 2.0, 7.0, 8.0]
    before = c.version
    v[0, 1] = -1.0
    assert t[1, 2] == -1.0 and c.version == before + 1


def test_slicing_int_entries_remove_modes():
    c = filled(12)
    t = Tensor(c, 0, L([3, 4], [1, 3]))
    row = t[2, :]
    assert row.layout == L([4], [3]) and row.offset == 2
    assert row.tolist() == [2.0, 5.0, 8.0, 11.0]


def test_slicing_nested_modes():
    c = filled(24)
    t = Tensor(c, 0, L([2, [3, 4]], [1, [2, 6]]))
    v = t[1, :]
    assert v.layout == L([[3, 4]], [[2, 6]]) and v.offset == 1
    w = t[:, 5]
    assert w.offset == t.layout.index([0, 5]) and w.layout == L([2], [1])
    with pytest.raises(ValueError):
        t[:, 0:2]


def test_slicing_errors():
    t = Tensor(filled(12), 0, L([3, 4], [1, 3]))
    with pytest.raises(ValueError):
        t[0:1]  # one entry for two modes
    with pytest.raises(TypeError):
        t[0:1, "a"]
    with pytest.raises(TypeError):
        t[0.5:1, :]
    with pytest.raises(ValueError):
        t[::-1, :]
    with pytest.raises(ValueError):
        t[2:1, :]
    with pytest.raises(ValueError):
        t[3, :]
    no_extra_even_division = t[0:3:2, :]
    assert no_extra_even_division.layout.shape == Shape([2, 4])
    t.carrier.release()
    with pytest.raises(RuntimeError):
        t[0:1, :]


def test_broadcast_view():
    c = CPU(2)
    c[0], c[1] = 1.0, 2.0
    t = Tensor(c, 0, L([2, 1], [1, 2]))
    b = sw.broadcast_to(t, Shape([2, 3]))
    assert b.layout == L([2, 3], [1, 0]) and b.layout.cosize == 2 and b.carrier is c
    assert b[1, 2] == 2.0 and c.version == 2  # the two setup writes only
    with pytest.raises(TypeError):
        sw.broadcast_to(t, (2, 3))
    with pytest.raises(ValueError):
        sw.broadcast_to(t, Shape([3, 3]))
    with pytest.raises(ValueError):
        sw.broadcast_to(t, Shape([2, [1, 3]]))


# ----- representations ---------------------------------------------------------------------

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
