use super::*;
use proptest::prelude::*;

/// Brute force: the index of every coordinate, canonical order (first leaf fastest).
fn indices(extents: &[usize], offset: usize, strides: &[usize]) -> Vec<usize> {
    let mut idx = vec![offset];
    for (&e, &s) in extents.iter().zip(strides) {
        idx = (0..e).flat_map(|j| idx.iter().map(move |&i| i + j * s)).collect();
    }
    idx
}

fn cosize(extents: &[usize], strides: &[usize]) -> usize {
    1 + extents.iter().zip(strides).map(|(&e, &s)| (e - 1) * s).sum::<usize>()
}

#[test]
fn add_of_hierarchical_strided_inputs_is_canonical() {
    // [2,[3,4]]:[1,[10,100]] (cosize 322) plus a compact input, into the canonical layout.
    let ext = [2, 3, 4];
    let sa = [1, 10, 100];
    let a: Vec<f32> = (0..322).map(|i| i as f32).collect();
    let sb = canonical_strides(&ext);
    let b: Vec<f32> = (0..24).map(|i| 1000.0 * i as f32).collect();
    let mut out = vec![0.0; 24];
    binary_f32(BinaryOp::Add, &ext, Operand::new(&a, 0, &sa), Operand::new(&b, 0, &sb), &mut out, &sb).unwrap();
    let ia = indices(&ext, 0, &sa);
    for k in 0..24 {
        assert_eq!(out[k], a[ia[k]] + b[k]);
    }
}

#[test]
fn worked_example_product_and_sum() {
    // x = [1,2,3] broadcast to [2,3]:[0,1]; w = [2,3]:[1,2] rows [10,20,30], [1,2,3].
    let x = [1.0f32, 2.0, 3.0];
    let w = [10.0f32, 1.0, 20.0, 2.0, 30.0, 3.0];
    let ext = [2, 3];
    let mut p = vec![0.0; 6];
    binary_f32(BinaryOp::Mul, &ext, Operand::new(&x, 0, &[0, 1]), Operand::new(&w, 0, &[1, 2]), &mut p, &[1, 2])
        .unwrap();
    assert_eq!(sum_f32(&ext, Operand::new(&p, 0, &[1, 2])).unwrap(), 154.0);
}

#[test]
fn scatter_add_sums_over_stride_zero_output_leaves() {
    // Broadcast backward of [1,3] -> [2,3]: each source column receives the column sum.
    let g = [10.0f32, 1.0, 20.0, 2.0, 30.0, 3.0];
    let mut out = vec![0.0; 3];
    scatter_add_f32(&[2, 3], Operand::new(&g, 0, &[1, 2]), &mut out, &[0, 1]).unwrap();
    assert_eq!(out, vec![11.0, 22.0, 33.0]);
}

#[test]
fn copy_with_zero_strides_fills() {
    let g = [0.0f32, 7.5];
    let mut out = vec![0.0; 10];
    // Gapped destination [2,3]:[1,4]; cosize 10, unaddressed slots stay 0.
    copy_f32(&[2, 3], Operand::new(&g, 1, &[0, 0]), &mut out, &[1, 4]).unwrap();
    assert_eq!(out, vec![7.5, 7.5, 0.0, 0.0, 7.5, 7.5, 0.0, 0.0, 7.5, 7.5]);
}

#[test]
fn scale_rounds_once() {
    let a = [1.0f32 / 3.0];
    let mut out = [0.0f32];
    scale_f32(&[1], Operand::new(&a, 0, &[1]), 3.0, &mut out, &[1]).unwrap();
    assert_eq!(out[0], ((1.0f32 / 3.0) as f64 * 3.0) as f32);
}

#[test]
fn unary_op_runs_the_kernel_it_names() {
    let a = [1.0f32, 2.0, 3.0];
    let run = |op, init: f32| {
        let mut out = [init; 2];
        unary_f32(op, &[3], Operand::new(&a, 0, &[1]), &mut out, &[0]).unwrap();
        out
    };
    // Every coordinate writes slot 0: copy and scale keep the last value, scatter-add sums.
    assert_eq!(run(UnaryOp::Copy, 5.0), [3.0, 5.0]);
    assert_eq!(run(UnaryOp::Scale(2.0), 5.0), [6.0, 5.0]);
    assert_eq!(run(UnaryOp::ScatterAdd, 5.0), [11.0, 5.0]);
}

