//! Typed element access and host slices (issue 25).

use std::sync::Arc;

use super::*;
use crate::layout::{Layout, LayoutError, Shape, Stride};
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
fn a_lent_slice_holds_its_carrier_and_a_release_succeeds_once_the_guard_drops() {
    let c = HostCarrier::from_f32(&[1.0, 2.0]);
    let t = Tensor::canonical(&c, &[2]).unwrap();
    let s = t.as_slice::<f32>().unwrap();
    assert!(matches!(c.release(), Err(ModelError::Claimed { .. })));
    assert_eq!(&*s, &[1.0, 2.0]);
    drop(s);
    c.release().unwrap(); // the guard left no claim behind
}

/// What the thread holding a slice guard does with the same carrier through the framework is
/// refused at once (an outside audit found a write after `as_slice` on the same thread waiting
/// forever for the guard's lock). Each step runs on a thread of its own, so a wait fails the
/// test instead of hanging it.
#[test]
fn the_thread_holding_a_slice_is_refused_instead_of_waiting_for_itself() {
    fn within_10_s<R: Send + 'static>(step: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(step()).unwrap());
        rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the call waited for the slice it holds")
    }
    let claimed = |r: super::error::Result<()>| matches!(r, Err(ModelError::Claimed { .. }));
    let answers = within_10_s(move || {
        let c = HostCarrier::from_f32(&[1.0, 2.0]);
        let t = Tensor::canonical(&c, &[2]).unwrap();
        let into = HostCarrier::zeros(ElemKind::F32, 2).unwrap();
        let reading = t.as_slice::<f32>().unwrap();
        let while_read = [
            claimed(t.set(0, 5.0f32)),
            claimed(c.release()),
            claimed(move_tensor(&t, &(into.clone() as Arc<dyn Carrier>)).map(|_| ())),
            claimed(t.as_mut_slice::<f32>().map(|_| ())),
            t.get::<f32>(1).unwrap() == 2.0, // a read goes ahead beside a read
        ];
        drop(reading);
        let mut writing = t.as_mut_slice::<f32>().unwrap();
        writing[0] = 3.0;
        let while_written = [
            claimed(t.set(1, 5.0f32)),
            claimed(t.get::<f32>(1).map(|_| ())), // the elements are being written
            claimed(t.as_slice::<f32>().map(|_| ())),
            claimed(c.release()),
        ];
        drop(writing);
        (while_read, while_written, t.values_as::<f32>().unwrap(), c.version())
    });
    assert_eq!(answers.0, [true; 5], "write, release, move, mutable slice while a slice is read");
    assert_eq!(answers.1, [true; 4], "write, read, slice, release while a slice is written");
    assert_eq!((answers.2, answers.3), (vec![3.0, 2.0], 1));
}

/// Every ordinal and every coordinate of a view reads the element `Tensor::get` and
/// `Tensor::get_coord` read, through compact, strided, transposed and nested layouts.
#[test]
fn views_read_what_the_checked_path_reads() {
    use crate::layout::{Coord, IntTree, Mode};
    let values: Vec<f32> = (0..40).map(|v| v as f32).collect();
    let c = HostCarrier::from_f32(&values);
    let nested = |m: Vec<Mode>| Mode::nested(m).unwrap();
    let layouts = [
        (Layout::canonical(&Shape::flat(&[4, 5]).unwrap()).unwrap(), 3),
        (Layout::leaf(6, 3).unwrap(), 1),
        (Layout::new(Shape::flat(&[3, 4]).unwrap(), Stride::flat(&[4, 1]).unwrap()).unwrap(), 0),
        (
            Layout::new(
                Shape::new(IntTree::new(vec![Mode::Leaf(2), nested(vec![Mode::Leaf(3), Mode::Leaf(2)])])).unwrap(),
                Stride::new(IntTree::new(vec![Mode::Leaf(1), nested(vec![Mode::Leaf(2), Mode::Leaf(12)])])).unwrap(),
            )
            .unwrap(),
            2,
        ),
    ];
    for (layout, offset) in layouts {
        let t = Tensor::new(c.clone(), offset, layout.clone()).unwrap();
        let v = t.host_view::<f32>().unwrap();
        assert_eq!(v.len(), t.size());
        for k in 0..t.size() {
            assert_eq!(v[k], t.get::<f32>(k).unwrap(), "{layout} at {k}");
            assert_eq!(v.get(k), Some(&t.get::<f32>(k).unwrap()));
        }
        assert_eq!(v.get(t.size()), None);
        if layout.rank() == 2 {
            let (m0, m1) = (layout.mode(0).size() as usize, layout.mode(1).size() as usize);
            for i in 0..m0 {
                for j in 0..m1 {
                    let coord = Coord::Seq(vec![Coord::Int(i as i64), Coord::Int(j as i64)]);
                    assert_eq!(v[(i, j)], t.get_coord::<f32>(&coord).unwrap(), "{layout} at ({i}, {j})");
                    assert_eq!(v[[i, j]], v[(i, j)]);
                }
            }
            assert_eq!(v.get_coord([m0, 0]), None);
            assert_eq!(v.get_coord([0, m1]), None);
            assert_eq!(v.get_coord([0]), None); // wrong rank
            assert_eq!(v.get_coord([0, 0, 0]), None);
        }
    }
}

