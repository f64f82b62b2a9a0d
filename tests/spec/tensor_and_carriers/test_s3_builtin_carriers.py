"""docs/spec/tensor-and-carriers.md §3 Built-in carriers: CPU, Generic and FileBacked
(construction, write rules, release, factories, DLPack info, the hidden per-process directory).

Beyond the section's text:
- FileBacked takes an `os.PathLike` bare name (issue 13);
- ENOSPC while writing single elements into a FileBacked carries errno 28, as the bulk path
  does (a tiny tmpfs is the full disk; mounting it needs root; issue 11, item 9);
- a size too large to represent is an OverflowError naming the argument and the size, from
  every constructor and factory of every built-in carrier and from BlockDevice.allocate
  (issue 11, item 11)."""
from __future__ import annotations

import ctypes
import errno
import gc
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Generic
from move_sources import filebacked_directory

from blockdev_fixture import block_device_path  # noqa: F401 (a fixture, used by name)

D = sw.DType


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
    directory = filebacked_directory()
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
    name = filebacked_directory().name
    assert re.fullmatch(r"\.strideweave-filebacked-[0-9a-f]+", name), name


def test_filebacked_takes_a_pathlike_bare_name():
    f = sw.FileBacked(pathlib.PurePath("pathlike-carrier.bin"))
    assert f.path.name == "pathlike-carrier.bin"
    with pytest.raises(FileExistsError):
        sw.FileBacked(pathlib.Path("pathlike-carrier.bin"))
    f.release()
    with pytest.raises(ValueError, match="bare file name"):
        sw.FileBacked(pathlib.Path("sub/dir.bin"))

    class BytesPath:
        def __fspath__(self):
            return b"x.bin"

    import os
    os.PathLike.register(BytesPath)
    with pytest.raises(TypeError, match="filename"):
        sw.FileBacked(BytesPath())
    with pytest.raises(TypeError, match="filename"):
        sw.FileBacked(3)


# ----- item 9: ENOSPC on the element-write path ---------------------------------------------

@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs (root only), unmounted afterwards even when the test fails."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    mountpoint = tmp_path / "tiny"
    mountpoint.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mountpoint)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


# The FileBacked directory is chosen once per process, so each probe runs in a fresh
# interpreter whose FileBacked parent is the tiny tmpfs.
_ENOSPC_PROBE = textwrap.dedent("""
    import sys
    import strideweave as sw
    path = sys.argv[1]
    fb = sw.FileBacked(dtype=sw.DType.Float32).allocate_like(1 << 20)  # sparse: 4 MiB on 64 KiB
    t = sw.Tensor(fb, 0, sw.Layout(sw.Shape([1 << 20]), sw.Stride([1])))
    try:
        for i in range(0, 1 << 20, 1024):  # one slot per 4 KiB page until the disk is full
            if path == "carrier":
                fb[i] = 1.0
            else:
                t[i] = 1.0
    except OSError as e:
        print(type(e).__name__, e.errno)
    else:
        print("no error")
""")


@pytest.mark.parametrize("path", ["carrier", "tensor"])
def test_enospc_on_element_writes_carries_errno_28(tiny_tmpfs, path):
    env = dict(os.environ, STRIDEWEAVE_FILEBACKED_PARENT=str(tiny_tmpfs))
    done = subprocess.run([sys.executable, "-c", _ENOSPC_PROBE, path], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["OSError", str(errno.ENOSPC)]


# ----- item 11: sizes too large to represent ------------------------------------------------
# The rule (README, "Sizes"): a size whose storage would exceed 2**63-1 bytes (the largest
# object or file offset there is) is an OverflowError naming the argument and the size.

LIMIT_BYTES = 2**63 - 1
SLOT_BYTES = {sw.DType.Float32: 4, sw.DType.Int32: 4, sw.DType.Bool: 1, sw.DType.Floating: 8}


def too_large(slot_bytes):
    """Sizes just past the limit, at the limits of the integer types, and far beyond."""
    sizes = [LIMIT_BYTES // slot_bytes + 1, 2**63 - 1, 2**63, 2**64, 10**30]
    return [n for n in sizes if n * slot_bytes > LIMIT_BYTES]


def assert_names_size(info, size):
    message = str(info.value)
    assert "size" in message and str(size) in message, message


@pytest.mark.parametrize("dtype", [sw.DType.Float32, sw.DType.Int32, sw.DType.Bool])
def test_cpu_constructor_and_factory_overflow(dtype):
    for size in too_large(SLOT_BYTES[dtype]):
        with pytest.raises(OverflowError) as info:
            sw.CPU(size, dtype=dtype)
        assert_names_size(info, size)
        with pytest.raises(OverflowError) as info:
            sw.CPU(1, dtype=dtype).allocate_like(size)
        assert_names_size(info, size)


def test_cpu_wrapping_a_pointer_overflow():
    owner = sw.CPU(4)
    for size in too_large(4):
        with pytest.raises(OverflowError) as info:
            sw.CPU(size, owner.pointer())
        assert_names_size(info, size)


def test_generic_factory_overflow():
    for size in too_large(8):  # one object pointer per slot
        with pytest.raises(OverflowError) as info:
            sw.Generic([1.0]).allocate_like(size)
        assert_names_size(info, size)


@pytest.mark.parametrize("dtype", [sw.DType.Floating, sw.DType.Float32, sw.DType.Int32])
def test_filebacked_factory_overflow_leaves_no_file(dtype):
    proto = sw.FileBacked(dtype=dtype)
    directory = proto.path.parent
    before = sorted(os.listdir(directory))
    for size in too_large(SLOT_BYTES[dtype]):
        with pytest.raises(OverflowError) as info:
            proto.allocate_like(size)
        assert_names_size(info, size)
    assert sorted(os.listdir(directory)) == before


def test_block_device_allocate_overflow(block_device_path):
    device = sw.BlockDevice(block_device_path)
    try:
        for size in too_large(4):
            with pytest.raises(OverflowError) as info:
                device.allocate(size)
            assert_names_size(info, size)
        # Representable but larger than the device: "no room" stays MemoryError (the spec's row).
        with pytest.raises(MemoryError):
            device.allocate(LIMIT_BYTES // 4)
    finally:
        gc.collect()
        device.close()


def test_the_four_reported_cases_are_one_type():
    cases = [(lambda: sw.CPU(2**63 - 1), 2**63 - 1), (lambda: sw.CPU(2**64), 2**64),
             (lambda: sw.Generic([]).allocate_like(2**63 - 1), 2**63 - 1),
             (lambda: sw.FileBacked().allocate_like(2**62), 2**62)]
    for case, size in cases:
        with pytest.raises(OverflowError) as info:
            case()
        assert_names_size(info, size)


def test_sizes_within_the_limit_are_not_overflow():
    # A representable size is allocated, or refused by the system as MemoryError.
    assert sw.CPU(3).size() == 3
    assert sw.Generic([]).allocate_like(3).size() == 3
    assert sw.FileBacked().allocate_like(3).size() == 3
    with pytest.raises(MemoryError, match="cannot allocate"):
        sw.CPU(LIMIT_BYTES // 4)  # representable, never available
