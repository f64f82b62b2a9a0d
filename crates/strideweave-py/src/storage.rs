//! `_native.HostStorage` and `_native.FileStorage`: the Rust storage behind the built-in
//! CPU and FileBacked carriers.
//!
//! These classes convert and check slot values (the carrier contract's write rules) and do
//! the byte access. Release, versions and ownership are the Python carrier's business; a
//! released storage simply has no buffer any more. Other binding modules reach the bytes
//! through [`HostStorage::buffer`] and [`FileStorage::store`], cloning the `Arc` so a worker
//! thread can keep using memory that a concurrent release has dropped from the carrier.

use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use pyo3::exceptions::{PyIndexError, PyMemoryError, PyOverflowError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyType};
use strideweave_core::copy::prefetch_read;
use strideweave_core::engine;
use strideweave_core::storage::{ElemKind, FileStore, HostBuffer, Scalar};

use crate::error;
use crate::jobs::os_error;

/// Released host buffers, and the unlinked files of released storages, of at least this size
/// are freed on an engine worker.
pub(crate) const DEFERRED_FREE_BYTES: usize = 1 << 20;

pub fn parse_kind(kind: &str) -> PyResult<ElemKind> {
    ElemKind::from_name(kind)
        .ok_or_else(|| PyValueError::new_err(format!("kind must be one of 'f32', 'f64', 'i32', 'bool', not {kind:?}")))
}

/// Convert a Python value to a slot of `kind`, enforcing the carrier write rules:
/// floats take a real number (rounded to binary32 for f32), i32 takes an integer in range,
/// bool takes only `bool`. Any other type is a TypeError.
pub fn scalar_from_py(kind: ElemKind, value: &Bound<'_, PyAny>) -> PyResult<Scalar> {
    let is_bool = value.is_instance_of::<PyBool>();
    match kind {
        ElemKind::Bool => {
            if is_bool {
                Ok(Scalar::Bool(value.extract::<bool>()?))
            } else {
                Err(PyTypeError::new_err(format!("a Bool slot takes a bool, not {}", value.get_type().name()?)))
            }
        }
        ElemKind::F32 | ElemKind::F64 => {
            let v = real_number(value, kind)?;
            Ok(if kind == ElemKind::F32 { Scalar::F32(v as f32) } else { Scalar::F64(v) })
        }
        ElemKind::I32 => {
            if is_bool || value.is_instance_of::<PyFloat>() {
                return Err(PyTypeError::new_err(format!(
                    "an Int32 slot takes an int, not {}",
                    value.get_type().name()?
                )));
            }
            let wide: i128 = match value.extract::<i128>() {
                Ok(v) => v,
                Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => {
                    return Err(PyOverflowError::new_err("value out of Int32 range"))
                }
                Err(_) => {
                    return Err(PyTypeError::new_err(format!(
                        "an Int32 slot takes an int, not {}",
                        value.get_type().name()?
                    )))
                }
            };
            i32::try_from(wide)
                .map(Scalar::I32)
                .map_err(|_| PyOverflowError::new_err(format!("{wide} is out of Int32 range")))
        }
        other => Err(PyTypeError::new_err(format!("no Python value converts to a {other:?} slot"))),
    }
}

static NUMBERS_REAL: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// A Float32/Floating slot value: a real number (`numbers.Real`, which excludes complex,
/// Decimal and str) other than a bool, as the Generic carrier checks it too. An int beyond
/// every double is an OverflowError; a double beyond binary32 rounds to infinity later.
fn real_number(value: &Bound<'_, PyAny>, kind: ElemKind) -> PyResult<f64> {
    let py = value.py();
    let real = value.is_exact_instance_of::<PyFloat>()
        || value.is_exact_instance_of::<PyInt>()
        || (!value.is_instance_of::<PyBool>()
            && value.is_instance(NUMBERS_REAL.import(py, "numbers", "Real")?.as_any())?);
    if !real {
        return Err(PyTypeError::new_err(format!(
            "a {} slot takes a real number, not {}",
            if kind == ElemKind::F32 { "Float32" } else { "Floating" },
            value.get_type().name()?
        )));
    }
    // PyFloat_AsDouble: __float__ (or __index__), OverflowError for a too-large int.
    value.extract::<f64>()
}

