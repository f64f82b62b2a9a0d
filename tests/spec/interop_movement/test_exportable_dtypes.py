"""docs/spec/interop-movement.md, "Requirement: Only Float32 and Int32 logical dtypes are exportable"."""
from __future__ import annotations

import numpy as np
import pytest

import strideweave as sw

from dlpack_sources import cpu_tensor
from dlpack_structs import K_DL_FLOAT, K_DL_INT, managed

F32, I32, BOOL = sw.DType.Float32, sw.DType.Int32, sw.DType.Bool


@pytest.mark.parametrize("dtype,code,np_dtype", [(F32, K_DL_FLOAT, np.float32), (I32, K_DL_INT, np.int32)])
def test_supported_dtypes_export_32_bit_single_lane(dtype, code, np_dtype):
    t = cpu_tensor([1, 2, 3], dtype=dtype)
    for max_version in (None, (1, 0)):
        d = managed(t.__dlpack__(max_version=max_version)).dl_tensor
        assert (d.dtype.code, d.dtype.bits, d.dtype.lanes) == (code, 32, 1)
    a = np.from_dlpack(t)
    assert a.dtype == np_dtype
    assert a.tolist() == [1, 2, 3]
    a[1] = 7
    assert t[1] == 7


def test_bool_cpu_reports_device_but_refuses_export():
    t = cpu_tensor([True, False], dtype=BOOL)
    assert t.__dlpack_device__() == (1, 0)
    for max_version in (None, (1, 0)):
        with pytest.raises(BufferError) as info:
            t.__dlpack__(max_version=max_version)
        assert "Float32" in str(info.value) and "Int32" in str(info.value)
