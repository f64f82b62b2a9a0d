//! Unit tests of the object model: state transitions, validation order, routes, rollback,
//! DLPack export, and property tests of moves over random layouts.

use super::carrier::{HookCall, HOOK};
use std::sync::Arc;

use proptest::prelude::*;

use super::movement::{MoveRefusal, Party};
use super::test_support::VecCarrier;
use super::*;
use crate::layout::{Layout, Shape, Stride};
use crate::storage::{ElemKind, Scalar};

fn layout(extents: &[i64], strides: &[i64]) -> Layout {
    Layout::new(Shape::flat(extents).unwrap(), Stride::flat(strides).unwrap()).unwrap()
}

fn host(values: &[f32]) -> Arc<dyn Carrier> {
    HostCarrier::from_f32(values)
}

fn vec_carrier(c: VecCarrier) -> (Arc<VecCarrier>, Arc<dyn Carrier>) {
    let c = Arc::new(c);
    (c.clone(), c)
}

/// Nothing observable changed on `c`: not released, unclaimed, at `version`, holding `values`.
fn assert_untouched(c: &Arc<dyn Carrier>, version: u64, values: &[f32]) {
    assert!(!c.is_released());
    assert!(!c.state(HOOK).is_claimed());
    assert_eq!(c.version(), version);
    let got: Vec<Scalar> = (0..c.size()).map(|i| c.get(i).unwrap()).collect();
    assert_eq!(got, values.iter().map(|&v| Scalar::F32(v)).collect::<Vec<_>>());
}

#[test]
fn claims_refuse_release_write_and_a_second_claim_until_dropped() {
    let c = host(&[1.0, 2.0]);
    let guard = c.state(HOOK).try_claim(&c, ClaimId::fresh(), Role::Source).unwrap();
    assert!(matches!(c.release(), Err(ModelError::Claimed { action: "release", .. })));
    assert!(matches!(c.set(0, Scalar::F32(9.0)), Err(ModelError::Claimed { action: "write to", .. })));
    assert!(matches!(
        c.state(HOOK).try_claim(&c, ClaimId::fresh(), Role::Source),
        Err(ModelError::Claimed { action: "move", .. })
    ));
    assert_eq!(c.get(1).unwrap(), Scalar::F32(2.0), "reads continue under a claim");
    drop(guard);
    assert!(!c.state(HOOK).is_claimed());
    c.set(0, Scalar::F32(9.0)).unwrap();
    assert_eq!(c.version(), 1);
    c.release().unwrap();
    c.release().unwrap();
    assert!(matches!(c.get(0), Err(ModelError::Released { .. })));
    assert_eq!(c.size(), 0);
}

#[test]
fn commit_release_ends_the_claim_and_releases_in_one_step() {
    let c = host(&[1.0]);
    let guard = c.state(HOOK).try_claim(&c, ClaimId::fresh(), Role::Source).unwrap();
    guard.commit_release().unwrap();
    assert!(c.is_released());
    assert!(!c.state(HOOK).is_claimed());
}

#[test]
fn public_write_checks_in_order_and_counts_only_successes() {
    let c = host(&[0.0; 3]);
    assert!(matches!(c.set(3, Scalar::F32(1.0)), Err(ModelError::SlotOutOfRange { index: 3, size: 3 })));
    assert!(matches!(c.set(usize::MAX, Scalar::F32(1.0)), Err(ModelError::SlotOutOfRange { .. })));
    assert!(matches!(c.set(0, Scalar::I32(1)), Err(ModelError::ValueKind { .. })));
    assert_eq!(c.version(), 0);
    let frozen: Arc<dyn Carrier> = HostCarrier::with_mutability(ElemKind::F32, 2, false).unwrap();
    // Range is checked before mutability.
    assert!(matches!(frozen.set(5, Scalar::F32(1.0)), Err(ModelError::SlotOutOfRange { .. })));
    assert!(matches!(frozen.set(0, Scalar::F32(1.0)), Err(ModelError::NotMutable { .. })));
    c.release().unwrap();
    // Released is checked first of all.
    assert!(matches!(c.set(7, Scalar::I32(1)), Err(ModelError::Released { .. })));
}

