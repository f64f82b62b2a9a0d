"""tensor-and-carriers.md §2 and §3: the Carrier base class and the built-in carriers."""
import ctypes
import gc
import os
import pathlib

import pytest

import strideweave as sw
from strideweave import CPU, Carrier, FileBacked, Generic
from strideweave.carriers import file_backed

D = sw.DType


class ListCarrier(Carrier):
    """A pure-Python carrier implementing only the required hooks plus set_value."""

    def __init__(self, values, mutable=True):
        super().__init__()
        self.values = list(values)
        self.mutable = mutable

    def size(self):
        return 0 if self.is_released() else len(self.values)

    def dtype(self):
        return D.Float32

    def get_value(self, i):
        return self.values[i]

    def set_value(self, i, v):
        self.values[i] = float(v)

    def _is_mutable(self):
        return self.mutable

    def new_like(self, values, *, mutable=True, dtype=None):
        return ListCarrier(values, mutable)

    def allocate_like(self, size, *, mutable=True, dtype=None, empty=False):
        return ListCarrier([0.0] * size, mutable)

    def _release(self):
        self.values = []


class Bare(Carrier):
    pass


def test_import_surface():
    import strideweave.carriers as c
    for name in ["Carrier", "Generic", "CPU", "FileBacked"]:
        assert getattr(sw, name) is getattr(c, name)


def test_missing_hooks_raise_not_implemented():
    b = Bare()
    for call in (b.size, b.dtype, lambda: b.get_value(0), lambda: b.new_like([]), lambda: b.allocate_like(1)):
        with pytest.raises(NotImplementedError):
            call()


def test_default_hooks():
    b = Bare()
    assert repr(b) == "<Bare size=? dtype=? version=0>"
    with pytest.raises(RuntimeError, match="not mutable"):
        b.set_value(0, 1)
    assert b._is_mutable() is False
    assert b._release() is None
    with pytest.raises(BufferError, match="DLPack is not supported for Bare carrier"):
        b.dlpack_info()


def test_python_subclass_framework_members():
    c = ListCarrier([1.0, 2.0, 3.0])
    assert c.version == 0 and c.is_mutable() and not c.is_owned() and not c.is_released()
    c[1] = 5
    assert c[1] == 5.0 and c.version == 1
    with pytest.raises(TypeError):
        c["a"]
    with pytest.raises(IndexError):
        c[3]
    with pytest.raises(IndexError):
        c[-1]
    with pytest.raises(IndexError):
        c[3] = 1.0
    assert c.version == 1
    assert c.supports_storage_dtype(D.Float32) and not c.supports_storage_dtype(D.Int32)
    with pytest.raises(TypeError):
        c.supports_storage_dtype("Float32")


def test_immutable_subclass_refuses_writes_without_version_change():
    c = ListCarrier([1.0], mutable=False)
    assert not c.is_mutable()
    with pytest.raises(RuntimeError, match="not mutable"):
        c[0] = 2.0
    assert c.version == 0 and c[0] == 1.0


def test_release_is_idempotent_and_blocks_access():
    c = ListCarrier([1.0, 2.0])
    assert c.release() is None
    assert c.release() is None
    assert c.is_released() and not c.is_mutable()
    with pytest.raises(RuntimeError, match="released"):
        c[0]
    with pytest.raises(RuntimeError, match="released"):
        c[0] = 1.0
    assert c.version == 0


def test_release_checks_come_before_index_checks():
    c = CPU(2)
    c.release()
    with pytest.raises(RuntimeError, match="released"):
        c["x"]


def test_ownership_blocks_public_mutation_but_not_reads():
    owner, c = ListCarrier([0.0]), ListCarrier([1.0])
    c._sw_owner = owner
    assert c.is_owned() and not c.is_mutable()
    assert c[0] == 1.0
    with pytest.raises(RuntimeError):
        c[0] = 3.0
    with pytest.raises(RuntimeError):
        c.release()
    with pytest.raises(RuntimeError):
        c._increment_version()
    c._sw_write_as_owner(owner, 0, 4.0)
    assert c[0] == 4.0 and c.version == 1
    c._sw_owner = None
    c._increment_version()
    assert c.version == 2


def test_definition_free_classes_reject_definition_arguments():
    with pytest.raises(TypeError):
        Bare(4)
    with pytest.raises(TypeError):
        Bare(dtype=D.Float32)
    with pytest.raises(TypeError):
        Bare(mutable=False)


# ----- CPU -------------------------------------------------------------------------------

