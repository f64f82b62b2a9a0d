//! Hierarchical (CuTe-style) layouts: `Shape` and `Stride` trees and the `Layout` algebra
//! of docs/spec/layout-and-dtype.md §2–§7.
//!
//! * [`tree`]: the immutable integer tree shared by `Shape` and `Stride`.
//! * [`Shape`], [`Stride`]: validated trees (extents ≥ 1, strides ≥ 0).
//! * [`layout::Layout`]: congruent shape + stride with cached size, cosize and leaf modes.
//! * [`plan`]: the one loop planner (filter, order, coalesce, bounds) every strided walk uses.
//! * Keys: [`Coord`] for Rust callers, and the [`KeyNode`] / [`KeySeq`] traits so that the
//!   Python binding can walk a Python key in place without first converting it.
//!
//! ```
//! use strideweave_core::layout::{Coord, Layout, Shape};
//!
//! // The canonical layout of a 2 x 3 shape: first mode fastest.
//! let l = Layout::canonical(&Shape::flat(&[2, 3]).unwrap()).unwrap();
//! assert_eq!((l.size(), l.cosize(), l.index_of_int(4)), (6, 6, 4));
//! let coord = Coord::Seq(vec![Coord::Int(1), Coord::Int(2)]);
//! assert_eq!(l.index_of_coord(&coord).unwrap(), 5);
//! assert!(l.try_index_of_int(6).is_err());
//! ```

pub mod algebra;
pub mod injective;
#[allow(clippy::module_inception)]
pub mod layout;
pub mod plan;
pub mod rearrange;
pub mod tree;

#[cfg(test)]
mod proptests;

use std::fmt;
use std::ops::Deref;

use thiserror::Error;

pub use algebra::Tiler;
pub use layout::{Layout, ProfileNode};
pub use rearrange::OutputTree;
pub use tree::{IntTree, Mode, Nested};