#[test]
fn sum_counts_each_coordinate_and_accumulates_in_f64() {
    // 4:0 reads one slot four times.
    assert_eq!(sum_f32(&[4], Operand::new(&[2.5], 0, &[0])).unwrap(), 10.0);
    // 2^24 + 1 + 1 + ...: f32 accumulation would lose every 1.0.
    let mut v = vec![1.0f32; 17];
    v[0] = 16_777_216.0;
    assert_eq!(sum_f32(&[17], Operand::new(&v, 0, &[1])).unwrap(), 16_777_232.0);
    // Rank 0: one element.
    assert_eq!(sum_f32(&[], Operand::new(&[4.0, 9.0], 1, &[])).unwrap(), 9.0);
}

#[test]
fn out_of_bounds_operands_are_refused_before_writing() {
    let a = [1.0f32; 5];
    let mut out = vec![-1.0; 6];
    let err = binary_f32(
        BinaryOp::Add,
        &[2, 3],
        Operand::new(&a, 0, &[1, 2]),
        Operand::new(&a, 0, &[1, 2]),
        &mut out,
        &[1, 2],
    )
    .unwrap_err();
    assert_eq!(err, KernelError::OutOfBounds { operand: "a", needed: 6, len: 5 });
    assert!(out.iter().all(|&x| x == -1.0));
    let err = copy_f32(&[2], Operand::new(&a, 0, &[1, 1]), &mut out, &[1]).unwrap_err();
    assert!(matches!(err, KernelError::RankMismatch { operand: "a", .. }));
    let err = sum_f32(&[2], Operand::new(&a, usize::MAX, &[1])).unwrap_err();
    assert_eq!(err, KernelError::SpanOverflow { operand: "a" });
}

#[test]
fn an_empty_operation_still_checks_each_rank() {
    // issue 22.5: an extent 0 used to skip the rank check, and the walk then indexed past
    // the shorter stride list.
    let a = [1.0f32; 4];
    let err = sum_f32(&[2, 0], Operand::new(&a, 0, &[1])).unwrap_err();
    assert_eq!(err, KernelError::RankMismatch { operand: "a", expected: 2, got: 1 });
    let err = sum_f32(&[0], Operand::new(&a, usize::MAX, &[])).unwrap_err();
    assert!(matches!(err, KernelError::RankMismatch { operand: "a", .. }));
    let mut out = vec![0.0; 4];
    let err = copy_f32(&[0], Operand::new(&a, 0, &[1]), &mut out, &[1, 1]).unwrap_err();
    assert!(matches!(err, KernelError::RankMismatch { operand: "out", .. }));
    assert_eq!(sum_f32(&[3, 0], Operand::new(&a, 0, &[1, 1])).unwrap(), 0.0);
}

#[test]
fn merging_keeps_non_mergeable_leaves_apart() {
    // [2,2]:[2,1] (transposed) plus compact: leaves must not merge.
    let a = [1.0f32, 2.0, 3.0, 4.0];
    let mut out = vec![0.0; 4];
    copy_f32(&[2, 2], Operand::new(&a, 0, &[2, 1]), &mut out, &[1, 2]).unwrap();
    assert_eq!(out, vec![1.0, 3.0, 2.0, 4.0]);
}

fn layout_strategy() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Vec<usize>, usize, usize)> {
    prop::collection::vec(1usize..4, 0..5).prop_flat_map(|ext| {
        let n = ext.len();
        (Just(ext), prop::collection::vec(0usize..7, n), prop::collection::vec(0usize..7, n), 0usize..3, 0usize..3)
    })
}

