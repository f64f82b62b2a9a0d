//! `submit_prefault`: fault a range of a `HostStorage` in (writable) on an engine worker, so a
//! copy that lands there later finds its pages present.
//!
//! Why it exists: a fresh CPU carrier's memory is mapped lazily, and the first write to each
//! page faults while the kernel zeroes it (2 MiB at a time with transparent huge pages). For a
//! 256 MiB landing buffer that is tens of milliseconds of the copy. When the bytes must first
//! arrive from elsewhere (the Ray carrier's fetch across nodes), the faults can run meanwhile on
//! a worker. `MADV_POPULATE_WRITE` (Linux 5.14) faults pages in as a write would, without
//! writing: no byte changes, so it is harmless on a destination that readers are still reading
//! and on one whose move then fails. Where it is unavailable (other systems, older kernels) the
//! job does nothing and the copy faults the pages itself, as before.
use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use strideweave_core::storage::HostBuffer;

use crate::error::JobError;
use crate::jobs::{run_blocking, submit_job};
use crate::storage::HostStorage;

/// Queue the prefault of bytes `[byte_start, byte_start + nbytes)` of `storage` on the engine's
/// copy lane, then call `then(None)`. The range is checked first; the job holds the storage's
/// buffer, so a release meanwhile only drops the carrier's own reference.
#[pyfunction]
#[pyo3(signature = (storage, byte_start, nbytes, then))]
fn submit_prefault(
    storage: PyRef<'_, HostStorage>,
    byte_start: usize,
    nbytes: usize,
    then: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let buffer = storage.buffer().ok_or_else(|| PyRuntimeError::new_err("HostStorage is released"))?;
    let end = byte_start.checked_add(nbytes).filter(|&end| end <= buffer.len()).ok_or_else(|| {
        PyValueError::new_err(format!(
            "byte range [{byte_start}, {byte_start} + {nbytes}) exceeds the storage's {} bytes",
            buffer.len()
        ))
    })?;
    submit_job(then, move || {
        populate_write(&buffer, byte_start, end);
        Ok(())
    })
}

/// Advice only: a failure (an old kernel's EINVAL, memory the kernel will not populate) leaves
/// the pages to be faulted by the copy, so it is ignored.
fn populate_write(buffer: &Arc<HostBuffer>, start: usize, end: usize) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
        let base = buffer.as_ptr() as usize;
        let first = (base + start).next_multiple_of(page);
        let last = (base + end) / page * page;
        if last > first {
            // SAFETY: [first, last) lies inside the buffer's `[start, end)`, checked against its
            // length, and the `Arc` keeps the buffer mapped for the call. MADV_POPULATE_WRITE
            // only faults pages in as a write would, changing no byte, so no reader or writer
            // of this memory can observe it.
            unsafe { libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_POPULATE_WRITE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (buffer, start, end);
}

/// `HostBuffer::load_snapshot` of a fresh file snapshot (`HostStorage.snapshot_of`): its bytes
/// into memory ahead of its reads (mapped from the page cache, or read from the file when they
/// are not all cached), GIL released; OSError if the read fails. Nothing on a storage that is
/// not a snapshot. A blocking `promote()` calls it on its own thread.
#[pyfunction]
fn load_snapshot(py: Python<'_>, storage: PyRef<'_, HostStorage>) -> PyResult<()> {
    let buffer = storage.buffer().ok_or_else(|| PyRuntimeError::new_err("HostStorage is released"))?;
    // SAFETY: only `Evictable`'s retain_clean promote calls this, on the snapshot it has just
    // made as its fresh primary, before publishing it and under its claim: nothing has written
    // the snapshot and nothing can until the promote commits.
    run_blocking(py, move || {
        unsafe { buffer.load_snapshot() }.map_err(|err| JobError::Io { err, context: "loading a file snapshot".into() })
    })
}

/// `load_snapshot` as an engine job, then `then(None)` or `then(exc)` with the GIL: a thread
/// that waits for it runs it, as for every job. The job holds the buffer, so a release
/// meanwhile only drops the carrier's own reference.
#[pyfunction]
fn submit_load_snapshot(storage: PyRef<'_, HostStorage>, then: &Bound<'_, PyAny>) -> PyResult<()> {
    let buffer = storage.buffer().ok_or_else(|| PyRuntimeError::new_err("HostStorage is released"))?;
    // SAFETY: as in `load_snapshot`: `promote_async()`'s fresh primary, which nothing reads or
    // writes until this job completes and the promote commits.
    submit_job(then, move || {
        unsafe { buffer.load_snapshot() }.map_err(|err| JobError::Io { err, context: "loading a file snapshot".into() })
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(submit_prefault, m)?)?;
    m.add_function(wrap_pyfunction!(load_snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(submit_load_snapshot, m)?)?;
    Ok(())
}
