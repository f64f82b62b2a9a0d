//! Compute kernels over hierarchical layouts.
//!
//! A hierarchical layout reaches memory only through its leaf modes, so every kernel here
//! takes the flattened leaf extents (depth-first, first leaf fastest) and, per operand, an
//! element offset and the matching leaf strides. All operands of one call share the same
//! extents: they are the same logical coordinate space read or written through different
//! layouts. The output is written through its own strides too, which lets one kernel produce
//! a canonical result, a gapped gradient layout, or (with stride-0 leaves) a reduction.
//!
//! Before walking, leaves of extent 1 are dropped and neighbouring leaves that every operand
//! walks contiguously are merged, so a compact 10^6-element operand becomes one inner run the
//! compiler can vectorise. Every operand's greatest reachable index is checked against its
//! slice before the first element is touched, so the walks themselves index without checks
//! that could fail.
//!
//! Leaves are walked smallest summed stride innermost, which cannot suit every operand when
//! one is transposed against another (a 1000×1000 add with `b` walked at stride 1000).
//! `binary_f32` then covers the two leading leaves in 8×8 blocks, swept in bands of 8
//! along leaf 0; whole blocks of operands that are each contiguous along one of the two
//! leaves are loaded, combined and stored as AVX vectors with the transpose done in
//! registers (`walk_tiled`, `block_avx`). Edges and other layouts use the strided loop.
//!
//! Summation decision: `sum_f32` accumulates in `f64` (eight independent lanes on contiguous
//! runs, so it vectorises) and rounds to `f32` once at the end. Every `f32` is exact in
//! `f64`, so the only rounding before the final one is the `f64` addition error, about
//! 2^-29 of the `f32` ulp per element: for any realistic element count the result is the
//! correctly rounded `f32` sum or one ulp from it, far better than naive `f32` accumulation.
//!
//! ```
//! use strideweave_core::kernels::{copy_f32, Operand};
//!
//! // Extents [2, 3], first fastest: element (i, j) is read at 3 i + j (row-major) and written
//! // at i + 2 j (column-major), a transposing copy.
//! let a = [0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0];
//! let mut out = [0.0f32; 6];
//! copy_f32(&[2, 3], Operand::new(&a, 0, &[3, 1]), &mut out, &[1, 2]).unwrap();
//! assert_eq!(out, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
//! ```

use thiserror::Error;

use crate::layout::plan::LoopPlan;

/// Why a kernel refused to run. Nothing has been written when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KernelError {
    /// An operand's strides do not have one entry per leaf extent.
    #[error("{operand}: {got} strides for {expected} leaf extents")]
    RankMismatch {
        /// Which operand.
        operand: &'static str,
        /// Number of leaf extents.
        expected: usize,
        /// Number of strides it has.
        got: usize,
    },
    /// An operand's greatest reachable index lies outside its buffer.
    #[error("{operand}: layout reaches {needed} slots but the storage holds {len}")]
    OutOfBounds {
        /// Which operand.
        operand: &'static str,
        /// Slots the layout reaches (greatest index + 1).
        needed: usize,
        /// Slots the buffer holds.
        len: usize,
    },
    /// The size or greatest index does not fit in `usize`.
    #[error("{operand}: layout span overflows")]
    SpanOverflow {
        /// Which operand.
        operand: &'static str,
    },
}

/// A read-only operand: a buffer, an element offset into it, and one stride per leaf.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    /// The buffer the operand reads.
    pub data: &'a [f32],
    /// Element offset of the first element in `data`.
    pub offset: usize,
    /// One stride (in elements) per leaf extent of the walk.
    pub strides: &'a [usize],
}

impl<'a> Operand<'a> {
    /// An operand over `data` from `offset` with one stride per leaf.
    pub fn new(data: &'a [f32], offset: usize, strides: &'a [usize]) -> Self {
        Self { data, offset, strides }
    }
}

/// The elementwise binary operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a * b`.
    Mul,
}

