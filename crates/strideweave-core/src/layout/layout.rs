//! `Layout`: a congruent `Shape` and `Stride`, mapping coordinates to scalar indices.
//!
//! ```
//! use strideweave_core::layout::{Layout, Shape, Stride};
//!
//! let l = Layout::new(Shape::flat(&[2, 3]).unwrap(), Stride::flat(&[3, 1]).unwrap()).unwrap();
//! assert_eq!((l.size(), l.cosize(), l.rank()), (6, 6, 2));
//! assert_eq!(l.index_of_int(1), 3); // ordinal 1 is coordinate (1, 0)
//! ```

use std::fmt;
use std::hash::{Hash, Hasher};

use super::tree::{check_permutation, IntTree, Mode};
use super::{checked_product, Coord, KeyNode, KeySeq, KeyView, LayoutError, Shape, Stride};

/// One marker of [`Layout::profile`]; the discriminants are the Python `Node` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum ProfileNode {
    /// An integer mode.
    Leaf = 1,
    /// Start of a nested mode.
    Push = 2,
    /// End of a nested mode.
    Pop = 3,
}

/// An immutable hierarchical layout.
///
/// Invariants (checked by every constructor): shape and stride are congruent, and both
/// `size` and `cosize` fit in `i64`. Consequently every index the layout produces for an
/// in-range key fits in `i64` and no index computation can overflow.
#[derive(Clone, Debug)]
pub struct Layout {
    shape: Shape,
    stride: Stride,
    size: i64,
    cosize: i64,
    /// How an ordinal becomes an index, decided once at construction.
    ordinal: OrdinalMap,
}

/// The shortcut [`Layout::index_of_int`] takes: most layouts element access meets are
/// compact in ordinal order or have a single non-trivial leaf, and neither needs the
/// mixed-radix decode (two divisions per leaf).
#[derive(Clone, Copy, Debug)]
enum OrdinalMap {
    /// Every leaf of extent > 1 has the product of the extents before it as its stride: the
    /// index is the ordinal.
    Identity,
    /// One leaf of extent > 1, with this stride (not 1): the index is `k * stride`.
    Single(i64),
    /// Anything else: the mixed-radix decode.
    Radix,
}

impl OrdinalMap {
    fn of(extents: &[i64], strides: &[i64]) -> OrdinalMap {
        let mut running = 1i64;
        let mut dense = true;
        let mut wide = None;
        let mut wide_count = 0;
        for (&e, &s) in extents.iter().zip(strides) {
            if e == 1 {
                continue;
            }
            dense &= s == running;
            // Cannot overflow: the running product never exceeds the layout's size.
            running *= e;
            wide = Some(s);
            wide_count += 1;
        }
        match (dense, wide_count, wide) {
            (true, _, _) => OrdinalMap::Identity,
            (false, 1, Some(s)) => OrdinalMap::Single(s),
            _ => OrdinalMap::Radix,
        }
    }
}

impl PartialEq for Layout {
    fn eq(&self, other: &Self) -> bool {
        self.shape == other.shape && self.stride == other.stride
    }
}
impl Eq for Layout {}
impl Hash for Layout {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.shape.hash(state);
        self.stride.hash(state);
    }
}

/// `Σ (k decoded mixed-radix over extents, first fastest) · strides`.
///
/// `k` must be in `[0, Π extents)`; then every term is bounded by the layout's cosize.
#[inline]
fn radix_index(extents: &[i64], strides: &[i64], mut k: i64) -> i64 {
    let mut acc = 0i64;
    for (&e, &s) in extents.iter().zip(strides) {
        acc += (k % e) * s;
        k /= e;
    }
    acc
}

impl Layout {
    /// `Layout(shape, stride)`: `NotCongruent` unless congruent, `SizeOverflow` or
    /// `CosizeOverflow` if the size or cosize exceeds `2**63 - 1`.
    pub fn new(shape: Shape, stride: Stride) -> Result<Layout, LayoutError> {
        if !shape.congruent(&stride) {
            return Err(LayoutError::NotCongruent { shape: Box::new(shape), stride: Box::new(stride) });
        }
        let size = shape.size()?;
        let cosize = shape
            .leaves()
            .iter()
            .zip(stride.leaves())
            .try_fold(1i64, |acc, (&e, &s)| (e - 1).checked_mul(s).and_then(|t| acc.checked_add(t)))
            .ok_or(LayoutError::CosizeOverflow)?;
        let ordinal = OrdinalMap::of(shape.leaves(), stride.leaves());
        Ok(Layout { shape, stride, size, cosize, ordinal })
    }

