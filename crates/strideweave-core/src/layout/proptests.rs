//! Property tests: the layout algebra against brute force over random hierarchical layouts
//! (depth up to 3, small extents).

use std::collections::HashSet;

use proptest::prelude::*;

use super::{Coord, IntTree, Layout, Mode, Shape, Stride};

/// A random mode tree (leaves are placeholders, filled in later), depth ≤ 3 below the top.
fn mode_structure() -> impl Strategy<Value = Mode> {
    Just(Mode::Leaf(0)).prop_recursive(3, 8, 3, |inner| {
        prop::collection::vec(inner, 1..=3).prop_map(|c| Mode::nested(c).expect("non-empty"))
    })
}

fn tree_structure() -> impl Strategy<Value = IntTree> {
    prop::collection::vec(mode_structure(), 0..=3).prop_map(IntTree::new)
}

/// A random layout with at most 6 leaves, extents 1..=4 and strides 0..=7.
fn layout_strategy() -> impl Strategy<Value = Layout> {
    tree_structure()
        .prop_filter("at most 6 leaves", |t| t.leaves().len() <= 6)
        .prop_flat_map(|t| {
            let n = t.leaves().len();
            (Just(t), prop::collection::vec(1i64..=4, n), prop::collection::vec(0i64..=7, n))
        })
        .prop_map(|(t, ext, st)| {
            Layout::new(Shape::new(t.with_leaves(&ext)).unwrap(), Stride::new(t.with_leaves(&st)).unwrap()).unwrap()
        })
}

/// Brute-force index: walk the coordinate and the trees together, no cached leaves.
fn naive_index(shape: &[Mode], stride: &[Mode], coord: &[Coord]) -> i64 {
    shape
        .iter()
        .zip(stride)
        .zip(coord)
        .map(|((sh, st), c)| match (sh, st, c) {
            (Mode::Leaf(_), Mode::Leaf(s), Coord::Int(v)) => v * s,
            (Mode::Nested(a), Mode::Nested(b), Coord::Seq(cs)) => naive_index(a.children(), b.children(), cs),
            _ => panic!("coordinate is not congruent"),
        })
        .sum()
}

/// Every coordinate of `modes`, built as nested tuples, in no particular order.
fn all_coords(modes: &[Mode]) -> Vec<Vec<Coord>> {
    let mut out = vec![Vec::new()];
    for m in modes {
        let options: Vec<Coord> = match m {
            Mode::Leaf(e) => (0..*e).map(Coord::Int).collect(),
            Mode::Nested(n) => all_coords(n.children()).into_iter().map(Coord::Seq).collect(),
        };
        out = out
            .into_iter()
            .flat_map(|prefix| {
                options.iter().map(move |o| {
                    let mut p = prefix.clone();
                    p.push(o.clone());
                    p
                })
            })
            .collect();
    }
    out
}

