"""The native DLPack entry points (issue 4's speed requirement: no Python-level wrapper on the
hot path) and the read-only flag they compute.

`Tensor.__dlpack__` / `__dlpack_device__` are native methods inherited from
`_native._TensorBase`, and for the built-in carriers the read-only flag is evaluated in Rust.
These tests pin down that doing so changes nothing observable: the Tensor is still a slotted,
weak-referenceable Python class, the framework constructor still works, and the flag is still
decided by `is_mutable()` — including every override of `Tensor.is_mutable`,
`Carrier.is_mutable` and `_is_mutable` — exactly as the spec's "read-only flag from
`is_mutable()`" says.
"""
from __future__ import annotations

import gc
import inspect
import types
import weakref

import numpy as np
import pytest

import strideweave as sw
from dlpack_structs import READ_ONLY, managed


def layout(n):
    return sw.Layout(sw.Shape([n]), sw.Stride([1]))


def flags(tensor):
    return managed(tensor.__dlpack__(max_version=(1, 0))).flags


# --------------------------------------------------------------------------------------------
# The Tensor class with a native base


@pytest.mark.parametrize("name", ["__dlpack__", "__dlpack_device__"])
def test_dlpack_methods_are_native(name):
    # A Python function here would put a frame (and argument re-packing) on every consumer's
    # call; the methods must be the native base's own.
    method = inspect.getattr_static(sw.Tensor, name)
    assert not isinstance(method, types.FunctionType)
    assert method is inspect.getattr_static(sw.Tensor.__mro__[1], name)


def test_dlpack_signature_as_declared():
    # __dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None), enforced
    # by the native method's own argument binding.
    params = inspect.signature(sw.Tensor.__dlpack__).parameters
    assert list(params) == ["self", "stream", "max_version", "dl_device", "copy"]
    assert params["stream"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(params[n].kind is inspect.Parameter.KEYWORD_ONLY
               for n in ("max_version", "dl_device", "copy"))
    assert all(p.default is None for n, p in params.items() if n != "self")
    t = sw.Tensor(sw.CPU(2), 0, layout(2))
    assert managed(t.__dlpack__(stream=None)).dl_tensor.ndim == 1
    # Keywords built at run time are not interned; they bind by value all the same.
    keyword = "".join(["max_", "version"])
    assert managed(t.__dlpack__(**{keyword: (1, 0)})).flags == 0
    with pytest.raises(TypeError, match="positional"):
        t.__dlpack__(None, (1, 0))
    with pytest.raises(TypeError, match="unexpected keyword argument 'version'"):
        t.__dlpack__(version=(1, 0))
    with pytest.raises(TypeError, match="multiple values for argument 'stream'"):
        t.__dlpack__(None, stream=None)
    with pytest.raises(TypeError):
        sw.Tensor.__dlpack__(object())
    assert t.carrier.version == 0


def test_tensor_stays_slotted_and_weak_referenceable():
    t = sw.Tensor(sw.CPU(2), 0, layout(2))
    assert not hasattr(t, "__dict__")
    with pytest.raises(AttributeError):
        t.unexpected = 1
    ref = weakref.ref(t)
    assert ref() is t
    del t
    assert ref() is None


def test_constructor_validation_still_runs():
    with pytest.raises(TypeError, match="carrier"):
        sw.Tensor(object(), 0, layout(2))
    with pytest.raises(ValueError, match="offset"):
        sw.Tensor(sw.CPU(2), -1, layout(2))


def test_framework_constructor_builds_exportable_tensors():
    # core.representation builds Tensors with cls.__new__(cls) and no arguments; views and
    # broadcasts go through it. Their exports must behave like any other Tensor's.
    carrier = sw.CPU(6)
    for i in range(6):
        carrier[i] = float(i)
    t = sw.Tensor(carrier, 0, sw.Layout(sw.Shape([2, 3]), sw.Stride([3, 1])))
    bare = sw.Tensor.__new__(sw.Tensor)
    assert type(bare) is sw.Tensor
    b = sw.broadcast_to(sw.Tensor(carrier, 0, sw.Layout(sw.Shape([1, 3]), sw.Stride([0, 1]))),
                        sw.Shape([2, 3]))
    assert np.from_dlpack(b).tolist() == [[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]]
    assert np.from_dlpack(t).tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_tensor_subclass_inherits_the_native_methods():
    class Sub(sw.Tensor):
        __slots__ = ()

    t = Sub(sw.CPU(3), 0, layout(3))
    assert t.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(t)
    a[1] = 7.0
    assert t[1] == 7.0


def test_tensor_subclass_may_override_dlpack():
    # The native methods are ordinary methods: a subclass override wins.
    class Custom(sw.Tensor):
        def __dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None):
            raise BufferError("custom refusal")

        def __dlpack_device__(self):
            return (1, 0)

    t = Custom(sw.CPU(2), 0, layout(2))
    with pytest.raises(BufferError, match="custom refusal"):
        np.from_dlpack(t)


