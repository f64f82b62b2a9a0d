"""docs/spec/autograd-and-profiling.md §6 Grad mode: set and restore, no_grad nesting and
exceptions, thread-local state, and leaves computed with recording off."""
import threading

import pytest

import strideweave as sw
from strideweave import Layout, Shape, Stride

from slot_tensors import cpu


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_grad_mode_set_and_restore():
    assert sw.is_grad_enabled() is True
    assert sw.set_grad_enabled(False) is None
    try:
        assert sw.is_grad_enabled() is False
    finally:
        sw.set_grad_enabled(True)
    with pytest.raises(TypeError):
        sw.set_grad_enabled(1)
    assert sw.is_grad_enabled()


def test_no_grad_nesting_and_exceptions():
    with sw.no_grad():
        assert not sw.is_grad_enabled()
        with sw.no_grad():
            assert not sw.is_grad_enabled()
        assert not sw.is_grad_enabled()
    assert sw.is_grad_enabled()
    with pytest.raises(KeyError):
        with sw.no_grad():
            raise KeyError("x")
    assert sw.is_grad_enabled()
    sw.set_grad_enabled(False)
    try:
        with sw.no_grad():
            pass
        assert not sw.is_grad_enabled()  # restores the state seen at entry
    finally:
        sw.set_grad_enabled(True)


def test_grad_mode_is_thread_local():
    seen = []
    inside = threading.Event()
    release = threading.Event()

    def other():
        inside.wait()
        seen.append(sw.is_grad_enabled())
        release.set()

    t = threading.Thread(target=other)
    t.start()
    with sw.no_grad():
        inside.set()
        release.wait()
        assert not sw.is_grad_enabled()
    t.join()
    assert seen == [True]


def test_results_under_no_grad_are_leaves():
    x = cpu([1, 2], L([2], [1]))
    with sw.no_grad():
        y = sw.mul(x, 2.0)
        b = sw.broadcast_to(cpu([1], L([1], [1])), Shape([3]))
    assert y.autograd_ctx is None and b.autograd_ctx is None
    sw.sum(y).backward()
    assert y.grad.tolist() == [1.0, 1.0] and x.grad is None
