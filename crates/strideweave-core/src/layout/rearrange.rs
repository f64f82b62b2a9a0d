//! Rebuilding a hierarchy from extracted sublayouts, and the uniform preimage extent
//! (docs/spec/layout-and-dtype.md §9, "Rearrange").
//!
//! `rearrange` picks sublayouts of a layout (its top-level modes, or the modes that a
//! selection of mode paths names), and arranges them into the hierarchy an [`OutputTree`]
//! describes: `Id(n)` is the n-th sublayout, `Unit` a `1:0` placeholder mode, `Branch` a
//! nested mode. `[2,3]:[1,2]` with `Branch[Id(1), Unit, Id(0)]` gives `[3,1,2]:[2,0,1]`.
//!
//! ```
//! use strideweave_core::layout;
//! use strideweave_core::layout::OutputTree;
//!
//! let a = layout!([2, 3] : [1, 2]).unwrap();
//! let swapped = a.rearrange(&OutputTree::Branch(vec![OutputTree::Id(1), OutputTree::Id(0)]), None).unwrap();
//! assert_eq!((swapped.leaf_extents().to_vec(), swapped.leaf_strides().to_vec()), (vec![3, 2], vec![2, 1]));
//! // A selection by mode path: only mode 1, with a unit mode before it.
//! let picked = a.rearrange(&OutputTree::Branch(vec![OutputTree::Unit, OutputTree::Id(0)]), Some(&[vec![1]])).unwrap();
//! assert_eq!(picked.leaf_extents().to_vec(), vec![1, 3]);
//! ```

use super::algebra::Cute;
use super::{Layout, LayoutError};

/// The hierarchy `rearrange` builds: the output of Python's `Tree(...)`, `Node.id(n)` and
/// `Node.Leaf`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OutputTree {
    /// The n-th extracted sublayout, whole (a nested sublayout stays one nested mode).
    Id(usize),
    /// A placeholder mode `1:0` (one coordinate, stride 0).
    Unit,
    /// A nested mode whose children are built in order; at the root, the top-level modes.
    Branch(Vec<OutputTree>),
}

impl OutputTree {
    fn build(&self, subs: &[Cute]) -> Result<Cute, LayoutError> {
        Ok(match self {
            OutputTree::Id(n) => {
                subs.get(*n).cloned().ok_or(LayoutError::SublayoutIdOutOfRange { id: *n, count: subs.len() })?
            }
            OutputTree::Unit => Cute::Int(1, 0),
            OutputTree::Branch(children) if children.is_empty() => return Err(LayoutError::EmptyOutputTree),
            OutputTree::Branch(children) => {
                Cute::Tup(children.iter().map(|c| c.build(subs)).collect::<Result<_, _>>()?)
            }
        })
    }
}

/// The mode a path of child indices names, from the layout's top-level modes down.
fn mode_at(top: &Cute, path: &[usize]) -> Result<Cute, LayoutError> {
    let mut here = top.clone();
    for (step, &i) in path.iter().enumerate() {
        // A leaf mode has no children to step into: 0 modes to choose from.
        let modes = match (&here, step) {
            (Cute::Tup(v), _) => v.clone(),
            (Cute::Int(..), 0) => vec![here.clone()],
            (Cute::Int(..), _) => Vec::new(),
        };
        here = modes.get(i).cloned().ok_or_else(|| LayoutError::ModePathOutOfRange {
            path: path.to_vec(),
            step,
            modes: modes.len(),
        })?;
    }
    Ok(here)
}

impl Layout {
    /// Rebuild a hierarchy from sublayouts: with `selection` `None` the sublayouts are the
    /// top-level modes; otherwise sublayout `n` is the mode that path `selection[n]` names
    /// (child indices from the top level down; an empty path is the whole layout). `output`
    /// arranges them: a `Branch` root gives the top-level modes, an `Id` root that one
    /// sublayout. Sublayouts may be used more than once or not at all.
    ///
    /// Errors: `SublayoutIdOutOfRange`, `ModePathOutOfRange`, `EmptyOutputTree`.
    ///
    /// ```
    /// use strideweave_core::layout::{Layout, OutputTree};
    /// let a = Layout::concat(&Layout::leaf(2, 1).unwrap(), &Layout::leaf(3, 2).unwrap()).unwrap();
    /// let out = OutputTree::Branch(vec![OutputTree::Id(1), OutputTree::Unit, OutputTree::Id(0)]);
    /// let r = a.rearrange(&out, None).unwrap();
    /// assert_eq!(r.leaf_extents().to_vec(), vec![3, 1, 2]);
    /// assert_eq!(r.leaf_strides().to_vec(), vec![2, 0, 1]);
    /// ```
    pub fn rearrange(&self, output: &OutputTree, selection: Option<&[Vec<usize>]>) -> Result<Layout, LayoutError> {
        let top = Cute::from_layout(self);
        let subs: Vec<Cute> = match selection {
            None => match &top {
                Cute::Tup(v) => v.clone(),
                Cute::Int(..) => vec![top.clone()],
            },
            Some(paths) => paths.iter().map(|p| mode_at(&top, p)).collect::<Result<_, _>>()?,
        };
        output.build(&subs)?.to_layout()
    }

