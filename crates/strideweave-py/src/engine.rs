//! `AwaitResult` and the engine's submit functions, on `strideweave._native`.
//!
//! `AwaitResult` is the public, read-only completion base; the framework defines
//! `AwaitMove`, `AwaitProjection`, `AwaitResidency` as Python subclasses and creates
//! instances only through `new_completion(cls)`. Its terminal state lives in a core
//! [`Completion`], so `wait()` blocks with the GIL released and any thread may commit.
//!
//! `submit_python` runs framework commit work on an engine worker with the GIL. The copies
//! themselves live in `transfer.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyBaseException, PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};
use pyo3::PyTraverseError;
use strideweave_core::engine::{self, Completion};

/// How often a blocked `wait()` wakes to let a pending KeyboardInterrupt through.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The private constructor token: only code holding it (this module) can create handles.
static TOKEN: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn token(py: Python<'_>) -> &Bound<'_, PyAny> {
    TOKEN
        .get_or_init(py, || {
            // A fresh plain `object()`: unforgeable and unreachable from Python code.
            py.import("builtins")
                .and_then(|b| b.getattr("object"))
                .and_then(|o| o.call0())
                .expect("object() cannot fail")
                .unbind()
        })
        .bind(py)
}

/// A handle's terminal state: the value `wait()` returns, or the exception it raises.
enum Outcome {
    Value(Py<PyAny>),
    Error {
        exc: Py<PyAny>,
        /// `exc.__traceback__` when recorded; restored before each raise so repeated waits do
        /// not keep growing one traceback chain.
        tb: Py<PyAny>,
    },
}

/// Read-only completion handle of one asynchronous framework operation.
///
/// `done` is true exactly once a terminal success or failure is recorded. `wait()` blocks
/// until then and returns the completed value (the same object every time) or raises the
/// recorded exception (the same exception object every time). There is no coroutine protocol.
/// Handles are created by the framework (`move_async`, tiled projection and residency), never
/// by calling the class.
#[pyclass(
    subclass,
    frozen,
    weakref,
    module = "strideweave",
    name = "AwaitResult"
)]
pub struct AwaitResult {
    cell: Arc<Completion<Outcome>>,
}

impl AwaitResult {
    fn outcome_to_result(py: Python<'_>, outcome: &Outcome) -> PyResult<Py<PyAny>> {
        match outcome {
            Outcome::Value(v) => Ok(v.clone_ref(py)),
            Outcome::Error { exc, tb } => {
                let exc = exc.bind(py);
                // Best effort: a failing setattr must not replace the recorded failure.
                let _ = exc.setattr("__traceback__", tb.bind(py));
                Err(PyErr::from_value(exc.clone()))
            }
        }
    }

    /// Blocks with the GIL released until terminal or `deadline`; `true` when terminal.
    /// Wakes periodically so Ctrl-C in the main thread interrupts a long wait.
    fn block_until(&self, py: Python<'_>, deadline: Option<Instant>) -> PyResult<bool> {
        loop {
            if self.cell.is_done() {
                return Ok(true);
            }
            let slice = match deadline {
                None => SIGNAL_POLL,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    left.min(SIGNAL_POLL)
                }
            };
            let cell = &self.cell;
            if py.detach(|| cell.wait_timeout(slice).is_some()) {
                return Ok(true);
            }
            py.check_signals()?;
        }
    }

    /// Records `outcome` if the handle is pending; runs the done-callbacks on this thread.
    fn commit(&self, outcome: Outcome) -> bool {
        self.cell.commit(outcome)
    }
}

#[pymethods]
impl AwaitResult {
    /// Refuses construction by anyone but the framework (see `new_completion`).
    #[new]
    #[classmethod]
    #[pyo3(signature = (*args, **kwargs))]
    fn py_new(
        cls: &Bound<'_, PyType>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Self> {
        let py = cls.py();
        let authorised = args.len() == 1
            && kwargs.is_none_or(|k| k.is_empty())
            && args.get_item(0)?.is(token(py));
        if !authorised {
            return Err(PyTypeError::new_err(format!(
                "cannot create '{}' instances: completion handles are returned by the framework \
                 (for example move_async), not constructed",
                cls.name()?
            )));
        }
        Ok(AwaitResult {
            cell: Arc::new(Completion::new()),
        })
    }