pub fn scalar_to_py(py: Python<'_>, value: Scalar) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Scalar::F32(v) => (v as f64).into_pyobject(py)?.into_any().unbind(),
        Scalar::F64(v) => v.into_pyobject(py)?.into_any().unbind(),
        Scalar::I32(v) => v.into_pyobject(py)?.into_any().unbind(),
        Scalar::Bool(v) => PyBool::new(py, v).to_owned().into_any().unbind(),
        other => return Err(PyTypeError::new_err(format!("no Python value for the slot value {other:?}"))),
    })
}

/// One slot of `kind` encoded from a Python value (the write rules of `scalar_from_py`);
/// the first `kind.size()` bytes are meaningful.
fn encode_slot(kind: ElemKind, value: &Bound<'_, PyAny>) -> PyResult<[u8; 8]> {
    let mut bytes = [0u8; 8];
    kind.encode(scalar_from_py(kind, value)?, &mut bytes[..kind.size()]);
    Ok(bytes)
}

/// Every value of an iterable encoded back to back; any bad value fails before a byte is used.
fn encode_all(kind: ElemKind, values: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let size = kind.size();
    let mut encoded = Vec::new();
    for value in values.try_iter()? {
        encoded.extend_from_slice(&encode_slot(kind, &value?)?[..size]);
    }
    Ok(encoded)
}

fn decode_slot(py: Python<'_>, kind: ElemKind, bytes: &[u8; 8]) -> PyResult<Py<PyAny>> {
    scalar_to_py(py, kind.decode(&bytes[..kind.size()]))
}

pub(crate) fn decode_all<'py>(py: Python<'py>, kind: ElemKind, bytes: &[u8]) -> PyResult<Bound<'py, PyList>> {
    let mut items = error::reserve(bytes.len() / kind.size(), "list items")?;
    for c in bytes.chunks_exact(kind.size()) {
        items.push(scalar_to_py(py, kind.decode(c))?);
    }
    PyList::new(py, items)
}

pub(crate) fn released() -> PyErr {
    PyRuntimeError::new_err("storage is released")
}

/// The IndexError of a storage's own `get`/`set` for a slot outside `[0, count)`.
pub(crate) fn slot_out_of_range(index: i64) -> impl FnOnce(usize) -> PyErr {
    move |count| PyIndexError::new_err(format!("slot {index} is outside [0, {count})"))
}

/// Slot access of the built-in storages, as the element path uses it (`access.rs`): the
/// caller words its own range error (`out_of_range(count)`). The order of checks is written
/// once, here; a storage supplies its element kind, its live slot count, and the positioned
/// read and write of one encoded slot.
pub trait SlotAccess {
    fn elem_kind(&self) -> ElemKind;

    /// The number of slots, or "storage is released".
    fn live_count(&self) -> PyResult<usize>;

    /// Reads slot `slot` (in range when checked) into `bytes`.
    fn read_encoded(&self, slot: usize, bytes: &mut [u8]) -> PyResult<()>;

    /// Writes the encoded `bytes` to slot `slot` while the storage is still live, re-checking
    /// the range against it (`out_of_range`).
    fn write_encoded(&self, slot: usize, bytes: &[u8], out_of_range: impl FnOnce(usize) -> PyErr) -> PyResult<()>;

    /// Slot `slot` as a Python value.
    fn get_slot(&self, py: Python<'_>, slot: i64, out_of_range: impl FnOnce(usize) -> PyErr) -> PyResult<Py<PyAny>> {
        let count = self.live_count()?;
        if slot < 0 || slot as u64 >= count as u64 {
            return Err(out_of_range(count));
        }
        let mut bytes = [0u8; 8];
        let size = self.elem_kind().size();
        self.read_encoded(slot as usize, &mut bytes[..size])?;
        decode_slot(py, self.elem_kind(), &bytes)
    }

