//! The CuTe layout algebra (docs/spec/layout-and-dtype.md §9): coalesce, filter, composition,
//! complement, logical divide and product with their zipped / tiled / blocked / raked forms,
//! and the right and left inverses.
//!
//! Semantics are CuTe's (column-major, first mode fastest). The algebra works on `Cute`, a
//! small recursive value in which a rank-1 layout with an integer mode is CuTe's *integer*
//! layout `s:d` and anything else is a tuple of modes; results convert back to [`Layout`]
//! (whose top level is always a tuple, so an integer result `s:d` becomes `(s,):(d,)`).
//!
//! Where CuTe states a precondition (stride or shape divisibility in a composition, an
//! injective layout for a complement or a left inverse, a tiler no longer than the layout),
//! an unmet one is a [`LayoutError`] naming it; every arithmetic step is checked, so no
//! input panics.
//!
//! ```
//! use strideweave_core::layout;
//!
//! let a = layout!([4, 2] : [2, 1]).unwrap();
//! // Coalescing keeps the function of every ordinal.
//! let c = a.coalesce().unwrap();
//! assert!((0..8).all(|k| c.index_of_int(k) == a.index_of_int(k)));
//! // Composition: (a ∘ b)(k) = a(b(k)).
//! let b = layout!([2] : [2]).unwrap();
//! let ab = a.compose(&b).unwrap();
//! assert!((0..2).all(|k| ab.index_of_int(k) == a.index_of_int(b.index_of_int(k))));
//! ```

use super::tree::{IntTree, Mode};
use super::{Layout, LayoutError, Shape, Stride};

/// A CuTe layout value: an integer mode `shape:stride`, or a tuple of modes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cute {
    Int(i64, i64),
    Tup(Vec<Cute>),
}

fn overflow() -> LayoutError {
    LayoutError::CosizeOverflow
}

fn mul(a: i64, b: i64) -> Result<i64, LayoutError> {
    a.checked_mul(b).ok_or_else(overflow)
}

fn ceil_div(a: i64, b: i64) -> i64 {
    // b >= 1 and a >= 0 everywhere this is used.
    a / b + i64::from(a % b != 0)
}

impl Cute {
    pub(crate) fn from_layout(l: &Layout) -> Cute {
        fn go(sh: &Mode, st: &Mode) -> Cute {
            match (sh, st) {
                (Mode::Leaf(s), Mode::Leaf(d)) => Cute::Int(*s, *d),
                (Mode::Nested(a), Mode::Nested(b)) => {
                    Cute::Tup(a.children().iter().zip(b.children()).map(|(x, y)| go(x, y)).collect())
                }
                _ => unreachable!("a layout's shape and stride are congruent"),
            }
        }
        let (sh, st) = (l.shape().modes(), l.stride().modes());
        match (sh, st) {
            ([Mode::Leaf(s)], [Mode::Leaf(d)]) => Cute::Int(*s, *d),
            _ => Cute::Tup(sh.iter().zip(st).map(|(x, y)| go(x, y)).collect()),
        }
    }

    pub(crate) fn to_layout(&self) -> Result<Layout, LayoutError> {
        fn go(c: &Cute) -> Result<(Mode, Mode), LayoutError> {
            Ok(match c {
                Cute::Int(s, d) => (Mode::Leaf(*s), Mode::Leaf(*d)),
                // An empty tuple inside a tree is CuTe's `1:0` (our trees have no empty modes).
                Cute::Tup(v) if v.is_empty() => (Mode::Leaf(1), Mode::Leaf(0)),
                Cute::Tup(v) => {
                    let (a, b): (Vec<Mode>, Vec<Mode>) =
                        v.iter().map(go).collect::<Result<Vec<_>, _>>()?.into_iter().unzip();
                    (Mode::nested(a)?, Mode::nested(b)?)
                }
            })
        }
        let (sh, st): (Vec<Mode>, Vec<Mode>) = match self {
            Cute::Int(s, d) => (vec![Mode::Leaf(*s)], vec![Mode::Leaf(*d)]),
            Cute::Tup(v) => v.iter().map(go).collect::<Result<Vec<_>, _>>()?.into_iter().unzip(),
        };
        Layout::new(Shape::new(IntTree::new(sh))?, Stride::new(IntTree::new(st))?)
    }

