//! `_native.move_inline`: a whole small move in one native call, run on the caller's thread: a
//! one-subtensor `Tensor` between two `CPU` carriers over the default route. `move` returns its
//! result; `move_async` returns a handle already done with it (`async_move::done_handle`).
//!
//! A small move's copy takes well under a microsecond, so everything around it is the cost:
//! validation, claims, the commit, the result Tensor. This path runs the core's own move
//! request (`model::movement::prepare_window_move`, the code a Rust user's `move_tensor` runs) over
//! the two carriers as core carriers (`py_carrier.rs`): its validation table, its claims, the
//! layout copy and its one terminal commit. The outcome is the Python request's
//! (`carriers/move.py`): the source released, its claim held until then, the destination
//! holding the values at offset 0 under the same layout, no version change, the result a
//! `Tensor` over the destination, and, for a differentiable tensor in grad mode, the same
//! autograd node (made by a Python callback).
//!
//! It only ever *succeeds*. Whenever anything would need a decision of the reference path (a
//! failed check, whose error and order the Python path owns; a profiler that must see the
//! move; a route that is not the default; a carrier subclass with hooks; a carrier a write is
//! storing into), it returns None having changed nothing, and `move()` runs the Python request.
//!
//! Atomicity: the core's request claims each carrier in one transition of its state cell, which
//! checks it too (and refuses a carrier a Python-level write has open), the cells being the only
//! lock of carrier state; a claim that fails gives back the one taken. The copy and the commit
//! run with the GIL released while both carriers are claimed, so every other write, release or
//! move of either fails as the specification requires. The commit releases the source and ends
//! its claim in one transition, then ends the destination's.

use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};

use std::sync::Arc;

use strideweave_core::model::movement::MoveRefusal;
use strideweave_core::model::{prepare_window_move, Carrier, RouteKind, Subtensor};

use crate::carrier_base::CarrierBase;
use crate::carrier_state::type_name;
use crate::error;
use crate::move_state::MoveState;
use crate::py_carrier::{MoveHooks, PyCarrier};
use crate::routes::{self, Route};
use crate::storage::HostStorage;
use crate::tensor_base::{TensorBase, View};

/// What the Python layer registers once (`carriers/inline_move.py`, at import), as a dict
/// with one item per field. The native initiation of `move_async` (`async_move.rs`) shares it.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct Config {
    pub(crate) cpu: Py<PyType>,
    pub(crate) file_backed: Py<PyType>,
    pub(crate) tensor: Py<PyType>,
    /// `AwaitMove`, the class of the handle `move_async` returns.
    pub(crate) await_move: Py<PyType>,
    /// Dtypes whose tensors are differentiable (they need an autograd node in grad mode).
    differentiable: Py<PyTuple>,
    /// The largest cosize run on the caller's thread (`move.INLINE_SLOTS`).
    pub(crate) max_slots: i64,
    /// `record(tensor, output, route, state, versions)`: makes the autograd node of a recorded
    /// move (an instance of the route's operation class keeping `state`, a `MoveState`, and
    /// `versions`, the tensor's version token), attaches it to the result and returns it
    /// (`inline_move._record_native_move`).
    pub(crate) record: Py<PyAny>,
    /// `(dtype, move._slot_bytes(dtype))` for every dtype a built-in carrier stores: the slot
    /// size of `AwaitMove.bytes_total`, without calling the dtype's `bits` property.
    slot_bytes: Vec<(Py<PyAny>, u64)>,
    /// `_move_log.failed(nbytes, exc)`: the WARNING of a move that failed at its commit.
    failed: Py<PyAny>,
    /// `carrier._is_mutable()`: the hook a destination's class overrides (`py_carrier.rs`).
    pub(crate) is_mutable_hook: Py<PyAny>,
    /// `carrier._release()`: the hook a source's class overrides, run at the commit.
    pub(crate) release_hook: Py<PyAny>,
}

impl Config {
    /// The slot size `move._slot_bytes` gives `dtype`, when it is a built-in carrier's dtype.
    pub(crate) fn slot_bytes(&self, dtype: &Bound<'_, PyAny>) -> Option<u64> {
        self.slot_bytes.iter().find(|(d, _)| d.is(dtype)).map(|&(_, n)| n)
    }

    /// Whether a move of `tensor` records an autograd node on this thread.
    pub(crate) fn records(&self, py: Python<'_>, dtype: &Bound<'_, PyAny>) -> bool {
        grad_enabled() && self.differentiable.bind(py).iter().any(|d| d.is(dtype))
    }
}

static CONFIG: PyOnceLock<Config> = PyOnceLock::new();

/// The configuration, once `carriers/inline_move.py` registered it.
pub(crate) fn config(py: Python<'_>) -> Option<&Config> {
    CONFIG.get(py)
}

