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

use std::fmt;

/// Why a kernel refused to run. Nothing has been written when one is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelError {
    /// An operand's strides do not have one entry per leaf extent.
    RankMismatch {
        operand: &'static str,
        expected: usize,
        got: usize,
    },
    /// An operand's greatest reachable index lies outside its buffer.
    OutOfBounds {
        operand: &'static str,
        needed: usize,
        len: usize,
    },
    /// The size or greatest index does not fit in `usize`.
    Overflow { operand: &'static str },
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::RankMismatch {
                operand,
                expected,
                got,
            } => {
                write!(f, "{operand}: {got} strides for {expected} leaf extents")
            }
            KernelError::OutOfBounds {
                operand,
                needed,
                len,
            } => {
                write!(
                    f,
                    "{operand}: layout reaches {needed} slots but the storage holds {len}"
                )
            }
            KernelError::Overflow { operand } => write!(f, "{operand}: layout span overflows"),
        }
    }
}

impl std::error::Error for KernelError {}

/// A read-only operand: a buffer, an element offset into it, and one stride per leaf.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    pub data: &'a [f32],
    pub offset: usize,
    pub strides: &'a [usize],
}

impl<'a> Operand<'a> {
    pub fn new(data: &'a [f32], offset: usize, strides: &'a [usize]) -> Self {
        Self {
            data,
            offset,
            strides,
        }
    }
}

/// The elementwise binary operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Mul,
}

