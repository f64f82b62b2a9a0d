//! `HostCarrier`: slots in host memory, over [`HostBuffer`].
//!
//! The bytes live in a [`HostStore`]: the buffer behind a reader-writer lock, shared by
//! `Arc` between the carrier, running transfers and DLPack exports. Element reads take the
//! read lock, writes the write lock, a transfer holds the source's read lock and the
//! destination's write lock for the copy — so every access the Rust side makes is free of
//! data races, whatever threads do. (Memory handed to a DLPack consumer is outside Rust's
//! control; the consumer's accesses are its own responsibility, as with any raw pointer.)
//!
//! ```
//! use strideweave_core::model::{CarrierExt, HostCarrier};
//! use strideweave_core::storage::{ElemKind, Scalar};
//!
//! let c = HostCarrier::zeros(ElemKind::I32, 3).unwrap();
//! c.set(2, Scalar::I32(7)).unwrap();
//! assert_eq!(c.get(2).unwrap(), Scalar::I32(7));
//! ```

use super::carrier::{admitted, HookToken};
use super::element::Element;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::carrier::{BulkStorage, Carrier};
use super::error::{ModelError, Result};
use super::state::CarrierState;
use crate::storage::{ElemKind, HostBuffer, Scalar};

/// A host buffer shared between a carrier and the transfers and exports using it.
#[derive(Debug)]
pub struct HostStore {
    buf: RwLock<HostBuffer>,
    /// The buffer's length, readable without the lock (a transfer may hold it for long).
    len: usize,
    /// The buffer's address, fixed for its life; recorded only (DLPack), never dereferenced
    /// outside the lock.
    addr: usize,
    /// A mutable slice of the buffer is lent (`Tensor::as_mut_slice`): element reads are
    /// refused instead of waiting for its write lock.
    lent_for_writing: std::sync::atomic::AtomicBool,
}

impl HostStore {
    /// Wrap an owned buffer.
    pub fn new(buf: HostBuffer) -> Self {
        let (len, addr) = (buf.len(), buf.as_ptr() as usize);
        HostStore { buf: RwLock::new(buf), len, addr, lent_for_writing: std::sync::atomic::AtomicBool::new(false) }
    }

    /// Length in bytes.
    pub fn len_bytes(&self) -> usize {
        self.len
    }

    /// The address of the first byte (for DLPack descriptors).
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Shared access: reads may run concurrently.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, HostBuffer> {
        self.buf.read()
    }

    /// Give back a read lock whose guard was forgotten.
    ///
    /// # Safety
    /// The caller took a read lock with [`read`](Self::read) and forgot its guard.
    pub(crate) unsafe fn force_unlock_read(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.buf.force_unlock_read() }
    }

    /// Give back the write lock whose guard was forgotten.
    ///
    /// # Safety
    /// The caller took the write lock with [`write`](Self::write) and forgot its guard.
    pub(crate) unsafe fn force_unlock_write(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.buf.force_unlock_write() }
    }

    /// Exclusive access for writing.
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, HostBuffer> {
        self.buf.write()
    }

    /// Mark a mutable slice of the buffer lent (under its write lock) or given back.
    pub(crate) fn lend_for_writing(&self, lent: bool) {
        self.lent_for_writing.store(lent, std::sync::atomic::Ordering::Release);
    }

    /// Shared access for an element read: `None` while a mutable slice is lent (its holder,
    /// on this thread or another, writes the elements: waiting could be waiting for itself).
    fn read_unless_lent(&self) -> Option<RwLockReadGuard<'_, HostBuffer>> {
        if let Some(guard) = self.buf.try_read() {
            return Some(guard);
        }
        if self.lent_for_writing.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        Some(self.buf.read())
    }
}