    fn flatten_into(&self, out: &mut Vec<(i64, i64)>) {
        match self {
            Cute::Int(s, d) => out.push((*s, *d)),
            Cute::Tup(v) => v.iter().for_each(|c| c.flatten_into(out)),
        }
    }

    fn flat(&self) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        self.flatten_into(&mut out);
        out
    }

    /// Top-level modes (an integer layout is its own single mode).
    fn modes(&self) -> Vec<Cute> {
        match self {
            Cute::Int(..) => vec![self.clone()],
            Cute::Tup(v) => v.clone(),
        }
    }

    fn rank(&self) -> usize {
        match self {
            Cute::Int(..) => 1,
            Cute::Tup(v) => v.len(),
        }
    }

    fn size(&self) -> Result<i64, LayoutError> {
        self.flat().iter().try_fold(1i64, |a, &(s, _)| a.checked_mul(s)).ok_or(LayoutError::SizeOverflow)
    }

    fn cosize(&self) -> Result<i64, LayoutError> {
        self.flat()
            .iter()
            .try_fold(1i64, |a, &(s, d)| (s - 1).checked_mul(d).and_then(|t| a.checked_add(t)))
            .ok_or_else(overflow)
    }

    /// A layout from a list of `(shape, stride)` pieces: one piece is an integer layout.
    fn from_pieces(mut pieces: Vec<(i64, i64)>) -> Cute {
        if pieces.len() == 1 {
            let (s, d) = pieces.pop().expect("one piece");
            Cute::Int(s, d)
        } else {
            Cute::Tup(pieces.into_iter().map(|(s, d)| Cute::Int(s, d)).collect())
        }
    }
}

/// Flatten and merge adjacent leaves where `extent·stride` of one is the next's stride;
/// extent-1 leaves vanish; the empty result is `1:0`.
pub(crate) fn coalesce_cute(c: &Cute) -> Cute {
    let mut out: Vec<(i64, i64)> = vec![(1, 0)];
    for (s, d) in c.flat() {
        let last = out.last_mut().expect("never empty");
        if s == 1 {
            continue;
        } else if last.0 == 1 {
            *last = (s, d);
        } else if last.0.checked_mul(last.1) == Some(d) {
            // The merged extent divides the size, which fits.
            last.0 *= s;
        } else {
            out.push((s, d));
        }
    }
    Cute::from_pieces(out)
}

/// Coalesce within each mode of `profile`: where the profile has a leaf, that whole mode is
/// coalesced; where it has a tuple, recurse. Modes past the profile's rank stay as they are.
fn coalesce_by(c: &Cute, profile: &[Mode]) -> Result<Cute, LayoutError> {
    let modes = c.modes();
    if profile.len() > modes.len() {
        return Err(LayoutError::ProfileRankExceedsLayout { profile: profile.len(), rank: modes.len() });
    }
    let mut out = Vec::with_capacity(modes.len());
    for (i, m) in modes.iter().enumerate() {
        out.push(match profile.get(i) {
            None => m.clone(),
            Some(Mode::Leaf(_)) => coalesce_cute(m),
            Some(Mode::Nested(n)) => coalesce_by(m, n.children())?,
        });
    }
    Ok(Cute::Tup(out))
}

/// `A ∘ B` for a B that is a layout (not a tiler).
pub(crate) fn compose_cute(a: &Cute, b: &Cute) -> Result<Cute, LayoutError> {
    // A is coalesced once for every mode of B.
    compose_flat(&coalesce_cute(a).flat(), b)
}