    /// `set_slot`, but `proceed()` is asked once the value is converted, right before the
    /// store, with no Python code run in between: false writes nothing and returns false.
    /// (Converting may run Python code, `__float__` or `__index__`, which may change the state
    /// a caller checked before, or release the storage: the write re-checks both.)
    fn set_slot_if(
        &self,
        slot: i64,
        value: &Bound<'_, PyAny>,
        out_of_range: impl FnOnce(usize) -> PyErr,
        proceed: impl FnOnce() -> PyResult<bool>,
    ) -> PyResult<bool> {
        let count = self.live_count()?;
        if slot < 0 || slot as u64 >= count as u64 {
            return Err(out_of_range(count));
        }
        let bytes = encode_slot(self.elem_kind(), value)?;
        if !proceed()? {
            return Ok(false);
        }
        let size = self.elem_kind().size();
        self.write_encoded(slot as usize, &bytes[..size], out_of_range)?;
        Ok(true)
    }

    /// Convert `value` with the carrier write rules and store it in slot `slot`; the range
    /// is checked before the value (the carrier's order), and nothing is written on error.
    fn set_slot(&self, slot: i64, value: &Bound<'_, PyAny>, out_of_range: impl FnOnce(usize) -> PyErr) -> PyResult<()> {
        self.set_slot_if(slot, value, out_of_range, || Ok(true)).map(|_| ())
    }
}

impl SlotAccess for HostStorage {
    fn elem_kind(&self) -> ElemKind {
        self.kind
    }

    /// Read from an atomic, without the lock (the count of a live buffer never changes).
    fn live_count(&self) -> PyResult<usize> {
        self.slots_plus_one.load(Ordering::Acquire).checked_sub(1).ok_or_else(released)
    }

    fn read_encoded(&self, slot: usize, bytes: &mut [u8]) -> PyResult<()> {
        // Under the lock instead of cloning the `Arc`: this is the per-element read path.
        let guard = self.buffer.read();
        let buf = guard.as_ref().ok_or_else(released)?;
        // The count checked was this buffer's (a live buffer never changes size).
        buf.read(slot * bytes.len(), bytes).expect("slot checked in range");
        Ok(())
    }

    fn write_encoded(&self, slot: usize, bytes: &[u8], out_of_range: impl FnOnce(usize) -> PyErr) -> PyResult<()> {
        let guard = self.buffer.read();
        let buf = guard.as_ref().ok_or_else(released)?;
        // SAFETY: HostBuffer's access contract. Public slot writes hold the GIL, so they are
        // serialised with each other; the only writers that run without it are a pending
        // move's copies, and the carrier layer refuses public writes to a claimed carrier.
        unsafe { buf.write(slot * bytes.len(), bytes) }.ok_or_else(|| out_of_range(buf.len() / bytes.len()))
    }
}

impl SlotAccess for FileStorage {
    fn elem_kind(&self) -> ElemKind {
        self.kind
    }

    /// One size query of the live file.
    fn live_count(&self) -> PyResult<usize> {
        let store = self.live()?;
        self.slots(&store)
    }

    fn read_encoded(&self, slot: usize, bytes: &mut [u8]) -> PyResult<()> {
        let store = self.live()?;
        store.read_at((slot * bytes.len()) as u64, bytes).map_err(os_error)
    }

    fn write_encoded(&self, slot: usize, bytes: &[u8], _out_of_range: impl FnOnce(usize) -> PyErr) -> PyResult<()> {
        // Under the lock that a release must take, so a file released meanwhile is never
        // written. (A file is never memory, so a concurrent resize cannot make this unsafe.)
        let guard = self.store.read();
        let store = guard.as_ref().ok_or_else(released)?;
        store.write_at((slot * bytes.len()) as u64, bytes).map_err(os_error)
    }
}

