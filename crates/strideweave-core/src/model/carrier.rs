//! The `Carrier` trait — the seam through which any storage, built-in or foreign (a
//! Python-defined carrier, say), plugs into the object model — and the framework-owned
//! operations every carrier gets.
//!
//! A carrier implements storage hooks only: its size, element kind, raw slot reads and
//! writes, and optionally bulk storage access, a release hook and allocation. The checks
//! the specification orders (released, index range, mutability, ownership, claims) and the
//! version counting live in [`CarrierExt`], which is implemented for every carrier and
//! cannot be overridden, so no carrier can forget a check or count a write twice.
//!
//! ```
//! use strideweave_core::model::{CarrierExt, HostCarrier};
//! use strideweave_core::storage::Scalar;
//!
//! let c = HostCarrier::from_f32(&[1.0]);
//! assert!(c.set(1, Scalar::F32(0.0)).is_err()); // out of range: refused, nothing counted
//! c.set(0, Scalar::F32(2.0)).unwrap();
//! assert_eq!((c.get(0).unwrap(), c.version()), (Scalar::F32(2.0), 1));
//! ```

use std::any::TypeId;
use std::sync::Arc;

use super::error::{ModelError, Result};
use super::host::HostStore;
use super::state::{CarrierState, OwnerToken};
#[cfg(feature = "block-devices")]
use crate::storage::block::{BlockDevice, Extent};
use crate::storage::{ElemKind, FileStore, HostBuffer, Scalar};

/// Exact-class identity of a carrier, for route lookup. Routes match classes by identity:
/// nothing is inherited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClassKey {
    /// A Rust type.
    Rust(TypeId),
    /// A foreign class (for instance a Python type), identified by its binding.
    Foreign(u64),
}

impl ClassKey {
    /// The key of Rust type `T`.
    pub fn of<T: ?Sized + 'static>() -> Self {
        ClassKey::Rust(TypeId::of::<T>())
    }
}

/// Proof that the framework calls a storage hook, and on which carrier.
///
/// Every storage hook of [`Carrier`] takes a `&HookToken`, and only this crate can make one:
/// an implementor writes the hooks, but code outside the crate cannot call them, so no
/// public path reaches a slot write without the mutability, claim and version checks, a
/// release without the state transition, or an `allocate` that shrinks a carrier under a
/// live tensor. The checked operations are [`CarrierExt`]'s.
///
/// A token names the carrier whose hook the framework calls ([`admits`](Self::admits)): a
/// hook that passes the token it was handed on to another carrier's hook is refused by that
/// carrier (every built-in carrier asks, `ModelError::HookNotAdmitted`), so a carrier's own
/// code cannot reach another carrier's storage around the checks either.
#[derive(Debug)]
pub struct HookToken {
    /// The address of the state of the carrier the call is for; 0 for [`Carrier::state`],
    /// which needs no carrier.
    target: usize,
}

impl HookToken {
    /// Whether the framework made this token for a hook call on the carrier whose state is
    /// `state`. A carrier that guards storage of its own asks before touching it.
    pub fn admits(&self, state: &CarrierState) -> bool {
        self.target == state as *const CarrierState as usize
    }
}

/// The token the framework passes to [`Carrier::state`]; it admits no storage hook.
pub(crate) const HOOK: &HookToken = &HookToken { target: 0 };

/// The framework's way to call a storage hook: `c.write_slot(&c.hook(), i, v)`.
pub(crate) trait HookCall: Carrier {
    /// The token of a hook call on this carrier.
    fn hook(&self) -> HookToken {
        HookToken { target: self.state(HOOK) as *const CarrierState as usize }
    }
}

impl<C: Carrier + ?Sized> HookCall for C {}

/// `Ok` when `token` was made for the carrier whose state is `state`; else the refusal.
pub(crate) fn admitted(token: &HookToken, state: &CarrierState) -> Result<()> {
    if token.admits(state) {
        Ok(())
    } else {
        Err(ModelError::HookNotAdmitted { carrier: state.class_name().to_string() })
    }
}

/// What an argument that names a carrier accepts: `Arc<HostCarrier>` (or any concrete
/// carrier), `Arc<dyn Carrier>`, or a reference to either (cloned). So
/// `move_tensor(&t, &file)` works with `file: Arc<FileCarrier>` as with `Arc<dyn Carrier>`.
pub trait IntoCarrier {
    /// The shared carrier.
    fn into_carrier(self) -> Arc<dyn Carrier>;
}

impl<C: Carrier> IntoCarrier for Arc<C> {
    fn into_carrier(self) -> Arc<dyn Carrier> {
        self
    }
}

impl<C: Carrier> IntoCarrier for &Arc<C> {
    fn into_carrier(self) -> Arc<dyn Carrier> {
        self.clone()
    }
}