/// `A ∘ B` with A given as its coalesced leaves.
fn compose_flat(flat_a: &[(i64, i64)], b: &Cute) -> Result<Cute, LayoutError> {
    let (rest_shape, rest_stride) = match b {
        Cute::Tup(v) => return Ok(Cute::Tup(v.iter().map(|bi| compose_flat(flat_a, bi)).collect::<Result<_, _>>()?)),
        Cute::Int(s, d) => (*s, *d),
    };
    if rest_stride == 0 {
        return Ok(Cute::Int(rest_shape, 0));
    }
    let (mut rest_shape, mut rest_stride) = (rest_shape, rest_stride);
    let mut out: Vec<(i64, i64)> = Vec::new();
    for &(cs, cd) in &flat_a[..flat_a.len() - 1] {
        if cs % rest_stride != 0 && rest_stride % cs != 0 {
            return Err(LayoutError::CompositionStrideNotDivisible { stride: rest_stride, extent: cs });
        }
        let new_shape = (cs / rest_stride).max(1).min(rest_shape);
        if new_shape != 1 {
            out.push((new_shape, mul(rest_stride, cd)?));
        }
        if rest_shape % new_shape != 0 {
            return Err(LayoutError::CompositionShapeNotDivisible { shape: rest_shape, extent: new_shape });
        }
        rest_shape /= new_shape;
        rest_stride = ceil_div(rest_stride, cs);
    }
    if rest_shape != 1 || out.is_empty() {
        let last_d = flat_a.last().expect("coalesce is never empty").1;
        out.push((rest_shape, mul(rest_stride, last_d)?));
    }
    Ok(Cute::from_pieces(out))
}

/// The complement of `a` in `[0, cotarget)`.
pub(crate) fn complement_cute(a: &Cute, cotarget: i64) -> Result<Cute, LayoutError> {
    let mut ds: Vec<(i64, i64)> = a.flat().into_iter().map(|(s, d)| (d, s)).collect();
    ds.sort_unstable();
    let mut pieces = Vec::with_capacity(ds.len() + 1);
    let mut current = 1i64;
    // A stride that is not a multiple of what the smaller modes reach leaves a hole at the
    // first multiple of `current` past the gap piece: no complement covers it, so the result
    // is right only when the cotarget stops short of that hole (pycute returns it then).
    let mut hole = i64::MAX;
    for (d, s) in ds {
        if d == 0 || s == 1 {
            continue;
        }
        if d < current {
            // Overlapping modes are a non-injective layout; interleaved ones (`[2,2]:[2,3]`)
            // are injective but leave gaps no mode of a complement can fill.
            let injective = a.to_layout().is_ok_and(|l| l.is_injective());
            return Err(if injective {
                LayoutError::ComplementStrideNotDivisible { stride: d, reached: current }
            } else {
                LayoutError::ComplementNotInjective { stride: d, reached: current }
            });
        }
        if d % current != 0 && hole == i64::MAX {
            hole = d / current * current;
            if cotarget > hole {
                return Err(LayoutError::ComplementStrideNotDivisible { stride: d, reached: current });
            }
        }
        pieces.push((d / current, current));
        current = mul(s, d)?;
    }
    pieces.push((ceil_div(cotarget.max(1), current), current));
    Ok(coalesce_cute(&Cute::Tup(pieces.into_iter().map(|(s, d)| Cute::Int(s, d)).collect())))
}

/// The right inverse: `a(r(i)) = i` for `i` in `[0, size(r))`.
pub(crate) fn right_inverse_cute(a: &Cute) -> Cute {
    let flat = a.flat();
    let mut prefix = 1i64;
    let mut dsr: Vec<(i64, i64, i64)> = Vec::with_capacity(flat.len());
    for &(s, d) in &flat {
        dsr.push((d, s, prefix));
        prefix *= s; // bounded by the layout's size
    }
    dsr.sort_unstable();
    let mut pieces = Vec::new();
    let mut current = 1i64;
    for (d, s, r) in dsr {
        if s == 1 {
            continue;
        }
        if current != d {
            break;
        }
        pieces.push(Cute::Int(s, r));
        current = s * d; // within the cosize
    }
    coalesce_cute(&Cute::Tup(pieces))
}

fn check_tiler_rank(tiler: usize, rank: usize) -> Result<(), LayoutError> {
    if tiler > rank {
        return Err(LayoutError::TilerRankExceedsLayout { tiler, rank });
    }
    Ok(())
}

fn divide_cute(a: &Cute, b: &Cute) -> Result<Cute, LayoutError> {
    let comp = complement_cute(b, a.size()?)?;
    compose_cute(a, &Cute::Tup(vec![b.clone(), comp]))
}

