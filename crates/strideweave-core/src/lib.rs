//! strideweave-core: everything that does not need the Python interpreter.
//!
//! The Python bindings (`strideweave-py`) are a thin layer over these modules; keeping
//! them free of PyO3 lets `cargo test` exercise the algebra and the I/O paths directly.

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

/// The crate README's examples run as doc tests, so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