#[test]
fn ownership_guards_writes_release_and_moves_but_lets_the_owner_write() {
    let c = host(&[1.0, 2.0]);
    let owner = OwnerToken::fresh();
    c.state(HOOK).adopt(owner).unwrap();
    assert!(matches!(c.set(0, Scalar::F32(5.0)), Err(ModelError::NotMutable { .. })));
    assert!(matches!(c.release(), Err(ModelError::Owned { .. })));
    let t = Tensor::canonical(c.clone(), &[2]).unwrap();
    let dst = host(&[0.0, 0.0]);
    assert!(matches!(move_tensor(&t, &dst), Err(ModelError::Owned { .. })));
    assert!(!c.is_mutable());
    c.set_as_owner(owner, 0, Scalar::F32(5.0)).unwrap();
    assert_eq!(c.get(0).unwrap(), Scalar::F32(5.0));
    assert_eq!(c.version(), 1);
    assert!(c.state(HOOK).disown(owner));
    c.release().unwrap();
}

/// Each row of docs/spec/interop-movement.md's validation table, with every earlier row satisfied;
/// a refused move changes nothing on either side.
#[test]
fn move_validation_follows_the_table_order_and_changes_nothing() {
    let src = host(&[1.0, 2.0, 3.0]);
    let t = Tensor::canonical(src.clone(), &[3]).unwrap();
    let check = |dst: &Arc<dyn Carrier>, expect: &dyn Fn(&ModelError) -> bool| {
        let (dv, dsize) = (dst.version(), dst.size());
        let err = move_async(&t, dst).unwrap_err();
        assert!(expect(&err), "unexpected error {err:?}");
        assert_untouched(&src, 0, &[1.0, 2.0, 3.0]);
        assert!(!dst.state(HOOK).is_claimed());
        assert_eq!((dst.version(), dst.size()), (dv, dsize));
    };
    check(&src, &|e| matches!(e, ModelError::Move(MoveRefusal::SameCarrier)));
    let released = host(&[0.0; 3]);
    released.release().unwrap();
    check(&released, &|e| matches!(e, ModelError::Move(MoveRefusal::Released { party: Party::Destination, .. })));
    let frozen: Arc<dyn Carrier> = HostCarrier::with_mutability(ElemKind::F32, 3, false).unwrap();
    check(&frozen, &|e| matches!(e, ModelError::Move(MoveRefusal::DestinationNotMutable { .. })));
    let ints: Arc<dyn Carrier> = HostCarrier::zeros(ElemKind::I32, 3).unwrap();
    check(
        &ints,
        &|e| matches!(e, ModelError::Move(MoveRefusal::DTypeMismatch { expected, found }) if expected == "Float32" && found == "Int32"),
    );
    let small = host(&[0.0; 2]);
    check(&small, &|e| matches!(e, ModelError::Move(MoveRefusal::TooSmall { size: 2, needed: 3, .. })));
    // Earlier rows win: an immutable destination of another dtype reports immutability.
    let frozen_ints: Arc<dyn Carrier> = HostCarrier::with_mutability(ElemKind::I32, 1, false).unwrap();
    check(&frozen_ints, &|e| matches!(e, ModelError::Move(MoveRefusal::DestinationNotMutable { .. })));
    // A released source is reported before anything about the destination.
    let gone = host(&[1.0]);
    let tg = Tensor::canonical(gone.clone(), &[1]).unwrap();
    gone.release().unwrap();
    assert!(matches!(
        move_tensor(&tg, &gone),
        Err(ModelError::Move(MoveRefusal::Released { party: Party::Source, .. }))
    ));
}

