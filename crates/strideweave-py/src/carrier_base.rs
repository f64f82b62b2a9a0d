//! `_native._CarrierBase`: the native base class of `strideweave.Carrier`, which owns the
//! framework state every carrier shares.
//!
//! The framework state (version, released, owner, pending claim) is the core's
//! `model::CarrierState`, the same type the Rust model's carriers hold, with Python objects as
//! its foreign owner and claim payloads (`carrier_state.rs`), and its transitions are its
//! cell's: each checks and changes the state in one critical section, and the methods below
//! expose them to the Python layer (`_sw_take_claims`, `_sw_begin_release`, ...). The fast
//! paths (`Tensor[key]`, the inline move, the worker commit) use the same cell. The
//! built-in carriers' Rust storage object and mutability flag are fields here too. Python code
//! sees all of it under the attribute names it always used (`_sw_version`, `_sw_released`,
//! `_sw_owner`, `_sw_claim`, `_storage`, `_dtype`, `_mutable`), through getters and setters.
//!
//! Why the locks are sound under the GIL: no Python code runs inside the cell's lock or a
//! slot's, and a payload a transition or setter displaces is dropped only after the lock is
//! released, because dropping it may run a `__del__` that reads this very carrier.
//!
//! A Python-level write, whose store runs a Python hook, cannot run inside the cell's lock: it
//! opens the write in the cell (`_sw_open_write`), stores with no lock held and closes it
//! (`_sw_close_write`); while it is open the cell refuses claims and releases, which the
//! binding turns into a wait for other threads (`carrier_state.rs`). The cell is the only
//! lock of carrier state.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use parking_lot::Mutex;
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use crate::carrier_state::{self, claim_object, owner_object, py_claim, py_owner, PyJudge};
use crate::error;
use crate::set_once::SetOnce;
use strideweave_core::model::{CarrierState, Holder, StateRefusal};

/// One optional object field. `take`/`put` hand the previous value back so that the caller
/// drops it after the lock is gone.
#[derive(Default)]
pub(crate) struct Slot(Mutex<Option<Py<PyAny>>>);

impl Slot {
    pub(crate) fn get(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.0.lock().as_ref().map(|v| v.clone_ref(py))
    }

    /// `f(value)` without taking a reference (the value must not be dropped by `f`; no
    /// Python code may run in `f`, which holds the slot's lock).
    pub(crate) fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&Bound<'_, PyAny>) -> R) -> Option<R> {
        self.0.lock().as_ref().map(|v| f(v.bind(py)))
    }

    #[must_use = "drop the previous value after the lock is released"]
    pub(crate) fn put(&self, value: Option<Py<PyAny>>) -> Option<Py<PyAny>> {
        std::mem::replace(&mut *self.0.lock(), value)
    }

    pub(crate) fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(v) = self.0.lock().as_ref() {
            visit.call(v)?;
        }
        Ok(())
    }
}

/// The storage slot of a built-in carrier. A constructor sets it once and nothing changes it
/// after, so a read is one atomic load (the element path reads it on every access). Should
/// it ever be assigned again or deleted, it moves to a locked slot for good.
#[derive(Default)]
pub(crate) struct StorageSlot {
    first: SetOnce<Py<PyAny>>,
    later: Slot,
    replaced: AtomicBool,
}

impl StorageSlot {
    pub(crate) fn get(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        if self.replaced.load(Ordering::Acquire) {
            self.later.get(py)
        } else {
            self.first.get().map(|v| v.clone_ref(py))
        }
    }