impl IntoCarrier for Arc<dyn Carrier> {
    fn into_carrier(self) -> Arc<dyn Carrier> {
        self
    }
}

impl IntoCarrier for &Arc<dyn Carrier> {
    fn into_carrier(self) -> Arc<dyn Carrier> {
        self.clone()
    }
}

/// Host memory that a carrier guards by its claims instead of a lock: a binding's buffer,
/// which its own element paths address directly (the Python package's `CPU`). A move's
/// transfer writes it through raw pointers while the move claims the carrier, so making one is
/// `unsafe`: see [`ClaimedHost::new`].
#[derive(Clone, Debug)]
pub struct ClaimedHost(Arc<HostBuffer>);

impl ClaimedHost {
    /// The buffer of a carrier that guards it by its claims.
    ///
    /// # Safety
    /// While a move of this model claims the carrier that hands this out, nothing but that
    /// move's transfer writes the buffer's bytes: the carrier refuses every write of a claimed
    /// carrier through its own paths. (Bytes the carrier exported to foreign code, through
    /// DLPack say, are that code's: a binding documents that writing them during a move is the
    /// user's race.) Reads by others may overlap the transfer's writes into a destination:
    /// they copy plain bytes out and may see a partial value. The `Arc` keeps the buffer
    /// allocated.
    pub unsafe fn new(buffer: Arc<HostBuffer>) -> Self {
        ClaimedHost(buffer)
    }

    /// The buffer.
    pub fn buffer(&self) -> &Arc<HostBuffer> {
        &self.0
    }
}

/// An owned buffer handle, for a copy that outlives its caller (one sent to another thread).
impl From<ClaimedHost> for std::borrow::Cow<'_, ClaimedHost> {
    fn from(claimed: ClaimedHost) -> Self {
        std::borrow::Cow::Owned(claimed)
    }
}

/// A borrowed buffer handle, for a copy run while its caller holds the handle.
impl<'a> From<&'a ClaimedHost> for std::borrow::Cow<'a, ClaimedHost> {
    fn from(claimed: &'a ClaimedHost) -> Self {
        std::borrow::Cow::Borrowed(claimed)
    }
}

/// Storage a transfer may access in bulk instead of slot by slot. A running transfer holds
/// these by `Arc`, so the bytes outlive a concurrent release of the carrier's handle.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum BulkStorage {
    /// Host memory behind a lock (see [`HostStore`]).
    Host(Arc<HostStore>),
    /// Host memory its carrier guards by its claims (see [`ClaimedHost`]).
    ClaimedHost(ClaimedHost),
    /// A file of native-endian slots.
    File(Arc<FileStore>),
    /// One extent of a block device.
    #[cfg(feature = "block-devices")]
    Block(Arc<BlockDevice>, Extent),
}

