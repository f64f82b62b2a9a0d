//! A two-tier carrier: weights in host memory, evicted to a file while unused and promoted
//! back before use. Values survive both trips; the file takes the space only while evicted.
//!
//! `cargo run -p strideweave-core --example evict_promote`

use strideweave_core::model::{Carrier, Evictable, FileCarrier, HostCarrier, ModelError, Tensor, Tier};
use strideweave_core::storage::ElemKind;

/// Evict, update through a tensor while evicted, promote; the values read back at the end.
pub fn run(n: usize) -> Result<Vec<f32>, ModelError> {
    let host = HostCarrier::from_f32(&(0..n).map(|i| i as f32).collect::<Vec<_>>());
    let file = FileCarrier::temp(ElemKind::F32)?;
    let weights = Evictable::new(&host, &file)?;
    let t = Tensor::canonical(&weights, &[n])?;

    weights.evict()?;
    assert_eq!((weights.resident(), file.size()), (Tier::Secondary, n));
    t.set(0, -1.0f32)?; // a write reaches whichever tier is resident

    weights.promote()?;
    assert_eq!((weights.resident(), file.size()), (Tier::Primary, 0));
    t.values_f32()
}

#[allow(dead_code)] // the example's entry point; tests/example_evict_promote.rs runs `run`
fn main() {
    let values = run(8).expect("evict and promote");
    println!("after evict, a write and promote: {values:?}");
}
