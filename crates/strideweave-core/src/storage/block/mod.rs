//! Block-device storage: a raw block-special node (a loop device, a disk partition) used as
//! a flat byte space carved into extents.
//!
//! The device is opened with `O_DIRECT` where the kernel allows it, so every transfer must
//! use a file offset, a length and a memory address aligned to the device's blocks. Callers
//! address single `f32` slots at arbitrary byte offsets, so the I/O layer widens every request
//! to the enclosing aligned blocks, stages unaligned pieces through an aligned bounce buffer
//! (read-modify-write for partial blocks) and sends aligned bulk transfers straight from the
//! caller's memory in large chunks.
//!
//! Failure model: any OS error or zero-byte transfer during I/O puts the device in a
//! *faulted* state; from then on reads, writes and allocations fail, while `free` and `close`
//! still work so that the owner can tear everything down. A fault is sticky on purpose: after
//! a failed write the device contents are unknown, and silently continuing could lose values.
//!
//! All state lives behind one mutex per device, which both serializes I/O (the read-modify-write
//! of a shared block must not interleave with another writer) and keeps the allocator coherent.
//!
//! Opening a path that is not a block device is refused with a cause, before any I/O:
//!
//! ```
//! use strideweave_core::storage::block::{BlockDevice, BlockError};
//!
//! assert!(matches!(BlockDevice::open("bad\0path"), Err(BlockError::InvalidPath(_))));
//! ```

// `u64::is_multiple_of` needs Rust 1.87; the workspace's MSRV is 1.85.
#![allow(clippy::manual_is_multiple_of)]

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;

use parking_lot::Mutex;

/// Largest single transfer (and bounce buffer) size. Large enough that syscall overhead is
/// negligible next to the device's bandwidth, small enough that the bounce buffer stays cheap.
pub const CHUNK_BYTES: usize = 8 << 20;

/// Largest block size accepted as sane geometry; keeps `CHUNK_BYTES` a multiple of the
/// allocation alignment.
const MAX_BLOCK_SIZE: u32 = 1 << 20;

mod aligned_io;
mod error;
mod geometry;
#[cfg(test)]
mod tests;

use aligned_io::{round_down, Bounces, Io};
pub use error::BlockError;
pub use geometry::Geometry;

/// A live allocation: `len` bytes at device offset `offset`, both multiples of the alignment.
/// A zero-length extent occupies nothing and is not tracked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Device byte offset of the first byte.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

struct State {
    /// `None` once closed.
    file: Option<File>,
    /// The cause of the first fault, if any.
    fault: Option<String>,
    /// Live extents, offset → length; never overlapping, all inside `usable_bytes`.
    extents: BTreeMap<u64, u64>,
    bounce: Bounces,
}

/// An open block device with an extent allocator and aligned positioned I/O.
///
/// Every method takes `&self`; a single internal mutex serializes them.
pub struct BlockDevice {
    geometry: Geometry,
    direct: bool,
    state: Mutex<State>,
}

impl fmt::Debug for BlockDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockDevice")
            .field("geometry", &self.geometry)
            .field("direct", &self.direct)
            .finish_non_exhaustive()
    }
}

impl BlockDevice {
    /// Opens the block-special node at `path` (Linux only).
    ///
    /// Errors: [`BlockError::InvalidPath`] (NUL in the path), [`BlockError::NotBlockDevice`],
    /// [`BlockError::BadGeometry`], [`BlockError::Open`] (the OS refused),
    /// [`BlockError::Unsupported`] on other systems.
    pub fn open(path: &str) -> Result<BlockDevice, BlockError> {
        if path.contains('\0') {
            return Err(BlockError::InvalidPath(path.to_owned()));
        }
        #[cfg(target_os = "linux")]
        {
            let (file, geometry, direct) = geometry::sys::open(path)?;
            log::debug!(
                target: LOG_TARGET,
                "opened block device {path}: {} bytes, logical/physical block {}/{}, O_DIRECT {}",
                geometry.capacity_bytes(),
                geometry.logical_block_size(),
                geometry.physical_block_size(),
                direct
            );
            Ok(BlockDevice::from_file(file, geometry, direct))
        }
        #[cfg(not(target_os = "linux"))]
        {
            Err(BlockError::Unsupported)
        }
    }

