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
//! descriptors, and runs the core's transfers (`strideweave_core::transfer`: `SpanCopy`,
//! `LayoutCopy`, the code the object model's moves run): each checks every range against the
//! live storage before anything is written and then holds the storage's buffer or file by
//! `Arc` for the whole job. A concurrent release of
//! the carrier only drops the carrier's own reference, so a running copy can never touch freed
//! memory or a closed descriptor. Who may copy what, and when, is decided by the carrier claims
//! of the move layer; this module only guarantees memory safety.

use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use strideweave_core::model::ClaimedHost;
use strideweave_core::storage::{ElemKind, HostBuffer};
use strideweave_core::transfer::{Endpoint, LayoutCopy, Progress, SpanCopy, TransferError};

use crate::carrier_base::CarrierBase;
use crate::commit::MoveCommit;
use crate::error::JobError;
use crate::inline_move::{exact_single_view, Config};
use crate::jobs::{run_blocking, submit_committing};
use crate::storage::{FileStorage, HostStorage};

// ---- progress ----

/// Bytes done and in total of one transfer (the core's `transfer::Progress`), updated by the
/// transfer after every chunk and read by any thread (an `AwaitMove`'s `bytes_done`, a
/// progress bar).
#[pyclass(frozen, module = "strideweave._native")]
pub struct TransferProgress {
    inner: Arc<Progress>,
}

impl TransferProgress {
    /// Nothing done yet of `total` bytes.
    pub(crate) fn with_total(total: u64) -> Self {
        TransferProgress { inner: Arc::new(Progress::new(total)) }
    }

    /// The counter a core transfer counts into.
    pub(crate) fn counter(&self) -> &Arc<Progress> {
        &self.inner
    }

    /// The transfer's size in bytes.
    pub(crate) fn total_bytes(&self) -> u64 {
        self.inner.total()
    }

    /// Done equals total (a committed transfer).
    pub(crate) fn complete(&self) {
        self.inner.complete();
    }
}

#[pymethods]
impl TransferProgress {
    #[new]
    fn new() -> Self {
        TransferProgress { inner: Arc::new(Progress::new(0)) }
    }

    #[getter]
    fn done(&self) -> u64 {
        self.inner.done()
    }

    #[getter]
    fn total(&self) -> u64 {
        self.inner.total()
    }

    /// Set both figures (the framework's own record for transfers it does not run here).
    fn set(&self, done: u64, total: u64) {
        self.inner.set(done, total);
    }

    fn __repr__(&self) -> String {
        format!("TransferProgress(done={}, total={})", self.done(), self.total())
    }
}

// ---- the storages a transfer holds ----