/// A carrier whose slots are host memory.
///
/// ```
/// use strideweave_core::model::{CarrierExt, HostCarrier};
/// use strideweave_core::storage::{ElemKind, Scalar};
///
/// let c = HostCarrier::from_f32(&[1.0, 2.0, 3.0]);
/// c.set(1, Scalar::F32(5.0)).unwrap();
/// assert_eq!(c.get(1).unwrap(), Scalar::F32(5.0));
/// assert_eq!(c.version(), 1);
/// c.release().unwrap();
/// assert!(c.get(0).is_err());
/// assert_eq!(c.elem_kind_name(), ElemKind::F32.name());
/// ```
#[derive(Debug)]
pub struct HostCarrier {
    state: CarrierState,
    kind: ElemKind,
    mutable: bool,
    /// The slot count, readable without a lock on the element path; 0 once released.
    slots: AtomicUsize,
    store: RwLock<Option<Arc<HostStore>>>,
    /// The buffer's first byte, null once the store is given up: a biased element access
    /// reads it without a lock (see `model::element_bias`).
    base: AtomicPtr<u8>,
    /// The slot count the buffer was made with (it never changes while it lives).
    capacity: usize,
}

impl HostCarrier {
    /// `slots` zeroed slots of `kind`, publicly mutable.
    pub fn zeros(kind: ElemKind, slots: usize) -> Result<Arc<Self>> {
        Self::with_mutability(kind, slots, true)
    }

    /// `slots` zeroed slots of `kind`; `mutable = false` refuses public writes (a move can
    /// still read it, but not fill it).
    pub fn with_mutability(kind: ElemKind, slots: usize, mutable: bool) -> Result<Arc<Self>> {
        Self::allocated(kind, slots, mutable, true)
    }

    /// A mutable carrier of `slots`, for a caller that writes every slot before anybody can
    /// read one: an Evictable's fresh primary, filled by the transition while it holds the
    /// composite. From the host storage's `RECYCLE_MIN` its buffer may be a recycled one,
    /// holding what its last owner wrote (the pages of the primary an eviction released,
    /// present already, instead of new ones faulted in and zeroed by the kernel); smaller
    /// buffers are zeroed, never uninitialised heap memory.
    pub(crate) fn for_overwrite(kind: ElemKind, slots: usize) -> Result<Arc<Self>> {
        let recyclable = slots.saturating_mul(kind.size()) >= crate::storage::RECYCLE_MIN;
        Self::allocated(kind, slots, true, !recyclable)
    }

    /// `n` carriers of `slots` for a tiled tier's fresh tiles, each filled before anybody can
    /// read it (or released unread), as [`for_overwrite`](Self::for_overwrite)'s are. Below
    /// the host storage's `RECYCLE_MIN` their buffers are uninitialised, served first from
    /// the buffers evicted tiles gave back ([`release_storage_into`](Self::release_storage_into),
    /// then `HostBuffer::keep_batch`): their pages present, nothing zeroed, as the Python
    /// package's tiles are.
    pub(crate) fn batch_for_overwrite(kind: ElemKind, slots: usize, n: usize) -> Result<Vec<Arc<Self>>> {
        let bytes = slots.checked_mul(kind.size()).ok_or(ModelError::OutOfMemory { bytes: usize::MAX })?;
        if bytes >= crate::storage::RECYCLE_MIN {
            return (0..n).map(|_| Self::for_overwrite(kind, slots)).collect();
        }
        let buffers = HostBuffer::uninit_batch(bytes, n).map_err(|_| ModelError::OutOfMemory { bytes })?;
        Ok(buffers.into_iter().map(|buf| Self::holding(kind, slots, true, buf)).collect())
    }

    fn allocated(kind: ElemKind, slots: usize, mutable: bool, zeroed: bool) -> Result<Arc<Self>> {
        let bytes = slots.checked_mul(kind.size()).ok_or(ModelError::OutOfMemory { bytes: usize::MAX })?;
        let buf = HostBuffer::new(bytes, zeroed).map_err(|_| ModelError::OutOfMemory { bytes })?;
        Ok(Self::holding(kind, slots, mutable, buf))
    }

    fn holding(kind: ElemKind, slots: usize, mutable: bool, buf: HostBuffer) -> Arc<Self> {
        let base = buf.as_ptr();
        Arc::new(HostCarrier {
            state: CarrierState::new("HostCarrier"),
            kind,
            mutable,
            slots: AtomicUsize::new(slots),
            store: RwLock::new(Some(Arc::new(HostStore::new(buf)))),
            base: AtomicPtr::new(base),
            capacity: slots,
        })
    }

    /// Take the store away for a release: another thread's biased access has ended, and no
    /// new one starts.
    fn take_store(&self) -> Option<Arc<HostStore>> {
        self.state.revoke_bias();
        self.slots.store(0, Ordering::Release);
        self.base.store(std::ptr::null_mut(), Ordering::Relaxed);
        self.store.write().take()
    }

