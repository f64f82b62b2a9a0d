//! The one loop planner: how to walk the flattened leaf modes of a layout, shared by every
//! operand of a copy or a kernel, in as few and as long loops as possible.
//!
//! Every strided walk in the crate (the layout copies of `copy.rs`, the compute kernels of
//! `kernels.rs`) visits the same coordinate space through one stride list per operand. Before
//! walking, [`LoopPlan::new`] applies, in CuTe's vocabulary:
//!
//! - **filter**: leaves of extent 1 address nothing new and are dropped; so are leaves every
//!   operand walks with stride 0 when the caller says revisiting a slot pair is pointless (a
//!   copy writes the same value again; a reduction must not skip them);
//! - **order**: the remaining leaves are sorted (stably) by a caller-chosen key, smallest
//!   innermost, so the innermost loop streams through memory;
//! - **coalesce**: a leaf that every operand continues exactly where the previous one ends
//!   (`stride = previous stride × previous extent`) is merged into it, so a compact layout
//!   of any depth becomes one run.
//!
//! [`addressed_range`] is the bounds half: the lowest and highest slot a layout reaches, from
//! which every caller checks its buffers before the first element is touched.
//!
//! ```
//! use strideweave_core::layout::plan::{addressed_range, single_run};
//!
//! assert_eq!(single_run(&[2, 3], &[1, 2]), Some(6)); // one span of six slots
//! assert_eq!(single_run(&[2, 3], &[1, 3]), None); // holes at 2 and 5
//! assert_eq!(addressed_range(&[2, 3], &[1, 3]).unwrap(), Some((0, 7)));
//! ```

use thiserror::Error;

/// Why a walk was refused before touching memory.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A stride list's length differs from the number of leaf extents.
    #[error("leaf_strides has {strides} entries but leaf_extents has {extents}")]
    RankMismatch {
        /// Number of leaf extents.
        extents: usize,
        /// Entries in the stride list.
        strides: usize,
    },
    /// A leaf extent is negative.
    #[error("leaf_extents[{leaf}] is negative ({extent})")]
    NegativeExtent {
        /// The leaf index.
        leaf: usize,
        /// Its extent.
        extent: i64,
    },
    /// Some addressed slot index does not fit 64 bits.
    #[error("addressed slots overflow the address space")]
    AddressOverflow,
}

/// Checks that `strides` matches `extents` in length and that no extent is negative.
pub fn check_modes(extents: &[i64], strides: &[i64]) -> Result<(), PlanError> {
    if extents.len() != strides.len() {
        return Err(PlanError::RankMismatch { extents: extents.len(), strides: strides.len() });
    }
    if let Some((leaf, &extent)) = extents.iter().enumerate().find(|(_, &e)| e < 0) {
        return Err(PlanError::NegativeExtent { leaf, extent });
    }
    Ok(())
}

/// The smallest and largest slot index, relative to the offset, that a layout with these
/// flattened leaf `extents` and `strides` addresses; `None` when it addresses nothing.
pub fn addressed_range(extents: &[i64], strides: &[i64]) -> Result<Option<(i64, i64)>, PlanError> {
    check_modes(extents, strides)?;
    if extents.contains(&0) {
        return Ok(None);
    }
    let (mut lo, mut hi) = (0i64, 0i64);
    for (&e, &s) in extents.iter().zip(strides) {
        let reach = (e - 1).checked_mul(s).ok_or(PlanError::AddressOverflow)?;
        if reach < 0 {
            lo = lo.checked_add(reach).ok_or(PlanError::AddressOverflow)?;
        } else {
            hi = hi.checked_add(reach).ok_or(PlanError::AddressOverflow)?;
        }
    }
    Ok(Some((lo, hi)))
}