def test_cpu_construction_rules():
    c = CPU(4)
    assert c.size() == 4 and c.dtype() is D.Float32 and c.version == 0 and c.is_mutable()
    assert [c[i] for i in range(4)] == [0.0] * 4
    assert c.pointer() > 0 and c.pointer() % 64 == 0
    with pytest.raises(TypeError):
        CPU(2.0)
    with pytest.raises(TypeError):
        CPU(True)
    with pytest.raises(TypeError):
        CPU(2, pointer="1")
    with pytest.raises(ValueError):
        CPU(-1)
    with pytest.raises(ValueError):
        CPU(2, pointer=0)
    with pytest.raises(TypeError):
        CPU(2, dtype="Float32")
    with pytest.raises(ValueError):
        CPU(2, dtype=D.Floating)
    with pytest.raises(ValueError, match="planes"):
        CPU(2, dtype=D.MXFP4)
    assert CPU(0).size() == 0


def test_cpu_write_rules():
    f, i, b = CPU(1), CPU(1, dtype=D.Int32), CPU(1, dtype=D.Bool)
    f[0] = 0.1
    assert f[0] == ctypes.c_float(0.1).value and f.version == 1
    f[0] = 3
    assert f[0] == 3.0
    for bad in ("x", None, True, 1j):
        with pytest.raises(TypeError):
            f[0] = bad
    i[0] = -(2**31)
    assert i[0] == -(2**31)
    with pytest.raises(OverflowError):
        i[0] = 2**31
    with pytest.raises(TypeError):
        i[0] = 1.0
    with pytest.raises(TypeError):
        i[0] = False
    b[0] = True
    assert b[0] is True
    with pytest.raises(TypeError):
        b[0] = 1
    assert (f.version, i.version, b.version) == (2, 1, 1)


def test_cpu_builtin_set_value_bumps_version_once():
    c = CPU(2)
    c.set_value(0, 1.5)
    c[1] = 2.5
    assert c.version == 2
    assert c.get_value(0) == 1.5


def test_cpu_immutable_and_release():
    c = CPU(2, mutable=False)
    with pytest.raises(RuntimeError, match="not mutable"):
        c[0] = 1.0
    c.release()
    assert c.size() == 0 and c.pointer() == 0
    with pytest.raises(RuntimeError, match="released"):
        c.get_value(0)
    # dtype, supports_storage_dtype and the factories still work after release
    assert c.dtype() is D.Float32 and c.supports_storage_dtype(D.Int32)
    fresh = c.new_like([1.0, None])
    assert type(fresh) is CPU and [fresh[0], fresh[1]] == [1.0, 0.0] and fresh.version == 0
    assert c.allocate_like(3).size() == 3


def test_cpu_wrapped_pointer_is_not_initialised_or_freed():
    backing = (ctypes.c_float * 4)(1, 2, 3, 4)
    c = CPU(4, pointer=ctypes.addressof(backing))
    assert c[2] == 3.0
    c[2] = 9.0
    assert backing[2] == 9.0
    c.release()
    assert backing[3] == 4.0


def test_cpu_empty_skips_zeroing_but_allocates():
    c = CPU(8, empty=True)
    assert c.size() == 8


def test_cpu_factories():
    c = CPU(2, dtype=D.Int32)
    n = c.new_like([1, 2, 3], mutable=False)
    assert type(n) is CPU and n.size() == 3 and n.dtype() is D.Int32 and not n.is_mutable()
    assert c.new_like([True], dtype=D.Bool)[0] is True
    with pytest.raises(TypeError):
        c.new_like(5)
    with pytest.raises(TypeError):
        c.new_like([1.5])
    a = c.allocate_like(4, dtype=D.Float32)
    assert a.dtype() is D.Float32 and [a[k] for k in range(4)] == [0.0] * 4
    with pytest.raises(TypeError):
        c.allocate_like(2.0)
    with pytest.raises(ValueError):
        c.allocate_like(-1)
    with pytest.raises(TypeError):
        c.allocate_like(2, dtype=int)
    with pytest.raises(ValueError):
        c.allocate_like(2, dtype=D.Any)


def test_cpu_subclass_factories_keep_the_exact_class():
    class MyCPU(CPU):
        pass

    m = MyCPU(2)
    assert type(m.new_like([1.0])) is MyCPU and type(m.allocate_like(1)) is MyCPU


def test_cpu_dlpack_info():
    c = CPU(2)
    assert c.dlpack_info() == {"pointer": c.pointer(), "device_type": 1, "device_id": 0}


# ----- Generic -----------------------------------------------------------------------------

def test_generic_stores_objects_and_copies_values():
    src = [1, "x", None]
    g = Generic(src, dtype=D.Any)
    src[0] = 99
    assert g[0] == 1 and g[1] == "x" and g.dtype() is D.Any
    g[2] = object
    assert g[2] is object and g.version == 1
    assert Generic([1.5]).dtype() is D.Floating
    with pytest.raises(TypeError):
        Generic(5)
    with pytest.raises(ValueError):
        Generic([], dtype=D.Float64)