/// Number of logical coordinates, checked for overflow.
pub fn element_count(extents: &[usize]) -> Option<usize> {
    extents.iter().try_fold(1usize, |acc, &e| acc.checked_mul(e))
}

/// Strides of the canonical injective layout over `extents`: each leaf's stride is the
/// product of the extents before it.
pub fn canonical_strides(extents: &[usize]) -> Vec<usize> {
    let mut acc = 1usize;
    extents
        .iter()
        .map(|&e| {
            let s = acc;
            acc = acc.saturating_mul(e);
            s
        })
        .collect()
}

/// One past the greatest index `offset + Σ (extent-1)·stride` reaches.
fn reach(operand: &'static str, extents: &[usize], offset: usize, strides: &[usize]) -> Result<usize, KernelError> {
    if strides.len() != extents.len() {
        return Err(KernelError::RankMismatch { operand, expected: extents.len(), got: strides.len() });
    }
    let mut last = offset;
    for (&e, &s) in extents.iter().zip(strides) {
        // A zero extent means no coordinates at all; treat it as reaching nothing extra.
        let step = e.saturating_sub(1).checked_mul(s).ok_or(KernelError::SpanOverflow { operand })?;
        last = last.checked_add(step).ok_or(KernelError::SpanOverflow { operand })?;
    }
    last.checked_add(1).ok_or(KernelError::SpanOverflow { operand })
}

fn check(
    operand: &'static str,
    extents: &[usize],
    offset: usize,
    strides: &[usize],
    len: usize,
) -> Result<(), KernelError> {
    // The rank is checked first: an empty operation with strides of another rank is still a
    // malformed call, and every later walk zips extents with strides.
    if strides.len() != extents.len() {
        return Err(KernelError::RankMismatch { operand, expected: extents.len(), got: strides.len() });
    }
    if element_count(extents).ok_or(KernelError::SpanOverflow { operand })? == 0 {
        return Ok(());
    }
    let needed = reach(operand, extents, offset, strides)?;
    if needed > len {
        return Err(KernelError::OutOfBounds { operand, needed, len });
    }
    Ok(())
}

/// The walk shared by all operands of a call: the crate's one loop plan
/// ([`LoopPlan`]), seen with the non-negative `usize` strides the kernels index slices with.
struct Plan<const N: usize> {
    loops: LoopPlan<N>,
    extents: Vec<usize>,
    strides: [Vec<usize>; N],
}

impl<const N: usize> Plan<N> {
    /// Filter extent-1 leaves and coalesce neighbours every operand walks contiguously
    /// (stride-0 operands continue trivially, 0 = 0·e). Leaves every operand walks with
    /// stride 0 are kept: a reduction must visit each coordinate.
    ///
    /// Leaves are ordered by their summed stride over all operands (stable, so equal keys
    /// keep canonical order). Every kernel visits each coordinate exactly once, so the
    /// visiting order changes no result except the rounding order of accumulations; walking
    /// the smallest strides innermost keeps a transposed operand from striding through
    /// memory (and lets `sum` over a transposed layout become one contiguous run).
    ///
    /// The strides were bounds-checked by `check`, so every one of a leaf with more than one
    /// coordinate fits `isize`; the others are filtered or make the walk empty.
    fn new(extents: &[usize], strides: [&[usize]; N]) -> Self {
        let signed: [Vec<isize>; N] = std::array::from_fn(|k| strides[k].iter().map(|&s| s as isize).collect());
        let loops = LoopPlan::new(extents, std::array::from_fn(|k| &signed[k][..]), false, |s: [isize; N]| {
            s.iter().fold(0usize, |acc, &x| acc.saturating_add(x as usize))
        });
        let unsigned = std::array::from_fn(|k| loops.strides()[k].iter().map(|&s| s as usize).collect());
        Plan { extents: loops.extents().to_vec(), strides: unsigned, loops }
    }