    /// The canonical injective layout of `shape` (§6): each leaf's stride is the product
    /// of the extents of all earlier leaves, depth-first. Compact and injective.
    pub fn canonical(shape: &Shape) -> Result<Layout, LayoutError> {
        let size = shape.size()?;
        let mut strides = Vec::with_capacity(shape.leaves().len());
        let mut running = 1i64;
        for &e in shape.leaves() {
            strides.push(running);
            // Cannot overflow: the running product never exceeds `size`.
            running *= e;
        }
        let stride = Stride::from_tree_unchecked(shape.tree().with_leaves(&strides));
        Ok(Layout { shape: shape.clone(), stride, size, cosize: size, ordinal: OrdinalMap::Identity })
    }

    /// A rank-1 layout `extent:stride`.
    pub fn leaf(extent: i64, stride: i64) -> Result<Layout, LayoutError> {
        Layout::new(Shape::flat(&[extent])?, Stride::flat(&[stride])?)
    }

    /// Build from trees already known to be congruent and overflow-free (sub-layouts).
    fn from_parts_unchecked(shape: Shape, stride: Stride) -> Layout {
        Layout::new(shape, stride).expect("a part of a valid layout is valid")
    }

    /// The shape tree.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The stride tree.
    pub fn stride(&self) -> &Stride {
        &self.stride
    }

    /// Number of coordinates (product of extents, 1 for rank 0).
    pub fn size(&self) -> i64 {
        self.size
    }

    /// `1 + Σ (extentᵢ − 1)·strideᵢ`: one past the greatest index reached.
    pub fn cosize(&self) -> i64 {
        self.cosize
    }

    /// Number of top-level modes.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// `shape.depth`.
    pub fn depth(&self) -> usize {
        self.shape.depth()
    }

    /// Rank 1 with an integer mode.
    pub fn is_leaf(&self) -> bool {
        self.shape.is_leaf()
    }

    /// Leaf extents, depth-first (first leaf fastest in integer indexing). Copy and
    /// compute kernels iterate layouts through this slice and [`Layout::leaf_strides`].
    pub fn leaf_extents(&self) -> &[i64] {
        self.shape.leaves()
    }

    /// Leaf strides matching [`Layout::leaf_extents`].
    pub fn leaf_strides(&self) -> &[i64] {
        self.stride.leaves()
    }

