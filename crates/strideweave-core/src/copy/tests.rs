use super::*;
use proptest::prelude::*;
use std::fs::OpenOptions;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Every coordinate's (src, dst) slot pair, by the definition.
fn brute_pairs(extents: &[i64], ss: &[i64], ds: &[i64], so: i64, dof: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    if extents.contains(&0) {
        return out;
    }
    let mut c = vec![0i64; extents.len()];
    loop {
        let si: i64 = so + c.iter().zip(ss).map(|(a, b)| a * b).sum::<i64>();
        let di: i64 = dof + c.iter().zip(ds).map(|(a, b)| a * b).sum::<i64>();
        out.push((si, di));
        let mut k = 0;
        loop {
            if k == c.len() {
                return out;
            }
            c[k] += 1;
            if c[k] < extents[k] {
                break;
            }
            c[k] = 0;
            k += 1;
        }
    }
}

/// Runs the layout copy on byte buffers whose elements are distinct, and compares the
/// whole destination (addressed slots copied, others untouched) to the definition.
fn check_layout(extents: &[i64], strides: &[i64], so: i64, dof: i64, es: usize) {
    let (lo, hi) = addressed_range(extents, strides).unwrap().unwrap_or_default();
    let slots = (hi - lo + 1 + so.max(dof) + 2) as usize;
    let (so, dof) = (so - lo, dof - lo);
    let src: Vec<u8> = (0..slots * es).map(|i| (i * 7 + 3) as u8).collect();
    let mut dst = vec![0xEEu8; slots * es];
    let mut want = dst.clone();
    for (si, di) in brute_pairs(extents, strides, strides, so, dof) {
        let (si, di) = (si as usize * es, di as usize * es);
        want[di..di + es].copy_from_slice(&src[si..si + es]);
    }
    // SAFETY: the buffers cover every addressed slot (sized from addressed_range) and are
    // distinct allocations.
    unsafe { copy_layout_elements(src.as_ptr(), so, dst.as_mut_ptr(), dof, extents, strides, es).unwrap() };
    assert_eq!(dst, want, "extents {extents:?} strides {strides:?} es {es}");
}

#[test]
fn contiguous_layout_is_one_span() {
    check_layout(&[4, 3, 2], &[1, 4, 12], 0, 0, 4);
    assert_eq!(plan_copy(&[4, 3, 2], &[1, 4, 12], &[1, 4, 12]).extents().len(), 1);
}

#[test]
fn gapped_hierarchical_layout_copies_only_addressed_slots() {
    // ((2, 3), 4) : ((1, 5), 20) leaves gaps after every pair and after every block.
    check_layout(&[2, 3, 4], &[1, 5, 20], 3, 1, 4);
    check_layout(&[2, 3, 4], &[1, 5, 20], 0, 0, 8);
    check_layout(&[2, 3, 4], &[1, 5, 20], 2, 0, 1);
    check_layout(&[40, 3], &[1, 50], 0, 0, 4);
}

#[test]
fn broadcast_and_negative_strides() {
    check_layout(&[2, 3], &[1, 0], 0, 0, 4);
    check_layout(&[3, 2], &[0, 0], 1, 0, 8);
    check_layout(&[5, 2], &[-1, 7], 0, 0, 4);
}

#[test]
fn odd_element_sizes() {
    check_layout(&[3, 4], &[2, 9], 1, 0, 3);
    check_layout(&[3, 4], &[1, 3], 0, 0, 16);
    check_layout(&[20], &[1], 0, 5, 2);
}

#[test]
fn empty_layout_copies_nothing() {
    check_layout(&[3, 0, 2], &[1, 3, 0], 0, 0, 4);
    check_layout(&[], &[], 2, 1, 4);
    let src = [1u8; 4];
    let mut dst = [0u8; 4];
    // SAFETY: a zero extent addresses nothing, so the pointers are never read or written.
    unsafe { copy_layout_elements(src.as_ptr(), 0, dst.as_mut_ptr(), 0, &[0], &[1], 4).unwrap() };
    assert_eq!(dst, [0; 4]);
}

#[test]
fn bad_modes_are_refused_before_copying() {
    let src = [1u8; 8];
    let mut dst = [0u8; 8];
    let p = (src.as_ptr(), dst.as_mut_ptr());
    // SAFETY: each call is refused during validation and touches no memory.
    unsafe {
        assert_eq!(
            copy_layout_elements(p.0, 0, p.1, 0, &[2], &[1, 2], 4),
            Err(LayoutCopyError::Plan(PlanError::RankMismatch { extents: 1, strides: 2 }))
        );
        assert_eq!(
            copy_layout_elements(p.0, 0, p.1, 0, &[2, -1], &[1, 2], 4),
            Err(LayoutCopyError::Plan(PlanError::NegativeExtent { leaf: 1, extent: -1 }))
        );
        assert_eq!(copy_layout_elements(p.0, 0, p.1, 0, &[2], &[1], 0), Err(LayoutCopyError::ZeroElementSize));
        assert_eq!(
            copy_layout_elements(p.0, 0, p.1, 0, &[3], &[i64::MAX / 2], 4),
            Err(LayoutCopyError::Plan(PlanError::AddressOverflow))
        );
    }
    assert_eq!(dst, [0; 8]);
}

#[test]
fn gather_compacts_a_gapped_layout() {
    let extents = [2i64, 3, 4];
    let ss = [1i64, 5, 20];
    let ds = [1i64, 2, 6];
    let src: Vec<u32> = (0..80).collect();
    let mut dst = vec![u32::MAX; 24];
    // SAFETY: src covers slots up to 1+10+60=71 < 80, dst covers 0..24; distinct buffers.
    unsafe { copy_strided(src.as_ptr().cast(), 0, &ss, dst.as_mut_ptr().cast(), 0, &ds, &extents, 4).unwrap() };
    let want: Vec<u32> = brute_pairs(&extents, &ss, &ds, 0, 0).into_iter().fold(vec![u32::MAX; 24], |mut w, (s, d)| {
        w[d as usize] = src[s as usize];
        w
    });
    assert_eq!(dst, want);
    assert!(dst.iter().all(|&v| v != u32::MAX));
}

