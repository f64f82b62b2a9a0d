"""docs/spec/tensor-and-carriers.md §1 Tensor: construction checks in order, the read-only
queries, lifetime, and element access by logical and hierarchical keys.

Also the Tensor as array users reach for it (issue 13, "Arrays behave as array users
expect"): `np.asarray` through `__array__` with NumPy 2's `copy=` semantics, `shape`/`ndim`,
`float()`/`int()`, a value-showing `str()`, JAX's `asarray`, and the hint for a carrier class
passed where an instance belongs."""
from __future__ import annotations

import numpy as np
import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Generic, Layout, Shape, Stride, Tensor

from filled_carriers import filled

D = sw.DType


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


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
    evictable = sw.Evictable(c, CPU(2))  # owns its tiers
    assert c.is_owned() and evictable.primary is c
    assert t[1] == 1.0
    with pytest.raises(RuntimeError):
        t[0] = 5.0
    assert not t.is_mutable()


def test_tensors_on_every_builtin_carrier():
    g = Tensor(Generic([1.0, 2.0, 3.0]), 0, L(3, 1))
    assert g.dtype() is D.Floating and g[2] == 3.0
    f = FileBacked(dtype=D.Int32)
    f._allocate(4)
    ft = Tensor(f, 1, L(3, 1))
    ft[2] = 7
    assert f[3] == 7 and ft.version == 1
    f.release()


F32, I32, BOOL = sw.DType.Float32, sw.DType.Int32, sw.DType.Bool


def layout(shape, stride):
    return sw.Layout(sw.Shape(shape), sw.Stride(stride))


def cpu_tensor(values, shape, stride, *, offset=0, dtype=F32, size=None):
    carrier = sw.CPU(len(values) if size is None else size, dtype=dtype)
    for i, v in enumerate(values):
        carrier[i] = v
    return sw.Tensor(carrier, offset, layout(shape, stride))


def generic_tensor(values, shape, stride):
    return sw.Tensor(sw.Generic(values, dtype=F32), 0, layout(shape, stride))


# --------------------------------------------------------------------------------------------
# np.asarray

LAYOUTS = [([6], [1], 0), ([2, 3], [1, 2], 0), ([2, 3], [3, 1], 0), ([2, [3, 4]], [1, [2, 6]], 0),
           ([2, 3], [1, 4], 0), ([3], [2], 1), ([2, 3], [1, 0], 0), ([], [], 5)]


@pytest.mark.parametrize("shape,stride,offset", LAYOUTS)
def test_asarray_is_the_zero_copy_dlpack_view(shape, stride, offset):
    t = cpu_tensor([float(i) for i in range(24)], shape, stride, offset=offset, size=24)
    a = np.asarray(t)
    expected = np.from_dlpack(t)
    assert a.shape == expected.shape == t.shape
    assert a.strides == expected.strides
    assert a.dtype == np.float32
    assert a.ctypes.data == expected.ctypes.data  # same memory, no copy
    assert np.shares_memory(a, expected)
    # writes are visible both ways
    t[0] = 42.0
    assert a.flat[0] == 42.0
    a.flat[0] = -1.0
    assert t[0] == -1.0


def test_asarray_copy_false_gives_the_view_and_int32_keeps_its_dtype():
    t = cpu_tensor([1, 2, 3, 4], [2, 2], [1, 2], dtype=I32)
    a = np.asarray(t, copy=False)
    assert a.dtype == np.int32 and a.tolist() == [[1, 3], [2, 4]]
    assert a.ctypes.data == t.carrier.pointer()


def test_asarray_copy_true_is_a_fresh_array():
    t = cpu_tensor([1.0, 2.0, 3.0], [3], [1])
    a = np.array(t, copy=True)
    assert a.tolist() == [1.0, 2.0, 3.0]
    a[0] = 9.0
    assert t[0] == 1.0
    assert not np.shares_memory(a, np.from_dlpack(t))


@pytest.mark.parametrize("shape,stride", [([6], [1]), ([2, 3], [1, 2]), ([2, [3, 2]], [1, [2, 6]]),
                                          ([2, 3], [3, 1]), ([2, 3], [1, 0])])
def test_asarray_copies_a_non_exporting_carrier_with_the_same_values(shape, stride):
    values = [float(i) for i in range(12)]
    reference = np.from_dlpack(cpu_tensor(values, shape, stride, size=12))
    g = generic_tensor(values, shape, stride)
    a = np.asarray(g)
    assert a.shape == g.shape == reference.shape
    assert a.dtype == np.float32
    assert a.tolist() == reference.tolist()


def test_asarray_copy_false_refuses_what_needs_a_copy():
    g = generic_tensor([1.0, 2.0], [2], [1])
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(g, copy=False)
    t = cpu_tensor([1.0, 2.0], [2], [1])
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(t, dtype=np.float64, copy=False)
    assert t.version == 2  # the two set-up writes only


