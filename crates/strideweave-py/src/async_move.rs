//! `_native.move_async_builtin`: the initiation of a bulk `move_async` in one native call, for
//! the built-in pairs: a one-subtensor `Tensor` moved CPU → CPU, CPU → FileBacked or
//! FileBacked → CPU (exact classes), over the pair's default route, larger than the transfers
//! run on the caller's thread (`move.INLINE_SLOTS`).
//!
//! The copy of such a move runs on an engine worker and the worker commits it (`commit.rs`),
//! so all the caller pays is the initiation: validation, claims, the destination's growth, the
//! handle, the result Tensor, the autograd node, the submission. In Python that took about
//! 100 µs of the caller's CPU, slowed further by the copy it had just started competing for
//! the caches; here it is a few microseconds.
//!
//! Like the inline move (`inline_move.rs`) it only ever *succeeds*: whenever the Python
//! request (`carriers/move.py`) must decide (a failed check, whose error and order the Python
//! path owns; an active profiler; a route that is not the default; a subclass; a carrier a
//! write is storing into; a growth or a job that cannot be set up), it returns None having changed nothing, and
//! `move_async` runs the Python request, which reaches the same outcome or raises.
//!
//! Atomicity: both claims are taken in one transition of the carriers' state cells (the core's
//! `StateCell::claim_array`, which checks them too), so of two racing requests exactly one claims and the other raises
//! RuntimeError on the Python path. The claim is the
//! request's handle. Every step after the claims that can fail undoes them (and a growth)
//! before stepping aside; a failure of the submitted copy, or of the commit's release, is
//! undone by `MoveRollback` on the worker, which then fails the handle.

use pyo3::exceptions::PyBaseException;
use pyo3::intern;
use pyo3::prelude::*;
use std::sync::Arc;

use crate::carrier_base::CarrierBase;
use crate::carrier_state::drop_claim;
use crate::commit::MoveCommit;
use crate::engine::{new_handle, AwaitResult};
use crate::inline_move::{carriers_accept, claim_both, config, exact_single_view, profiling, result_view, BuiltinPair};
use crate::jobs::submit_committing;
use crate::move_request::request_hooks;
use crate::routes;
use crate::tensor_base::View;
use crate::transfer::{LayoutJob, SpanJob, TransferProgress};

/// The request's effects so far, undone on drop unless `keep` was called: both claims, and a
/// destination the request grew (shrunk back to 0, as the Python request's `_restore` does).
struct Taken<'py> {
    source: Bound<'py, CarrierBase>,
    destination: Bound<'py, CarrierBase>,
    claim: Bound<'py, PyAny>,
    grown: Option<Bound<'py, PyAny>>,
    kept: bool,
}

impl Taken<'_> {
    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        if let Some(storage) = &self.grown {
            // Best effort, as in `_restore`: the destination stays claimed until it is done.
            let _ = storage.call_method1(intern!(storage.py(), "resize"), (0,));
        }
        drop_claim(self.source.get(), &self.claim);
        drop_claim(self.destination.get(), &self.claim);
    }
}

/// The storage object of a built-in carrier.
fn storage_of<'py>(carrier: &Bound<'py, CarrierBase>) -> Option<Bound<'py, PyAny>> {
    carrier.get().storage.get(carrier.py()).map(|s| s.into_bound(carrier.py()))
}

/// Checks the destination against the request and claims both carriers for `claim`. None,
/// nothing changed, when the Python path must decide. On success, the claims and whether the (empty, FileBacked) destination must grow.
fn check_and_claim<'py>(
    view: &View,
    source: &Bound<'py, CarrierBase>,
    destination: &Bound<'py, CarrierBase>,
    claim: &Bound<'py, PyAny>,
    pair: BuiltinPair,
    cosize: i64,
) -> PyResult<Option<(Taken<'py>, bool)>> {
    let py = source.py();
    if !carriers_accept(view, source, destination)? {
        return Ok(None);
    }
    let Some(storage) = storage_of(destination) else {
        return Ok(None);
    };
    let size: i64 = storage.getattr(intern!(py, "count"))?.extract()?;
    let grow = size < cosize;
    // An empty FileBacked grows to the moved span; a CPU carrier never grows.
    if grow && (size != 0 || pair != BuiltinPair::CpuToFile) {
        return Ok(None); // too small: ValueError
    }
    // A worker committing another move releases its source and drops its claim in one
    // transition of the cell, so it cannot slip in between these checks and the claims.
    if !claim_both(source, destination, || claim.clone().unbind()) {
        return Ok(None);
    }
    let taken = Taken {
        source: source.clone(),
        destination: destination.clone(),
        claim: claim.clone(),
        grown: None,
        kept: false,
    };
    Ok(Some((taken, grow)))
}

/// The worker's job for a pair: a layout copy host to host, else the cosize span.
enum Job {
    Layout(LayoutJob),
    Span(SpanJob, Arc<Py<TransferProgress>>),
}

