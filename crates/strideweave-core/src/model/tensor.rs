//! `Tensor`: a dtype and one or more subtensors, each a carrier, an offset and a layout.
//!
//! Element `k` of a single-subtensor tensor is slot `offset + layout(k)` of its carrier.
//! Tensors are cheap handles (`Clone` shares the subtensors); values live in carriers, whose
//! state decides who may read, write, release or move them.
//!
//! ```
//! use strideweave_core::model::{HostCarrier, Tensor};
//!
//! let t = Tensor::canonical(HostCarrier::from_f32(&[1.0, 2.0, 3.0, 4.0]), &[2, 2]).unwrap();
//! t.set(3, 8.0f32).unwrap();
//! assert_eq!((t.size(), t.get::<f32>(3).unwrap()), (4, 8.0));
//! ```

use super::carrier::HOOK;
use std::sync::Arc;

use super::carrier::{read_at, write_checked, Carrier, CarrierExt, IntoCarrier};
use super::element::Element;
use super::error::{ModelError, Result};
use crate::layout::{Coord, Layout, LayoutError, Shape};
use crate::storage::{ElemKind, Scalar};

/// One carrier window of a tensor.
#[derive(Clone)]
pub struct Subtensor {
    carrier: Arc<dyn Carrier>,
    offset: usize,
    /// Shared, so a tensor built over a layout somebody holds (a binding's layout object, a
    /// move's output over its source's layout) costs no copy of the layout's trees.
    layout: Arc<Layout>,
    /// `carrier` as a host carrier, if it is one, found once here so that every element
    /// access does not ask again through the carrier's virtual table.
    host: Option<HostOf>,
}

/// A pointer to the host carrier a [`Subtensor`]'s own `carrier` is.
#[derive(Clone, Copy)]
struct HostOf(std::ptr::NonNull<super::host::HostCarrier>);

// SAFETY: it points to a `HostCarrier` (which is `Send` and `Sync`) inside the allocation the
// same subtensor's `carrier` keeps alive, and is only turned into a shared reference.
unsafe impl Send for HostOf {}
// SAFETY: as for `Send`.
unsafe impl Sync for HostOf {}

impl std::fmt::Debug for Subtensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subtensor")
            .field("carrier", &self.carrier.state(HOOK).class_name())
            .field("offset", &self.offset)
            .field("layout", &format_args!("{}:{}", self.layout.shape(), self.layout.stride()))
            .finish()
    }
}

impl Subtensor {
    /// A window of `carrier` (any `Arc` of a carrier, or a reference to one): `offset +
    /// cosize` must fit in its slots. `layout` is a [`Layout`] or a shared `Arc<Layout>`.
    pub fn new(carrier: impl IntoCarrier, offset: usize, layout: impl Into<Arc<Layout>>) -> Result<Self> {
        let carrier = carrier.into_carrier();
        let layout = layout.into();
        carrier.state(HOOK).check_live()?;
        let cosize = layout.cosize() as usize;
        let size = carrier.size();
        if offset.checked_add(cosize).is_none_or(|end| end > size) {
            // A release racing this call shrinks the size to 0: that is the refusal to give.
            carrier.state(HOOK).check_live()?;
            return Err(ModelError::WindowOutOfRange { offset, cosize, size });
        }
        let host = carrier.biased_host(HOOK).map(|h| HostOf(std::ptr::NonNull::from(h)));
        Ok(Subtensor { carrier, offset, layout, host })
    }

    /// The carrier as a host carrier, if it is one.
    #[inline]
    fn host(&self) -> Option<&super::host::HostCarrier> {
        // SAFETY: `HostOf` points into the carrier `self.carrier` holds, which outlives the
        // borrow of `self`.
        self.host.map(|h| unsafe { h.0.as_ref() })
    }

    /// The carrier the window is on.
    pub fn carrier(&self) -> &Arc<dyn Carrier> {
        &self.carrier
    }

    /// The slot of coordinate 0.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The layout from coordinates to slots (relative to the offset).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The layout, shared.
    pub fn shared_layout(&self) -> &Arc<Layout> {
        &self.layout
    }
}

