//! `strideweave._native`: the PyO3 surface over `strideweave-core`.
//! Each submodule registers its own classes and functions; this file only wires them up.
use pyo3::prelude::*;

mod access;
mod block;
mod dlpack;
mod engine;
mod kernels;
mod layout;
mod storage;
mod tensor_base;
mod transfer;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    layout::register(m)?;
    storage::register(m)?;
    dlpack::register(m)?;
    engine::register(m)?;
    kernels::register(m)?;
    block::register(m)?;
    access::register(m)?;
    tensor_base::register(m)?;
    transfer::register(m)?;
    Ok(())
}