/// Number of logical coordinates, checked for overflow.
pub fn element_count(extents: &[usize]) -> Option<usize> {
    extents
        .iter()
        .try_fold(1usize, |acc, &e| acc.checked_mul(e))
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
fn reach(
    operand: &'static str,
    extents: &[usize],
    offset: usize,
    strides: &[usize],
) -> Result<usize, KernelError> {
    if strides.len() != extents.len() {
        return Err(KernelError::RankMismatch {
            operand,
            expected: extents.len(),
            got: strides.len(),
        });
    }
    let mut last = offset;
    for (&e, &s) in extents.iter().zip(strides) {
        // A zero extent means no coordinates at all; treat it as reaching nothing extra.
        let step = e
            .saturating_sub(1)
            .checked_mul(s)
            .ok_or(KernelError::Overflow { operand })?;
        last = last
            .checked_add(step)
            .ok_or(KernelError::Overflow { operand })?;
    }
    last.checked_add(1).ok_or(KernelError::Overflow { operand })
}

fn check(
    operand: &'static str,
    extents: &[usize],
    offset: usize,
    strides: &[usize],
    len: usize,
) -> Result<(), KernelError> {
    if element_count(extents).ok_or(KernelError::Overflow { operand })? == 0 {
        return Ok(());
    }
    let needed = reach(operand, extents, offset, strides)?;
    if needed > len {
        return Err(KernelError::OutOfBounds {
            operand,
            needed,
            len,
        });
    }
    Ok(())
}

/// The walk plan shared by all operands of a call: simplified extents and per-operand strides.
struct Plan<const N: usize> {
    extents: Vec<usize>,
    strides: [Vec<usize>; N],
}

impl<const N: usize> Plan<N> {
    /// Drop extent-1 leaves and merge neighbours every operand walks contiguously. Merging
    /// leaf `i+1` into leaf `i` is valid exactly when each operand's `stride[i+1]` equals
    /// `stride[i]·extent[i]` (stride-0 operands satisfy this trivially, 0 = 0·e).
    ///
    /// Leaves are first ordered by their summed stride over all operands (stable, so equal
    /// keys keep canonical order). Every kernel visits each coordinate exactly once, so the
    /// visiting order changes no result except the rounding order of accumulations; walking
    /// the smallest strides innermost keeps a transposed operand from striding through
    /// memory (and lets `sum` over a transposed layout become one contiguous run).
    fn new(extents: &[usize], strides: [&[usize]; N]) -> Self {
        let mut order: Vec<usize> = (0..extents.len())
            .filter(|&leaf| extents[leaf] != 1)
            .collect();
        order.sort_by_key(|&leaf| {
            strides
                .iter()
                .fold(0usize, |acc, s| acc.saturating_add(s[leaf]))
        });
        let mut ext: Vec<usize> = Vec::with_capacity(extents.len());
        let mut st: [Vec<usize>; N] = std::array::from_fn(|_| Vec::with_capacity(extents.len()));
        for leaf in order {
            let e = extents[leaf];
            if let Some(&prev) = ext.last() {
                let mergeable = (0..N).all(|k| {
                    let p = *st[k].last().expect("same length as ext");
                    p.checked_mul(prev) == Some(strides[k][leaf])
                });
                if mergeable {
                    *ext.last_mut().expect("non-empty") = prev * e;
                    continue;
                }
            }
            ext.push(e);
            for k in 0..N {
                st[k].push(strides[k][leaf]);
            }
        }
        Plan {
            extents: ext,
            strides: st,
        }
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
        let outer = &self.extents[first..];
        let mut counter = vec![0usize; outer.len()];
        let mut bases = offsets;
        loop {
            body(bases);
            // Odometer over the outer leaves, first outer leaf fastest.
            let mut d = 0;
            loop {
                if d == outer.len() {
                    return;
                }
                counter[d] += 1;
                for k in 0..N {
                    bases[k] += self.strides[k][d + first];
                }
                if counter[d] < outer[d] {
                    break;
                }
                for k in 0..N {
                    bases[k] -= self.strides[k][d + first] * outer[d];
                }
                counter[d] = 0;
                d += 1;
            }
        }
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
                        let b: [usize; N] =
                            std::array::from_fn(|k| bases[k] + i * s1[k] + j * s0[k]);
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
                BinaryOp::Add => z
                    .iter_mut()
                    .zip(x.iter().zip(y))
                    .for_each(|(z, (x, y))| *z = x + y),
                BinaryOp::Mul => z
                    .iter_mut()
                    .zip(x.iter().zip(y))
                    .for_each(|(z, (x, y))| *z = x * y),
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
            run(
                out,
                [ia + i * s1[0], ib + i * s1[1], io + i * s1[2]],
                n0,
                s0,
            );
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

/// `out[out_strides·c] = f(a[c])` for every coordinate `c`.
fn unary_f32(
    extents: &[usize],
    a: Operand<'_>,
    out: &mut [f32],
    out_strides: &[usize],
    f: impl Fn(f32) -> f32,
) -> Result<(), KernelError> {
    check("a", extents, a.offset, a.strides, a.data.len())?;
    check("out", extents, 0, out_strides, out.len())?;
    let plan = Plan::new(extents, [a.strides, out_strides]);
    let ad = a.data;
    plan.walk([a.offset, 0], |[ia, io], n, [sa, so]| {
        if sa == 1 && so == 1 {
            out[io..io + n]
                .iter_mut()
                .zip(&ad[ia..ia + n])
                .for_each(|(z, &x)| *z = f(x));
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
pub fn copy_f32(
    extents: &[usize],
    a: Operand<'_>,
    out: &mut [f32],
    out_strides: &[usize],
) -> Result<(), KernelError> {
    unary_f32(extents, a, out, out_strides, |x| x)
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
    unary_f32(extents, a, out, out_strides, |x| (x as f64 * scalar) as f32)
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
    check("a", extents, a.offset, a.strides, a.data.len())?;
    check("out", extents, 0, out_strides, out.len())?;
    let plan = Plan::new(extents, [a.strides, out_strides]);
    let ad = a.data;
    plan.walk([a.offset, 0], |[ia, io], n, [sa, so]| {
        for j in 0..n {
            out[io + j * so] += ad[ia + j * sa];
        }
    });
    Ok(())
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Brute force: the index of every coordinate, canonical order (first leaf fastest).
    fn indices(extents: &[usize], offset: usize, strides: &[usize]) -> Vec<usize> {
        let mut idx = vec![offset];
        for (&e, &s) in extents.iter().zip(strides) {
            idx = (0..e)
                .flat_map(|j| idx.iter().map(move |&i| i + j * s))
                .collect();
        }
        idx
    }

    fn cosize(extents: &[usize], strides: &[usize]) -> usize {
        1 + extents
            .iter()
            .zip(strides)
            .map(|(&e, &s)| (e - 1) * s)
            .sum::<usize>()
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
        binary_f32(
            BinaryOp::Add,
            &ext,
            Operand::new(&a, 0, &sa),
            Operand::new(&b, 0, &sb),
            &mut out,
            &sb,
        )
        .unwrap();
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
        binary_f32(
            BinaryOp::Mul,
            &ext,
            Operand::new(&x, 0, &[0, 1]),
            Operand::new(&w, 0, &[1, 2]),
            &mut p,
            &[1, 2],
        )
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
    fn sum_counts_each_coordinate_and_accumulates_in_f64() {
        // 4:0 reads one slot four times.
        assert_eq!(sum_f32(&[4], Operand::new(&[2.5], 0, &[0])).unwrap(), 10.0);
        // 2^24 + 1 + 1 + ...: f32 accumulation would lose every 1.0.
        let mut v = vec![1.0f32; 17];
        v[0] = 16_777_216.0;
        assert_eq!(
            sum_f32(&[17], Operand::new(&v, 0, &[1])).unwrap(),
            16_777_232.0
        );
        // Rank 0: one element.
        assert_eq!(
            sum_f32(&[], Operand::new(&[4.0, 9.0], 1, &[])).unwrap(),
            9.0
        );
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
        assert_eq!(
            err,
            KernelError::OutOfBounds {
                operand: "a",
                needed: 6,
                len: 5
            }
        );
        assert!(out.iter().all(|&x| x == -1.0));
        let err = copy_f32(&[2], Operand::new(&a, 0, &[1, 1]), &mut out, &[1]).unwrap_err();
        assert!(matches!(
            err,
            KernelError::RankMismatch { operand: "a", .. }
        ));
        let err = sum_f32(&[2], Operand::new(&a, usize::MAX, &[1])).unwrap_err();
        assert_eq!(err, KernelError::Overflow { operand: "a" });
    }

    #[test]
    fn merging_keeps_non_mergeable_leaves_apart() {
        // [2,2]:[2,1] (transposed) plus compact: leaves must not merge.
        let a = [1.0f32, 2.0, 3.0, 4.0];
        let mut out = vec![0.0; 4];
        copy_f32(&[2, 2], Operand::new(&a, 0, &[2, 1]), &mut out, &[1, 2]).unwrap();
        assert_eq!(out, vec![1.0, 3.0, 2.0, 4.0]);
    }

    fn layout_strategy() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Vec<usize>, usize, usize)>
    {
        prop::collection::vec(1usize..4, 0..5).prop_flat_map(|ext| {
            let n = ext.len();
            (
                Just(ext),
                prop::collection::vec(0usize..7, n),
                prop::collection::vec(0usize..7, n),
                0usize..3,
                0usize..3,
            )
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
        binary_f32(
            BinaryOp::Add,
            &ext,
            Operand::new(&a, oa, &canon),
            Operand::new(&b, ob, &sb),
            &mut out,
            &canon,
        )
        .unwrap();
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
            let a: Vec<f32> = (0..oa + cosize(&ext, &sa))
                .map(|i| i as f32 - 9.5)
                .collect();
            let b: Vec<f32> = (0..ob + cosize(&ext, &sb))
                .map(|i| 0.25 * i as f32)
                .collect();
            let (ia, ib, io) = (
                indices(&ext, oa, &sa),
                indices(&ext, ob, &sb),
                indices(&ext, 0, &so),
            );
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

    fn tiled_strategy() -> impl Strategy<
        Value = (
            Vec<usize>,
            Vec<usize>,
            Vec<usize>,
            Vec<usize>,
            usize,
            usize,
            usize,
            usize,
        ),
    > {
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
}
