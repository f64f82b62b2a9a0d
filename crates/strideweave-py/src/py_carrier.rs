//! `PyCarrier`: a Python carrier as a carrier of the core's object model (`model::Carrier`),
//! so that a move of Python carriers runs the core's own request: the validation table, both
//! claims, the transfer and the one terminal commit of `model::movement`, the code a Rust
//! user's moves run.
//!
//! The adapter reads the framework state where the carrier keeps it (`_CarrierBase`'s
//! `CarrierState`, the one state of every carrier) and its storage natively. It adapts a
//! carrier whose class keeps the built-in move path but for the hooks the native move calls
//! itself (`_builtin._NATIVE_MOVE_HOOKS`: `_is_mutable`, asked once per move, and `_release`,
//! run at the commit while the move still claims the source): an exact `CPU`, or a subclass
//! that overrides nothing else a move runs through. It calls a Python hook only where the
//! class overrides it ([`MoveHooks`], decided once per class and carried by the pair's route),
//! so no Python hook is ever skipped: for any other carrier [`PyCarrier::builtin`] gives None
//! and the move takes the general request, which calls the class's hooks. The Python layer
//! decides which classes qualify once per pair (the route's `native` flag and hook masks,
//! cached by `routes.rs`); this file trusts that decision and checks only what varies per
//! carrier (a built-in storage, still live).
//!
//! Dropping a `PyCarrier` drops Python references: the inline move keeps its adapters alive
//! until it holds the GIL again; a worker that commits a bulk move drops them without it,
//! which PyO3 defers to its pool, as every worker commit always has.

use std::sync::{Arc, OnceLock};

use pyo3::exceptions::{PyIndexError, PyRuntimeError};
use pyo3::prelude::*;
use strideweave_core::model::{BulkStorage, Carrier, CarrierState, ClassKey, ForeignError, HookToken, ModelError};
use strideweave_core::storage::{ElemKind, Scalar};

use crate::carrier_base::CarrierBase;
use crate::inline_move::{config, Config};
use crate::storage::{FileStorage, HostStorage, SlotAccess};
use crate::transfer::claimed;

/// The storage of a built-in carrier.
enum Storage {
    Host(Py<HostStorage>),
    File(Py<FileStorage>),
}

/// The move hooks a carrier's class overrides among those the native move calls itself
/// (`_builtin._NATIVE_MOVE_HOOKS`), as the route's mask carries them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MoveHooks(u8);

impl MoveHooks {
    /// `_is_mutable`: asked once per move, for a destination.
    pub(crate) const IS_MUTABLE: u8 = 1;
    /// `_release`: run at the commit, for a source.
    pub(crate) const RELEASE: u8 = 2;

    /// The hooks of a mask (unknown bits are ignored).
    pub(crate) fn from_bits(bits: u8) -> Self {
        MoveHooks(bits & (Self::IS_MUTABLE | Self::RELEASE))
    }

    /// Whether the class overrides `_is_mutable`.
    pub(crate) fn is_mutable(self) -> bool {
        self.0 & Self::IS_MUTABLE != 0
    }

    /// Whether the class overrides `_release`.
    pub(crate) fn release(self) -> bool {
        self.0 & Self::RELEASE != 0
    }
}

/// A Python carrier whose storage is host memory (`HostStorage`, a `CPU`) or a file
/// (`FileStorage`, a `FileBacked`), as a core carrier.
pub(crate) struct PyCarrier {
    carrier: Py<CarrierBase>,
    storage: Storage,
    kind: ElemKind,
    class: ClassKey,
    hooks: MoveHooks,
    /// The answer of an overridden `_is_mutable`, asked once per move (the request asks it
    /// once: its row and its claim share the answer).
    mutable: OnceLock<PyResult<bool>>,
}

impl PyCarrier {
    /// The adapter of `carrier`, a carrier of a class that keeps the built-in move path but
    /// for `hooks`, when its storage is a live built-in storage; None otherwise (nothing
    /// changed).
    pub(crate) fn builtin(carrier: &Bound<'_, CarrierBase>, hooks: MoveHooks) -> Option<Arc<Self>> {
        let py = carrier.py();
        // The slot's reference becomes the adapter's: one reference taken, none cloned.
        let (storage, kind) = match carrier.get().storage.get(py)?.into_bound(py).cast_into::<HostStorage>() {
            Ok(host) => {
                host.get().live_count().ok()?;
                let kind = host.get().kind();
                (Storage::Host(host.unbind()), kind)
            }
            Err(other) => {
                let file = other.into_inner().cast_into::<FileStorage>().ok()?;
                file.get().store()?;
                let kind = file.get().kind();
                (Storage::File(file.unbind()), kind)
            }
        };
        let class = ClassKey::Foreign(carrier.get_type_ptr() as usize as u64);
        Some(Arc::new(PyCarrier {
            carrier: carrier.clone().unbind(),
            storage,
            kind,
            class,
            hooks,
            mutable: OnceLock::new(),
        }))
    }