    /// Call `run(bases, len, inner_strides)` once per inner run (leaf 0 of the plan, the
    /// fastest), with every operand's base index.
    fn walk(&self, offsets: [usize; N], mut run: impl FnMut([usize; N], usize, [usize; N])) {
        if self.extents.contains(&0) {
            return;
        }
        if self.extents.is_empty() {
            run(offsets, 1, [0; N]);
            return;
        }
        let inner_len = self.extents[0];
        let inner: [usize; N] = std::array::from_fn(|k| self.strides[k][0]);
        self.odometer(1, offsets, |bases| run(bases, inner_len, inner));
    }

    /// Call `body(bases)` once per coordinate of the leaves `first..`, first of them fastest,
    /// with every operand's base index. The caller covers leaves `..first` itself.
    fn odometer(&self, first: usize, offsets: [usize; N], mut body: impl FnMut([usize; N])) {
        // Every visited base is a checked, non-negative index, so the casts are exact.
        self.loops.odometer(first, offsets.map(|o| o as isize), |b| body(b.map(|x| x as usize)));
    }

    /// Whether the operands disagree about which of the two leading leaves is fastest:
    /// some operand walks leaf 1 with a smaller (non-zero) stride than leaf 0 while leaf 0
    /// is far apart in memory. Walking leaf 0 innermost then streams one operand but jumps
    /// a whole stride per element on the other, touching a fresh cache line every element
    /// and evicting it before the neighbouring leaf-1 coordinate comes back for it.
    fn wants_tiles(&self) -> bool {
        self.extents.len() >= 2
            && self.extents[0] >= 2 * BLOCK
            && self.extents[1] >= BLOCK
            && (0..N).any(|k| {
                let (s0, s1) = (self.strides[k][0], self.strides[k][1]);
                s1 != 0 && s1 < s0 && s0 >= TILE_MIN_STRIDE
            })
    }

    /// Like `walk`, but covers leaves 0 and 1 in blocks of at most `BLOCK` leaf-0 by
    /// `band` leaf-1 coordinates, calling `block(bases, n0, n1)` per block. Leaf 0 is cut
    /// into chunks of `chunk` coordinates; within a chunk, bands of `band` leaf-1
    /// coordinates are swept along leaf 0 one block after another. Blocks are ragged at
    /// every edge. Needs at least two leaves.
    ///
    /// Why this order (measured on the 1000×1000 transposed add): an operand contiguous
    /// along leaf 0 is read as `band` sequential streams, few enough for the hardware
    /// prefetcher to follow (square 16–64 tiles multiply the streams and ran 2× slower
    /// than no tiling at all); an operand contiguous along leaf 1 has every cache line it
    /// touched in one band reused by the next band, and the chunk bounds that set of lines
    /// (`chunk` lines, 64 KiB at 1024) so they are still in L2 when it comes.
    fn walk_tiled(
        &self,
        offsets: [usize; N],
        chunk: usize,
        band: usize,
        mut block: impl FnMut([usize; N], usize, usize),
    ) {
        debug_assert!(self.extents.len() >= 2 && chunk > 0 && band > 0);
        if self.extents.contains(&0) {
            return;
        }
        let (e0, e1) = (self.extents[0], self.extents[1]);
        let s0: [usize; N] = std::array::from_fn(|k| self.strides[k][0]);
        let s1: [usize; N] = std::array::from_fn(|k| self.strides[k][1]);
        self.odometer(2, offsets, |bases| {
            for j0 in (0..e0).step_by(chunk) {
                let j1 = (j0 + chunk).min(e0);
                for i in (0..e1).step_by(band) {
                    let n1 = band.min(e1 - i);
                    for j in (j0..j1).step_by(BLOCK) {
                        let b: [usize; N] = std::array::from_fn(|k| bases[k] + i * s1[k] + j * s0[k]);
                        block(b, BLOCK.min(j1 - j), n1);
                    }
                }
            }
        });
    }
}

/// Side of the square block the blocked binary kernel moves through registers: 8 `f32`
/// is one AVX vector, so loading, combining and storing a full block (transposing on the
/// way where an operand runs along the other leaf) stays in fixed-size, unrolled loops.
const BLOCK: usize = 8;