    /// The address of slot `slot` when it is in range and the buffer is live (the caller
    /// holds a biased access, which keeps it so). `T` is the slot's kind, or `Scalar`.
    #[inline]
    fn biased_slot<T: Element>(&self, slot: i64) -> Option<*mut u8> {
        let slot = usize::try_from(slot).ok().filter(|&s| s < self.capacity)?;
        let base = self.base.load(Ordering::Relaxed);
        // A typed element's width is known when compiling; only `Scalar` asks the kind.
        let width = match T::KIND {
            Some(kind) => kind.size(),
            None => self.kind.size(),
        };
        // SAFETY: `slot < capacity`, so the slot lies inside the buffer of
        // `capacity * width` bytes starting at a non-null `base`.
        (!base.is_null()).then(|| unsafe { base.add(slot * width) })
    }

    /// `Tensor::get`'s way without a lock (see `model::element_bias`): the value of slot
    /// `slot` when this thread holds the carrier's bias, the carrier is live, unowned and
    /// unclaimed and `T` is its kind; `None` sends the caller the locked way, which reports
    /// why or waits.
    #[inline]
    pub(crate) fn get_biased<T: Element>(&self, slot: i64) -> Option<T> {
        if T::KIND.is_some_and(|kind| kind != self.kind) {
            return None;
        }
        let _access = self.state.enter_biased()?;
        let at = self.biased_slot::<T>(slot)?;
        // SAFETY: `at` is a slot of the live buffer, aligned to the kind's size (the buffer
        // to 64, slots whole), and `T` is the slot's kind. Bulk copies write the bytes
        // non-atomically only while the carrier is claimed or owned (or before it is
        // shared), and claiming or owning revokes the bias after waiting for this access;
        // element writes are atomic.
        Some(unsafe { T::load_slot(at, self.kind) })
    }

    /// `Tensor::set`'s way without a lock: writes slot `slot` and counts the write when this
    /// thread holds the bias, the carrier is live, unowned, unclaimed and mutable and `value`
    /// is of its kind; `None` sends the caller the locked way.
    #[inline]
    pub(crate) fn set_biased<T: Element>(&self, slot: i64, value: T) -> Option<()> {
        if !self.mutable || T::KIND.unwrap_or_else(|| super::carrier::scalar_kind(value.to_scalar())) != self.kind {
            return None;
        }
        let access = self.state.enter_biased()?;
        let at = self.biased_slot::<T>(slot)?;
        // SAFETY: as in `get_biased`; besides, a lent slice or view claims the carrier, so no
        // reference to these bytes lives meanwhile.
        unsafe { value.store_slot(at, self.kind) };
        self.state.count_biased_write(&access);
        Some(())
    }

    /// After a locked element access: bias the carrier to this thread if it may be.
    #[inline]
    pub(crate) fn offer_bias(&self) {
        self.state.offer_bias();
    }

    /// The storage release ([`Carrier::release_storage`]), handing the buffer to `kept` when
    /// nothing else holds it (no transfer, no DLPack export): a tiled tier gives its released
    /// tiles' buffers back together for the next promote's fresh tiles.
    pub(crate) fn release_storage_into(&self, kept: &mut Vec<Arc<HostBuffer>>) {
        let store = self.take_store();
        if let Some(store) = store.and_then(|store| Arc::try_unwrap(store).ok()) {
            kept.push(Arc::new(store.buf.into_inner()));
        }
    }

    /// A mutable carrier holding `values` (which must all be of one kind, `kind`).
    pub fn from_scalars(kind: ElemKind, values: &[Scalar]) -> Result<Arc<Self>> {
        let c = Self::zeros(kind, values.len())?;
        {
            let store = c.store().expect("fresh carrier is live");
            let mut buf = store.write();
            let size = kind.size();
            // Encode straight into the fresh buffer, one slot-sized chunk per value.
            for (&v, slot) in values.iter().zip(buf.as_mut_slice().chunks_exact_mut(size)) {
                if super::carrier::scalar_kind(v) != kind {
                    return Err(ModelError::ValueKind { value: v, kind });
                }
                kind.encode(v, slot);
            }
        }
        Ok(c)
    }

