"""docs/spec/extension-and-tiling.md §3 Storage callbacks: each callback gets the exact
instance, and the framework checks every result.

Definitions bind a class for the life of the process, so every test makes fresh classes."""
import pytest

import strideweave as sw

from defined_carriers import Log, defined_class

F32 = sw.DType.Float32
I32 = sw.DType.Int32


def test_callbacks_receive_the_exact_instance():
    log = Log()
    cls = defined_class(log=log)
    c = cls(3, dtype=F32)
    c[1] = 5.0
    assert c[1] == 5.0
    c.release()
    assert {name for name, *_ in log.calls} == {"supports_dtype", "allocate", "physical_size",
                                                  "read", "write", "release"}
    assert all(call[1] is c for call in log.calls)


@pytest.mark.parametrize("answer", [1, None, "yes", 0])
def test_supports_dtype_must_answer_bool(answer):
    cls = defined_class(supports_dtype=lambda c, d: answer)
    with pytest.raises(TypeError, match="supports_dtype"):
        cls(2, dtype=F32)


def test_supports_storage_dtype_uses_the_provider_even_after_release():
    log = Log()
    cls = defined_class(log=log, dtypes=(F32, I32))
    c = cls(2, dtype=F32)
    assert c.supports_storage_dtype(I32) is True
    assert c.supports_storage_dtype(sw.DType.Bool) is False
    c.release()
    assert c.supports_storage_dtype(I32) is True
    with pytest.raises(TypeError):
        c.supports_storage_dtype("Int32")


def test_supports_storage_dtype_rejects_a_non_bool_answer_later():
    answers = iter([True, "yes"])
    cls = defined_class(supports_dtype=lambda c, d: next(answers))
    c = cls(1, dtype=F32)
    with pytest.raises(TypeError, match="supports_dtype"):
        c.supports_storage_dtype(F32)


@pytest.mark.parametrize("size,error", [(2.0, TypeError), (True, TypeError), ("2", TypeError),
                                        (-1, ValueError)])
def test_physical_size_result_is_checked(size, error):
    state = {"size": 2}

    def allocate(c, n):
        c.cells = [0.0] * n

    cls = defined_class(allocate=allocate, physical_size=lambda c: state["size"])
    c = cls(2, dtype=F32)
    state["size"] = size
    with pytest.raises(error, match="physical_size"):
        c.size()
    # construction checks the size through the same callback
    with pytest.raises(error, match="physical_size"):
        cls(2, dtype=F32)


def test_physical_size_is_not_called_once_released():
    log = Log()
    cls = defined_class(log=log)
    c = cls(3, dtype=F32)
    c.release()
    log.calls.clear()
    assert c.size() == 0
    assert "physical_size" not in log.names()


def test_allocate_must_return_none_and_reach_the_size():
    def allocate_wrong(c, n):
        c.cells = [0.0] * (n + 1)

    def allocate_returns(c, n):
        c.cells = [0.0] * n
        return n

    with pytest.raises(ValueError, match="allocate"):
        defined_class(allocate=allocate_wrong)(2, dtype=F32)
    with pytest.raises(TypeError, match="allocate"):
        defined_class(allocate=allocate_returns)(2, dtype=F32)


def test_release_called_by_first_release_only():
    log = Log()
    cls = defined_class(log=log)
    c = cls(2, dtype=F32)
    assert c.release() is None
    assert c.release() is None
    assert log.names().count("release") == 1
    assert c.is_released() and c.size() == 0


def test_release_returning_a_value_leaves_the_carrier_live():
    calls = []

    def release(c):
        calls.append(c)
        return "done"

    cls = defined_class(release=release)
    c = cls(2, dtype=F32)
    c[0] = 4.0
    with pytest.raises(TypeError, match="release"):
        c.release()
    assert not c.is_released()
    assert c[0] == 4.0 and c.size() == 2


def test_release_exception_propagates_and_leaves_the_carrier_live():
    def release(c):
        raise OSError("device busy")

    c = defined_class(release=release)(2, dtype=F32)
    with pytest.raises(OSError, match="device busy"):
        c.release()
    assert not c.is_released() and c.size() == 2


def test_read_checks_run_before_the_callback():
    log = Log()
    c = defined_class(log=log)(3, dtype=F32)
    log.calls.clear()
    with pytest.raises(TypeError):
        c["1"]
    with pytest.raises(TypeError):
        c[1.0]
    with pytest.raises(IndexError):
        c[3]
    with pytest.raises(IndexError):
        c[-1]
    assert "read" not in log.names()
    c.release()
    with pytest.raises(RuntimeError, match="released"):
        c[0]
    with pytest.raises(RuntimeError, match="released"):
        c["x"]  # released is checked first
    assert "read" not in log.names()


def test_write_checks_and_version():
    log = Log()
    cls = defined_class(log=log)
    c = cls(3, dtype=F32)
    assert c.version == 0
    c[2] = 7.0
    assert c.version == 1 and c.cells == [0.0, 0.0, 7.0] and c[2] == 7.0
    log.calls.clear()
    for key, error in (("2", TypeError), (3, IndexError)):
        with pytest.raises(error):
            c[key] = 1.0
    frozen = cls(2, dtype=F32, mutable=False)
    with pytest.raises(RuntimeError, match="not mutable"):
        frozen[0] = 1.0
    assert "write" not in log.names()
    assert c.version == 1 and frozen.version == 0
    c.release()
    with pytest.raises(RuntimeError, match="released"):
        c[0] = 1.0


def test_write_returning_a_value_is_a_type_error_without_version():
    def write(c, i, v):
        return v

    c = defined_class(write=write)(2, dtype=F32)
    with pytest.raises(TypeError, match="write"):
        c[0] = 1.0
    assert c.version == 0


def test_write_exception_propagates_without_version():
    def write(c, i, v):
        raise ValueError("cannot store that")

    c = defined_class(write=write)(2, dtype=F32)
    with pytest.raises(ValueError, match="cannot store"):
        c[0] = "x"
    assert c.version == 0 and c.cells == [0.0, 0.0]
