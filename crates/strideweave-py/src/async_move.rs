//! `_native.move_async_builtin`: the initiation of a bulk `move_async` in one native call, for
//! the built-in pairs: a one-subtensor `Tensor` moved CPU → CPU, CPU → FileBacked or
//! FileBacked → CPU (exact classes, or plain subclasses Python resolved to the pair), over the
//! pair's default route, larger than the transfers run on the caller's thread
//! (`move.INLINE_SLOTS`).
//!
//! It runs the core's own move request (`model::movement::prepare_window_move`, the code a Rust
//! user's moves run) over the two carriers as core carriers (`py_carrier.rs`): the validation
//! table, both claims, the growth of an empty `FileBacked` destination (all three with the GIL
//! released: a file's resize is I/O), then on an engine worker the transfer (the core's
//! `SpanCopy`/`LayoutCopy`, counted into the handle's progress) and the one terminal commit:
//! release the source while it is still claimed, end both claims. All the caller pays is the
//! initiation, a few microseconds.
//!
//! Like the inline move (`inline_move.rs`) it only ever *succeeds* at initiation: whenever the
//! Python request (`carriers/move.py`) must decide (a failed check, whose error and order the
//! Python path owns; an active profiler; a route that is not the default; a subclass with hooks;
//! a carrier a write is storing into), it returns None having changed nothing (a refused
//! request gives back what it took), and `move_async` runs the Python request, which reaches
//! the same outcome or raises.
//!
//! After the submission, a failed transfer or a source whose release fails (its file cannot be
//! deleted) is the core's rollback (a grown destination shrinks back, both claims end, the
//! source stays live), then `MoveRollback` on the worker, with the GIL, clears the autograd
//! node and fails the handle with the error.

use pyo3::exceptions::{PyBaseException, PyRuntimeError};
use pyo3::prelude::*;

use strideweave_core::model::{prepare_window_move, RouteKind};

use crate::carrier_base::CarrierBase;
use crate::commit::MoveCommit;
use crate::engine::{new_handle, AwaitResult};
use crate::error::JobError;
use crate::inline_move::{
    config, core_window, exact_single_view, profiling, record_node, refused_by_hook, result_view, BuiltinPair, Ran,
};
use crate::jobs::submit_committing;
use crate::move_request::request_hooks;
use crate::routes;
use crate::transfer::TransferProgress;

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
    let Some(pair) = BuiltinPair::of_family(cfg, py, &source_type, &destination_type) else {
        return Ok(None);
    };
    let layout = view.layout.bind(py);
    let cosize = layout.get().core().cosize();
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
    let Some((window, into_carrier)) = core_window(view, src, dst, route.get())? else {
        return Ok(None);
    };
    let kind = match pair {
        BuiltinPair::CpuToCpu => RouteKind::HostToHost,
        BuiltinPair::CpuToFile => RouteKind::HostToFile,
        BuiltinPair::FileToCpu => RouteKind::FileToHost,
    };
    // Validation, both claims and the growth of an empty file, GIL released (a resize is I/O).
    let prepared = py.detach(|| prepare_window_move(&window, &into_carrier, Some(kind)));
    let refused = prepared.is_err().then(|| refused_by_hook(&into_carrier, dst)).flatten();
    drop((window, into_carrier));
    let Ok(mut pending) = prepared else {
        return refused.map_or(Ok(None), Err);
    };
    // Past the claims: an early return drops `pending`, which gives back what it took.
    let progress = Py::new(py, TransferProgress::with_total(cosize as u64 * slot_bytes))?;
    pending.count_into(progress.get().counter().clone());
    let handle = new_handle(cfg.await_move.bind(py))?;
    let handle_ref: Py<AwaitResult> = handle.cast::<AwaitResult>()?.clone().unbind();
    handle_ref.get().count_bytes_with(progress.clone_ref(py));
    let output = result_view(cfg, dst, view)?;
    // The node is attached to the result before the copy starts (nobody can reach the result
    // until the handle completes); a failure clears it (`MoveRollback`).
    let node = if recording {
        Some(record_node(cfg, tensor, &output, view, dst, &route, reverse.as_ref())?.unbind())
    } else {
        None
    };
    let publish =
        Py::new(py, MoveCommit::publish(handle_ref.clone_ref(py), output.into_any().unbind(), Some(progress)))?;
    let then = Bound::new(py, MoveRollback { handle: handle.clone().unbind(), node })?;
    let queued = submit_committing(then.as_any(), Some(publish), move || pending.finish().map_err(JobError::Model))?;
    handle_ref.get().completed_by(queued);
    Ok(Some(handle.unbind()))
}

/// The handle of a move that already ran on the caller's thread (`inline_move::move_inline`):
/// done when returned, with the moved Tensor, or with the commit's failure, which an
/// asynchronous move reports through its handle rather than raising. Its byte counter reads
/// the whole span once the move succeeded, as a small transfer's does at completion.
pub(crate) fn done_handle(py: Python<'_>, ran: Ran) -> PyResult<Py<PyAny>> {
    let cfg = config(py).ok_or_else(|| PyRuntimeError::new_err("strideweave's native moves are not configured"))?;
    let handle = new_handle(cfg.await_move.bind(py))?;
    let handle_ref = handle.cast::<AwaitResult>()?;
    let progress = Py::new(py, TransferProgress::with_total(ran.bytes))?;
    match ran.result {
        Ok(moved) => {
            progress.get().complete();
            handle_ref.get().count_bytes_with(progress);
            handle_ref.get().succeed(moved);
        }
        Err(failure) => {
            handle_ref.get().count_bytes_with(progress);
            handle_ref.get().fail(failure.value(py).as_any())?;
        }
    }
    Ok(handle.unbind())
}

/// The failure end of a natively initiated move, called on the worker (with the GIL) when its
/// transfer or its commit's release failed, after the core's rollback: clears the autograd
/// node, then the handle fails with the original exception object.
#[pyclass(frozen, module = "strideweave._native")]
pub struct MoveRollback {
    /// The request's handle.
    handle: Py<PyAny>,
    node: Option<Py<PyAny>>,
}

#[pymethods]
impl MoveRollback {
    fn __call__(&self, py: Python<'_>, error: &Bound<'_, PyAny>) -> PyResult<()> {
        if !error.is_instance_of::<PyBaseException>() {
            return Ok(()); // only failures come here; a success was published on the worker
        }
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
