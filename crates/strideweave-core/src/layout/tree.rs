//! Immutable hierarchical integer trees: the common representation of `Shape` and `Stride`.
//!
//! A tree is a (possibly empty) sequence of top-level *modes*; a mode is either a leaf
//! integer or a non-empty nested sequence of modes. Only the top level may be empty
//! (docs/spec/layout-and-dtype.md §2). The depth-first sequence of leaves is cached when the tree is
//! built because every hot path (integer indexing, copy and compute kernels) walks leaves,
//! not the hierarchy.
//!
//! ```
//! use strideweave_core::layout::{IntTree, Mode};
//!
//! let t = IntTree::new(vec![Mode::Leaf(2), Mode::nested(vec![Mode::Leaf(3), Mode::Leaf(4)]).unwrap()]);
//! assert_eq!((t.leaves(), t.depth()), (&[2, 3, 4][..], 2));
//! ```

use std::fmt;
use std::hash::{Hash, Hasher};

use super::LayoutError;

/// One mode of a hierarchical tree: a leaf integer or a non-empty nested sequence.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// An integer leaf (an extent in a `Shape`, a stride in a `Stride`).
    Leaf(i64),
    /// A nested mode; never empty (enforced by [`Mode::nested`]).
    Nested(Nested),
}

/// The children of a nested mode, with the leaf count cached so that an integer key that
/// replaces a whole subtree can find its leaf range without walking the subtree.
#[derive(Clone, Debug)]
pub struct Nested {
    children: Box<[Mode]>,
    leaf_count: usize,
    depth: usize,
}

// Equality and hashing look only at the children: the cached fields are functions of them.
impl PartialEq for Nested {
    fn eq(&self, other: &Self) -> bool {
        self.children == other.children
    }
}
impl Eq for Nested {}
impl Hash for Nested {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.children.hash(state)
    }
}

impl Nested {
    /// The child modes, in order (never empty).
    pub fn children(&self) -> &[Mode] {
        &self.children
    }

    /// Number of leaves under this nested mode.
    pub fn leaf_count(&self) -> usize {
        self.leaf_count
    }
}

impl Mode {
    /// A nested mode; an empty `children` is rejected with `EmptyNestedMode`.
    pub fn nested(children: Vec<Mode>) -> Result<Mode, LayoutError> {
        if children.is_empty() {
            return Err(LayoutError::EmptyNestedMode);
        }
        let leaf_count = children.iter().map(Mode::leaf_count).sum();
        let depth = 1 + children.iter().map(Mode::depth).max().unwrap_or(0);
        Ok(Mode::Nested(Nested { children: children.into_boxed_slice(), leaf_count, depth }))
    }

    /// Number of leaves under this mode (1 for a leaf).
    pub fn leaf_count(&self) -> usize {
        match self {
            Mode::Leaf(_) => 1,
            Mode::Nested(n) => n.leaf_count,
        }
    }

    /// Nesting depth of the mode: 0 for a leaf, 1 for a flat nested mode, and so on.
    pub fn depth(&self) -> usize {
        match self {
            Mode::Leaf(_) => 0,
            Mode::Nested(n) => n.depth,
        }
    }

    fn push_leaves(&self, out: &mut Vec<i64>) {
        match self {
            Mode::Leaf(v) => out.push(*v),
            Mode::Nested(n) => n.children.iter().for_each(|c| c.push_leaves(out)),
        }
    }

    /// Whether `self` and `other` have the same structure (int with int, nested with
    /// nested of the same length, recursively), ignoring values.
    pub fn congruent(&self, other: &Mode) -> bool {
        match (self, other) {
            (Mode::Leaf(_), Mode::Leaf(_)) => true,
            (Mode::Nested(a), Mode::Nested(b)) => congruent_modes(&a.children, &b.children),
            _ => false,
        }
    }

    /// Rebuild the mode with its leaves taken, in order, from `leaves` (same structure).
    fn with_leaves(&self, leaves: &mut impl Iterator<Item = i64>) -> Mode {
        match self {
            Mode::Leaf(_) => Mode::Leaf(leaves.next().expect("leaf count matches")),
            Mode::Nested(n) => Mode::Nested(Nested {
                children: n.children.iter().map(|c| c.with_leaves(leaves)).collect(),
                leaf_count: n.leaf_count,
                depth: n.depth,
            }),
        }
    }
}

pub(crate) fn congruent_modes(a: &[Mode], b: &[Mode]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.congruent(y))
}

/// An immutable hierarchical integer tree with its depth-first leaves cached.
#[derive(Clone, Debug)]
pub struct IntTree {
    modes: Vec<Mode>,
    leaves: Vec<i64>,
    depth: usize,
}

impl PartialEq for IntTree {
    fn eq(&self, other: &Self) -> bool {
        self.modes == other.modes
    }
}
impl Eq for IntTree {}
impl Hash for IntTree {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.modes.hash(state)
    }
}