/// When a layout addresses exactly the consecutive slots `[0, len)` from its offset (each at
/// least once: stride-0 leaves revisit them), `len`; None when it addresses nothing, leaves
/// holes, or runs backwards. A compact layout of any depth is such a run once coalesced, and
/// a copy between two such layouts is then one span of `len` slots.
pub fn single_run(extents: &[i64], strides: &[i64]) -> Option<usize> {
    // The commonest dense layout, one unit-stride mode, answered without building a plan.
    if let ([extent], [1]) = (extents, strides) {
        return usize::try_from(*extent).ok().filter(|&n| n > 0);
    }
    check_modes(extents, strides).ok()?;
    let extents: Vec<usize> = extents.iter().map(|&e| usize::try_from(e).ok()).collect::<Option<_>>()?;
    let strides: Vec<isize> = strides.iter().map(|&s| isize::try_from(s).ok()).collect::<Option<_>>()?;
    let plan = LoopPlan::<1>::new(&extents, [&strides], true, |[s]| s.unsigned_abs());
    match (plan.extents.as_slice(), plan.strides[0].as_slice()) {
        (_, _) if plan.is_empty() => None,
        ([], []) => Some(1),
        ([len], [1]) => Some(*len),
        _ => None,
    }
}

/// The walk shared by `N` operands: loop levels (innermost first) with one stride per operand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopPlan<const N: usize> {
    /// Trip count of each level; a zero anywhere means the walk visits nothing.
    extents: Vec<usize>,
    /// Per operand, the stride of each level in elements (as many as `extents`).
    strides: [Vec<isize>; N],
}

impl<const N: usize> LoopPlan<N> {
    /// Trip count of each level, innermost first; a zero anywhere means the walk visits
    /// nothing.
    pub fn extents(&self) -> &[usize] {
        &self.extents
    }

    /// Per operand, the stride of each level in elements, innermost first (one per extent:
    /// the fields are private so that a plan is only ever one `new` made).
    pub fn strides(&self) -> &[Vec<isize>; N] {
        &self.strides
    }

    /// Filter, order and coalesce the leaf modes (see the module docs). `key` orders the
    /// levels, smallest innermost; `drop_revisits` filters levels every operand walks with
    /// stride 0.
    pub fn new<K: Ord>(
        extents: &[usize],
        strides: [&[isize]; N],
        drop_revisits: bool,
        key: impl Fn([isize; N]) -> K,
    ) -> Self {
        let stride_of = |leaf: usize| -> [isize; N] { std::array::from_fn(|k| strides[k][leaf]) };
        let mut order: Vec<usize> = (0..extents.len())
            .filter(|&leaf| extents[leaf] != 1)
            .filter(|&leaf| !(drop_revisits && stride_of(leaf).iter().all(|&s| s == 0)))
            .collect();
        order.sort_by_key(|&leaf| key(stride_of(leaf)));
        let mut plan =
            LoopPlan { extents: Vec::with_capacity(order.len()), strides: std::array::from_fn(|_| Vec::new()) };
        for leaf in order {
            let (e, s) = (extents[leaf], stride_of(leaf));
            if let Some(&prev) = plan.extents.last() {
                let continues = (0..N).all(|k| {
                    let p = *plan.strides[k].last().expect("one stride per level");
                    isize::try_from(prev).ok().and_then(|n| p.checked_mul(n)) == Some(s[k])
                });
                if continues {
                    *plan.extents.last_mut().expect("non-empty") = prev * e;
                    continue;
                }
            }
            plan.extents.push(e);
            for (strides, &sk) in plan.strides.iter_mut().zip(&s) {
                strides.push(sk);
            }
        }
        plan
    }

    /// True when some level has no coordinates, so the walk visits nothing.
    pub fn is_empty(&self) -> bool {
        self.extents.contains(&0)
    }