    /// `(extent, stride)` pairs of the leaves, depth-first.
    pub fn infix(&self) -> impl ExactSizeIterator<Item = (i64, i64)> + '_ {
        self.leaf_extents().iter().copied().zip(self.leaf_strides().iter().copied())
    }

    /// Depth-first structure markers: `Leaf` per int mode, `Push … Pop` around nested.
    pub fn profile(&self) -> Vec<ProfileNode> {
        profile_of(self.shape.tree())
    }

    /// Index of ordinal `k` (mixed radix, first leaf fastest). No allocation.
    ///
    /// `k` must be in `[0, size)`; callers that have not checked use
    /// [`Layout::try_index_of_int`]. Out-of-range `k` gives an unspecified value (never UB).
    #[inline]
    pub fn index_of_int(&self, k: i64) -> i64 {
        debug_assert!((0..self.size).contains(&k), "ordinal {k} outside [0, {})", self.size);
        match self.ordinal {
            OrdinalMap::Identity => k,
            OrdinalMap::Single(stride) => k * stride,
            OrdinalMap::Radix => radix_index(self.leaf_extents(), self.leaf_strides(), k),
        }
    }

    /// The stride `s` with which ordinal `k` has index `k * s` for every ordinal (1 for a
    /// layout compact in ordinal order), if there is one; `None` when the index needs the
    /// mixed-radix decode.
    pub(crate) fn ordinal_stride(&self) -> Option<i64> {
        match self.ordinal {
            OrdinalMap::Identity => Some(1),
            OrdinalMap::Single(stride) => Some(stride),
            OrdinalMap::Radix => None,
        }
    }

    /// [`Layout::index_of_int`] with the range check (`IntegerKeyOutOfRange` outside
    /// `[0, size)`).
    #[inline]
    pub fn try_index_of_int(&self, k: i64) -> Result<i64, LayoutError> {
        if !(0..self.size).contains(&k) {
            return Err(LayoutError::IntegerKeyOutOfRange { key: k, size: self.size });
        }
        Ok(self.index_of_int(k))
    }

    /// Index of a key: an integer ordinal, or a hierarchical coordinate congruent with the
    /// shape in which an integer may replace any subtree (it expands inside that subtree).
    ///
    /// Errors: a component out of range, missing or extra components, or a sequence where
    /// a leaf belongs, each by its own variant; whatever `K::view` reports is passed through.
    /// No allocation beyond what `K` itself does.
    pub fn index_of_key<K: KeyNode>(&self, key: &K) -> Result<i64, LayoutError> {
        match key.view()? {
            KeyView::Int(k) => self.try_index_of_int(k),
            KeyView::Seq(seq) => {
                let mut pos = 0usize;
                self.walk(self.shape.modes(), &seq, &mut pos)
            }
        }
    }

    /// [`Layout::index_of_key`] for a Rust-owned coordinate.
    pub fn index_of_coord(&self, coord: &Coord) -> Result<i64, LayoutError> {
        self.index_of_key(&coord)
    }

    fn walk<S: KeySeq>(&self, modes: &[Mode], seq: &S, pos: &mut usize) -> Result<i64, LayoutError> {
        if seq.len() != modes.len() {
            return Err(LayoutError::ComponentCountMismatch { components: seq.len(), modes: modes.len() });
        }
        let (extents, strides) = (self.leaf_extents(), self.leaf_strides());
        let mut acc = 0i64;
        for (i, mode) in modes.iter().enumerate() {
            let item = seq.get(i)?;
            match (mode, item.view()?) {
                (Mode::Leaf(e), KeyView::Int(c)) => {
                    if !(0..*e).contains(&c) {
                        return Err(LayoutError::CoordinateOutOfRange { coordinate: c, extent: *e });
                    }
                    acc += c * strides[*pos];
                    *pos += 1;
                }
                (Mode::Leaf(_), KeyView::Seq(_)) => {
                    return Err(LayoutError::SequenceForLeaf);
                }
                (Mode::Nested(n), KeyView::Int(c)) => {
                    let range = *pos..*pos + n.leaf_count();
                    // The subtree's size divides the layout's size, so it cannot overflow.
                    let sub = checked_product(&extents[range.clone()]).expect("sub-size fits");
                    if !(0..sub).contains(&c) {
                        return Err(LayoutError::SubtreeOrdinalOutOfRange { coordinate: c, size: sub });
                    }
                    acc += radix_index(&extents[range.clone()], &strides[range], c);
                    *pos += n.leaf_count();
                }
                (Mode::Nested(n), KeyView::Seq(sub)) => {
                    acc += self.walk(n.children(), &sub, pos)?;
                }
            }
        }
        Ok(acc)
    }

    /// `shape.decode(k)`.
    pub fn decode(&self, k: i64) -> Result<Coord, LayoutError> {
        self.shape.decode(k)
    }

    /// Whether every ordinal maps to itself: each leaf, extent-1 leaves aside, has the stride
    /// of the product of the extents before it (the canonical layout's strides).
    pub(crate) fn is_ordinal_identity(&self) -> bool {
        let mut expected = 1i64;
        for (&extent, &stride) in self.leaf_extents().iter().zip(self.leaf_strides()) {
            if extent != 1 && stride != expected {
                return false;
            }
            expected = expected.saturating_mul(extent);
        }
        true
    }

    /// Whether distinct coordinates give distinct indices (§6, steps 1–5).
    pub fn is_injective(&self) -> bool {
        super::injective::is_injective(self)
    }

    /// Broadcast to `target` (§6): same profile required; per leaf, an equal extent keeps
    /// its stride, an extent of 1 takes the target extent with stride 0, anything else is
    /// `BroadcastExtentMismatch` (a different profile: `BroadcastStructureMismatch`).
    pub fn broadcast_to(&self, target: &Shape) -> Result<Layout, LayoutError> {
        if profile_of(target.tree()) != self.profile() {
            return Err(LayoutError::BroadcastStructureMismatch {
                from: Box::new(self.shape.clone()),
                to: Box::new(target.clone()),
            });
        }
        let mut strides = Vec::with_capacity(self.leaf_strides().len());
        for ((&e, &s), &t) in self.infix_slices().zip(target.leaves()) {
            strides.push(if e == t {
                s
            } else if e == 1 {
                0
            } else {
                return Err(LayoutError::BroadcastExtentMismatch {
                    extent: e,
                    target: t,
                    from: Box::new(self.shape.clone()),
                    to: Box::new(target.clone()),
                });
            });
        }
        let stride = Stride::from_tree_unchecked(target.tree().with_leaves(&strides));
        Layout::new(target.clone(), stride)
    }

    fn infix_slices(&self) -> impl Iterator<Item = (&i64, &i64)> {
        self.leaf_extents().iter().zip(self.leaf_strides())
    }

    /// Top-level mode `i` as a layout (a nested mode's children become the top level).
    /// Panics if `i >= rank`; see [`normalize_mode_index`] for Python-style keys.
    pub fn mode(&self, i: usize) -> Layout {
        Layout::from_parts_unchecked(self.shape.mode(i), self.stride.mode(i))
    }

    /// The top-level modes at `indices`, in order. Panics on an index `>= rank`.
    pub fn select(&self, indices: &[usize]) -> Layout {
        Layout::from_parts_unchecked(self.shape.select(indices), self.stride.select(indices))
    }

    /// The top-level modes of `a`, then those of `b` (`SizeOverflow` or `CosizeOverflow`
    /// if the result's size or cosize no longer fits).
    pub fn concat(a: &Layout, b: &Layout) -> Result<Layout, LayoutError> {
        Layout::new(Shape::concat(&a.shape, &b.shape), Stride::concat(&a.stride, &b.stride))
    }

    /// §7 append: `a` if `b` is rank 0, the concat if `b` is a leaf, otherwise `b`'s
    /// whole tree becomes one new last mode.
    pub fn append(a: &Layout, b: &Layout) -> Result<Layout, LayoutError> {
        Layout::new(Shape::append(&a.shape, &b.shape), Stride::append(&a.stride, &b.stride))
    }

    /// `order[j]` is the source top-level mode placed at `j`; an error unless `order` is a
    /// permutation of `0..rank`. Modes move intact.
    pub fn permute(&self, order: &[usize]) -> Result<Layout, LayoutError> {
        check_permutation(order, self.rank())?;
        Ok(self.select(order))
    }
}