/// A tensor over carriers.
///
/// ```
/// use strideweave_core::layout::{Layout, Shape, Stride};
/// use strideweave_core::model::{HostCarrier, Tensor};
/// use strideweave_core::storage::Scalar;
///
/// let c = HostCarrier::from_f32(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
/// // A 2 x 3 column-major view: element (i, j) is slot i + 2 j.
/// let layout = Layout::new(Shape::flat(&[2, 3]).unwrap(), Stride::flat(&[1, 2]).unwrap()).unwrap();
/// let t = Tensor::new(c, 0, layout).unwrap();
/// assert_eq!(t.get::<f32>(3).unwrap(), 3.0);
/// assert_eq!(t.get::<Scalar>(3).unwrap(), Scalar::F32(3.0));
/// t.set(5, -1.0f32).unwrap();
/// assert_eq!(t.values_f32().unwrap(), vec![0.0, 1.0, 2.0, 3.0, 4.0, -1.0]);
/// ```
#[derive(Clone, Debug)]
pub struct Tensor {
    dtype: ElemKind,
    subtensors: Arc<[Subtensor]>,
}

impl Tensor {
    /// A single-subtensor tensor whose dtype is the carrier's element kind. `carrier` is any
    /// `Arc` of a carrier, or a reference to one (`&Arc<FileCarrier>`); `layout` is a
    /// [`Layout`] or a shared `Arc<Layout>`.
    ///
    /// ```
    /// use strideweave_core::layout;
    /// use strideweave_core::model::{FileCarrier, Tensor};
    /// use strideweave_core::storage::ElemKind;
    ///
    /// let file = FileCarrier::temp_zeros(ElemKind::F32, 6).unwrap();
    /// let t = Tensor::new(&file, 0, layout!([2, 3] : [3, 1]).unwrap()).unwrap(); // row-major
    /// t.set(5, 7.0f32).unwrap();
    /// assert_eq!(t.get::<f32>(5).unwrap(), 7.0);
    /// ```
    pub fn new(carrier: impl IntoCarrier, offset: usize, layout: impl Into<Arc<Layout>>) -> Result<Self> {
        let carrier = carrier.into_carrier();
        let dtype = carrier.elem_kind();
        Ok(Tensor { dtype, subtensors: Arc::new([Subtensor::new(carrier, offset, layout)?]) })
    }

    /// A tensor over `carrier` at offset 0 with the canonical (first-mode-fastest) layout
    /// of `extents`.
    ///
    /// `carrier` is anything that converts into a shared carrier (`Arc<HostCarrier>`,
    /// `Arc<dyn Carrier>`, …).
    pub fn canonical(carrier: impl IntoCarrier, extents: &[usize]) -> Result<Self> {
        let extents: Vec<i64> = extents
            .iter()
            .map(|&e| i64::try_from(e).map_err(|_| ModelError::Layout(LayoutError::SizeOverflow)))
            .collect::<Result<_>>()?;
        let layout = Layout::canonical(&Shape::flat(&extents)?)?;
        Self::new(carrier.into_carrier(), 0, layout)
    }

    /// A tensor of several subtensors (for instance the planes of a compound dtype). Every
    /// subtensor must have the same shape; at least one is required.
    pub fn from_subtensors(dtype: ElemKind, subtensors: Vec<Subtensor>) -> Result<Self> {
        let Some(first) = subtensors.first() else {
            return Err(ModelError::NoSubtensors);
        };
        let shape = first.layout.shape().clone();
        if let Some(bad) = subtensors.iter().find(|s| *s.layout.shape() != shape) {
            return Err(ModelError::SubtensorShapesDiffer {
                first: Box::new(shape),
                other: Box::new(bad.layout.shape().clone()),
            });
        }
        Ok(Tensor { dtype, subtensors: subtensors.into() })
    }

    /// The element kind of every subtensor's carrier.
    pub fn dtype(&self) -> ElemKind {
        self.dtype
    }

    /// The windows, in order.
    pub fn subtensors(&self) -> &[Subtensor] {
        &self.subtensors
    }

    /// The single subtensor, or `MultiSubtensor` naming `operation`.
    pub fn single(&self, operation: &'static str) -> Result<&Subtensor> {
        match &*self.subtensors {
            [one] => Ok(one),
            many => Err(ModelError::MultiSubtensor { operation, count: many.len() }),
        }
    }

    /// The carrier of subtensor 0.
    pub fn carrier(&self) -> &Arc<dyn Carrier> {
        &self.subtensors[0].carrier
    }

