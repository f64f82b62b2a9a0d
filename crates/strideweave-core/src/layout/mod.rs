//! Hierarchical (CuTe-style) layouts: `Shape` and `Stride` trees and the `Layout` algebra
//! of layout-and-dtype.md §2–§7.
//!
//! * [`tree`]: the immutable integer tree shared by `Shape` and `Stride`.
//! * [`Shape`], [`Stride`]: validated trees (extents ≥ 1, strides ≥ 0).
//! * [`layout::Layout`]: congruent shape + stride with cached size, cosize and leaf modes.
//! * [`plan`]: the one loop planner (filter, order, coalesce, bounds) every strided walk uses.
//! * Keys: [`Coord`] for Rust callers, and the [`KeyNode`] / [`KeySeq`] traits so that the
//!   Python binding can walk a Python key in place without first converting it.

pub mod injective;
#[allow(clippy::module_inception)]
pub mod layout;
pub mod plan;
pub mod tree;

#[cfg(test)]
mod proptests;

use std::fmt;
use std::ops::Deref;

pub use layout::{Layout, ProfileNode};
pub use tree::{IntTree, Mode, Nested};

/// Why a layout operation failed. The variants map one-to-one onto the Python exception
/// classes the spec names (ValueError, TypeError, OverflowError, IndexError).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// Bad value (or, at construction, bad type): ValueError.
    Value(String),
    /// Bad key type (bool, float, str, None, …): TypeError.
    Type(String),
    /// A size, cosize or integer beyond signed 64 bits: OverflowError.
    Overflow(String),
    /// Top-level selection out of range: IndexError.
    Index(String),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Value(m)
            | LayoutError::Type(m)
            | LayoutError::Overflow(m)
            | LayoutError::Index(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for LayoutError {}

/// Checked product of `values`; `None` when it leaves signed 64 bits.
pub(crate) fn checked_product(values: &[i64]) -> Option<i64> {
    values.iter().try_fold(1i64, |acc, &v| acc.checked_mul(v))
}

macro_rules! tree_newtype {
    ($(#[$doc:meta])* $name:ident, $what:literal, $min:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub struct $name(IntTree);

        impl $name {
            /// Validate `tree`: every leaf must be at least the minimum, else `LayoutError::Value`.
            pub fn new(tree: IntTree) -> Result<$name, LayoutError> {
                if let Some(bad) = tree.leaves().iter().find(|&&v| v < $min) {
                    return Err(LayoutError::Value(format!(
                        concat!($what, " must be >= ", $min, ", got {}"), bad
                    )));
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
    Shape, "extent", 1
);
tree_newtype!(
    /// A hierarchical tree of strides, each at least 0.
    Stride, "stride", 0
);

impl Shape {
    /// Product of the extents (1 for rank 0); `LayoutError::Overflow` beyond signed 64 bits.
    pub fn size(&self) -> Result<i64, LayoutError> {
        checked_product(self.leaves())
            .ok_or_else(|| LayoutError::Overflow("shape size exceeds 2**63-1".into()))
    }

    /// Coordinate of ordinal `k`, mixed radix, first mode fastest, congruent with the
    /// shape. `k` outside `[0, size)` is `LayoutError::Value`.
    pub fn decode(&self, k: i64) -> Result<Coord, LayoutError> {
        let in_range = k >= 0 && checked_product(self.leaves()).is_none_or(|size| k < size);
        if !in_range {
            return Err(LayoutError::Value(format!(
                "ordinal {k} is outside [0, size)"
            )));
        }
        let mut rest = k;
        Ok(Coord::Seq(
            self.modes()
                .iter()
                .map(|m| decode_mode(m, &mut rest))
                .collect(),
        ))
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
pub enum Coord {
    /// A leaf coordinate, or an ordinal that expands inside the subtree it replaces.
    Int(i64),
    /// One coordinate per mode of the corresponding level.
    Seq(Vec<Coord>),
}

/// What one node of a key is: an integer, or a sequence of child keys.
pub enum KeyView<S> {
    /// An integer component.
    Int(i64),
    /// A sequence (list or tuple in Python) of child components.
    Seq(S),
}

/// A node of a hierarchical key that the index walker can inspect in place.
///
/// `view` reports a component of the wrong type as `LayoutError::Type` and an integer that
/// cannot be a valid component (e.g. beyond 64 bits) as `LayoutError::Value`.
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