#[test]
fn transposed_operand_is_blocked_and_exact() {
    // 130x70 (neither a multiple of the 64 tile) with b transposed against a and out,
    // plus a third leaf and offsets: the blocking heuristic must fire, and every
    // coordinate must be written exactly once with the right pair.
    let ext = [130, 70, 3];
    let canon = canonical_strides(&ext);
    let sb = [70, 1, 130 * 70];
    let (oa, ob) = (5, 2);
    let a: Vec<f32> = (0..oa + 130 * 70 * 3).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..ob + 130 * 70 * 3).map(|i| 0.5 * i as f32).collect();
    let plan = Plan::new(&ext, [&canon[..], &sb[..], &canon[..]]);
    assert!(plan.wants_tiles());
    let mut out = vec![f32::NAN; 130 * 70 * 3];
    binary_f32(BinaryOp::Add, &ext, Operand::new(&a, oa, &canon), Operand::new(&b, ob, &sb), &mut out, &canon).unwrap();
    let (ia, ib) = (indices(&ext, oa, &canon), indices(&ext, ob, &sb));
    for k in 0..out.len() {
        assert_eq!(out[k], a[ia[k]] + b[ib[k]]);
    }
    // Compact operands keep the single contiguous run: no blocking.
    let plan = Plan::new(&ext, [&canon[..], &canon[..], &canon[..]]);
    assert!(!plan.wants_tiles());
}

/// Extents of 2–4 leaves up to 24 (so 8×8 blocks occur, whole and ragged), strides
/// for a, b and the output's leaf order, offsets, a chunk and a band.
#[test]
fn register_blocks_cover_every_orientation() {
    // Every mix of operands contiguous along leaf 0 or leaf 1 (the register-block path),
    // gapped rows, offsets, a third leaf, and extents 21x19 that leave ragged blocks on
    // both leaves; walked with the production chunk and with a 5-wide chunk that makes
    // ragged blocks inside each band too.
    let ext = [21usize, 19, 3];
    let strides = |transposed: bool, pad: usize| -> Vec<usize> {
        let (r0, r1) = (ext[0] + pad, ext[1] + pad);
        if transposed {
            vec![r1, 1, r0 * r1]
        } else {
            vec![1, r0, r0 * r1]
        }
    };
    for mask in 0..8u32 {
        let sa = strides(mask & 1 != 0, 2);
        let sb = strides(mask & 2 != 0, 0);
        let so = strides(mask & 4 != 0, 1);
        let (oa, ob) = (3, 1);
        let a: Vec<f32> = (0..oa + cosize(&ext, &sa)).map(|i| i as f32 - 9.5).collect();
        let b: Vec<f32> = (0..ob + cosize(&ext, &sb)).map(|i| 0.25 * i as f32).collect();
        let (ia, ib, io) = (indices(&ext, oa, &sa), indices(&ext, ob, &sb), indices(&ext, 0, &so));
        for op in [BinaryOp::Add, BinaryOp::Mul] {
            let mut want = vec![f32::NAN; cosize(&ext, &so)];
            for k in 0..ia.len() {
                want[io[k]] = match op {
                    BinaryOp::Add => a[ia[k]] + b[ib[k]],
                    BinaryOp::Mul => a[ia[k]] * b[ib[k]],
                };
            }
            let plan = Plan::new(&ext, [&sa[..], &sb[..], &so[..]]);
            for tile in [None, Some((CHUNK, BLOCK)), Some((5, BLOCK))] {
                let mut out = vec![f32::NAN; want.len()];
                let (x, y) = (Operand::new(&a, oa, &sa), Operand::new(&b, ob, &sb));
                binary_planned(op, &plan, tile, x, y, &mut out);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&out), bits(&want), "mask {mask} {op:?} {tile:?}");
            }
        }
    }
}

/// Extents, three operands' stride orders, and four small offsets/choices of one tiled case.
type TiledCase = (Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>, usize, usize, usize, usize);

fn tiled_strategy() -> impl Strategy<Value = TiledCase> {
    prop::collection::vec(1usize..25, 2..5).prop_flat_map(|ext| {
        let n = ext.len();
        (
            Just(ext),
            prop::collection::vec(0usize..40, n),
            prop::collection::vec(0usize..40, n),
            prop::collection::vec(0usize..40, n),
            0usize..4,
            0usize..4,
            1usize..20,
            1usize..12,
        )
    })
}