/// Why a layout operation failed, by cause.
///
/// The variants say what was wrong, not which Python exception it becomes: the binding maps
/// them in one place (`strideweave-py/src/error.rs`). The last four variants are reported by
/// a [`KeyNode`] while it reads a key (the binding's Python keys), the rest by the algebra.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// A Shape leaf below 1.
    #[error("extent must be >= 1, got {0}")]
    NonPositiveExtent(i64),
    /// A Stride leaf below 0.
    #[error("stride must be >= 0, got {0}")]
    NegativeStride(i64),
    /// A nested mode without children.
    #[error("empty nested mode")]
    EmptyNestedMode,
    /// A shape and a stride whose trees differ in structure. (The trees are boxed, here and
    /// below, so that every `Result<_, LayoutError>` stays small on the indexing path.)
    #[error("shape {shape} and stride {stride} are not congruent")]
    NotCongruent {
        /// The shape.
        shape: Box<Shape>,
        /// The stride whose tree differs from it.
        stride: Box<Stride>,
    },
    /// The product of the extents leaves signed 64 bits.
    #[error("shape size exceeds 2**63-1")]
    SizeOverflow,
    /// One past the greatest index leaves signed 64 bits.
    #[error("layout cosize exceeds 2**63-1")]
    CosizeOverflow,
    /// An ordinal to decode outside `[0, size)`.
    #[error("ordinal {0} is outside [0, size)")]
    OrdinalOutOfRange(i64),
    /// An integer key outside `[0, size)`.
    #[error("integer key {key} is outside [0, {size})")]
    IntegerKeyOutOfRange {
        /// The key.
        key: i64,
        /// The layout's size.
        size: i64,
    },
    /// A key level with more or fewer components than the layout level has modes.
    #[error("key has {components} components where the layout has {modes} modes")]
    ComponentCountMismatch {
        /// Components in the key level.
        components: usize,
        /// Modes in the layout level.
        modes: usize,
    },
    /// A leaf coordinate outside `[0, extent)`.
    #[error("coordinate {coordinate} is outside [0, {extent})")]
    CoordinateOutOfRange {
        /// The coordinate.
        coordinate: i64,
        /// The leaf's extent.
        extent: i64,
    },
    /// An integer standing for a nested mode, outside `[0, size of that subtree)`.
    #[error("coordinate {coordinate} is outside [0, {size}) of its subtree")]
    SubtreeOrdinalOutOfRange {
        /// The integer given for the nested mode.
        coordinate: i64,
        /// The size of that subtree.
        size: i64,
    },
    /// A sequence where the layout has an integer mode.
    #[error("a sequence where a leaf coordinate belongs")]
    SequenceForLeaf,
    /// A broadcast target whose mode structure (profile) differs from the layout's shape.
    #[error("cannot broadcast {from} to {to}: the mode structure differs")]
    BroadcastStructureMismatch {
        /// The layout's shape.
        from: Box<Shape>,
        /// The target shape.
        to: Box<Shape>,
    },
    /// A broadcast leaf whose extent is neither the target's nor 1.
    #[error("cannot broadcast extent {extent} to {target} in {from} to {to}")]
    BroadcastExtentMismatch {
        /// The layout's leaf extent.
        extent: i64,
        /// The target's extent for that leaf.
        target: i64,
        /// The layout's shape.
        from: Box<Shape>,
        /// The target shape.
        to: Box<Shape>,
    },
    /// A permutation with more or fewer entries than the rank.
    #[error("order has {entries} entries but the layout has rank {rank}")]
    PermutationLength {
        /// Entries in the order given.
        entries: usize,
        /// The layout's rank.
        rank: usize,
    },
    /// A permutation that repeats or leaves out a mode.
    #[error("order {order:?} is not a permutation of range({rank})")]
    NotAPermutation {
        /// The order given.
        order: Vec<usize>,
        /// The layout's rank.
        rank: usize,
    },
    /// A top-level mode index outside `[-rank, rank)`.
    #[error("mode index {index} out of range for rank {rank}")]
    ModeIndexOutOfRange {
        /// The index given.
        index: i64,
        /// The layout's rank.
        rank: usize,
    },
    /// A bool used as a key component (it is an int in Python, but never a coordinate).
    #[error("a bool is not a valid coordinate")]
    BoolCoordinate,
    /// A key component that is neither an integer nor a sequence.
    #[error("a key must be an int or a list/tuple of keys, got {type_name}")]
    KeyComponentType {
        /// The type name of the component.
        type_name: String,
    },
    /// An integer component beyond 64 bits, so outside every extent.
    #[error("coordinate {coordinate} is out of range")]
    CoordinateBeyond64Bits {
        /// The coordinate in decimal.
        coordinate: String,
    },
    /// A key sequence whose component could not be read (the reader's own message).
    #[error("{0}")]
    KeyComponentUnreadable(String),
    /// Composition: a stride of B and an extent of A, neither dividing the other.
    #[error("composition needs stride divisibility: stride {stride} and extent {extent} do not divide one another")]
    CompositionStrideNotDivisible {
        /// The stride of B.
        stride: i64,
        /// The extent of A it meets.
        extent: i64,
    },
    /// Composition: B's remaining extent not divisible by the part one of A's modes takes.
    #[error("composition needs shape divisibility: extent {shape} is not divisible by {extent}")]
    CompositionShapeNotDivisible {
        /// B's remaining extent.
        shape: i64,
        /// The part of A's mode it should divide into.
        extent: i64,
    },
    /// Complement of a layout two of whose modes overlap.
    #[error(
        "complement needs an injective layout: stride {stride} falls inside the {reached} indices already reached"
    )]
    ComplementNotInjective {
        /// The stride that overlaps.
        stride: i64,
        /// How many indices the smaller modes already reach.
        reached: i64,
    },
    /// Complement: a stride that is not a multiple of what the smaller modes reach.
    #[error("complement needs stride divisibility: stride {stride} is not a multiple of {reached}, what the smaller modes reach")]
    ComplementStrideNotDivisible {
        /// The stride that is not a multiple.
        stride: i64,
        /// How many indices the smaller modes reach.
        reached: i64,
    },
    /// A left inverse of a layout that maps two coordinates to one index.
    #[error("left_inverse needs an injective layout")]
    NotInjective,
    /// A tuple tiler with more modes than the layout.
    #[error("tiler has {tiler} modes but the layout has rank {rank}")]
    TilerRankExceedsLayout {
        /// The tiler's mode count.
        tiler: usize,
        /// The layout's rank.
        rank: usize,
    },
    /// A coalesce profile with more modes than the layout level.
    #[error("profile has {profile} modes but the layout has rank {rank}")]
    ProfileRankExceedsLayout {
        /// The profile's mode count.
        profile: usize,
        /// The layout level's rank.
        rank: usize,
    },
    /// A rearrange output naming a sublayout that was not extracted.
    #[error("rearrange output names Node.id({id}) but only {count} sublayouts were selected")]
    SublayoutIdOutOfRange {
        /// The id in the output tree.
        id: usize,
        /// How many sublayouts the selection extracted.
        count: usize,
    },
    /// A rearrange selection path that leaves the layout's modes.
    #[error(
        "rearrange selection path {path:?} is not a mode of the layout (step {step} has {modes} modes to choose from)"
    )]
    ModePathOutOfRange {
        /// The whole path.
        path: Vec<usize>,
        /// The 0-based step that failed.
        step: usize,
        /// How many modes that step could choose from.
        modes: usize,
    },
    /// A rearrange output tree node without children.
    #[error("rearrange output has an empty Tree")]
    EmptyOutputTree,
}