/// Leaf-0 coordinates `walk_tiled` sweeps before starting the next chunk (see there).
const CHUNK: usize = 1024;

/// Below this leaf-0 stride (in elements) consecutive leaf-0 coordinates still share cache
/// lines often enough that blocking buys nothing.
const TILE_MIN_STRIDE: usize = 16;

/// `out[out_strides·c] = a[c] op b[c]` for every coordinate `c`. Slots of `out` that no
/// coordinate addresses are left as they were (callers pass zeroed storage).
pub fn binary_f32(
    op: BinaryOp,
    extents: &[usize],
    a: Operand<'_>,
    b: Operand<'_>,
    out: &mut [f32],
    out_strides: &[usize],
) -> Result<(), KernelError> {
    check("a", extents, a.offset, a.strides, a.data.len())?;
    check("b", extents, b.offset, b.strides, b.data.len())?;
    check("out", extents, 0, out_strides, out.len())?;
    let plan = Plan::new(extents, [a.strides, b.strides, out_strides]);
    let tile = plan.wants_tiles().then_some((CHUNK, BLOCK));
    binary_planned(op, &plan, tile, a, b, out);
    Ok(())
}

/// The walk of `binary_f32` after validation, with the blocking decision made by the caller
/// (tests force it to check the blocked walk on layouts the heuristic would not block).
fn binary_planned(
    op: BinaryOp,
    plan: &Plan<3>,
    tile: Option<(usize, usize)>,
    a: Operand<'_>,
    b: Operand<'_>,
    out: &mut [f32],
) {
    let (ad, bd) = (a.data, b.data);
    let run = |out: &mut [f32], [ia, ib, io]: [usize; 3], n: usize, [sa, sb, so]: [usize; 3]| {
        if sa == 1 && sb == 1 && so == 1 {
            let (x, y, z) = (&ad[ia..ia + n], &bd[ib..ib + n], &mut out[io..io + n]);
            match op {
                BinaryOp::Add => z.iter_mut().zip(x.iter().zip(y)).for_each(|(z, (x, y))| *z = x + y),
                BinaryOp::Mul => z.iter_mut().zip(x.iter().zip(y)).for_each(|(z, (x, y))| *z = x * y),
            }
        } else {
            for j in 0..n {
                let (x, y) = (ad[ia + j * sa], bd[ib + j * sb]);
                out[io + j * so] = match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Mul => x * y,
                };
            }
        }
    };
    let offsets = [a.offset, b.offset, 0];
    let (chunk, band) = match tile {
        Some(t) if plan.extents.len() >= 2 => t,
        _ => return plan.walk(offsets, |bases, n, st| run(out, bases, n, st)),
    };
    let s0: [usize; 3] = std::array::from_fn(|k| plan.strides[k][0]);
    let s1: [usize; 3] = std::array::from_fn(|k| plan.strides[k][1]);
    // Whole blocks go through registers when every operand is contiguous along one of the
    // two leaves (the transposed-operand case this walk exists for) and the CPU has AVX.
    let unit = (0..3).all(|k| s0[k] == 1 || s1[k] == 1);
    let simd = unit && block_simd_available();
    plan.walk_tiled(offsets, chunk, band, |[ia, ib, io], n0, n1| {
        if simd && n0 == BLOCK && n1 == BLOCK {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `simd` implies the CPU has AVX and every operand has unit stride along
            // leaf 0 or leaf 1. The block's 64 coordinates are coordinates of the checked
            // extents, so every index it reads or writes (each row/column is 8 consecutive
            // coordinates along the unit-stride leaf) lies below the reach `check`
            // verified against each slice; `out` is a distinct `&mut` slice.
            unsafe {
                block_avx(op, [ad, bd], out, [ia, ib, io], s0, s1)
            };
            return;
        }
        for i in 0..n1 {
            run(out, [ia + i * s1[0], ib + i * s1[1], io + i * s1[2]], n0, s0);
        }
    });
}