/// Replace the first nested subtree of `coord` (top-level) by its ordinal within it.
fn collapse_first_nested(layout: &Layout, coord: &Coord) -> Option<Coord> {
    let Coord::Seq(items) = coord else {
        return None;
    };
    let i = layout.shape().modes().iter().position(|m| matches!(m, Mode::Nested(_)))?;
    let sub = layout.mode(i);
    let ordinal = Layout::canonical(sub.shape()).unwrap().index_of_coord(&items[i]).unwrap();
    let mut out = items.clone();
    out[i] = Coord::Int(ordinal);
    Some(Coord::Seq(out))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn integer_index_matches_hierarchical(layout in layout_strategy()) {
        for k in 0..layout.size() {
            let coord = layout.decode(k).unwrap();
            let Coord::Seq(items) = &coord else { unreachable!() };
            let naive = naive_index(layout.shape().modes(), layout.stride().modes(), items);
            prop_assert_eq!(layout.index_of_int(k), naive);
            prop_assert_eq!(layout.index_of_coord(&coord), Ok(naive));
            prop_assert_eq!(layout.shape().encode(&&coord), Ok(k));
            if let Some(collapsed) = collapse_first_nested(&layout, &coord) {
                prop_assert_eq!(layout.index_of_coord(&collapsed), Ok(naive));
            }
        }
    }

    #[test]
    fn cosize_and_injectivity_match_brute_force(layout in layout_strategy()) {
        let coords = all_coords(layout.shape().modes());
        prop_assert_eq!(coords.len() as i64, layout.size());
        let image: Vec<i64> = coords
            .iter()
            .map(|c| naive_index(layout.shape().modes(), layout.stride().modes(), c))
            .collect();
        prop_assert_eq!(layout.cosize(), 1 + image.iter().max().copied().unwrap());
        let distinct = image.iter().collect::<HashSet<_>>().len() == image.len();
        prop_assert_eq!(layout.is_injective(), distinct, "{}", layout);
    }

    #[test]
    fn canonical_is_identity_on_ordinals(layout in layout_strategy()) {
        let can = Layout::canonical(layout.shape()).unwrap();
        prop_assert_eq!(can.cosize(), can.size());
        prop_assert!(can.is_injective());
        for k in 0..can.size() {
            prop_assert_eq!(can.index_of_int(k), k);
        }
    }

    #[test]
    fn permute_inverse_restores(layout in layout_strategy(), seed in any::<u64>()) {
        let rank = layout.rank();
        let mut order: Vec<usize> = (0..rank).collect();
        // Fisher–Yates driven by the seed: proptest shrinks the seed, not the permutation.
        let mut s = seed;
        for i in (1..rank).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            order.swap(i, (s >> 33) as usize % (i + 1));
        }
        let mut inverse = vec![0; rank];
        for (j, &src) in order.iter().enumerate() {
            inverse[src] = j;
        }
        let permuted = layout.permute(&order).unwrap();
        for (j, &src) in order.iter().enumerate() {
            prop_assert_eq!(permuted.mode(j), layout.mode(src));
        }
        prop_assert_eq!(permuted.permute(&inverse).unwrap(), layout);
    }

    #[test]
    fn broadcast_reads_the_source_with_stride_zero(layout in layout_strategy(), grow in prop::collection::vec(1i64..=3, 6)) {
        // Source: this layout with some extents forced to 1; target: the original shape
        // with those extents replaced by `grow`.
        let ext = layout.leaf_extents();
        let src_ext: Vec<i64> = ext.iter().zip(&grow).map(|(&e, &g)| if g == 1 { 1 } else { e }).collect();
        let tgt_ext: Vec<i64> = ext.iter().zip(&grow).map(|(&e, &g)| if g == 1 { e.max(2) } else { e }).collect();
        let tree = layout.shape().tree();
        let src = Layout::new(Shape::new(tree.with_leaves(&src_ext)).unwrap(), layout.stride().clone()).unwrap();
        let target = Shape::new(tree.with_leaves(&tgt_ext)).unwrap();
        let out = src.broadcast_to(&target).unwrap();
        prop_assert_eq!(out.shape(), &target);
        for k in 0..out.size() {
            let Coord::Seq(items) = out.decode(k).unwrap() else { unreachable!() };
            // The source coordinate clamps every broadcast leaf to 0.
            let mut flat = Vec::new();
            flatten(&items, &mut flat);
            let src_flat: Vec<i64> = flat.iter().zip(&src_ext).map(|(&c, &e)| if e == 1 { 0 } else { c }).collect();
            let expected: i64 = src_flat.iter().zip(src.leaf_strides()).map(|(c, s)| c * s).sum();
            prop_assert_eq!(out.index_of_int(k), expected);
        }
        // Growing an extent that is not 1 is rejected.
        if let Some(i) = ext.iter().position(|&e| e > 1) {
            let mut bad = ext.to_vec();
            bad[i] += 1;
            prop_assert!(layout.broadcast_to(&Shape::new(tree.with_leaves(&bad)).unwrap()).is_err());
        }
    }
}

fn flatten(items: &[Coord], out: &mut Vec<i64>) {
    for c in items {
        match c {
            Coord::Int(v) => out.push(*v),
            Coord::Seq(s) => flatten(s, out),
        }
    }
}

/// An injective layout whose strides, taken in increasing order, are each a multiple of what
/// the smaller modes reach (so CuTe's complement preconditions hold): random tree, extents
/// 1..=4, a random stride order and a gap factor 1..=3 per leaf.
fn tractable_layout() -> impl Strategy<Value = Layout> {
    tree_structure()
        .prop_filter("at most 6 leaves", |t| t.leaves().len() <= 6)
        .prop_flat_map(|t| {
            let n = t.leaves().len();
            (
                Just(t),
                prop::collection::vec(1i64..=4, n),
                prop::collection::vec(1i64..=3, n),
                Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
            )
        })
        .prop_map(|(t, ext, gap, order)| {
            let mut strides = vec![0i64; ext.len()];
            let mut running = 1i64;
            for &i in &order {
                strides[i] = running * gap[i];
                running = strides[i] * ext[i];
            }
            Layout::new(Shape::new(t.with_leaves(&ext)).unwrap(), Stride::new(t.with_leaves(&strides)).unwrap())
                .unwrap()
        })
}