/// Python-style top-level index: negatives count from the end; out of range is
/// `ModeIndexOutOfRange`.
pub fn normalize_mode_index(i: i64, rank: usize) -> Result<usize, LayoutError> {
    let r = rank as i64;
    let j = if i < 0 { i + r } else { i };
    if (0..r).contains(&j) {
        Ok(j as usize)
    } else {
        Err(LayoutError::ModeIndexOutOfRange { index: i, rank })
    }
}

fn profile_of(tree: &IntTree) -> Vec<ProfileNode> {
    fn go(modes: &[Mode], out: &mut Vec<ProfileNode>) {
        for m in modes {
            match m {
                Mode::Leaf(_) => out.push(ProfileNode::Leaf),
                Mode::Nested(n) => {
                    out.push(ProfileNode::Push);
                    go(n.children(), out);
                    out.push(ProfileNode::Pop);
                }
            }
        }
    }
    let mut out = Vec::new();
    go(tree.modes(), &mut out);
    out
}

impl fmt::Display for Layout {
    /// `Layout(Shape<(2, 3)>, Stride<(1, 0)>)`, the Python repr.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Layout({}, {})", self.shape, self.stride)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Mode;

    fn nested(v: Vec<Mode>) -> Mode {
        Mode::nested(v).unwrap()
    }
    fn l(v: i64) -> Mode {
        Mode::Leaf(v)
    }
    fn shape(m: Vec<Mode>) -> Shape {
        Shape::new(IntTree::new(m)).unwrap()
    }
    fn stride(m: Vec<Mode>) -> Stride {
        Stride::new(IntTree::new(m)).unwrap()
    }
    fn c(v: i64) -> Coord {
        Coord::Int(v)
    }
    fn cs(v: Vec<Coord>) -> Coord {
        Coord::Seq(v)
    }

