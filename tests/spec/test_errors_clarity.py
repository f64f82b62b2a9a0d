"""Error clarity (issue 11, items 9-11): each failure is reported with the exception type and
errno a user can act on, and one kind of failure is reported one way.

- ENOSPC while writing single elements into a FileBacked carries errno 28, as the bulk path
  does (a tiny tmpfs is the full disk; mounting it needs root).
- An index whose `__index__` (or a value whose `__float__`) releases the carrier is reported
  as "released", not as an out-of-range index of the now-empty carrier or a silent write.
- A size too large to represent is an OverflowError naming the argument and the size, from
  every constructor and factory of every built-in carrier.
"""
import errno
import gc
import numbers
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

import strideweave as sw
from blockdev_fixture import block_device_path  # noqa: F401 (a fixture, used by name)

F32 = sw.DType.Float32


def flat(n):
    return sw.Layout(sw.Shape([n]), sw.Stride([1]))


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


# ----- item 10: an index whose __index__ releases the carrier --------------------------------

class Releasing:
    """An index that releases `carrier` while it is being converted."""

    def __init__(self, carrier, value=0):
        self.carrier = carrier
        self.value = value

    def __index__(self):
        self.carrier.release()
        return self.value


def carriers_with_two_slots():
    return [sw.CPU(2), sw.FileBacked().new_like([1.0, 2.0]), sw.Generic([1.0, 2.0])]


@pytest.mark.parametrize("carrier", carriers_with_two_slots(), ids=["CPU", "FileBacked", "Generic"])
def test_index_that_releases_the_carrier_reads_as_released(carrier):
    with pytest.raises(RuntimeError, match="released"):
        carrier[Releasing(carrier)]
    assert carrier.is_released()


@pytest.mark.parametrize("carrier", carriers_with_two_slots(), ids=["CPU", "FileBacked", "Generic"])
def test_index_that_releases_the_carrier_writes_as_released(carrier):
    version = carrier.version
    with pytest.raises(RuntimeError, match="released"):
        carrier[Releasing(carrier)] = 5.0
    assert carrier.is_released() and carrier.version == version


class ReleasingValue:
    """A real number whose conversion releases `carrier` (the value is converted after the
    index and writability checks, so the carrier was live when the write started)."""

    def __init__(self, carrier):
        self.carrier = carrier

    def __float__(self):
        self.carrier.release()
        return 7.0


numbers.Real.register(ReleasingValue)


def float32_carriers():
    return [lambda: sw.CPU(2), lambda: sw.FileBacked(dtype=F32).new_like([1.0, 2.0]),
            lambda: sw.Generic([1.0, 2.0], dtype=F32)]


@pytest.mark.parametrize("make", float32_carriers(), ids=["CPU", "FileBacked", "Generic"])
def test_a_value_that_releases_the_carrier_is_released_and_uncounted(make):
    carrier = make()
    with pytest.raises(RuntimeError, match="released"):
        carrier[1] = ReleasingValue(carrier)
    assert carrier.is_released() and carrier.version == 0


@pytest.mark.parametrize("make", float32_carriers(), ids=["CPU", "FileBacked", "Generic"])
def test_a_tensor_write_whose_value_releases_the_carrier_is_released(make):
    carrier = make()
    t = sw.Tensor(carrier, 0, flat(2))
    with pytest.raises(RuntimeError, match="released"):
        t[1] = ReleasingValue(carrier)
    assert carrier.is_released() and carrier.version == 0


@pytest.mark.parametrize("make", float32_carriers(), ids=["CPU", "FileBacked", "Generic"])
def test_accesses_racing_a_release_fail_only_as_released(make):
    # Several threads read and write (through the carrier and a Tensor) while one releases:
    # each access succeeds or raises RuntimeError "released", never an index error.
    for _ in range(20):
        carrier = make()
        t = sw.Tensor(carrier, 0, flat(2))
        start = threading.Barrier(5)
        unexpected = []

        def access(k):
            start.wait()
            for n in range(300):
                try:
                    if n % 4 == 0:
                        carrier[k % 2] = float(n)
                    elif n % 4 == 1:
                        carrier[k % 2]
                    elif n % 4 == 2:
                        t[k % 2] = float(n)
                    else:
                        t[k % 2]
                except RuntimeError as e:
                    if "released" not in str(e):
                        unexpected.append(e)
                except Exception as e:  # noqa: BLE001 - the failure this test looks for
                    unexpected.append(e)

        def release():
            start.wait()
            carrier.release()

        threads = [threading.Thread(target=access, args=(k,)) for k in range(4)]
        threads.append(threading.Thread(target=release))
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not unexpected, unexpected[:3]
        assert carrier.is_released()


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
