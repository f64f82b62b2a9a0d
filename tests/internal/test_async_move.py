"""The native initiation of `move_async` (the move entry's `move_async_builtin` route, issue 10) is taken
exactly for bulk moves between exact built-in carriers over the default routes, reaches the
Python request's outcome, and steps aside, having changed nothing, whenever the Python
request must decide.

Which path ran is observed by replacing the Python request (`_initiate` in
`strideweave.carriers.move`) with one that records the call.
"""
import os

import numpy as np
import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor
from strideweave.carriers import move as move_module
from strideweave.carriers.move_handle import INLINE_SLOTS

F32 = sw.DType.Float32
N = INLINE_SLOTS + 5  # the smallest moves that run on the engine
PAIRS = [(CPU, CPU), (CPU, FileBacked), (FileBacked, CPU)]
PAIR_IDS = ["cpu-cpu", "cpu-file", "file-cpu"]


def flat(n):
    return Layout(Shape([n]), Stride([1]))


def source(cls, values):
    c = CPU(len(values))
    np.from_dlpack(Tensor(c, 0, flat(len(values))))[:] = values
    t = Tensor(c, 0, flat(len(values)))
    if cls is CPU:
        return t
    with sw.no_grad():  # a leaf, like the CPU source
        return sw.move(t, FileBacked(dtype=F32))


def destination(cls, n=N):
    return CPU(n, empty=True) if cls is CPU else FileBacked(dtype=F32)


def values_of(t):
    if type(t.carrier) is FileBacked:
        return np.array(t.tolist(), dtype=np.float32)
    return np.from_dlpack(t).copy()


@pytest.fixture
def python_requests(monkeypatch):
    """The list of moves that went through the Python request."""
    calls = []
    real = move_module._initiate
    monkeypatch.setattr(move_module, "_initiate", lambda t, d, **kw: calls.append((t, d)) or real(t, d, **kw))
    for s, d in PAIRS:  # the first move of a pair resolves its route
        sw.move_async(source(s, np.zeros(N, dtype=np.float32)), destination(d)).wait()
    calls.clear()
    return calls


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no-grad"])
@pytest.mark.parametrize("source_cls, destination_cls", PAIRS, ids=PAIR_IDS)
def test_a_bulk_built_in_move_initiates_natively_with_the_same_outcome(python_requests, source_cls,
                                                                       destination_cls, grad):
    values = np.arange(N, dtype=np.float32)
    t = source(source_cls, values)
    dest = destination(destination_cls)
    saved = sw.is_grad_enabled()
    sw.set_grad_enabled(grad)
    try:
        handle = sw.move_async(t, dest)
    finally:
        sw.set_grad_enabled(saved)
    assert python_requests == []
    assert type(handle) is sw.AwaitMove and handle.bytes_total == 4 * N
    out = handle.wait()
    assert handle.wait() is out and handle.bytes_done == 4 * N
    assert out.carrier is dest and out.offset == 0 and out.layout == t.layout and out.dtype() is F32
    assert t.carrier.is_released() and dest.version == 0 and dest.size() == N
    assert np.array_equal(values_of(out), values)
    assert (out.autograd_ctx is not None) == grad
    if grad:
        assert type(out.autograd_ctx) is move_module._lookup_route(source_cls, destination_cls).operation_class
        cotangent = Tensor(CPU(N), 0, flat(N))
        np.from_dlpack(cotangent)[:] = 1.0
        out.backward(cotangent)
        assert type(t.grad.carrier) is source_cls and np.array_equal(values_of(t.grad), np.ones(N, np.float32))
    assert unclaimed(dest)


def test_an_offset_gapped_layout_moves_natively(python_requests):
    c = CPU(3 * N + 10)
    np.from_dlpack(Tensor(c, 0, flat(3 * N + 10)))[:] = np.arange(3 * N + 10, dtype=np.float32)
    t = Tensor(c, 7, Layout(Shape([N]), Stride([3])))
    out = sw.move_async(t, CPU(t.layout.cosize)).wait()
    assert python_requests == []
    assert np.array_equal(np.from_dlpack(out), 7 + 3 * np.arange(N, dtype=np.float32))