/// Host memory of one element kind: owned (64-byte aligned, freed on release) or wrapped
/// around a caller's pointer (never initialised or freed).
#[pyclass(frozen, module = "strideweave._native")]
pub struct HostStorage {
    kind: ElemKind,
    buffer: RwLock<Option<Arc<HostBuffer>>>,
    /// The slot count plus one, 0 once released: the range check of a slot write reads it
    /// without taking the lock (the count of a live buffer never changes).
    slots_plus_one: AtomicUsize,
    /// The buffer's address, 0 once released (for DLPack export, read without the lock).
    address: AtomicUsize,
}

impl HostStorage {
    fn holding(kind: ElemKind, buffer: HostBuffer) -> Self {
        let slots = buffer.len() / kind.size();
        let address = buffer.as_ptr() as usize;
        Self {
            kind,
            buffer: RwLock::new(Some(Arc::new(buffer))),
            slots_plus_one: AtomicUsize::new(slots + 1),
            address: AtomicUsize::new(address),
        }
    }

    /// Drops this storage's reference to the memory (freeing owned memory once no transfer
    /// still holds it). Idempotent.
    pub(crate) fn release_buffer(&self) {
        if let Some(buffer) = self.take_buffer() {
            // Unmapping a large buffer takes milliseconds that neither the caller nor the move
            // commit needs to wait for: the carrier is already released. A mapping the recycled
            // list keeps needs no system call, and so no worker woken for it.
            if buffer.len() >= DEFERRED_FREE_BYTES {
                match Arc::try_unwrap(buffer) {
                    Ok(owned) => {
                        if let Some(rest) = owned.free_but_system_calls() {
                            engine::submit(rest);
                        }
                    }
                    // Another holder (a running copy, an export) frees it when it lets go.
                    Err(shared) => drop(shared),
                }
            }
        }
    }

    /// Releases the storage and hands its buffer to the caller (None if already released),
    /// who decides where it is freed (`tiles.rs` frees a request's tiles together).
    pub(crate) fn take_buffer(&self) -> Option<Arc<HostBuffer>> {
        self.slots_plus_one.store(0, Ordering::Release);
        self.address.store(0, Ordering::Release);
        self.buffer.write().take()
    }

    /// The address of slot 0 while live, 0 once released.
    pub(crate) fn address(&self) -> usize {
        self.address.load(Ordering::Acquire)
    }

    /// Hints that slots `[first, first + count)` will be read or written soon
    /// (`copy::prefetch_read`): a small move asks for its source and destination when it
    /// starts. Nothing is read, so a stale address (released meanwhile) is harmless.
    pub(crate) fn prefetch(&self, first: i64, count: i64) {
        let address = self.address();
        let (Ok(first), Ok(count)) = (usize::try_from(first), usize::try_from(count)) else { return };
        if address != 0 {
            let size = self.kind.size();
            prefetch_read(address.saturating_add(first.saturating_mul(size)), count.saturating_mul(size));
        }
    }

    /// The live buffer, or `None` once released.
    pub fn buffer(&self) -> Option<Arc<HostBuffer>> {
        self.buffer.read().clone()
    }

    pub fn kind(&self) -> ElemKind {
        self.kind
    }

    fn live(&self) -> PyResult<Arc<HostBuffer>> {
        self.buffer().ok_or_else(released)
    }
}

/// The element kind named `kind` and the bytes of `count` slots of it. The carrier checks
/// sizes first (README, "Sizes"); this is the same rule for direct use.
fn host_bytes(kind: &str, count: usize) -> PyResult<(ElemKind, usize)> {
    let kind = parse_kind(kind)?;
    let bytes = count
        .checked_mul(kind.size())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| PyOverflowError::new_err(format!("host storage size {count} overflows")))?;
    Ok((kind, bytes))
}

