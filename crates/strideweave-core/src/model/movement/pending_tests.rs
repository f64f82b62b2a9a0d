//! The pending move a binding drives (`prepare_move`, `prepare_window_move`): a route it
//! decides, host memory its carriers guard by their claims (`ClaimedHost`), and a pending move
//! dropped instead of run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{prepare_move, prepare_window_move, RouteKind};
use crate::model::carrier::{BulkStorage, Carrier, CarrierExt, ClaimedHost, ClassKey, HookToken};
use crate::model::error::{ModelError, Result};
use crate::model::movement::MoveRefusal;
use crate::model::state::CarrierState;
use crate::model::{FileCarrier, HostCarrier, Subtensor, Tensor};
use crate::storage::{ElemKind, HostBuffer, Scalar};

/// A binding's carrier in miniature: its own state, and a host buffer it guards by its
/// claims (every write through the framework is refused while a move claims it).
struct Guarded {
    state: Arc<CarrierState>,
    buffer: Arc<HostBuffer>,
    /// The release of a committing move fails (as a file that cannot be deleted does).
    refuse_release: bool,
    /// How many more times the mutability hook says yes (then no: a carrier made read-only
    /// between a move's validation and its claims).
    mutable_answers: AtomicUsize,
}

impl Guarded {
    fn new(values: &[f32]) -> Arc<Self> {
        let mut buffer = HostBuffer::new(values.len() * 4, true).unwrap();
        for (k, v) in values.iter().enumerate() {
            buffer.write_mut(k * 4, &v.to_ne_bytes()).unwrap();
        }
        Arc::new(Guarded {
            state: Arc::new(CarrierState::new("Guarded")),
            buffer: Arc::new(buffer),
            refuse_release: false,
            mutable_answers: AtomicUsize::new(usize::MAX),
        })
    }

    /// A second adapter of the same carrier (the same state and buffer), as a binding makes
    /// one per move.
    fn adapter(&self) -> Arc<Self> {
        Arc::new(Guarded {
            state: self.state.clone(),
            buffer: self.buffer.clone(),
            refuse_release: self.refuse_release,
            mutable_answers: AtomicUsize::new(self.mutable_answers.load(Ordering::Relaxed)),
        })
    }

    fn values(&self) -> Vec<f32> {
        (0..self.buffer.len() / 4)
            .map(|k| {
                let mut b = [0u8; 4];
                self.buffer.read(k * 4, &mut b).unwrap();
                f32::from_ne_bytes(b)
            })
            .collect()
    }
}

impl Carrier for Guarded {
    fn state(&self, _: &HookToken) -> &CarrierState {
        &self.state
    }

    fn elem_kind(&self) -> ElemKind {
        ElemKind::F32
    }

    fn size(&self) -> usize {
        if self.state.is_released() {
            0
        } else {
            self.buffer.len() / 4
        }
    }

    fn read_slot(&self, _: &HookToken, i: usize) -> Result<Scalar> {
        let mut b = [0u8; 4];
        self.buffer.read(i * 4, &mut b).ok_or(ModelError::SlotOutOfRange { index: i as i64, size: self.size() })?;
        Ok(Scalar::F32(f32::from_ne_bytes(b)))
    }

    fn write_slot(&self, _: &HookToken, i: usize, v: Scalar) -> Result<()> {
        let Scalar::F32(x) = v else { unreachable!("checked by the framework") };
        // SAFETY: the framework calls this hook only for a write it admitted: a public write of
        // an unclaimed carrier (no transfer runs) or the elementwise transfer of the move that
        // claims it (the only writer then); these tests write from one thread at a time.
        unsafe { self.buffer.write(i * 4, &x.to_ne_bytes()) }
            .ok_or(ModelError::SlotOutOfRange { index: i as i64, size: self.size() })
    }

    fn is_mutable_hook(&self) -> bool {
        self.mutable_answers.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
    }

    fn bulk_storage(&self, _: &HookToken) -> Option<BulkStorage> {
        // SAFETY: every write of this carrier goes through the framework, which refuses the
        // writes of a claimed carrier, so a move's transfer is its only writer; the `Arc`
        // keeps the buffer allocated.
        Some(BulkStorage::ClaimedHost(unsafe { ClaimedHost::new(self.buffer.clone()) }))
    }