fn product_cute(a: &Cute, b: &Cute) -> Result<Cute, LayoutError> {
    let comp = complement_cute(a, mul(a.size()?, b.cosize()?)?)?;
    Ok(Cute::Tup(vec![a.clone(), compose_cute(&comp, b)?]))
}

/// A tiler: one layout for the whole layout, or one tiler per leading mode, nested as deep
/// as the layout's modes are (CuTe's tuple tilers; `None` keeps that mode as it is).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tiler {
    /// One layout applied to the whole layout (or mode) it meets.
    Layout(Layout),
    /// One tiler per leading mode (`None` keeps that mode as it is).
    Modes(Vec<Option<Tiler>>),
}

impl From<Layout> for Tiler {
    fn from(l: Layout) -> Tiler {
        Tiler::Layout(l)
    }
}

/// The tiler with its layouts converted once.
enum CuteTiler {
    Whole(Cute),
    Modes(Vec<Option<CuteTiler>>),
}

impl CuteTiler {
    fn new(t: &Tiler) -> CuteTiler {
        match t {
            Tiler::Layout(l) => CuteTiler::Whole(Cute::from_layout(l)),
            Tiler::Modes(ts) => CuteTiler::Modes(ts.iter().map(|t| t.as_ref().map(CuteTiler::new)).collect()),
        }
    }
}

type Op = fn(&Cute, &Cute) -> Result<Cute, LayoutError>;

/// Apply `op` by mode: a whole tiler meets `a` as a whole; a tuple meets `a`'s leading modes
/// one by one (recursively), and the modes past it stay.
fn by_modes(a: &Cute, tiler: &CuteTiler, op: Op) -> Result<Cute, LayoutError> {
    match tiler {
        CuteTiler::Whole(b) => op(a, b),
        CuteTiler::Modes(ts) => {
            let modes = a.modes();
            check_tiler_rank(ts.len(), modes.len())?;
            let mut out = Vec::with_capacity(modes.len());
            for (i, m) in modes.iter().enumerate() {
                out.push(match ts.get(i) {
                    Some(Some(t)) => by_modes(m, t, op)?,
                    _ => m.clone(),
                });
            }
            Ok(Cute::Tup(out))
        }
    }
}

/// Split by `op` and gather: `((tile modes…), (rest modes…, untiled modes…))`, recursively
/// for a nested tiler (a kept mode's tile is `1:0`).
fn unzip(a: &Cute, tiler: &CuteTiler, op: Op) -> Result<Cute, LayoutError> {
    match tiler {
        CuteTiler::Whole(b) => op(a, b),
        CuteTiler::Modes(ts) => {
            let modes = a.modes();
            check_tiler_rank(ts.len(), modes.len())?;
            let (mut first, mut second) = (Vec::with_capacity(ts.len()), Vec::with_capacity(modes.len()));
            for (m, t) in modes.iter().zip(ts) {
                let split = match t {
                    Some(t) => unzip(m, t, op)?,
                    None => Cute::Tup(vec![Cute::Int(1, 0), m.clone()]),
                };
                let mut parts = split.modes().into_iter();
                first.push(parts.next().expect("two modes"));
                second.push(parts.next().expect("two modes"));
            }
            second.extend(modes[ts.len()..].iter().cloned());
            Ok(Cute::Tup(vec![Cute::Tup(first), Cute::Tup(second)]))
        }
    }
}

fn per_mode_or_whole(a: &Layout, b: &Tiler, op: Op) -> Result<Layout, LayoutError> {
    by_modes(&Cute::from_layout(a), &CuteTiler::new(b), op)?.to_layout()
}

impl Layout {
    /// The same function with the fewest modes: leaves flattened, extent-1 leaves dropped,
    /// neighbours merged where `extentᵢ·strideᵢ = strideᵢ₊₁`. A single result mode is a
    /// rank-1 layout; nothing left is `(1,):(0,)`.
    pub fn coalesce(&self) -> Result<Layout, LayoutError> {
        coalesce_cute(&Cute::from_layout(self)).to_layout()
    }

