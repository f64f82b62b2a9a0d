//! `_native.BlockDeviceHandle`: the Rust block device (`strideweave_core::storage::block`)
//! as seen from the Python carriers.
//!
//! This is a private building block for `strideweave.carriers.block_device`: it takes plain
//! `str` paths and ints, and leaves argument-type checks, carrier bookkeeping and the "close
//! refuses while a carrier object is alive" rule to Python. Its core errors become the
//! exceptions the spec names in `error::block` (the table is there).
//!
//! Bulk transfers and zero-filling release the GIL; the device's own mutex serializes them.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Arc;
use strideweave_core::storage::block::{BlockDevice, BlockError, Extent};

use strideweave_core::storage::{ElemKind, HostBuffer, Scalar};

use crate::error;
use crate::storage::HostStorage;

/// An open block-special node with an extent allocator and aligned positioned I/O.
///
/// Private to strideweave: use `strideweave.BlockDevice`.
#[pyclass(module = "strideweave._native", frozen)]
pub struct BlockDeviceHandle {
    dev: BlockDevice,
    path: String,
}

impl BlockDeviceHandle {
    fn err(&self, e: BlockError) -> PyErr {
        error::block(e, &self.path)
    }
}

#[pymethods]
impl BlockDeviceHandle {
    /// Opens `path` read-write (O_DIRECT where the kernel allows it). Writes nothing.
    #[new]
    fn new(py: Python<'_>, path: String) -> PyResult<Self> {
        let dev = py.detach(|| BlockDevice::open(&path)).map_err(|e| error::block(e, &path))?;
        Ok(BlockDeviceHandle { dev, path })
    }

    /// The path as given to the constructor.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    #[getter]
    fn capacity_bytes(&self) -> u64 {
        self.dev.geometry().capacity_bytes()
    }

    #[getter]
    fn logical_block_size(&self) -> u32 {
        self.dev.geometry().logical_block_size()
    }

    #[getter]
    fn physical_block_size(&self) -> u32 {
        self.dev.geometry().physical_block_size()
    }

    /// The larger of the two block sizes; every extent starts and ends on it.
    #[getter]
    fn allocation_alignment(&self) -> u64 {
        self.dev.geometry().allocation_alignment()
    }

    /// Whether the descriptor uses O_DIRECT (False when the kernel refused it).
    #[getter]
    fn direct_io(&self) -> bool {
        self.dev.is_direct()
    }

    fn is_closed(&self) -> bool {
        self.dev.is_closed()
    }

    fn is_faulted(&self) -> bool {
        self.dev.is_faulted()
    }

    /// The message of the error that faulted the device, or None.
    fn fault_reason(&self) -> Option<String> {
        self.dev.fault_reason()
    }

    /// Closes the descriptor; idempotent. Live extents stay tracked so `free` keeps working.
    fn close(&self) {
        self.dev.close()
    }

    /// The OS descriptor, for diagnostics. RuntimeError once closed.
    fn fileno(&self) -> PyResult<i32> {
        self.dev.raw_fd().ok_or_else(|| self.err(BlockError::Closed))
    }

    /// Reserves `nbytes` rounded up to the alignment in the lowest free range, zero-filled
    /// when `zero`. Returns `(offset, length)`; zero bytes give `(0, 0)`, which occupies
    /// nothing.
    fn allocate(&self, py: Python<'_>, nbytes: u64, zero: bool) -> PyResult<(u64, u64)> {
        let e = py.detach(|| self.dev.allocate(nbytes, zero)).map_err(|e| self.err(e))?;
        Ok((e.offset, e.len))
    }

    /// Frees the live extent at `offset`. With `length`, it must match the extent's length;
    /// a `length` of 0 (an empty extent) is a no-op. Works on closed and faulted devices.
    #[pyo3(signature = (offset, length=None))]
    fn free(&self, offset: u64, length: Option<u64>) -> PyResult<()> {
        match length {
            Some(len) => self.dev.free(Extent { offset, len }),
            None => self.dev.free_at(offset).map(|_| ()),
        }
        .map_err(|e| self.err(e))
    }

    /// Live extents as `(offset, length)` pairs in offset order.
    fn live_extents(&self) -> Vec<(u64, u64)> {
        self.dev.live_extents().into_iter().map(|e| (e.offset, e.len)).collect()
    }

    /// Reads the native-endian float32 at device byte offset `byte_off`.
    fn read_f32(&self, byte_off: u64) -> PyResult<f32> {
        self.dev.read_f32(byte_off).map_err(|e| self.err(e))
    }

    /// Writes `value` rounded to binary32 at device byte offset `byte_off`. The value follows
    /// the Float32 slot rules of the other built-in storages (a real number, not a bool or a
    /// str → TypeError), checked before any I/O.
    fn write_f32(&self, byte_off: u64, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let v = f32_from_py(value)?;
        self.dev.write_f32(byte_off, v).map_err(|e| self.err(e))
    }

    /// Writes the values of the iterable `values` as consecutive float32 slots from
    /// `byte_off` in one transfer. `None` is stored as 0.0. Every value is checked (TypeError)
    /// before anything is written.
    fn write_values(&self, py: Python<'_>, byte_off: u64, values: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut bytes = Vec::new();
        for item in values.try_iter()? {
            let item = item?;
            let v = if item.is_none() { 0.0 } else { f32_from_py(&item)? };
            bytes.extend_from_slice(&v.to_ne_bytes());
        }
        py.detach(|| self.dev.write(byte_off, &bytes)).map_err(|e| self.err(e))
    }

