//! `copy_buffer_to_host`: one checked bulk copy from any C-contiguous Python buffer (the
//! buffer protocol: a NumPy array, a `memoryview`, a Ray object-store view) into a
//! `HostStorage`, with the GIL released for the copy.
//!
//! Why it exists: carriers whose bytes arrive as a Python buffer object (the Ray carrier's
//! fetched object) must land them in a CPU carrier without a per-element Python loop and
//! without handing a raw address across the Python boundary. The caller passes the buffer
//! object and the storage object; every range is checked here.
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyBufferError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::storage::HostStorage;

fn span_end(start: usize, nbytes: usize, what: &str) -> PyResult<usize> {
    start
        .checked_add(nbytes)
        .ok_or_else(|| PyValueError::new_err(format!("{what} byte range overflows")))
}

/// Copy `nbytes` bytes from `source` (starting `source_byte` bytes into it) to
/// `destination` (starting at byte `destination_byte`). Nothing is written unless every
/// check passes: the source must be C-contiguous and long enough, the destination live and
/// long enough, and the two ranges must not overlap.
#[pyfunction]
#[pyo3(signature = (source, source_byte, destination, destination_byte, nbytes))]
fn copy_buffer_to_host(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    source_byte: usize,
    destination: PyRef<'_, HostStorage>,
    destination_byte: usize,
    nbytes: usize,
) -> PyResult<()> {
    let view = PyUntypedBuffer::get(source)?;
    let result = copy_checked(py, &view, source_byte, &destination, destination_byte, nbytes);
    view.release(py);
    result
}

fn copy_checked(
    py: Python<'_>,
    view: &PyUntypedBuffer,
    source_byte: usize,
    destination: &HostStorage,
    destination_byte: usize,
    nbytes: usize,
) -> PyResult<()> {
    if !view.is_c_contiguous() {
        return Err(PyBufferError::new_err("source buffer must be C-contiguous"));
    }
    let source_end = span_end(source_byte, nbytes, "source")?;
    if source_end > view.len_bytes() {
        return Err(PyValueError::new_err(format!(
            "source byte range [{source_byte}, {source_end}) exceeds the buffer's {} bytes",
            view.len_bytes()
        )));
    }
    let target = destination
        .buffer()
        .ok_or_else(|| PyRuntimeError::new_err("destination HostStorage is released"))?;
    let destination_end = span_end(destination_byte, nbytes, "destination")?;
    if destination_end > target.len() {
        return Err(PyValueError::new_err(format!(
            "destination byte range [{destination_byte}, {destination_end}) exceeds the storage's {} bytes",
            target.len()
        )));
    }
    if nbytes == 0 {
        return Ok(());
    }
    let source_start = view.buf_ptr() as usize + source_byte;
    let target_start = target.as_ptr() as usize + destination_byte;
    if source_start < target_start + nbytes && target_start < source_start + nbytes {
        return Err(PyValueError::new_err("source and destination byte ranges overlap"));
    }
    py.detach(|| {
        // SAFETY: `view` holds the exporter's buffer (PyObject_GetBuffer) until it is released
        // after this closure returns, so `[source_byte, source_end)` (checked against
        // `len_bytes` above, contiguous) stays valid and unmoved while the GIL is released; the
        // destination range was checked not to overlap it, so this slice is never written.
        let bytes = unsafe { std::slice::from_raw_parts((view.buf_ptr() as *const u8).add(source_byte), nbytes) };
        // SAFETY: the destination is the HostStorage of a carrier the calling move claims, so
        // no other writer or reader touches these bytes during the call (the exclusivity
        // contract of `HostBuffer::write`); `target` keeps the buffer alive.
        unsafe { target.write(destination_byte, bytes) }
    })
    .ok_or_else(|| PyValueError::new_err("destination range outside the storage"))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(copy_buffer_to_host, m)?)?;
    Ok(())
}
