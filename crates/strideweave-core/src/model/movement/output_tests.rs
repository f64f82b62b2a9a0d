//! A move whose transfer the caller runs (`PendingMove::into_transfer`): the claim admits the
//! writes through its `MoveOutput` from any thread and refuses everything else until the
//! commit, which any thread makes once.

use std::sync::{Arc, Barrier};

use super::{move_tensor, prepare_move};
use crate::model::carrier::{Carrier, CarrierExt, HOOK};
use crate::model::error::ModelError;
use crate::model::{FileCarrier, HostCarrier, Tensor};
use crate::storage::{ElemKind, Scalar};

fn claimed<T: std::fmt::Debug>(outcome: Result<T, ModelError>) -> bool {
    matches!(outcome, Err(ModelError::Claimed { .. }))
}

#[test]
fn a_transfer_run_on_another_thread_fills_the_output_and_commits_there() {
    let src = HostCarrier::from_f32(&[1.0, 2.0, 3.0, 4.0]);
    let dst = HostCarrier::from_f32(&[0.0; 4]);
    let t = Tensor::canonical(src.clone(), &[4]).unwrap();
    let (output, commit) = prepare_move(&t, &dst, None).unwrap().into_transfer();
    assert_eq!(output.len(), 4);
    let moved = std::thread::spawn(move || {
        // Not the source's values, so that the published values are provably the output's.
        for k in 0..output.len() {
            output.set(k, 10.0 * t.get::<f32>(k)?)?;
        }
        commit.commit(Ok(()))
    })
    .join()
    .unwrap()
    .unwrap();
    assert_eq!(moved.values_f32().unwrap(), vec![10.0, 20.0, 30.0, 40.0]);
    assert!(src.is_released() && !dst.is_released());
    assert!(!src.state(HOOK).is_claimed() && !dst.state(HOOK).is_claimed());
    assert_eq!(dst.version(), 0); // the fill is not a write
}

#[test]
fn while_pending_only_the_output_writes_the_destination_and_nothing_releases_or_moves_either_carrier() {
    let src = HostCarrier::from_f32(&[1.0, 2.0]);
    let dst = HostCarrier::from_f32(&[0.0, 0.0]);
    let t = Tensor::canonical(src.clone(), &[2]).unwrap();
    let (output, commit) = prepare_move(&t, &dst, None).unwrap().into_transfer();
    // The filling thread itself is refused everything the output was not handed.
    assert!(claimed(dst.set(0, Scalar::F32(9.0))));
    assert!(claimed(src.set(0, Scalar::F32(9.0))));
    assert!(claimed(dst.release()));
    assert!(claimed(src.release()));
    let on_dst = Tensor::canonical(dst.clone(), &[2]).unwrap();
    assert!(claimed(move_tensor(&on_dst, HostCarrier::zeros(ElemKind::F32, 2).unwrap())));
    assert!(claimed(move_tensor(&t, HostCarrier::zeros(ElemKind::F32, 2).unwrap())));
    output.set(0, 1.0f32).unwrap();
    output.clone().set(1, 2.0f32).unwrap(); // a clone writes the same window
    assert_eq!(output.get::<f32>(1).unwrap(), 2.0);
    let moved = commit.commit(Ok(())).unwrap();
    assert_eq!(moved.values_f32().unwrap(), vec![1.0, 2.0]);
    assert_eq!(dst.version(), 0);
    // The claim has ended: a write through the output is now an ordinary public write.
    output.set(0, 5.0f32).unwrap();
    assert_eq!((dst.version(), moved.get::<f32>(0).unwrap()), (1, 5.0));
    dst.release().unwrap();
    assert!(matches!(output.set(0, 6.0f32), Err(ModelError::Released { .. })));
}

#[test]
fn a_bad_write_through_the_output_is_refused_and_writes_nothing() {
    let src = HostCarrier::from_f32(&[1.0, 2.0]);
    let dst = HostCarrier::from_f32(&[7.0, 7.0]);
    let t = Tensor::canonical(src, &[2]).unwrap();
    let (output, commit) = prepare_move(&t, &dst, None).unwrap().into_transfer();
    assert!(matches!(output.set(0, 1i32), Err(ModelError::ValueKind { .. })));
    assert!(matches!(output.set(2, 1.0f32), Err(ModelError::Layout(_))));
    assert_eq!(output.get::<f32>(0).unwrap(), 7.0);
    drop(commit);
    assert_eq!(Tensor::canonical(dst, &[2]).unwrap().values_f32().unwrap(), vec![7.0, 7.0]);
}

#[test]
fn a_failed_transfer_rolls_the_move_back_and_hands_its_error_back() {
    let src = HostCarrier::from_f32(&[1.0, 2.0, 3.0]);
    let file: Arc<dyn Carrier> = FileCarrier::temp(ElemKind::F32).unwrap();
    let t = Tensor::canonical(src.clone(), &[3]).unwrap();
    let (output, commit) = prepare_move(&t, &file, None).unwrap().into_transfer();
    assert_eq!(file.size(), 3); // grown to the span
    output.set(0, 1.0f32).unwrap();
    let why = ModelError::Hook { carrier: "Device".into(), message: "queue lost".into() };
    let failed = commit.commit(Err(why)).unwrap_err();
    assert!(matches!(&failed, ModelError::Hook { message, .. } if message == "queue lost"), "{failed:?}");
    // The source is live, unclaimed and unchanged; the grown file shrank back, unclaimed.
    assert!(!src.is_released() && t.values_f32().unwrap() == vec![1.0, 2.0, 3.0]);
    assert_eq!(file.size(), 0);
    let moved = move_tensor(&t, &file).unwrap();
    assert_eq!(moved.values_f32().unwrap(), vec![1.0, 2.0, 3.0]);
}

