"""`_native.unary_f32`: the one-input kernels behind copies, scaling and gradient scatter-adds."""

import pytest

from strideweave import _native


def _storage(values):
    s = _native.HostStorage("f32", len(values))
    s.set_values(values)
    return s


def _run(op, out_values, out_strides, scalar=None):
    a = _storage([1.0, 2.0, 3.0])
    out = _storage(out_values)
    if scalar is None:
        _native.unary_f32(op, [3], (a, 0, [1]), out, out_strides)
    else:
        _native.unary_f32(op, [3], (a, 0, [1]), out, out_strides, scalar)
    return out.to_list()


def test_each_op_runs_its_kernel():
    assert _run("copy", [0.0] * 3, [1]) == [1.0, 2.0, 3.0]
    assert _run("scale", [0.0] * 3, [1], 0.5) == [0.5, 1.0, 1.5]
    # Stride 0 on the output: every coordinate lands on slot 0 and the values accumulate.
    assert _run("scatter_add", [10.0, 7.0], [0]) == [16.0, 7.0]


@pytest.mark.parametrize(
    ("op", "scalar", "message"),
    [
        ("negate", None, "op must be 'copy', 'scale' or 'scatter_add'"),
        ("scale", None, "op 'scale' needs a scalar"),
        ("copy", 2.0, "op 'copy' takes no scalar"),
        ("scatter_add", 2.0, "op 'scatter_add' takes no scalar"),
    ],
)
def test_a_bad_op_or_scalar_is_a_value_error_and_writes_nothing(op, scalar, message):
    with pytest.raises(ValueError, match=message):
        _run(op, [9.0] * 3, [1], scalar)
    out = _storage([9.0] * 3)
    with pytest.raises(ValueError):
        _native.unary_f32(op, [3], (_storage([1.0, 2.0, 3.0]), 0, [1]), out, [1], scalar)
    assert out.to_list() == [9.0] * 3
