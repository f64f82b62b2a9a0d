//! The one entry of every public move: `strideweave.move` and `strideweave.move_async` are
//! the two functions of this module.
//!
//! A move starts here and takes the first route that serves it:
//! 1. the fast routes, native end to end, for the built-in pairs at their default routes
//!    (`inline_move::move_inline` for a small move, blocking or asynchronous,
//!    `async_move::move_async_builtin` for a bulk asynchronous one), skipped while per-move
//!    DEBUG logging is on;
//! 2. otherwise the general request (`move_request.rs`), which the Python package starts for
//!    its user-defined hooks, routes and providers: the two functions it registers with
//!    [`configure_move_entry`].
//!
//! Each fast route steps aside, having changed nothing, whenever the general request must
//! decide, so the outcome of a move never depends on which route served it.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;

use crate::{async_move, inline_move};

/// What the Python package hands the entry once, at import.
struct Entry {
    /// The `strideweave.move` logger's own per-level answer cache (logging clears it on every
    /// level change), read before asking `log_enabled`.
    log_cache: Py<PyDict>,
    /// `_move_log.enabled`: whether per-move DEBUG records are wanted now.
    log_enabled: Py<PyAny>,
    /// The DEBUG level's number, the key of `log_cache`.
    debug_level: Py<PyAny>,
    /// The general request's blocking move: `(tensor, destination) -> Tensor`.
    request_move: Py<PyAny>,
    /// The general request's asynchronous move: `(tensor, destination) -> AwaitMove`.
    request_move_async: Py<PyAny>,
}

static ENTRY: PyOnceLock<Entry> = PyOnceLock::new();

/// Registers the general request and the logging switch (once; a second call is refused).
#[pyfunction]
fn configure_move_entry(py: Python<'_>, config: &Bound<'_, PyDict>) -> PyResult<()> {
    let get = |key: &str| -> PyResult<Py<PyAny>> {
        config.get_item(key)?.map(Bound::unbind).ok_or_else(|| PyRuntimeError::new_err(format!("missing {key}")))
    };
    let entry = Entry {
        log_cache: get("log_cache")?.bind(py).cast::<PyDict>()?.clone().unbind(),
        log_enabled: get("log_enabled")?,
        debug_level: get("debug_level")?,
        request_move: get("request_move")?,
        request_move_async: get("request_move_async")?,
    };
    ENTRY.set(py, entry).map_err(|_| PyRuntimeError::new_err("the move entry is configured already"))
}

impl Entry {
    /// Whether per-move DEBUG logging is on: the logger's cached answer, else its own.
    fn logging(&self, py: Python<'_>) -> PyResult<bool> {
        match self.log_cache.bind(py).get_item(self.debug_level.bind(py))? {
            Some(answer) => answer.is_truthy(),
            None => self.log_enabled.bind(py).call0()?.is_truthy(),
        }
    }
}

/// Whether per-move DEBUG logging is on now (the general request's log record needs it).
pub(crate) fn move_logging(py: Python<'_>) -> PyResult<bool> {
    entry(py)?.logging(py)
}

fn entry(py: Python<'_>) -> PyResult<&'static Entry> {
    ENTRY
        .get(py)
        .ok_or_else(|| PyRuntimeError::new_err("strideweave's move entry is not configured (import strideweave)"))
}

/// Blocking move of `tensor` into `destination`: exactly `move_async(tensor, destination).wait()`.
/// Validation and route errors raise before any effect; a failed transfer raises its error
/// with the source live and the destination unclaimed.
#[pyfunction]
#[pyo3(name = "move", text_signature = "(tensor, destination)")]
fn move_blocking(py: Python<'_>, tensor: &Bound<'_, PyAny>, destination: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let entry = entry(py)?;
    if !entry.logging(py)? {
        if let Some(ran) = inline_move::move_inline(py, tensor, destination)? {
            return ran.result;
        }
    }
    Ok(entry.request_move.bind(py).call1((tensor, destination))?.unbind())
}

/// Validate one move, submit every transfer that can start, and return its handle without
/// waiting. Validation and route errors raise here and return no handle.
#[pyfunction]
#[pyo3(text_signature = "(tensor, destination)")]
fn move_async(py: Python<'_>, tensor: &Bound<'_, PyAny>, destination: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let entry = entry(py)?;
    if !entry.logging(py)? {
        if let Some(handle) = async_move::move_async_builtin(py, tensor, destination)? {
            return Ok(handle);
        }
        // A small move costs less than handing it to a worker: it runs here, as the Python
        // request runs its small transfers, and its handle is done when returned.
        if let Some(ran) = inline_move::move_inline(py, tensor, destination)? {
            return async_move::done_handle(py, ran);
        }
    }
    Ok(entry.request_move_async.bind(py).call1((tensor, destination))?.unbind())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(configure_move_entry, m)?)?;
    m.add_function(wrap_pyfunction!(move_blocking, m)?)?;
    m.add_function(wrap_pyfunction!(move_async, m)?)?;
    Ok(())
}
