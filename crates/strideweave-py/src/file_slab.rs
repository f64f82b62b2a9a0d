//! `_native.FileSlab` and `_native.FileRegion`: equal regions of one shared file, the storage
//! of a TiledEvictable's tiles on a FileBacked tier (see `strideweave_core::storage::FileSlab`
//! for why one file serves every tile).
//!
//! A `FileRegion` behaves like a fixed-size `FileStorage` (`count`, `get`, `set`, `to_list`,
//! `release`, with the same slot value rules) over its own byte range of the slab's file.
//! Releasing it, or dropping it unreleased, returns its range to the slab; the slab removes
//! its file when no region is left. The batched tile copies (`tiles.rs`) resolve a region to
//! the shared file plus its slot range through [`FileRegion::region`], so regions of one slab
//! are one store to them and neighbouring regions merge into one positioned call.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;
use strideweave_core::engine;
use strideweave_core::storage::{ElemKind, FileSlab as SlabCore, FileStore};

use crate::error;
use crate::storage::{decode_all, parse_kind, released, slot_out_of_range, SlotAccess, DEFERRED_FREE_BYTES};

/// A file cut into regions of `region_slots` slots of one element kind.
#[pyclass(frozen, module = "strideweave._native")]
pub struct FileSlab {
    core: Arc<SlabCore>,
    kind: ElemKind,
    region_slots: u64,
}

#[pymethods]
impl FileSlab {
    /// A slab whose file will be `path`: created (exclusively) by the first allocation and
    /// removed whenever no region is in use.
    #[new]
    fn new(path: PathBuf, kind: &str, region_slots: u64) -> PyResult<Self> {
        let kind = parse_kind(kind)?;
        if region_slots == 0 {
            return Err(PyValueError::new_err("region_slots must be positive"));
        }
        let bytes = region_slots
            .checked_mul(kind.size() as u64)
            .ok_or_else(|| PyOverflowError::new_err(format!("a region of {region_slots} slots overflows")))?;
        let core = SlabCore::new(&path, bytes).map_err(error::os)?;
        Ok(Self { core: Arc::new(core), kind, region_slots })
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.core.path().to_path_buf()
    }

    #[getter(kind)]
    fn kind_name(&self) -> &'static str {
        self.kind.name()
    }

    #[getter]
    fn region_slots(&self) -> u64 {
        self.region_slots
    }

    /// Regions in use now.
    #[getter]
    fn live(&self) -> u64 {
        self.core.live()
    }

    /// Whether this process created the slab: only the creator allocates (a fork()ed child
    /// shares the file with its parent and must make its own slab).
    fn is_creator(&self) -> bool {
        self.core.is_creator()
    }

    /// `count` fresh regions (the lowest free ones first, so mostly one contiguous range),
    /// growing the file once, with the GIL released. Their bytes are unspecified. On error
    /// (ENOSPC, EFBIG, ...) no region is taken.
    fn allocate(&self, py: Python<'_>, count: usize) -> PyResult<Vec<FileRegion>> {
        // The regions' memory is had before any region is taken (issue 22.4: MemoryError,
        // not an abort, and nothing allocated in the file).
        let mut regions = error::reserve::<FileRegion>(count, "file regions")?;
        let core = Arc::clone(&self.core);
        let (store, cells) = py.detach(|| core.allocate(count)).map_err(error::os)?;
        regions.extend(cells.into_iter().map(|cell| FileRegion {
            slab: Arc::clone(&self.core),
            kind: self.kind,
            cell,
            slots: self.region_slots,
            store: RwLock::new(Some(Arc::clone(&store))),
        }));
        Ok(regions)
    }

    fn __repr__(&self) -> String {
        format!(
            "FileSlab(path={:?}, kind={:?}, region_slots={}, live={})",
            self.core.path(),
            self.kind.name(),
            self.region_slots,
            self.core.live()
        )
    }
}

/// One region of a `FileSlab`: `count` slots at the region's own place in the slab's file.
#[pyclass(frozen, module = "strideweave._native")]
pub struct FileRegion {
    slab: Arc<SlabCore>,
    kind: ElemKind,
    cell: u64,
    slots: u64,
    store: RwLock<Option<Arc<FileStore>>>,
}

/// A region's slots are a FileStorage's, shifted to the region's place in the file: the
/// element rules and check order are the built-in storages' own (`SlotAccess`).
impl SlotAccess for FileRegion {
    fn elem_kind(&self) -> ElemKind {
        self.kind
    }

    fn live_count(&self) -> PyResult<usize> {
        if self.store.read().is_some() {
            Ok(self.slots as usize)
        } else {
            Err(released())
        }
    }

    fn read_encoded(&self, slot: usize, bytes: &mut [u8]) -> PyResult<()> {
        // Under the lock a release takes, so a released region's slots (which the slab may
        // already have handed to another region) are never read.
        let guard = self.store.read();
        let store = guard.as_ref().ok_or_else(released)?;
        store.read_at(self.byte_of(slot, bytes.len()), bytes).map_err(error::os)
    }