fn image(l: &Layout) -> Vec<i64> {
    (0..l.size()).map(|k| l.index_of_int(k)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn coalesce_and_filter_preserve_the_function(layout in layout_strategy()) {
        let c = layout.coalesce().unwrap();
        prop_assert_eq!(image(&c), image(&layout), "{} -> {}", layout, c);
        prop_assert!(c.leaf_extents().len() <= layout.leaf_extents().len().max(1));
        // By the layout's own profile: same function, same top-level rank.
        let by = layout.coalesce_by(layout.shape().tree()).unwrap();
        prop_assert_eq!(image(&by), image(&layout));
        prop_assert_eq!(by.rank(), layout.rank());
        // filter: the same set of indices (stride-0 modes add nothing), no stride-0 leaf left.
        let f = layout.filter().unwrap();
        let want: HashSet<i64> = image(&layout).into_iter().collect();
        let got: HashSet<i64> = image(&f).into_iter().collect();
        prop_assert_eq!(got, want);
        prop_assert!(f.size() == 1 || f.leaf_strides().iter().all(|&d| d > 0), "{} -> {}", layout, f);
    }

    #[test]
    fn right_inverse_is_an_inverse_on_its_domain(layout in layout_strategy()) {
        let r = layout.right_inverse().unwrap();
        prop_assert!(r.size() <= layout.size().max(1));
        for i in 0..r.size() {
            prop_assert_eq!(layout.index_of_int(r.index_of_int(i)), i, "{} r={}", layout, r);
        }
    }

    #[test]
    fn left_inverse_undoes_an_injective_layout(layout in tractable_layout()) {
        let l = layout.left_inverse().unwrap();
        for i in 0..layout.size() {
            prop_assert_eq!(l.index_of_int(layout.index_of_int(i)), i, "{} l={}", layout, l);
        }
    }

    #[test]
    fn complement_is_disjoint_and_covers(layout in tractable_layout(), extra in 1i64..=3) {
        let cotarget = layout.cosize() * extra;
        let c = layout.complement(cotarget).unwrap();
        let a_img: HashSet<i64> = image(&layout).into_iter().collect();
        let c_img = image(&c);
        // Disjoint except index 0, which both reach at coordinate 0.
        prop_assert!(c_img.iter().all(|i| *i == 0 || !a_img.contains(i)), "{} c={}", layout, c);
        let both = Layout::concat(&layout, &c).unwrap();
        prop_assert!(both.is_injective(), "{} c={}", layout, c);
        let all: HashSet<i64> = image(&both).into_iter().collect();
        prop_assert!((0..cotarget).all(|i| all.contains(&i)), "{} c={} does not cover {}", layout, c, cotarget);
    }

    #[test]
    fn complement_refuses_only_what_it_cannot_do(layout in layout_strategy()) {
        if let Err(e) = layout.complement(layout.cosize()) {
            let expected = matches!(
                e,
                super::LayoutError::ComplementNotInjective { .. } | super::LayoutError::ComplementStrideNotDivisible { .. }
            );
            prop_assert!(expected, "{} {}", layout, e);
            // Overlap is reported only for a layout that is really not injective.
            if matches!(e, super::LayoutError::ComplementNotInjective { .. }) {
                prop_assert!(!layout.is_injective(), "{} {}", layout, e);
            }
        }
    }

    #[test]
    fn composition_is_function_composition(a in layout_strategy(), b in tractable_layout()) {
        if b.cosize() <= a.size() {
            if let Ok(c) = a.compose(&b) {
                prop_assert_eq!(c.size(), b.size());
                for i in 0..b.size() {
                    prop_assert_eq!(c.index_of_int(i), a.index_of_int(b.index_of_int(i)), "{} o {} = {}", a, b, c);
                }
            }
        }
    }

    #[test]
    fn divide_keeps_the_size_and_tiles_by_b(a in tractable_layout(), b in tractable_layout()) {
        if let Ok(d) = a.divide(&super::Tiler::Layout(b.clone())) {
            if b.cosize() <= a.size() {
                prop_assert_eq!(d.rank(), 2);
                prop_assert_eq!(d.mode(0).size(), b.size());
                // The first tile is A through B.
                let tile = d.mode(0);
                for i in 0..b.size() {
                    prop_assert_eq!(tile.index_of_int(i), a.index_of_int(b.index_of_int(i)));
                }
            }
        }
    }

    #[test]
    fn rearrange_by_the_identity_tree_is_the_layout(a in layout_strategy()) {
        if a.rank() == 0 {
            return Ok(());
        }
        let ids = super::OutputTree::Branch((0..a.rank()).map(super::OutputTree::Id).collect());
        prop_assert_eq!(a.rearrange(&ids, None).unwrap(), a.clone());
        // Reversing the modes twice is the identity too, and each mode keeps its function.
        let rev = super::OutputTree::Branch((0..a.rank()).rev().map(super::OutputTree::Id).collect());
        let r = a.rearrange(&rev, None).unwrap();
        prop_assert_eq!(r.rearrange(&rev, None).unwrap(), a.clone());
        for i in 0..a.rank() {
            prop_assert_eq!(r.mode(a.rank() - 1 - i), a.mode(i));
        }
    }

    #[test]
    fn a_uniform_preimage_extent_is_the_count_of_every_index(a in layout_strategy(), target in 1i64..=40) {
        if let Some(k) = a.uniform_preimage_extent(target) {
            let mut counts = vec![0i64; target as usize];
            for i in 0..a.size() {
                let x = a.index_of_int(i);
                prop_assert!(x < target, "{} maps {} to {} outside {}", a, i, x, target);
                counts[x as usize] += 1;
            }
            prop_assert!(counts.iter().all(|&c| c == k), "{} onto {}: {:?} not all {}", a, target, counts, k);
        }
    }
}