#[pymethods]
impl HostStorage {
    #[new]
    #[pyo3(signature = (kind, count, zeroed = true))]
    fn new(kind: &str, count: usize, zeroed: bool) -> PyResult<Self> {
        let (kind, bytes) = host_bytes(kind, count)?;
        let buffer = HostBuffer::new(bytes, zeroed)
            .map_err(|_| PyMemoryError::new_err(format!("cannot allocate {bytes} bytes of host memory")))?;
        Ok(Self::holding(kind, buffer))
    }

    /// `number` fresh storages of `count` slots each in one call (a tiled tier's fresh
    /// tiles). MemoryError, with none made, when memory runs out.
    #[staticmethod]
    #[pyo3(signature = (kind, count, number, zeroed = true))]
    fn many(kind: &str, count: usize, number: usize, zeroed: bool) -> PyResult<Vec<Self>> {
        let mut made = error::reserve::<Self>(number, "host storages")?;
        if zeroed {
            for _ in 0..number {
                made.push(Self::new(kind, count, zeroed)?);
            }
            return Ok(made);
        }
        // Uninitialised: the buffers of this length that evicted tiles gave back come first.
        let (elem, bytes) = host_bytes(kind, count)?;
        let buffers = HostBuffer::uninit_batch(bytes, number)
            .map_err(|_| PyMemoryError::new_err(format!("cannot allocate {number} buffers of {bytes} bytes")))?;
        made.extend(buffers.into_iter().map(|buffer| Self::holding(elem, buffer)));
        Ok(made)
    }