    /// Calls the hook `which` names (registered by `carriers/inline_move.py`) on the carrier.
    fn call_hook<'py>(&self, py: Python<'py>, which: fn(&Config) -> &Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let cfg = config(py).ok_or_else(|| PyRuntimeError::new_err("strideweave's native moves are not configured"))?;
        which(cfg).bind(py).call1((self.carrier.bind(py),))
    }

    /// What the class's own `_is_mutable` answered during this move, if it was asked: the
    /// refusal or the error the general request would raise for it.
    pub(crate) fn mutable_answer(&self) -> Option<&PyResult<bool>> {
        self.mutable.get()
    }

    fn slots(&self) -> &dyn SlotStorage {
        match &self.storage {
            Storage::Host(host) => host.get(),
            Storage::File(file) => file.get(),
        }
    }
}

/// `SlotAccess` as an object (its generic methods aside).
trait SlotStorage {
    fn count(&self) -> usize;
    fn read(&self, slot: usize, bytes: &mut [u8]) -> bool;
    fn write(&self, slot: usize, bytes: &[u8]) -> bool;
}

impl<S: SlotAccess> SlotStorage for S {
    fn count(&self) -> usize {
        self.live_count().unwrap_or(0)
    }

    fn read(&self, slot: usize, bytes: &mut [u8]) -> bool {
        self.read_encoded(slot, bytes).is_ok()
    }

    fn write(&self, slot: usize, bytes: &[u8]) -> bool {
        self.write_encoded(slot, bytes, PyErr::new::<PyIndexError, _>).is_ok()
    }
}

fn released() -> ModelError {
    ModelError::Released { carrier: "carrier".into() }
}

impl Carrier for PyCarrier {
    fn state(&self, _: &HookToken) -> &CarrierState {
        self.carrier.get().state()
    }

    fn elem_kind(&self) -> ElemKind {
        self.kind
    }

    fn size(&self) -> usize {
        self.slots().count()
    }

    fn read_slot(&self, _: &HookToken, i: usize) -> Result<Scalar, ModelError> {
        let size = self.kind.size();
        let mut bytes = [0u8; 8];
        if !self.slots().read(i, &mut bytes[..size]) {
            return Err(released());
        }
        Ok(self.kind.decode(&bytes[..size]))
    }

    fn write_slot(&self, _: &HookToken, i: usize, v: Scalar) -> Result<(), ModelError> {
        let size = self.kind.size();
        let mut bytes = [0u8; 8];
        self.kind.encode(v, &mut bytes[..size]);
        if !self.slots().write(i, &bytes[..size]) {
            return Err(ModelError::SlotOutOfRange { index: i as i64, size: self.size() });
        }
        Ok(())
    }

    fn is_mutable_hook(&self) -> bool {
        if !self.hooks.is_mutable() {
            return self.carrier.get().mutable_flag();
        }
        let answer =
            self.mutable.get_or_init(|| Python::attach(|py| self.call_hook(py, |c| &c.is_mutable_hook)?.is_truthy()));
        matches!(answer, Ok(true))
    }

    fn bulk_storage(&self, _: &HookToken) -> Option<BulkStorage> {
        match &self.storage {
            // `claimed` says why the claims guard a built-in carrier's host buffer.
            Storage::Host(host) => Some(BulkStorage::ClaimedHost(claimed(host.get().buffer()?))),
            Storage::File(file) => Some(BulkStorage::File(file.get().store()?)),
        }
    }

    /// The built-in release: the storage drops its buffer or deletes its file (a large one is
    /// unmapped or closed on an engine thread).
    fn release_storage(&self, token: &HookToken) {
        let _ = self.release_claimed_storage(token);
    }

    /// As `release_storage`, or the class's own `_release` hook (run while the move still
    /// claims the source, as the request runs it; what it raises fails the move unchanged); a
    /// file that cannot be deleted fails the move (OSError).
    fn release_claimed_storage(&self, _: &HookToken) -> Result<(), ModelError> {
        if self.hooks.release() {
            return Python::attach(|py| self.call_hook(py, |c| &c.release_hook).map(drop))
                .map_err(|e| ModelError::Foreign(ForeignError::new(e)));
        }
        match &self.storage {
            Storage::Host(host) => {
                host.get().release_buffer();
                Ok(())
            }
            Storage::File(file) => {
                file.get().release_store().map_err(|e| ModelError::io("releasing the moved source", e))
            }
        }
    }

    /// A `FileBacked` grows (an empty destination to the moved span) and shrinks back.
    fn can_allocate(&self) -> bool {
        matches!(self.storage, Storage::File(_))
    }

    fn allocate(&self, _: &HookToken, slots: usize) -> Result<(), ModelError> {
        let Storage::File(file) = &self.storage else {
            return Err(ModelError::NotAllocatable { carrier: "CPU".into() });
        };
        let store = file.get().store().ok_or_else(released)?;
        let bytes = (slots as u64).saturating_mul(self.kind.size() as u64);
        store.set_len(bytes).map_err(|e| ModelError::io("resizing the destination file", e))
    }

    fn class_key(&self) -> ClassKey {
        self.class
    }
}
