//! `_native.move_inline`: a whole blocking `move` in one native call, for the commonest small
//! move: a one-subtensor `Tensor` between two exact `CPU` carriers over the default route.
//!
//! A small move's copy takes well under a microsecond, so everything around it is the cost:
//! validation, claims, the commit, the result Tensor. This path does all of it in Rust, with
//! the same outcome as the Python request (`carriers/move.py`): the source released, its
//! claim held until then, the destination holding the values at offset 0 under the same
//! layout, no version change, the result a `Tensor` over the destination, and, for a
//! differentiable tensor in grad mode, the same autograd node (made by a Python callback).
//!
//! It only ever *succeeds*. Whenever anything would need a decision of the reference path (a
//! failed check, whose error and order the Python path owns; a profiler that must see the
//! move; a route that is not the default; a carrier subclass; a carrier a write is storing
//! into), it returns None having changed nothing, and `move()` runs the Python request.
//!
//! Atomicity: both claims are taken in one transition of the carriers' state cells (the core's
//! `StateCell::claim_array`, which checks them too, and refuses a carrier a Python-level write
//! has open), the cells being the only lock of carrier state. The copy runs with the GIL released while
//! both carriers are claimed, so every other write, release or move of either fails as the
//! specification requires. The commit releases the source and drops its claim in one
//! transition, then drops the destination's.

use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};

use strideweave_core::model::{Claim, ClaimRule, StateCell, Strict};

use crate::carrier_base::CarrierBase;
use crate::carrier_state::{claim_object, py_claim};
use crate::jobs::run_blocking;
use crate::routes;
use crate::storage::HostStorage;
use crate::tensor_base::{TensorBase, View};
use crate::transfer::LayoutJob;

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
    /// The claim the carriers hold while the copy runs (reads as "a pending move").
    claim: Py<PyAny>,
    /// Dtypes whose tensors are differentiable (they need an autograd node in grad mode).
    differentiable: Py<PyTuple>,
    /// The largest cosize run on the caller's thread (`move.INLINE_SLOTS`).
    pub(crate) max_slots: i64,
    /// `record(tensor, output)`: makes the autograd node of a recorded move, attaches it to
    /// the result and returns it (`inline_move._record_native_move`).
    pub(crate) record: Py<PyAny>,
    /// `(dtype, move._slot_bytes(dtype))` for every dtype a built-in carrier stores: the slot
    /// size of `AwaitMove.bytes_total`, without calling the dtype's `bits` property.
    slot_bytes: Vec<(Py<PyAny>, u64)>,
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
    /// The pair of exactly these classes, if it is one.
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
/// before claiming: both live, unowned and unclaimed, the destination mutable and of the
/// tensor's dtype. False: the Python request decides (and raises).
pub(crate) fn carriers_accept(
    view: &View,
    source: &Bound<'_, CarrierBase>,
    destination: &Bound<'_, CarrierBase>,
) -> PyResult<bool> {
    let (s, d) = (source.get(), destination.get());
    if !s.state().cell().is_free() || !d.state().cell().is_free() || !d.mutable_flag() {
        return Ok(false);
    }
    let py = destination.py();
    Ok(d.dtype.with(py, |dtype| dtype.is(view.dtype.bind(py))).unwrap_or(false))
}

/// Claims both carriers for one move, with `claim` (made once per carrier), in one
/// transition of their state cells that checks them too: the source live, unowned and
/// unclaimed, the destination also mutable. `carriers_accept` reads the state without the
/// cells' locks to give up early; this is where the checks hold. False: nothing claimed.
pub(crate) fn claim_both(
    source: &Bound<'_, CarrierBase>,
    destination: &Bound<'_, CarrierBase>,
    mut claim: impl FnMut() -> Py<PyAny>,
) -> bool {
    let (s, d) = (source.get(), destination.get());
    let rules = [
        (s.state().cell(), ClaimRule::FREE),
        (d.state().cell(), ClaimRule { owner_refuses: true, mutable: d.mutable_flag() }),
    ];
    match StateCell::claim_array(rules, || py_claim(claim()), &Strict) {
        Ok(displaced) => {
            drop(displaced);
            true
        }
        Err(_) => false,
    }
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

/// The prepared copy, both carriers already claimed.
struct Claimed<'py> {
    source: Bound<'py, CarrierBase>,
    destination: Bound<'py, CarrierBase>,
    source_storage: Bound<'py, HostStorage>,
    job: LayoutJob,
}

