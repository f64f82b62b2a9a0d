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

use strideweave_core::storage::HostBuffer;

use crate::storage::HostStorage;

fn span_end(start: usize, nbytes: usize, what: &str) -> PyResult<usize> {
    start.checked_add(nbytes).ok_or_else(|| PyValueError::new_err(format!("{what} byte range overflows")))
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
    let target = destination.buffer().ok_or_else(|| PyRuntimeError::new_err("destination HostStorage is released"))?;
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
        unsafe { write_split(&target, destination_byte, bytes) }
    })
    .ok_or_else(|| PyValueError::new_err("destination range outside the storage"))
}

/// Copies at least this large are split over several threads (`write_split`).
const PARALLEL_COPY_MIN: usize = 32 << 20;

/// `target.write(at, bytes)`, split over up to four threads (one per core) from
/// `PARALLEL_COPY_MIN` on. Why: a buffer that arrives from another process's shared memory
/// (a Ray object-store view) is mapped into this process page by page as the copy first reads
/// it, and a fresh destination is faulted in as it is first written. One thread takes every
/// such fault in turn; threads on several cores take them in parallel (a 256 MiB copy from a
/// freshly mapped shared-memory buffer: 35 ms on one thread, 18 ms on two, on this 2-core
/// machine). Each thread writes its own disjoint part.
///
/// # Safety
/// As `HostBuffer::write`: nobody else reads or writes `[at, at + bytes.len())` of `target`
/// during the call.
unsafe fn write_split(target: &HostBuffer, at: usize, bytes: &[u8]) -> Option<()> {
    let parts = if bytes.len() < PARALLEL_COPY_MIN {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get()).min(4)
    };
    if parts < 2 {
        // SAFETY: as the caller vouches.
        return unsafe { target.write(at, bytes) };
    }
    let part = bytes.len().div_ceil(parts);
    std::thread::scope(|scope| {
        let others: Vec<_> = bytes
            .chunks(part)
            .enumerate()
            .skip(1)
            .map(|(k, piece)| {
                // SAFETY: each thread writes its own part of the range the caller vouches
                // for; the parts are disjoint.
                scope.spawn(move || unsafe { target.write(at + k * part, piece) })
            })
            .collect();
        // SAFETY: the first part, disjoint from the others.
        let first = unsafe { target.write(at, &bytes[..part]) };
        others.into_iter().fold(first, |done, other| {
            let wrote = other.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            done.and(wrote)
        })
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(copy_buffer_to_host, m)?)?;
    Ok(())
}
