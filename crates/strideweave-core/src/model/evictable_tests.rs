//! The Rust `Evictable`: ownership of its tiers, evict/promote, failure atomicity.

use super::*;
use crate::storage::{ElemKind, Scalar};
use std::sync::Arc;

#[test]
fn a_failed_evict_leaves_values_tiers_and_version_as_they_were() {
    let host = HostCarrier::from_f32(&[1.0, 2.0, 3.0]);
    let small = HostCarrier::zeros(ElemKind::F32, 2).unwrap(); // too small, cannot grow
    let e = Evictable::new(&host, &small).unwrap();
    assert!(matches!(e.evict(), Err(ModelError::Move(crate::model::movement::MoveRefusal::TooSmall { .. }))));
    assert_eq!(e.resident(), Tier::Primary);
    assert_eq!((e.version(), small.size()), (0, 2));
    let t = Tensor::canonical(&e, &[3]).unwrap();
    assert_eq!(t.values_f32().unwrap(), vec![1.0, 2.0, 3.0]);
}

#[test]
fn evict_and_promote_move_the_values_and_are_not_writes() {
    let host = HostCarrier::from_f32(&[1.0, 2.0]);
    let file = FileCarrier::temp(ElemKind::F32).unwrap();
    let e = Evictable::new(&host, &file).unwrap();
    e.evict().unwrap();
    e.evict().unwrap(); // already there: nothing to do
    assert_eq!((e.resident(), file.size(), e.version()), (Tier::Secondary, 2, 0));
    e.set(0, Scalar::F32(5.0)).unwrap();
    assert_eq!(file.read_slot(super::carrier::HOOK, 0).unwrap(), Scalar::F32(5.0));
    e.promote().unwrap();
    assert_eq!((e.resident(), file.size(), e.version()), (Tier::Primary, 0, 1));
    assert_eq!(e.get(0).unwrap(), Scalar::F32(5.0));
}

#[test]
fn the_composite_owns_its_tiers_and_a_failed_construction_adopts_nothing() {
    let (a, b, c) = (HostCarrier::from_f32(&[1.0]), HostCarrier::from_f32(&[2.0]), HostCarrier::from_f32(&[3.0]));
    let e = Evictable::new(&a, &b).unwrap();
    assert!(matches!(a.set(0, Scalar::F32(0.0)), Err(ModelError::NotMutable { .. })));
    assert!(matches!(b.release(), Err(ModelError::Owned { .. })));
    let t = Tensor::canonical(&a, &[1]).unwrap();
    assert!(move_tensor(&t, HostCarrier::zeros(ElemKind::F32, 1).unwrap()).is_err());
    assert!(Evictable::new(&c, &b).is_err()); // b is owned already
    assert!(!c.is_owned(), "the first tier is given back when the second refuses");
    e.release().unwrap();
    assert!(a.is_released() && b.is_released());
}

/// A secondary tier that counts the slots written into it (a foreign carrier: its transfers
/// go slot by slot, through its hooks).
struct Counting {
    inner: super::test_support::VecCarrier,
    writes: std::sync::atomic::AtomicUsize,
}

impl Carrier for Counting {
    fn state(&self, token: &HookToken) -> &CarrierState {
        self.inner.state(token)
    }

    fn elem_kind(&self) -> ElemKind {
        ElemKind::F32
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn read_slot(&self, token: &HookToken, i: usize) -> Result<Scalar, ModelError> {
        self.inner.read_slot(token, i)
    }

    fn write_slot(&self, token: &HookToken, i: usize, v: Scalar) -> Result<(), ModelError> {
        self.writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.write_slot(token, i, v)
    }

    fn is_mutable_hook(&self) -> bool {
        true
    }

    fn can_allocate(&self) -> bool {
        true
    }

    fn allocate(&self, token: &HookToken, slots: usize) -> Result<(), ModelError> {
        self.inner.allocate(token, slots)
    }
}

#[test]
fn a_clean_tier_is_written_only_when_its_values_changed() {
    use std::sync::atomic::Ordering;
    let host = HostCarrier::from_f32(&[1.0, 2.0, 3.0]);
    let secondary = Arc::new(Counting {
        inner: super::test_support::VecCarrier { allocatable: true, ..super::test_support::VecCarrier::new(&[]) },
        writes: Default::default(),
    });
    let e = Evictable::retaining_clean(&host, &secondary).unwrap();
    e.evict().unwrap();
    assert_eq!(secondary.writes.load(Ordering::Relaxed), 3);
    e.promote().unwrap();
    assert_eq!((secondary.size(), e.is_clean()), (3, true)); // kept as the clean copy
    e.evict().unwrap();
    assert_eq!(secondary.writes.load(Ordering::Relaxed), 3, "a clean evict writes nothing");
    e.promote().unwrap();
    e.set(2, Scalar::F32(30.0)).unwrap();
    assert!(!e.is_clean());
    e.evict().unwrap();
    assert_eq!(secondary.writes.load(Ordering::Relaxed), 6, "a dirty evict writes the values back");
    e.promote().unwrap();
    assert_eq!(Tensor::canonical(&e, &[3]).unwrap().values_f32().unwrap(), vec![1.0, 2.0, 30.0]);
}

#[test]
fn a_large_tier_moves_between_host_memory_and_a_file_in_bulk() {
    // 4 Mi slots: one span each way (slot by slot, 4 Mi positioned reads would take seconds).
    let n = 4 << 20;
    let values: Vec<f32> = (0..n).map(|i| (i % 1021) as f32).collect();
    let host = HostCarrier::from_f32(&values);
    let file = FileCarrier::temp(ElemKind::F32).unwrap();
    let e = Evictable::new(&host, &file).unwrap();
    e.evict().unwrap();
    assert_eq!(file.size(), n);
    e.set(n as i64 - 1, Scalar::F32(-1.0)).unwrap(); // written through to the file
    e.promote().unwrap();
    assert_eq!(file.size(), 0);
    let back = Tensor::canonical(&e, &[n]).unwrap().values_f32().unwrap();
    assert_eq!(&back[..n - 1], &values[..n - 1]);
    assert_eq!(back[n - 1], -1.0);
}