    /// Coalesce within each mode of `profile` (a leaf there: that mode as a whole; a tuple:
    /// recursively); modes past the profile's rank are kept. The result has at least the
    /// profile's rank. `ProfileRankExceedsLayout` if the profile has more modes than a level.
    pub fn coalesce_by(&self, profile: &IntTree) -> Result<Layout, LayoutError> {
        coalesce_by(&Cute::from_layout(self), profile.modes())?.to_layout()
    }

    /// Drop stride-0 and extent-1 modes, then coalesce.
    pub fn filter(&self) -> Result<Layout, LayoutError> {
        let zeroed: Vec<(i64, i64)> = self.infix().map(|(s, d)| if d == 0 { (1, 0) } else { (s, d) }).collect();
        coalesce_cute(&Cute::Tup(zeroed.into_iter().map(|(s, d)| Cute::Int(s, d)).collect())).to_layout()
    }

    /// `self ∘ b`: `(self∘b)(i) = self(b(i))`, shaped like `b` (each top-level mode of `b`
    /// composes on its own). Errors: `CompositionStrideNotDivisible`,
    /// `CompositionShapeNotDivisible` where CuTe's divisibility conditions fail.
    pub fn compose(&self, b: &Layout) -> Result<Layout, LayoutError> {
        compose_cute(&Cute::from_layout(self), &Cute::from_layout(b))?.to_layout()
    }

    /// Compose by a tiler: a whole layout is [`Layout::compose`]; a tuple composes mode `i`
    /// with `tiler[i]` (recursively; `None` keeps it), and modes past the tiler stay.
    /// `TilerRankExceedsLayout` for a tuple longer than the modes it meets.
    pub fn compose_tiler(&self, tiler: &Tiler) -> Result<Layout, LayoutError> {
        per_mode_or_whole(self, tiler, compose_cute)
    }

    /// Compose mode by mode: mode `i` of the result is `self[i] ∘ tilers[i]` (`None` keeps
    /// it); modes past the tiler stay. `TilerRankExceedsLayout` for a longer tiler.
    pub fn compose_modes(&self, tilers: &[Option<Layout>]) -> Result<Layout, LayoutError> {
        self.compose_tiler(&Tiler::Modes(tilers.iter().map(|t| t.clone().map(Tiler::Layout)).collect()))
    }

    /// The layout that, concatenated to `self`, fills `[0, cotarget)`: sorted by stride,
    /// the gaps between `self`'s modes, then what reaches `cotarget` (rounded up), coalesced.
    /// Errors: `ComplementNotInjective` (two modes overlap), `ComplementStrideNotDivisible`
    /// (a stride is not a multiple of what the smaller modes reach, and the hole this leaves
    /// lies below `cotarget`; below it the result is still a complement).
    pub fn complement(&self, cotarget: i64) -> Result<Layout, LayoutError> {
        complement_cute(&Cute::from_layout(self), cotarget)?.to_layout()
    }

    /// Logical divide `self ∘ (b, complement(b, size(self)))` (a tiler: mode by mode).
    pub fn divide(&self, b: &Tiler) -> Result<Layout, LayoutError> {
        per_mode_or_whole(self, b, divide_cute)
    }

    /// The divide with the tile modes gathered into mode 0 and the rest into mode 1.
    pub fn zipped_divide(&self, b: &Tiler) -> Result<Layout, LayoutError> {
        unzip(&Cute::from_layout(self), &CuteTiler::new(b), divide_cute)?.to_layout()
    }

    /// The zipped divide with mode 1's modes flattened to the top level.
    pub fn tiled_divide(&self, b: &Tiler) -> Result<Layout, LayoutError> {
        let z = unzip(&Cute::from_layout(self), &CuteTiler::new(b), divide_cute)?;
        let mut parts = z.modes().into_iter();
        let mut out = vec![parts.next().expect("two modes")];
        out.extend(parts.next().expect("two modes").modes());
        Cute::Tup(out).to_layout()
    }

    /// Logical product `(self, complement(self, size(self)·cosize(b)) ∘ b)`.
    pub fn product(&self, b: &Tiler) -> Result<Layout, LayoutError> {
        per_mode_or_whole(self, b, product_cute)
    }

    /// The product with mode `i` made of `self`'s mode `i` then the repeat's mode `i`, each
    /// coalesced (both padded to the larger rank with `1:0`).
    pub fn blocked_product(&self, b: &Layout) -> Result<Layout, LayoutError> {
        self.blocked_or_raked(b, false)
    }