/// The live storage behind `obj` as a transfer's endpoint, and its element kind; TypeError for
/// anything but a built-in storage, RuntimeError for a released one.
fn endpoint(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<(Endpoint, ElemKind)> {
    if let Ok(host) = obj.cast::<HostStorage>() {
        let host = host.get();
        let buffer = host.buffer().ok_or_else(|| released(name))?;
        return Ok((Endpoint::Host(claimed(buffer)), host.kind()));
    }
    if let Ok(file) = obj.cast::<FileStorage>() {
        let file = file.get();
        let store = file.store().ok_or_else(|| released(name))?;
        return Ok((Endpoint::File(store), file.kind()));
    }
    Err(PyTypeError::new_err(format!("{name} must be a HostStorage or FileStorage, not {}", obj.get_type().name()?)))
}

/// A built-in carrier's host buffer as a transfer endpoint.
pub(crate) fn claimed(buffer: Arc<HostBuffer>) -> ClaimedHost {
    // SAFETY: `ClaimedHost::new`'s contract, as the Python move layer keeps it: these entry
    // points copy between the storages of carriers a move claims (or a composite owns and
    // holds its own claim on), and every write of a claimed carrier through the framework is
    // refused meanwhile (the state cell); the `Arc` keeps the buffer allocated.
    unsafe { ClaimedHost::new(buffer) }
}

/// Both ends of a copy and their one element kind (TypeError when they differ).
fn endpoints(src: &Bound<'_, PyAny>, dst: &Bound<'_, PyAny>) -> PyResult<((Endpoint, Endpoint), ElemKind)> {
    let (src, src_kind) = endpoint("src", src)?;
    let (dst, dst_kind) = endpoint("dst", dst)?;
    if src_kind != dst_kind {
        return Err(PyTypeError::new_err(format!(
            "src holds {} slots but dst holds {} slots",
            src_kind.name(),
            dst_kind.name()
        )));
    }
    Ok(((src, dst), src_kind))
}

fn released(name: &str) -> PyErr {
    PyRuntimeError::new_err(format!("{name} storage is released"))
}

fn non_negative(name: &str, value: i64) -> PyResult<u64> {
    u64::try_from(value).map_err(|_| PyValueError::new_err(format!("{name} must be non-negative, got {value}")))
}

/// A refusal of a transfer's constructor (its ranges) as ValueError; anything else as the
/// job's failure would be.
fn refused(e: TransferError) -> PyErr {
    match e {
        TransferError::Range(msg) => PyValueError::new_err(msg),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// The checked span of `count` slots between two storage objects.
fn span(
    src: &Bound<'_, PyAny>,
    src_slot: i64,
    dst: &Bound<'_, PyAny>,
    dst_slot: i64,
    count: i64,
) -> PyResult<SpanCopy> {
    let ((src, dst), kind) = endpoints(src, dst)?;
    let count = non_negative("count", count)?;
    let (src_slot, dst_slot) = (non_negative("src_slot", src_slot)?, non_negative("dst_slot", dst_slot)?);
    SpanCopy::new(src, src_slot, dst, dst_slot, count, kind.size()).map_err(refused)
}

/// The checked layout copy between two host storage objects.
fn layout_copy(
    src: &Bound<'_, PyAny>,
    src_offset: i64,
    dst: &Bound<'_, PyAny>,
    dst_offset: i64,
    extents: Vec<i64>,
    strides: Vec<i64>,
) -> PyResult<LayoutCopy<'static>> {
    let ((src, dst), kind) = endpoints(src, dst)?;
    let host = |name: &str, end: Endpoint| match end {
        Endpoint::Host(b) => Ok(b),
        _ => Err(PyTypeError::new_err(format!("{name} must be a HostStorage"))),
    };
    let (src, dst) = (host("src", src)?, host("dst", dst)?);
    LayoutCopy::new(src, src_offset, dst, dst_offset, extents, strides, kind.size()).map_err(refused)
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
    let job = span(src, src_slot, dst, dst_slot, count)?;
    run_blocking(py, move || job.run(None).map_err(JobError::from))
}

/// `copy_span` on an engine worker; then `then(None)` or `then(exc)` with the GIL. With
/// `progress`, the bytes copied so far are counted into it chunk by chunk. With `alone`, on
/// that worker only, not split over idle ones (a prefetch beside the caller's compute).
#[pyfunction]
#[pyo3(signature = (src, src_slot, dst, dst_slot, count, then, *, progress=None, commit=None, alone=false))]
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
    alone: bool,
) -> PyResult<()> {
    let job = span(src, src_slot, dst, dst_slot, count)?;
    let progress = progress.map(|p| p.get().counter().clone());
    if alone {
        // Offered before it is queued: a caller that waits for it at once copies beside the
        // lane thread, or before it starts.
        let offered = job.offer_alone(progress);
        return submit_committing(then, commit, move || offered.run().map_err(JobError::from)).map(drop);
    }
    submit_committing(then, commit, move || job.run(progress.as_ref()).map_err(JobError::from)).map(drop)
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
    let job = layout_copy(src, src_offset, dst, dst_offset, leaf_extents, leaf_strides)?;
    run_blocking(py, move || job.run(None).map_err(JobError::from))
}

/// The elementwise operation's transfer of a general move run here, as `copy_layout` runs it
/// for `ElementwiseMoveOperation` (the request's `_submit`), without the round trip through
/// Python: the `cosize` window of `tensor` at its offset copied to slot 0 of `destination`,
/// GIL released. None, with nothing done, unless the tensor is exactly a `Tensor` (a subclass
/// may answer its layout and offset otherwise) of one subtensor of at most `INLINE_SLOTS`
/// slots and both carriers are `CPU`s (whose `_sw_storage` is their storage slot) holding live
/// host storage of one element kind; the Python submission then decides, as it always did.
pub(crate) fn elementwise_host_copy(
    cfg: &Config,
    tensor: &Bound<'_, PyAny>,
    destination: &Bound<'_, CarrierBase>,
) -> Option<PyResult<()>> {
    let py = tensor.py();
    let view = exact_single_view(cfg, tensor)?;
    let layout = view.layout.bind(py).get().core();
    if layout.cosize() > cfg.max_slots {
        return None;
    }
    let source = view.carrier.bind(py).cast::<CarrierBase>().ok()?;
    let cpu = cfg.cpu.bind(py);
    let host = |carrier: &Bound<'_, CarrierBase>| {
        if !carrier.is_instance(cpu).unwrap_or(false) {
            return None;
        }
        carrier.get().storage.get(py).and_then(|s| s.into_bound(py).cast_into::<HostStorage>().ok())
    };
    let (src, dst) = (host(source)?, host(destination)?);
    if src.get().kind() != dst.get().kind() {
        return None;
    }
    let job = layout_copy(
        src.as_any(),
        view.offset,
        dst.as_any(),
        0,
        layout.leaf_extents().to_vec(),
        layout.leaf_strides().to_vec(),
    );
    Some(job.and_then(|job| run_blocking(py, move || job.run(None).map_err(JobError::from))))
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
    let job = layout_copy(src, src_offset, dst, dst_offset, leaf_extents, leaf_strides)?;
    submit_committing(then, commit, move || job.run(None).map_err(JobError::from)).map(drop)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TransferProgress>()?;
    m.add_function(wrap_pyfunction!(copy_span, m)?)?;
    m.add_function(wrap_pyfunction!(submit_span, m)?)?;
    m.add_function(wrap_pyfunction!(copy_layout, m)?)?;
    m.add_function(wrap_pyfunction!(submit_layout, m)?)?;
    Ok(())
}