    /// `L = [2,[3,4]]:[1,[10,100]]` from §4.
    fn spec_l() -> Layout {
        Layout::new(shape(vec![l(2), nested(vec![l(3), l(4)])]), stride(vec![l(1), nested(vec![l(10), l(100)])]))
            .unwrap()
    }

    /// The ordinal shortcuts agree with the mixed-radix decode on every ordinal, and each
    /// layout takes the shortcut meant for it.
    #[test]
    fn ordinal_shortcuts_agree_with_the_radix_decode() {
        let cases: Vec<(Vec<Mode>, Vec<Mode>, &str)> = vec![
            (vec![l(2), nested(vec![l(3), l(4)])], vec![l(1), nested(vec![l(2), l(6)])], "Identity"),
            (vec![l(1), l(5), l(1)], vec![l(7), l(1), l(9)], "Identity"),
            (vec![l(6)], vec![l(3)], "Single"),
            (vec![l(1), nested(vec![l(4), l(1)])], vec![l(0), nested(vec![l(0), l(2)])], "Single"),
            (vec![l(2), l(3)], vec![l(3), l(1)], "Radix"),
            (vec![l(2), nested(vec![l(3), l(4)])], vec![l(1), nested(vec![l(10), l(100)])], "Radix"),
        ];
        for (sh, st, expected) in cases {
            let lay = Layout::new(shape(sh), stride(st)).unwrap();
            assert!(format!("{:?}", lay.ordinal).starts_with(expected), "{lay}: {:?}", lay.ordinal);
            for k in 0..lay.size() {
                assert_eq!(lay.index_of_int(k), radix_index(lay.leaf_extents(), lay.leaf_strides(), k), "{lay} at {k}");
            }
        }
        let canonical = Layout::canonical(&shape(vec![l(3), l(2)])).unwrap();
        assert!(matches!(canonical.ordinal, OrdinalMap::Identity));
    }

    #[test]
    fn spec_indexing_examples() {
        let lay = spec_l();
        assert_eq!(lay.index_of_coord(&cs(vec![c(1), cs(vec![c(2), c(3)])])), Ok(321));
        assert_eq!(lay.index_of_coord(&cs(vec![c(1), c(11)])), Ok(321));
        assert_eq!(lay.index_of_coord(&c(23)), Ok(321));
        assert_eq!(lay.index_of_int(23), 321);
        assert_eq!((lay.size(), lay.cosize()), (24, 322));
        let m = Layout::new(Shape::flat(&[3, 4]).unwrap(), Stride::flat(&[2, 10]).unwrap()).unwrap();
        assert_eq!(m.index_of_int(5), 14);
        assert_eq!(m.index_of_coord(&cs(vec![c(2), c(3)])), Ok(34));
        let count = |components| LayoutError::ComponentCountMismatch { components, modes: 2 };
        for (bad, why) in [
            (cs(vec![c(3), c(0)]), LayoutError::CoordinateOutOfRange { coordinate: 3, extent: 3 }),
            (c(12), LayoutError::IntegerKeyOutOfRange { key: 12, size: 12 }),
            (c(-1), LayoutError::IntegerKeyOutOfRange { key: -1, size: 12 }),
            (cs(vec![c(1)]), count(1)),
            (cs(vec![c(0), c(0), c(0)]), count(3)),
            (cs(vec![c(0), cs(vec![c(0)])]), LayoutError::SequenceForLeaf),
        ] {
            assert_eq!(m.index_of_coord(&bad), Err(why), "{bad}");
        }
        let nested_layout = Layout::canonical(&shape(vec![l(2), nested(vec![l(3), l(4)])])).unwrap();
        assert_eq!(
            nested_layout.index_of_coord(&cs(vec![c(0), c(12)])),
            Err(LayoutError::SubtreeOrdinalOutOfRange { coordinate: 12, size: 12 })
        );
    }