def test_asarray_lets_a_dlpack_hook_failure_other_than_buffer_error_through():
    class Broken(sw.CPU):
        def dlpack_info(self):
            raise KeyError("hook")

    t = sw.Tensor(Broken(2), 0, layout([2], [1]))
    with pytest.raises(KeyError, match="hook"):
        np.asarray(t)

    class Refusing(sw.CPU):
        def dlpack_info(self):
            raise BufferError("not today")

    r = sw.Tensor(Refusing(2), 0, layout([2], [1]))
    assert np.asarray(r).tolist() == [0.0, 0.0]  # a refusal means "copy"
    with pytest.raises(ValueError, match="not today"):
        np.asarray(r, copy=False)


def test_asarray_with_a_dtype_converts():
    t = cpu_tensor([1.5, 2.5], [2], [1])
    a = np.asarray(t, dtype=np.float64)
    assert a.dtype == np.float64 and a.tolist() == [1.5, 2.5]
    assert np.asarray(t, dtype=np.float32).ctypes.data == t.carrier.pointer()


def test_asarray_of_other_dtypes_and_carriers():
    b = cpu_tensor([True, False, True], [3], [1], dtype=BOOL)
    a = np.asarray(b)  # Bool cannot be exported, so this is a copy
    assert a.dtype == np.bool_ and a.tolist() == [True, False, True]
    f = sw.FileBacked(dtype=F32)
    moved = sw.move(cpu_tensor([1.0, 2.0, 3.0, 4.0], [2, 2], [1, 2]), f)
    assert np.asarray(moved).tolist() == [[1.0, 3.0], [2.0, 4.0]]
    f.release()


def test_asarray_of_a_released_or_multi_subtensor_tensor_raises():
    t = cpu_tensor([1.0], [1], [1])
    t.carrier.release()
    with pytest.raises((RuntimeError, BufferError)):
        np.asarray(t)
    from strideweave.core.representation import PLANAR_FLOAT32_PAIR, Subtensor, tensor_from_subtensors

    m = tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [
        Subtensor(F32, sw.CPU(2), 0, layout([2], [1])), Subtensor(F32, sw.CPU(2), 0, layout([2], [1]))],
        [layout([2], [1])])
    with pytest.raises(NotImplementedError, match="multi-subtensor"):
        np.asarray(m)


# --------------------------------------------------------------------------------------------
# shape, ndim, float, int

def test_shape_and_ndim_are_the_leaf_modes():
    t = cpu_tensor([0.0] * 24, [2, [3, 4]], [1, [2, 6]])
    assert t.shape == (2, 3, 4) == t.layout.leaf_shape
    assert t.ndim == 3
    assert t.layout.shape == sw.Shape([2, [3, 4]])  # the hierarchy stays on the layout
    r0 = cpu_tensor([7.0], [], [])
    assert r0.shape == () and r0.ndim == 0
    view = t[1, :]  # a view drops the indexed mode
    assert view.shape == (3, 4) and view.ndim == 2


def test_float_and_int_of_one_element_tensors():
    assert float(cpu_tensor([2.5], [1], [1])) == 2.5
    assert int(cpu_tensor([2.5], [1], [1])) == 2
    assert int(cpu_tensor([0, 7], [1], [1], offset=1, dtype=I32)) == 7
    assert float(cpu_tensor([3.0], [], [])) == 3.0
    assert float(cpu_tensor([4.0], [1, [1, 1]], [1, [1, 1]])) == 4.0
    assert float(sw.sum(cpu_tensor([1.0, 2.0, 3.0], [3], [1]))) == 6.0


def test_float_and_int_refuse_several_elements():
    t = cpu_tensor([1.0, 2.0], [2], [1])
    with pytest.raises(TypeError, match="one-element"):
        float(t)
    with pytest.raises(TypeError, match="one-element"):
        int(t)
    t.carrier.release()
    with pytest.raises(TypeError):
        float(t)


def test_a_tensor_is_still_not_a_slot_value():
    # __float__ must not make a Tensor pass for a number where the contract wants one.
    one = cpu_tensor([1.0], [1], [1])
    c = sw.CPU(1)
    with pytest.raises(TypeError):
        c[0] = one
    with pytest.raises(TypeError):
        sw.CPU(1, dtype=I32)[0] = cpu_tensor([1], [1], [1], dtype=I32)


# --------------------------------------------------------------------------------------------
# str

