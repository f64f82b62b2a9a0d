"""docs/spec/interop-movement.md, "Requirement: DLPack export produces version 1.0 or the legacy structure on request":
the version ceiling and its checks. JAX takes the legacy capsule as a real consumer.

Capsules are inspected at the C level through ctypes views (tests/dlpack_structs.py)."""
from __future__ import annotations

import numpy as np
import pytest

import strideweave as sw

from dlpack_sources import cpu_tensor
from dlpack_structs import (LEGACY, VERSIONED, DLManagedTensor, DLManagedTensorVersioned, capsule_name, dims,
                            managed)

F32, I32, BOOL = sw.DType.Float32, sw.DType.Int32, sw.DType.Bool


# --------------------------------------------------------------------------------------------
# Version selection

@pytest.mark.parametrize("max_version", [(1, 0), (1, 3), [1, 0], (2, 0), (3, 9), (10**30, 0)])
def test_versioned_capsule_for_any_1x_or_higher_ceiling(max_version):
    t = cpu_tensor([1.0, 2.0, 3.0])
    cap = t.__dlpack__(max_version=max_version)
    assert capsule_name(cap) == VERSIONED
    m = managed(cap)
    assert isinstance(m, DLManagedTensorVersioned)
    assert (m.version.major, m.version.minor) == (1, 0)


@pytest.mark.parametrize("kwargs", [{}, {"max_version": None}, {"max_version": (0, 0)},
                                    {"max_version": [0, 8]}, {"max_version": (0, 10**30)}])
def test_legacy_capsule_without_a_1x_ceiling(kwargs):
    t = cpu_tensor([1.0, 2.0, 3.0])
    cap = t.__dlpack__(**kwargs)
    assert capsule_name(cap) == LEGACY
    m = managed(cap)
    assert isinstance(m, DLManagedTensor)
    assert dims(m.dl_tensor) == ((3,), (1,))
    assert m.dl_tensor.data == t.carrier.pointer()


def test_signature_keyword_only_arguments():
    t = cpu_tensor([1.0])
    with pytest.raises(TypeError):
        t.__dlpack__(None, (1, 0))  # max_version is keyword-only
    assert capsule_name(t.__dlpack__(None)) == LEGACY  # stream is positional
    with pytest.raises(TypeError):
        t.__dlpack_device__(None)


@pytest.mark.parametrize("bad", [1, 1.0, "1.0", b"10", {1: 0}, {1, 0}, range(2), np.array([1, 0])])
def test_max_version_of_wrong_type_is_type_error(bad):
    with pytest.raises(TypeError, match="max_version"):
        cpu_tensor([1.0]).__dlpack__(max_version=bad)


@pytest.mark.parametrize("bad", [(), (1,), [1], (1, 0, 0), [1, 0, 0], (-1, 0), (1, -1), [0, -5],
                                 (-(10**30), 0)])
def test_max_version_wrong_length_or_negative_is_value_error(bad):
    with pytest.raises(ValueError, match="max_version"):
        cpu_tensor([1.0]).__dlpack__(max_version=bad)


# --------------------------------------------------------------------------------------------
# JAX (takes the legacy capsule: jax.numpy.from_dlpack calls __dlpack__(stream=...))

def _jax():
    try:
        import jax.numpy as jnp_
    except ImportError:
        pytest.skip("jax is not installed")
    return jnp_


@pytest.mark.parametrize("shape,stride,offset", [([6], [1], 0), ([2, 3], [3, 1], 0),
                                                 ([2, 3], [1, 2], 0), ([3], [1], 2)])
def test_jax_consumer(shape, stride, offset):
    jnp_ = _jax()
    t = cpu_tensor([float(i) for i in range(8)], shape, stride, offset=offset, size=8)
    j = jnp_.from_dlpack(t)
    expected = np.from_dlpack(t)
    assert j.shape == expected.shape
    assert np.asarray(j).tolist() == expected.tolist()


def test_jax_takes_the_legacy_capsule_and_int32():
    jnp_ = _jax()
    t = cpu_tensor([1, 2, 3], dtype=I32)
    names = []

    class Spy:
        def __dlpack__(self, *args, **kwargs):
            cap = t.__dlpack__(*args, **kwargs)
            names.append(capsule_name(cap))
            return cap

        def __dlpack_device__(self):
            return t.__dlpack_device__()

    j = jnp_.from_dlpack(Spy())
    assert names == [LEGACY]
    assert j.dtype == np.int32 and np.asarray(j).tolist() == [1, 2, 3]