    /// Reads `count` consecutive float32 slots from `byte_off` as a list of floats.
    fn read_values(&self, py: Python<'_>, byte_off: u64, count: usize) -> PyResult<Vec<f64>> {
        let nbytes =
            count.checked_mul(4).ok_or_else(|| PyValueError::new_err(format!("count {count} is too large")))?;
        let mut values = crate::error::reserve::<f64>(count, "values")?;
        let mut buf = crate::error::zeroed_bytes(nbytes, "bytes read")?;
        py.detach(|| self.dev.read(byte_off, &mut buf)).map_err(|e| self.err(e))?;
        values.extend(buf.chunks_exact(4).map(|c| f64::from(f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))));
        Ok(values)
    }

    /// Reads `nbytes` at `byte_off` into a new `bytes`.
    fn read_bytes<'py>(&self, py: Python<'py>, byte_off: u64, nbytes: usize) -> PyResult<Bound<'py, PyBytes>> {
        let mut buf = crate::error::zeroed_bytes(nbytes, "bytes read")?;
        py.detach(|| self.dev.read(byte_off, &mut buf)).map_err(|e| self.err(e))?;
        Ok(PyBytes::new(py, &buf))
    }

    /// Writes the bytes of `data` at `byte_off`.
    fn write_bytes(&self, py: Python<'_>, byte_off: u64, data: &[u8]) -> PyResult<()> {
        py.detach(|| self.dev.write(byte_off, data)).map_err(|e| self.err(e))
    }

    /// Reads `nbytes` of the device at `byte_off` into `storage` (a `HostStorage`) from its
    /// byte `storage_byte_off`, GIL released. The storage's buffer is held by reference for
    /// the call, so a concurrent release cannot free it under the read.
    fn read_into(
        &self,
        py: Python<'_>,
        storage: &Bound<'_, HostStorage>,
        storage_byte_off: usize,
        byte_off: u64,
        nbytes: usize,
    ) -> PyResult<()> {
        let range = HostRange::checked(storage, storage_byte_off, nbytes)?;
        // SAFETY: the move claims keep other readers and writers off this destination range
        // until the call returns.
        py.detach(|| self.dev.read(byte_off, unsafe { range.bytes_mut() })).map_err(|e| self.err(e))
    }

    /// Writes `nbytes` of `storage` (a `HostStorage`) from its byte `storage_byte_off` to the
    /// device at `byte_off`, GIL released, holding the buffer by reference for the call.
    fn write_from(
        &self,
        py: Python<'_>,
        storage: &Bound<'_, HostStorage>,
        storage_byte_off: usize,
        byte_off: u64,
        nbytes: usize,
    ) -> PyResult<()> {
        let range = HostRange::checked(storage, storage_byte_off, nbytes)?;
        // SAFETY: the move claims keep writers off this source range until the call returns.
        py.detach(|| self.dev.write(byte_off, unsafe { range.bytes() })).map_err(|e| self.err(e))
    }

    fn __repr__(&self) -> String {
        let g = self.dev.geometry();
        let state = if self.dev.is_faulted() {
            "faulted"
        } else if self.dev.is_closed() {
            "closed"
        } else {
            "open"
        };
        format!(
            "BlockDeviceHandle({:?}, capacity_bytes={}, logical_block_size={}, \
             physical_block_size={}, {state})",
            self.path,
            g.capacity_bytes(),
            g.logical_block_size(),
            g.physical_block_size()
        )
    }
}

fn f32_from_py(value: &Bound<'_, PyAny>) -> PyResult<f32> {
    match crate::storage::scalar_from_py(ElemKind::F32, value)? {
        Scalar::F32(v) => Ok(v),
        _ => unreachable!("an F32 slot converts to Scalar::F32"),
    }
}

/// A byte range of a live host buffer, checked once and held by reference (`Arc`) so that a
/// concurrent release cannot free it while the device reads or writes it.
struct HostRange {
    buffer: Arc<HostBuffer>,
    start: usize,
    len: usize,
}

impl HostRange {
    /// `[byte_off, byte_off + nbytes)` of `storage`'s buffer: RuntimeError when released,
    /// ValueError when out of range.
    fn checked(storage: &Bound<'_, HostStorage>, byte_off: usize, nbytes: usize) -> PyResult<Self> {
        let buffer = storage.get().buffer().ok_or_else(|| PyRuntimeError::new_err("storage is released"))?;
        if byte_off.checked_add(nbytes).is_none_or(|end| end > buffer.len()) {
            return Err(PyValueError::new_err(format!(
                "{nbytes} bytes from storage byte {byte_off} run past the end of the storage ({} bytes)",
                buffer.len()
            )));
        }
        Ok(HostRange { buffer, start: byte_off, len: nbytes })
    }

    /// The range's bytes.
    ///
    /// # Safety
    /// No one may write the range while the slice lives.
    unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: the range was checked inside the buffer, which `self` keeps alive; the
        // caller excludes writers.
        unsafe { std::slice::from_raw_parts(self.buffer.as_ptr().add(self.start), self.len) }
    }

    /// The range's bytes, writable.
    ///
    /// # Safety
    /// No one else may read or write the range while the slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: as for `bytes`, and the caller excludes every other access.
        unsafe { std::slice::from_raw_parts_mut(self.buffer.as_ptr().add(self.start), self.len) }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<BlockDeviceHandle>()?;
    Ok(())
}