    fn release_claimed_storage(&self, _: &HookToken) -> Result<()> {
        if self.refuse_release {
            return Err(ModelError::io("releasing the moved source", std::io::Error::other("refused")));
        }
        Ok(())
    }

    fn class_key(&self) -> ClassKey {
        ClassKey::Foreign(1)
    }
}

#[test]
fn a_decided_host_route_moves_claimed_host_memory_in_bulk() {
    let src = Guarded::new(&[1.0, 2.0, 3.0, 4.0]);
    let dst = Guarded::new(&[0.0; 4]);
    let t = Tensor::canonical(src.clone(), &[4]).unwrap();
    let pending = prepare_move(&t, &dst, Some(RouteKind::HostToHost)).unwrap();
    assert_eq!((pending.route(), pending.bytes()), (RouteKind::HostToHost, 16));
    // Claimed: public writes of either carrier are refused while the move is pending.
    assert!(matches!(dst.set(0, Scalar::F32(9.0)), Err(ModelError::Claimed { .. })));
    assert!(matches!(src.set(0, Scalar::F32(9.0)), Err(ModelError::Claimed { .. })));
    pending.finish().unwrap();
    assert_eq!(dst.values(), vec![1.0, 2.0, 3.0, 4.0]);
    assert!(src.is_released() && !dst.is_released());
    assert!(!src.state.is_claimed() && !dst.state.is_claimed());
    assert_eq!(dst.version(), 0); // a move's fill is not a write
}

#[test]
fn a_gapped_window_of_claimed_host_memory_moves_through_the_layout_copy() {
    use crate::layout::{Layout, Shape, Stride};
    let src = Guarded::new(&[0.0, 1.0, 0.0, 2.0, 0.0, 3.0, 0.0]);
    let layout = Layout::new(Shape::flat(&[3]).unwrap(), Stride::flat(&[2]).unwrap()).unwrap();
    let window = Subtensor::new(src.clone(), 1, layout).unwrap();
    let dst = Guarded::new(&[9.0; 5]);
    let pending = prepare_window_move(&window, &dst, Some(RouteKind::HostToHost)).unwrap();
    assert_eq!(pending.route(), RouteKind::HostToHost);
    let moved = pending.run().unwrap();
    assert_eq!(dst.values(), vec![1.0, 9.0, 2.0, 9.0, 3.0]); // the holes are untouched
    assert_eq!(moved.values_f32().unwrap(), vec![1.0, 2.0, 3.0]);
}

#[test]
fn claimed_host_memory_moves_to_and_from_a_file_in_one_span() {
    let src = Guarded::new(&[5.0, 6.0, 7.0]);
    let file: Arc<dyn Carrier> = FileCarrier::temp(ElemKind::F32).unwrap();
    let pending =
        prepare_move(&Tensor::canonical(src.clone(), &[3]).unwrap(), &file, Some(RouteKind::HostToFile)).unwrap();
    assert_eq!(pending.route(), RouteKind::HostToFile);
    let on_file = pending.run().unwrap();
    assert_eq!(on_file.values_f32().unwrap(), vec![5.0, 6.0, 7.0]);
    let back = Guarded::new(&[0.0; 3]);
    let pending = prepare_move(&on_file, &back, Some(RouteKind::FileToHost)).unwrap();
    assert_eq!(pending.route(), RouteKind::FileToHost);
    pending.finish().unwrap();
    assert_eq!(back.values(), vec![5.0, 6.0, 7.0]);
    assert!(file.is_released());
}

#[test]
fn a_decided_route_whose_storages_do_not_match_moves_elementwise() {
    // The binding said host to host; the destination is a Rust host carrier and the source
    // a file: no host span exists, and the move is still correct.
    let file: Arc<dyn Carrier> = FileCarrier::temp(ElemKind::F32).unwrap();
    let on_file =
        super::move_tensor(&Tensor::canonical(HostCarrier::from_f32(&[1.0, 2.0]), &[2]).unwrap(), &file).unwrap();
    let dst = Guarded::new(&[0.0, 0.0]);
    let pending = prepare_move(&on_file, &dst, Some(RouteKind::HostToHost)).unwrap();
    assert_eq!(pending.route(), RouteKind::Elementwise);
    pending.finish().unwrap();
    assert_eq!(dst.values(), vec![1.0, 2.0]);
}

