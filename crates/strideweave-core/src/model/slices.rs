//! Slices of host tensors: [`Tensor::as_slice`] and [`Tensor::as_mut_slice`] lend a dense
//! host tensor's elements as `&[T]` / `&mut [T]` for as long as a guard lives, at a slice's
//! speed (the element path checks every access; a slice is checked once).
//!
//! A guard holds its carrier exclusively, as a pending move does: it claims the carrier (live,
//! unowned, unclaimed, else refused at the call), so while it lives every write, move,
//! release and further slice of the carrier, from any thread, the guard's own included, is
//! refused (`Claimed`, "pending move") instead of waiting for it. A [`HostSlice`] also holds
//! the host store's read lock (element reads by others proceed). A [`HostSliceMut`] holds
//! its write lock, after the public write's checks (mutable), and counts one write in the
//! version; while it lives an element read of the carrier is refused too (the elements are
//! being written through the slice) rather than made to wait. Both hold the store by `Arc`.
//!
//! ```
//! use strideweave_core::model::{CarrierExt, HostCarrier, ModelError, Tensor};
//!
//! let c = HostCarrier::from_f32(&[1.0, 2.0, 3.0, 4.0]);
//! let t = Tensor::canonical(c.clone(), &[2, 2]).unwrap();
//! assert_eq!(&*t.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
//! {
//!     let mut s = t.as_mut_slice::<f32>().unwrap();
//!     s.iter_mut().for_each(|x| *x *= 10.0);
//!     // Held: a write through the framework is refused, not left waiting for the guard.
//!     assert!(matches!(t.set(0, 1.0f32), Err(ModelError::Claimed { .. })));
//! }
//! assert_eq!(t.get::<f32>(3).unwrap(), 40.0);
//! assert_eq!(c.version(), 1); // one write for the whole slice
//! ```

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::carrier::{BulkStorage, HookCall, HOOK};
use super::element::SliceElement;
use super::error::{ModelError, Result};
use super::host::HostStore;
use super::lent::Lent;
use super::tensor::{Subtensor, Tensor};

/// A dense host tensor's elements, read-only, while the guard lives (see the module docs).
pub struct HostSlice<T: SliceElement> {
    _lent: Lent,
    ptr: *const T,
    len: usize,
}

/// A dense host tensor's elements, writable, while the guard lives (see the module docs).
pub struct HostSliceMut<T: SliceElement> {
    _lent: Lent,
    ptr: *mut T,
    len: usize,
    _exclusive: PhantomData<T>,
}

impl<T: SliceElement + std::fmt::Debug> std::fmt::Debug for HostSlice<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: SliceElement + std::fmt::Debug> std::fmt::Debug for HostSliceMut<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: SliceElement> Deref for HostSlice<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr..ptr + len` lies inside the store's buffer (checked when lent),
        // aligned for `T` (a 64-byte aligned buffer, a whole number of `T` from its start),
        // every bit pattern is a valid `T` (`SliceElement`), and the store's read lock, held
        // until drop, excludes writers.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: SliceElement> Deref for HostSliceMut<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: as for `HostSlice`; the write lock, held until drop, excludes every other
        // access.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: SliceElement> DerefMut for HostSliceMut<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `deref`, and `&mut self` makes this the only slice of the guard.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// The subtensor's store and its window as a range of `T`, if the tensor is one dense host
/// window of `T`: every leaf of the layout, extent-1 leaves aside, has the stride of the
/// product of the extents before it (the canonical layout).
fn dense_window<T: SliceElement>(tensor: &Tensor) -> Result<(&Subtensor, Arc<HostStore>, usize, usize)> {
    let s = tensor.single("as_slice")?;
    let carrier = s.carrier();
    carrier.state(HOOK).check_live()?;
    if tensor.dtype() != T::SLICE_KIND {
        return Err(ModelError::NoSlice { reason: "the element type is not the tensor's dtype" });
    }
    let Some(BulkStorage::Host(store)) = carrier.bulk_storage(&carrier.hook()) else {
        return Err(ModelError::NoSlice { reason: "the carrier is not host memory" });
    };
    if !s.layout().is_ordinal_identity() {
        return Err(ModelError::NoSlice { reason: "the layout is not dense in ordinal order" });
    }
    let len = tensor.size();
    let start = s.offset();
    let fits = start
        .checked_add(len)
        .is_some_and(|end| end.checked_mul(size_of::<T>()).is_some_and(|b| b <= store.len_bytes()));
    if !fits {
        return Err(ModelError::WindowOutOfRange {
            offset: start,
            cosize: len,
            size: store.len_bytes() / size_of::<T>(),
        });
    }
    Ok((s, store, start, len))
}

impl Tensor {
    /// The elements of a dense host tensor of `T` (its dtype) as a slice, in ordinal order,
    /// while the guard lives; reads need no check of their own. Refused (`NoSlice`) for
    /// another carrier, dtype or a non-dense layout; `Released` once released; `Owned` or
    /// `Claimed` unless the carrier can be held (see the module docs).
    pub fn as_slice<T: SliceElement>(&self) -> Result<HostSlice<T>> {
        let (s, store, start, len) = dense_window::<T>(self)?;
        let (lent, base) = Lent::read(s.carrier(), store)?;
        // SAFETY: `start + len` elements of `T` fit in the buffer (checked above).
        let ptr = unsafe { base.cast::<T>().add(start) };
        Ok(HostSlice { _lent: lent, ptr, len })
    }

    /// The elements of a dense host tensor of `T` as a mutable slice while the guard lives.
    /// The public write's checks run first (released, owned or not mutable → refused;
    /// claimed by a pending move → `Claimed`), the carrier is held (see the module docs), and
    /// the version counts one write.
    pub fn as_mut_slice<T: SliceElement>(&self) -> Result<HostSliceMut<T>> {
        let (s, store, start, len) = dense_window::<T>(self)?;
        let (lent, base) = Lent::write(s.carrier(), store)?;
        // SAFETY: `start + len` elements of `T` fit in the buffer (checked above).
        let ptr = unsafe { base.cast::<T>().add(start) };
        Ok(HostSliceMut { _lent: lent, ptr, len, _exclusive: PhantomData })
    }
}