/// Whether `block_avx` may run on this CPU.
fn block_simd_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// One 8×8 block of `out = a op b` in AVX registers. The block is held as eight vectors
/// along the output's unit-stride leaf; an input contiguous along the other leaf is loaded
/// along its own unit stride and transposed in registers, so every load and store is a
/// whole 32-byte vector and no element makes a scalar trip through memory (a round trip
/// through a stack array measured slower than the plain strided loop).
///
/// # Safety
/// The CPU supports AVX; each operand `k` has `s0[k] == 1` or `s1[k] == 1`; every index
/// `base[k] + i·s1[k] + j·s0[k]` for `i, j < 8` is in bounds of its slice.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn block_avx(
    op: BinaryOp,
    inputs: [&[f32]; 2],
    out: &mut [f32],
    base: [usize; 3],
    s0: [usize; 3],
    s1: [usize; 3],
) {
    use std::arch::x86_64::*;
    // Work along leaf 0 (vector `i` holds leaf-1 coordinate `i`) unless the output is
    // contiguous only along leaf 1, then along leaf 1.
    let along1 = s0[2] != 1;
    // The start of vector `v` for operand `k` in its natural direction, and whether that
    // direction is the working one.
    let start = |k: usize, v: usize| -> (usize, bool) {
        if s0[k] == 1 {
            (base[k] + v * s1[k], !along1)
        } else {
            (base[k] + v * s0[k], along1)
        }
    };
    let load = |k: usize, p: *const f32| -> [__m256; 8] {
        let mut r: [__m256; 8] = [_mm256_setzero_ps(); 8];
        let mut direct = true;
        for (v, slot) in r.iter_mut().enumerate() {
            let (at, d) = start(k, v);
            direct = d;
            // SAFETY: `at..at + 8` are block coordinates along the unit-stride leaf, in
            // bounds by this function's contract.
            *slot = unsafe { _mm256_loadu_ps(p.add(at)) };
        }
        if direct {
            r
        } else {
            transpose8(r)
        }
    };
    let x = load(0, inputs[0].as_ptr());
    let y = load(1, inputs[1].as_ptr());
    let z: [__m256; 8] = std::array::from_fn(|v| match op {
        BinaryOp::Add => _mm256_add_ps(x[v], y[v]),
        BinaryOp::Mul => _mm256_mul_ps(x[v], y[v]),
    });
    // The working direction is the output's unit-stride leaf, so no transpose on store.
    let po = out.as_mut_ptr();
    for (v, &val) in z.iter().enumerate() {
        let (at, _) = start(2, v);
        // SAFETY: as for the loads, `at..at + 8` are block coordinates of `out`.
        unsafe { _mm256_storeu_ps(po.add(at), val) };
    }
}

/// Transpose 8×8 `f32` held in eight vectors: interleave row pairs, then 64-bit lane
/// pairs, then swap 128-bit halves, leaving vector `i` with the old lane `i` of each row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn transpose8(r: [std::arch::x86_64::__m256; 8]) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// Checks `a` and `out` against their buffers and plans their shared walk.
fn plan_unary(extents: &[usize], a: &Operand<'_>, out: &[f32], out_strides: &[usize]) -> Result<Plan<2>, KernelError> {
    check("a", extents, a.offset, a.strides, a.data.len())?;
    check("out", extents, 0, out_strides, out.len())?;
    Ok(Plan::new(extents, [a.strides, out_strides]))
}

/// `out[out_strides·c] = f(a[c])` for every coordinate `c`.
fn map_f32(
    extents: &[usize],
    a: Operand<'_>,
    out: &mut [f32],
    out_strides: &[usize],
    f: impl Fn(f32) -> f32,
) -> Result<(), KernelError> {
    let plan = plan_unary(extents, &a, out, out_strides)?;
    let ad = a.data;
    plan.walk([a.offset, 0], |[ia, io], n, [sa, so]| {
        if sa == 1 && so == 1 {
            out[io..io + n].iter_mut().zip(&ad[ia..ia + n]).for_each(|(z, &x)| *z = f(x));
        } else {
            for j in 0..n {
                out[io + j * so] = f(ad[ia + j * sa]);
            }
        }
    });
    Ok(())
}

