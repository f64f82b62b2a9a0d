//! Slices of host tensors: [`Tensor::as_slice`] and [`Tensor::as_mut_slice`] lend a dense
//! host tensor's elements as `&[T]` / `&mut [T]` for as long as a guard lives, at a slice's
//! speed (the element path checks every access; a slice is checked once).
//!
//! A [`HostSlice`] holds the host store's read lock: transfers out of the carrier and other
//! readers proceed, writes and transfers into it wait. A [`HostSliceMut`] holds its write
//! lock, taken after the public write's checks (live, unowned, unclaimed, mutable) in the
//! same critical section of the carrier state, and counts one write in the version. Both
//! hold the store by `Arc`, so a release meanwhile frees the memory only when the guard
//! drops. A thread holding a guard must not move, write or release the same carrier through
//! the framework until it drops the guard (the transfer or write would wait for the lock).
//!
//! ```
//! use strideweave_core::model::{CarrierExt, HostCarrier, Tensor};
//!
//! let c = HostCarrier::from_f32(&[1.0, 2.0, 3.0, 4.0]);
//! let t = Tensor::canonical(c.clone(), &[2, 2]).unwrap();
//! assert_eq!(&*t.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
//! {
//!     let mut s = t.as_mut_slice::<f32>().unwrap();
//!     s.iter_mut().for_each(|x| *x *= 10.0);
//! }
//! assert_eq!(t.get::<f32>(3).unwrap(), 40.0);
//! assert_eq!(c.version(), 1); // one write for the whole slice
//! ```

use crate::model::carrier::HookCall;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::carrier::{BulkStorage, HOOK};
use super::element::SliceElement;
use super::error::{ModelError, Result};
use super::host::HostStore;
use super::tensor::{Subtensor, Tensor};

/// A dense host tensor's elements, read-only, while the guard lives (see the module docs).
pub struct HostSlice<T: SliceElement> {
    store: Arc<HostStore>,
    ptr: *const T,
    len: usize,
}

/// A dense host tensor's elements, writable, while the guard lives (see the module docs).
pub struct HostSliceMut<T: SliceElement> {
    store: Arc<HostStore>,
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

impl<T: SliceElement> Drop for HostSlice<T> {
    fn drop(&mut self) {
        // SAFETY: `lend` took one read lock of this store and forgot its guard; this gives
        // exactly that lock back.
        unsafe { self.store.force_unlock_read() }
    }
}

impl<T: SliceElement> Drop for HostSliceMut<T> {
    fn drop(&mut self) {
        // SAFETY: `as_mut_slice` took the write lock of this store and forgot its guard;
        // this gives exactly that lock back.
        unsafe { self.store.force_unlock_write() }
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
    /// another carrier, dtype or a non-dense layout; `Released` once released.
    pub fn as_slice<T: SliceElement>(&self) -> Result<HostSlice<T>> {
        let (_, store, start, len) = dense_window::<T>(self)?;
        let base = {
            let guard = store.read();
            let base = guard.as_ptr();
            std::mem::forget(guard); // given back by HostSlice's drop
            base
        };
        // SAFETY: `start + len` elements of `T` fit in the buffer (checked above).
        let ptr = unsafe { base.cast::<T>().add(start) };
        Ok(HostSlice { store, ptr, len })
    }

    /// The elements of a dense host tensor of `T` as a mutable slice while the guard lives.
    /// The public write's checks run first, in one critical section with taking the store's
    /// write lock (released, owned or not mutable → refused; claimed by a pending move →
    /// `Claimed`), and the version counts one write.
    pub fn as_mut_slice<T: SliceElement>(&self) -> Result<HostSliceMut<T>> {
        let (s, store, start, len) = dense_window::<T>(self)?;
        let carrier = s.carrier();
        let gate = carrier.state(HOOK).begin_write()?;
        gate.check_writable(carrier.is_mutable_hook())?;
        let base = {
            let mut guard = store.write();
            let base = guard.as_mut_slice().as_mut_ptr();
            std::mem::forget(guard); // given back by HostSliceMut's drop
            base
        };
        gate.commit();
        // SAFETY: `start + len` elements of `T` fit in the buffer (checked above).
        let ptr = unsafe { base.cast::<T>().add(start) };
        Ok(HostSliceMut { store, ptr, len, _exclusive: PhantomData })
    }
}
