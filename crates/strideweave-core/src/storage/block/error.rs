//! `BlockError`: why a block-device operation failed, by cause.

use std::fmt;
use std::io;

/// Errors of the block-device layer. The binding maps each variant to the Python exception
/// type the spec names (see `strideweave-py/src/block.rs`).
#[derive(Debug)]
pub enum BlockError {
    /// Block devices are only implemented on Linux.
    Unsupported,
    /// The path cannot name a file (it contains NUL).
    InvalidPath(String),
    /// The path names something that is not a block-special node.
    NotBlockDevice(String),
    /// Capacity or block sizes the I/O layer cannot work with.
    BadGeometry(String),
    /// Opening (or querying) the device failed; the device was never usable.
    Open(io::Error),
    /// An OS error during a transfer; the device is now faulted.
    Io(io::Error),
    /// The OS transferred zero bytes where data was expected; the device is now faulted.
    ZeroTransfer { offset: u64, write: bool },
    /// The device was closed.
    Closed,
    /// The device faulted earlier; the message names the original cause.
    Faulted(String),
    /// No free range is large enough.
    NoSpace { requested: u64, capacity: u64 },
    /// A byte range that is not inside one live extent.
    OutOfRange { offset: u64, len: u64 },
    /// `free` of an extent that is not live.
    UnknownExtent { offset: u64, len: u64 },
}

impl BlockError {
    /// Whether this error put (or found) the device in the faulted state.
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            BlockError::Io(_) | BlockError::ZeroTransfer { .. } | BlockError::Faulted(_)
        )
    }
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockError::Unsupported => {
                write!(f, "block devices are only supported on Linux")
            }
            BlockError::InvalidPath(p) => write!(f, "path {p:?} contains a NUL byte"),
            BlockError::NotBlockDevice(p) => write!(f, "path {p:?} is not a block device"),
            BlockError::BadGeometry(why) => write!(f, "bad geometry: {why}"),
            BlockError::Open(e) => write!(f, "cannot open block device: {e}"),
            BlockError::Io(e) => write!(f, "block device I/O error (device faulted): {e}"),
            BlockError::ZeroTransfer { offset, write } => write!(
                f,
                "zero-byte {} at device offset {offset} (device faulted)",
                if *write { "write" } else { "read" }
            ),
            BlockError::Closed => write!(f, "block device is closed"),
            BlockError::Faulted(cause) => {
                write!(f, "block device is faulted by an earlier error: {cause}")
            }
            BlockError::NoSpace {
                requested,
                capacity,
            } => write!(
                f,
                "no room on the block device for an extent of {requested} bytes \
                 (capacity {capacity} bytes)"
            ),
            BlockError::OutOfRange { offset, len } => write!(
                f,
                "byte range [{offset}, {}) is not inside a live extent",
                offset.saturating_add(*len)
            ),
            BlockError::UnknownExtent { offset, len } => {
                write!(f, "no live extent of {len} bytes at offset {offset}")
            }
        }
    }
}

impl std::error::Error for BlockError {}