#[test]
fn a_commit_dropped_uncommitted_rolls_the_move_back() {
    let src = HostCarrier::from_f32(&[1.0, 2.0]);
    let file = FileCarrier::temp(ElemKind::F32).unwrap();
    let t = Tensor::canonical(src.clone(), &[2]).unwrap();
    let (output, commit) = prepare_move(&t, &file, None).unwrap().into_transfer();
    output.set(1, 2.0f32).unwrap();
    drop(commit);
    assert_eq!(file.size(), 0);
    assert!(!src.is_released());
    // The output outlives its move: it now writes publicly, and the empty file refuses it.
    assert!(matches!(output.set(0, 1.0f32), Err(ModelError::SlotOutOfRange { .. })));
    assert_eq!(move_tensor(&t, &file).unwrap().values_f32().unwrap(), vec![1.0, 2.0]);
}

/// 8 threads × 300 rounds: one fills the output and commits; the others write or release the
/// destination once each, at the same moment. Before the commit they are refused with
/// `Claimed`; after it a write is an ordinary write and a release releases. The version counts
/// exactly the public writes that succeeded (the fill never), no claim is left, and every slot
/// no racer wrote holds the source's value.
#[test]
fn racing_writes_and_releases_against_a_callers_transfer() {
    const THREADS: usize = 8;
    for round in 0..300 {
        let values: Vec<f32> = (0..THREADS).map(|k| (round * 10 + k) as f32).collect();
        let src = HostCarrier::from_f32(&values);
        let dst = HostCarrier::from_f32(&[0.0; THREADS]);
        let t = Tensor::canonical(src.clone(), &[THREADS]).unwrap();
        let (output, commit) = prepare_move(&t, &dst, None).unwrap().into_transfer();
        let start = Arc::new(Barrier::new(THREADS));
        let filler = {
            let (start, t) = (start.clone(), t.clone());
            std::thread::spawn(move || {
                start.wait();
                for k in 0..output.len() {
                    output.set(k, t.get::<f32>(k).unwrap()).unwrap();
                }
                commit.commit(Ok(())).unwrap();
            })
        };
        let racers: Vec<_> = (1..THREADS)
            .map(|k| {
                let (start, dst) = (start.clone(), dst.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let outcome = if k % 4 == 0 { dst.release() } else { dst.set(k, Scalar::F32(-1.0)) };
                    match outcome {
                        Ok(()) => Some(k),
                        Err(ModelError::Claimed { .. } | ModelError::Released { .. }) => None,
                        Err(other) => panic!("racer {k}: {other:?}"),
                    }
                })
            })
            .collect();
        filler.join().unwrap();
        let won: Vec<usize> = racers.into_iter().filter_map(|r| r.join().unwrap()).collect();
        assert!(src.is_released());
        assert!(!dst.state(HOOK).is_claimed());
        let writes = won.iter().filter(|&&k| k % 4 != 0).count() as u64;
        assert_eq!(dst.version(), writes, "round {round}");
        if !dst.is_released() {
            for (k, &v) in values.iter().enumerate() {
                let expected = if won.contains(&k) { -1.0 } else { v };
                assert_eq!(dst.get(k).unwrap(), Scalar::F32(expected), "round {round}, slot {k}");
            }
        }
    }
}

#[test]
fn a_whole_window_written_at_once_checks_everything_before_writing_anything() {
    let src = HostCarrier::from_f32(&[1.0, 2.0, 3.0]);
    let dst = HostCarrier::from_f32(&[7.0; 3]);
    let t = Tensor::canonical(src.clone(), &[3]).unwrap();
    let (output, commit) = prepare_move(&t, &dst, None).unwrap().into_transfer();
    let refused = output.write_from(&[1.0f32, 2.0]).unwrap_err();
    assert!(matches!(refused, ModelError::LengthMismatch { expected: 3, found: 2 }), "{refused:?}");
    let refused = output.write_from(&[Scalar::F32(1.0), Scalar::F32(2.0), Scalar::I32(3)]).unwrap_err();
    assert!(matches!(refused, ModelError::ValueKind { .. }), "{refused:?}");
    assert_eq!(output.get::<f32>(0).unwrap(), 7.0); // nothing was written
    output.write_from(&[10.0f32, 20.0, 30.0]).unwrap();
    assert_eq!(commit.commit(Ok(())).unwrap().values_f32().unwrap(), vec![10.0, 20.0, 30.0]);
    assert_eq!(dst.version(), 0);
    // After the commit: public writes, each counted.
    output.write_from(&[1.0f32, 1.0, 1.0]).unwrap();
    assert_eq!(dst.version(), 3);
}

#[test]
fn a_whole_window_of_a_strided_layout_lands_at_its_slots_and_leaves_the_holes() {
    use crate::layout::{Layout, Shape, Stride};
    // (2, 3) with strides (3, 1): ordinal k = i + 2j lands at slot 3i + j; slots 6.. are holes.
    let layout = Layout::new(Shape::flat(&[2, 3]).unwrap(), Stride::flat(&[3, 1]).unwrap()).unwrap();
    let src = HostCarrier::from_f32(&[0.0; 6]);
    let t = Tensor::new(src, 0, layout).unwrap();
    let dst = HostCarrier::from_f32(&[9.0; 8]);
    let (output, commit) = prepare_move(&t, &dst, None).unwrap().into_transfer();
    output.write_from(&[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
    commit.commit(Ok(())).unwrap();
    let slots: Vec<f32> = (0..8)
        .map(|i| dst.get(i).unwrap())
        .map(|v| match v {
            Scalar::F32(x) => x,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(slots, vec![0.0, 2.0, 4.0, 1.0, 3.0, 5.0, 9.0, 9.0]);
}
