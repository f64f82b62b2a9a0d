//! Storage-to-storage transfers on `strideweave._native`: one entry per copy kind, each with a
//! blocking form (GIL released on the caller's thread) and a `submit_` form (an engine worker,
//! then `then(None | exc)` with the GIL).
//!
//! | copy kind | blocking | submitted |
//! | --- | --- | --- |
//! | a span of slots between any two built-in storages (host or file, either side) | `copy_span` | `submit_span` |
//! | every slot a flattened layout addresses, host to host | `copy_layout` | `submit_layout` |
//!
//! Every function takes storage *objects* (`HostStorage`, `FileStorage`), never addresses or
//! descriptors: it checks each range against the live storage before anything is written and
//! then holds the storage's buffer or file by `Arc` for the whole job. A concurrent release of
//! the carrier only drops the carrier's own reference, so a running copy can never touch freed
//! memory or a closed descriptor. Who may copy what, and when, is decided by the carrier claims
//! of the move layer; this module only guarantees memory safety.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use strideweave_core::copy;
use strideweave_core::engine;
use strideweave_core::layout::plan;
use strideweave_core::storage::{ElemKind, FileStore, HostBuffer};

use crate::commit::MoveCommit;
use crate::error::{self, JobError};
use crate::jobs::{run_blocking, submit_committing};
use crate::storage::{FileStorage, HostStorage};

// ---- progress ----

/// Bytes done and in total of one transfer, updated by the job after every chunk and read
/// by any thread (an `AwaitMove`'s `bytes_done`, a progress bar).
#[pyclass(frozen, module = "strideweave._native")]
pub struct TransferProgress {
    done: AtomicU64,
    total: AtomicU64,
}

impl TransferProgress {
    /// Nothing done yet of `total` bytes.
    pub(crate) fn with_total(total: u64) -> Self {
        TransferProgress { done: AtomicU64::new(0), total: AtomicU64::new(total) }
    }