impl IntTree {
    /// A tree with the given top-level modes (may be empty: rank 0).
    pub fn new(modes: Vec<Mode>) -> IntTree {
        let mut leaves = Vec::with_capacity(modes.iter().map(Mode::leaf_count).sum());
        modes.iter().for_each(|m| m.push_leaves(&mut leaves));
        let depth = 1 + modes.iter().map(Mode::depth).max().unwrap_or(0);
        IntTree { modes, leaves, depth }
    }

    /// A flat tree: one leaf mode per value.
    pub fn flat(values: &[i64]) -> IntTree {
        IntTree::new(values.iter().map(|&v| Mode::Leaf(v)).collect())
    }

    /// The top-level modes.
    pub fn modes(&self) -> &[Mode] {
        &self.modes
    }

    /// Number of top-level modes.
    pub fn rank(&self) -> usize {
        self.modes.len()
    }

    /// All leaves, depth-first, left to right.
    pub fn leaves(&self) -> &[i64] {
        &self.leaves
    }

    /// 1 if flat (rank 0 included), else 1 + the greatest child depth.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Rank 1 with an integer mode.
    pub fn is_leaf(&self) -> bool {
        matches!(self.modes.as_slice(), [Mode::Leaf(_)])
    }

    /// Same structure (ignoring values) as `other`.
    pub fn congruent(&self, other: &IntTree) -> bool {
        congruent_modes(&self.modes, &other.modes)
    }

    /// The same structure with the leaves replaced, in depth-first order, by `leaves`.
    ///
    /// Panics if `leaves` is shorter than this tree's leaf count (a caller bug).
    pub fn with_leaves(&self, leaves: &[i64]) -> IntTree {
        assert_eq!(leaves.len(), self.leaves.len(), "leaf count must match");
        let mut it = leaves.iter().copied();
        let modes = self.modes.iter().map(|m| m.with_leaves(&mut it)).collect();
        IntTree { modes, leaves: leaves.to_vec(), depth: self.depth }
    }

    /// Top-level mode `i` as a tree of its own: a leaf becomes rank 1, and a nested
    /// mode's children become the top-level modes. Panics if `i >= rank`.
    pub fn mode_tree(&self, i: usize) -> IntTree {
        match &self.modes[i] {
            m @ Mode::Leaf(_) => IntTree::new(vec![m.clone()]),
            Mode::Nested(n) => IntTree::new(n.children.to_vec()),
        }
    }

    /// The top-level modes at `indices`, in that order. Panics on an index `>= rank`.
    pub fn select(&self, indices: &[usize]) -> IntTree {
        IntTree::new(indices.iter().map(|&i| self.modes[i].clone()).collect())
    }

    /// The top-level modes of `a`, then those of `b`.
    pub fn concat(a: &IntTree, b: &IntTree) -> IntTree {
        IntTree::new(a.modes.iter().chain(&b.modes).cloned().collect())
    }

    /// `a` if `b` is rank 0; the concatenation if `b` is a leaf; otherwise `b`'s whole
    /// tree becomes one new last mode of `a`.
    pub fn append(a: &IntTree, b: &IntTree) -> IntTree {
        if b.rank() == 0 {
            a.clone()
        } else if b.is_leaf() {
            IntTree::concat(a, b)
        } else {
            let mut modes = a.modes.clone();
            modes.push(Mode::nested(b.modes.clone()).expect("rank > 0, so not empty"));
            IntTree::new(modes)
        }
    }

    /// `order[j]` is the source top-level mode placed at position `j`.
    /// `order` must be a permutation of `0..rank`, else `PermutationLength` or
    /// `NotAPermutation`.
    pub fn permute(&self, order: &[usize]) -> Result<IntTree, LayoutError> {
        check_permutation(order, self.rank())?;
        Ok(self.select(order))
    }

    /// Python-tuple rendering of the top level, e.g. `(2, (3, 4))`, `(4,)`, `()`.
    pub fn fmt_tuple(&self, f: &mut impl fmt::Write) -> fmt::Result {
        fmt_seq(&self.modes, f)
    }
}

/// Validate that `order` is a permutation of `0..rank`.
pub(crate) fn check_permutation(order: &[usize], rank: usize) -> Result<(), LayoutError> {
    if order.len() != rank {
        return Err(LayoutError::PermutationLength { entries: order.len(), rank });
    }
    let mut seen = vec![false; rank];
    for &i in order {
        if i >= rank || std::mem::replace(&mut seen[i], true) {
            return Err(LayoutError::NotAPermutation { order: order.to_vec(), rank });
        }
    }
    Ok(())
}

fn fmt_seq(modes: &[Mode], f: &mut impl fmt::Write) -> fmt::Result {
    f.write_char('(')?;
    for (i, m) in modes.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        match m {
            Mode::Leaf(v) => write!(f, "{v}")?,
            Mode::Nested(n) => fmt_seq(&n.children, f)?,
        }
    }
    if modes.len() == 1 {
        f.write_char(',')?;
    }
    f.write_char(')')
}

impl fmt::Display for IntTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_tuple(f)
    }
}