    /// Wraps an already open file with the given geometry. `direct` says whether the file
    /// was opened with `O_DIRECT`, i.e. whether transfers must be block-aligned.
    ///
    /// This is how the tests drive the allocator and the I/O paths with a regular file; the
    /// file must be at least `geometry.capacity_bytes` long for reads to succeed.
    pub fn from_file(file: File, geometry: Geometry, direct: bool) -> BlockDevice {
        BlockDevice {
            geometry,
            direct,
            state: Mutex::new(State {
                file: Some(file),
                fault: None,
                extents: BTreeMap::new(),
                bounce: Bounces::default(),
            }),
        }
    }

    /// The device's geometry.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Whether transfers bypass the page cache (`O_DIRECT` was accepted).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Whether [`close`](Self::close) ran.
    pub fn is_closed(&self) -> bool {
        self.state.lock().file.is_none()
    }

    /// Whether an I/O error faulted the device (every later operation fails).
    pub fn is_faulted(&self) -> bool {
        self.state.lock().fault.is_some()
    }

    /// The error that faulted the device, if any.
    pub fn fault_reason(&self) -> Option<String> {
        self.state.lock().fault.clone()
    }

    /// The OS descriptor, for diagnostics; `None` once closed.
    pub fn raw_fd(&self) -> Option<i32> {
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            self.state.lock().file.as_ref().map(|f| f.as_raw_fd())
        }
        #[cfg(not(unix))]
        {
            None
        }
    }

    /// Live extents in offset order.
    pub fn live_extents(&self) -> Vec<Extent> {
        self.state.lock().extents.iter().map(|(&offset, &len)| Extent { offset, len }).collect()
    }

    /// Closes the descriptor. Idempotent; live extents stay tracked so `free` keeps working.
    pub fn close(&self) {
        self.state.lock().file = None;
    }

    /// Reserves `bytes` rounded up to the allocation alignment in the lowest free range that
    /// fits, zero-filling it on the device unless `zero` is false. Zero bytes yield an empty
    /// extent at offset 0 that occupies nothing.
    ///
    /// On any error nothing is reserved. A write error while zeroing faults the device.
    pub fn allocate(&self, bytes: u64, zero: bool) -> Result<Extent, BlockError> {
        let mut st = self.state.lock();
        let st = &mut *st;
        let file = usable(&st.fault, &st.file)?;
        let align = self.geometry.allocation_alignment();
        let usable_bytes = self.geometry.usable_bytes();
        let no_space = BlockError::NoSpace { requested: bytes, capacity: self.geometry.capacity_bytes() };
        let len = match bytes.checked_add(align - 1) {
            Some(v) => round_down(v, align),
            None => return Err(no_space),
        };
        if len == 0 {
            return Ok(Extent { offset: 0, len: 0 });
        }
        let mut cursor = 0u64;
        let mut found = None;
        for (&off, &elen) in &st.extents {
            if off - cursor >= len {
                found = Some(cursor);
                break;
            }
            cursor = off + elen;
        }
        let offset = match found {
            Some(o) => o,
            None if usable_bytes - cursor >= len => cursor,
            None => return Err(no_space),
        };
        if zero {
            let io = self.io(file);
            if let Err(e) = io.zero(offset, len, &mut st.bounce) {
                return Err(fault(&mut st.fault, e));
            }
        }
        st.extents.insert(offset, len);
        Ok(Extent { offset, len })
    }

    /// Returns a live extent to the free space. Works on closed and faulted devices.
    pub fn free(&self, extent: Extent) -> Result<(), BlockError> {
        if extent.len == 0 {
            return Ok(());
        }
        let mut st = self.state.lock();
        match st.extents.get(&extent.offset) {
            Some(&len) if len == extent.len => {
                st.extents.remove(&extent.offset);
                Ok(())
            }
            _ => Err(BlockError::UnknownExtent { offset: extent.offset, len: extent.len }),
        }
    }

    /// Frees the live extent starting at `offset`, whatever its length.
    pub fn free_at(&self, offset: u64) -> Result<Extent, BlockError> {
        let mut st = self.state.lock();
        match st.extents.remove(&offset) {
            Some(len) => Ok(Extent { offset, len }),
            None => Err(BlockError::UnknownExtent { offset, len: 0 }),
        }
    }

    /// Reads `out.len()` bytes at device offset `offset`, which must lie inside one live
    /// extent. Any OS error or zero-byte transfer faults the device.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BlockError> {
        log_new_fault(self.read_locked(offset, out))
    }

    fn read_locked(&self, offset: u64, out: &mut [u8]) -> Result<(), BlockError> {
        let mut st = self.state.lock();
        let st = &mut *st;
        let file = usable(&st.fault, &st.file)?;
        check_range(&st.extents, offset, out.len() as u64)?;
        if out.is_empty() {
            return Ok(());
        }
        let io = self.io(file);
        io.read(offset, out, &mut st.bounce).map_err(|e| fault(&mut st.fault, e))
    }

    /// Writes `data` at device offset `offset`, which must lie inside one live extent.
    /// Partial blocks are read-modify-written, so neighbouring bytes keep their values.
    /// Any OS error or zero-byte transfer faults the device.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), BlockError> {
        log_new_fault(self.write_locked(offset, data))
    }

    fn write_locked(&self, offset: u64, data: &[u8]) -> Result<(), BlockError> {
        let mut st = self.state.lock();
        let st = &mut *st;
        let file = usable(&st.fault, &st.file)?;
        check_range(&st.extents, offset, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        let io = self.io(file);
        io.write(offset, data, &mut st.bounce).map_err(|e| fault(&mut st.fault, e))
    }

    /// Reads one native-endian `f32` at `offset`.
    pub fn read_f32(&self, offset: u64) -> Result<f32, BlockError> {
        let mut b = [0u8; 4];
        self.read(offset, &mut b)?;
        Ok(f32::from_ne_bytes(b))
    }

    /// Writes one native-endian `f32` at `offset`.
    pub fn write_f32(&self, offset: u64, value: f32) -> Result<(), BlockError> {
        self.write(offset, &value.to_ne_bytes())
    }

    fn io<'a>(&self, file: &'a File) -> Io<'a> {
        Io {
            file,
            direct: self.direct,
            align: self.geometry.allocation_alignment(),
            mem_align: self.geometry.logical_block_size() as usize,
        }
    }
}

