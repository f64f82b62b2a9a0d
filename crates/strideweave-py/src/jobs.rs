//! Running copy work for Python, in one place: on the calling thread with the GIL released
//! (`run_blocking`), or on an engine worker that then reports to a Python callable
//! (`submit_job`), and turning what went wrong into the Python exception (`JobError`,
//! `os_error`). Every transfer module (`transfer.rs`, `tiles.rs`) and the storages use these,
//! so an I/O error reads the same (OSError with its errno, plus a note saying what was being
//! done) and a panic never unwinds into the engine or into Python.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use strideweave_core::engine;

use crate::commit::MoveCommit;

/// OSError(errno, strerror) for OS errors, so Python maps errno to the usual subclass and
/// callers can test `e.errno` (ENOSPC stays errno 28); a plain OSError(message) for the rest
/// (a short file, …).
pub fn os_error(err: io::Error) -> PyErr {
    match err.raw_os_error() {
        Some(code) => {
            let text = io::Error::from_raw_os_error(code).to_string();
            let strerror = text.split(" (os error").next().unwrap_or(&text).to_owned();
            PyOSError::new_err((code, strerror))
        }
        None => PyOSError::new_err(err.to_string()),
    }
}

/// Why a copy job failed, carried from the worker to the GIL-holding side.
pub enum JobError {
    /// An I/O error, and what the job was doing when it happened.
    Io { err: io::Error, context: String },
    /// A panic in the job (a defect), with its message.
    Panic(String),
}

impl JobError {
    pub fn into_pyerr(self, py: Python<'_>) -> PyErr {
        match self {
            JobError::Io { err, context } => {
                let e = os_error(err);
                // A note keeps OSError's (errno, strerror) shape intact while saying what failed.
                let _ = e.add_note(py, context);
                e
            }
            JobError::Panic(msg) => PyRuntimeError::new_err(format!("internal error in engine copy job: {msg}")),
        }
    }
}

/// Runs `work`, turning a panic into `JobError::Panic`.
fn run_guarded<F>(work: F) -> Result<(), JobError>
where
    F: FnOnce() -> Result<(), JobError>,
{
    match catch_unwind(AssertUnwindSafe(work)) {
        Ok(r) => r,
        Err(p) => Err(JobError::Panic(
            p.downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".to_owned()),
        )),
    }
}

/// Runs `work` on this thread with the GIL released; raises its failure.
pub fn run_blocking<F>(py: Python<'_>, work: F) -> PyResult<()>
where
    F: FnOnce() -> Result<(), JobError> + Send,
{
    py.detach(|| run_guarded(work)).map_err(|e| e.into_pyerr(py))
}

/// Queues `work` on the engine's copy lane; afterwards calls `then(None)` or `then(exc)` with
/// the GIL held. An exception from `then` goes to `sys.unraisablehook`. Whatever `work` owns
/// (the storages it holds) is dropped before Python hears of the outcome, so a commit that
/// releases them frees their memory at once.
pub fn submit_job<F>(then: &Bound<'_, PyAny>, work: F) -> PyResult<()>
where
    F: FnOnce() -> Result<(), JobError> + Send + 'static,
{
    submit_committing(then, None, work)
}

/// `submit_job`, but a successful job is committed by `commit` on the worker without the GIL
/// (commit.rs), and `then` hears only of a failure: of the job, or of the commit's release.
pub fn submit_committing<F>(then: &Bound<'_, PyAny>, commit: Option<Py<MoveCommit>>, work: F) -> PyResult<()>
where
    F: FnOnce() -> Result<(), JobError> + Send + 'static,
{
    if !then.is_callable() {
        return Err(PyTypeError::new_err("then must be callable"));
    }
    let then = then.clone().unbind();
    engine::submit(move || {
        let mut result = run_guarded(work);
        if let (Ok(()), Some(commit)) = (&result, &commit) {
            match commit.get().finish() {
                Ok(()) => return,
                Err(err) => {
                    result = Err(JobError::Io { err, context: "releasing the moved source".into() });
                }
            }
        }
        Python::try_attach(move |py| {
            let arg = match result {
                Ok(()) => py.None(),
                Err(e) => e.into_pyerr(py).into_value(py).into_any(),
            };
            if let Err(e) = then.call1(py, (arg,)) {
                e.write_unraisable(py, Some(then.bind(py)));
            }
        });
    });
    Ok(())
}