proptest! {
    #[test]
    fn layout_copy_matches_definition(
        modes in proptest::collection::vec((0i64..5, -6i64..12), 0..5),
        so in 0i64..4,
        dof in 0i64..4,
        es in prop_oneof![Just(1usize), Just(2), Just(4), Just(8), Just(3)],
    ) {
        let extents: Vec<i64> = modes.iter().map(|m| m.0).collect();
        let strides: Vec<i64> = modes.iter().map(|m| m.1).collect();
        check_layout(&extents, &strides, so, dof, es);
    }

    #[test]
    fn gather_matches_definition_for_injective_destinations(
        extents in proptest::collection::vec(1i64..5, 1..4),
        src_strides in proptest::collection::vec(-5i64..9, 4),
        perm_seed in 0usize..24,
    ) {
        // Destination: a permuted column-major packing, which is injective.
        let n = extents.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.rotate_left(perm_seed % n);
        let mut ds = vec![0i64; n];
        let mut acc = 1;
        for &k in &order { ds[k] = acc; acc *= extents[k]; }
        let ss = &src_strides[..n];
        let (lo, hi) = addressed_range(&extents, ss).unwrap().unwrap();
        let src: Vec<u64> = (0..(hi - lo + 1) as u64).map(|v| v * 31 + 1).collect();
        let mut dst = vec![0u64; acc as usize];
        // SAFETY: src covers offset -lo plus [lo, hi]; dst covers the packed range.
        unsafe {
            copy_strided(src.as_ptr().cast(), -lo, ss, dst.as_mut_ptr().cast(), 0, &ds, &extents, 8).unwrap()
        };
        let mut want = vec![0u64; acc as usize];
        for (s, d) in brute_pairs(&extents, ss, &ds, -lo, 0) {
            want[d as usize] = src[s as usize];
        }
        prop_assert_eq!(dst, want);
    }
}

#[test]
fn host_span_copy() {
    let src: Vec<u8> = (0..=255).collect();
    let mut dst = vec![0u8; 256];
    // SAFETY: both buffers hold 256 bytes and are distinct.
    unsafe { copy_span_host_to_host(src.as_ptr(), dst.as_mut_ptr(), 256) };
    assert_eq!(src, dst);
    // SAFETY: zero bytes: the pointers are not used.
    unsafe { copy_span_host_to_host(std::ptr::null(), std::ptr::null_mut(), 0) };
}

struct TempPath(PathBuf);
impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
fn temp_file() -> (TempPath, File) {
    static N: AtomicUsize = AtomicUsize::new(0);
    let p = std::env::temp_dir().join(format!(
        "strideweave-copy-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let f = OpenOptions::new().read(true).write(true).create_new(true).open(&p).unwrap();
    (TempPath(p), f)
}

#[test]
fn file_round_trip_across_many_chunks() {
    let (_p, f) = temp_file();
    let data: Vec<u8> = (0..100_003u32).map(|i| (i % 251) as u8).collect();
    // A tiny chunk forces the continuation logic that large chunks rarely exercise.
    file_write_chunked(&f, 17, &data, 4096).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 17 + data.len() as u64);
    let mut back = vec![0u8; data.len()];
    file_read_chunked(&f, 17, &mut back, 999).unwrap();
    assert_eq!(back, data);
    let mut again = vec![0u8; data.len()];
    file_read_into_host(&f, 17, &mut again).unwrap();
    assert_eq!(again, data);
}

#[test]
fn reading_past_the_end_is_unexpected_eof() {
    let (_p, f) = temp_file();
    file_write_from_host(&f, 0, &[1, 2, 3]).unwrap();
    let mut dst = [0u8; 8];
    let e = file_read_into_host(&f, 0, &mut dst).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
}

#[test]
fn writing_to_a_read_only_handle_fails() {
    let (p, f) = temp_file();
    drop(f);
    let ro = File::open(&p.0).unwrap();
    assert!(file_write_from_host(&ro, 0, &[1, 2, 3]).is_err());
}

#[test]
fn file_to_file_copy_between_and_within_files() {
    let (_a, fa) = temp_file();
    let (_b, fb) = temp_file();
    let data: Vec<u8> = (0..50_000u32).map(|i| (i * 13 % 256) as u8).collect();
    file_write_from_host(&fa, 0, &data).unwrap();
    file_copy(&fa, 100, &fb, 7, 40_000).unwrap();
    let mut back = vec![0u8; 40_000];
    file_read_into_host(&fb, 7, &mut back).unwrap();
    assert_eq!(back, &data[100..40_100]);
    // Source too short.
    assert!(file_copy(&fa, 45_000, &fb, 0, 10_000).is_err());
}

#[test]
fn overlapping_bounce_copy_behaves_like_memmove() {
    for (src_off, dst_off) in [(0u64, 300u64), (300, 0)] {
        let (_a, fa) = temp_file();
        let data: Vec<u8> = (0..2000u32).map(|i| (i % 256) as u8).collect();
        file_write_from_host(&fa, 0, &data).unwrap();
        bounce_copy(&fa, src_off, &fa, dst_off, 1000, 128).unwrap();
        let mut back = vec![0u8; 1000];
        file_read_into_host(&fa, dst_off, &mut back).unwrap();
        assert_eq!(back, &data[src_off as usize..src_off as usize + 1000]);
    }
}