    /// Lets the cycle collector see the recorded outcome: a failure's traceback frames often
    /// refer back to the handle, and such a cycle would otherwise never be freed. Pending
    /// done-callbacks are opaque on purpose: they keep a pending handle alive until commit.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self.cell.get() {
            None => Ok(()),
            Some(Outcome::Value(v)) => visit.call(v),
            Some(Outcome::Error { exc, tb }) => {
                visit.call(exc)?;
                visit.call(tb)
            }
        }
    }

    /// Whether a terminal success or failure has been recorded. Never blocks.
    #[getter]
    fn done(&self) -> bool {
        self.cell.is_done()
    }

    /// Blocks until the operation is terminal, then returns its value or raises its failure.
    ///
    /// Every call, from any thread, observes the same outcome: the identical result object,
    /// or the identical exception object. The GIL is released while blocked.
    fn wait(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.block_until(py, None)?;
        let outcome = self
            .cell
            .get()
            .expect("block_until(None) returns only when terminal");
        Self::outcome_to_result(py, outcome)
    }

    /// `AwaitResult[T]` names the handle type completing with `T` (typing only).
    #[classmethod]
    fn __class_getitem__(cls: &Bound<'_, PyType>, item: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = cls.py();
        let alias = py.import("types")?.getattr("GenericAlias")?;
        Ok(alias.call1((cls, item))?.unbind())
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let state = match slf.get().cell.get() {
            None => "pending",
            Some(Outcome::Value(_)) => "done",
            Some(Outcome::Error { .. }) => "failed",
        };
        Ok(format!("<{} {}>", slf.get_type().name()?, state))
    }

    // ---- framework-internal surface (underscore names) ----

    /// Records a successful terminal value. Returns False, changing nothing, if the handle
    /// was already terminal.
    fn _succeed(&self, value: Py<PyAny>) -> bool {
        self.commit(Outcome::Value(value))
    }

    /// Records `exc` (an exception instance) as the terminal failure. Returns False,
    /// changing nothing, if the handle was already terminal.
    fn _fail(&self, exc: &Bound<'_, PyAny>) -> PyResult<bool> {
        if !exc.is_instance_of::<PyBaseException>() {
            return Err(PyTypeError::new_err(format!(
                "exc must be an exception instance, not {}",
                exc.get_type().name()?
            )));
        }
        let tb = exc.getattr("__traceback__")?.unbind();
        Ok(self.commit(Outcome::Error {
            exc: exc.clone().unbind(),
            tb,
        }))
    }

    /// Runs `fn(handle)` exactly once after the terminal commit, on the committing thread
    /// (immediately, on this thread, when already terminal). An exception from `fn` is
    /// reported through `sys.unraisablehook` and does not affect the handle.
    ///
    /// The pending callback holds the handle strongly until the commit, so a registered
    /// handle stays alive until it completes even if every caller reference is dropped.
    fn _add_done_callback(slf: &Bound<'_, Self>, r#fn: &Bound<'_, PyAny>) -> PyResult<()> {
        if !r#fn.is_callable() {
            return Err(PyTypeError::new_err("fn must be callable"));
        }
        let callback = r#fn.clone().unbind();
        let handle: Py<PyAny> = slf.clone().into_any().unbind();
        slf.get().cell.on_done(move |_| {
            // try_attach: a commit racing interpreter shutdown simply drops the callback.
            // `move`: the references are released while attached, not parked in PyO3's
            // deferred pool (which would keep the handle alive until some later attach).
            Python::try_attach(move |py| {
                if let Err(e) = callback.call1(py, (handle,)) {
                    e.write_unraisable(py, Some(callback.bind(py)));
                }
            });
        });
        Ok(())
    }

    /// Blocks (GIL released) until terminal or until `timeout` seconds pass; returns `done`.
    /// Never raises the recorded failure: for waiting on completion without observing it
    /// (the profiler's exit).
    #[pyo3(signature = (timeout=None))]
    fn _join(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let deadline = match timeout {
            None => None,
            Some(t) if t.is_nan() || t < 0.0 => {
                return Err(PyValueError::new_err(
                    "timeout must be a non-negative number of seconds",
                ))
            }
            Some(t) => Duration::try_from_secs_f64(t)
                .ok()
                .and_then(|d| Instant::now().checked_add(d)),
        };
        self.block_until(py, deadline)
    }
}

/// Creates a pending handle of `cls`, which must be `AwaitResult` or a subclass of it.
/// Framework use only: this is the one way to obtain a handle.
#[pyfunction]
fn new_completion<'py>(cls: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = cls.py();
    let ok = cls
        .cast::<PyType>()
        .map(|t| t.is_subclass_of::<AwaitResult>())
        .unwrap_or(Ok(false))?;
    if !ok {
        return Err(PyTypeError::new_err(
            "cls must be AwaitResult or a subclass of it",
        ));
    }
    // `__new__` rather than a call: a subclass __init__ has nothing to initialise here.
    cls.call_method1("__new__", (cls, token(py)))
}

/// Runs the callable `job()` on an engine worker thread, holding the GIL there.
///
/// For framework commit work that must happen off the caller's thread (waiting on a
/// provider's completion, then committing). `handle`, an `AwaitResult` or None, is kept alive
/// until the job returns. An exception escaping `job` is reported via `sys.unraisablehook`
/// and, if `handle` is still pending, recorded as its failure so no waiter blocks forever.
#[pyfunction]
fn submit_python(handle: &Bound<'_, PyAny>, job: &Bound<'_, PyAny>) -> PyResult<()> {
    let handle: Option<Py<AwaitResult>> = if handle.is_none() {
        None
    } else {
        Some(
            handle
                .cast::<AwaitResult>()
                .map_err(|_| PyTypeError::new_err("handle must be an AwaitResult or None"))?
                .clone()
                .unbind(),
        )
    };
    if !job.is_callable() {
        return Err(PyTypeError::new_err("job must be callable"));
    }
    let job = job.clone().unbind();
    engine::submit(move || {
        Python::try_attach(move |py| {
            if let Err(e) = job.call0(py) {
                let exc = e.value(py).clone();
                let tb = exc
                    .getattr("__traceback__")
                    .map(Bound::unbind)
                    .unwrap_or_else(|_| py.None());
                e.write_unraisable(py, Some(job.bind(py)));
                if let Some(h) = &handle {
                    h.get().commit(Outcome::Error {
                        exc: exc.into_any().unbind(),
                        tb,
                    });
                }
            }
        });
    });
    Ok(())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<AwaitResult>()?;
    m.add_function(wrap_pyfunction!(new_completion, m)?)?;
    m.add_function(wrap_pyfunction!(submit_python, m)?)?;
    Ok(())
}