def test_generic_typed_write_rules():
    g = Generic([0.0], dtype=D.Float32)
    g[0] = 0.1
    assert g[0] == ctypes.c_float(0.1).value
    with pytest.raises(TypeError):
        g[0] = "s"
    i = Generic([0], dtype=D.Int32)
    with pytest.raises(OverflowError):
        i[0] = 2**40
    with pytest.raises(TypeError):
        Generic([1.5], dtype=D.Int32)
    assert i.version == 0


def test_generic_release_and_factories():
    g = Generic([1.0, 2.0])
    g.release()
    assert g.size() == 0
    n = g.new_like([3.0])
    assert type(n) is Generic and n[0] == 3.0
    assert g.allocate_like(2, dtype=D.Float32)[1] == 0.0


# ----- FileBacked --------------------------------------------------------------------------

def test_filebacked_starts_empty_in_hidden_directory():
    f = FileBacked()
    assert f.size() == 0 and f.dtype() is D.Floating
    assert isinstance(f.path, pathlib.Path) and f.path.exists()
    assert f.path.parent.name.startswith(".strideweave-filebacked-")
    f._allocate(3)
    assert f.size() == 3 and f.version == 0 and [f[i] for i in range(3)] == [0.0] * 3
    f[1] = 0.1
    assert f[1] == 0.1  # Floating is stored as float64
    assert f.version == 1
    f.release()


def test_filebacked_dtypes():
    f = FileBacked(dtype=D.Float32)
    f._allocate(1)
    f[0] = 0.1
    assert f[0] == ctypes.c_float(0.1).value
    i = FileBacked(dtype=D.Int32)
    i._allocate(1)
    with pytest.raises(TypeError):
        i[0] = 0.5
    with pytest.raises(ValueError):
        FileBacked(dtype=D.Bool)
    f.release(), i.release()


def test_filebacked_names():
    with pytest.raises(ValueError, match="bare file name"):
        FileBacked("a/b")
    f = FileBacked("my-carrier.bin")
    assert f.path.name == "my-carrier.bin"
    with pytest.raises(FileExistsError):
        FileBacked("my-carrier.bin")
    f.release()
    assert not f.path.exists()
    again = FileBacked("my-carrier.bin")
    again.release()


def test_filebacked_release_and_gc_delete_the_file():
    f = FileBacked()
    path = f.path
    f.release()
    f.release()
    assert not path.exists() and f.size() == 0
    g = FileBacked()
    path = g.path
    del g
    gc.collect()
    assert not path.exists()


def test_filebacked_failed_construction_leaves_no_file():
    directory = file_backed.filebacked_directory()
    before = set(os.listdir(directory))
    with pytest.raises(ValueError):
        FileBacked(dtype=D.Bool)
    with pytest.raises(TypeError):
        FileBacked(3)
    assert set(os.listdir(directory)) == before


def test_filebacked_factories():
    f = FileBacked(dtype=D.Float32)
    n = f.new_like([1.0, None, 3.0])
    assert type(n) is FileBacked and n.size() == 3 and [n[i] for i in range(3)] == [1.0, 0.0, 3.0]
    a = f.allocate_like(4, mutable=False)
    assert a.size() == 4 and not a.is_mutable()
    f.release()
    assert f.new_like([2.0])[0] == 2.0
    for c in (n, a):
        c.release()


def test_filebacked_directory_removed_at_exit(tmp_path):
    import subprocess
    import sys
    code = ("import strideweave as sw; f = sw.FileBacked(); f._allocate(2); "
            "print(f.path.parent)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert not pathlib.Path(out.stdout.strip()).exists()


@pytest.mark.parametrize("make", [lambda: CPU(1), lambda: Generic([0.0], dtype=D.Float32),
                                  lambda: _grown(FileBacked(dtype=D.Float32))])
def test_float32_write_rules_agree_across_carriers(make):
    import decimal
    import fractions

    import numpy as np
    c = make()
    c[0] = np.float32(1.5)
    assert c[0] == 1.5
    c[0] = fractions.Fraction(1, 4)
    assert c[0] == 0.25
    c[0] = 1e300  # a finite double beyond binary32 rounds to infinity
    assert c[0] == float("inf")
    version = c.version
    for bad in (np.bool_(True), decimal.Decimal("1.5"), True, "1", 1j, None):
        with pytest.raises(TypeError):
            c[0] = bad
    with pytest.raises(OverflowError):
        c[0] = 10**400
    assert c.version == version


def _grown(f):
    f._allocate(1)
    return f


def test_generic_allocate_like_zero_fills_every_dtype():
    assert Generic([1.0]).allocate_like(2)[1] == 0.0
    assert Generic([1], dtype=D.Any).allocate_like(1)[0] == 0
    assert Generic([True], dtype=D.Bool).allocate_like(1)[0] is False


def test_filebacked_directory_name_is_hex():
    import re
    name = file_backed.filebacked_directory().name
    assert re.fullmatch(r"\.strideweave-filebacked-[0-9a-f]+", name), name
