//! The Rust `Evictable`: ownership of its tiers, evict/promote, failure atomicity.

use super::*;
use crate::storage::{ElemKind, Scalar};

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