/// `move_async(tensor, destination)` when this path applies (see the module docs): the
/// pending `AwaitMove`, or None with nothing changed. `move_entry::move_async`'s fast route.
pub(crate) fn move_async_builtin(
    py: Python<'_>,
    tensor: &Bound<'_, PyAny>,
    destination: &Bound<'_, PyAny>,
) -> PyResult<Option<Py<PyAny>>> {
    let Some(cfg) = config(py) else {
        return Ok(None);
    };
    if profiling() {
        return Ok(None);
    }
    let Some(view) = exact_single_view(cfg, tensor) else {
        return Ok(None);
    };
    let source = view.carrier.bind(py);
    if source.is(destination) {
        return Ok(None);
    }
    let (source_type, destination_type) = (source.get_type(), destination.get_type());
    let Some(pair) = BuiltinPair::of(cfg, py, &source_type, &destination_type) else {
        return Ok(None);
    };
    let layout = view.layout.bind(py).get().core();
    let cosize = layout.cosize();
    let dtype = view.dtype.bind(py);
    let recording = cfg.records(py, dtype);
    let Some(slot_bytes) = cfg.slot_bytes(dtype) else {
        return Ok(None);
    };
    if cosize <= cfg.max_slots {
        return Ok(None);
    }
    // The pair's cached route decision, and a recorded move's reverse (backward's route):
    // served here only while both are the built-in pair's default.
    let Some((route, reverse)) = routes::native_routes(py, &source_type, &destination_type, recording) else {
        return Ok(None);
    };
    let (Ok(src), Ok(dst)) = (source.cast::<CarrierBase>(), destination.cast::<CarrierBase>()) else {
        return Ok(None);
    };
    let handle = new_handle(cfg.await_move.bind(py))?;
    let Some((mut taken, grow)) = check_and_claim(view, src, dst, &handle, pair, cosize)? else {
        return Ok(None);
    };
    // Past the claims: every early return below drops `taken`, which undoes them.
    let (Some(src_storage), Some(dst_storage)) = (storage_of(src), storage_of(dst)) else {
        return Ok(None);
    };
    if grow {
        // Outside the lock (it releases the GIL for the file's resize), as in the Python
        // request; both carriers are claimed meanwhile.
        taken.grown = Some(dst_storage.clone());
        if dst_storage.call_method1(intern!(py, "resize"), (cosize,)).is_err() {
            return Ok(None); // the Python request grows it again and raises that failure
        }
    }
    let progress = Py::new(py, TransferProgress::with_total(cosize as u64 * slot_bytes))?;
    let job = match pair {
        BuiltinPair::CpuToCpu => LayoutJob::new(
            &src_storage,
            view.offset,
            &dst_storage,
            0,
            layout.leaf_extents().to_vec(),
            layout.leaf_strides().to_vec(),
        )
        .map(Job::Layout),
        BuiltinPair::CpuToFile | BuiltinPair::FileToCpu => {
            SpanJob::new(&src_storage, view.offset, &dst_storage, 0, cosize)
                .map(|job| Job::Span(job, Arc::new(progress.clone_ref(py))))
        }
    };
    let Ok(job) = job else {
        return Ok(None); // the Python request submits it and fails its handle with the error
    };
    handle.cast::<AwaitResult>()?.get().count_bytes_with(progress.clone_ref(py));
    let output = result_view(cfg, dst, view)?;
    // The node is attached to the result before the copy starts (nobody can reach the result
    // until the handle completes); a failure clears it (`MoveRollback`).
    let node = if recording {
        Some(cfg.record.bind(py).call1((tensor, &output, source, dst, view.layout.bind(py), route, reverse))?.unbind())
    } else {
        None
    };
    let handle_ref: Py<AwaitResult> = handle.cast::<AwaitResult>()?.clone().unbind();
    let commit = MoveCommit::new(
        src,
        dst.clone().unbind(),
        handle_ref.clone_ref(py),
        output.into_any().unbind(),
        Some(progress),
    )?;
    let rollback = MoveRollback {
        source: src.clone().unbind(),
        destination: dst.clone().unbind(),
        handle: handle.clone().unbind(),
        grown: taken.grown.as_ref().map(|s| s.clone().unbind()),
        node,
    };
    let then = Bound::new(py, rollback)?;
    let commit = Some(Py::new(py, commit)?);
    let queued = match job {
        Job::Layout(job) => submit_committing(then.as_any(), commit, move || job.run())?,
        Job::Span(job, progress) => submit_committing(then.as_any(), commit, move || job.run(Some(progress)))?,
    };
    handle_ref.get().completed_by(queued);
    taken.keep();
    Ok(Some(handle.unbind()))
}

/// The failure end of a natively initiated move, called on the worker (with the GIL) when its
/// copy or its commit's release failed: what the Python request's `_commit` does on failure
/// (shrink a grown destination, drop both claims, clear the autograd node), then the handle
/// fails with the original exception object.
#[pyclass(frozen, module = "strideweave._native")]
pub struct MoveRollback {
    source: Py<CarrierBase>,
    destination: Py<CarrierBase>,
    /// The request's handle, which is also its claim.
    handle: Py<PyAny>,
    /// The destination's storage when the request grew it.
    grown: Option<Py<PyAny>>,
    node: Option<Py<PyAny>>,
}

#[pymethods]
impl MoveRollback {
    fn __call__(&self, py: Python<'_>, error: &Bound<'_, PyAny>) -> PyResult<()> {
        if !error.is_instance_of::<PyBaseException>() {
            return Ok(()); // only failures come here; a success was committed on the worker
        }
        drop(Taken {
            source: self.source.bind(py).clone(),
            destination: self.destination.bind(py).clone(),
            claim: self.handle.bind(py).clone(),
            grown: self.grown.as_ref().map(|s| s.bind(py).clone()),
            kept: false,
        });
        let hooks = request_hooks(py)?;
        if let Some(node) = &self.node {
            hooks.clear(node.bind(py))?;
        }
        hooks.fail(self.handle.bind(py), error)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MoveRollback>()?;
    Ok(())
}
