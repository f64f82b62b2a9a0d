//! Injectivity of a layout, decided by the five steps of docs/spec/layout-and-dtype.md §6.
//!
//! Steps 1–4 are O(m²) in the number `m` of leaves with extent > 1 and never enumerate, so
//! a layout such as `[10**9,10**9]:[0,1]` answers at once. Only step 5 enumerates, and it
//! stops at the first repeated index.
//!
//! ```
//! use strideweave_core::layout;
//! use strideweave_core::layout::injective::is_injective;
//!
//! assert!(is_injective(&layout!([2, 3] : [3, 1]).unwrap()));
//! assert!(!is_injective(&layout!([2, 3] : [0, 1]).unwrap())); // a broadcast mode
//! ```

use std::collections::HashSet;

use super::Layout;

fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// True iff distinct coordinates of `layout` give distinct indices.
pub fn is_injective(layout: &Layout) -> bool {
    // Leaves of extent 1 contribute a single coordinate and cannot cause a collision.
    let mut m: Vec<(i64, i64)> = layout.infix().filter(|&(n, _)| n > 1).collect();

    // Step 1: a stride of 0 on an extent > 1 maps two coordinates to one index.
    if m.iter().any(|&(_, s)| s == 0) {
        return false;
    }
    // Step 2: more coordinates than slots (pigeonhole).
    if layout.size() > layout.cosize() {
        return false;
    }
    // Step 3: sorted by stride, each stride clears the span of all smaller modes, so the
    // layout is a mixed-radix numbering with gaps, hence injective.
    m.sort_unstable_by_key(|&(_, s)| s);
    let mut span = 1i64;
    let mut nested = true;
    for &(n, s) in &m {
        if s < span {
            nested = false;
            break;
        }
        // Cannot overflow: span - 1 is a partial sum of the cosize's terms.
        span += (n - 1) * s;
    }
    if nested {
        return true;
    }
    // Step 4: moving +sb/g along a and -sa/g along b changes the index by
    // (sb/g)·sa − (sa/g)·sb = 0; both moves fit inside the extents, so two coordinates collide.
    for (i, &(na, sa)) in m.iter().enumerate() {
        for &(nb, sb) in &m[i + 1..] {
            let g = gcd(sa, sb);
            if sb / g < na && sa / g < nb {
                return false;
            }
        }
    }
    // Step 5: decide exactly by enumerating the image. First drop, largest stride first,
    // every leaf whose stride is at least the span of all smaller-stride leaves: its
    // coordinate selects disjoint blocks [c·s, c·s + span), so the layout is injective iff
    // the remaining leaves are. This shrinks what must be enumerated without changing the
    // answer (m is sorted by stride, so the rest of a leaf are the ones before it).
    while let Some(&(_, s)) = m.last() {
        let rest = &m[..m.len() - 1];
        let rest_span = 1 + rest.iter().map(|&(n, s)| (n - 1) * s).sum::<i64>();
        if s < rest_span {
            break;
        }
        m.pop();
    }
    // Step 4 is exact for two leaves (the smallest collision moves sb/g along a and sa/g
    // along b), and it found no colliding pair, so at most two remaining leaves are injective.
    if m.len() <= 2 {
        return true;
    }
    let size = extent_product(&m);
    let cosize = 1 + m.iter().map(|&(n, s)| (n - 1) * s).sum::<i64>();
    enumerate_distinct(&m, size, cosize)
}

/// Product of the extents of `m` (a divisor of the layout's size, so it fits).
fn extent_product(m: &[(i64, i64)]) -> i64 {
    m.iter().map(|&(n, _)| n).product()
}