#[test]
fn claim_rows_sit_in_the_table_order() {
    // A destination a pending move holds reports its claim before a dtype mismatch or a
    // lack of room (`Check::DestinationUnclaimed` precedes `SameDType` and `Room`).
    let t = Tensor::canonical(host(&[1.0, 2.0, 3.0]), &[3]).unwrap();
    let held: Arc<dyn Carrier> = HostCarrier::zeros(ElemKind::I32, 1).unwrap();
    let claim = held.state(HOOK).try_claim(&held, ClaimId::fresh(), Role::Destination).unwrap();
    assert!(matches!(move_tensor(&t, &held), Err(ModelError::Claimed { action: "move into", .. })));
    drop(claim);
    assert!(matches!(move_tensor(&t, &held), Err(ModelError::Move(MoveRefusal::DTypeMismatch { .. }))));
    // A claimed source reports its claim before the same carrier in both roles.
    let src = t.single("move").unwrap().carrier().clone();
    let claim = src.state(HOOK).try_claim(&src, ClaimId::fresh(), Role::Source).unwrap();
    assert!(matches!(move_tensor(&t, &src), Err(ModelError::Claimed { action: "move", .. })));
    drop(claim);
    assert!(matches!(move_tensor(&t, &src), Err(ModelError::Move(MoveRefusal::SameCarrier))));
}

#[test]
fn a_multi_subtensor_tensor_is_refused_first() {
    let a = host(&[1.0]);
    let b = host(&[2.0]);
    let l = layout(&[1], &[1]);
    let t = Tensor::from_subtensors(
        ElemKind::F32,
        vec![Subtensor::new(a.clone(), 0, l.clone()).unwrap(), Subtensor::new(b, 0, l).unwrap()],
    )
    .unwrap();
    a.release().unwrap();
    let ints: Arc<dyn Carrier> = HostCarrier::zeros(ElemKind::I32, 0).unwrap();
    assert!(matches!(move_tensor(&t, &ints), Err(ModelError::MultiSubtensor { count: 2, .. })));
    assert!(matches!(t.to_dlpack(), Err(ModelError::MultiSubtensor { .. })));
    assert!(matches!(t.get::<Scalar>(0), Err(ModelError::MultiSubtensor { .. })));
    assert!(matches!(Tensor::from_subtensors(ElemKind::F32, vec![]), Err(ModelError::NoSubtensors)));
    let mixed = vec![
        Subtensor::new(host(&[1.0, 2.0]), 0, layout(&[2], &[1])).unwrap(),
        Subtensor::new(host(&[1.0]), 0, layout(&[1], &[1])).unwrap(),
    ];
    assert!(matches!(Tensor::from_subtensors(ElemKind::F32, mixed), Err(ModelError::SubtensorShapesDiffer { .. })));
}

#[test]
fn routes_follow_the_exact_pair() {
    let host_key = ClassKey::of::<HostCarrier>();
    let file_key = ClassKey::of::<FileCarrier>();
    let other = ClassKey::of::<VecCarrier>();
    assert_eq!(route_kind(host_key, file_key), RouteKind::HostToFile);
    assert_eq!(route_kind(file_key, host_key), RouteKind::FileToHost);
    assert_eq!(route_kind(host_key, host_key), RouteKind::HostToHost);
    assert_eq!(route_kind(file_key, file_key), RouteKind::Elementwise);
    assert_eq!(route_kind(other, host_key), RouteKind::Elementwise);
    assert_eq!(route_kind(ClassKey::Foreign(1), file_key), RouteKind::Elementwise);

    let t = Tensor::canonical(host(&[1.0, 2.0]), &[2]).unwrap();
    let file: Arc<dyn Carrier> = FileCarrier::temp(ElemKind::F32).unwrap();
    let h = move_async(&t, &file).unwrap();
    assert_eq!(h.route(), RouteKind::HostToFile);
    let on_file = h.wait().unwrap();
    let back = host(&[0.0; 2]);
    let h = move_async(&on_file, &back).unwrap();
    assert_eq!(h.route(), RouteKind::FileToHost);
    assert_eq!(h.wait().unwrap().values_f32().unwrap(), vec![1.0, 2.0]);
}