def test_str_shows_values_like_numpy():
    t = cpu_tensor([float(i) for i in range(6)], [2, 3], [3, 1])
    assert str(t) == "[[0. 1. 2.]\n [3. 4. 5.]]"
    assert str(cpu_tensor([1, -20], [2], [1], dtype=I32)) == "[  1 -20]"
    assert str(cpu_tensor([True, False], [2], [1], dtype=BOOL)) == "[ True False]"
    assert str(cpu_tensor([5.0], [], [])) == "5."
    assert repr(t).startswith("<Tensor Float32 on CPU")  # repr is unchanged


@pytest.mark.parametrize("values,shape,stride", [
    ([0.5 * i for i in range(24)], [2, [3, 4]], [1, [2, 6]]),
    ([0.1, 1.0, -2.25, 100.0], [2, 2], [1, 2]),
    ([float(i % 50) for i in range(2400)], [20, 120], [120, 1]),
    ([float(i % 100) - 3.5 for i in range(1500)], [10, 15, 10], [1, 10, 150]),
])
def test_str_matches_numpys_str_of_the_same_values(values, shape, stride):
    t = cpu_tensor(values, shape, stride)
    assert str(t) == str(np.asarray(t))


def test_str_float32_uses_the_shortest_round_trip_text():
    t = cpu_tensor([0.1, 2.5], [2], [1])
    assert str(t) == "[0.1 2.5]"


def test_str_summarises_large_tensors_like_numpy():
    t = cpu_tensor([float(i) for i in range(2000)], [2000], [1])
    assert str(t) == "[   0.    1.    2. ... 1997. 1998. 1999.]"
    big = sw.Tensor(sw.CPU(40 * 50), 0, layout([40, 50], [50, 1]))
    lines = str(big).splitlines()
    assert len(lines) == 7 and lines[3].strip() == "..."
    assert "..." in lines[0]
    small = cpu_tensor([float(i) for i in range(1000)], [1000], [1])
    assert "..." not in str(small)  # 1000 elements is NumPy's threshold, not beyond it


def test_str_of_a_large_tensor_reads_only_the_shown_elements():
    reads = []

    class Counting(sw.Carrier):
        def size(self):
            return 10_000

        def dtype(self):
            return F32

        def get_value(self, i):
            reads.append(i)
            return float(i)

    t = sw.Tensor(Counting(), 0, layout([100, 100], [1, 100]))
    text = str(t)
    assert len(reads) == 36  # 6 x 6 edge elements of 10 000
    assert text.splitlines()[0] == "[[   0.  100.  200. ... 9700. 9800. 9900.]"


def test_str_of_released_or_non_cpu_tensors():
    g = generic_tensor([1.0, 2.0], [2], [1])
    assert str(g) == "[1. 2.]"
    t = cpu_tensor([1.0], [1], [1])
    t.carrier.release()
    assert str(t) == repr(t)


def _subtensors_with_a_class():
    from strideweave.core.representation import PLANAR_FLOAT32_PAIR, Subtensor, tensor_from_subtensors

    return tensor_from_subtensors(PLANAR_FLOAT32_PAIR, [
        Subtensor(F32, sw.CPU, 0, layout([2], [1])), Subtensor(F32, sw.CPU(2), 0, layout([2], [1]))],
        [layout([2], [1])])


@pytest.mark.parametrize("call", [
    lambda t: sw.move(t, sw.FileBacked),
    lambda t: sw.move_async(t, sw.CPU),
    lambda t: sw.Tensor(sw.CPU, 0, layout([1], [1])),
    lambda t: sw.Evictable(sw.CPU, sw.FileBacked()),
    lambda t: sw.TiledEvictable(sw.CPU(4), sw.FileBacked, [2], [2]),
    lambda t: _subtensors_with_a_class(),
])
def test_a_carrier_class_where_an_instance_belongs_gets_a_hint(call):
    t = cpu_tensor([1.0], [1], [1])
    with pytest.raises(TypeError, match=r"did you mean `(FileBacked|CPU)\(\)`\?"):
        call(t)
    assert not t.carrier.is_released() and t.version == 1


def test_a_non_carrier_gets_no_hint():
    t = cpu_tensor([1.0], [1], [1])
    with pytest.raises(TypeError) as info:
        sw.move(t, 42)
    assert "did you mean" not in str(info.value) and "Carrier" in str(info.value)


@pytest.mark.parametrize("shape,stride,offset", LAYOUTS)
def test_jax_asarray_gives_the_same_values(shape, stride, offset):
    jnp = pytest.importorskip("jax.numpy", reason="jax is not installed")
    t = cpu_tensor([float(i) for i in range(24)], shape, stride, offset=offset, size=24)
    j = jnp.asarray(t)
    assert j.shape == t.shape and j.dtype == jnp.float32
    assert np.asarray(j).tolist() == np.from_dlpack(t).tolist()
    g = jnp.asarray(generic_tensor([float(i) for i in range(24)], shape, stride))  # through a copy
    assert j.shape == g.shape