#[test]
fn two_adapters_of_one_carrier_are_one_carrier() {
    let src = Guarded::new(&[1.0, 2.0]);
    let t = Tensor::canonical(src.clone(), &[2]).unwrap();
    let refused = prepare_move(&t, src.adapter(), Some(RouteKind::HostToHost)).unwrap_err();
    assert!(matches!(refused, ModelError::Move(MoveRefusal::SameCarrier)), "{refused:?}");
    assert!(!src.state.is_claimed() && !src.is_released());
}

#[test]
fn a_destination_refused_at_its_claim_gives_the_source_claim_back() {
    // The destination passes the table's mutability row, then turns read-only before the
    // claims: the source is claimed first, so the request's parties must give it back.
    let src = Guarded::new(&[1.0, 2.0]);
    let dst = Guarded::new(&[0.0, 0.0]);
    dst.mutable_answers.store(1, Ordering::Relaxed);
    let t = Tensor::canonical(src.clone(), &[2]).unwrap();
    let refused = prepare_move(&t, &dst, Some(RouteKind::HostToHost)).unwrap_err();
    assert!(matches!(refused, ModelError::NotMutable { .. }), "{refused:?}");
    assert!(!src.state.is_claimed() && !src.is_released());
    assert!(!dst.state.is_claimed() && dst.values() == vec![0.0, 0.0]);
    // Nothing is left behind: the source moves elsewhere at once.
    let other = Guarded::new(&[0.0, 0.0]);
    prepare_move(&t, &other, Some(RouteKind::HostToHost)).unwrap().finish().unwrap();
    assert_eq!(other.values(), vec![1.0, 2.0]);
    assert!(src.is_released() && !src.state.is_claimed());
}

#[test]
fn a_pending_move_dropped_unrun_changes_nothing() {
    let src = HostCarrier::from_f32(&[1.0, 2.0, 3.0]);
    let file = FileCarrier::temp(ElemKind::F32).unwrap();
    let t = Tensor::canonical(src.clone(), &[3]).unwrap();
    let pending = prepare_move(&t, &file, None).unwrap();
    assert_eq!(file.size(), 3); // grown to the span
    drop(pending);
    assert_eq!(file.size(), 0); // shrunk back
    assert!(!src.is_released() && !file.is_released());
    // Both claims were given back: the same move now runs.
    let moved = prepare_move(&t, &file, None).unwrap().run().unwrap();
    assert_eq!(moved.values_f32().unwrap(), vec![1.0, 2.0, 3.0]);
}

#[test]
fn a_release_that_fails_at_the_commit_fails_the_move_and_keeps_the_source() {
    let src = Arc::new(Guarded { refuse_release: true, ..Arc::try_unwrap(Guarded::new(&[1.0, 2.0])).ok().unwrap() });
    let file = FileCarrier::temp(ElemKind::F32).unwrap();
    let t = Tensor::canonical(src.clone(), &[2]).unwrap();
    let failed = prepare_move(&t, &file, Some(RouteKind::HostToFile)).unwrap().run().unwrap_err();
    assert!(matches!(failed, ModelError::Io { context: "releasing the moved source", .. }), "{failed:?}");
    // The source is live, unclaimed and unchanged; the grown file shrank back, unclaimed.
    assert!(!src.is_released() && !src.state.is_claimed());
    assert_eq!(src.values(), vec![1.0, 2.0]);
    assert_eq!(file.size(), 0);
    assert!(file.set(0, Scalar::F32(0.0)).is_err()); // out of range (empty), not claimed
    let moved = super::move_tensor(&Tensor::canonical(HostCarrier::from_f32(&[3.0]), &[1]).unwrap(), &file).unwrap();
    assert_eq!(moved.values_f32().unwrap(), vec![3.0]); // the file is free for another move
}

#[test]
fn a_bulk_transfer_counts_its_bytes_into_the_progress_it_is_handed() {
    let src = Guarded::new(&[1.0; 1000]);
    let file = FileCarrier::temp(ElemKind::F32).unwrap();
    let progress = Arc::new(crate::transfer::Progress::new(0));
    let mut pending =
        prepare_move(&Tensor::canonical(src, &[1000]).unwrap(), &file, Some(RouteKind::HostToFile)).unwrap();
    pending.count_into(progress.clone());
    assert_eq!(progress.done(), 0);
    pending.finish().unwrap();
    assert_eq!((progress.done(), progress.total()), (4000, 4000));
}
