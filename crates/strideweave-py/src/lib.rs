//! `strideweave._native`: the PyO3 surface over `strideweave-core`.
//! Each submodule registers its own classes and functions; this file only wires them up.
use pyo3::prelude::*;

mod access;
mod async_move;
mod block;
mod buffer_copy;
mod carrier_base;
mod carrier_state;
mod commit;
mod dlpack;
mod engine;
mod error;
mod file_slab;
mod initiate;
mod inline_move;
mod jobs;
mod kernels;
mod layout;
mod move_entry;
mod move_request;
mod move_state;
mod prefault;
mod py_carrier;
mod residency;
mod routes;
mod set_once;
mod storage;
mod tensor_base;
mod tile_book;
mod tiles;
mod transfer;
mod two_tier;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    install_logger(m.py());
    layout::register(m)?;
    storage::register(m)?;
    file_slab::register(m)?;
    carrier_base::register(m)?;
    dlpack::register(m)?;
    engine::register(m)?;
    kernels::register(m)?;
    block::register(m)?;
    access::register(m)?;
    tensor_base::register(m)?;
    transfer::register(m)?;
    inline_move::register(m)?;
    async_move::register(m)?;
    commit::register(m)?;
    move_request::register(m)?;
    move_state::register(m)?;
    initiate::register(m)?;
    routes::register(m)?;
    move_entry::register(m)?;
    tiles::register(m)?;
    buffer_copy::register(m)?;
    prefault::register(m)?;
    residency::register(m)?;
    tile_book::register(m)?;
    two_tier::register(m)?;
    Ok(())
}

/// Bridges the core's `log` records to Python's `logging` (targets `strideweave::x` become
/// loggers `strideweave.x`, children of `logging.getLogger("strideweave")`).
///
/// Only the logger objects are cached, not their levels, so a later `setLevel` on the Python
/// side takes effect at once. That costs a GIL round trip per record, which is why the core
/// logs only rare events (storage created or removed, a device opened or faulted) and never
/// in a per-element or per-chunk path, and never while holding a lock. Records above Debug
/// verbosity (Trace) are dropped in Rust.
fn install_logger(py: Python<'_>) {
    let Ok(logger) = pyo3_log::Logger::new(py, pyo3_log::Caching::Loggers) else {
        return;
    };
    // Err only if a logger is already installed (a second import in the same process):
    // that logger is ours already, so there is nothing to do.
    let _ = logger.filter(log::LevelFilter::Debug).install();
}