/// The open file of a device that is neither closed nor faulted.
fn usable<'a>(fault: &Option<String>, file: &'a Option<File>) -> Result<&'a File, BlockError> {
    if let Some(cause) = fault {
        return Err(BlockError::Faulted(cause.clone()));
    }
    file.as_ref().ok_or(BlockError::Closed)
}

/// Log records go to the Python logger `strideweave.blockdev`.
const LOG_TARGET: &str = "strideweave::blockdev";

/// Warns once per fault, after the device lock is released (the logging bridge may need the
/// GIL, which a Python thread could hold while waiting for that lock). A transfer error is
/// `Io`/`ZeroTransfer` only on the call that faulted the device; later calls see `Faulted`.
fn log_new_fault(result: Result<(), BlockError>) -> Result<(), BlockError> {
    if let Err(e @ (BlockError::Io(_) | BlockError::ZeroTransfer { .. })) = &result {
        log::warn!(target: LOG_TARGET, "{e}");
    }
    result
}

/// Records a transfer error as the device's fault (keeping the first cause) and passes it on.
fn fault(slot: &mut Option<String>, e: BlockError) -> BlockError {
    if e.is_fault() && slot.is_none() {
        *slot = Some(e.to_string());
    }
    e
}

fn check_range(extents: &BTreeMap<u64, u64>, offset: u64, len: u64) -> Result<(), BlockError> {
    let out = BlockError::OutOfRange { offset, len };
    let end = offset.checked_add(len).ok_or(BlockError::OutOfRange { offset, len })?;
    match extents.range(..=offset).next_back() {
        Some((&eoff, &elen)) if end <= eoff + elen => Ok(()),
        _ => Err(out),
    }
}
