//! Typed views of host tensors: [`Tensor::host_view`] and [`Tensor::host_view_mut`] hold a
//! host tensor's store for as long as the guard lives and read or write its elements by
//! ordinal or by coordinate, through any layout, at close to a slice's speed.
//!
//! [`Tensor::get`] and [`Tensor::set`] make every check of the specification on every call
//! (a released carrier, the window, the element kind, mutability, ownership, a pending
//! move's claim), and take the carrier's locks each time. A view makes those checks once,
//! when it is lent, and keeps them true by holding the carrier as a pending move does (its
//! claim: every write, move, release and further view or slice of it is refused, from any
//! thread, the view's own included) and the store's lock: a [`HostView`] the read lock (other
//! readers proceed), a [`HostViewMut`] the write lock, after the public write's checks,
//! counting one write in the version (element reads are refused meanwhile). What is left
//! per access is the bounds check of the ordinal or coordinate and the layout's arithmetic
//! (none for a layout compact in ordinal order, one multiplication per mode for a flat one).
//!
//! Both hold the store by `Arc` (one private module, `lent`, lends and gives back, for views and
//! slices alike).
//!
//! Indexing (`view[k]`, `view[(i, j)]`, `view[[i, j, l]]`) panics out of range, as a slice
//! does; [`get`](HostView::get) and [`get_coord`](HostView::get_coord) return `None`
//! instead. A coordinate has one component per top-level mode; a nested mode takes an
//! ordinal inside it.
//!
//! ```
//! use strideweave_core::layout;
//! use strideweave_core::model::{CarrierExt, HostCarrier, Tensor};
//!
//! let c = HostCarrier::from_f32(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
//! // 2 x 3, row-major: element (i, j) is slot 3 i + j.
//! let t = Tensor::new(c.clone(), 0, layout!([2, 3] : [3, 1]).unwrap()).unwrap();
//! {
//!     let mut v = t.host_view_mut::<f32>().unwrap();
//!     assert_eq!(v[(1, 2)], 5.0);
//!     v[(0, 1)] = 10.0;
//!     v.set(1, 30.0).unwrap(); // ordinal 1 is (1, 0), slot 3
//!     assert!(v.set(6, 0.0).is_err());
//! }
//! assert_eq!(c.version(), 1); // one write for the whole view
//! let v = t.host_view::<f32>().unwrap();
//! assert_eq!((v[(0, 1)], v.get(1)), (10.0, Some(&30.0)));
//! assert_eq!(v.get_coord([2, 0]), None);
//! ```

use std::marker::PhantomData;
use std::ops::{Index, IndexMut};
use std::sync::Arc;

use super::carrier::{BulkStorage, HookCall, HOOK};
use super::element::SliceElement;
use super::error::{ModelError, Result};
use super::host::HostStore;
use super::lent::Lent;
use super::tensor::Tensor;
use crate::layout::{Layout, LayoutError, Mode};

/// How a view turns an ordinal or a coordinate into a slot, relative to the window's base.
#[derive(Debug)]
struct SlotMap {
    /// The number of elements.
    size: usize,
    /// How an ordinal maps.
    ordinal: OrdinalPath,
    /// One entry per top-level mode.
    modes: Box<[ModeMap]>,
    /// Leaf extents and strides, depth-first (for nested modes and the general ordinal path).
    extents: Box<[usize]>,
    strides: Box<[usize]>,
}

#[derive(Debug, Clone, Copy)]
enum OrdinalPath {
    /// The slot is the ordinal.
    Identity,
    /// The slot is the ordinal times this stride.
    Strided(usize),
    /// The mixed-radix decode over every leaf.
    Radix,
}

/// A top-level mode: its size and its leaves `first..first + count`; a leaf mode's stride
/// directly.
#[derive(Debug, Clone, Copy)]
struct ModeMap {
    size: usize,
    stride: usize,
    first: usize,
    count: usize,
}

/// `Σ (k decoded mixed-radix over extents, first fastest) · strides`, for `k < Π extents`.
#[inline]
fn radix(extents: &[usize], strides: &[usize], mut k: usize) -> usize {
    let mut acc = 0;
    for (&e, &s) in extents.iter().zip(strides) {
        acc += (k % e) * s;
        k /= e;
    }
    acc
}

