//! Running copy work for Python, in one place: on the calling thread with the GIL released
//! (`run_blocking`), or on an engine worker that then reports to a Python callable
//! (`submit_job`); what went wrong travels as a `JobError` and becomes the Python exception
//! in `error::job`. Every transfer module (`transfer.rs`, `tiles.rs`) and the storages use these,
//! so an I/O error reads the same (OSError with its errno, plus a note saying what was being
//! done) and a panic never unwinds into the engine or into Python.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use parking_lot::Mutex;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use strideweave_core::engine;

use crate::commit::MoveCommit;
use crate::error::{self, JobError};

/// `storage.rs` still imports the OS-error mapping from here.
pub(crate) use crate::error::os as os_error;

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
    py.detach(|| run_guarded(work)).map_err(|e| error::job(py, e))
}

/// Queues `work` on the engine's copy lane; afterwards calls `then(None)` or `then(exc)` with
/// the GIL held. An exception from `then` goes to `sys.unraisablehook`. Whatever `work` owns
/// (the storages it holds) is dropped before Python hears of the outcome, so a commit that
/// releases them frees their memory at once.
pub fn submit_job<F>(then: &Bound<'_, PyAny>, work: F) -> PyResult<()>
where
    F: FnOnce() -> Result<(), JobError> + Send + 'static,
{
    submit_committing(then, None, work).map(drop)
}

/// A job queued on the engine that whichever thread comes first runs: the worker it was
/// queued for, or a thread about to block until it is done (`AwaitResult.wait()`, see
/// `engine.rs`). A blocking move is `move_async(...).wait()`: its caller reaches `wait()`
/// within microseconds, usually before the woken worker is running (waking a thread on an
/// idle core of a virtual machine takes tens of microseconds, and milliseconds when that core
/// is busy), and then copies on its own thread instead of sleeping until the worker is done
/// and wakes it in turn.
pub(crate) struct QueuedJob(Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl QueuedJob {
    /// Runs the job here unless another thread already took it; true when it ran here. A
    /// panic is contained, as the engine's workers contain it.
    pub(crate) fn run(&self) -> bool {
        let job = self.0.lock().take();
        job.map(|job| drop(catch_unwind(AssertUnwindSafe(job)))).is_some()
    }
}

/// `submit_job`, but a successful job is committed by `commit` on the worker without the GIL
/// (commit.rs), and `then` hears only of a failure: of the job, or of the commit's release.
/// The job is queued as a `QueuedJob`, which a waiting thread may run instead.
pub fn submit_committing<F>(
    then: &Bound<'_, PyAny>,
    commit: Option<Py<MoveCommit>>,
    work: F,
) -> PyResult<Arc<QueuedJob>>
where
    F: FnOnce() -> Result<(), JobError> + Send + 'static,
{
    if !then.is_callable() {
        return Err(PyTypeError::new_err("then must be callable"));
    }
    let then = then.clone().unbind();
    let queued = Arc::new(QueuedJob(Mutex::new(Some(Box::new(move || {
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
            // Moved in, so that the commit (its request's carriers and handle) is released
            // while attached rather than parked in PyO3's deferred pool until some later call.
            let _commit = commit;
            let arg = match result {
                Ok(()) => py.None(),
                Err(e) => error::job(py, e).into_value(py).into_any(),
            };
            if let Err(e) = then.call1(py, (arg,)) {
                e.write_unraisable(py, Some(then.bind(py)));
            }
        });
    })))));
    let on_worker = queued.clone();
    engine::submit(move || {
        on_worker.run();
    });
    Ok(queued)
}