    /// `f(value)` without taking a reference (no Python code may run in `f`).
    pub(crate) fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&Bound<'_, PyAny>) -> R) -> Option<R> {
        if self.replaced.load(Ordering::Acquire) {
            self.later.with(py, f)
        } else {
            self.first.get().map(|v| f(v.bind(py)))
        }
    }

    /// Sets the slot; the previous value, if it can be given back, to drop after the call.
    /// (The first value stays referenced by the slot until the carrier is freed.)
    #[must_use = "drop the previous value after the lock is released"]
    pub(crate) fn put(&self, value: Option<Py<PyAny>>) -> Option<Py<PyAny>> {
        let value = match value {
            Some(v) if !self.replaced.load(Ordering::Acquire) && self.first.get().is_none() => {
                match self.first.set(v) {
                    Ok(()) => return None,
                    Err(v) => Some(v),
                }
            }
            other => other,
        };
        let previous = self.later.put(value);
        self.replaced.store(true, Ordering::Release);
        previous
    }

    fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(v) = self.first.get() {
            visit.call(v)?;
        }
        self.later.visit(visit)
    }
}

/// `_mutable` is unset until a built-in constructor sets it.
const MUTABLE_UNSET: u8 = 0;
const MUTABLE_NO: u8 = 1;
const MUTABLE_YES: u8 = 2;

/// Whether the class keeps the built-in element path (`_sw_fast_access`), looked up on first
/// use: the class decides it once, when it is created.
const FAST_UNKNOWN: u8 = 0;
const FAST_NO: u8 = 1;
const FAST_YES: u8 = 2;

/// Groups of framework hooks whose "not overridden by the class" answer a carrier remembers
/// (bits of `CarrierBase::hooks`: two bits each, known and yes).
#[derive(Clone, Copy)]
pub(crate) enum Hooks {
    /// `dlpack_info` and `pointer` are the built-in CPU's.
    CpuDlpack = 0,
    /// `is_mutable` is `Carrier`'s and `_is_mutable` the Rust-backed built-ins'.
    BuiltinMutable = 2,
}

/// Native base of `strideweave.Carrier` (framework state; not public API).
#[pyclass(subclass, frozen, dict, weakref, module = "strideweave", name = "_CarrierBase")]
pub struct CarrierBase {
    /// Version, released, owner (the owning composite's token: Evictable, TiledEvictable),
    /// claim (the pending move holding this carrier, `RELEASING` while a release hook runs);
    /// owner and claim are Python objects (`carrier_state::PyPayload`). Its class name is
    /// never reported: the binding words refusals with the carrier's own type name.
    state: CarrierState,
    /// The `_native` storage object of a built-in carrier (`HostStorage`, `FileStorage`, ...).
    pub(crate) storage: StorageSlot,
    /// The carrier's dtype, where its class stores one in `_dtype` (the built-ins do; the
    /// native move compares it with the tensor's without a Python call).
    pub(crate) dtype: StorageSlot,
    mutable: AtomicU8,
    fast_access: AtomicU8,
    hooks: AtomicU8,
}

impl CarrierBase {
    /// The carrier's framework state.
    pub(crate) fn state(&self) -> &CarrierState {
        &self.state
    }

    /// Shorthands of the state's lock-free reads, for the DLPack export.
    pub(crate) fn released(&self) -> bool {
        self.state.is_released()
    }

    pub(crate) fn owner_is_none(&self) -> bool {
        !self.state.is_owned()
    }

    /// The built-in mutability flag; false when no constructor set it.
    pub(crate) fn mutable_flag(&self) -> bool {
        self.mutable.load(Ordering::Relaxed) == MUTABLE_YES
    }

    /// Live, unowned, unclaimed and mutable: a public write may go ahead without the
    /// reference path deciding anything.
    pub(crate) fn plainly_writable(&self) -> bool {
        self.state.cell().is_free() && self.mutable_flag()
    }

    /// The remembered answer for `which`, computed by `check` the first time.
    pub(crate) fn hooks_are(&self, which: Hooks, check: impl FnOnce() -> bool) -> bool {
        let (known, yes) = (1u8 << (which as u8), 2u8 << (which as u8));
        let bits = self.hooks.load(Ordering::Relaxed);
        if bits & known != 0 {
            return bits & yes != 0;
        }
        let answer = check();
        self.hooks.fetch_or(known | if answer { yes } else { 0 }, Ordering::Relaxed);
        answer
    }

