//! `_native` compute kernels for the CPU carrier over hierarchical layouts (see
//! `strideweave_core::kernels`): `binary_f32` (add, mul), `unary_f32` (copy, scale,
//! scatter-add) and `sum_f32`.
//!
//! Every function takes the operation's flattened leaf extents and, per input operand, a
//! `(HostStorage, element offset, leaf strides)` tuple; outputs are written at offset 0
//! through their own strides. The buffers are cloned out of the storages (`Arc`s) before
//! the GIL is released, so a concurrent `release()` of a carrier cannot free memory a kernel
//! is still reading. Python (`strideweave._autograd`) decides layouts; these functions only
//! check that each operand fits its storage, then compute.

use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use strideweave_core::kernels::{self, BinaryOp, Operand, UnaryOp};
use strideweave_core::storage::{ElemKind, HostBuffer};

use crate::error;
use crate::storage::HostStorage;

/// The live f32 buffer of `storage`, checked for kind and alignment.
fn f32_buffer(name: &str, storage: &Bound<'_, HostStorage>) -> PyResult<Arc<HostBuffer>> {
    let s = storage.get();
    if s.kind() != ElemKind::F32 {
        return Err(PyTypeError::new_err(format!("{name}: kernel needs f32 storage, not {}", s.kind().name())));
    }
    let buf = s.buffer().ok_or_else(|| PyRuntimeError::new_err(format!("{name}: storage is released")))?;
    if !(buf.as_ptr() as usize).is_multiple_of(std::mem::align_of::<f32>()) {
        return Err(PyValueError::new_err(format!("{name}: storage is not aligned for f32")));
    }
    Ok(buf)
}

/// A shared view of a whole f32 buffer.
///
/// # Safety
/// `buf` must be an f32 buffer checked by [`f32_buffer`] (aligned, `len` bytes valid) and no
/// `&mut` view of it may exist for the lifetime of the returned slice.
unsafe fn read_view(buf: &HostBuffer) -> &[f32] {
    std::slice::from_raw_parts(buf.as_ptr() as *const f32, buf.len() / 4)
}

/// An exclusive view of a whole f32 buffer.
///
/// # Safety
/// As for [`read_view`], and no other view of `buf` may exist while the slice lives.
#[allow(clippy::mut_from_ref)]
unsafe fn write_view(buf: &HostBuffer) -> &mut [f32] {
    std::slice::from_raw_parts_mut(buf.as_ptr() as *mut f32, buf.len() / 4)
}

/// The output must be a different buffer from every input: the kernels hold `&` views of the
/// inputs and a `&mut` view of the output at the same time.
fn disjoint(out: &HostBuffer, inputs: &[&HostBuffer]) -> PyResult<()> {
    let (o0, o1) = (out.as_ptr() as usize, out.as_ptr() as usize + out.len());
    for b in inputs {
        let (b0, b1) = (b.as_ptr() as usize, b.as_ptr() as usize + b.len());
        if !out.is_empty() && !b.is_empty() && o0 < b1 && b0 < o1 {
            return Err(PyValueError::new_err("out: output storage overlaps an input"));
        }
    }
    Ok(())
}

/// An input operand as Python passes it: `(storage, element offset, leaf strides)`.
type OperandArg<'py> = (Bound<'py, HostStorage>, usize, Vec<usize>);

/// `out[out_strides·c] = a[c] op b[c]`, `op` "add" or "mul".
#[pyfunction]
fn binary_f32(
    py: Python<'_>,
    op: &str,
    extents: Vec<usize>,
    a: OperandArg<'_>,
    b: OperandArg<'_>,
    out: &Bound<'_, HostStorage>,
    out_strides: Vec<usize>,
) -> PyResult<()> {
    let ((a, a_offset, a_strides), (b, b_offset, b_strides)) = (a, b);
    let op = match op {
        "add" => BinaryOp::Add,
        "mul" => BinaryOp::Mul,
        other => return Err(PyValueError::new_err(format!("op must be 'add' or 'mul', not {other:?}"))),
    };
    let (ab, bb, ob) = (f32_buffer("a", &a)?, f32_buffer("b", &b)?, f32_buffer("out", out)?);
    disjoint(&ob, &[&ab, &bb])?;
    py.detach(|| {
        // SAFETY: all three buffers passed `f32_buffer`; `out` overlaps neither input
        // (checked above), so the `&mut` view is exclusive among the views made here. The
        // Arcs keep the memory alive for the whole call even if a carrier is released
        // meanwhile. Concurrent writes through other entry points are excluded by the
        // carrier object model, as for every other host-buffer user.
        let (x, y, z) = unsafe { (read_view(&ab), read_view(&bb), write_view(&ob)) };
        kernels::binary_f32(
            op,
            &extents,
            Operand::new(x, a_offset, &a_strides),
            Operand::new(y, b_offset, &b_strides),
            z,
            &out_strides,
        )
    })
    .map_err(error::kernel)
}

/// One input, one output: `op` is "copy" (`out[c] = a[c]`; all-zero `a_strides` fill `out`
/// with one value), "scale" (`out[c] = a[c]·scalar`, rounded once to f32; needs `scalar`) or
/// "scatter_add" (`out[out_strides·c] += a[c]`; repeated output slots accumulate).
#[pyfunction]
#[pyo3(signature = (op, extents, a, out, out_strides, scalar=None))]
fn unary_f32(
    py: Python<'_>,
    op: &str,
    extents: Vec<usize>,
    a: OperandArg<'_>,
    out: &Bound<'_, HostStorage>,
    out_strides: Vec<usize>,
    scalar: Option<f64>,
) -> PyResult<()> {
    let (a, a_offset, a_strides) = a;
    let op = match (op, scalar) {
        ("copy", None) => UnaryOp::Copy,
        ("scale", Some(factor)) => UnaryOp::Scale(factor),
        ("scatter_add", None) => UnaryOp::ScatterAdd,
        ("scale", None) => return Err(PyValueError::new_err("op 'scale' needs a scalar")),
        ("copy" | "scatter_add", Some(_)) => return Err(PyValueError::new_err(format!("op '{op}' takes no scalar"))),
        (other, _) => {
            return Err(PyValueError::new_err(format!("op must be 'copy', 'scale' or 'scatter_add', not {other:?}")))
        }
    };
    let (ab, ob) = (f32_buffer("a", &a)?, f32_buffer("out", out)?);
    disjoint(&ob, &[&ab])?;
    py.detach(|| {
        // SAFETY: as in `binary_f32`: checked f32 buffers, output disjoint from the input.
        let (x, z) = unsafe { (read_view(&ab), write_view(&ob)) };
        kernels::unary_f32(op, &extents, Operand::new(x, a_offset, &a_strides), z, &out_strides)
    })
    .map_err(error::kernel)
}

/// Total over every coordinate, accumulated in f64 and rounded to f32 (returned as a float).
#[pyfunction]
fn sum_f32(py: Python<'_>, extents: Vec<usize>, a: OperandArg<'_>) -> PyResult<f64> {
    let (a, a_offset, a_strides) = a;
    let ab = f32_buffer("a", &a)?;
    py.detach(|| {
        // SAFETY: `ab` passed `f32_buffer`; only shared views are made.
        let x = unsafe { read_view(&ab) };
        kernels::sum_f32(&extents, Operand::new(x, a_offset, &a_strides))
    })
    .map(|v| v as f64)
    .map_err(error::kernel)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(binary_f32, m)?)?;
    m.add_function(wrap_pyfunction!(unary_f32, m)?)?;
    m.add_function(wrap_pyfunction!(sum_f32, m)?)?;
    Ok(())
}