impl SlotMap {
    fn new(layout: &Layout) -> SlotMap {
        // A layout's extents are positive and its strides non-negative, and every index it
        // produces is below its cosize: all fit in `usize` (the window was checked to fit).
        let extents: Box<[usize]> = layout.leaf_extents().iter().map(|&e| e as usize).collect();
        let strides: Box<[usize]> = layout.leaf_strides().iter().map(|&s| s as usize).collect();
        let mut modes = Vec::with_capacity(layout.rank());
        let mut first = 0;
        for mode in layout.shape().modes() {
            let count = match mode {
                Mode::Nested(n) => n.leaf_count(),
                _ => 1,
            };
            let size = extents[first..first + count].iter().product();
            modes.push(ModeMap { size, stride: if count == 1 { strides[first] } else { 0 }, first, count });
            first += count;
        }
        let size = layout.size() as usize;
        let ordinal = match layout.ordinal_stride() {
            Some(1) => OrdinalPath::Identity,
            Some(stride) => OrdinalPath::Strided(stride as usize),
            None => OrdinalPath::Radix,
        };
        SlotMap { size, ordinal, modes: modes.into(), extents, strides }
    }

    #[inline]
    fn of_ordinal(&self, k: usize) -> Option<usize> {
        if k >= self.size {
            return None;
        }
        Some(match self.ordinal {
            OrdinalPath::Identity => k,
            OrdinalPath::Strided(s) => k * s,
            OrdinalPath::Radix => radix(&self.extents, &self.strides, k),
        })
    }

    #[inline]
    fn of_coord<const N: usize>(&self, coord: [usize; N]) -> Option<usize> {
        if N != self.modes.len() {
            return None;
        }
        let mut slot = 0;
        for (&c, m) in coord.iter().zip(self.modes.iter()) {
            if c >= m.size {
                return None;
            }
            slot += if m.count == 1 {
                c * m.stride
            } else {
                let leaves = m.first..m.first + m.count;
                radix(&self.extents[leaves.clone()], &self.strides[leaves], c)
            };
        }
        Some(slot)
    }
}

/// A host tensor's elements by ordinal or coordinate, read-only, while the guard lives (see
/// the module docs).
pub struct HostView<T: SliceElement> {
    _lent: Lent,
    base: *const T,
    map: SlotMap,
}

/// A host tensor's elements by ordinal or coordinate, writable, while the guard lives (see
/// the module docs).
pub struct HostViewMut<T: SliceElement> {
    _lent: Lent,
    base: *mut T,
    map: SlotMap,
    _exclusive: PhantomData<T>,
}

impl<T: SliceElement + std::fmt::Debug> std::fmt::Debug for HostView<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries((0..self.len()).map(|k| &self[k])).finish()
    }
}

impl<T: SliceElement + std::fmt::Debug> std::fmt::Debug for HostViewMut<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries((0..self.len()).map(|k| &self[k])).finish()
    }
}

/// The out-of-range error of an ordinal (the one [`Tensor::set`] reports).
#[cold]
fn ordinal_out_of_range(k: usize, size: usize) -> ModelError {
    ModelError::Layout(LayoutError::IntegerKeyOutOfRange {
        key: i64::try_from(k).unwrap_or(i64::MAX),
        size: size as i64,
    })
}

#[cold]
#[track_caller]
fn index_panic(what: &dyn std::fmt::Debug, size: usize, rank: usize) -> ! {
    panic!("index {what:?} is outside the view ({size} elements, rank {rank})")
}