/// The pairs of exact built-in classes the native moves serve, each only while its cached
/// route decision (`routes.rs`) is the framework's default operation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum BuiltinPair {
    CpuToCpu,
    CpuToFile,
    FileToCpu,
}

impl BuiltinPair {
    /// The built-in pair of exactly these classes, if they are one.
    pub(crate) fn of(
        cfg: &Config,
        py: Python<'_>,
        source: &Bound<'_, PyType>,
        destination: &Bound<'_, PyType>,
    ) -> Option<Self> {
        let (cpu, file) = (cfg.cpu.bind(py), cfg.file_backed.bind(py));
        match (source.is(cpu), source.is(file), destination.is(cpu), destination.is(file)) {
            (true, _, true, _) => Some(BuiltinPair::CpuToCpu),
            (true, _, _, true) => Some(BuiltinPair::CpuToFile),
            (_, true, true, _) => Some(BuiltinPair::FileToCpu),
            _ => None,
        }
    }

    /// [`of`](Self::of), or `CpuToCpu` for two CPU subclasses (or one and CPU), which move as
    /// (CPU, CPU) when their route says the native moves serve them (`routes::native_routes`,
    /// which the caller asks next).
    pub(crate) fn of_family(
        cfg: &Config,
        py: Python<'_>,
        source: &Bound<'_, PyType>,
        destination: &Bound<'_, PyType>,
    ) -> Option<Self> {
        let cpu = cfg.cpu.bind(py);
        Self::of(cfg, py, source, destination).or_else(|| {
            (source.is_subclass(cpu).unwrap_or(false) && destination.is_subclass(cpu).unwrap_or(false))
                .then_some(BuiltinPair::CpuToCpu)
        })
    }
}

/// Active profilers in the process: while any is active, moves take the Python path, which
/// records their events.
static PROFILERS: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    /// Grad mode of this thread (docs/spec/autograd-and-profiling.md §6): every thread starts with
    /// recording on. `strideweave._autograd` reads and sets it here, so there is one truth.
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// `configure_inline_move({"cpu": CPU, "file_backed": FileBacked, "tensor": Tensor, ...})`
/// (one item per `Config` field), once.
#[pyfunction]
fn configure_inline_move(py: Python<'_>, config: Config) -> PyResult<()> {
    CONFIG.set(py, config).map_err(|_| PyValueError::new_err("the inline move is configured once"))
}

/// A profiler became active (`+1`) or stopped being active (`-1`).
#[pyfunction]
fn count_active_profilers(delta: isize) {
    PROFILERS.fetch_add(delta, Ordering::SeqCst);
}

/// Whether any profiler is active in the process (the native moves then step aside).
pub(crate) fn profiling() -> bool {
    PROFILERS.load(Ordering::SeqCst) > 0
}

/// Whether operations record autograd nodes on the calling thread.
#[pyfunction]
pub(crate) fn grad_enabled() -> bool {
    GRAD_ENABLED.with(Cell::get)
}

/// Turn recording on or off for the calling thread; returns the previous state.
#[pyfunction]
fn set_grad_enabled(enabled: bool) -> bool {
    GRAD_ENABLED.with(|mode| mode.replace(enabled))
}

/// The checks of the validation table that both native moves make on the carriers' state,
/// before claiming: both live, unowned and unclaimed, the destination mutable (by its flag,
/// unless its class answers `_is_mutable` itself: the core's request asks that hook) and of
/// the tensor's dtype. False: the Python request decides (and raises).
pub(crate) fn carriers_accept(
    view: &View,
    source: &Bound<'_, CarrierBase>,
    destination: &Bound<'_, CarrierBase>,
    destination_hooks: MoveHooks,
) -> PyResult<bool> {
    let (s, d) = (source.get(), destination.get());
    if !s.state().cell().is_free() || !d.state().cell().is_free() {
        return Ok(false);
    }
    if !destination_hooks.is_mutable() && !d.mutable_flag() {
        return Ok(false);
    }
    let py = destination.py();
    Ok(d.dtype.with(py, |dtype| dtype.is(view.dtype.bind(py))).unwrap_or(false))
}

/// Asks for the `cosize` slots a small move of `view` will copy, in its host source and destination,
/// when the move starts: both are usually cold (the source filled long before, the
/// destination fresh), and their cache misses then overlap the checks, claims and routes
/// instead of stalling the copy (see `copy::prefetch_read`). Only a hint.
fn prefetch_move(source: &Bound<'_, PyAny>, destination: &Bound<'_, PyAny>, view: &View, cosize: i64) {
    prefetch_window(source, view.offset, cosize);
    prefetch_window(destination, 0, cosize);
}

