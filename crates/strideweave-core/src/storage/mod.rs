//! Storage backends: typed element kinds, aligned host buffers, raw files and slabs (one
//! file cut into equal regions).
//!
//! These types know bytes and element encodings only. Versions, ownership and release
//! semantics belong to the carrier object model: `crate::model` for Rust users, the
//! `strideweave.carriers` package for Python.
//!
//! ```
//! use strideweave_core::storage::{ElemKind, HostBuffer, Scalar};
//!
//! let mut buf = HostBuffer::new(8, true).unwrap();
//! let mut slot = [0u8; 4];
//! ElemKind::F32.encode(Scalar::F32(2.5), &mut slot);
//! buf.write_mut(4, &slot).unwrap();
//! assert_eq!(ElemKind::F32.decode(&buf.as_slice()[4..8]), Scalar::F32(2.5));
//! assert!(buf.write_mut(6, &slot).is_none()); // past the end: nothing written
//! ```

mod elem;
mod file;
mod host;
mod slab;

pub(crate) use elem::AtomicSlot;
pub use elem::{ElemKind, Scalar};
pub use file::FileStore;
pub use host::HostBuffer;
pub(crate) use host::RECYCLE_MIN;
pub use slab::FileSlab;
#[cfg(feature = "block-devices")]
pub mod block;