/// A flat array of slots of one element kind.
///
/// Implementors supply storage only; the framework's checked operations are in
/// [`CarrierExt`]. Slot hooks receive indices the framework has already checked against
/// [`size`](Carrier::size), and values of the carrier's [`elem_kind`](Carrier::elem_kind).
/// Hooks must not call back into this carrier's framework operations (the state is locked
/// during a write). A binding whose hooks take a global lock (Python's GIL) must hold that
/// lock whenever it calls a framework operation that can reach a hook, or release it before
/// every framework call, so the state mutex and the global lock are always taken in one
/// order. The storage hooks take a [`HookToken`], which only the framework can pass: they
/// are implemented here and called only by the framework's checked operations.
///
/// A foreign carrier in a dozen lines; it moves like any other (elementwise, since no
/// built-in route names its class):
///
/// ```
/// use std::sync::Arc;
/// use std::sync::Mutex;
/// use strideweave_core::model::{move_tensor, Carrier, CarrierExt, CarrierState, HookToken, HostCarrier, ModelError, Tensor};
/// use strideweave_core::storage::{ElemKind, Scalar};
///
/// struct Doubles { state: CarrierState, slots: Mutex<Vec<f64>> }
///
/// impl Carrier for Doubles {
///     fn state(&self, _: &HookToken) -> &CarrierState { &self.state }
///     fn elem_kind(&self) -> ElemKind { ElemKind::F64 }
///     fn size(&self) -> usize { self.slots.lock().unwrap().len() }
///     fn read_slot(&self, _: &HookToken, i: usize) -> Result<Scalar, ModelError> { Ok(Scalar::F64(self.slots.lock().unwrap()[i])) }
///     fn write_slot(&self, _: &HookToken, i: usize, v: Scalar) -> Result<(), ModelError> {
///         if let Scalar::F64(x) = v { self.slots.lock().unwrap()[i] = x }
///         Ok(())
///     }
///     fn is_mutable_hook(&self) -> bool { true }
///     fn release_storage(&self, _: &HookToken) { self.slots.lock().unwrap().clear() }
/// }
///
/// let mine: Arc<dyn Carrier> = Arc::new(Doubles { state: CarrierState::new("Doubles"), slots: Mutex::new(vec![0.5, 1.5]) });
/// mine.set(1, Scalar::F64(2.5)).unwrap();           // checked and counted by the framework
/// assert!(mine.set(2, Scalar::F64(0.0)).is_err());   // out of range: nothing changes
/// let t = Tensor::canonical(mine.clone(), &[2]).unwrap();
/// let host: Arc<dyn Carrier> = HostCarrier::zeros(ElemKind::F64, 2).unwrap();
/// let moved = move_tensor(&t, &host).unwrap();
/// assert_eq!(moved.get::<f64>(1).unwrap(), 2.5);
/// assert!(mine.is_released());
/// ```
///
/// Code outside the crate cannot call a hook, so it cannot skip the checks:
///
/// ```compile_fail
/// use strideweave_core::model::{Carrier, HookToken, HostCarrier};
/// use strideweave_core::storage::Scalar;
/// let host = HostCarrier::from_f32(&[1.0]);
/// let forged = HookToken { target: 0 }; // private: no token outside the framework
/// host.write_slot(&forged, 0, Scalar::F32(2.0)).unwrap();
/// ```
pub trait Carrier: Send + Sync + 'static {
    /// The framework state embedded in the carrier.
    fn state(&self, _: &HookToken) -> &CarrierState;

    /// The element kind of every slot (the carrier's dtype).
    fn elem_kind(&self) -> ElemKind;

    /// Number of slots; 0 once released.
    fn size(&self) -> usize;

    /// Read slot `i` (`i < size()`).
    fn read_slot(&self, _: &HookToken, i: usize) -> Result<Scalar>;

    /// Write slot `i` (`i < size()`, `v` of the carrier's kind). No version change: the
    /// framework counts public writes, and a move's fill is not one.
    fn write_slot(&self, _: &HookToken, i: usize, v: Scalar) -> Result<()>;

    /// Whether the carrier accepts public writes at all (the spec's `_is_mutable`).
    fn is_mutable_hook(&self) -> bool {
        false
    }

    /// Bulk access to the storage, if the carrier has one the built-in routes understand.
    fn bulk_storage(&self, _: &HookToken) -> Option<BulkStorage> {
        None
    }

    /// Free the storage; called once, after the framework marked the carrier released.
    fn release_storage(&self, _: &HookToken) {}

    /// Free the storage of a carrier whose move is committing: called once, while the move's
    /// claim still keeps everybody else off the storage and before the framework marks the
    /// carrier released. A failure (a file that cannot be unlinked, say) fails the move, which
    /// leaves the carrier live. The default is [`release_storage`](Carrier::release_storage),
    /// which cannot fail.
    fn release_claimed_storage(&self, token: &HookToken) -> Result<()> {
        self.release_storage(token);
        Ok(())
    }

    /// Whether [`allocate`](Carrier::allocate) can grow an empty carrier.
    fn can_allocate(&self) -> bool {
        false
    }

    /// Resize to exactly `slots` slots (new slots read as zero). A move grows an empty
    /// destination with it, and shrinks it back to 0 when the move fails.
    fn allocate(&self, _: &HookToken, slots: usize) -> Result<()> {
        let _ = slots;
        Err(ModelError::NotAllocatable { carrier: self.state(HOOK).class_name().to_string() })
    }

    /// A new carrier like this one (its kind, unowned, publicly mutable) of `slots` zeroed
    /// slots, even once this one is released: a composite makes a tier it must replace with
    /// it (an [`Evictable`](super::Evictable)'s primary, released by an eviction, before the
    /// promote). The default cannot (`NotAllocatable`).
    fn allocate_like(&self, slots: usize) -> Result<Arc<dyn Carrier>> {
        let _ = slots;
        Err(ModelError::NotAllocatable { carrier: self.state(HOOK).class_name().to_string() })
    }

    /// The host carrier whose elements `Tensor::get`/`set` may reach without a lock, by a
    /// biased access (see `HostCarrier`); no other carrier has one.
    #[doc(hidden)]
    fn biased_host(&self, _: &HookToken) -> Option<&super::host::HostCarrier> {
        None
    }

    /// Exact-class identity for route lookup. Foreign carriers return
    /// [`ClassKey::Foreign`] with their binding's identity of the class.
    fn class_key(&self) -> ClassKey {
        ClassKey::of::<Self>()
    }
}