    #[test]
    fn rank0() {
        let r0 = Layout::new(shape(vec![]), stride(vec![])).unwrap();
        assert_eq!((r0.size(), r0.cosize(), r0.depth()), (1, 1, 1));
        assert_eq!(r0.index_of_coord(&c(0)), Ok(0));
        assert_eq!(r0.index_of_coord(&cs(vec![])), Ok(0));
        assert!(r0.profile().is_empty());
        assert_eq!(r0.to_string(), "Layout(Shape<()>, Stride<()>)");
    }

    #[test]
    fn construction_errors() {
        assert!(matches!(Mode::nested(vec![]), Err(LayoutError::EmptyNestedMode)));
        assert_eq!(Shape::flat(&[2, 0]), Err(LayoutError::NonPositiveExtent(0)));
        assert_eq!(Stride::flat(&[-1]), Err(LayoutError::NegativeStride(-1)));
        // [2,[3,4]] with [1,2,6]: not congruent.
        let bad = Layout::new(shape(vec![l(2), nested(vec![l(3), l(4)])]), Stride::flat(&[1, 2, 6]).unwrap());
        assert!(matches!(bad, Err(LayoutError::NotCongruent { .. })));
        // Shape(2) with Stride([1]) is valid.
        assert!(Layout::new(Shape::flat(&[2]).unwrap(), Stride::flat(&[1]).unwrap()).is_ok());
        let big = Layout::new(Shape::flat(&[1 << 62, 4]).unwrap(), Stride::flat(&[0, 0]).unwrap());
        assert_eq!(big, Err(LayoutError::SizeOverflow));
        let big = Layout::new(Shape::flat(&[3]).unwrap(), Stride::flat(&[i64::MAX / 2 + 1]).unwrap());
        assert_eq!(big, Err(LayoutError::CosizeOverflow));
    }

    #[test]
    fn decode_encode_example() {
        let s = shape(vec![l(5), nested(vec![l(20), l(4)])]);
        let coord = s.decode(214).unwrap();
        assert_eq!(coord.to_string(), "(4, (2, 2))");
        assert_eq!(s.encode(&&coord), Ok(214));
        assert_eq!(s.encode(&&cs(vec![c(4), c(42)])), Ok(214));
        assert_eq!(s.decode(400), Err(LayoutError::OrdinalOutOfRange(400)));
        assert_eq!(s.decode(-1), Err(LayoutError::OrdinalOutOfRange(-1)));
    }

    #[test]
    fn display_and_depth() {
        let s = shape(vec![l(2), nested(vec![l(3), l(4)])]);
        assert_eq!(s.to_string(), "Shape<(2, (3, 4))>");
        assert_eq!(s.depth(), 2);
        assert_eq!(Shape::flat(&[4]).unwrap().to_string(), "Shape<(4,)>");
        assert_eq!(shape(vec![nested(vec![l(5)])]).to_string(), "Shape<((5,),)>");
        assert_eq!(stride(vec![]).to_string(), "Stride<()>");
    }

    #[test]
    fn size_cosize_table() {
        let mk = |sh: &[i64], st: &[i64]| Layout::new(Shape::flat(sh).unwrap(), Stride::flat(st).unwrap()).unwrap();
        let t = mk(&[2, 3], &[1, 4]);
        assert_eq!((t.size(), t.cosize()), (6, 10));
        let t = mk(&[2, 3], &[1, 0]);
        assert_eq!((t.size(), t.cosize()), (6, 2));
        let t = mk(&[4], &[0]);
        assert_eq!((t.size(), t.cosize()), (4, 1));
        let lay = spec_l();
        assert_eq!(lay.leaf_extents(), &[2, 3, 4]);
        assert_eq!(lay.leaf_strides(), &[1, 10, 100]);
    }

    #[test]
    fn canonical_table() {
        let cases: Vec<(Shape, Stride)> = vec![
            (Shape::flat(&[4, 2]).unwrap(), Stride::flat(&[1, 4]).unwrap()),
            (shape(vec![l(2), nested(vec![l(3), l(4)])]), stride(vec![l(1), nested(vec![l(2), l(6)])])),
            (shape(vec![nested(vec![l(2), l(3)]), l(4)]), stride(vec![nested(vec![l(1), l(2)]), l(6)])),
            (shape(vec![l(2), nested(vec![l(1), l(3)])]), stride(vec![l(1), nested(vec![l(2), l(2)])])),
            (Shape::flat(&[5]).unwrap(), Stride::flat(&[1]).unwrap()),
            (shape(vec![]), stride(vec![])),
        ];
        for (sh, st) in cases {
            let can = Layout::canonical(&sh).unwrap();
            assert_eq!(can.stride(), &st, "{sh}");
            assert_eq!(can.cosize(), can.size());
        }
    }

