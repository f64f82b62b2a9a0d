"""docs/spec/tensor-and-carriers.md §2 Carrier base class: required and optional
hooks, the framework-owned members, ownership and release.

Beyond the section's text: carriers as context managers (issue 13), and an index whose
`__index__` (or a value whose `__float__`) releases the carrier, which is reported as
"released", not as an out-of-range index of the now-empty carrier or a silent write (issue 11,
item 10)."""
from __future__ import annotations

import numbers
import threading

import pytest

import strideweave as sw
from strideweave import CPU, Carrier

from list_carrier import ListCarrier

D = sw.DType


class Bare(Carrier):
    pass


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


# --------------------------------------------------------------------------------------------
# carriers as context managers

def test_with_releases_the_carrier_on_exit():
    with sw.CPU(4) as c:
        assert isinstance(c, sw.CPU) and not c.is_released()
        c[0] = 1.0
    assert c.is_released()
    with pytest.raises(ZeroDivisionError):
        with sw.FileBacked() as f:
            path = f.path
            1 / 0
    assert f.is_released() and not path.exists()
    with sw.Generic([1, 2]) as g:
        pass
    assert g.is_released()


def test_with_on_an_owned_carrier_raises_and_releases_nothing():
    primary, secondary = sw.CPU(2), sw.CPU(2)
    ev = sw.Evictable(primary, secondary)
    with pytest.raises(RuntimeError, match="owned"):
        with primary:
            pass
    assert not primary.is_released()
    with ev:
        pass
    assert ev.is_released() and primary.is_released()


def test_exit_annotation_and_return_value():
    import inspect
    import typing

    c = sw.CPU(1)
    assert c.__enter__() is c
    assert c.__exit__(None, None, None) is None  # never swallows an exception
    hints = typing.get_type_hints(sw.Carrier.__exit__)
    assert hints["return"] is type(None)
    assert list(inspect.signature(sw.Carrier.__exit__).parameters) == ["self", "exc_type", "exc", "tb"]


F32 = sw.DType.Float32


def flat(n):
    return sw.Layout(sw.Shape([n]), sw.Stride([1]))


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
    """A real number whose conversion tries to release `carrier` (the value is converted after
    the index and writability checks, in the write's store)."""

    def __init__(self, carrier):
        self.carrier = carrier

    def __float__(self):
        self.carrier.release()
        return 7.0


numbers.Real.register(ReleasingValue)


def float32_carriers():
    return [lambda: sw.CPU(2), lambda: sw.FileBacked(dtype=F32).new_like([1.0, 2.0]),
            lambda: sw.Generic([1.0, 2.0], dtype=F32)]


# The value's conversion is part of the write's store, which runs in a write opened in the
# carrier's state: a release from it is refused, so the write fails and nothing changes
# (tensor-and-carriers.md §2, "A write is one transition").
IN_PROGRESS = "cannot release {} carrier: a write to it is in progress"


@pytest.mark.parametrize("make", float32_carriers(), ids=["CPU", "FileBacked", "Generic"])
def test_a_value_that_releases_the_carrier_is_refused_and_uncounted(make):
    carrier = make()
    before = carrier[1]
    with pytest.raises(RuntimeError, match=IN_PROGRESS.format(type(carrier).__name__)):
        carrier[1] = ReleasingValue(carrier)
    assert not carrier.is_released() and carrier.version == 0 and carrier[1] == before
    carrier.release()  # and once the write is over, the release goes ahead
    assert carrier.is_released()


@pytest.mark.parametrize("make", float32_carriers(), ids=["CPU", "FileBacked", "Generic"])
def test_a_tensor_write_whose_value_releases_the_carrier_is_refused(make):
    carrier = make()
    t = sw.Tensor(carrier, 0, flat(2))
    before = t[1]
    with pytest.raises(RuntimeError, match=IN_PROGRESS.format(type(carrier).__name__)):
        t[1] = ReleasingValue(carrier)
    assert not carrier.is_released() and carrier.version == 0 and t[1] == before


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