    fn write_encoded(&self, slot: usize, bytes: &[u8], _out_of_range: impl FnOnce(usize) -> PyErr) -> PyResult<()> {
        let guard = self.store.read();
        let store = guard.as_ref().ok_or_else(released)?;
        store.write_at(self.byte_of(slot, bytes.len()), bytes).map_err(error::os)
    }
}

impl FileRegion {
    /// The shared file, the region's first slot in it and its slot count; None once released.
    pub fn region(&self) -> Option<(Arc<FileStore>, u64, u64)> {
        self.store.read().clone().map(|store| (store, self.cell * self.slots, self.slots))
    }

    pub fn kind(&self) -> ElemKind {
        self.kind
    }

    /// The byte offset in the file of slot `slot` (checked by the caller) of `size` bytes.
    fn byte_of(&self, slot: usize, size: usize) -> u64 {
        (self.cell * self.slots + slot as u64) * size as u64
    }
}

#[pymethods]
impl FileRegion {
    #[getter(kind)]
    fn kind_name(&self) -> &'static str {
        self.kind.name()
    }

    /// The slab's file (shared with every other region of the slab).
    #[getter]
    fn path(&self) -> PathBuf {
        self.slab.path().to_path_buf()
    }

    /// Number of slots; 0 once released.
    #[getter]
    fn count(&self) -> u64 {
        if self.store.read().is_some() {
            self.slots
        } else {
            0
        }
    }

    fn is_released(&self) -> bool {
        self.store.read().is_none()
    }

    /// Return the region to its slab (the slab's file shrinks or goes once nothing uses its
    /// end or any of it). Idempotent.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        // Taken out before detaching, as FileStorage.release does: a thread holding the GIL
        // may be waiting for this lock.
        let taken = self.store.write().take();
        if taken.is_some() {
            let slab = Arc::clone(&self.slab);
            let cell = self.cell;
            py.detach(move || {
                drop(taken);
                slab.free(&[cell]).map(close_emptied)
            })
            .map_err(error::os)?;
        }
        Ok(())
    }

    fn get(&self, py: Python<'_>, index: i64) -> PyResult<Py<PyAny>> {
        self.get_slot(py, index, slot_out_of_range(index))
    }

    /// Convert `value` with the carrier write rules and store it; the range is checked first.
    fn set(&self, index: i64, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.set_slot(index, value, slot_out_of_range(index))
    }

    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut bytes = error::zeroed_bytes(self.slots as usize * self.kind.size(), "bytes of a region's copy")?;
        let at = self.cell * self.slots * self.kind.size() as u64;
        // The lock is taken and dropped with the GIL released (a release waits for it while
        // holding the GIL), and held across the read, as in `get`.
        py.detach(|| {
            let guard = self.store.read();
            let store = guard.as_ref().ok_or(None)?;
            store.read_at(at, &mut bytes).map_err(Some)
        })
        .map_err(|e| e.map_or_else(released, error::os))?;
        decode_all(py, self.kind, &bytes)
    }

    fn __repr__(&self) -> String {
        format!("FileRegion(path={:?}, kind={:?}, count={})", self.slab.path(), self.kind.name(), self.count())
    }
}

/// Releases every region of `regions` (each idempotently), returning each slab's cells to it
/// in one call with the GIL released: one lock and at most one resize or unlink per slab.
pub(crate) fn release_regions(py: Python<'_>, regions: &[&FileRegion]) -> PyResult<()> {
    let mut by_slab: Vec<(Arc<SlabCore>, Vec<u64>)> = Vec::new();
    let mut held = Vec::with_capacity(regions.len());
    for region in regions {
        let Some(store) = region.store.write().take() else { continue };
        held.push(store);
        match by_slab.iter_mut().find(|(slab, _)| Arc::ptr_eq(slab, &region.slab)) {
            Some((_, cells)) => cells.push(region.cell),
            None => by_slab.push((Arc::clone(&region.slab), vec![region.cell])),
        }
    }
    py.detach(move || {
        drop(held);
        by_slab.iter().try_for_each(|(slab, cells)| slab.free(cells).map(close_emptied))
    })
    .map_err(error::os)
}

/// Closes the file of a slab that emptied (already unlinked): here when small, so its space is
/// free when the release returns; on an engine worker when large (FileStorage.release's rule).
fn close_emptied(file: Option<Arc<FileStore>>) {
    if let Some(file) = file {
        if file.len_bytes().map_or(true, |n| n < DEFERRED_FREE_BYTES as u64) {
            drop(file);
        } else {
            engine::submit(move || drop(file));
        }
    }
}

impl Drop for FileRegion {
    /// An unreleased region dropped (its carrier collected) goes back to its slab.
    fn drop(&mut self) {
        if self.store.get_mut().take().is_some() {
            let _ = self.slab.free(&[self.cell]).map(close_emptied);
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FileSlab>()?;
    m.add_class::<FileRegion>()?;
    Ok(())
}
