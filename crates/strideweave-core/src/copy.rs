//! Copy kernels between Rust storages.