proptest! {
    /// The blocked walk, forced on with small tiles (so tiles rarely divide the
    /// extents), visits every coordinate once with matching operand indices, whatever
    /// the strides and offsets, including gapped and stride-0 output leaves.
    #[test]
    fn blocked_binary_matches_brute_force(
        (ext, sa, sb, so, oa, ob, chunk, band) in tiled_strategy()
    ) {
        let a: Vec<f32> = (0..oa + cosize(&ext, &sa)).map(|i| i as f32 * 0.5 - 7.0).collect();
        let b: Vec<f32> = (0..ob + cosize(&ext, &sb)).map(|i| i as f32 * 1.25 + 1.0).collect();
        let (ia, ib) = (indices(&ext, oa, &sa), indices(&ext, ob, &sb));
        // Output strides: an injective layout whose leaf order is shuffled by the drawn
        // values and padded by a gap of 0..2 slots per leaf, so each coordinate owns its
        // slot (the check sees every write) while the output may be transposed too.
        let mut order: Vec<usize> = (0..ext.len()).collect();
        order.sort_by_key(|&leaf| so[leaf]);
        let mut out_strides = vec![0; ext.len()];
        let mut acc = 1;
        for leaf in order {
            out_strides[leaf] = acc;
            acc *= ext[leaf] + so[leaf] % 3;
        }
        let so = out_strides;
        let io = indices(&ext, 0, &so);
        for op in [BinaryOp::Add, BinaryOp::Mul] {
            let plan = Plan::new(&ext, [&sa[..], &sb[..], &so[..]]);
            let mut out = vec![f32::NAN; cosize(&ext, &so)];
            binary_planned(op, &plan, Some((chunk, band)), Operand::new(&a, oa, &sa), Operand::new(&b, ob, &sb), &mut out);
            let mut want = vec![f32::NAN; out.len()];
            for k in 0..ia.len() {
                want[io[k]] = match op { BinaryOp::Add => a[ia[k]] + b[ib[k]], BinaryOp::Mul => a[ia[k]] * b[ib[k]] };
            }
            prop_assert_eq!(out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        }
    }
}

proptest! {
    #[test]
    fn kernels_match_brute_force((ext, sa, sb, oa, ob) in layout_strategy()) {
        let la = oa + cosize(&ext, &sa);
        let lb = ob + cosize(&ext, &sb);
        let a: Vec<f32> = (0..la).map(|i| (i as f32) * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..lb).map(|i| (i as f32) * 1.25 + 1.0).collect();
        let ia = indices(&ext, oa, &sa);
        let ib = indices(&ext, ob, &sb);
        let canon = canonical_strides(&ext);
        let n = ia.len();

        for op in [BinaryOp::Add, BinaryOp::Mul] {
            let mut out = vec![0.0; n];
            binary_f32(op, &ext, Operand::new(&a, oa, &sa), Operand::new(&b, ob, &sb), &mut out, &canon).unwrap();
            for k in 0..n {
                let want = match op { BinaryOp::Add => a[ia[k]] + b[ib[k]], BinaryOp::Mul => a[ia[k]] * b[ib[k]] };
                prop_assert_eq!(out[k], want);
            }
        }

        let want: f64 = ia.iter().map(|&i| a[i] as f64).sum();
        prop_assert_eq!(sum_f32(&ext, Operand::new(&a, oa, &sa)).unwrap(), want as f32);

        // Scatter-add through b's strides as the output: slot sums.
        let mut slots = vec![0.0f32; cosize(&ext, &sb)];
        scatter_add_f32(&ext, Operand::new(&a, oa, &sa), &mut slots, &sb).unwrap();
        let mut want = vec![0.0f32; slots.len()];
        for k in 0..n { want[ib[k] - ob] += a[ia[k]]; }
        prop_assert_eq!(slots, want);
    }
}
