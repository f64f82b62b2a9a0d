//! `_native._CarrierBase`: the native base class of `strideweave.Carrier`, which owns the
//! framework state every carrier shares.
//!
//! The state (version, released, owner, pending claim) and, for the built-in carriers, the
//! Rust storage object and the mutability flag are fields of this struct rather than entries
//! of the instance dict, so the native fast paths (`Tensor[key]`, the inline move) read and
//! change them as plain fields. Python code sees them as the attributes it always used
//! (`_sw_version`, `_sw_released`, `_sw_owner`, `_sw_claim`, `_storage`, `_mutable`), through
//! getters and setters.
//!
//! Why the locks are sound under the GIL: every access holds the GIL, each critical section is
//! a few loads and stores, and no Python code runs inside one. A value replaced in a slot is
//! dropped only after the slot's lock is released, because dropping it may run a `__del__`
//! that reads this very carrier.
//!
//! A state *transition* that spans several fields (check then claim, check then store) is
//! atomic because it runs in Rust without releasing the GIL and without calling Python code
//! in between, or, in Python, under `carriers.base.STATE_LOCK`; the inline move takes that
//! lock too (see `inline_move.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use parking_lot::Mutex;
use pyo3::exceptions::{PyAttributeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use crate::set_once::SetOnce;

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

/// Bits of `CarrierBase::busy`: which of the object fields hold something. Kept beside the
/// fields (updated by the only two setters) so the write fast path decides "plainly
/// writable" with one load instead of two locks.
const OWNED: u8 = 1;
const CLAIMED: u8 = 2;

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
    version: AtomicU64,
    released: AtomicBool,
    /// The owning composite's token (Evictable, TiledEvictable), or None.
    pub(crate) owner: Slot,
    /// The pending move holding this carrier, `RELEASING` while a release hook runs, or None.
    pub(crate) claim: Slot,
    /// The `_native` storage object of a built-in carrier (`HostStorage`, `FileStorage`, ...).
    pub(crate) storage: StorageSlot,
    mutable: AtomicU8,
    busy: AtomicU8,
    fast_access: AtomicU8,
    hooks: AtomicU8,
}

impl CarrierBase {
    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    pub(crate) fn bump_version(&self) {
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn released(&self) -> bool {
        self.released.load(Ordering::Relaxed)
    }

    pub(crate) fn set_released(&self) {
        self.released.store(true, Ordering::Relaxed);
    }

    /// The built-in mutability flag; false when no constructor set it.
    pub(crate) fn mutable_flag(&self) -> bool {
        self.mutable.load(Ordering::Relaxed) == MUTABLE_YES
    }

    pub(crate) fn owner_is_none(&self) -> bool {
        self.busy.load(Ordering::Relaxed) & OWNED == 0
    }

    /// Live, unowned and unclaimed.
    pub(crate) fn is_free(&self) -> bool {
        !self.released() && self.busy.load(Ordering::Relaxed) == 0
    }

    /// Live, unowned, unclaimed and mutable: a public write may go ahead without the
    /// reference path deciding anything.
    pub(crate) fn plainly_writable(&self) -> bool {
        !self.released() && self.busy.load(Ordering::Relaxed) == 0 && self.mutable_flag()
    }

    fn mark(&self, bit: u8, set: bool) {
        if set {
            self.busy.fetch_or(bit, Ordering::Relaxed);
        } else {
            self.busy.fetch_and(!bit, Ordering::Relaxed);
        }
    }

    pub(crate) fn put_owner(&self, value: Option<Py<PyAny>>) -> Option<Py<PyAny>> {
        self.mark(OWNED, value.is_some());
        self.owner.put(value)
    }

    pub(crate) fn put_claim(&self, value: Option<Py<PyAny>>) -> Option<Py<PyAny>> {
        self.mark(CLAIMED, value.is_some());
        self.claim.put(value)
    }

    /// The remembered answer for `which`, computed by `check` the first time.
    pub(crate) fn hooks_are(&self, which: Hooks, check: impl FnOnce() -> bool) -> bool {
        let (known, yes) = (1u8 << (which as u8), 2u8 << (which as u8));
        let bits = self.hooks.load(Ordering::Relaxed);
        if bits & known != 0 {
            return bits & yes != 0;
        }
        let answer = check();
        self.hooks
            .fetch_or(known | if answer { yes } else { 0 }, Ordering::Relaxed);
        answer
    }

    /// True when the carrier's class keeps the built-in element path (`_sw_fast_access`).
    pub(crate) fn fast_access(slf: &Bound<'_, Self>) -> PyResult<bool> {
        let this = slf.get();
        match this.fast_access.load(Ordering::Relaxed) {
            FAST_YES => return Ok(true),
            FAST_NO => return Ok(false),
            _ => {}
        }
        let py = slf.py();
        let fast = match slf.get_type().getattr_opt(pyo3::intern!(py, "_sw_fast_access"))? {
            Some(flag) => flag.is_truthy()?,
            None => false,
        };
        this.fast_access
            .store(if fast { FAST_YES } else { FAST_NO }, Ordering::Relaxed);
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
            version: AtomicU64::new(0),
            released: AtomicBool::new(false),
            owner: Slot::default(),
            claim: Slot::default(),
            storage: StorageSlot::default(),
            mutable: AtomicU8::new(MUTABLE_UNSET),
            busy: AtomicU8::new(0),
            fast_access: AtomicU8::new(FAST_UNKNOWN),
            hooks: AtomicU8::new(0),
        }
    }

    #[getter(_sw_version)]
    fn get_version(&self) -> u64 {
        self.version()
    }

    #[setter(_sw_version)]
    fn set_version(&self, value: Option<u64>) -> PyResult<()> {
        let value = value.ok_or_else(|| PyTypeError::new_err("a carrier's version cannot be deleted"))?;
        self.version.store(value, Ordering::Relaxed);
        Ok(())
    }

    #[getter(_sw_released)]
    fn get_released(&self) -> bool {
        self.released()
    }

    #[setter(_sw_released)]
    fn set_released_flag(&self, value: Option<bool>) -> PyResult<()> {
        let value = value.ok_or_else(|| PyTypeError::new_err("a carrier's release state cannot be deleted"))?;
        self.released.store(value, Ordering::Relaxed);
        Ok(())
    }

    #[getter(_sw_owner)]
    fn get_owner(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.owner.get(py)
    }

    #[setter(_sw_owner)]
    fn set_owner(&self, value: Option<Bound<'_, PyAny>>) {
        drop(self.put_owner(value.filter(|v| !v.is_none()).map(Bound::unbind)));
    }

    #[getter(_sw_claim)]
    fn get_claim(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.claim.get(py)
    }

    #[setter(_sw_claim)]
    fn set_claim(&self, value: Option<Bound<'_, PyAny>>) {
        drop(self.put_claim(value.filter(|v| !v.is_none()).map(Bound::unbind)));
    }

    /// The storage object of a built-in carrier; AttributeError until a constructor sets it,
    /// as for any attribute never assigned.
    #[getter(_storage)]
    fn get_storage(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.storage
            .get(py)
            .ok_or_else(|| PyAttributeError::new_err("_storage"))
    }

    #[setter(_storage)]
    fn set_storage(&self, value: Option<Bound<'_, PyAny>>) {
        drop(self.storage.put(value.map(Bound::unbind)));
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
        self.owner.visit(&visit)?;
        self.claim.visit(&visit)?;
        self.storage.visit(&visit)
    }

    fn __clear__(&self) {
        let dropped = (self.put_owner(None), self.put_claim(None), self.storage.put(None));
        drop(dropped);
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CarrierBase>()?;
    Ok(())
}