    /// True when the carrier's class keeps the built-in element path (asked of the package once
    /// per carrier: `access::keeps_builtin_element_path`).
    pub(crate) fn fast_access(slf: &Bound<'_, Self>) -> PyResult<bool> {
        let this = slf.get();
        match this.fast_access.load(Ordering::Relaxed) {
            FAST_YES => return Ok(true),
            FAST_NO => return Ok(false),
            _ => {}
        }
        let fast = crate::access::keeps_builtin_element_path(slf.get_type().as_any())?;
        this.fast_access.store(if fast { FAST_YES } else { FAST_NO }, Ordering::Relaxed);
        Ok(fast)
    }
}

#[pymethods]
impl CarrierBase {
    /// Accepts and ignores any arguments: a subclass's `__init__` takes its own.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        CarrierBase {
            state: CarrierState::new_static("Carrier"),
            storage: StorageSlot::default(),
            dtype: StorageSlot::default(),
            mutable: AtomicU8::new(MUTABLE_UNSET),
            fast_access: AtomicU8::new(FAST_UNKNOWN),
            hooks: AtomicU8::new(0),
        }
    }

    #[getter(_sw_version)]
    fn get_version(&self) -> u64 {
        self.state.version()
    }

    #[setter(_sw_version)]
    fn set_version(&self, value: Option<u64>) -> PyResult<()> {
        let value = value.ok_or_else(|| PyTypeError::new_err("a carrier's version cannot be deleted"))?;
        self.state.cell().set_version(value);
        Ok(())
    }

    #[getter(_sw_released)]
    fn get_released(&self) -> bool {
        self.state.is_released()
    }

    #[setter(_sw_released)]
    fn set_released_flag(&self, value: Option<bool>) -> PyResult<()> {
        let value = value.ok_or_else(|| PyTypeError::new_err("a carrier's release state cannot be deleted"))?;
        self.state.cell().set_released(value);
        Ok(())
    }

    #[getter(_sw_owner)]
    fn get_owner(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.state.cell().with_owner(|owner| owner.and_then(owner_object).map(|o| o.clone_ref(py)))
    }

    #[setter(_sw_owner)]
    fn set_owner(&self, value: Option<Bound<'_, PyAny>>) {
        let owner = value.filter(|v| !v.is_none()).map(|v| py_owner(v.unbind()));
        drop(self.state.cell().replace_owner(owner));
    }

    /// The claim's Python object; None when unclaimed or claimed by the core's own move
    /// request (a native fast route's move), which every check treats as a pending move.
    #[getter(_sw_claim)]
    fn get_claim(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.state.cell().with_claim(|claim| claim.and_then(claim_object).map(|c| c.clone_ref(py)))
    }

    #[setter(_sw_claim)]
    fn set_claim(&self, value: Option<Bound<'_, PyAny>>) {
        let claim = value.filter(|v| !v.is_none()).map(|v| py_claim(v.unbind()));
        drop(self.state.cell().replace_claim(claim));
    }

    /// Claims every `(carrier, role, action)` of `entries` for `claim`, or none: each must
    /// be live and not claimed except by `active` (a claim the caller passes as its own), checked
    /// in order; RuntimeError names the first that is not.
    #[staticmethod]
    fn _sw_take_claims(
        claim: &Bound<'_, PyAny>,
        entries: Vec<(Bound<'_, CarrierBase>, String, String)>,
        active: Option<Bound<'_, PyAny>>,
        releasing: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        carrier_state::take_claims(claim, &entries, &PyJudge { active: active.as_ref(), releasing, owner: None })
    }

    /// Claims this carrier for a composite's own `action` (an Evictable's evict/promote, a
    /// projection into it): RuntimeError worded for `action` if released, owned or claimed
    /// (but by `active`), checked and claimed in one step.
    fn _sw_take_claim(
        slf: &Bound<'_, Self>,
        claim: &Bound<'_, PyAny>,
        action: &str,
        active: Option<Bound<'_, PyAny>>,
        releasing: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        carrier_state::take_claim(slf, claim, action, &PyJudge { active: active.as_ref(), releasing, owner: None })
    }

    /// Makes `owner` this carrier's owner if it is live, unowned and not claimed (but by
    /// `active`), in one step; False, changing nothing, otherwise.
    fn _sw_adopt(
        &self,
        owner: &Bound<'_, PyAny>,
        active: Option<Bound<'_, PyAny>>,
        releasing: &Bound<'_, PyAny>,
    ) -> bool {
        carrier_state::adopt(self, owner, &PyJudge { active: active.as_ref(), releasing, owner: None })
    }

    /// Gives up ownership if `owner` owns this carrier; returns whether it did.
    fn _sw_disown(&self, owner: &Bound<'_, PyAny>) -> bool {
        let displaced = self.state.cell().disown_if(|held| owner_object(held).is_some_and(|held| owner.is(held)));
        let disowned = displaced.is_some();
        drop(displaced);
        disowned
    }

    /// Drops `claim` if this carrier still holds it (idempotent).
    fn _sw_drop_claim(&self, claim: &Bound<'_, PyAny>) {
        carrier_state::drop_claim(self, claim);
    }

    /// RuntimeError unless no claim but `active`'s holds the carrier.
    fn _sw_check_claim(
        slf: &Bound<'_, Self>,
        action: &str,
        active: Option<Bound<'_, PyAny>>,
        releasing: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        carrier_state::check_unclaimed(slf, action, &PyJudge { active: active.as_ref(), releasing, owner: None })
    }

    /// Starts a release: RuntimeError if owned (but by `owner`) or claimed (but by `active`); `(False, None)`
    /// if released already; else `(True, saved)`, the carrier claimed by `releasing` unless
    /// `active` holds it, and `saved` the claim `_sw_finish_release`/`_sw_abort_release`
    /// restore.
    #[pyo3(signature = (active, releasing, owner=None))]
    fn _sw_begin_release(
        slf: &Bound<'_, Self>,
        active: Option<Bound<'_, PyAny>>,
        releasing: &Bound<'_, PyAny>,
        owner: Option<Bound<'_, PyAny>>,
    ) -> PyResult<(bool, Option<Py<PyAny>>)> {
        carrier_state::begin_release(slf, &PyJudge { active: active.as_ref(), releasing, owner: owner.as_ref() })
    }

    /// The release hook succeeded: released, claim back to `saved`, in one step.
    fn _sw_finish_release(&self, saved: Option<Bound<'_, PyAny>>) {
        drop(self.state.cell().finish_release(saved.map(|saved| py_claim(saved.unbind()))));
    }

    /// The release hook failed: claim back to `saved`; still live.
    fn _sw_abort_release(&self, saved: Option<Bound<'_, PyAny>>) {
        drop(self.state.cell().abort_release(saved.map(|saved| py_claim(saved.unbind()))));
    }

    /// A framework mutation: RuntimeError if owned or claimed (but by `active`), else the
    /// version rises by one.
    fn _sw_mutate(
        slf: &Bound<'_, Self>,
        active: Option<Bound<'_, PyAny>>,
        releasing: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        carrier_state::mutate(slf, &PyJudge { active: active.as_ref(), releasing, owner: None })
    }

    /// Opens a public write whose store runs a Python hook: the checks of a write (released,
    /// owned but by `owner` or, with `any_owner`, by anyone, claimed but by `active`) and the
    /// write counted as open, in one step; until `_sw_close_write`, claims and releases of this
    /// carrier are refused (see `carrier_state::open_write`).
    #[pyo3(signature = (active, releasing, owner=None, any_owner=false))]
    fn _sw_open_write(
        slf: &Bound<'_, Self>,
        active: Option<Bound<'_, PyAny>>,
        releasing: &Bound<'_, PyAny>,
        owner: Option<Bound<'_, PyAny>>,
        any_owner: bool,
    ) -> PyResult<()> {
        let judge = PyJudge { active: active.as_ref(), releasing, owner: None };
        carrier_state::open_write(slf, owner.as_ref(), any_owner, &judge)
    }

    /// Closes a write `_sw_open_write` opened; with `count`, its store went through and the
    /// version rises as `_sw_count_write` says, in the same step. Returns whether it rose.
    fn _sw_close_write(&self, count: bool) -> bool {
        self.state.cell().close_write(count)
    }

    /// Count one successful public write in the version. A pending move's own transfer
    /// writing into its claimed carriers is relocation, not an in-place mutation, so it is
    /// not counted (the write itself was only allowed because this thread runs that move).
    /// Returns whether it counted.
    fn _sw_count_write(&self) -> bool {
        self.state.cell().count_write()
    }

    /// The storage object of a built-in carrier; AttributeError until a constructor sets it,
    /// as for any attribute never assigned.
    #[getter(_storage)]
    fn get_storage(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.storage.get(py).ok_or_else(|| PyAttributeError::new_err("_storage"))
    }

    #[setter(_storage)]
    fn set_storage(&self, value: Option<Bound<'_, PyAny>>) {
        drop(self.storage.put(value.map(Bound::unbind)));
    }

    /// The dtype a carrier class stores in `_dtype`; AttributeError until it is assigned.
    #[getter(_dtype)]
    fn get_dtype(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.dtype.get(py).ok_or_else(|| PyAttributeError::new_err("_dtype"))
    }

    #[setter(_dtype)]
    fn set_dtype(&self, value: Option<Bound<'_, PyAny>>) {
        drop(self.dtype.put(value.map(Bound::unbind)));
    }

    #[getter(_mutable)]
    fn get_mutable(&self) -> PyResult<bool> {
        match self.mutable.load(Ordering::Relaxed) {
            MUTABLE_UNSET => Err(PyAttributeError::new_err("_mutable")),
            flag => Ok(flag == MUTABLE_YES),
        }
    }

    #[setter(_mutable)]
    fn set_mutable(&self, value: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        let flag = match value {
            None => MUTABLE_UNSET,
            Some(v) if v.is_truthy()? => MUTABLE_YES,
            Some(_) => MUTABLE_NO,
        };
        self.mutable.store(flag, Ordering::Relaxed);
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Each payload is this carrier's own reference to its object (`PyPayload`).
        let cell = self.state.cell();
        cell.with_owner(|owner| owner.and_then(owner_object).map_or(Ok(()), |o| visit.call(o)))?;
        cell.with_claim(|claim| claim.and_then(claim_object).map_or(Ok(()), |c| visit.call(c)))?;
        self.storage.visit(&visit)?;
        self.dtype.visit(&visit)
    }

    fn __clear__(&self) {
        let dropped = (
            self.state.cell().replace_owner(None),
            self.state.cell().replace_claim(None),
            self.storage.put(None),
            self.dtype.put(None),
        );
        drop(dropped);
    }
}

/// The RuntimeError of an `action` refused because a pending operation holds a carrier of
/// class `carrier`, in the core's words (`model::StateRefusal`), for a composite that checks
/// its own pending transition (`Evictable`): raise what this returns.
#[pyfunction]
fn pending_move_refusal(py: Python<'_>, carrier: String, action: String) -> Py<PyAny> {
    error::state_refusal(StateRefusal::Held { carrier, action, by: Holder::PendingMove }).into_value(py).into_any()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CarrierBase>()?;
    m.add_function(wrap_pyfunction!(pending_move_refusal, m)?)?;
    Ok(())
}
