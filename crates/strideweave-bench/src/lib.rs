//! Empty on purpose: this crate only hosts the criterion benchmarks in `benches/`.