    /// The first `count` slots of `file` (of the same element kind) as a copy-on-write
    /// snapshot in host memory, without copying: a private mapping of the file
    /// (`FileStore::snapshot`). Reads see the file's page cache; the first write to a page
    /// copies that page, and no write reaches the file. While it is mapped the file cannot
    /// shrink. The element kind is the file's. `None` when the page cache does not hold every
    /// byte: a copy then reads the file faster, in pieces over the copy threads and a waiting
    /// caller, than the snapshot's one read would. ValueError for no slots or more slots than
    /// the file has; OSError if the mapping fails.
    ///
    /// For `Evictable(retain_clean=True)`'s promote only, which keeps the contract the core
    /// states: the file is an owned secondary tier, written by nobody but its Evictable, and by
    /// it only when it evicts this very snapshot (the write-back of the snapshot's own bytes).
    #[staticmethod]
    fn snapshot_of(file: PyRef<'_, FileStorage>, count: usize) -> PyResult<Option<Self>> {
        let kind = file.kind();
        let store = file.store().ok_or_else(released)?;
        let bytes = count
            .checked_mul(kind.size())
            .filter(|&b| b > 0 && b as u64 <= store.len_bytes().unwrap_or(0))
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "cannot snapshot {count} slots of a file of {} slots",
                    file.count().unwrap_or(0)
                ))
            })?;
        // SAFETY: the caller is the retain_clean promote of an Evictable (see above): the file
        // is its owned secondary, which no public path writes or resizes while owned, and
        // which the Evictable writes only with this snapshot's own bytes (a dirty eviction)
        // and shrinks only through `set_len`, which refuses while the snapshot is mapped. The
        // file is the process's own (created exclusively, in its temporary directory).
        // With the GIL held: a mapping is made in microseconds and waits for no disk, and
        // letting the GIL go here lets the engine's completion callbacks in ahead of the caller.
        let buffer = unsafe { store.snapshot(0, bytes) }.map_err(os_error)?;
        // Asked of the mapping itself (`cachestat`, or `mincore` where that does not exist);
        // an uncached snapshot is unmapped again unread. The question is advice: when the
        // kernel cannot answer it, the promote copies, which is right either way.
        if !buffer.pages_in_memory().unwrap_or(false) {
            return Ok(None);
        }
        Ok(Some(Self::holding(kind, buffer)))
    }

    /// Whether this storage is a copy-on-write snapshot of a file (`snapshot_of`).
    fn is_file_snapshot(&self) -> bool {
        self.buffer().is_some_and(|b| b.is_file_snapshot())
    }

    /// Wrap `count` slots at `pointer` without taking ownership.
    ///
    /// The caller promises the memory stays valid while the storage is live, as the CPU
    /// carrier's `pointer=` contract states.
    #[staticmethod]
    fn wrap(kind: &str, pointer: usize, count: usize) -> PyResult<Self> {
        let kind = parse_kind(kind)?;
        let ptr = NonNull::new(pointer as *mut u8).ok_or_else(|| PyValueError::new_err("pointer must be non-zero"))?;
        let bytes = count
            .checked_mul(kind.size())
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| PyOverflowError::new_err(format!("wrapped storage size {count} overflows")))?;
        // SAFETY: the Python caller (the CPU carrier) documents that a wrapped pointer must
        // address `count` slots that outlive the carrier; that is the contract of CPU(size,
        // pointer) and the same escape hatch the specification names for CPU.pointer().
        let buffer = unsafe { HostBuffer::wrap(ptr, bytes) };
        Ok(Self::holding(kind, buffer))
    }

    #[getter(kind)]
    fn kind_name(&self) -> &'static str {
        self.kind.name()
    }

    /// Number of slots; 0 once released.
    #[getter]
    fn count(&self) -> usize {
        self.buffer().map_or(0, |b| b.len() / self.kind.size())
    }

    /// Address of slot 0; 0 once released.
    fn pointer(&self) -> usize {
        self.buffer().map_or(0, |b| b.as_ptr() as usize)
    }

    fn is_owned(&self) -> bool {
        self.buffer().is_some_and(|b| b.is_owned())
    }

    fn is_released(&self) -> bool {
        self.buffer.read().is_none()
    }

    /// Drop this storage's reference to the memory (freeing owned memory once no transfer
    /// still holds it). Idempotent.
    fn release(&self) {
        self.release_buffer();
    }

    fn get(&self, py: Python<'_>, index: i64) -> PyResult<Py<PyAny>> {
        self.get_slot(py, index, slot_out_of_range(index))
    }

    fn set(&self, index: i64, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.set_slot(index, value, slot_out_of_range(index))
    }

    /// Every value is converted and checked before the first slot changes, so a bad entry
    /// leaves the storage untouched.
    fn set_values(&self, values: &Bound<'_, PyAny>) -> PyResult<()> {
        let buf = self.live()?;
        let encoded = encode_all(self.kind, values)?;
        if encoded.len() > buf.len() {
            return Err(PyIndexError::new_err("more values than slots"));
        }
        // SAFETY: as in `set_slot`: this fill runs with the GIL held on a carrier no pending
        // move claims (factories fill fresh storage before anyone else can see it).
        unsafe { buf.write(0, &encoded) }.expect("length checked");
        Ok(())
    }

    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let buf = self.live()?;
        let mut bytes = error::zeroed_bytes(buf.len(), "bytes of a storage's copy")?;
        buf.read(0, &mut bytes).expect("whole buffer");
        decode_all(py, self.kind, &bytes)
    }

    fn __repr__(&self) -> String {
        format!("HostStorage(kind={:?}, count={})", self.kind.name(), self.count())
    }
}

/// A raw native-endian file of slots, created exclusively by the carrier and removed on
/// release.
#[pyclass(frozen, module = "strideweave._native")]
pub struct FileStorage {
    kind: ElemKind,
    path: PathBuf,
    store: RwLock<Option<Arc<FileStore>>>,
}

impl FileStorage {
    /// Deletes the file and drops the handle, without the GIL (never call it holding the
    /// GIL: see `release`). Idempotent.
    pub(crate) fn release_store(&self) -> std::io::Result<()> {
        let taken = self.store.write().take();
        if let Some(store) = taken {
            store.unlink()?;
            // The last close of an unlinked file frees its blocks and cached pages. For a
            // large file that is a millisecond per 16 MiB nobody needs to wait for, so it
            // happens on a worker; a small one is closed here, so its space is free when
            // release returns (a caller that releases to make room can use the room at once).
            // A running copy may still hold the file, and then the last of them closes it.
            let small = store.len_bytes().map_or(true, |n| n < DEFERRED_FREE_BYTES as u64);
            if small {
                drop(store);
            } else {
                engine::submit(move || drop(store));
            }
        }
        Ok(())
    }