    /// As [`Layout::blocked_product`] with the repeat's mode first in each mode.
    pub fn raked_product(&self, b: &Layout) -> Result<Layout, LayoutError> {
        self.blocked_or_raked(b, true)
    }

    fn blocked_or_raked(&self, b: &Layout, raked: bool) -> Result<Layout, LayoutError> {
        let (ca, cb) = (Cute::from_layout(self), Cute::from_layout(b));
        let r = ca.rank().max(cb.rank());
        let pad = |c: &Cute| {
            let mut m = c.modes();
            m.resize(r, Cute::Int(1, 0));
            Cute::Tup(m)
        };
        let prod = product_cute(&pad(&ca), &pad(&cb))?.modes();
        let (x, y) = (prod[0].modes(), prod[1].modes());
        let zipped: Vec<Cute> = x
            .into_iter()
            .zip(y)
            .map(|(p, q)| coalesce_cute(&Cute::Tup(if raked { vec![q, p] } else { vec![p, q] })))
            .collect();
        Cute::Tup(zipped).to_layout()
    }

    /// The right inverse `r`: `self(r(i)) = i` for `i` in `[0, r.size)` (the largest such
    /// contiguous range that `self`'s modes reach from 0 in stride order). Always defined.
    pub fn right_inverse(&self) -> Result<Layout, LayoutError> {
        right_inverse_cute(&Cute::from_layout(self)).to_layout()
    }

    /// The left inverse `l` of an injective layout: `l(self(i)) = i` for `i` in
    /// `[0, size)`, `right_inverse((self, complement(self, cosize)))`. `NotInjective`
    /// otherwise, and the complement's `ComplementStrideNotDivisible` where that inverse
    /// cannot cover the whole image (`[2,2]:[3,1]`).
    pub fn left_inverse(&self) -> Result<Layout, LayoutError> {
        if !self.is_injective() {
            return Err(LayoutError::NotInjective);
        }
        let c = Cute::from_layout(self);
        // The complement to the cosize (CuTe C++'s default; pycute's 1 can leave part of the
        // image outside the inverse's domain): it raises where no such layout exists.
        let comp = complement_cute(&c, self.cosize())?;
        right_inverse_cute(&Cute::Tup(vec![c, comp])).to_layout()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lay(s: &str) -> Layout {
        // "[5,4]:[4,1]" or "20:2", nested with brackets.
        fn parse(t: &str) -> Cute {
            let t = t.trim();
            let (sh, st) = t.split_once(':').unwrap();
            fn tree(x: &str) -> Result<Vec<i64>, ()> {
                Ok(x.replace(['[', ']'], " ")
                    .split([',', ' '])
                    .filter(|p| !p.is_empty())
                    .map(|p| p.parse().unwrap())
                    .collect())
            }
            let (a, b) = (tree(sh).unwrap(), tree(st).unwrap());
            fn build(x: &str, vals: &mut impl Iterator<Item = (i64, i64)>) -> Cute {
                // Rebuild structure from the shape string.
                let x = x.trim();
                if let Some(inner) = x.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
                    let mut parts = Vec::new();
                    let (mut depth, mut start) = (0, 0);
                    for (i, ch) in inner.char_indices() {
                        match ch {
                            '[' => depth += 1,
                            ']' => depth -= 1,
                            ',' if depth == 0 => {
                                parts.push(&inner[start..i]);
                                start = i + 1;
                            }
                            _ => {}
                        }
                    }
                    parts.push(&inner[start..]);
                    Cute::Tup(parts.into_iter().map(|p| build(p, vals)).collect())
                } else {
                    let (s, d) = vals.next().unwrap();
                    Cute::Int(s, d)
                }
            }
            build(sh, &mut a.into_iter().zip(b))
        }
        parse(s).to_layout().unwrap()
    }

