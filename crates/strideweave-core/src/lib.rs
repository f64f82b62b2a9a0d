//! strideweave-core: everything that does not need the Python interpreter.
//!
//! The Python bindings (`strideweave-py`) are a thin layer over these modules; keeping
//! them free of PyO3 lets `cargo test` exercise the algebra and the I/O paths directly.
//!
//! A host tensor through a row-major layout, read by coordinate through a typed view:
//!
//! ```
//! use strideweave_core::layout;
//! use strideweave_core::model::{HostCarrier, Tensor};
//!
//! let c = HostCarrier::from_f32(&[1.0, 2.0, 3.0, 4.0]);
//! let t = Tensor::new(c, 0, layout!([2, 2] : [2, 1]).unwrap()).unwrap();
//! assert_eq!(t.host_view::<f32>().unwrap()[(1, 0)], 3.0);
//! assert_eq!(t.get::<f32>(1).unwrap(), 3.0); // ordinal 1 is (1, 0)
//! ```
//!
//! Every public enum is `#[non_exhaustive]`: a match outside the crate needs a wildcard arm, so
//! a new variant is not a breaking change.
//!
//! ```compile_fail
//! use strideweave_core::storage::ElemKind;
//! fn width(kind: ElemKind) -> usize {
//!     match kind {
//!         ElemKind::F32 | ElemKind::I32 => 4,
//!         ElemKind::F64 => 8,
//!         ElemKind::Bool => 1,
//!     }
//! }
//! ```

#![warn(missing_docs, missing_debug_implementations)]

#[macro_use]
mod macros;

pub mod copy;
#[cfg(feature = "dlpack")]
pub mod dlpack;
pub mod engine;
pub mod kernels;
pub mod layout;
pub mod model;
pub mod storage;
pub mod tiles;
pub mod transfer;

/// The crate README's examples run as doc tests, so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
