//! `AwaitResult` and the engine's submit functions, on `strideweave._native`.
//!
//! `AwaitResult` is the public, read-only completion base; the framework defines
//! `AwaitMove`, `AwaitProjection`, `AwaitResidency` as Python subclasses and creates
//! instances only through `new_completion(cls)`. Its terminal state lives in a core
//! [`Completion`], so `wait()` blocks with the GIL released and any thread may commit.
//!
//! The submit functions run bulk copies on the engine's worker threads without the GIL and
//! report back through a Python `then(error_or_None)` callable. They take raw addresses and
//! file descriptors: the Python move layer owns the storages and keeps them alive (and
//! claimed) until `then` has run, which is what makes the raw parts safe to use here.

use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::exceptions::{
    PyBaseException, PyOSError, PyRuntimeError, PyTimeoutError, PyTypeError, PyValueError,
};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};
use pyo3::PyTraverseError;
use strideweave_core::copy::{self, LayoutCopyError};
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

    /// Blocks until terminal and returns the outcome, or raises `TimeoutError` once the
    /// `timeout` argument of `wait`/`exception` has passed (the handle stays pending).
    fn terminal_within<'a>(
        &'a self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<&'a Outcome> {
        let deadline = deadline_after(timeout)?;
        if !self.block_until(py, deadline)? {
            let seconds = timeout.map(|t| t.to_string()).unwrap_or_default();
            return Err(PyTimeoutError::new_err(format!(
                "the operation did not complete within timeout={seconds} seconds"
            )));
        }
        Ok(self
            .cell
            .get()
            .expect("block_until returned true, so the cell is terminal"))
    }

    /// Registers `fn(handle)` to run exactly once at the terminal commit (the public
    /// `add_done_callback` and the framework's `_add_done_callback` share it).
    ///
    /// The pending callback holds the handle strongly until the commit, so a registered
    /// handle stays alive until it completes even if every caller reference is dropped.
    fn register_callback(slf: &Bound<'_, Self>, r#fn: &Bound<'_, PyAny>) -> PyResult<()> {
        if !r#fn.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "fn must be callable, not {}",
                r#fn.get_type().name()?
            )));
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
    /// or the identical exception object. The GIL is released while blocked. With `timeout`
    /// (seconds), gives up after that long with `TimeoutError`; the handle is unaffected and
    /// may be waited on again.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let outcome = self.terminal_within(py, timeout)?;
        Self::outcome_to_result(py, outcome)
    }

    /// Blocks like `wait(timeout)`, then returns the recorded exception, or None when the
    /// operation succeeded (as `concurrent.futures.Future.exception` does). Never raises the
    /// recorded failure; raises `TimeoutError` if `timeout` seconds pass first.
    #[pyo3(signature = (timeout=None))]
    fn exception(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        match self.terminal_within(py, timeout)? {
            Outcome::Value(_) => Ok(None),
            Outcome::Error { exc, tb } => {
                let _ = exc.bind(py).setattr("__traceback__", tb.bind(py));
                Ok(Some(exc.clone_ref(py)))
            }
        }
    }

    /// Runs `fn(handle)` exactly once when the operation is terminal: on the thread that
    /// completes it, or immediately on this thread if it is already terminal. An exception
    /// raised by `fn` goes to `sys.unraisablehook` and does not change the handle.
    fn add_done_callback(slf: &Bound<'_, Self>, r#fn: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::register_callback(slf, r#fn)
    }

    /// A `concurrent.futures.Future` that completes with this handle's outcome (the same
    /// value or exception object), for `concurrent.futures.wait`/`as_completed` and for
    /// `await asyncio.wrap_future(handle.future())`. Each call returns a new Future. It is
    /// already in the running state, so `cancel()` returns False: moves cannot be cancelled.
    fn future<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let fut = py
            .import("concurrent.futures")?
            .getattr("Future")?
            .call0()?;
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
        Self::register_callback(slf, r#fn)
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

/// The deadline of a `timeout` argument: None waits forever; otherwise a non-negative
/// number of seconds (a bool is refused as a likely mistake). An infinite or unrepresentably
/// large timeout is a plain wait.
fn deadline_after(timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Instant>> {
    let Some(t) = timeout else { return Ok(None) };
    if t.is_none() {
        return Ok(None);
    }
    let refuse = || -> PyResult<f64> {
        Err(PyTypeError::new_err(format!(
            "timeout must be a number of seconds or None, not {}",
            t.get_type().name()?
        )))
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
        return Err(PyValueError::new_err(
            "timeout must be a non-negative number of seconds",
        ));
    }
    Ok(Duration::try_from_secs_f64(seconds)
        .ok()
        .and_then(|d| Instant::now().checked_add(d)))
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

// ---- copy jobs ----

/// Why a copy job failed, carried from the worker to the GIL-holding `then` call.
enum JobError {
    Io { err: io::Error, context: String },
    Panic(String),
}

impl JobError {
    fn into_pyerr(self, py: Python<'_>) -> PyErr {
        match self {
            JobError::Io { err, context } => {
                let e = io_error(err);
                // A note keeps OSError's (errno, strerror) shape intact while saying what failed.
                let _ = e.add_note(py, context);
                e
            }
            JobError::Panic(msg) => {
                PyRuntimeError::new_err(format!("internal error in engine copy job: {msg}"))
            }
        }
    }
}

/// OSError(errno, strerror) for OS errors, so Python maps errno to the usual subclass and
/// callers can test `e.errno`; a plain OSError(message) for the rest (short file, …).
fn io_error(err: io::Error) -> PyErr {
    match err.raw_os_error() {
        Some(code) => {
            let text = io::Error::from_raw_os_error(code).to_string();
            let strerror = text.split(" (os error").next().unwrap_or(&text).to_owned();
            PyOSError::new_err((code, strerror))
        }
        None => PyOSError::new_err(err.to_string()),
    }
}

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

/// Queues `work` on the engine; afterwards calls `then(None)` or `then(exc)` with the GIL.
fn submit_copy<F>(then: &Bound<'_, PyAny>, work: F) -> PyResult<()>
where
    F: FnOnce() -> Result<(), JobError> + Send + 'static,
{
    if !then.is_callable() {
        return Err(PyTypeError::new_err("then must be callable"));
    }
    let then = then.clone().unbind();
    engine::submit(move || {
        let result = run_guarded(work);
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

fn check_count(name: &str, value: i64) -> PyResult<usize> {
    usize::try_from(value)
        .map_err(|_| PyValueError::new_err(format!("{name} must be non-negative, got {value}")))
}

fn check_ptr(name: &str, ptr: usize, nbytes: usize) -> PyResult<()> {
    if ptr == 0 && nbytes > 0 {
        return Err(PyValueError::new_err(format!("{name} is null")));
    }
    Ok(())
}

/// Checks that `fd` is an open descriptor, so the job gets a clean OSError up front rather
/// than operating on a number that names nothing.
fn check_fd(name: &str, fd: i32) -> PyResult<()> {
    if fd < 0 {
        return Err(PyValueError::new_err(format!(
            "{name} must be a non-negative file descriptor, got {fd}"
        )));
    }
    // SAFETY: F_GETFD only queries descriptor flags; any int is an acceptable argument.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return Err(io_error(io::Error::last_os_error()));
    }
    Ok(())
}

fn check_file_off(name: &str, off: i64) -> PyResult<u64> {
    u64::try_from(off)
        .map_err(|_| PyValueError::new_err(format!("{name} must be non-negative, got {off}")))
}

/// A `File` view of a descriptor the caller owns; never closes it.
///
/// # Safety
/// `fd` must stay open for as long as the returned value is used.
unsafe fn borrow_file(fd: i32) -> ManuallyDrop<File> {
    // SAFETY: the caller keeps `fd` open; ManuallyDrop ensures we never close it.
    ManuallyDrop::new(unsafe { File::from_raw_fd(fd) })
}

/// A validated host↔file span request, shared by the sync and async entry points.
#[derive(Clone, Copy)]
struct FileSpan {
    fd: i32,
    off: u64,
    ptr: usize,
    nbytes: usize,
}

impl FileSpan {
    fn new(fd: i32, file_byte_off: i64, ptr_name: &str, ptr: usize, nbytes: i64) -> PyResult<Self> {
        let nbytes = check_count("nbytes", nbytes)?;
        check_ptr(ptr_name, ptr, nbytes)?;
        let off = check_file_off("file_byte_off", file_byte_off)?;
        check_fd("fd", fd)?;
        Ok(FileSpan {
            fd,
            off,
            ptr,
            nbytes,
        })
    }

    /// # Safety
    /// `ptr` is readable for `nbytes` bytes and `fd` open for the call.
    unsafe fn write(self) -> Result<(), JobError> {
        if self.nbytes == 0 {
            return Ok(());
        }
        // SAFETY: per this function's contract.
        let (file, src) = unsafe {
            (
                borrow_file(self.fd),
                std::slice::from_raw_parts(self.ptr as *const u8, self.nbytes),
            )
        };
        copy::file_write_from_host(&file, self.off, src).map_err(|err| JobError::Io {
            err,
            context: format!(
                "while writing {} bytes to fd {} at byte {}",
                self.nbytes, self.fd, self.off
            ),
        })
    }

    /// # Safety
    /// `ptr` is writable for `nbytes` bytes, not otherwise accessed, and `fd` open for the call.
    unsafe fn read(self) -> Result<(), JobError> {
        if self.nbytes == 0 {
            return Ok(());
        }
        // SAFETY: per this function's contract.
        let (file, dst) = unsafe {
            (
                borrow_file(self.fd),
                std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.nbytes),
            )
        };
        copy::file_read_into_host(&file, self.off, dst).map_err(|err| JobError::Io {
            err,
            context: format!(
                "while reading {} bytes from fd {} at byte {}",
                self.nbytes, self.fd, self.off
            ),
        })
    }
}

#[derive(Clone, Copy)]
struct FileToFile {
    src_fd: i32,
    src_off: u64,
    dst_fd: i32,
    dst_off: u64,
    nbytes: u64,
}

impl FileToFile {
    fn new(src_fd: i32, src_off: i64, dst_fd: i32, dst_off: i64, nbytes: i64) -> PyResult<Self> {
        let nbytes = check_count("nbytes", nbytes)? as u64;
        let src_off = check_file_off("src_off", src_off)?;
        let dst_off = check_file_off("dst_off", dst_off)?;
        check_fd("src_fd", src_fd)?;
        check_fd("dst_fd", dst_fd)?;
        Ok(FileToFile {
            src_fd,
            src_off,
            dst_fd,
            dst_off,
            nbytes,
        })
    }

    /// # Safety
    /// Both descriptors stay open for the call.
    unsafe fn run(self) -> Result<(), JobError> {
        // SAFETY: per this function's contract.
        let (src, dst) = unsafe { (borrow_file(self.src_fd), borrow_file(self.dst_fd)) };
        copy::file_copy(&src, self.src_off, &dst, self.dst_off, self.nbytes).map_err(|err| {
            JobError::Io {
                err,
                context: format!(
                    "while copying {} bytes from fd {} at byte {} to fd {} at byte {}",
                    self.nbytes, self.src_fd, self.src_off, self.dst_fd, self.dst_off
                ),
            }
        })
    }
}

#[derive(Clone, Copy)]
struct HostSpan {
    src: usize,
    dst: usize,
    nbytes: usize,
}

impl HostSpan {
    fn new(src_ptr: usize, dst_ptr: usize, nbytes: i64) -> PyResult<Self> {
        let nbytes = check_count("nbytes", nbytes)?;
        check_ptr("src_ptr", src_ptr, nbytes)?;
        check_ptr("dst_ptr", dst_ptr, nbytes)?;
        let disjoint = src_ptr.checked_add(nbytes).is_some_and(|e| e <= dst_ptr)
            || dst_ptr.checked_add(nbytes).is_some_and(|e| e <= src_ptr);
        if nbytes > 0 && !disjoint {
            return Err(PyValueError::new_err("src_ptr and dst_ptr ranges overlap"));
        }
        Ok(HostSpan {
            src: src_ptr,
            dst: dst_ptr,
            nbytes,
        })
    }

    /// # Safety
    /// Both ranges valid for `nbytes` bytes (checked disjoint in `new`) and not otherwise
    /// written during the call.
    unsafe fn run(self) -> Result<(), JobError> {
        // SAFETY: per this function's contract.
        unsafe {
            copy::copy_span_host_to_host(self.src as *const u8, self.dst as *mut u8, self.nbytes)
        };
        Ok(())
    }
}

/// A validated layout copy: modes checked and, when slot counts are given, every addressed
/// slot proven inside both buffers before anything is queued.
struct LayoutJob {
    src: usize,
    src_offset: i64,
    dst: usize,
    dst_offset: i64,
    extents: Vec<i64>,
    strides: Vec<i64>,
    elem_size: usize,
}

impl LayoutJob {
    #[allow(clippy::too_many_arguments)]
    fn new(
        src_ptr: usize,
        src_offset: i64,
        dst_ptr: usize,
        dst_offset: i64,
        leaf_extents: Vec<i64>,
        leaf_strides: Vec<i64>,
        elem_size: i64,
        src_slots: Option<i64>,
        dst_slots: Option<i64>,
    ) -> PyResult<Self> {
        let elem_size = check_count("elem_size", elem_size)?;
        if elem_size == 0 {
            return Err(PyValueError::new_err("elem_size must be positive"));
        }
        let range = copy::addressed_range(&leaf_extents, &leaf_strides).map_err(layout_error)?;
        if let Some((lo, hi)) = range {
            for (name, ptr, offset, slots) in [
                ("src", src_ptr, src_offset, src_slots),
                ("dst", dst_ptr, dst_offset, dst_slots),
            ] {
                if ptr == 0 {
                    return Err(PyValueError::new_err(format!("{name}_ptr is null")));
                }
                let first = offset.checked_add(lo);
                let last = offset.checked_add(hi);
                if let Some(slots) = slots {
                    let slots = check_count(&format!("{name}_slots"), slots)? as i64;
                    if !matches!((first, last), (Some(f), Some(l)) if f >= 0 && l < slots) {
                        return Err(PyValueError::new_err(format!(
                            "the layout at {name}_offset {offset} addresses slots outside {name}_slots ({slots})"
                        )));
                    }
                }
            }
            if src_ptr == dst_ptr {
                return Err(PyValueError::new_err(
                    "src_ptr and dst_ptr are the same buffer",
                ));
            }
        }
        Ok(LayoutJob {
            src: src_ptr,
            src_offset,
            dst: dst_ptr,
            dst_offset,
            extents: leaf_extents,
            strides: leaf_strides,
            elem_size,
        })
    }

    /// # Safety
    /// Both buffers valid at every addressed slot, addressed bytes disjoint, and not otherwise
    /// written during the call.
    unsafe fn run(&self) -> Result<(), JobError> {
        // SAFETY: per this function's contract.
        unsafe {
            copy::copy_layout_elements(
                self.src as *const u8,
                self.src_offset,
                self.dst as *mut u8,
                self.dst_offset,
                &self.extents,
                &self.strides,
                self.elem_size,
            )
        }
        .map_err(|e| JobError::Panic(e.to_string()))
    }
}

fn layout_error(e: LayoutCopyError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn run_sync<F>(py: Python<'_>, work: F) -> PyResult<()>
where
    F: FnOnce() -> Result<(), JobError> + Send,
{
    py.detach(|| run_guarded(work))
        .map_err(|e| e.into_pyerr(py))
}

// ---- Python entry points ----
//
// SAFETY contract shared by every function below (the Python move layer upholds it): each
// pointer addresses a live buffer covering the bytes or slots the call names, each fd is open,
// and the owning objects stay alive and unmodified by others until the call returns (sync) or
// until `then` has been called (async). Destination memory is not read by anyone meanwhile.

/// Copies `nbytes` bytes from address `src_ptr` to `dst_ptr` on a worker thread (GIL
/// released), then calls `then(None)` or `then(exc)` with the GIL held.
#[pyfunction]
fn submit_copy_host_to_host(
    src_ptr: usize,
    dst_ptr: usize,
    nbytes: i64,
    then: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let job = HostSpan::new(src_ptr, dst_ptr, nbytes)?;
    // SAFETY: the module-level contract above.
    submit_copy(then, move || unsafe { job.run() })
}

/// Writes `nbytes` bytes at `src_ptr` to descriptor `fd` at `file_byte_off` on a worker
/// thread, then `then(None)` or `then(OSError)`.
#[pyfunction]
fn submit_host_to_file(
    fd: i32,
    file_byte_off: i64,
    src_ptr: usize,
    nbytes: i64,
    then: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let job = FileSpan::new(fd, file_byte_off, "src_ptr", src_ptr, nbytes)?;
    // SAFETY: the module-level contract above.
    submit_copy(then, move || unsafe { job.write() })
}

/// Reads `nbytes` bytes from descriptor `fd` at `file_byte_off` into `dst_ptr` on a worker
/// thread, then `then(None)` or `then(OSError)`.
#[pyfunction]
fn submit_file_to_host(
    fd: i32,
    file_byte_off: i64,
    dst_ptr: usize,
    nbytes: i64,
    then: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let job = FileSpan::new(fd, file_byte_off, "dst_ptr", dst_ptr, nbytes)?;
    // SAFETY: the module-level contract above.
    submit_copy(then, move || unsafe { job.read() })
}

/// Copies `nbytes` bytes between descriptors on a worker thread, then `then(None|OSError)`.
#[pyfunction]
fn submit_file_to_file(
    src_fd: i32,
    src_off: i64,
    dst_fd: i32,
    dst_off: i64,
    nbytes: i64,
    then: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let job = FileToFile::new(src_fd, src_off, dst_fd, dst_off, nbytes)?;
    // SAFETY: the module-level contract above.
    submit_copy(then, move || unsafe { job.run() })
}

/// Copies every slot the flattened layout addresses, `src_offset + i` to `dst_offset + i`
/// (elements of `elem_size` bytes), on a worker thread; then `then(None|exc)`. With
/// `src_slots`/`dst_slots` (buffer lengths in elements) the reach is checked up front.
#[pyfunction]
#[pyo3(signature = (src_ptr, src_offset, dst_ptr, dst_offset, leaf_extents, leaf_strides, elem_size, then, *, src_slots=None, dst_slots=None))]
#[allow(clippy::too_many_arguments)]
fn submit_layout_copy(
    src_ptr: usize,
    src_offset: i64,
    dst_ptr: usize,
    dst_offset: i64,
    leaf_extents: Vec<i64>,
    leaf_strides: Vec<i64>,
    elem_size: i64,
    then: &Bound<'_, PyAny>,
    src_slots: Option<i64>,
    dst_slots: Option<i64>,
) -> PyResult<()> {
    let job = LayoutJob::new(
        src_ptr,
        src_offset,
        dst_ptr,
        dst_offset,
        leaf_extents,
        leaf_strides,
        elem_size,
        src_slots,
        dst_slots,
    )?;
    // SAFETY: the module-level contract above.
    submit_copy(then, move || unsafe { job.run() })
}

/// Blocking `submit_copy_host_to_host`: copies with the GIL released and returns.
#[pyfunction]
fn copy_host_to_host(py: Python<'_>, src_ptr: usize, dst_ptr: usize, nbytes: i64) -> PyResult<()> {
    let job = HostSpan::new(src_ptr, dst_ptr, nbytes)?;
    // SAFETY: the module-level contract above.
    run_sync(py, move || unsafe { job.run() })
}

/// Blocking `submit_host_to_file`; raises OSError on failure.
#[pyfunction]
fn host_to_file(
    py: Python<'_>,
    fd: i32,
    file_byte_off: i64,
    src_ptr: usize,
    nbytes: i64,
) -> PyResult<()> {
    let job = FileSpan::new(fd, file_byte_off, "src_ptr", src_ptr, nbytes)?;
    // SAFETY: the module-level contract above.
    run_sync(py, move || unsafe { job.write() })
}

/// Blocking `submit_file_to_host`; raises OSError on failure.
#[pyfunction]
fn file_to_host(
    py: Python<'_>,
    fd: i32,
    file_byte_off: i64,
    dst_ptr: usize,
    nbytes: i64,
) -> PyResult<()> {
    let job = FileSpan::new(fd, file_byte_off, "dst_ptr", dst_ptr, nbytes)?;
    // SAFETY: the module-level contract above.
    run_sync(py, move || unsafe { job.read() })
}

/// Blocking `submit_file_to_file`; raises OSError on failure.
#[pyfunction]
fn file_to_file(
    py: Python<'_>,
    src_fd: i32,
    src_off: i64,
    dst_fd: i32,
    dst_off: i64,
    nbytes: i64,
) -> PyResult<()> {
    let job = FileToFile::new(src_fd, src_off, dst_fd, dst_off, nbytes)?;
    // SAFETY: the module-level contract above.
    run_sync(py, move || unsafe { job.run() })
}

/// Blocking `submit_layout_copy`.
#[pyfunction]
#[pyo3(signature = (src_ptr, src_offset, dst_ptr, dst_offset, leaf_extents, leaf_strides, elem_size, *, src_slots=None, dst_slots=None))]
#[allow(clippy::too_many_arguments)]
fn copy_layout(
    py: Python<'_>,
    src_ptr: usize,
    src_offset: i64,
    dst_ptr: usize,
    dst_offset: i64,
    leaf_extents: Vec<i64>,
    leaf_strides: Vec<i64>,
    elem_size: i64,
    src_slots: Option<i64>,
    dst_slots: Option<i64>,
) -> PyResult<()> {
    let job = LayoutJob::new(
        src_ptr,
        src_offset,
        dst_ptr,
        dst_offset,
        leaf_extents,
        leaf_strides,
        elem_size,
        src_slots,
        dst_slots,
    )?;
    // SAFETY: the module-level contract above.
    run_sync(py, move || unsafe { job.run() })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<AwaitResult>()?;
    m.add_function(wrap_pyfunction!(new_completion, m)?)?;
    m.add_function(wrap_pyfunction!(submit_python, m)?)?;
    m.add_function(wrap_pyfunction!(submit_copy_host_to_host, m)?)?;
    m.add_function(wrap_pyfunction!(submit_host_to_file, m)?)?;
    m.add_function(wrap_pyfunction!(submit_file_to_host, m)?)?;
    m.add_function(wrap_pyfunction!(submit_file_to_file, m)?)?;
    m.add_function(wrap_pyfunction!(submit_layout_copy, m)?)?;
    m.add_function(wrap_pyfunction!(copy_host_to_host, m)?)?;
    m.add_function(wrap_pyfunction!(host_to_file, m)?)?;
    m.add_function(wrap_pyfunction!(file_to_host, m)?)?;
    m.add_function(wrap_pyfunction!(file_to_file, m)?)?;
    m.add_function(wrap_pyfunction!(copy_layout, m)?)?;
    Ok(())
}