/// The framework-owned operations of every carrier, with the specification's checks in
/// order. Implemented for all carriers; not meant to be implemented by hand.
pub trait CarrierExt: Carrier {
    /// The version: 0 at construction, +1 per successful public write.
    fn version(&self) -> u64 {
        self.state(HOOK).version()
    }

    /// Whether the carrier is released.
    fn is_released(&self) -> bool {
        self.state(HOOK).is_released()
    }

    /// Whether a composite owns the carrier.
    fn is_owned(&self) -> bool {
        self.state(HOOK).is_owned()
    }

    /// Live, unowned and mutable by its hook.
    fn is_mutable(&self) -> bool {
        !self.is_released() && !self.is_owned() && self.is_mutable_hook()
    }

    /// `carrier[i]`: released → `Released`; outside `[0, size)` → `SlotOutOfRange`.
    #[inline]
    fn get(&self, i: usize) -> Result<Scalar> {
        read_at(self, as_index(i))
    }

    /// `carrier[i] = v`: released, range, then owned / not mutable → `NotMutable`, claimed
    /// by a pending move → `Claimed`, a value of another kind → `ValueKind`. On success the
    /// version rises by one; on failure nothing changes.
    #[inline]
    fn set(&self, i: usize, v: Scalar) -> Result<()> {
        write_checked(self, None, as_index(i), v)
    }

    /// A write by the owning composite carrier, which bypasses the ownership check only.
    fn set_as_owner(&self, owner: OwnerToken, i: usize, v: Scalar) -> Result<()> {
        write_checked(self, Some(owner), as_index(i), v)
    }

    /// Release the storage: idempotent; owned → `Owned`; claimed by a pending move →
    /// `Claimed`. The release hook runs after the carrier is marked released, so nobody can
    /// start using the storage while the hook frees it.
    fn release(&self) -> Result<()> {
        if self.state(HOOK).mark_released()? {
            self.release_storage(&self.hook());
        }
        Ok(())
    }
}

impl<C: Carrier + ?Sized> CarrierExt for C {}

/// `i` as a slot index of a carrier with `size` slots.
#[inline]
pub(crate) fn checked_slot(i: i64, size: usize) -> Result<usize> {
    match usize::try_from(i) {
        Ok(slot) if slot < size => Ok(slot),
        _ => Err(slot_out_of_range(i, size)),
    }
}

/// A public index as the slot arithmetic's `i64` (past `i64::MAX` it is out of every range).
#[inline]
fn as_index(i: usize) -> i64 {
    i64::try_from(i).unwrap_or(i64::MAX)
}

/// `c[i]` for a slot the framework computed (an offset plus a layout's index, which a
/// negative stride can take below 0): released → `Released`; outside `[0, size)` →
/// `SlotOutOfRange`.
#[inline]
pub(crate) fn read_at<C: Carrier + ?Sized>(c: &C, i: i64) -> Result<Scalar> {
    let state = c.state(HOOK);
    state.check_live()?;
    // A release between the two checks sets the size to 0: report it as `Released`,
    // not as an index out of a range the carrier no longer has.
    let slot = checked_slot(i, c.size()).map_err(|range| state.check_live().err().unwrap_or(range))?;
    c.read_slot(&c.hook(), slot)
}

#[cold]
fn slot_out_of_range(index: i64, size: usize) -> ModelError {
    ModelError::SlotOutOfRange { index, size }
}

#[inline]
pub(crate) fn write_checked<C: Carrier + ?Sized>(c: &C, owner: Option<OwnerToken>, i: i64, v: Scalar) -> Result<()> {
    let mut gate = c.state(HOOK).begin_write()?;
    let size = c.size();
    let slot =
        checked_slot(i, size).map_err(|range| if size == 0 { gate.refusal_for_emptied(range) } else { range })?;
    if let Some(token) = owner {
        gate = gate.as_owner(token);
    }
    gate.check_writable(c.is_mutable_hook())?;
    let kind = c.elem_kind();
    if scalar_kind(v) != kind {
        return Err(ModelError::ValueKind { value: v, kind });
    }
    c.write_slot(&c.hook(), slot, v)?;
    gate.commit();
    Ok(())
}

/// The element kind a scalar encodes to.
#[inline]
pub fn scalar_kind(v: Scalar) -> ElemKind {
    match v {
        Scalar::F32(_) => ElemKind::F32,
        Scalar::F64(_) => ElemKind::F64,
        Scalar::I32(_) => ElemKind::I32,
        Scalar::Bool(_) => ElemKind::Bool,
    }
}

/// Whether two carrier handles are the same object.
pub fn same_carrier(a: &Arc<dyn Carrier>, b: &Arc<dyn Carrier>) -> bool {
    // By the state each embeds: two adapters of one foreign carrier (a binding's) are one
    // carrier.
    std::ptr::eq(a.state(HOOK), b.state(HOOK))
}