    #[test]
    fn broadcast_examples() {
        let src =
            Layout::new(shape(vec![l(2), nested(vec![l(1), l(3)])]), stride(vec![l(1), nested(vec![l(2), l(2)])]))
                .unwrap();
        let out = src.broadcast_to(&shape(vec![l(2), nested(vec![l(4), l(3)])])).unwrap();
        assert_eq!(out.stride(), &stride(vec![l(1), nested(vec![l(0), l(2)])]));
        let flat = Layout::new(Shape::flat(&[2, 3]).unwrap(), Stride::flat(&[1, 2]).unwrap()).unwrap();
        assert!(matches!(
            flat.broadcast_to(&Shape::flat(&[2, 4]).unwrap()),
            Err(LayoutError::BroadcastExtentMismatch { extent: 3, target: 4, .. })
        ));
        let flat3 = Layout::new(Shape::flat(&[2, 1, 3]).unwrap(), Stride::flat(&[1, 2, 2]).unwrap()).unwrap();
        assert!(matches!(
            flat3.broadcast_to(&shape(vec![l(2), nested(vec![l(4), l(3)])])),
            Err(LayoutError::BroadcastStructureMismatch { .. })
        ));
    }

    #[test]
    fn structural_edits() {
        // L=[1,2,[3,4]]:[1,1,[2,6]]
        let lay = Layout::new(
            shape(vec![l(1), l(2), nested(vec![l(3), l(4)])]),
            stride(vec![l(1), l(1), nested(vec![l(2), l(6)])]),
        )
        .unwrap();
        assert_eq!(lay.mode(2).to_string(), "Layout(Shape<(3, 4)>, Stride<(2, 6)>)");
        assert_eq!(lay.select(&[1, 2]).to_string(), "Layout(Shape<(2, (3, 4))>, Stride<(1, (2, 6))>)");
        assert_eq!(normalize_mode_index(-3, 3), Ok(0));
        assert!(matches!(normalize_mode_index(3, 3), Err(LayoutError::ModeIndexOutOfRange { index: 3, rank: 3 })));
        assert!(matches!(normalize_mode_index(-4, 3), Err(LayoutError::ModeIndexOutOfRange { index: -4, rank: 3 })));

        let mk = |sh: &[i64], st: &[i64]| Layout::new(Shape::flat(sh).unwrap(), Stride::flat(st).unwrap()).unwrap();
        let cat = Layout::concat(&mk(&[1, 2], &[1, 2]), &mk(&[3], &[6])).unwrap();
        assert_eq!(cat, mk(&[1, 2, 3], &[1, 2, 6]));
        let app = Layout::append(&mk(&[1], &[1]), &mk(&[2, 3], &[2, 6])).unwrap();
        assert_eq!(app.to_string(), "Layout(Shape<(1, (2, 3))>, Stride<(1, (2, 6))>)");
        let r0 = Layout::new(shape(vec![]), stride(vec![])).unwrap();
        assert_eq!(Layout::append(&app, &r0).unwrap(), app);

        let p = Layout::new(
            shape(vec![l(2), nested(vec![l(3), l(4)]), l(5)]),
            stride(vec![l(1), nested(vec![l(2), l(6)]), l(24)]),
        )
        .unwrap();
        let q = p.permute(&[1, 0, 2]).unwrap();
        assert_eq!(q.to_string(), "Layout(Shape<((3, 4), 2, 5)>, Stride<((2, 6), 1, 24)>)");
        assert_eq!(q.permute(&[1, 0, 2]).unwrap(), p);
        assert!(matches!(p.permute(&[0, 0, 1]), Err(LayoutError::NotAPermutation { .. })));
        assert_eq!(p.permute(&[0, 1]), Err(LayoutError::PermutationLength { entries: 2, rank: 3 }));
        assert!(matches!(p.permute(&[0, 1, 3]), Err(LayoutError::NotAPermutation { .. })));
    }
}
