//! `AwaitResult` and the engine's submit functions, on `strideweave._native`.
//!
//! `AwaitResult` is the public, read-only completion base; the framework defines
//! `AwaitMove`, `AwaitProjection`, `AwaitResidency` as Python subclasses and creates
//! instances only through `new_completion(cls)`. Its terminal state lives in a core
//! [`Completion`], so `wait()` blocks with the GIL released and any thread may commit.
//!
//! `submit_python` runs framework commit work on an engine worker with the GIL. The copies
//! themselves live in `transfer.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pyo3::exceptions::{PyBaseException, PyRuntimeError, PyTimeoutError, PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyTuple, PyType};
use pyo3::PyTraverseError;
use strideweave_core::engine::{self, Completion};

use crate::jobs::QueuedJob;
use crate::set_once::SetOnce;
use crate::transfer::TransferProgress;

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
/// recorded exception (the same exception object every time). It works where a
/// `concurrent.futures.Future` does: `result(timeout)`, `cancel()` (False: the work started
/// with the handle), `concurrent.futures.wait`/`as_completed`. There is no coroutine protocol
/// (interop-movement.md: no `__await__`); `asyncio.wrap_future(handle.future())` bridges.
/// Handles are created by the framework (`move_async`, tiled projection and residency), never
/// by calling the class.
#[pyclass(subclass, frozen, weakref, module = "strideweave", name = "AwaitResult")]
pub struct AwaitResult {
    cell: Arc<Completion<Outcome>>,
    /// The engine job that completes this handle, when a waiter may run it itself
    /// (`jobs::QueuedJob`; set by the native move initiation).
    queued: Mutex<Option<Arc<QueuedJob>>>,
    /// The process that created the handle. Its work runs on that process's threads, which a
    /// `fork()`ed child does not have: a child waiting on a pending inherited handle would
    /// wait forever, so it gets a RuntimeError instead.
    pid: u32,
    /// What `concurrent.futures.wait`/`as_completed` read and lock (`_condition`, `_waiters`,
    /// `_state`), made the first time one of them asks (issue 22.7): a move creates a handle
    /// on its hot path, and most handles never meet those functions.
    futures: PyOnceLock<FutureProtocol>,
    /// A move's byte counter (`AwaitMove.bytes_done`/`bytes_total` read it), set once by the
    /// native request that made the handle. Not visited by the collector: a TransferProgress
    /// holds no Python object, so it can close no cycle.
    progress: SetOnce<Py<TransferProgress>>,
}

