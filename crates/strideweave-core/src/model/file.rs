//! `FileCarrier`: slots in a file this process created, over [`FileStore`].
//!
//! Positioned I/O needs no shared cursor, so element access and transfers share the store
//! by `Arc` without a lock. A file carrier starts empty and can allocate, so a move into it
//! sizes it to the layout's cosize (and shrinks it back to empty if the move fails).
//!
//! ```
//! use strideweave_core::model::{move_tensor, FileCarrier, HostCarrier, Tensor};
//! use strideweave_core::storage::ElemKind;
//!
//! let t = Tensor::canonical(HostCarrier::from_f32(&[1.0, 2.0]), &[2]).unwrap();
//! let on_file = move_tensor(&t, FileCarrier::temp(ElemKind::F32).unwrap()).unwrap();
//! assert_eq!(on_file.get::<f32>(1).unwrap(), 2.0);
//! ```

use super::carrier::{admitted, HookCall, HookToken};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::carrier::{BulkStorage, Carrier};
use super::error::{ModelError, Result};
use super::state::CarrierState;
use crate::storage::{ElemKind, FileStore, Scalar};

/// A carrier whose slots are a file of native-endian values. The file is removed when the
/// carrier is released or dropped.
///
/// ```
/// use strideweave_core::model::{Carrier, CarrierExt, FileCarrier};
/// use strideweave_core::storage::{ElemKind, Scalar};
///
/// let f = FileCarrier::temp_zeros(ElemKind::I32, 4).unwrap();
/// assert_eq!(f.size(), 4);
/// f.set(3, Scalar::I32(-7)).unwrap();
/// assert_eq!(f.get(3).unwrap(), Scalar::I32(-7));
/// let path = f.path().to_path_buf();
/// f.release().unwrap();
/// assert!(!path.exists());
/// ```
#[derive(Debug)]
pub struct FileCarrier {
    state: CarrierState,
    kind: ElemKind,
    path: PathBuf,
    store: RwLock<Option<Arc<FileStore>>>,
    slots: AtomicUsize,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl FileCarrier {
    /// Create `path` (which must not exist) as an empty carrier of `kind`.
    pub fn create(path: &Path, kind: ElemKind) -> Result<Arc<Self>> {
        let store = FileStore::create_new(path).map_err(|e| ModelError::io("creating the carrier's file", e))?;
        Ok(Arc::new(FileCarrier {
            state: CarrierState::new("FileCarrier"),
            kind,
            path: path.to_path_buf(),
            store: RwLock::new(Some(Arc::new(store))),
            slots: AtomicUsize::new(0),
        }))
    }

    /// An empty carrier in a fresh file under the system's temporary directory.
    pub fn temp(kind: ElemKind) -> Result<Arc<Self>> {
        Self::fresh_in(&std::env::temp_dir(), kind)
    }

    /// An empty carrier in a fresh file of a name of its own under `dir`.
    fn fresh_in(dir: &Path, kind: ElemKind) -> Result<Arc<Self>> {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let name = format!("strideweave-{}-{n}-{nanos}.slots", std::process::id());
        Self::create(&dir.join(name), kind)
    }

    /// A carrier of `slots` zeros in a fresh file under the system's temporary directory.
    pub fn temp_zeros(kind: ElemKind, slots: usize) -> Result<Arc<Self>> {
        let c = Self::temp(kind)?;
        c.allocate(&c.hook(), slots)?;
        Ok(c)
    }

    /// The file's path (removed once the carrier is released).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The shared store, `None` once released. Crate-private: its bytes would bypass the
    /// carrier's checks.
    pub(crate) fn store(&self) -> Option<Arc<FileStore>> {
        self.store.read().clone()
    }

    fn live(&self) -> Result<Arc<FileStore>> {
        self.store().ok_or_else(|| ModelError::Released { carrier: "FileCarrier".into() })
    }

    fn byte_off(&self, i: usize) -> u64 {
        (i as u64) * self.kind.size() as u64
    }
}

impl Carrier for FileCarrier {
    fn state(&self, _: &HookToken) -> &CarrierState {
        &self.state
    }

    fn elem_kind(&self) -> ElemKind {
        self.kind
    }

    fn size(&self) -> usize {
        self.slots.load(Ordering::Acquire)
    }

    fn read_slot(&self, token: &HookToken, i: usize) -> Result<Scalar> {
        admitted(token, &self.state)?;
        read_scalar(&*self.live()?, self.byte_off(i), self.kind)
    }

    fn write_slot(&self, token: &HookToken, i: usize, v: Scalar) -> Result<()> {
        admitted(token, &self.state)?;
        write_scalar(&*self.live()?, self.byte_off(i), self.kind, v)
    }

    fn is_mutable_hook(&self) -> bool {
        true
    }

    fn bulk_storage(&self, token: &HookToken) -> Option<BulkStorage> {
        if !token.admits(&self.state) {
            return None;
        }
        self.store().map(BulkStorage::File)
    }

    fn release_storage(&self, token: &HookToken) {
        if !token.admits(&self.state) {
            return;
        }
        if let Some(store) = self.store.write().take() {
            self.slots.store(0, Ordering::Release);
            // Removing the name is best effort: the handle closes when the last transfer
            // holding the store drops it.
            let _ = store.unlink();
        }
    }

    fn can_allocate(&self) -> bool {
        true
    }

    /// A fresh file beside this one's (on the file system its user chose for it).
    fn allocate_like(&self, slots: usize) -> Result<Arc<dyn Carrier>> {
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let fresh = Self::fresh_in(dir, self.kind)?;
        fresh.allocate(&fresh.hook(), slots)?;
        Ok(fresh)
    }

    fn allocate(&self, token: &HookToken, slots: usize) -> Result<()> {
        admitted(token, &self.state)?;
        let bytes =
            (slots as u64).checked_mul(self.kind.size() as u64).ok_or(ModelError::OutOfMemory { bytes: usize::MAX })?;
        self.live()?.set_len(bytes).map_err(|e| ModelError::io("resizing the carrier's file", e))?;
        self.slots.store(slots, Ordering::Release);
        Ok(())
    }
}

impl Drop for FileCarrier {
    fn drop(&mut self) {
        if let Some(store) = self.store.get_mut().take() {
            let _ = store.unlink();
        }
    }
}

/// The slot of element kind `kind` at byte `at` of a file store (a file carrier's slot, or a
/// tiled tier's tile in a region of its slab).
pub(crate) fn read_scalar(store: &FileStore, at: u64, kind: ElemKind) -> Result<Scalar> {
    let mut bytes = [0u8; 8];
    let bytes = &mut bytes[..kind.size()];
    store.read_at(at, bytes).map_err(|e| ModelError::io("reading a slot", e))?;
    Ok(kind.decode(bytes))
}

/// Writes `v` as the slot of element kind `kind` at byte `at` of a file store.
pub(crate) fn write_scalar(store: &FileStore, at: u64, kind: ElemKind, v: Scalar) -> Result<()> {
    let mut bytes = [0u8; 8];
    kind.encode(v, &mut bytes);
    store.write_at(at, &bytes[..kind.size()]).map_err(|e| ModelError::io("writing a slot", e))
}