# --------------------------------------------------------------------------------------------
# Read-only flag: the built-in answer and every override


@pytest.mark.parametrize("mutable", [True, False])
def test_builtin_cpu_flag_follows_is_mutable(mutable):
    t = sw.Tensor(sw.CPU(2, mutable=mutable), 0, layout(2))
    assert t.is_mutable() is mutable
    assert flags(t) == (0 if mutable else READ_ONLY)
    assert np.from_dlpack(t).flags.writeable is mutable


def test_owned_tier_flag_turns_back_when_disowned():
    primary = sw.CPU(3)
    t = sw.Tensor(primary, 0, layout(3))
    assert flags(t) == 0
    ev = sw.Evictable(primary, sw.CPU(3))
    assert flags(t) == READ_ONLY
    del ev
    gc.collect()
    assert t.is_mutable()
    assert flags(t) == 0


@pytest.mark.parametrize("answer", [False, True])
def test_cpu_subclass_overriding__is_mutable_decides_the_flag(answer):
    # An immutable-looking override on a mutable carrier, and a mutable-looking override on
    # an immutable one: the flag follows the override both ways.
    class Decided(sw.CPU):
        def _is_mutable(self):
            return answer

    t = sw.Tensor(Decided(2, mutable=not answer), 0, layout(2))
    assert t.is_mutable() is answer
    assert flags(t) == (0 if answer else READ_ONLY)
    assert np.from_dlpack(t).flags.writeable is answer


@pytest.mark.parametrize("answer", [False, True])
def test_cpu_subclass_overriding_is_mutable_decides_the_flag(answer):
    class Decided(sw.CPU):
        def is_mutable(self):
            return answer

    t = sw.Tensor(Decided(2, mutable=not answer), 0, layout(2))
    assert t.is_mutable() is answer
    assert flags(t) == (0 if answer else READ_ONLY)


def test_tensor_subclass_is_mutable_true_over_an_immutable_carrier():
    class Writable(sw.Tensor):
        __slots__ = ()

        def is_mutable(self):
            return True

    t = Writable(sw.CPU(2, mutable=False), 0, layout(2))
    assert not t.carrier.is_mutable()
    assert flags(t) == 0


def test_override_truthiness_is_honoured():
    # The Python predicate applies bool(); a non-bool answer counts by its truth value.
    class Truthy(sw.CPU):
        def _is_mutable(self):
            return []

    assert flags(sw.Tensor(Truthy(2), 0, layout(2))) == READ_ONLY


def test_hooks_are_decided_per_class_and_remembered():
    # Issue 10: a hook runs only where the class overrides it, and that check is cached: a
    # carrier of a class that overrides nothing takes the built-in shortcut, and once decided
    # it keeps it (a method assigned to the class later is not consulted for that carrier);
    # a carrier created after the assignment sees the override.
    class Late(sw.CPU):
        pass

    t = sw.Tensor(Late(2), 0, layout(2))
    assert flags(t) == 0
    Late._is_mutable = lambda self: False
    assert flags(t) == 0
    assert flags(sw.Tensor(Late(2), 0, layout(2))) == READ_ONLY
    del Late._is_mutable
    Late.is_mutable = lambda self: False
    assert flags(sw.Tensor(Late(2), 0, layout(2))) == READ_ONLY
    del Late.is_mutable
    assert flags(sw.Tensor(Late(2), 0, layout(2))) == 0


def test_is_mutable_override_exception_propagates_only_for_versioned_export():
    class Broken(sw.CPU):
        def _is_mutable(self):
            raise RuntimeError("mutability unknown")

    t = sw.Tensor(Broken(2), 0, layout(2))
    with pytest.raises(RuntimeError, match="mutability unknown"):
        t.__dlpack__(max_version=(1, 0))
    # A legacy capsule has no flags word, so the predicate is not consulted.
    assert managed(t.__dlpack__()).dl_tensor.ndim == 1
    assert t.carrier.version == 0