    #[test]
    fn spec_examples() {
        assert_eq!(lay("20:2").compose(&lay("[5,4]:[4,1]")).unwrap(), lay("[5,4]:[8,2]"));
        assert_eq!(lay("[2,2]:[1,6]").complement(24).unwrap(), lay("[3,2]:[2,12]"));
        let d = lay("[4,2,3]:[2,1,8]").divide(&Tiler::Layout(lay("4:2"))).unwrap();
        assert_eq!(d, lay("[[2,2],[2,3]]:[[4,1],[2,8]]"));
        assert_eq!(lay("[2,[3,4]]:[1,[2,6]]").coalesce().unwrap(), lay("24:1"));
        assert_eq!(lay("[2,1,3]:[0,5,4]").filter().unwrap(), lay("3:4"));
        assert_eq!(lay("[3,2]:[2,12]").right_inverse().unwrap().size(), 1);
        assert_eq!(lay("[4,2]:[2,1]").right_inverse().unwrap(), lay("[2,4]:[4,1]"));
        // product: 2:1 tiled 3 times -> (2, 3):(1, 2)
        assert_eq!(lay("2:1").product(&Tiler::Layout(lay("3:1"))).unwrap(), lay("[2,3]:[1,2]"));
        assert_eq!(
            lay("[2,2]:[1,2]").blocked_product(&lay("[3,2]:[1,3]")).unwrap(),
            lay("[[2,3],[2,2]]:[[1,4],[2,12]]")
        );
    }

    #[test]
    fn preconditions_are_errors() {
        assert!(matches!(lay("[2,2]:[1,1]").complement(8), Err(LayoutError::ComplementNotInjective { .. })));
        assert!(matches!(lay("[2,2]:[2,3]").complement(8), Err(LayoutError::ComplementStrideNotDivisible { .. })));
        assert_eq!(lay("[2,2]:[1,3]").complement(1).unwrap(), lay("1:0"));
        assert!(matches!(lay("[2,2]:[1,3]").complement(3), Err(LayoutError::ComplementStrideNotDivisible { .. })));
        assert!(matches!(
            lay("[4,3]:[1,10]").compose(&lay("6:1")),
            Err(LayoutError::CompositionShapeNotDivisible { .. })
        ));
        assert!(matches!(
            lay("[3,4]:[1,10]").compose(&lay("2:2")),
            Err(LayoutError::CompositionStrideNotDivisible { .. })
        ));
        assert!(matches!(lay("[2,2]:[0,1]").left_inverse(), Err(LayoutError::NotInjective)));
        assert!(matches!(lay("[2,2]:[3,1]").left_inverse(), Err(LayoutError::ComplementStrideNotDivisible { .. })));
        assert!(matches!(
            lay("4:1").divide(&Tiler::Modes(vec![Some(lay("2:1").into()), Some(lay("2:1").into())])),
            Err(LayoutError::TilerRankExceedsLayout { tiler: 2, rank: 1 })
        ));
    }

    #[test]
    fn nested_tilers_recurse() {
        let whole = |s: &str| Some(Tiler::Layout(lay(s)));
        // [[4,6],8]:[[1,4],24] with ((2:1, 3:1), 4:1): mode 0's sub-modes divide one by one.
        let a = lay("[[4,6],8]:[[1,4],24]");
        let nested = Tiler::Modes(vec![Some(Tiler::Modes(vec![whole("2:1"), whole("3:1")])), whole("4:1")]);
        let d = a.divide(&nested).unwrap();
        assert_eq!(d, lay("[[[2,2],[3,2]],[4,2]]:[[[1,2],[4,12]],[24,96]]"));
        let z = a.zipped_divide(&nested).unwrap();
        assert_eq!(z, lay("[[[2,3],4],[[2,2],2]]:[[[1,4],24],[[2,12],96]]"));
        // A nested tuple longer than the mode it meets names the sub-mode's rank.
        let long = Tiler::Modes(vec![Some(Tiler::Modes(vec![whole("2:1"), whole("3:1"), whole("1:1")]))]);
        assert!(matches!(a.divide(&long), Err(LayoutError::TilerRankExceedsLayout { tiler: 3, rank: 2 })));
        // compose_tiler agrees with compose_modes on a flat tuple.
        let flat = Tiler::Modes(vec![whole("2:2"), None]);
        assert_eq!(a.compose_tiler(&flat).unwrap(), a.compose_modes(&[Some(lay("2:2")), None]).unwrap());
    }
}
