//! Typed element access and host slices (issue 25).

use std::sync::Arc;

use super::*;
use crate::layout::{Layout, Shape, Stride};
use crate::storage::{ElemKind, Scalar};

#[test]
fn typed_get_and_set_check_the_kind_and_count_versions() {
    let c = HostCarrier::from_f32(&[1.0, 2.0, 3.0]);
    let t = Tensor::canonical(&c, &[3]).unwrap();
    assert_eq!(t.get::<f32>(2).unwrap(), 3.0);
    assert_eq!(t.get::<Scalar>(2).unwrap(), Scalar::F32(3.0));
    assert!(matches!(t.get::<i32>(0), Err(ModelError::ValueKind { .. })));
    t.set(0, 7.5f32).unwrap();
    assert!(matches!(t.set(1, 7i32), Err(ModelError::ValueKind { .. })));
    assert!(matches!(t.get::<f32>(3), Err(ModelError::Layout(_))));
    assert_eq!((t.values_as::<f32>().unwrap(), c.version()), (vec![7.5, 2.0, 3.0], 1));
}

#[test]
fn slices_lend_dense_host_windows_only() {
    let c = HostCarrier::from_f32(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let window = Tensor::new(c.clone(), 2, Layout::canonical(&Shape::flat(&[2, 2]).unwrap()).unwrap()).unwrap();
    assert_eq!(&*window.as_slice::<f32>().unwrap(), &[2.0, 3.0, 4.0, 5.0]);
    let transposed =
        Tensor::new(c.clone(), 0, Layout::new(Shape::flat(&[2, 3]).unwrap(), Stride::flat(&[3, 1]).unwrap()).unwrap())
            .unwrap();
    assert!(matches!(transposed.as_slice::<f32>(), Err(ModelError::NoSlice { .. })));
    assert!(matches!(window.as_slice::<i32>(), Err(ModelError::NoSlice { .. })));
    let file: Arc<FileCarrier> = FileCarrier::temp_zeros(ElemKind::F32, 2).unwrap();
    assert!(matches!(Tensor::canonical(&file, &[2]).unwrap().as_slice::<f32>(), Err(ModelError::NoSlice { .. })));
}

#[test]
fn a_mutable_slice_is_one_checked_write() {
    let c = HostCarrier::from_f32(&[1.0, 2.0]);
    let t = Tensor::canonical(&c, &[2]).unwrap();
    t.as_mut_slice::<f32>().unwrap()[1] = 9.0;
    assert_eq!((t.get::<f32>(1).unwrap(), c.version()), (9.0, 1));
    // An immutable carrier refuses the slice, and its version stays.
    let frozen = HostCarrier::with_mutability(ElemKind::F32, 2, false).unwrap();
    let ft = Tensor::canonical(&frozen, &[2]).unwrap();
    assert!(matches!(ft.as_mut_slice::<f32>(), Err(ModelError::NotMutable { .. })));
    assert_eq!(frozen.version(), 0);
    c.release().unwrap();
    assert!(matches!(t.as_mut_slice::<f32>(), Err(ModelError::Released { .. })));
    assert!(matches!(t.as_slice::<f32>(), Err(ModelError::Released { .. })));
}

#[test]
fn a_slice_outlives_a_release_without_dangling() {
    let c = HostCarrier::from_f32(&[1.0, 2.0]);
    let t = Tensor::canonical(&c, &[2]).unwrap();
    let s = t.as_slice::<f32>().unwrap();
    c.release().unwrap();
    assert_eq!(&*s, &[1.0, 2.0]); // the guard holds the store
}