#[test]
fn a_mutable_view_is_one_checked_write() {
    let c = HostCarrier::from_f32(&[0.0; 6]);
    let t =
        Tensor::new(c.clone(), 0, Layout::new(Shape::flat(&[2, 3]).unwrap(), Stride::flat(&[3, 1]).unwrap()).unwrap())
            .unwrap();
    {
        let mut v = t.host_view_mut::<f32>().unwrap();
        v[(1, 2)] = 5.0;
        v[[0, 1]] = 1.0;
        v.set(1, 3.0).unwrap(); // ordinal 1 is (1, 0): slot 3
        *v.get_mut(4).unwrap() = 2.0; // (0, 2): slot 2
        assert!(matches!(
            v.set(6, 9.0),
            Err(ModelError::Layout(LayoutError::IntegerKeyOutOfRange { key: 6, size: 6 }))
        ));
        assert!(v.get_mut(6).is_none() && v.get_coord_mut([2, 0]).is_none());
    }
    assert_eq!(
        (Tensor::canonical(&c, &[6]).unwrap().values_f32().unwrap(), c.version()),
        (vec![0.0, 1.0, 2.0, 3.0, 0.0, 5.0], 1)
    );
}

#[test]
fn views_refuse_what_the_checked_path_refuses() {
    // Another dtype, another carrier, several subtensors.
    let c = HostCarrier::from_f32(&[1.0, 2.0]);
    let t = Tensor::canonical(&c, &[2]).unwrap();
    assert!(matches!(t.host_view::<i32>(), Err(ModelError::NoHostView { .. })));
    assert!(matches!(t.host_view_mut::<f64>(), Err(ModelError::NoHostView { .. })));
    let file: Arc<FileCarrier> = FileCarrier::temp_zeros(ElemKind::F32, 2).unwrap();
    assert!(matches!(Tensor::canonical(&file, &[2]).unwrap().host_view::<f32>(), Err(ModelError::NoHostView { .. })));
    let s = t.subtensors()[0].clone();
    let two = Tensor::from_subtensors(ElemKind::F32, vec![s.clone(), s]).unwrap();
    assert!(matches!(two.host_view::<f32>(), Err(ModelError::MultiSubtensor { .. })));
    // Immutable, owned and claimed carriers refuse a writable view and keep their version.
    let frozen = HostCarrier::with_mutability(ElemKind::F32, 2, false).unwrap();
    let ft = Tensor::canonical(&frozen, &[2]).unwrap();
    assert!(matches!(ft.host_view_mut::<f32>(), Err(ModelError::NotMutable { .. })));
    assert!(ft.host_view::<f32>().is_ok());
    let owner = OwnerToken::fresh();
    c.state(carrier::HOOK).adopt(owner).unwrap();
    assert!(matches!(t.host_view_mut::<f32>(), Err(ModelError::NotMutable { .. })));
    assert!(c.state(carrier::HOOK).disown(owner));
    let dyn_c: Arc<dyn Carrier> = c.clone();
    let claim = c.state(carrier::HOOK).try_claim(&dyn_c, ClaimId::fresh(), Role::Source).unwrap();
    assert!(matches!(t.host_view_mut::<f32>(), Err(ModelError::Claimed { action: "write to", .. })));
    drop(claim);
    assert_eq!((frozen.version(), c.version()), (0, 0));
    // Released.
    c.release().unwrap();
    assert!(matches!(t.host_view::<f32>(), Err(ModelError::Released { .. })));
    assert!(matches!(t.host_view_mut::<f32>(), Err(ModelError::Released { .. })));
}

#[test]
fn a_lent_view_holds_its_carrier_and_a_release_succeeds_once_the_guard_drops() {
    let c = HostCarrier::from_f32(&[1.0, 2.0]);
    let t = Tensor::canonical(&c, &[2]).unwrap();
    let v = t.host_view::<f32>().unwrap();
    assert!(matches!(c.release(), Err(ModelError::Claimed { .. })));
    assert!(matches!(t.host_view_mut::<f32>(), Err(ModelError::Claimed { .. })));
    assert_eq!((v[0], v[1]), (1.0, 2.0));
    drop(v);
    let mut w = t.host_view_mut::<f32>().unwrap();
    w[1] = 4.0;
    assert!(matches!(t.get::<f32>(0), Err(ModelError::Claimed { .. })), "read while written");
    drop(w);
    assert_eq!((t.get::<f32>(1).unwrap(), c.version()), (4.0, 1));
    c.release().unwrap(); // no claim left behind
}

#[test]
#[should_panic(expected = "outside the view")]
fn indexing_a_view_out_of_range_panics() {
    let t = Tensor::canonical(HostCarrier::from_f32(&[1.0, 2.0, 3.0, 4.0]), &[2, 2]).unwrap();
    let v = t.host_view::<f32>().unwrap();
    let _ = v[(2, 0)];
}

#[test]
fn a_write_while_a_committing_move_frees_the_source_is_refused_as_claimed() {
    use super::carrier::HookCall;
    let c = HostCarrier::from_f32(&[1.0, 2.0]);
    let t = Tensor::canonical(&c, &[2]).unwrap();
    let destination: Arc<dyn Carrier> = HostCarrier::zeros(ElemKind::F32, 2).unwrap();
    let pending = prepare_move(&t, &destination, None).unwrap();
    // The commit frees the claimed source's storage before marking it released.
    c.release_claimed_storage(&c.hook()).unwrap();
    assert!(matches!(t.set(0, 5.0f32), Err(ModelError::Claimed { .. })), "not an index out of range");
    assert_eq!(c.version(), 0);
    drop(pending);
}