fn prefetch_window(carrier: &Bound<'_, PyAny>, first: i64, count: i64) {
    let Ok(carrier) = carrier.cast::<CarrierBase>() else { return };
    carrier.get().storage.with(carrier.py(), |storage| {
        if let Ok(host) = storage.cast::<HostStorage>() {
            host.get().prefetch(first, count);
        }
    });
}

/// The view of `tensor` when it is exactly a `Tensor` (no subclass: a subclass may override
/// what the native moves skip) of one subtensor; None otherwise.
pub(crate) fn exact_single_view<'a>(cfg: &Config, tensor: &'a Bound<'_, PyAny>) -> Option<&'a View> {
    let t = tensor.cast::<TensorBase>().ok()?;
    if !t.get_type().is(cfg.tensor.bind(tensor.py())) {
        return None;
    }
    t.get().view().ok().filter(|view| view.single)
}

/// What both native moves hand the core's request: the tensor's window over its source and the
/// destination, as core carriers (`PyCarrier`, calling the hooks `route` says their classes
/// override). None, nothing changed and no hook called, when the Python path must decide: the
/// Python dtypes differ (the core compares element kinds only), a quick look at the state or
/// the destination's size refuses, or a carrier has no live built-in storage. The adapters
/// hold Python references: the caller drops them with the GIL held, or lets a worker drop
/// them.
pub(crate) fn core_window(
    view: &View,
    source: &Bound<'_, CarrierBase>,
    destination: &Bound<'_, CarrierBase>,
    route: &Route,
) -> PyResult<Option<(Subtensor, Arc<PyCarrier>)>> {
    let (source_hooks, destination_hooks) = route.hooks();
    if !carriers_accept(view, source, destination, destination_hooks)? {
        return Ok(None);
    }
    let (Some(from), Some(into)) =
        (PyCarrier::builtin(source, source_hooks), PyCarrier::builtin(destination, destination_hooks))
    else {
        return Ok(None);
    };
    let Ok(offset) = usize::try_from(view.offset) else {
        return Ok(None);
    };
    let layout = view.layout.bind(source.py()).get().shared().clone();
    // A destination too small is the request's refusal to word; deciding it here, before
    // the core's table asks the destination's `_is_mutable`, keeps that hook to one call.
    if (into.size() as i64) < layout.cosize() && !into.can_allocate() {
        return Ok(None);
    }
    let Ok(window) = Subtensor::new(from, offset, layout) else {
        return Ok(None);
    };
    Ok(Some((window, into)))
}

/// After the core's request refused a native move: the refusal to raise when the
/// destination's own `_is_mutable` hook decided it (what it raised, or "not mutable" for its
/// False), so that the general request does not ask the hook a second time; None when the
/// hook was not asked or said yes (the general request decides, having changed nothing).
pub(crate) fn refused_by_hook(into: &PyCarrier, destination: &Bound<'_, CarrierBase>) -> Option<PyErr> {
    match into.mutable_answer()? {
        Err(raised) => Some(raised.clone_ref(destination.py())),
        Ok(false) => Some(match type_name(destination.as_any()) {
            Ok(carrier) => error::move_refusal(MoveRefusal::DestinationNotMutable { carrier }),
            Err(e) => e,
        }),
        Ok(true) => None,
    }
}

/// The autograd node of a move both native moves record: `record(tensor, output, route,
/// state)`, the state (`MoveState`: the view's carrier and layout, the destination, the reverse
/// route) built here so that recording calls Python once.
pub(crate) fn record_node<'py>(
    cfg: &Config,
    tensor: &Bound<'py, PyAny>,
    output: &Bound<'py, TensorBase>,
    view: &View,
    destination: &Bound<'py, CarrierBase>,
    route: &Py<Route>,
    reverse: Option<&Py<Route>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = tensor.py();
    let source = view.carrier.bind(py);
    let state = MoveState::new(
        source.clone(),
        destination.clone().into_any(),
        view.layout.bind(py).clone().into_any(),
        reverse.map(|r| r.bind(py).clone().into_any()),
    );
    // The saved input's version token, `Tensor.version_snapshot()` of a one-carrier tensor:
    // `((id(carrier), carrier.version),)`, read from the carrier's state (the move does not
    // change it), so recording runs no Python frame for it.
    let version = source.cast::<CarrierBase>()?.get().state().version();
    let token = PyTuple::new(py, [(source.as_ptr() as usize, version)])?;
    cfg.record.bind(py).call1((tensor, output, route, state, token))
}

