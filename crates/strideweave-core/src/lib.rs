//! strideweave-core: everything that does not need the Python interpreter.
//!
//! The Python bindings (`strideweave-py`) are a thin layer over these modules; keeping
//! them free of PyO3 lets `cargo test` exercise the algebra and the I/O paths directly.

pub mod copy;
pub mod dlpack;
pub mod engine;
pub mod kernels;
pub mod layout;
pub mod storage;
pub mod tiles;