    /// The offset of subtensor 0.
    pub fn offset(&self) -> usize {
        self.subtensors[0].offset
    }

    /// The layout of subtensor 0.
    pub fn layout(&self) -> &Layout {
        &self.subtensors[0].layout
    }

    /// Logical number of elements.
    pub fn size(&self) -> usize {
        self.layout().size() as usize
    }

    /// Whether a public write could succeed now (every subtensor's carrier is mutable).
    pub fn is_mutable(&self) -> bool {
        self.subtensors.iter().all(|s| s.carrier.is_mutable())
    }

    fn slot_of_int(&self, k: i64) -> Result<(&Subtensor, i64)> {
        let s = self.single("element access")?;
        let index = s.layout.try_index_of_int(k)?;
        Ok((s, s.offset as i64 + index))
    }

    fn slot_of_coord(&self, coord: &Coord) -> Result<(&Subtensor, i64)> {
        let s = self.single("element access")?;
        let index = s.layout.index_of_coord(coord)?;
        Ok((s, s.offset as i64 + index))
    }

    /// Element at ordinal `k` (first mode fastest), as `T`: `f32`, `f64`, `i32`, `bool`, or
    /// [`Scalar`] for whatever the tensor holds. A `T` of another kind than the tensor's
    /// dtype is `ValueKind`.
    ///
    /// On a [`HostCarrier`](super::HostCarrier), the thread that accesses the elements
    /// holds the carrier's bias after its first access and then reads and writes them with
    /// plain loads and stores, a few nanoseconds per call; the first access, any other
    /// thread's, and every access within 256 of a claim, release or other thread's write take
    /// the locked way. The results are the same either way.
    #[inline]
    pub fn get<T: Element>(&self, k: usize) -> Result<T> {
        let (s, slot) = self.slot_of_int(ordinal(k)?)?;
        if let Some(host) = s.host() {
            // Without a lock when this thread holds the host carrier's bias; else the locked
            // way, which may bias the carrier to this thread for the next access.
            if let Some(value) = host.get_biased(slot) {
                return Ok(value);
            }
            let value = T::from_scalar(read_at(&*s.carrier, slot)?)?;
            host.offer_bias();
            return Ok(value);
        }
        T::from_scalar(read_at(&*s.carrier, slot)?)
    }

    /// Element at a hierarchical coordinate, as `T` (see [`get`](Self::get)).
    pub fn get_coord<T: Element>(&self, coord: &Coord) -> Result<T> {
        let (s, slot) = self.slot_of_coord(coord)?;
        T::from_scalar(read_at(&*s.carrier, slot)?)
    }

    /// Write the element at ordinal `k` (a public write: checked, counted in the version).
    /// `value` is an `f32`, `f64`, `i32`, `bool` or a [`Scalar`].
    #[inline]
    pub fn set<T: Element>(&self, k: usize, value: T) -> Result<()> {
        let (s, slot) = self.slot_of_int(ordinal(k)?)?;
        if let Some(host) = s.host() {
            if let Some(()) = host.set_biased(slot, value) {
                return Ok(());
            }
            write_checked(&*s.carrier, None, slot, value.to_scalar())?;
            host.offer_bias();
            return Ok(());
        }
        write_checked(&*s.carrier, None, slot, value.to_scalar())
    }

    /// Write the element at a hierarchical coordinate.
    pub fn set_coord<T: Element>(&self, coord: &Coord, value: T) -> Result<()> {
        let (s, slot) = self.slot_of_coord(coord)?;
        write_checked(&*s.carrier, None, slot, value.to_scalar())
    }

    /// Every element in ordinal order.
    pub fn values(&self) -> Result<Vec<Scalar>> {
        (0..self.size()).map(|k| self.get(k)).collect()
    }

    /// Every element in ordinal order, as `T` (see [`get`](Self::get)).
    pub fn values_as<T: Element>(&self) -> Result<Vec<T>> {
        (0..self.size()).map(|k| self.get(k)).collect()
    }

    /// Every element of an `f32` tensor in ordinal order.
    pub fn values_f32(&self) -> Result<Vec<f32>> {
        self.values_as()
    }
}

/// An ordinal as the layout's signed index type.
#[inline]
pub(crate) fn ordinal(k: usize) -> Result<i64> {
    i64::try_from(k).map_err(|_| ModelError::Layout(LayoutError::OrdinalOutOfRange(i64::MAX)))
}