/// The moved Tensor both native moves publish: a `Tensor` over `destination` at offset 0
/// with the source view's layout and dtype.
pub(crate) fn result_view<'py>(
    cfg: &Config,
    destination: &Bound<'py, CarrierBase>,
    view: &View,
) -> PyResult<Bound<'py, TensorBase>> {
    let py = destination.py();
    TensorBase::new_view(
        cfg.tensor.bind(py),
        destination.clone().into_any().unbind(),
        0,
        view.layout.clone_ref(py),
        view.dtype.clone_ref(py),
    )
}

/// How a move run on the caller's thread ended, once it got past its claims: the result
/// Tensor, or the failure of its commit (the core rolled back: the source is live, the
/// destination unclaimed), which a blocking move raises and an asynchronous one's handle holds.
pub(crate) struct Ran {
    /// The moved Tensor, or the commit's failure.
    pub(crate) result: PyResult<Py<PyAny>>,
    /// The bytes of the moved span (the layout's cosize in slots of the dtype).
    pub(crate) bytes: u64,
}

/// The move of `tensor` into `destination` run whole on this thread, when this path applies
/// (see the module docs): how it ran, or None with nothing changed. A refusal that a class's
/// hook decides raises, before any effect. The fast route of both `move_entry::move_blocking`
/// and, for a small move, `move_entry::move_async` (whose handle is done when returned).
pub(crate) fn move_inline(
    py: Python<'_>,
    tensor: &Bound<'_, PyAny>,
    destination: &Bound<'_, PyAny>,
) -> PyResult<Option<Ran>> {
    let Some(cfg) = CONFIG.get(py) else {
        return Ok(None);
    };
    if profiling() {
        return Ok(None);
    }
    let Some(view) = exact_single_view(cfg, tensor) else {
        return Ok(None);
    };
    let source = view.carrier.bind(py);
    let layout = view.layout.bind(py);
    let cosize = layout.get().core().cosize();
    prefetch_move(source, destination, view, cosize);
    let recording = cfg.records(py, view.dtype.bind(py));
    let (source_type, destination_type) = (source.get_type(), destination.get_type());
    // (CPU, CPU) at its default route, or a pair of plain CPU subclasses Python resolved to
    // it (and, for a recorded move, its reverse, whose route the node's backward takes): the
    // pair's cached route decision says so. The file pairs are `move_async_builtin`'s.
    if matches!(
        BuiltinPair::of(cfg, py, &source_type, &destination_type),
        Some(BuiltinPair::CpuToFile | BuiltinPair::FileToCpu)
    ) {
        return Ok(None);
    }
    let Some((route, reverse)) = routes::native_routes(py, &source_type, &destination_type, recording) else {
        return Ok(None);
    };
    if source.is(destination) || cosize > cfg.max_slots {
        return Ok(None);
    }
    let (Ok(src), Ok(dst)) = (source.cast::<CarrierBase>(), destination.cast::<CarrierBase>()) else {
        return Ok(None);
    };
    // The core's request: its validation table, both claims in one step each (of two racing
    // moves exactly one claims), then below the transfer and its one terminal commit. A refusal
    // here changed nothing: the Python request decides it, raising in the specified words.
    let Some((window, into_carrier)) = core_window(view, src, dst, route.get())? else {
        return Ok(None);
    };
    let pending = match prepare_window_move(&window, &into_carrier, Some(RouteKind::HostToHost)) {
        Ok(pending) => pending,
        Err(_) => {
            return match refused_by_hook(&into_carrier, dst) {
                Some(raised) => Err(raised),
                None => Ok(None),
            }
        }
    };
    // The copy and the commit with the GIL released; both carriers are claimed until the
    // commit releases the source and ends both claims. The adapters (Python references) are
    // dropped after, with the GIL held.
    let outcome = py.detach(|| pending.finish());
    drop((window, into_carrier));
    let bytes = (cosize as u64).saturating_mul(cfg.slot_bytes(view.dtype.bind(py)).unwrap_or(0));
    if let Err(e) = outcome {
        // Only a source's own `_release` hook (or a panic) fails the commit: the core rolled
        // back, and the failure is the move's, a WARNING as every failed move's is.
        let raised = error::model(py, e);
        cfg.failed.bind(py).call1((bytes, raised.value(py)))?;
        return Ok(Some(Ran { result: Err(raised), bytes }));
    }
    let output = result_view(cfg, dst, view)?;
    if recording {
        // The node the Python request records at initiation and attaches at its commit;
        // recording reads the source's version, which the move does not change.
        record_node(cfg, tensor, &output, view, dst, &route, reverse.as_ref())?;
    }
    Ok(Some(Ran { result: Ok(output.into_any().unbind()), bytes }))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(configure_inline_move, m)?)?;
    m.add_function(wrap_pyfunction!(count_active_profilers, m)?)?;
    m.add_function(wrap_pyfunction!(grad_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(set_grad_enabled, m)?)?;
    Ok(())
}