/// The validation table for the one case handled here, and the claims; None (nothing
/// changed) whenever the Python path must decide.
fn check_and_claim<'py>(
    cfg: &Config,
    view: &View,
    source: &Bound<'py, PyAny>,
    destination: &Bound<'py, PyAny>,
) -> PyResult<Option<Claimed<'py>>> {
    let py = source.py();
    let (Ok(src), Ok(dst)) = (source.cast::<CarrierBase>(), destination.cast::<CarrierBase>()) else {
        return Ok(None);
    };
    if !carriers_accept(view, src, dst)? {
        return Ok(None);
    }
    let (s, d) = (src.get(), dst.get());
    let (Some(src_storage), Some(dst_storage)) = (s.storage.get(py), d.storage.get(py)) else {
        return Ok(None);
    };
    let (Ok(src_storage), Ok(dst_storage)) =
        (src_storage.into_bound(py).cast_into::<HostStorage>(), dst_storage.into_bound(py).cast_into::<HostStorage>())
    else {
        return Ok(None);
    };
    let (sh, dh) = (src_storage.get(), dst_storage.get());
    let (Some(src_buf), Some(dst_buf)) = (sh.buffer(), dh.buffer()) else {
        return Ok(None);
    };
    if sh.kind() != dh.kind() {
        return Ok(None);
    }
    let layout = view.layout.bind(py).get().core();
    let elem = sh.kind().size();
    if ((dst_buf.len() / elem) as i64) < layout.cosize() {
        return Ok(None); // too small: the Python path raises ValueError
    }
    let Ok(job) = LayoutJob::between(
        src_buf,
        view.offset,
        dst_buf,
        0,
        layout.leaf_extents().to_vec(),
        layout.leaf_strides().to_vec(),
        elem,
    ) else {
        return Ok(None);
    };
    if !claim_both(src, dst, || cfg.claim.clone_ref(py)) {
        return Ok(None);
    }
    Ok(Some(Claimed { source: src.clone(), destination: dst.clone(), source_storage: src_storage, job }))
}

/// The blocking move of `tensor` into `destination` when this path applies (see the module
/// docs): the result Tensor, or None with nothing changed. `move_entry::move_blocking`'s
/// fast route.
pub(crate) fn move_inline(
    py: Python<'_>,
    tensor: &Bound<'_, PyAny>,
    destination: &Bound<'_, PyAny>,
) -> PyResult<Option<Py<PyAny>>> {
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
    if source.is(destination) || view.layout.bind(py).get().core().cosize() > cfg.max_slots {
        return Ok(None);
    }
    let Some(claimed) = check_and_claim(cfg, view, source, destination)? else {
        return Ok(None);
    };
    let Claimed { source: src, destination: dst, source_storage, job } = claimed;
    let ours = |held: &Claim| claim_object(held).is_some_and(|held| held.is(&cfg.claim));
    let drop_claims = || {
        drop(src.get().state().cell().drop_claim_if(ours));
        drop(dst.get().state().cell().drop_claim_if(ours));
    };
    // The copy, GIL released; both carriers are claimed meanwhile.
    if let Err(err) = run_blocking(py, move || job.run()) {
        drop_claims();
        return Err(err);
    }
    // The commit: release the source while it is still claimed, then drop both claims.
    source_storage.get().release_buffer();
    let (_, held) = src.get().state().cell().release_claimed();
    drop(held);
    drop(dst.get().state().cell().drop_claim_if(ours));
    let output = result_view(cfg, &dst, view)?;
    if recording {
        // The node the Python request records at initiation and attaches at its commit;
        // recording reads the source's version, which the move does not change.
        let layout = view.layout.bind(py);
        cfg.record.bind(py).call1((tensor, &output, &src, &dst, layout, route, reverse))?;
    }
    Ok(Some(output.into_any().unbind()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(configure_inline_move, m)?)?;
    m.add_function(wrap_pyfunction!(count_active_profilers, m)?)?;
    m.add_function(wrap_pyfunction!(grad_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(set_grad_enabled, m)?)?;
    Ok(())
}
