//! `PyCarrier`: a Python carrier as a carrier of the core's object model (`model::Carrier`),
//! so that a move of Python carriers runs the core's own request: the validation table, both
//! claims, the transfer and the one terminal commit of `model::movement`, the code a Rust
//! user's moves run.
//!
//! The adapter reads the framework state where the carrier keeps it (`_CarrierBase`'s
//! `CarrierState`, the one state of every carrier) and its storage natively. It adapts only a
//! carrier whose class keeps the built-in move path (an exact `CPU`, or a subclass that
//! overrides none of `_builtin._MOVE_PATH`: `_sw_plain_move`), so no Python hook is ever
//! skipped: for any other carrier [`PyCarrier::host`] gives None and the move takes the general
//! request, which calls the class's hooks. The Python layer decides which classes qualify once
//! per pair (the route's `native` flag, cached by `routes.rs`); this file trusts that decision
//! and checks only what varies per carrier (a host storage, still live).
//!
//! Dropping a `PyCarrier` drops Python references: callers keep their adapters alive until
//! they hold the GIL again, so no decref is deferred to PyO3's pool.

use std::sync::Arc;

use pyo3::prelude::*;
use strideweave_core::model::{BulkStorage, Carrier, CarrierState, ClaimedHost, ClassKey, HookToken, ModelError};
use strideweave_core::storage::{ElemKind, Scalar};

use crate::carrier_base::CarrierBase;
use crate::storage::{HostStorage, SlotAccess};

/// A Python carrier whose storage is host memory (`HostStorage`), as a core carrier.
pub(crate) struct PyCarrier {
    carrier: Py<CarrierBase>,
    storage: Py<HostStorage>,
    kind: ElemKind,
    class: ClassKey,
}

impl PyCarrier {
    /// The adapter of `carrier`, a carrier of a class that keeps the built-in move path, when
    /// its storage is live host memory; None otherwise (nothing changed).
    pub(crate) fn host(carrier: &Bound<'_, CarrierBase>) -> Option<Arc<Self>> {
        let py = carrier.py();
        let storage = carrier.get().storage.get(py)?.into_bound(py).cast_into::<HostStorage>().ok()?;
        storage.get().live_count().ok()?;
        let kind = storage.get().kind();
        let class = ClassKey::Foreign(carrier.get_type_ptr() as usize as u64);
        Some(Arc::new(PyCarrier { carrier: carrier.clone().unbind(), storage: storage.unbind(), kind, class }))
    }

    fn storage(&self) -> &HostStorage {
        self.storage.get()
    }
}

fn released() -> ModelError {
    ModelError::Released { carrier: "CPU".into() }
}

impl Carrier for PyCarrier {
    fn state(&self, _: &HookToken) -> &CarrierState {
        self.carrier.get().state()
    }

    fn elem_kind(&self) -> ElemKind {
        self.kind
    }

    fn size(&self) -> usize {
        self.storage().live_count().unwrap_or(0)
    }

    fn read_slot(&self, _: &HookToken, i: usize) -> Result<Scalar, ModelError> {
        let size = self.kind.size();
        let mut bytes = [0u8; 8];
        self.storage().read_encoded(i, &mut bytes[..size]).map_err(|_| released())?;
        Ok(self.kind.decode(&bytes[..size]))
    }

    fn write_slot(&self, _: &HookToken, i: usize, v: Scalar) -> Result<(), ModelError> {
        let size = self.kind.size();
        let mut bytes = [0u8; 8];
        self.kind.encode(v, &mut bytes[..size]);
        self.storage()
            .write_encoded(i, &bytes[..size], PyErr::new::<pyo3::exceptions::PyIndexError, _>)
            .map_err(|_| ModelError::SlotOutOfRange { index: i as i64, size: self.size() })
    }

    fn is_mutable_hook(&self) -> bool {
        self.carrier.get().mutable_flag()
    }

    fn bulk_storage(&self, _: &HookToken) -> Option<BulkStorage> {
        let buffer = self.storage().buffer()?;
        // SAFETY: `ClaimedHost::new`'s contract holds for a Python carrier's host buffer. While
        // a move claims the carrier its state cell refuses every write through the framework
        // (the native element path, the Python reference path, a transfer's `output` of any
        // other move), so the move's transfer is the only writer; readers copy plain bytes out
        // (`HostBuffer::read`); the `Arc` keeps the buffer allocated after a release drops the
        // storage's reference. A DLPack consumer writing an export during a move is the
        // user's race, which the binding's transfers have always documented.
        Some(BulkStorage::ClaimedHost(unsafe { ClaimedHost::new(buffer) }))
    }

    /// The built-in release: the storage drops its buffer (a large one is unmapped on an
    /// engine thread).
    fn release_storage(&self, _: &HookToken) {
        self.storage().release_buffer();
    }

    fn class_key(&self) -> ClassKey {
        self.class
    }
}