    pub fn store(&self) -> Option<Arc<FileStore>> {
        self.store.read().clone()
    }

    pub fn kind(&self) -> ElemKind {
        self.kind
    }

    fn live(&self) -> PyResult<Arc<FileStore>> {
        self.store().ok_or_else(released)
    }

    fn slots(&self, store: &FileStore) -> PyResult<usize> {
        Ok(store.len_bytes().map_err(os_error)? as usize / self.kind.size())
    }
}

#[pymethods]
impl FileStorage {
    /// Create `path` (it must not exist: FileExistsError otherwise), empty.
    #[new]
    fn new(path: PathBuf, kind: &str) -> PyResult<Self> {
        let kind = parse_kind(kind)?;
        let store = FileStore::create_new(&path)?;
        Ok(Self { kind, path, store: RwLock::new(Some(Arc::new(store))) })
    }

    #[getter(kind)]
    fn kind_name(&self) -> &'static str {
        self.kind.name()
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    #[getter]
    fn count(&self) -> PyResult<usize> {
        match self.store() {
            Some(store) => self.slots(&store),
            None => Ok(0),
        }
    }

    fn fileno(&self) -> PyResult<i32> {
        use std::os::fd::AsRawFd;
        Ok(self.live()?.file().as_raw_fd())
    }

    fn is_released(&self) -> bool {
        self.store.read().is_none()
    }

    /// Resize to `count` slots; new slots read zero.
    fn resize(&self, py: Python<'_>, count: usize) -> PyResult<()> {
        let store = self.live()?;
        let bytes = (count as u64)
            .checked_mul(self.kind.size() as u64)
            .filter(|&b| b <= i64::MAX as u64)
            .ok_or_else(|| PyOverflowError::new_err(format!("file size {count} overflows")))?;
        py.detach(|| store.set_len(bytes)).map_err(os_error)?;
        Ok(())
    }

    /// Delete the file and drop the handle. Idempotent.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        // Detached before the write lock is taken: a thread holding the GIL may be waiting
        // for that lock (any access), and would never give the GIL back.
        py.detach(|| self.release_store()).map_err(os_error)
    }

    fn get(&self, py: Python<'_>, index: i64) -> PyResult<Py<PyAny>> {
        self.get_slot(py, index, slot_out_of_range(index))
    }

    fn set(&self, index: i64, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.set_slot(index, value, slot_out_of_range(index))
    }

    /// Resize to exactly the values given and write them; every value is checked first.
    fn assign_values(&self, py: Python<'_>, values: &Bound<'_, PyAny>) -> PyResult<()> {
        let store = self.live()?;
        let encoded = encode_all(self.kind, values)?;
        py.detach(|| -> std::io::Result<()> {
            store.set_len(encoded.len() as u64)?;
            store.write_at(0, &encoded)
        })
        .map_err(os_error)?;
        Ok(())
    }

    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let store = self.live()?;
        let len = store.len_bytes().map_err(os_error)?;
        let len = usize::try_from(len)
            .map_err(|_| PyOverflowError::new_err(format!("a file of {len} bytes does not fit in memory")))?;
        let mut bytes = error::zeroed_bytes(len, "bytes of a file's copy")?;
        py.detach(|| store.read_at(0, &mut bytes)).map_err(os_error)?;
        decode_all(py, self.kind, &bytes)
    }

    fn __repr__(&self) -> PyResult<String> {
        Ok(format!("FileStorage(path={:?}, kind={:?}, count={})", self.path, self.kind.name(), self.count()?))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<HostStorage>()?;
    m.add_class::<FileStorage>()?;
    Ok(())
}
