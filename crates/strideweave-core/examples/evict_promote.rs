//! A two-tier carrier: weights in host memory, evicted to a file while unused and promoted
//! back before use. Values survive both trips. Each trip moves the values, as a move does:
//! the tier they leave is released (the file takes space only while evicted), and the tier
//! they go to is made afresh beside the old one when that one was released. A promote can
//! also run ahead, on an engine thread (`promote_async`).
//!
//! `cargo run -p strideweave-core --example evict_promote`

use strideweave_core::model::{CarrierExt, Evictable, FileCarrier, HostCarrier, ModelError, Tensor, Tier};
use strideweave_core::storage::ElemKind;

/// Evict, promote, update through a tensor, evict and promote again; the values read back
/// at the end.
pub fn run(n: usize) -> Result<Vec<f32>, ModelError> {
    let host = HostCarrier::from_f32(&(0..n).map(|i| i as f32).collect::<Vec<_>>());
    let file = FileCarrier::temp(ElemKind::F32)?;
    let weights = Evictable::new(&host, &file)?;
    let t = Tensor::canonical(&weights, &[n])?;

    weights.evict()?;
    assert_eq!((weights.resident(), weights.secondary().size()), (Tier::Secondary, n));
    assert!(host.is_released() && t.values_f32().is_err()); // evicted: promote before use

    weights.promote()?;
    assert!(weights.secondary().is_released()); // the file went with the values
    t.set(0, -1.0f32)?;
    weights.evict()?;
    // Prefetch: the promote runs on an engine thread while this one does other work; the
    // weights refuse reads until it is done (`.await` the handle in async code).
    let ready = weights.promote_async()?;
    ready.wait()?;
    assert_eq!(weights.resident(), Tier::Primary);
    t.values_f32()
}

#[allow(dead_code)] // the example's entry point; tests/example_evict_promote.rs runs `run`
fn main() {
    let values = run(8).expect("evict and promote");
    println!("after evict, promote, a write, evict and promote: {values:?}");
}
