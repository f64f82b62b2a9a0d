//! `BlockError`: why a block-device operation failed, by cause.

use std::io;

use thiserror::Error;

/// Errors of the block-device layer. The binding maps each variant to the Python exception
/// type the spec names (see `strideweave-py/src/error.rs`).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BlockError {
    /// Block devices are only implemented on Linux.
    #[error("block devices are only supported on Linux")]
    Unsupported,
    /// The path cannot name a file (it contains NUL).
    #[error("path {0:?} contains a NUL byte")]
    InvalidPath(String),
    /// The path names something that is not a block-special node.
    #[error("path {0:?} is not a block device")]
    NotBlockDevice(String),
    /// Capacity or block sizes the I/O layer cannot work with.
    #[error("bad geometry: {0}")]
    BadGeometry(String),
    /// Opening (or querying) the device failed; the device was never usable.
    #[error("cannot open block device: {0}")]
    Open(io::Error),
    /// An OS error during a transfer; the device is now faulted.
    #[error("block device I/O error (device faulted): {0}")]
    Io(io::Error),
    /// The OS transferred zero bytes where data was expected; the device is now faulted.
    #[error("zero-byte {} at device offset {offset} (device faulted)", if *write { "write" } else { "read" })]
    ZeroTransfer {
        /// Device byte offset of the transfer.
        offset: u64,
        /// Whether it was a write.
        write: bool,
    },
    /// The device was closed.
    #[error("block device is closed")]
    Closed,
    /// The device faulted earlier; the message names the original cause.
    #[error("block device is faulted by an earlier error: {0}")]
    Faulted(String),
    /// No free range is large enough.
    #[error("no room on the block device for an extent of {requested} bytes (capacity {capacity} bytes)")]
    NoSpace {
        /// Bytes asked for.
        requested: u64,
        /// The device's capacity in bytes.
        capacity: u64,
    },
    /// A byte range that is not inside one live extent.
    #[error("byte range [{offset}, {}) is not inside a live extent", offset.saturating_add(*len))]
    OutOfRange {
        /// First byte of the range.
        offset: u64,
        /// Its length in bytes.
        len: u64,
    },
    /// `free` of an extent that is not live.
    #[error("no live extent of {len} bytes at offset {offset}")]
    UnknownExtent {
        /// The extent's offset.
        offset: u64,
        /// Its length in bytes.
        len: u64,
    },
}

impl BlockError {
    /// Whether this error put (or found) the device in the faulted state.
    pub fn is_fault(&self) -> bool {
        matches!(self, BlockError::Io(_) | BlockError::ZeroTransfer { .. } | BlockError::Faulted(_))
    }
}
