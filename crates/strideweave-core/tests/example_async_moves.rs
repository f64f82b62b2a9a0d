//! Runs the logic of `examples/async_moves.rs` (a hand-written executor awaiting moves).

#[path = "../examples/async_moves.rs"]
mod async_moves;

use strideweave_core::model::{move_async, HostCarrier, Tensor};
use strideweave_core::storage::ElemKind;

#[test]
fn awaiting_a_bulk_round_trip_restores_every_value() {
    let values: Vec<f32> = (0..100_000).map(|i| (i % 7) as f32).collect();
    let sum = async_moves::block_on(async_moves::round_trip(&values)).unwrap();
    assert_eq!(sum, values.iter().sum::<f32>());
}

#[test]
fn a_small_host_move_is_done_when_initiated_and_awaits_at_once() {
    let t = Tensor::canonical(HostCarrier::from_f32(&[1.0; 1024]), &[1024]).unwrap();
    let dst = HostCarrier::zeros(ElemKind::F32, 1024).unwrap();
    let handle = move_async(&t, &dst).unwrap();
    assert!(handle.is_done());
    let moved = async_moves::block_on(handle).unwrap();
    assert_eq!(moved.get::<f32>(1023).unwrap(), 1.0);
}

#[test]
fn clones_of_a_handle_await_the_same_outcome_from_several_threads() {
    let n = 1 << 20; // 4 MiB: an engine worker runs it
    let t = Tensor::canonical(HostCarrier::zeros(ElemKind::F32, n).unwrap(), &[n]).unwrap();
    let dst = HostCarrier::zeros(ElemKind::F32, n).unwrap();
    let handle = move_async(&t, &dst).unwrap();
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let h = handle.clone();
            std::thread::spawn(move || async_moves::block_on(h).unwrap().size())
        })
        .collect();
    for w in waiters {
        assert_eq!(w.join().unwrap(), n);
    }
}