    /// `Some(k)` if this layout provably maps exactly `k` coordinates onto each index of
    /// `[0, target_size)`, else `None`: its stride-0 leaves repeat each coordinate of the
    /// others (`k` is the product of their extents), and the others, sorted by stride, must
    /// tile `[0, target_size)` exactly (each stride what the smaller leaves reach).
    /// `[4,3]:[0,1]` onto 3 gives `Some(4)`.
    ///
    /// ```
    /// use strideweave_core::layout::Layout;
    /// let a = Layout::concat(&Layout::leaf(4, 0).unwrap(), &Layout::leaf(3, 1).unwrap()).unwrap();
    /// assert_eq!(a.uniform_preimage_extent(3), Some(4));
    /// assert_eq!(a.uniform_preimage_extent(4), None);
    /// ```
    pub fn uniform_preimage_extent(&self, target_size: i64) -> Option<i64> {
        let mut repeat = 1i64;
        let mut moving: Vec<(i64, i64)> = Vec::new();
        for (s, d) in self.infix() {
            if s == 1 {
                continue;
            }
            if d == 0 {
                repeat = repeat.checked_mul(s)?;
            } else {
                moving.push((d, s));
            }
        }
        moving.sort_unstable();
        let mut reached = 1i64;
        for (d, s) in moving {
            if d != reached {
                return None;
            }
            reached = reached.checked_mul(s)?;
        }
        (reached == target_size).then_some(repeat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(s: i64, d: i64) -> Layout {
        Layout::leaf(s, d).unwrap()
    }

    #[test]
    fn spec_example_and_selection() {
        let a = Layout::concat(&leaf(2, 1), &leaf(3, 2)).unwrap();
        let out = OutputTree::Branch(vec![OutputTree::Id(1), OutputTree::Unit, OutputTree::Id(0)]);
        let r = a.rearrange(&out, None).unwrap();
        assert_eq!((r.leaf_extents().to_vec(), r.leaf_strides().to_vec()), (vec![3, 1, 2], vec![2, 0, 1]));
        // Nested output: ((id1, id0),) is one nested mode.
        let nested = OutputTree::Branch(vec![OutputTree::Branch(vec![OutputTree::Id(1), OutputTree::Id(0)])]);
        let r = a.rearrange(&nested, None).unwrap();
        assert_eq!(r.rank(), 1);
        assert_eq!((r.leaf_extents().to_vec(), r.leaf_strides().to_vec(), r.depth()), (vec![3, 2], vec![2, 1], 2));
        // A selection by path: the leaf inside a nested mode, then the whole layout.
        let n = Layout::concat(&leaf(4, 1), &r).unwrap(); // [4,[3,2]]:[1,[2,1]]
        let picked =
            n.rearrange(&OutputTree::Branch(vec![OutputTree::Id(0), OutputTree::Id(1)]), Some(&[vec![1, 1], vec![]]));
        let picked = picked.unwrap();
        assert_eq!(
            (picked.leaf_extents().to_vec(), picked.leaf_strides().to_vec()),
            (vec![2, 4, 3, 2], vec![1, 1, 2, 1])
        );
    }

    #[test]
    fn errors_name_the_cause() {
        let a = Layout::concat(&leaf(2, 1), &leaf(3, 2)).unwrap();
        assert_eq!(
            a.rearrange(&OutputTree::Branch(vec![OutputTree::Id(2)]), None),
            Err(LayoutError::SublayoutIdOutOfRange { id: 2, count: 2 })
        );
        assert_eq!(a.rearrange(&OutputTree::Branch(vec![]), None), Err(LayoutError::EmptyOutputTree));
        assert_eq!(
            a.rearrange(&OutputTree::Id(0), Some(&[vec![0, 0]])),
            Err(LayoutError::ModePathOutOfRange { path: vec![0, 0], step: 1, modes: 0 })
        );
    }

    #[test]
    fn preimage_extent() {
        let a = Layout::concat(&leaf(4, 0), &leaf(3, 1)).unwrap();
        assert_eq!(a.uniform_preimage_extent(3), Some(4));
        assert_eq!(a.uniform_preimage_extent(2), None);
        assert_eq!(Layout::concat(&leaf(2, 1), &leaf(2, 1)).unwrap().uniform_preimage_extent(3), None);
        assert_eq!(leaf(5, 0).uniform_preimage_extent(1), Some(5));
    }
}