/// A handle's side of the `concurrent.futures` waiter protocol, as `Future` keeps it: a
/// `threading.Condition`, the waiters the standard functions install under it, and whether
/// the waiters have been told of the outcome. `_state` reads FINISHED only from that telling
/// on (under the condition), so a function that sees RUNNING has installed its waiter before
/// the telling can run, and one that sees FINISHED is never told twice.
struct FutureProtocol {
    condition: Py<PyAny>,
    waiters: Py<PyList>,
    notified: AtomicBool,
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
    /// Wakes periodically so Ctrl-C in the main thread interrupts a long wait. Without a
    /// deadline, first runs the handle's queued job here (GIL released) if no worker has
    /// taken it yet: waiting for it could only be longer; and then copies pieces of offered
    /// transfers (`engine::help_offered`: an asynchronous promote's copy, which runs on the
    /// copy lane alone) until the handle is done or none is left, instead of sleeping.
    fn block_until(&self, py: Python<'_>, deadline: Option<Instant>) -> PyResult<bool> {
        if deadline.is_none() && self.pid == engine::pool::process_id() {
            let queued = self.queued.lock().take();
            if let Some(job) = queued {
                py.detach(|| job.run());
            }
            // Still running elsewhere: this core is free until it is done, so it copies
            // pieces of an offered transfer (likely this handle's) instead of sleeping.
            let cell = &self.cell;
            if !cell.is_done() {
                py.detach(|| engine::help_offered(|| cell.is_done()));
            }
        }
        loop {
            if self.cell.is_done() {
                return Ok(true);
            }
            let here = engine::pool::process_id();
            if here != self.pid {
                return Err(PyRuntimeError::new_err(format!(
                    "this handle was created by process {} and is still pending there; process {here} \
                     is a fork() child of it and cannot wait for it (the work runs only in the \
                     parent)",
                    self.pid
                )));
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

    /// Blocks until terminal and returns the outcome, or raises `TimeoutError` once the
    /// `timeout` argument of `wait`/`exception` has passed (the handle stays pending).
    fn terminal_within<'a>(&'a self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<&'a Outcome> {
        let deadline = deadline_after(timeout)?;
        if !self.block_until(py, deadline)? {
            let seconds = timeout.map(|t| t.to_string()).unwrap_or_default();
            return Err(PyTimeoutError::new_err(format!(
                "the operation did not complete within timeout={seconds} seconds"
            )));
        }
        Ok(self.cell.get().expect("block_until returned true, so the cell is terminal"))
    }

    /// Registers `fn(handle)` to run exactly once at the terminal commit (the public
    /// `add_done_callback` and the framework's `_add_done_callback` share it).
    ///
    /// The pending callback holds the handle strongly until the commit, so a registered
    /// handle stays alive until it completes even if every caller reference is dropped.
    ///
    /// With `off_copy_lane` (the public `add_done_callback`), a commit made on a copy-lane
    /// worker runs the callback on the wait lane instead (issue 22.3): user code may block
    /// there, for instance on a blocking move whose copy would otherwise queue behind the
    /// callback itself and never run with `STRIDEWEAVE_WORKERS=1`.
    fn register_callback(slf: &Bound<'_, Self>, r#fn: &Bound<'_, PyAny>, off_copy_lane: bool) -> PyResult<()> {
        if !r#fn.is_callable() {
            return Err(PyTypeError::new_err(format!("fn must be callable, not {}", r#fn.get_type().name()?)));
        }
        let callback = r#fn.clone().unbind();
        let handle: Py<PyAny> = slf.clone().into_any().unbind();
        slf.get().cell.on_done(move |_| {
            // try_attach: a commit racing interpreter shutdown simply drops the callback.
            // `move`: the references are released while attached, not parked in PyO3's
            // deferred pool (which would keep the handle alive until some later attach).
            let run = move || {
                Python::try_attach(move |py| {
                    if let Err(e) = callback.call1(py, (handle,)) {
                        e.write_unraisable(py, Some(callback.bind(py)));
                    }
                });
            };
            if off_copy_lane && engine::pool::on_copy_lane() {
                engine::submit_blocking(run);
            } else {
                run();
            }
        });
        Ok(())
    }

    /// The `concurrent.futures` protocol state, made on first use: its condition, its waiter
    /// list, and a done-callback that tells the installed waiters of the outcome under the
    /// condition (see [`FutureProtocol`]).
    fn futures<'a>(slf: &'a Bound<'_, Self>) -> PyResult<&'a FutureProtocol> {
        let py = slf.py();
        let this = slf.get();
        if let Some(p) = this.futures.get(py) {
            return Ok(p);
        }
        let made = FutureProtocol {
            condition: py.import("threading")?.getattr("Condition")?.call0()?.unbind(),
            waiters: PyList::empty(py).unbind(),
            notified: AtomicBool::new(false),
        };
        let mut fresh = false;
        let protocol = this.futures.get_or_init(py, || {
            fresh = true;
            made
        });
        if fresh {
            let handle: Py<AwaitResult> = slf.clone().unbind();
            this.cell.on_done(move |outcome| {
                let failed = matches!(outcome, Outcome::Error { .. });
                Python::try_attach(move |py| {
                    if let Err(e) = Self::notify_waiters(py, &handle, failed) {
                        e.write_unraisable(py, Some(handle.bind(py).as_any()));
                    }
                });
            });
        }
        Ok(protocol)
    }

    /// Tells every installed `concurrent.futures` waiter that `handle` finished, under its
    /// condition, as `Future.set_result`/`set_exception` do.
    fn notify_waiters(py: Python<'_>, handle: &Py<AwaitResult>, failed: bool) -> PyResult<()> {
        let protocol = handle.get().futures.get(py).expect("set before this callback was registered");
        let condition = protocol.condition.bind(py);
        condition.call_method0("acquire")?;
        let told = (|| -> PyResult<()> {
            protocol.notified.store(true, Ordering::Release);
            let method = if failed { "add_exception" } else { "add_result" };
            for waiter in protocol.waiters.bind(py).iter() {
                waiter.call_method1(method, (handle.bind(py),))?;
            }
            condition.call_method0("notify_all").map(drop)
        })();
        condition.call_method0("release")?;
        told
    }

    /// Records `outcome` if the handle is pending; runs the done-callbacks on this thread.
    fn commit(&self, outcome: Outcome) -> bool {
        self.cell.commit(outcome)
    }

    /// Records `value` as the terminal success (any thread, with or without the GIL).
    /// Gives a move's handle its byte counter, once (a second counter is dropped).
    pub(crate) fn count_bytes_with(&self, progress: Py<TransferProgress>) {
        let _ = self.progress.set(progress);
    }

    pub(crate) fn succeed(&self, value: Py<PyAny>) -> bool {
        self.commit(Outcome::Value(value))
    }

    /// Records `exc` (an exception instance) as the terminal failure.
    pub(crate) fn fail(&self, exc: &Bound<'_, PyAny>) -> PyResult<bool> {
        self._fail(exc)
    }

    /// `job` completes this handle: a thread that waits for the handle without a timeout runs
    /// it itself when no worker has started it yet (see `block_until`).
    pub(crate) fn completed_by(&self, job: Arc<QueuedJob>) {
        *self.queued.lock() = Some(job);
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
        let authorised = args.len() == 1 && kwargs.is_none_or(|k| k.is_empty()) && args.get_item(0)?.is(token(py));
        if !authorised {
            return Err(PyTypeError::new_err(format!(
                "cannot create '{}' instances: completion handles are returned by the framework \
                 (for example move_async), not constructed",
                cls.name()?
            )));
        }
        Ok(AwaitResult {
            cell: Arc::new(Completion::new()),
            queued: Mutex::new(None),
            pid: engine::pool::process_id(),
            futures: PyOnceLock::new(),
            progress: SetOnce::default(),
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

    /// A move's byte counter, or None for a handle that counts no bytes.
    #[getter]
    fn _progress(&self, py: Python<'_>) -> Option<Py<TransferProgress>> {
        self.progress.get().map(|p| p.clone_ref(py))
    }

    /// Whether a terminal success or failure has been recorded. Never blocks.
    #[getter]
    fn done(&self) -> bool {
        self.cell.is_done()
    }

    /// Blocks until the operation is terminal, then returns its value or raises its failure.
    ///
    /// Every call, from any thread, observes the same outcome: the identical result object,
    /// or the identical exception object. The GIL is released while blocked. With `timeout`
    /// (seconds), gives up after that long with `TimeoutError`; the handle is unaffected and
    /// may be waited on again. In a `fork()`ed child, a handle still pending in the parent
    /// raises RuntimeError instead of hanging.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let outcome = self.terminal_within(py, timeout)?;
        Self::outcome_to_result(py, outcome)
    }

    /// Blocks like `wait(timeout)`, then returns the recorded exception, or None when the
    /// operation succeeded (as `concurrent.futures.Future.exception` does). Never raises the
    /// recorded failure; raises `TimeoutError` if `timeout` seconds pass first.
    #[pyo3(signature = (timeout=None))]
    fn exception(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
        match self.terminal_within(py, timeout)? {
            Outcome::Value(_) => Ok(None),
            Outcome::Error { exc, tb } => {
                let _ = exc.bind(py).setattr("__traceback__", tb.bind(py));
                Ok(Some(exc.clone_ref(py)))
            }
        }
    }

    /// Runs `fn(handle)` exactly once when the operation is terminal: on the thread that
    /// completes it (an engine wait-lane thread when a copy thread completes it, so that `fn`
    /// may block, even on another move), or immediately on this thread if it is already
    /// terminal. An exception
    /// raised by `fn` goes to `sys.unraisablehook` and does not change the handle.
    fn add_done_callback(slf: &Bound<'_, Self>, r#fn: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::register_callback(slf, r#fn, true)
    }

    /// A `concurrent.futures.Future` that completes with this handle's outcome (the same
    /// value or exception object), for `concurrent.futures.wait`/`as_completed` and for
    /// `await asyncio.wrap_future(handle.future())`. Each call returns a new Future. It is
    /// already in the running state, so `cancel()` returns False: moves cannot be cancelled.
    fn future<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let fut = py.import("concurrent.futures")?.getattr("Future")?.call0()?;
        fut.call_method0("set_running_or_notify_cancel")?;
        let target = fut.clone().unbind();
        slf.get().cell.on_done(move |outcome| {
            // `move`: the Future reference is released while attached (see register_callback).
            Python::try_attach(move |py| {
                let fut = target.bind(py);
                let set = match outcome {
                    Outcome::Value(v) => fut.call_method1("set_result", (v.clone_ref(py),)),
                    Outcome::Error { exc, tb } => {
                        let _ = exc.bind(py).setattr("__traceback__", tb.bind(py));
                        fut.call_method1("set_exception", (exc.clone_ref(py),))
                    }
                };
                // Only a caller who resolved the Future by hand makes this fail.
                if let Err(e) = set {
                    e.write_unraisable(py, Some(fut));
                }
            });
        });
        Ok(fut)
    }

    /// As `concurrent.futures.Future.result`: `wait(timeout)` under the standard name.
    #[pyo3(signature = (timeout=None))]
    fn result(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        self.wait(py, timeout)
    }

    /// Always False, changing nothing: the operation started when the handle was made (its
    /// claims are taken and its work submitted by then), and started work is not cancelled.
    fn cancel(&self) -> bool {
        false
    }

    /// Always False: a handle is never cancelled (see `cancel`).
    fn cancelled(&self) -> bool {
        false
    }

    /// Whether the operation is still running (as `Future.running`): `not done`.
    fn running(&self) -> bool {
        !self.cell.is_done()
    }

    /// Refused: a handle is read-only, only the operation that made it completes it. (Declared
    /// so that the type stubs, which present a handle as a `concurrent.futures.Future` for
    /// `concurrent.futures.wait`/`as_completed`, describe what runs.)
    fn set_result(&self, result: &Bound<'_, PyAny>) -> PyResult<()> {
        let _ = result;
        Err(read_only("set_result"))
    }

    /// Refused, as `set_result`.
    fn set_exception(&self, exception: &Bound<'_, PyAny>) -> PyResult<()> {
        let _ = exception;
        Err(read_only("set_exception"))
    }

    /// Refused, as `set_result`: the operation is running from the moment its handle exists.
    fn set_running_or_notify_cancel(&self) -> PyResult<bool> {
        Err(read_only("set_running_or_notify_cancel"))
    }

    /// The `threading.Condition` of the `concurrent.futures` waiter protocol (for
    /// `concurrent.futures.wait` and `as_completed`; not for direct use).
    #[getter]
    fn _condition(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        Ok(Self::futures(slf)?.condition.clone_ref(slf.py()))
    }

    /// The waiters `concurrent.futures.wait` and `as_completed` install (not for direct use).
    #[getter]
    fn _waiters(slf: &Bound<'_, Self>) -> PyResult<Py<PyList>> {
        Ok(Self::futures(slf)?.waiters.clone_ref(slf.py()))
    }

    /// `"FINISHED"` once the waiters were told of the outcome, else `"RUNNING"` (the
    /// `concurrent.futures` state names; read under `_condition`).
    #[getter]
    fn _state(slf: &Bound<'_, Self>) -> PyResult<&'static str> {
        let told = Self::futures(slf)?.notified.load(Ordering::Acquire);
        Ok(if told { "FINISHED" } else { "RUNNING" })
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
        Ok(self.commit(Outcome::Error { exc: exc.clone().unbind(), tb }))
    }

    /// Runs `fn(handle)` exactly once after the terminal commit, on the committing thread
    /// (immediately, on this thread, when already terminal). An exception from `fn` is
    /// reported through `sys.unraisablehook` and does not affect the handle.
    ///
    /// The pending callback holds the handle strongly until the commit, so a registered
    /// handle stays alive until it completes even if every caller reference is dropped.
    fn _add_done_callback(slf: &Bound<'_, Self>, r#fn: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::register_callback(slf, r#fn, false)
    }

    /// Blocks (GIL released) until terminal or until `timeout` seconds pass; returns `done`.
    /// Never raises the recorded failure: for waiting on completion without observing it
    /// (the profiler's exit).
    #[pyo3(signature = (timeout=None))]
    fn _join(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let deadline = deadline_after(timeout)?;
        self.block_until(py, deadline)
    }
}

/// The refusal of a completing call on a read-only handle.
fn read_only(method: &str) -> PyErr {
    PyRuntimeError::new_err(format!(
        "{method}() refused: a completion handle is read-only; the operation that made it completes it"
    ))
}

/// The deadline of a `timeout` argument: None waits forever; otherwise a non-negative
/// number of seconds (a bool is refused as a likely mistake). An infinite or unrepresentably
/// large timeout is a plain wait.
fn deadline_after(timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Instant>> {
    let Some(t) = timeout else { return Ok(None) };
    if t.is_none() {
        return Ok(None);
    }
    let refuse = || -> PyResult<f64> {
        Err(PyTypeError::new_err(format!("timeout must be a number of seconds or None, not {}", t.get_type().name()?)))
    };
    let seconds = if t.is_instance_of::<pyo3::types::PyBool>() {
        refuse()?
    } else {
        match t.extract::<f64>() {
            Ok(v) => v,
            Err(_) => refuse()?,
        }
    };
    if seconds.is_nan() || seconds < 0.0 {
        return Err(PyValueError::new_err("timeout must be a non-negative number of seconds"));
    }
    Ok(Duration::try_from_secs_f64(seconds).ok().and_then(|d| Instant::now().checked_add(d)))
}

/// Creates a pending handle of `cls`, which must be `AwaitResult` or a subclass of it.
/// Framework use only: this is the one way to obtain a handle.
#[pyfunction]
fn new_completion<'py>(cls: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let ok = cls.cast::<PyType>().map(|t| t.is_subclass_of::<AwaitResult>()).unwrap_or(Ok(false))?;
    if !ok {
        return Err(PyTypeError::new_err("cls must be AwaitResult or a subclass of it"));
    }
    new_handle(cls.cast::<PyType>()?)
}

/// A pending handle of `cls` (`AwaitResult` or a subclass: the caller checked), made by the
/// class's `tp_new` directly: `__new__` rather than a call, since a subclass `__init__` has
/// nothing to initialise here, and the slot rather than the attribute, since looking up and
/// running the `__new__` wrapper is most of the cost of a `move_async` when the caches are cold.
pub(crate) fn new_handle<'py>(cls: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
    let py = cls.py();
    let args = PyTuple::new(py, [token(py)])?;
    // SAFETY: `cls` is a live type object (a subclass of AwaitResult, whose `tp_new` PyO3
    // defines and every subclass inherits, so the slot is never null); `Py_tp_new` holds a
    // `newfunc`, called here with that type, an argument tuple we own and no keywords, and
    // it returns a new reference or null with an exception set.
    unsafe {
        let tp = cls.as_type_ptr();
        let slot = pyo3::ffi::PyType_GetSlot(tp, pyo3::ffi::Py_tp_new);
        let tp_new: pyo3::ffi::newfunc = std::mem::transmute(slot);
        Bound::from_owned_ptr_or_err(py, tp_new(tp, args.as_ptr(), std::ptr::null_mut()))
    }
}

/// Runs the callable `job()` on an engine wait-lane thread (it may block), holding the GIL.
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
    engine::submit_blocking(move || {
        Python::try_attach(move |py| {
            if let Err(e) = job.call0(py) {
                let exc = e.value(py).clone();
                let tb = exc.getattr("__traceback__").map(Bound::unbind).unwrap_or_else(|_| py.None());
                e.write_unraisable(py, Some(job.bind(py)));
                if let Some(h) = &handle {
                    h.get().commit(Outcome::Error { exc: exc.into_any().unbind(), tb });
                }
            }
        });
    });
    Ok(())
}

/// Waits (GIL released) until the engine has no queued or running job, up to
/// `timeout_seconds`; True when it got quiet. Registered with `atexit` by the package: a
/// worker still finishing a job when the interpreter finalizes could call back into Python
/// (a move's commit, a log record) and be stopped there by CPython, which aborts the process.
/// With `stop_logging` (the exit hook), Rust log records are no longer forwarded to Python
/// logging afterwards, since forwarding one means entering the interpreter.
#[pyfunction]
#[pyo3(signature = (timeout_seconds, stop_logging=false))]
fn engine_quiesce(py: Python<'_>, timeout_seconds: f64, stop_logging: bool) -> PyResult<bool> {
    if !(timeout_seconds.is_finite() && timeout_seconds >= 0.0) {
        return Err(PyValueError::new_err(format!(
            "timeout_seconds must be a finite non-negative number, got {timeout_seconds}"
        )));
    }
    let timeout = Duration::from_secs_f64(timeout_seconds.min(3600.0));
    let quiet = py.detach(|| engine::pool::quiesce(timeout));
    if stop_logging {
        log::set_max_level(log::LevelFilter::Off);
    }
    Ok(quiet)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(engine_quiesce, m)?)?;
    m.add_class::<AwaitResult>()?;
    m.add_function(wrap_pyfunction!(new_completion, m)?)?;
    m.add_function(wrap_pyfunction!(submit_python, m)?)?;
    Ok(())
}