/// Checked product of `values`; `None` when it leaves signed 64 bits.
pub(crate) fn checked_product(values: &[i64]) -> Option<i64> {
    values.iter().try_fold(1i64, |acc, &v| acc.checked_mul(v))
}

macro_rules! tree_newtype {
    ($(#[$doc:meta])* $name:ident, $min:literal, $below:path) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub struct $name(IntTree);

        impl $name {
            /// Validate `tree`: every leaf must be at least the minimum (else the error
            /// naming the leaf below it).
            pub fn new(tree: IntTree) -> Result<$name, LayoutError> {
                if let Some(&bad) = tree.leaves().iter().find(|&&v| v < $min) {
                    return Err($below(bad));
                }
                Ok($name(tree))
            }

            /// A flat tree with one leaf mode per value (validated as in [`Self::new`]).
            pub fn flat(values: &[i64]) -> Result<$name, LayoutError> {
                $name::new(IntTree::flat(values))
            }

            /// Wrap a tree whose leaves are already known to be valid.
            #[allow(dead_code)] // generated for both trees; only some are used per tree
            pub(crate) fn from_tree_unchecked(tree: IntTree) -> $name {
                debug_assert!(tree.leaves().iter().all(|&v| v >= $min));
                $name(tree)
            }

            /// The underlying tree.
            pub fn tree(&self) -> &IntTree {
                &self.0
            }

            /// Top-level mode `i` on its own (a nested mode's children become the top
            /// level). Panics if `i >= rank`.
            pub fn mode(&self, i: usize) -> $name {
                $name(self.0.mode_tree(i))
            }

            /// The top-level modes at `indices`, in order. Panics on an index `>= rank`.
            pub fn select(&self, indices: &[usize]) -> $name {
                $name(self.0.select(indices))
            }

            /// The top-level modes of `a`, then those of `b`.
            pub fn concat(a: &$name, b: &$name) -> $name {
                $name(IntTree::concat(&a.0, &b.0))
            }

            /// §7 append: `a` if `b` is rank 0, the concat if `b` is a leaf, else `b` nested.
            pub fn append(a: &$name, b: &$name) -> $name {
                $name(IntTree::append(&a.0, &b.0))
            }

            /// `order[j]` is the source top-level mode placed at `j`.
            pub fn permute(&self, order: &[usize]) -> Result<$name, LayoutError> {
                Ok($name(self.0.permute(order)?))
            }
        }

        impl Deref for $name {
            type Target = IntTree;
            fn deref(&self) -> &IntTree {
                &self.0
            }
        }

        impl fmt::Display for $name {
            /// `Shape<(2, (3, 4))>`, the Python repr.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(concat!(stringify!($name), "<"))?;
                self.0.fmt_tuple(f)?;
                f.write_str(">")
            }
        }
    };
}

tree_newtype!(
    /// A hierarchical tree of extents, each at least 1.
    Shape, 1, LayoutError::NonPositiveExtent
);
tree_newtype!(
    /// A hierarchical tree of strides, each at least 0.
    Stride, 0, LayoutError::NegativeStride
);