#[test]
fn bulk_moves_carry_the_window_from_its_offset_and_keep_broadcast_layouts() {
    // A broadcast view: 2 x 3 coordinates over 2 slots (stride 0), at offset 1.
    let src = host(&[9.0, 1.0, 2.0, 9.0]);
    let l = layout(&[2, 3], &[1, 0]);
    let t = Tensor::new(src.clone(), 1, l.clone()).unwrap();
    let file: Arc<dyn Carrier> = FileCarrier::temp(ElemKind::F32).unwrap();
    let on_file = move_tensor(&t, &file).unwrap();
    assert_eq!(file.size(), 2, "only the cosize span is allocated");
    assert_eq!(on_file.layout(), &l);
    assert_eq!(on_file.offset(), 0);
    assert_eq!(on_file.values_f32().unwrap(), vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
    assert!(src.is_released());
    assert_eq!(file.version(), 0, "a move is not a mutation");
}

#[test]
fn host_to_host_and_elementwise_moves_agree_on_a_gapped_layout() {
    let values: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let l = layout(&[2, 2], &[3, 1]); // slots 2,5,3,6 from offset 2
    for dst in [host(&[0.0; 7]), vec_carrier(VecCarrier::new(&[0.0; 7])).1] {
        let t = Tensor::new(host(&values), 2, l.clone()).unwrap();
        let moved = move_tensor(&t, &dst).unwrap();
        assert_eq!(moved.values_f32().unwrap(), vec![2.0, 5.0, 3.0, 6.0]);
    }
    let (_, src) = vec_carrier(VecCarrier::new(&values));
    let t = Tensor::new(src.clone(), 2, l).unwrap();
    let file: Arc<dyn Carrier> = FileCarrier::temp(ElemKind::F32).unwrap();
    let h = move_async(&t, &file).unwrap();
    assert_eq!(h.route(), RouteKind::Elementwise);
    assert_eq!(h.wait().unwrap().values_f32().unwrap(), vec![2.0, 5.0, 3.0, 6.0]);
    assert!(src.is_released());
}

#[test]
fn a_failed_transfer_rolls_back_growth_and_claims_and_keeps_the_source() {
    let src = host(&[1.0, 2.0, 3.0]);
    let t = Tensor::canonical(src.clone(), &[3]).unwrap();
    let (vc, dst) = vec_carrier(VecCarrier { allocatable: true, fail_write_at: Some(2), ..Default::default() });
    let err = move_async(&t, &dst).unwrap().wait().unwrap_err();
    assert!(matches!(err, ModelError::Hook { .. }));
    assert_eq!(vc.values(), Vec::<f32>::new(), "the grown destination shrank back to empty");
    assert!(!dst.state(HOOK).is_claimed());
    assert_untouched(&src, 0, &[1.0, 2.0, 3.0]);
    // Both carriers are usable again: the same move into a good destination succeeds.
    let good = host(&[0.0; 3]);
    assert_eq!(move_tensor(&t, &good).unwrap().values_f32().unwrap(), vec![1.0, 2.0, 3.0]);
}

#[test]
fn a_panicking_transfer_becomes_the_outcome_and_rolls_back() {
    let (_, src) = vec_carrier(VecCarrier { panic_on_read: true, ..VecCarrier::new(&[1.0]) });
    let t = Tensor::canonical(src.clone(), &[1]).unwrap();
    let dst = host(&[0.0]);
    for outcome in [move_async(&t, &dst).unwrap().wait(), move_tensor(&t, &dst)] {
        assert!(matches!(outcome, Err(ModelError::TransferPanicked { .. })));
        assert!(!src.is_released() && !src.state(HOOK).is_claimed());
        assert!(!dst.state(HOOK).is_claimed());
    }
}

#[test]
fn dlpack_export_describes_leaf_modes_offset_and_mutability() {
    let c = HostCarrier::from_f32(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let t = Tensor::new(c.clone(), 1, layout(&[2, 3], &[1, 2])).unwrap();
    let m = t.to_dlpack().unwrap();
    let dl = m.dl_tensor();
    assert_eq!(dl.ndim, 2);
    // SAFETY: the export owns shape and strides arrays of ndim entries.
    let (shape, strides) =
        unsafe { (std::slice::from_raw_parts(dl.shape, 2), std::slice::from_raw_parts(dl.strides, 2)) };
    assert_eq!((shape, strides), (&[2i64, 3][..], &[1i64, 2][..]));
    assert_eq!(dl.byte_offset, 4);
    assert_eq!(m.managed().flags, 0);
    // The managed tensor keeps the bytes alive after the carrier is released.
    c.release().unwrap();
    // SAFETY: data + byte_offset addresses the 6 slots of the window, kept alive by `m`.
    let v = unsafe { std::slice::from_raw_parts((dl.data as *const u8).add(4).cast::<f32>(), 6) };
    assert_eq!(v, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    drop(m);

    let frozen = HostCarrier::with_mutability(ElemKind::I32, 2, false).unwrap();
    let t = Tensor::canonical(frozen, &[2]).unwrap();
    assert_eq!(t.to_dlpack().unwrap().managed().flags, crate::dlpack::FLAG_READ_ONLY);
    assert_eq!(t.to_dlpack_legacy().unwrap().dl_tensor().ndim, 1);
}

#[test]
fn dlpack_export_refuses_other_storage_dtypes_and_released_carriers() {
    let file = FileCarrier::temp(ElemKind::F32).unwrap();
    file.allocate(&file.hook(), 2).unwrap();
    let t = Tensor::canonical(file, &[2]).unwrap();
    assert!(matches!(t.to_dlpack(), Err(ModelError::NotExportable { .. })));
    let t = Tensor::canonical(HostCarrier::zeros(ElemKind::F64, 2).unwrap(), &[2]).unwrap();
    assert!(matches!(t.to_dlpack(), Err(ModelError::NotExportable { .. })));
    let c = HostCarrier::from_f32(&[1.0]);
    let t = Tensor::canonical(c.clone(), &[1]).unwrap();
    c.release().unwrap();
    assert!(matches!(t.to_dlpack(), Err(ModelError::Released { .. })));
}

#[test]
fn tensors_check_their_window_and_keys() {
    let c = host(&[0.0; 4]);
    assert!(matches!(Tensor::new(c.clone(), 1, layout(&[4], &[1])), Err(ModelError::WindowOutOfRange { .. })));
    let t = Tensor::new(c.clone(), 0, layout(&[2, 2], &[1, 2])).unwrap();
    assert!(matches!(t.get::<Scalar>(4), Err(ModelError::Layout(_))));
    let coord = crate::layout::Coord::Seq(vec![crate::layout::Coord::Int(1), crate::layout::Coord::Int(1)]);
    t.set_coord(&coord, Scalar::F32(7.0)).unwrap();
    assert_eq!(t.get::<Scalar>(3).unwrap(), Scalar::F32(7.0));
    assert_eq!(t.get_coord::<Scalar>(&coord).unwrap(), Scalar::F32(7.0));
    assert_eq!(c.version(), 1);
}

fn layout_and_offset() -> impl Strategy<Value = (Layout, usize)> {
    prop::collection::vec((1i64..=4, 0i64..=5), 1..=3).prop_flat_map(|modes| {
        let (e, s): (Vec<i64>, Vec<i64>) = modes.into_iter().unzip();
        (Just(layout(&e, &s)), 0usize..=3)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Host → file → host (bulk spans) and host → foreign (elementwise) give the same
    /// logical values as the source, for any layout and offset.
    #[test]
    fn every_route_preserves_logical_values((l, offset) in layout_and_offset()) {
        let n = offset + l.cosize() as usize;
        let values: Vec<f32> = (0..n).map(|v| v as f32 * 1.5 - 3.0).collect();
        let expect: Vec<f32> = (0..l.size()).map(|k| values[offset + l.index_of_int(k) as usize]).collect();

        let t = Tensor::new(host(&values), offset, l.clone()).unwrap();
        let file: Arc<dyn Carrier> = FileCarrier::temp(ElemKind::F32).unwrap();
        let on_file = move_async(&t, &file).unwrap().wait().unwrap();
        prop_assert_eq!(on_file.values_f32().unwrap(), expect.clone());
        let back = host(&vec![0.0; l.cosize() as usize]);
        let t2 = move_tensor(&on_file, &back).unwrap();
        prop_assert_eq!(t2.values_f32().unwrap(), expect.clone());

        let t3 = Tensor::new(host(&values), offset, l.clone()).unwrap();
        let (_, foreign) = vec_carrier(VecCarrier { allocatable: true, ..Default::default() });
        prop_assert_eq!(move_tensor(&t3, &foreign).unwrap().values_f32().unwrap(), expect);
    }
}

#[cfg(feature = "block-devices")]
/// A regular file posing as a 64 KiB block device with 512-byte blocks (buffered I/O).
fn test_device() -> Arc<crate::storage::block::BlockDevice> {
    use crate::storage::block::{BlockDevice, Geometry};
    let path = std::env::temp_dir().join(format!("sw-model-dev-{}-{}", std::process::id(), ClaimId::fresh().0));
    std::fs::write(&path, vec![0xABu8; 65536]).unwrap();
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    Arc::new(BlockDevice::from_file(file, Geometry::new(65536, 512, 512).unwrap(), false))
}

#[test]
#[cfg(feature = "block-devices")]
fn host_and_block_carriers_move_in_bulk_and_release_frees_the_extent() {
    let dev = test_device();
    let values: Vec<f32> = (0..10).map(|v| v as f32).collect();
    let l = layout(&[2, 3], &[1, 3]); // cosize 8
    let t = Tensor::new(host(&values), 2, l.clone()).unwrap();
    let expect: Vec<f32> = (0..6).map(|k| values[2 + l.index_of_int(k) as usize]).collect();
    let block: Arc<dyn Carrier> = BlockCarrier::empty(&dev);
    let h = move_async(&t, &block).unwrap();
    assert_eq!(h.route(), RouteKind::HostToBlock);
    let on_block = h.wait().unwrap();
    assert_eq!(block.size(), 8);
    assert_eq!(on_block.values_f32().unwrap(), expect);
    assert_eq!(dev.live_extents().len(), 1);
    let back = host(&[0.0; 8]);
    let h = move_async(&on_block, &back).unwrap();
    assert_eq!(h.route(), RouteKind::BlockToHost);
    assert_eq!(h.wait().unwrap().values_f32().unwrap(), expect);
    assert!(block.is_released());
    assert!(dev.live_extents().is_empty(), "releasing the block carrier freed its extent");
}

#[test]
fn other_pairs_with_a_block_carrier_are_refused_before_any_effect() {
    let dev = test_device();
    let file = FileCarrier::temp(ElemKind::F32).unwrap();
    file.allocate(&file.hook(), 2).unwrap();
    let file: Arc<dyn Carrier> = file;
    let t = Tensor::canonical(file.clone(), &[2]).unwrap();
    let block: Arc<dyn Carrier> = BlockCarrier::empty(&dev);
    assert!(matches!(move_tensor(&t, &block), Err(ModelError::NoRoute { .. })));
    assert_eq!(block.size(), 0);
    assert!(dev.live_extents().is_empty());
    assert_untouched(&file, 0, &[0.0, 0.0]);
    // The validation table still comes first: a too-small fixed destination is TooSmall.
    let tb = Tensor::canonical(BlockCarrier::zeros(&dev, 4).unwrap(), &[4]).unwrap();
    let (_, tiny) = vec_carrier(VecCarrier::new(&[0.0]));
    assert!(matches!(move_tensor(&tb, &tiny), Err(ModelError::Move(MoveRefusal::TooSmall { .. }))));
    let (_, roomy) = vec_carrier(VecCarrier::new(&[0.0; 4]));
    assert!(matches!(move_tensor(&tb, &roomy), Err(ModelError::NoRoute { .. })));
    assert!(!tb.carrier().is_released() && !tb.carrier().state(HOOK).is_claimed());
}

#[test]
fn a_device_failure_mid_move_rolls_back() {
    let dev = test_device();
    let block: Arc<dyn Carrier> = BlockCarrier::zeros(&dev, 3).unwrap();
    let src = host(&[1.0, 2.0, 3.0]);
    let t = Tensor::canonical(src.clone(), &[3]).unwrap();
    dev.close();
    let err = move_async(&t, &block).unwrap().wait().unwrap_err();
    assert!(matches!(err, ModelError::Device { .. }), "{err:?}");
    assert_untouched(&src, 0, &[1.0, 2.0, 3.0]);
    assert!(!block.is_released() && !block.state(HOOK).is_claimed());
    // Growth that fails (the device is closed) leaves the empty destination unclaimed.
    let empty: Arc<dyn Carrier> = BlockCarrier::empty(&dev);
    assert!(matches!(move_tensor(&t, &empty), Err(ModelError::Device { .. })));
    assert!(!empty.state(HOOK).is_claimed() && empty.size() == 0);
    assert_untouched(&src, 0, &[1.0, 2.0, 3.0]);
}

#[derive(Clone, Copy, Debug)]
enum StateOp {
    Write,
    Release,
    Claim,
    DropClaim,
    CommitRelease,
    Adopt,
    Disown,
}

fn state_op() -> impl Strategy<Value = StateOp> {
    prop_oneof![
        Just(StateOp::Write),
        Just(StateOp::Release),
        Just(StateOp::Claim),
        Just(StateOp::DropClaim),
        Just(StateOp::CommitRelease),
        Just(StateOp::Adopt),
        Just(StateOp::Disown),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any sequence of transitions agrees with a plain model of the state machine: a write
    /// lands only on a live, unowned, unclaimed carrier; release is refused while owned or
    /// claimed and is idempotent; a claim needs a live, unowned, unclaimed carrier; a
    /// dropped claim leaves nothing behind; a committed one releases.
    #[test]
    fn carrier_state_follows_its_model(ops in prop::collection::vec(state_op(), 1..40)) {
        let c = host(&[0.0]);
        let owner = OwnerToken::fresh();
        let (mut version, mut released, mut owned) = (0u64, false, false);
        let mut claim: Option<ClaimGuard> = None;
        for op in ops {
            match op {
                StateOp::Write => {
                    let ok = c.set(0, Scalar::F32(version as f32 + 1.0)).is_ok();
                    prop_assert_eq!(ok, !released && !owned && claim.is_none());
                    if ok { version += 1; }
                }
                StateOp::Release => {
                    let ok = c.release().is_ok();
                    prop_assert_eq!(ok, !owned && claim.is_none());
                    released |= ok;
                }
                StateOp::Claim => {
                    let got = c.state(HOOK).try_claim(&c, ClaimId::fresh(), Role::Source);
                    prop_assert_eq!(got.is_ok(), !released && !owned && claim.is_none());
                    if let Ok(g) = got { claim = Some(g); }
                }
                StateOp::DropClaim => claim = None,
                StateOp::CommitRelease => {
                    if let Some(g) = claim.take() {
                        g.commit_release().unwrap();
                        released = true;
                    }
                }
                StateOp::Adopt => {
                    let ok = c.state(HOOK).adopt(owner).is_ok();
                    prop_assert_eq!(ok, !released && !owned && claim.is_none());
                    owned |= ok;
                }
                StateOp::Disown => {
                    prop_assert_eq!(c.state(HOOK).disown(owner), owned);
                    owned = false;
                }
            }
            prop_assert_eq!(c.version(), version);
            prop_assert_eq!(c.is_released(), released);
            prop_assert_eq!(c.is_owned(), owned);
            prop_assert_eq!(c.state(HOOK).is_claimed(), claim.is_some());
        }
    }
}

/// A carrier released by another thread between `get`'s liveness check and its range check
/// (here: by its own `size`, so the interleaving is certain) reads as `Released`, not as an
/// index out of the zero slots it has left.
#[test]
fn a_read_racing_a_release_reports_released_not_out_of_range() {
    struct ReleasedWhileSized(CarrierState);
    impl Carrier for ReleasedWhileSized {
        fn state(&self, _: &super::carrier::HookToken) -> &CarrierState {
            &self.0
        }
        fn elem_kind(&self) -> ElemKind {
            ElemKind::F32
        }
        fn size(&self) -> usize {
            let _ = self.0.mark_released();
            self.0.live_size(4)
        }
        fn read_slot(&self, _: &super::carrier::HookToken, _: usize) -> super::error::Result<Scalar> {
            unreachable!("a released carrier is not read")
        }
        fn write_slot(&self, _: &super::carrier::HookToken, _: usize, _: Scalar) -> super::error::Result<()> {
            unreachable!("the test only reads")
        }
        fn is_mutable_hook(&self) -> bool {
            true
        }
    }
    let c = ReleasedWhileSized(CarrierState::new("ReleasedWhileSized"));
    assert!(matches!(c.get(0), Err(ModelError::Released { .. })));
}