    /// Calls `body(offsets)` once per coordinate of the levels `first..` (the first of them
    /// fastest), with every operand's slot offset; levels `..first` are the caller's inner
    /// loops. Nothing is called when the walk is empty.
    pub fn odometer(&self, first: usize, offsets: [isize; N], mut body: impl FnMut([isize; N])) {
        if self.is_empty() {
            return;
        }
        let outer = &self.extents[first.min(self.extents.len())..];
        let mut counter = vec![0usize; outer.len()];
        let mut bases = offsets;
        loop {
            body(bases);
            let mut d = 0;
            loop {
                if d == outer.len() {
                    return;
                }
                counter[d] += 1;
                for (base, strides) in bases.iter_mut().zip(&self.strides) {
                    *base += strides[first + d];
                }
                if counter[d] < outer[d] {
                    break;
                }
                for (base, strides) in bases.iter_mut().zip(&self.strides) {
                    *base -= strides[first + d] * outer[d] as isize;
                }
                counter[d] = 0;
                d += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compact_hierarchical_layout_coalesces_to_one_run() {
        let plan = LoopPlan::<2>::new(&[2, 3, 4], [&[1, 2, 6], &[1, 2, 6]], true, |s| s[1].unsigned_abs());
        assert_eq!(plan.extents, vec![24]);
        assert_eq!(plan.strides, [vec![1], vec![1]]);
    }

    #[test]
    fn filter_drops_unit_extents_and_optionally_revisits() {
        let plan = LoopPlan::<2>::new(&[1, 5, 3], [&[7, 0, 1], &[9, 0, 1]], true, |s| s[1]);
        assert_eq!(plan.extents, vec![3]);
        let kept = LoopPlan::<2>::new(&[1, 5, 3], [&[7, 0, 1], &[9, 0, 1]], false, |s| s[1]);
        assert_eq!(kept.extents, vec![5, 3]);
    }

    #[test]
    fn order_puts_the_smallest_key_innermost_and_keeps_ties_stable() {
        let plan = LoopPlan::<1>::new(&[3, 4], [&[4, 1]], false, |s| s[0]);
        assert_eq!(plan.extents, vec![12]); // reordered, then contiguous: one run
        let gapped = LoopPlan::<1>::new(&[3, 4], [&[10, 1]], false, |s| s[0]);
        assert_eq!((gapped.extents, gapped.strides), (vec![4, 3], [vec![1, 10]]));
    }

    #[test]
    fn the_odometer_visits_every_coordinate_once() {
        let plan = LoopPlan::<2>::new(&[2, 3], [&[1, 10], &[3, 1]], false, |_| 0);
        let mut seen = Vec::new();
        plan.odometer(0, [0, 0], |b| seen.push(b));
        assert_eq!(seen, vec![[0, 0], [1, 3], [10, 1], [11, 4], [20, 2], [21, 5]]);
        let empty = LoopPlan::<1>::new(&[2, 0], [&[1, 2]], false, |_| 0);
        empty.odometer(0, [0], |_| panic!("an empty walk visits nothing"));
    }

    #[test]
    fn single_run_is_a_dense_forward_span_only() {
        assert_eq!(single_run(&[2, 3, 4], &[1, 2, 6]), Some(24));
        assert_eq!(single_run(&[4, 3], &[3, 1]), Some(12)); // column-major order, still dense
        assert_eq!(single_run(&[5, 4], &[0, 1]), Some(4)); // broadcast: revisits one run
        assert_eq!(single_run(&[1, 1], &[7, 9]), Some(1));
        assert_eq!(single_run(&[], &[]), Some(1));
        assert_eq!(single_run(&[4], &[2]), None); // holes
        assert_eq!(single_run(&[4], &[-1]), None); // backwards
        assert_eq!(single_run(&[4, 0], &[1, 4]), None); // empty
        assert_eq!(single_run(&[4], &[1, 1]), None); // malformed
    }

    #[test]
    fn addressed_range_covers_negative_strides_and_refuses_overflow() {
        assert_eq!(addressed_range(&[3, 2], &[-1, 5]), Ok(Some((-2, 5))));
        assert_eq!(addressed_range(&[3, 0], &[1, 5]), Ok(None));
        assert_eq!(addressed_range(&[2, 2], &[i64::MAX, 1]), Err(PlanError::AddressOverflow));
        assert!(matches!(addressed_range(&[2], &[1, 2]), Err(PlanError::RankMismatch { .. })));
    }
}