/// Copy every coordinate of `a` into `out` through `out_strides`. With all-zero strides on
/// `a` this fills `out` with one value.
pub fn copy_f32(extents: &[usize], a: Operand<'_>, out: &mut [f32], out_strides: &[usize]) -> Result<(), KernelError> {
    map_f32(extents, a, out, out_strides, |x| x)
}

/// `out[...] = a[c]·scalar`, computed in `f64` and rounded once to `f32`, so the result is
/// the correctly rounded product of the stored value and the (double) scalar.
pub fn scale_f32(
    extents: &[usize],
    a: Operand<'_>,
    scalar: f64,
    out: &mut [f32],
    out_strides: &[usize],
) -> Result<(), KernelError> {
    map_f32(extents, a, out, out_strides, |x| (x as f64 * scalar) as f32)
}

/// `out[out_strides·c] += a[c]` for every coordinate. Output
/// strides may repeat slots (stride 0): that is the point, the repeats are summed. Used for
/// broadcast backward (sum over widened leaves) and for per-storage-slot aggregation.
///
/// Accumulation happens in `f32` directly in `out`; reductions here are over the widened
/// extents of one broadcast, not whole tensors.
pub fn scatter_add_f32(
    extents: &[usize],
    a: Operand<'_>,
    out: &mut [f32],
    out_strides: &[usize],
) -> Result<(), KernelError> {
    let plan = plan_unary(extents, &a, out, out_strides)?;
    let ad = a.data;
    plan.walk([a.offset, 0], |[ia, io], n, [sa, so]| {
        for j in 0..n {
            out[io + j * so] += ad[ia + j * sa];
        }
    });
    Ok(())
}

/// The one-input kernels, for callers that choose one at run time (the Python binding).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum UnaryOp {
    /// [`copy_f32`].
    Copy,
    /// [`scale_f32`] by the factor.
    Scale(f64),
    /// [`scatter_add_f32`].
    ScatterAdd,
}

/// Runs the kernel `op` names on `a` into `out`.
pub fn unary_f32(
    op: UnaryOp,
    extents: &[usize],
    a: Operand<'_>,
    out: &mut [f32],
    out_strides: &[usize],
) -> Result<(), KernelError> {
    match op {
        UnaryOp::Copy => copy_f32(extents, a, out, out_strides),
        UnaryOp::Scale(scalar) => scale_f32(extents, a, scalar, out, out_strides),
        UnaryOp::ScatterAdd => scatter_add_f32(extents, a, out, out_strides),
    }
}

/// Total over every logical coordinate of `a` (see the module docs for the rounding rule).
/// A coordinate that several leaves map to the same slot is counted once per coordinate.
pub fn sum_f32(extents: &[usize], a: Operand<'_>) -> Result<f32, KernelError> {
    check("a", extents, a.offset, a.strides, a.data.len())?;
    let plan = Plan::new(extents, [a.strides]);
    let ad = a.data;
    let mut total = 0.0f64;
    plan.walk([a.offset], |[ia], n, [sa]| {
        if sa == 1 {
            let run = &ad[ia..ia + n];
            let mut lanes = [0.0f64; 8];
            let chunks = run.chunks_exact(8);
            let tail = chunks.remainder();
            for c in chunks {
                for (l, &x) in lanes.iter_mut().zip(c) {
                    *l += x as f64;
                }
            }
            let mut part: f64 = lanes.iter().sum();
            for &x in tail {
                part += x as f64;
            }
            total += part;
        } else if sa == 0 {
            total += ad[ia] as f64 * n as f64;
        } else {
            for j in 0..n {
                total += ad[ia + j * sa] as f64;
            }
        }
    });
    Ok(total as f32)
}

#[cfg(test)]
mod tests;