/// Visit every index of the leaves `m` (all extents > 1, all strides > 0) and report
/// whether they are pairwise distinct, stopping at the first repeat.
fn enumerate_distinct(m: &[(i64, i64)], size: i64, cosize: i64) -> bool {
    // A bitset costs cosize/8 bytes, a hash set roughly 16 bytes per coordinate: take the
    // smaller so that a sparse, very gapped layout does not allocate its whole span.
    enum Seen {
        Bits(Vec<u64>),
        Hash(HashSet<i64>),
    }
    let mut seen = if cosize / 128 <= size {
        Seen::Bits(vec![0u64; (cosize as usize).div_ceil(64)])
    } else {
        Seen::Hash(HashSet::with_capacity(size as usize))
    };
    let mut counters = vec![0i64; m.len()];
    let mut idx = 0i64;
    loop {
        let fresh = match &mut seen {
            Seen::Bits(bits) => {
                let (word, bit) = ((idx / 64) as usize, idx % 64);
                let fresh = bits[word] & (1 << bit) == 0;
                bits[word] |= 1 << bit;
                fresh
            }
            Seen::Hash(set) => set.insert(idx),
        };
        if !fresh {
            return false;
        }
        // Odometer step; resetting subtracts (n-1)·s before anything is added, so `idx`
        // never leaves [0, cosize).
        let mut i = 0;
        loop {
            if i == m.len() {
                return true;
            }
            let (n, s) = m[i];
            if counters[i] + 1 < n {
                counters[i] += 1;
                idx += s;
                break;
            }
            idx -= (n - 1) * s;
            counters[i] = 0;
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{IntTree, Mode, Shape, Stride};

    fn flat(sh: &[i64], st: &[i64]) -> Layout {
        Layout::new(Shape::flat(sh).unwrap(), Stride::flat(st).unwrap()).unwrap()
    }

    #[test]
    fn spec_table() {
        assert!(is_injective(&flat(&[2, 3], &[1, 4])));
        assert!(is_injective(&flat(&[1, 3], &[0, 1])));
        let nested = Layout::new(
            Shape::new(IntTree::new(vec![Mode::Leaf(2), Mode::nested(vec![Mode::Leaf(4), Mode::Leaf(3)]).unwrap()]))
                .unwrap(),
            Stride::new(IntTree::new(vec![Mode::Leaf(1), Mode::nested(vec![Mode::Leaf(0), Mode::Leaf(2)]).unwrap()]))
                .unwrap(),
        )
        .unwrap();
        assert!(!is_injective(&nested));
        assert!(!is_injective(&flat(&[4, 2], &[1, 1])));
        assert!(!is_injective(&flat(&[4, 3], &[2, 3])));
        assert!(is_injective(&flat(&[3, 2], &[2, 3])));
    }

    #[test]
    fn huge_layouts_answer_without_enumerating() {
        assert!(!is_injective(&flat(&[1_000_000_000, 1_000_000_000], &[0, 1])));
        assert!(is_injective(&flat(&[1_000_000_000, 1_000_000_000], &[1, 1_000_000_000])));
        assert!(!is_injective(&flat(&[1_000_000_000, 1_000_000_000], &[1, 2])));
    }

    #[test]
    fn step5_peels_separable_outer_leaves() {
        // Stride 100 clears the span (8) of the other two leaves, which form the spec's
        // step-5 example [3,2]:[2,3]; without peeling this would enumerate 6·10⁹ indices.
        assert!(is_injective(&flat(&[3, 2, 1_000_000_000], &[2, 3, 100])));
        assert!(is_injective(&flat(&[3, 2, 5], &[2, 3, 100])));
    }

    #[test]
    fn sparse_step5_uses_hash_set() {
        // No ordered nesting, no colliding pair, nothing to peel, and cosize (≈ 6000) ≫
        // size (27) selects the hash-set path. 1000 + 1002 = 2·1001 collides; 1003 does not.
        assert!(is_injective(&flat(&[3, 3, 3], &[1000, 1001, 1003])));
        assert!(!is_injective(&flat(&[3, 3, 3], &[1000, 1001, 1002])));
    }
}