    /// The transfer's size in bytes.
    pub(crate) fn total_bytes(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Done equals total (a committed transfer).
    pub(crate) fn complete(&self) {
        self.done.store(self.total.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

#[pymethods]
impl TransferProgress {
    #[new]
    fn new() -> Self {
        TransferProgress { done: AtomicU64::new(0), total: AtomicU64::new(0) }
    }

    #[getter]
    fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    #[getter]
    fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Set both figures (the framework's own record for transfers it does not run here).
    fn set(&self, done: u64, total: u64) {
        self.total.store(total, Ordering::Relaxed);
        self.done.store(done.min(total), Ordering::Relaxed);
    }

    fn __repr__(&self) -> String {
        format!("TransferProgress(done={}, total={})", self.done(), self.total())
    }
}

/// Chunks of this size are the unit of progress (the core's positioned-I/O chunk).
const PROGRESS_CHUNK: usize = copy::IO_CHUNK;

/// Spans into host memory from this size on are copied in `PIECE`s spread over idle copy
/// threads (`engine::run_pieces`): another core then faults in and fills part of
/// the destination meanwhile. A span into a file stays on one thread, since its writes take
/// the file's inode lock one at a time.
const SPLIT_MIN: u64 = 2 * PROGRESS_CHUNK as u64;

/// The pieces of a split span: small enough that a helper which starts late, or is
/// preempted, holds up the end of the copy by little; large enough that claiming one costs
/// nothing next to copying it.
const PIECE: u64 = 2 << 20;

// ---- the storages a job holds ----

/// A live built-in storage, held by reference for the life of a job.
#[derive(Clone)]
enum Endpoint {
    Host(Arc<HostBuffer>),
    File(Arc<FileStore>),
}

impl Endpoint {
    /// The live storage behind `obj` and its element kind; TypeError for anything but a
    /// built-in storage, RuntimeError for a released one.
    fn resolve(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<(Self, ElemKind)> {
        if let Ok(host) = obj.cast::<HostStorage>() {
            let host = host.get();
            let buffer = host.buffer().ok_or_else(|| released(name))?;
            return Ok((Endpoint::Host(buffer), host.kind()));
        }
        if let Ok(file) = obj.cast::<FileStorage>() {
            let file = file.get();
            let store = file.store().ok_or_else(|| released(name))?;
            return Ok((Endpoint::File(store), file.kind()));
        }
        Err(PyTypeError::new_err(format!(
            "{name} must be a HostStorage or FileStorage, not {}",
            obj.get_type().name()?
        )))
    }

    /// Both ends of a copy and their one element kind (TypeError when they differ).
    fn resolve_pair(src: &Bound<'_, PyAny>, dst: &Bound<'_, PyAny>) -> PyResult<((Self, Self), ElemKind)> {
        let (src, src_kind) = Endpoint::resolve("src", src)?;
        let (dst, dst_kind) = Endpoint::resolve("dst", dst)?;
        if src_kind != dst_kind {
            return Err(PyTypeError::new_err(format!(
                "src holds {} slots but dst holds {} slots",
                src_kind.name(),
                dst_kind.name()
            )));
        }
        Ok(((src, dst), src_kind))
    }

    /// Whether both ends are the same buffer or the same file.
    fn same_storage(&self, other: &Endpoint) -> bool {
        match (self, other) {
            (Endpoint::Host(a), Endpoint::Host(b)) => Arc::ptr_eq(a, b),
            (Endpoint::File(a), Endpoint::File(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    fn len_bytes(&self) -> PyResult<u64> {
        match self {
            Endpoint::Host(b) => Ok(b.len() as u64),
            Endpoint::File(f) => f.len_bytes().map_err(error::os),
        }
    }
}

fn released(name: &str) -> PyErr {
    PyRuntimeError::new_err(format!("{name} storage is released"))
}

fn non_negative(name: &str, value: i64) -> PyResult<u64> {
    u64::try_from(value).map_err(|_| PyValueError::new_err(format!("{name} must be non-negative, got {value}")))
}

/// A checked span: `count` slots from `src` slot `src_slot` to `dst` slot `dst_slot`.
pub(crate) struct SpanJob {
    src: Endpoint,
    src_byte: u64,
    dst: Endpoint,
    dst_byte: u64,
    nbytes: u64,
}

impl SpanJob {
    pub(crate) fn new(
        src: &Bound<'_, PyAny>,
        src_slot: i64,
        dst: &Bound<'_, PyAny>,
        dst_slot: i64,
        count: i64,
    ) -> PyResult<Self> {
        let ((src, dst), kind) = Endpoint::resolve_pair(src, dst)?;
        let size = kind.size() as u64;
        let count = non_negative("count", count)?;
        let mut bytes = [0u64; 2];
        for (i, (name, slot, end, storage)) in
            [("src_slot", src_slot, "src", &src), ("dst_slot", dst_slot, "dst", &dst)].into_iter().enumerate()
        {
            let slot = non_negative(name, slot)?;
            let slots = storage.len_bytes()? / size;
            if slot.checked_add(count).is_none_or(|last| last > slots) {
                return Err(PyValueError::new_err(format!(
                    "{count} slots from {name} {slot} run past the end of {end} ({slots} slots)"
                )));
            }
            bytes[i] = slot * size;
        }
        let nbytes = count * size;
        if src.same_storage(&dst) && nbytes > 0 && bytes[0].abs_diff(bytes[1]) < nbytes {
            return Err(PyValueError::new_err("src and dst spans overlap in one storage"));
        }
        Ok(SpanJob { src, src_byte: bytes[0], dst, dst_byte: bytes[1], nbytes })
    }

    /// Runs the span in chunks of `PROGRESS_CHUNK`, counting each into `progress`; a large
    /// span into host memory in parallel `PIECE`s (`SPLIT_MIN`), counting each.
    pub(crate) fn run(self, progress: Option<Arc<Py<TransferProgress>>>) -> Result<(), JobError> {
        let cell = progress.as_ref().map(|p| p.get());
        if let Some(cell) = cell {
            cell.total.store(self.nbytes, Ordering::Relaxed);
        }
        if matches!(self.dst, Endpoint::Host(_)) && self.nbytes >= SPLIT_MIN {
            let pieces = self.nbytes.div_ceil(PIECE) as usize;
            let job = Arc::new(self);
            return engine::run_pieces(pieces, move |k| {
                let at = k as u64 * PIECE;
                let n = (job.nbytes - at).min(PIECE);
                job.run_piece(at, n)?;
                if let Some(progress) = &progress {
                    progress.get().done.fetch_add(n, Ordering::Relaxed);
                }
                Ok(())
            });
        }
        let mut done = 0u64;
        while done < self.nbytes {
            let n = (self.nbytes - done).min(PROGRESS_CHUNK as u64);
            self.run_piece(done, n)?;
            done += n;
            if let Some(cell) = cell {
                cell.done.store(done, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Copies bytes `[at, at + len)` of the span.
    fn run_piece(&self, at: u64, len: u64) -> Result<(), JobError> {
        let (src_byte, dst_byte, n) = (self.src_byte + at, self.dst_byte + at, len as usize);
        let io = |err: io::Error, what: &str| JobError::Io {
            err,
            context: format!("while {what} {len} bytes at byte {at} of a {}-byte span", self.nbytes),
        };
        match (&self.src, &self.dst) {
            (Endpoint::Host(s), Endpoint::Host(d)) => {
                // SAFETY: both ranges were checked inside their live buffers, which this job
                // keeps alive through its `Arc`s; they are disjoint (distinct buffers, or checked
                // non-overlapping in one). Concurrent writers are excluded by the move claims.
                let (from, to) = unsafe { (s.as_ptr().add(src_byte as usize), d.as_ptr().add(dst_byte as usize)) };
                if self.nbytes >= SPLIT_MIN {
                    // The span is split into pieces (`run`), each too small for memcpy to
                    // stream its stores as it would the whole span; stream them here, and
                    // fence before the piece counts as done (another thread commits).
                    // SAFETY: as above, for the `n` bytes of this piece.
                    unsafe { copy::copy_span_streaming(from, to, n) };
                    copy::stream_fence();
                } else {
                    // SAFETY: as above, for the `n` bytes of this piece.
                    unsafe { copy::copy_span_host_to_host(from, to, n) };
                }
                Ok(())
            }
            (Endpoint::Host(s), Endpoint::File(f)) => {
                // SAFETY: the range is inside the live buffer held by this job's `Arc`.
                let src = unsafe { std::slice::from_raw_parts(s.as_ptr().add(src_byte as usize), n) };
                copy::file_write_from_host(f.file(), dst_byte, src).map_err(|e| io(e, "writing"))
            }
            (Endpoint::File(f), Endpoint::Host(d)) => {
                // SAFETY: the range is inside the live buffer held by this job's `Arc`; the move
                // claims keep every other reader and writer off the destination meanwhile.
                let dst = unsafe { std::slice::from_raw_parts_mut(d.as_ptr().add(dst_byte as usize), n) };
                copy::file_read_into_host(f.file(), src_byte, dst).map_err(|e| io(e, "reading"))
            }
            (Endpoint::File(a), Endpoint::File(b)) => {
                copy::file_copy(a.file(), src_byte, b.file(), dst_byte, len).map_err(|e| io(e, "copying"))
            }
        }
    }
}

/// A checked layout copy between two host storages.
pub(crate) struct LayoutJob {
    src: Arc<HostBuffer>,
    src_offset: i64,
    dst: Arc<HostBuffer>,
    dst_offset: i64,
    extents: Vec<i64>,
    strides: Vec<i64>,
    elem_size: usize,
}

impl LayoutJob {
    pub(crate) fn new(
        src: &Bound<'_, PyAny>,
        src_offset: i64,
        dst: &Bound<'_, PyAny>,
        dst_offset: i64,
        extents: Vec<i64>,
        strides: Vec<i64>,
    ) -> PyResult<Self> {
        let ((src, dst), kind) = Endpoint::resolve_pair(src, dst)?;
        let host = |name: &str, end: Endpoint| match end {
            Endpoint::Host(b) => Ok(b),
            Endpoint::File(_) => Err(PyTypeError::new_err(format!("{name} must be a HostStorage"))),
        };
        let (src, dst) = (host("src", src)?, host("dst", dst)?);
        Self::between(src, src_offset, dst, dst_offset, extents, strides, kind.size())
    }

    /// A layout copy between two live host buffers of one element size, every addressed slot
    /// checked inside both.
    pub(crate) fn between(
        src: Arc<HostBuffer>,
        src_offset: i64,
        dst: Arc<HostBuffer>,
        dst_offset: i64,
        extents: Vec<i64>,
        strides: Vec<i64>,
        elem_size: usize,
    ) -> PyResult<Self> {
        let range = plan::addressed_range(&extents, &strides).map_err(error::plan)?;
        if let Some((lo, hi)) = range {
            for (name, offset, buffer) in [("src_offset", src_offset, &src), ("dst_offset", dst_offset, &dst)] {
                let slots = (buffer.len() / elem_size) as i64;
                let inside = matches!((offset.checked_add(lo), offset.checked_add(hi)),
                                      (Some(f), Some(l)) if f >= 0 && l < slots);
                if !inside {
                    return Err(PyValueError::new_err(format!(
                        "the layout at {name} {offset} addresses slots outside the storage ({slots} slots)"
                    )));
                }
            }
            if Arc::ptr_eq(&src, &dst) {
                return Err(PyValueError::new_err("src and dst are the same storage"));
            }
        }
        Ok(LayoutJob { src, src_offset, dst, dst_offset, extents, strides, elem_size })
    }

    pub(crate) fn run(self) -> Result<(), JobError> {
        // A dense layout (a compact one, the bulk of CPU -> CPU moves) is one span of slots,
        // copied as such: in parallel pieces when it is large.
        if let Some(slots) = plan::single_run(&self.extents, &self.strides) {
            let nbytes = (slots * self.elem_size) as u64;
            if nbytes >= SPLIT_MIN {
                let byte = |offset: i64| offset as u64 * self.elem_size as u64; // checked >= 0
                let (src_byte, dst_byte) = (byte(self.src_offset), byte(self.dst_offset));
                let span = SpanJob {
                    src: Endpoint::Host(self.src),
                    src_byte,
                    dst: Endpoint::Host(self.dst),
                    dst_byte,
                    nbytes,
                };
                return span.run(None);
            }
            // A small span: one copy of its bytes, without planning a strided walk.
            let (src_start, dst_start) =
                (self.src_offset as usize * self.elem_size, self.dst_offset as usize * self.elem_size);
            // SAFETY: `between` checked every addressed slot, here `[offset, offset + slots)`,
            // inside both live buffers (offsets are >= 0 there), which this job keeps alive
            // through its `Arc`s; the buffers are distinct, so the ranges cannot overlap, and
            // the move's claims keep other writers off both meanwhile.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.src.as_ptr().add(src_start),
                    self.dst.as_ptr().add(dst_start),
                    nbytes as usize,
                );
            }
            return Ok(());
        }
        // SAFETY: every addressed slot was checked inside both live buffers, which this job
        // keeps alive through its `Arc`s; the buffers are distinct, and the move claims keep
        // other writers off both meanwhile.
        unsafe {
            copy::copy_layout_elements(
                self.src.as_ptr(),
                self.src_offset,
                self.dst.as_ptr(),
                self.dst_offset,
                &self.extents,
                &self.strides,
                self.elem_size,
            )
        }
        .map_err(|e| JobError::Unchecked(e.to_string()))
    }
}

// ---- Python entry points ----

/// Copies `count` slots from `src` slot `src_slot` to `dst` slot `dst_slot` (host or file
/// storages of one element kind), GIL released; OSError on an I/O failure.
#[pyfunction]
fn copy_span(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    src_slot: i64,
    dst: &Bound<'_, PyAny>,
    dst_slot: i64,
    count: i64,
) -> PyResult<()> {
    let job = SpanJob::new(src, src_slot, dst, dst_slot, count)?;
    run_blocking(py, move || job.run(None))
}

/// `copy_span` on an engine worker; then `then(None)` or `then(exc)` with the GIL. With
/// `progress`, the bytes copied so far are counted into it chunk by chunk.
#[pyfunction]
#[pyo3(signature = (src, src_slot, dst, dst_slot, count, then, *, progress=None, commit=None))]
#[allow(clippy::too_many_arguments)]
fn submit_span(
    src: &Bound<'_, PyAny>,
    src_slot: i64,
    dst: &Bound<'_, PyAny>,
    dst_slot: i64,
    count: i64,
    then: &Bound<'_, PyAny>,
    progress: Option<Py<TransferProgress>>,
    commit: Option<Py<MoveCommit>>,
) -> PyResult<()> {
    let job = SpanJob::new(src, src_slot, dst, dst_slot, count)?;
    let progress = progress.map(Arc::new);
    submit_committing(then, commit, move || job.run(progress)).map(drop)
}

/// Copies every slot the flattened layout (`leaf_extents`, `leaf_strides`) addresses,
/// `src_offset + i` to `dst_offset + i`, between two host storages, GIL released.
#[pyfunction]
fn copy_layout(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    src_offset: i64,
    dst: &Bound<'_, PyAny>,
    dst_offset: i64,
    leaf_extents: Vec<i64>,
    leaf_strides: Vec<i64>,
) -> PyResult<()> {
    let job = LayoutJob::new(src, src_offset, dst, dst_offset, leaf_extents, leaf_strides)?;
    run_blocking(py, move || job.run())
}

/// `copy_layout` on an engine worker; then `then(None)` or `then(exc)` with the GIL.
#[pyfunction]
#[pyo3(signature = (src, src_offset, dst, dst_offset, leaf_extents, leaf_strides, then, *, commit=None))]
#[allow(clippy::too_many_arguments)]
fn submit_layout(
    src: &Bound<'_, PyAny>,
    src_offset: i64,
    dst: &Bound<'_, PyAny>,
    dst_offset: i64,
    leaf_extents: Vec<i64>,
    leaf_strides: Vec<i64>,
    then: &Bound<'_, PyAny>,
    commit: Option<Py<MoveCommit>>,
) -> PyResult<()> {
    let job = LayoutJob::new(src, src_offset, dst, dst_offset, leaf_extents, leaf_strides)?;
    submit_committing(then, commit, move || job.run()).map(drop)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TransferProgress>()?;
    m.add_function(wrap_pyfunction!(copy_span, m)?)?;
    m.add_function(wrap_pyfunction!(submit_span, m)?)?;
    m.add_function(wrap_pyfunction!(copy_layout, m)?)?;
    m.add_function(wrap_pyfunction!(submit_layout, m)?)?;
    Ok(())
}