    /// A mutable `f32` carrier holding `values`.
    pub fn from_f32(values: &[f32]) -> Arc<Self> {
        let c = Self::zeros(ElemKind::F32, values.len()).expect("host allocation");
        {
            let store = c.store().expect("fresh carrier is live");
            let mut buf = store.write();
            for (&v, slot) in values.iter().zip(buf.as_mut_slice().chunks_exact_mut(4)) {
                slot.copy_from_slice(&v.to_ne_bytes());
            }
        }
        c
    }

    /// The shared store, `None` once released.
    pub(crate) fn store(&self) -> Option<Arc<HostStore>> {
        self.store.read().clone()
    }

    /// The element kind's name (`"f32"`, …).
    pub fn elem_kind_name(&self) -> &'static str {
        self.kind.name()
    }
}

impl Carrier for HostCarrier {
    fn state(&self, _: &HookToken) -> &CarrierState {
        &self.state
    }

    fn elem_kind(&self) -> ElemKind {
        self.kind
    }

    #[inline]
    fn size(&self) -> usize {
        self.slots.load(Ordering::Acquire)
    }

    // The slot hooks borrow the store under the carrier's read lock instead of cloning its
    // `Arc` (two atomic operations fewer on the element path), address the slot's bytes in
    // place (no copy through a scratch buffer), and build an error only when there is one.
    #[inline]
    fn read_slot(&self, token: &HookToken, i: usize) -> Result<Scalar> {
        admitted(token, &self.state)?;
        let guard = self.store.read();
        let Some(store) = guard.as_ref() else { return Err(released()) };
        let size = self.kind.size();
        let Some(buf) = store.read_unless_lent() else { return Err(self.state.pending_refusal("read")) };
        match slot_range(i, size).filter(|range| range.end <= buf.len()) {
            // SAFETY: the slot lies inside the buffer, which the read lock keeps alive, and is
            // aligned (the buffer to 64, slots whole); atomic because a biased write may store
            // into it meanwhile, and every non-atomic write holds the write lock.
            Some(range) => Ok(unsafe { self.kind.load_atomic(buf.as_ptr().add(range.start)) }),
            None => Err(slot_out_of_range(i, store.len_bytes() / size)),
        }
    }

    #[inline]
    fn write_slot(&self, token: &HookToken, i: usize, v: Scalar) -> Result<()> {
        admitted(token, &self.state)?;
        let guard = self.store.read();
        let Some(store) = guard.as_ref() else { return Err(released()) };
        let size = self.kind.size();
        let buf = store.write();
        match slot_range(i, size).filter(|range| range.end <= buf.len()) {
            Some(range) => {
                // SAFETY: as in `read_slot`, under the write lock; atomic because a biased read
                // may load the slot meanwhile.
                unsafe { self.kind.store_atomic(buf.as_ptr().add(range.start), v) };
                Ok(())
            }
            None => Err(slot_out_of_range(i, store.len_bytes() / size)),
        }
    }

    fn is_mutable_hook(&self) -> bool {
        self.mutable
    }

    #[inline]
    fn biased_host(&self, _: &HookToken) -> Option<&HostCarrier> {
        Some(self)
    }

    fn bulk_storage(&self, token: &HookToken) -> Option<BulkStorage> {
        if !token.admits(&self.state) {
            return None;
        }
        self.store().map(BulkStorage::Host)
    }

    fn allocate_like(&self, slots: usize) -> Result<Arc<dyn Carrier>> {
        Ok(Self::zeros(self.kind, slots)?)
    }

    /// Drops the carrier's handle; the memory is freed when the last transfer or DLPack
    /// export holding the store lets go.
    fn release_storage(&self, token: &HookToken) {
        if !token.admits(&self.state) {
            return;
        }
        drop(self.take_store());
    }
}

/// The bytes of slot `i` of `size`-byte slots.
#[inline]
fn slot_range(i: usize, size: usize) -> Option<std::ops::Range<usize>> {
    let start = i.checked_mul(size)?;
    Some(start..start.checked_add(size)?)
}

#[cold]
fn released() -> ModelError {
    ModelError::Released { carrier: "HostCarrier".into() }
}

#[cold]
fn slot_out_of_range(i: usize, size: usize) -> ModelError {
    ModelError::SlotOutOfRange { index: i as i64, size }
}