macro_rules! reads {
    ($view:ident) => {
        impl<T: SliceElement> $view<T> {
            /// The number of elements.
            #[inline]
            pub fn len(&self) -> usize {
                self.map.size
            }

            /// Whether the view has no elements (never: a layout has at least one).
            #[inline]
            pub fn is_empty(&self) -> bool {
                self.map.size == 0
            }

            /// The element at ordinal `k` (first mode fastest); `None` outside `[0, len)`.
            #[inline]
            pub fn get(&self, k: usize) -> Option<&T> {
                let slot = self.map.of_ordinal(k)?;
                // SAFETY: `slot` is the layout's index of an in-range ordinal, below the
                // layout's cosize, and the window `[base, base + cosize)` lies inside the
                // store's buffer (checked when lent), aligned for `T`; every bit pattern is a
                // `T` (`SliceElement`), and the store's lock, held until drop, excludes writers
                // other than this guard's `&mut self` methods.
                Some(unsafe { &*self.base.add(slot) })
            }

            /// The element at a coordinate, one component per top-level mode (a nested mode
            /// takes an ordinal inside it); `None` if a component is out of range or the
            /// number of components is not the rank.
            #[inline]
            pub fn get_coord<const N: usize>(&self, coord: [usize; N]) -> Option<&T> {
                let slot = self.map.of_coord(coord)?;
                // SAFETY: as in `get`: an in-range coordinate's index is below the cosize.
                Some(unsafe { &*self.base.add(slot) })
            }
        }

        impl<T: SliceElement> Index<usize> for $view<T> {
            type Output = T;
            /// The element at ordinal `k`; panics outside `[0, len)`.
            #[inline]
            fn index(&self, k: usize) -> &T {
                match self.get(k) {
                    Some(x) => x,
                    None => index_panic(&k, self.map.size, self.map.modes.len()),
                }
            }
        }

        impl<T: SliceElement, const N: usize> Index<[usize; N]> for $view<T> {
            type Output = T;
            /// The element at a coordinate; panics out of range or for the wrong rank.
            #[inline]
            fn index(&self, coord: [usize; N]) -> &T {
                match self.get_coord(coord) {
                    Some(x) => x,
                    None => index_panic(&coord, self.map.size, self.map.modes.len()),
                }
            }
        }

        impl<T: SliceElement> Index<(usize, usize)> for $view<T> {
            type Output = T;
            /// The element at `(i, j)` of a rank-2 view; panics out of range.
            #[inline]
            fn index(&self, (i, j): (usize, usize)) -> &T {
                &self[[i, j]]
            }
        }

        impl<T: SliceElement> Index<(usize, usize, usize)> for $view<T> {
            type Output = T;
            /// The element at `(i, j, l)` of a rank-3 view; panics out of range.
            #[inline]
            fn index(&self, (i, j, l): (usize, usize, usize)) -> &T {
                &self[[i, j, l]]
            }
        }
    };
}

reads!(HostView);
reads!(HostViewMut);

impl<T: SliceElement> HostViewMut<T> {
    /// The element at ordinal `k`, writable; `None` outside `[0, len)`.
    #[inline]
    pub fn get_mut(&mut self, k: usize) -> Option<&mut T> {
        let slot = self.map.of_ordinal(k)?;
        // SAFETY: as in `get`; the store's write lock, held until drop, excludes every other
        // access, and `&mut self` makes this the only reference the guard hands out.
        Some(unsafe { &mut *self.base.add(slot) })
    }

    /// The element at a coordinate, writable; `None` out of range or for the wrong rank.
    #[inline]
    pub fn get_coord_mut<const N: usize>(&mut self, coord: [usize; N]) -> Option<&mut T> {
        let slot = self.map.of_coord(coord)?;
        // SAFETY: as in `get_mut`.
        Some(unsafe { &mut *self.base.add(slot) })
    }

    /// Write the element at ordinal `k`; out of range it is the error [`Tensor::set`]
    /// reports (`Layout(IntegerKeyOutOfRange)`) and nothing changes. The view counted its
    /// one write in the version when it was lent.
    #[inline]
    pub fn set(&mut self, k: usize, value: T) -> Result<()> {
        let size = self.map.size;
        match self.get_mut(k) {
            Some(slot) => {
                *slot = value;
                Ok(())
            }
            None => Err(ordinal_out_of_range(k, size)),
        }
    }
}

impl<T: SliceElement> IndexMut<usize> for HostViewMut<T> {
    /// The element at ordinal `k`, writable; panics outside `[0, len)`.
    #[inline]
    fn index_mut(&mut self, k: usize) -> &mut T {
        let (size, rank) = (self.map.size, self.map.modes.len());
        match self.get_mut(k) {
            Some(x) => x,
            None => index_panic(&k, size, rank),
        }
    }
}