impl Shape {
    /// Product of the extents (1 for rank 0); `SizeOverflow` beyond signed 64 bits.
    pub fn size(&self) -> Result<i64, LayoutError> {
        checked_product(self.leaves()).ok_or(LayoutError::SizeOverflow)
    }

    /// Coordinate of ordinal `k`, mixed radix, first mode fastest, congruent with the
    /// shape. `k` outside `[0, size)` is `OrdinalOutOfRange`.
    pub fn decode(&self, k: i64) -> Result<Coord, LayoutError> {
        let in_range = k >= 0 && checked_product(self.leaves()).is_none_or(|size| k < size);
        if !in_range {
            return Err(LayoutError::OrdinalOutOfRange(k));
        }
        let mut rest = k;
        Ok(Coord::Seq(self.modes().iter().map(|m| decode_mode(m, &mut rest)).collect()))
    }

    /// Inverse of [`Shape::decode`]: the ordinal of a hierarchical key (an int may replace
    /// any subtree). Key errors are those of [`Layout::index_of_key`].
    pub fn encode<K: KeyNode>(&self, key: &K) -> Result<i64, LayoutError> {
        let canonical = Layout::canonical(self)?;
        canonical.index_of_key(key)
    }
}

fn decode_mode(mode: &Mode, rest: &mut i64) -> Coord {
    match mode {
        Mode::Leaf(e) => {
            let c = *rest % e;
            *rest /= e;
            Coord::Int(c)
        }
        Mode::Nested(n) => Coord::Seq(n.children().iter().map(|m| decode_mode(m, rest)).collect()),
    }
}

/// A hierarchical coordinate owned by Rust: an int (possibly standing for a whole subtree)
/// or a sequence of coordinates.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Coord {
    /// A leaf coordinate, or an ordinal that expands inside the subtree it replaces.
    Int(i64),
    /// One coordinate per mode of the corresponding level.
    Seq(Vec<Coord>),
}

/// What one node of a key is: an integer, or a sequence of child keys.
#[derive(Debug)]
#[non_exhaustive]
pub enum KeyView<S> {
    /// An integer component.
    Int(i64),
    /// A sequence (list or tuple in Python) of child components.
    Seq(S),
}

/// A node of a hierarchical key that the index walker can inspect in place.
///
/// `view` reports a component of the wrong type (`BoolCoordinate`, `KeyComponentType`) and an
/// integer that cannot be a valid component (`CoordinateBeyond64Bits`).
pub trait KeyNode: Sized {
    /// The sequence type of this key representation.
    type Seq: KeySeq<Node = Self>;
    /// Classify this node.
    fn view(&self) -> Result<KeyView<Self::Seq>, LayoutError>;
}

/// A sequence of key nodes.
pub trait KeySeq {
    /// The node type.
    type Node: KeyNode<Seq = Self>;
    /// Number of components.
    fn len(&self) -> usize;
    /// Whether there are no components.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Component `i < len()`.
    fn get(&self, i: usize) -> Result<Self::Node, LayoutError>;
}

impl<'a> KeyNode for &'a Coord {
    type Seq = &'a [Coord];
    fn view(&self) -> Result<KeyView<&'a [Coord]>, LayoutError> {
        Ok(match self {
            Coord::Int(v) => KeyView::Int(*v),
            Coord::Seq(s) => KeyView::Seq(s.as_slice()),
        })
    }
}

impl<'a> KeySeq for &'a [Coord] {
    type Node = &'a Coord;
    fn len(&self) -> usize {
        <[Coord]>::len(self)
    }
    fn get(&self, i: usize) -> Result<&'a Coord, LayoutError> {
        Ok(&self[i])
    }
}

impl fmt::Display for Coord {
    /// Python-tuple rendering, e.g. `(4, (2, 2))`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Coord::Int(v) => write!(f, "{v}"),
            Coord::Seq(s) => {
                f.write_str("(")?;
                for (i, c) in s.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{c}")?;
                }
                if s.len() == 1 {
                    f.write_str(",")?;
                }
                f.write_str(")")
            }
        }
    }
}