class SubCPU(CPU):
    pass


class OwnCopy(move_module.CpuToFileBackedMoveOperation):
    pass


CASES = ["subclass source", "subclass destination", "profiler", "registered", "small", "too small",
         "released source", "filled file", "dtype mismatch", "same carrier"]


@pytest.mark.parametrize("case", CASES)
def test_the_python_request_decides_everything_else(python_requests, case):
    values = np.arange(N, dtype=np.float32)
    t, dest = source(CPU, values), destination(FileBacked)
    expected = None
    if case == "subclass source":
        sub = SubCPU(N)
        np.from_dlpack(Tensor(sub, 0, flat(N)))[:] = values
        t = Tensor(sub, 0, flat(N))
    elif case == "subclass destination":
        t, dest = source(FileBacked, values), SubCPU(N)
    elif case == "registered":
        move_module.unregister_move_operation(CPU, FileBacked)
        move_module.register_move_operation(CPU, FileBacked, OwnCopy)
    elif case == "small":
        t = source(CPU, values[:INLINE_SLOTS])
    elif case == "too small":
        dest, expected = CPU(N - 1), ValueError
    elif case == "released source":
        t.carrier.release()
        expected = RuntimeError
    elif case == "filled file":
        dest = sw.move(source(CPU, values[:8]), FileBacked(dtype=F32)).carrier  # not empty, too small
        python_requests.clear()
        expected = ValueError
    elif case == "dtype mismatch":
        dest, expected = FileBacked(dtype=sw.DType.Int32), TypeError
    elif case == "same carrier":
        dest, expected = t.carrier, ValueError
    try:
        if case == "profiler":
            with sw.profile():
                out = sw.move_async(t, dest).wait()
        elif expected is not None:
            with pytest.raises(expected):
                sw.move_async(t, dest)
            out = None
        else:
            out = sw.move_async(t, dest).wait()
    finally:
        if case == "registered":
            move_module.unregister_move_operation(CPU, FileBacked)
            move_module.register_move_operation(CPU, FileBacked, move_module.CpuToFileBackedMoveOperation)
    assert len(python_requests) == 1  # the Python request ran, and decided
    if out is not None:
        assert np.array_equal(values_of(out), values[:out.layout.size])
    if expected is not None and case != "same carrier":
        assert unclaimed(dest) and (case == "released source" or unclaimed(t.carrier))


def unclaimed(carrier):
    carrier.release()
    return carrier.is_released()


def test_after_a_registry_edit_the_default_route_runs_natively_again(python_requests):
    values = np.arange(N, dtype=np.float32)
    first, second = source(FileBacked, values), source(FileBacked, values)
    python_requests.clear()
    move_module.unregister_move_operation(FileBacked, CPU)
    move_module.register_move_operation(FileBacked, CPU, move_module.FileBackedToCpuMoveOperation)
    sw.move_async(first, CPU(N)).wait()  # resolves the route again
    assert len(python_requests) == 1
    out = sw.move_async(second, CPU(N)).wait()
    assert len(python_requests) == 1 and np.array_equal(values_of(out), values)


def test_a_failed_commit_release_rolls_the_native_request_back(python_requests):
    """The worker commit's release of a FileBacked source fails when a directory has taken
    its file's name (it cannot be unlinked): the handle fails with that OSError, and neither
    carrier is left claimed."""
    values = np.arange(N, dtype=np.float32)
    t = source(FileBacked, values)
    path = t.carrier.path
    os.unlink(path)
    os.mkdir(path)
    try:
        dest = CPU(N)
        with sw.no_grad():
            handle = sw.move_async(t, dest)
        assert python_requests == []
        with pytest.raises(OSError):
            handle.wait()
        assert dest.version == 0 and unclaimed(dest)
        assert unclaimed(t.carrier)
    finally:
        os.rmdir(path)