impl<T: SliceElement, const N: usize> IndexMut<[usize; N]> for HostViewMut<T> {
    /// The element at a coordinate, writable; panics out of range or for the wrong rank.
    #[inline]
    fn index_mut(&mut self, coord: [usize; N]) -> &mut T {
        let (size, rank) = (self.map.size, self.map.modes.len());
        match self.get_coord_mut(coord) {
            Some(x) => x,
            None => index_panic(&coord, size, rank),
        }
    }
}

impl<T: SliceElement> IndexMut<(usize, usize)> for HostViewMut<T> {
    /// The element at `(i, j)` of a rank-2 view, writable; panics out of range.
    #[inline]
    fn index_mut(&mut self, (i, j): (usize, usize)) -> &mut T {
        &mut self[[i, j]]
    }
}

impl<T: SliceElement> IndexMut<(usize, usize, usize)> for HostViewMut<T> {
    /// The element at `(i, j, l)` of a rank-3 view, writable; panics out of range.
    #[inline]
    fn index_mut(&mut self, (i, j, l): (usize, usize, usize)) -> &mut T {
        &mut self[[i, j, l]]
    }
}

/// The checks every view makes when lent: one subtensor, a live host carrier of `T`, and a
/// window (offset + cosize) inside the store. Returns the store and the window's first slot.
fn host_window<T: SliceElement>(tensor: &Tensor) -> Result<(Arc<HostStore>, usize)> {
    let s = tensor.single("host_view")?;
    let carrier = s.carrier();
    carrier.state(HOOK).check_live()?;
    if tensor.dtype() != T::SLICE_KIND {
        return Err(ModelError::NoHostView { reason: "the element type is not the tensor's dtype" });
    }
    let Some(BulkStorage::Host(store)) = carrier.bulk_storage(&carrier.hook()) else {
        return Err(ModelError::NoHostView { reason: "the carrier is not host memory" });
    };
    let cosize = s.layout().cosize() as usize;
    let fits = s
        .offset()
        .checked_add(cosize)
        .is_some_and(|end| end.checked_mul(size_of::<T>()).is_some_and(|b| b <= store.len_bytes()));
    if !fits {
        return Err(ModelError::WindowOutOfRange {
            offset: s.offset(),
            cosize,
            size: store.len_bytes() / size_of::<T>(),
        });
    }
    Ok((store, s.offset()))
}

impl Tensor {
    /// A read-only view of a host tensor of `T` (its dtype), by ordinal or coordinate,
    /// through any layout, while the guard lives (see [`views`](super::views)). Refused
    /// (`NoHostView`) for another carrier or dtype, `MultiSubtensor` for several
    /// subtensors, `Released` once released.
    pub fn host_view<T: SliceElement>(&self) -> Result<HostView<T>> {
        let (store, offset) = host_window::<T>(self)?;
        let map = SlotMap::new(self.layout());
        let (lent, base) = Lent::read(self.carrier(), store)?;
        // SAFETY: `offset + cosize` elements of `T` fit in the buffer (checked above).
        let base = unsafe { base.cast::<T>().add(offset) };
        Ok(HostView { _lent: lent, base, map })
    }

    /// A writable view of a host tensor of `T` while the guard lives. The public write's
    /// checks run first (released, owned or not mutable → refused; claimed by a pending move
    /// → `Claimed`), the carrier is held (see the module docs), and the version counts one
    /// write. Refused as [`host_view`](Self::host_view) is.
    pub fn host_view_mut<T: SliceElement>(&self) -> Result<HostViewMut<T>> {
        let (store, offset) = host_window::<T>(self)?;
        let map = SlotMap::new(self.layout());
        let (lent, base) = Lent::write(self.carrier(), store)?;
        // SAFETY: `offset + cosize` elements of `T` fit in the buffer (checked above).
        let base = unsafe { base.cast::<T>().add(offset) };
        Ok(HostViewMut { _lent: lent, base, map, _exclusive: PhantomData })
    }
}
