//! Storage backends: typed element kinds, aligned host buffers, raw files and slabs (one
//! file cut into equal regions).
//!
//! These types know bytes and element encodings only. Versions, ownership and release
//! semantics belong to the carrier object model: `crate::model` for Rust users, the
//! `strideweave.carriers` package for Python.

mod elem;
mod file;
mod host;
mod slab;

pub use elem::{ElemKind, Scalar};
pub use file::FileStore;
pub use host::HostBuffer;
pub use slab::FileSlab;
#[cfg(feature = "block-devices")]
pub mod block;
