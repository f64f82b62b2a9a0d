//! Carrier state — version, release, ownership and the pending-move claim — and its atomic
//! transitions: [`CarrierState`], the one carrier state of the project. The Rust object model's
//! carriers embed it, and so does every Python carrier (the binding's `_CarrierBase`).
//!
//! The state and its transitions are the generic [`StateCell`] filled with an [`Owner`] and a
//! [`Claim`]: either this model's tokens ([`OwnerToken`], [`ClaimId`]) or a [`Foreign`] object
//! a binding supplies (a Python carrier's owning composite, its pending move request). This
//! type adds the carrier's name and, for the Rust model, turns a refusal into the
//! [`ModelError`] users see; a binding runs the cell's transitions itself
//! (`CarrierState::cell`, with the `binding` feature) under its own [`ClaimJudge`], which tells its
//! foreign payloads apart. The Rust model's transitions judge with [`Strict`]: every claim it
//! does not hold blocks them, a foreign one included. Every transition checks the state it
//! depends on and changes it inside one critical section, so of two racing calls exactly one
//! wins: a move that claims a carrier and a `release()` of it cannot both succeed, nor can two
//! moves of one source. A claim is an RAII [`ClaimGuard`]: dropping it without a commit gives
//! the claim back, so no failure path (an error, an early return, a panic) leaves a carrier
//! claimed.
//!
//! ```
//! use strideweave_core::model::{CarrierExt, HostCarrier};
//!
//! let c = HostCarrier::from_f32(&[1.0]);
//! c.release().unwrap();
//! c.release().unwrap(); // idempotent
//! assert!(c.is_released() && c.get(0).is_err());
//! ```

use super::carrier::{HookCall, HOOK};
use std::any::Any;
use std::borrow::Cow;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::carrier::Carrier;
use super::error::{ModelError, Result};
use super::movement::{MoveRefusal, Party};
use super::state_cell::{CellWriteGate, ClaimJudge, ClaimRule, Refusal, StateCell, Strict, Verdict};

/// Identity of one pending move's claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClaimId(pub(crate) NonZeroU64);

/// Identity of a composite carrier that owns others (an Evictable tier, say).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwnerToken(NonZeroU64);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn fresh_id() -> NonZeroU64 {
    // A u64 counter cannot wrap in the life of a process; `max(1)` keeps the type honest.
    NonZeroU64::new(NEXT_ID.fetch_add(1, Ordering::Relaxed).max(1)).expect("non-zero")
}

impl ClaimId {
    /// A claim identity no other claim has.
    pub fn fresh() -> Self {
        ClaimId(fresh_id())
    }
}

impl OwnerToken {
    /// An owner identity no other owner has.
    pub fn fresh() -> Self {
        OwnerToken(fresh_id())
    }
}

/// The type of the objects a binding stores as carriers' owners and claims (the Python
/// binding's wraps a Python object); [`Foreign::downcast_ref`] gets one back.
pub trait ForeignObject: Any + Send + Sync + std::fmt::Debug {
    /// `self` as `Any` (`self`, in every implementation), to downcast to the binding's type.
    fn as_any(&self) -> &dyn Any;
}

/// An opaque, cloneable handle to a binding's object, stored as an [`Owner`] or a [`Claim`].
///
/// The core never looks inside: which foreign object is which is the binding's to say, in
/// the [`ClaimJudge`] it passes to the cell's transitions. Dropping the
/// handle drops the object, which the cell never does inside its lock (displaced payloads
/// are handed back), so a binding whose objects run code when dropped drops them outside it.
///
/// ```
/// use std::any::Any;
/// use strideweave_core::model::{Foreign, ForeignObject};
///
/// #[derive(Debug, PartialEq)]
/// struct Request(u32);
///
/// impl ForeignObject for Request {
///     fn as_any(&self) -> &dyn Any {
///         self
///     }
/// }
///
/// let request = Foreign::new(Request(7));
/// assert_eq!(request.downcast_ref::<Request>(), Some(&Request(7)));
/// ```
#[derive(Clone, Debug)]
pub struct Foreign(Arc<dyn ForeignObject>);

impl Foreign {
    /// A handle holding `object`.
    pub fn new<T: ForeignObject>(object: T) -> Self {
        Foreign(Arc::new(object))
    }

    /// The object, if it is a `T`.
    pub fn downcast_ref<T: ForeignObject>(&self) -> Option<&T> {
        self.object().as_any().downcast_ref()
    }

    /// The object.
    pub fn object(&self) -> &dyn ForeignObject {
        &*self.0
    }
}

/// Who owns a carrier: a composite of this model ([`OwnerToken`]) or a binding's object.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Owner {
    /// A Rust composite (an [`Evictable`](super::Evictable)'s tiers).
    Token(OwnerToken),
    /// A binding's owner (a Python composite's token).
    Foreign(Foreign),
}

impl Owner {
    /// The Rust owner's token, if that is who owns the carrier.
    pub fn token(&self) -> Option<OwnerToken> {
        match self {
            Owner::Token(token) => Some(*token),
            Owner::Foreign(_) => None,
        }
    }

    /// The binding's owner, if that is who owns the carrier.
    pub fn foreign(&self) -> Option<&Foreign> {
        match self {
            Owner::Foreign(foreign) => Some(foreign),
            Owner::Token(_) => None,
        }
    }
}

impl From<OwnerToken> for Owner {
    fn from(token: OwnerToken) -> Self {
        Owner::Token(token)
    }
}

/// What holds a carrier claimed: a move of this model ([`ClaimId`]) or a binding's object.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Claim {
    /// A pending move of the Rust model.
    Move(ClaimId),
    /// A binding's claim (a Python move request, the "being released" marker).
    Foreign(Foreign),
}

impl Claim {
    /// The Rust move's claim, if that is what holds the carrier.
    pub fn move_id(&self) -> Option<ClaimId> {
        match self {
            Claim::Move(id) => Some(*id),
            Claim::Foreign(_) => None,
        }
    }

    /// The binding's claim, if that is what holds the carrier.
    pub fn foreign(&self) -> Option<&Foreign> {
        match self {
            Claim::Foreign(foreign) => Some(foreign),
            Claim::Move(_) => None,
        }
    }
}

impl From<ClaimId> for Claim {
    fn from(id: ClaimId) -> Self {
        Claim::Move(id)
    }
}

/// Which side of a move a claim is for; the checks differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// The tensor's carrier: must be live and not owned.
    Source,
    /// The receiving carrier: must be live, not owned and publicly mutable.
    Destination,
}

/// The framework state every carrier shares, Rust or Python. A carrier embeds one and returns
/// it from [`Carrier::state`]; only the framework changes it.
///
/// [`Carrier::state`] takes a [`HookToken`](super::HookToken), so only the framework reaches
/// another carrier's state; a foreign carrier makes its own:
///
/// ```
/// use strideweave_core::model::CarrierState;
///
/// let state = CarrierState::new("Mine");
/// assert_eq!((state.version(), state.is_released(), state.is_claimed()), (0, false, false));
/// ```
///
/// A binding (built with the `binding` feature, which the Python package's crate enables and
/// a Rust user does not need: the cell's plain stores skip the checks) runs the transitions of
/// the cell itself, with its own payloads and judge:
///
/// ```
/// # #[cfg(feature = "binding")] {
/// use std::any::Any;
/// use strideweave_core::model::{CarrierState, Claim, ClaimRule, Foreign, ForeignObject, Strict};
///
/// #[derive(Debug)]
/// struct Request;
///
/// impl ForeignObject for Request {
///     fn as_any(&self) -> &dyn Any {
///         self
///     }
/// }
///
/// let state = CarrierState::new_static("Carrier");
/// let request = Claim::Foreign(Foreign::new(Request));
/// assert!(state.cell().try_claim(request, ClaimRule::FREE, &Strict).unwrap().is_none());
/// assert!(state.is_claimed() && state.claim().is_none());
/// # }
/// ```
#[derive(Debug)]
pub struct CarrierState {
    /// The carrier's class name, for the Rust model's error messages.
    name: Cow<'static, str>,
    cell: StateCell<Owner, Claim>,
}

impl CarrierState {
    /// Fresh state: version 0, live, unowned, unclaimed.
    pub fn new(class_name: &str) -> Self {
        CarrierState { name: Cow::Owned(class_name.into()), cell: StateCell::new() }
    }

    /// [`new`](Self::new) with a name that needs no allocation: for a binding, whose carriers
    /// word their refusals with their own class names.
    pub const fn new_static(class_name: &'static str) -> Self {
        CarrierState { name: Cow::Borrowed(class_name), cell: StateCell::new() }
    }

    /// The cell behind this state, for a binding: every transition with its own payloads and
    /// [`ClaimJudge`] (which foreign claim is the caller's own, what a
    /// refusal reports), the plain stores, and the payloads under the lock. A transition hands
    /// back every payload it displaces, so none is dropped inside the cell's lock. The Rust
    /// model's own methods below judge with [`Strict`]: a foreign claim or owner refuses them.
    ///
    /// Only with the `binding` feature: the cell's plain stores (`set_version`,
    /// `set_released`, `replace_owner`, ...) skip every check, so a Rust user's public API
    /// does not reach them.
    #[cfg(any(test, feature = "binding"))]
    pub fn cell(&self) -> &StateCell<Owner, Claim> {
        &self.cell
    }

    /// Begin an element access without the lock, when this thread owns the carrier's bias
    /// and the carrier is live, unowned and unclaimed (see `model::element_bias`).
    #[inline]
    pub(crate) fn enter_biased(&self) -> Option<super::element_bias::BiasedAccess<'_>> {
        self.cell.enter_biased()
    }

    /// Count a write made by a biased access.
    #[inline]
    pub(crate) fn count_biased_write(&self, access: &super::element_bias::BiasedAccess<'_>) {
        self.cell.count_biased_write(access);
    }

    /// After a locked element access: bias the carrier to this thread if it may be.
    pub(crate) fn offer_bias(&self) {
        self.cell.offer_bias();
    }

    /// End another thread's bias before the carrier's storage goes away.
    pub(crate) fn revoke_bias(&self) {
        self.cell.revoke_bias();
    }

    /// The class name errors report.
    pub fn class_name(&self) -> &str {
        &self.name
    }

    /// The version: 0 at construction, +1 per public write.
    pub fn version(&self) -> u64 {
        self.cell.version()
    }

    /// Whether the carrier is released.
    pub fn is_released(&self) -> bool {
        self.cell.is_released()
    }

    /// Whether a composite owns the carrier.
    pub fn is_owned(&self) -> bool {
        self.cell.is_owned()
    }

    /// Whether a pending move claims the carrier.
    pub fn is_claimed(&self) -> bool {
        self.cell.is_claimed()
    }

    /// The pending move of the Rust model holding this carrier, if any (None also when a
    /// binding's claim holds it: see [`is_claimed`](Self::is_claimed)).
    pub fn claim(&self) -> Option<ClaimId> {
        self.cell.with_claim(|c| c.and_then(Claim::move_id))
    }

    fn released_err(&self) -> ModelError {
        ModelError::Released { carrier: self.name.to_string() }
    }

    fn claimed_err(&self, action: &'static str) -> ModelError {
        ModelError::Claimed { carrier: self.name.to_string(), action }
    }

    /// The error of a refusal by the cell; `owned` is what an owner means to this caller.
    fn refused(&self, why: Refusal<(), ()>, action: &'static str, owned: fn(String) -> ModelError) -> ModelError {
        let carrier = self.name.to_string();
        match why {
            Refusal::Released => self.released_err(),
            Refusal::Owned(()) => owned(carrier),
            Refusal::Claimed(()) => self.claimed_err(action),
            Refusal::NotMutable => ModelError::NotMutable { carrier },
            // The Rust model writes under the cell's lock (`begin_write`) and never opens a
            // write; an open write is a claim in progress to its callers.
            Refusal::BeingWritten => self.claimed_err(action),
        }
    }

    /// `slots` while live, 0 once released: the size of a carrier whose slot count is fixed
    /// for its life (a tier composite, a slab tile).
    pub fn live_size(&self, slots: usize) -> usize {
        if self.is_released() {
            0
        } else {
            slots
        }
    }

    /// `Released` unless live.
    #[inline]
    pub fn check_live(&self) -> Result<()> {
        if self.cell.is_released() {
            Err(self.released_err())
        } else {
            Ok(())
        }
    }

    /// Begin a public write: fails with `Released` now; the caller then checks the index and
    /// calls [`WriteGate::check_writable`]. The state stays locked until the gate drops, so
    /// a claim or a release cannot slip in between the checks and the write.
    #[inline]
    pub fn begin_write(&self) -> Result<WriteGate<'_>> {
        let gate = self.cell.begin_write().map_err(|_| self.released_err())?;
        Ok(WriteGate { state: self, gate, owner_ok: None })
    }

    /// Public release: `Owned` if owned, `Claimed` if a pending move holds the carrier,
    /// `Ok(false)` if already released (release is idempotent), else marks it released and
    /// returns `Ok(true)`: the caller then frees the storage, outside the lock.
    pub fn mark_released(&self) -> Result<bool> {
        self.cell
            .mark_released(&Strict)
            .map_err(|why| self.refused(why, "release", |carrier| ModelError::Owned { carrier }))
    }

    /// Release by the carrier's owner (a composite releasing a tier it replaced or moved out
    /// of): refused `Owned` for anybody but `owner`, and `Claimed` while a move holds the
    /// carrier; `Ok(false)` if already released. The owner stays the owner: the caller
    /// disowns the released tier or keeps it listed. On `Ok(true)` the caller frees the
    /// storage ([`Carrier::release_storage`]).
    pub fn release_as_owner(&self, owner: OwnerToken) -> Result<bool> {
        self.cell
            .mark_released(&OwnerPasses(owner))
            .map_err(|why| self.refused(why, "release", |carrier| ModelError::Owned { carrier }))
    }

    /// Make `owner` the carrier's owner: it must be live, unowned and unclaimed.
    pub fn adopt(&self, owner: OwnerToken) -> Result<()> {
        self.cell
            .adopt(Owner::Token(owner), &Strict)
            .map_err(|(_, why)| self.refused(why, "adopt", |carrier| ModelError::Owned { carrier }))
    }

    /// Give up ownership; `false` if `owner` was not the owner.
    pub fn disown(&self, owner: OwnerToken) -> bool {
        self.cell.disown_if(|held| held.token() == Some(owner)).is_some()
    }

    /// Claim the carrier for move `id` in `role`, checking in the same critical section:
    /// released → `Released`; owned → `Owned` (source) or `NotMutable` (destination);
    /// claimed → `Claimed`; a destination whose `mutable` hook said no → `NotMutable`.
    pub fn try_claim(&self, carrier: &Arc<dyn Carrier>, id: ClaimId, role: Role) -> Result<ClaimGuard> {
        self.claim_move(&**carrier, id, role)?;
        Ok(ClaimGuard { carrier: Some(carrier.clone()), id })
    }

    /// [`try_claim`](Self::try_claim) without the guard, for a holder that keeps the carrier
    /// itself (a move request's parties): it ends the claim with
    /// [`end_move_claim`](Self::end_move_claim) or [`release_claimed_by`](Self::release_claimed_by).
    pub(crate) fn claim_move(&self, carrier: &dyn Carrier, id: ClaimId, role: Role) -> Result<()> {
        debug_assert!(std::ptr::eq(carrier.state(HOOK), self), "the carrier must own this state");
        let mutable = role == Role::Source || carrier.is_mutable_hook();
        let owned: fn(String) -> ModelError = match role {
            Role::Source => |carrier| ModelError::Owned { carrier },
            Role::Destination => |carrier| ModelError::NotMutable { carrier },
        };
        let party = match role {
            Role::Source => Party::Source,
            Role::Destination => Party::Destination,
        };
        self.cell.try_claim(Claim::Move(id), ClaimRule { owner_refuses: true, mutable }, &Strict).map_err(
            |(_, why)| match why {
                // Released since the move's validation looked: the refusal that row gives.
                Refusal::Released => MoveRefusal::Released { party, carrier: self.name.to_string() }.into(),
                why => self.refused(why, "move", owned),
            },
        )?;
        Ok(())
    }

    /// End move `id`'s claim by releasing `carrier`, whose state this is (see
    /// [`ClaimGuard::commit_release`]): its release hook runs while the claim still holds, then
    /// the release and the claim's end are one transition. A hook that fails leaves the
    /// carrier live and still claimed.
    pub(crate) fn release_claimed_by(&self, carrier: &dyn Carrier, id: ClaimId) -> Result<()> {
        debug_assert!(std::ptr::eq(carrier.state(HOOK), self), "the carrier must own this state");
        carrier.release_claimed_storage(&carrier.hook())?;
        let (_, held) = self.cell.release_claimed();
        debug_assert_eq!(held.and_then(|held| held.move_id()), Some(id));
        Ok(())
    }

    /// End move `id`'s claim without any other change (no effect if another holds the carrier).
    pub(crate) fn end_move_claim(&self, id: ClaimId) {
        self.drop_claim(id);
    }

    /// Claim the carrier for a composite's own operation on it (an Evictable's asynchronous
    /// transition), refused in the words of `action`: released → `Released`; owned →
    /// `Owned`; claimed, or a write in progress → `Claimed`. The guard's drop gives it back.
    pub(crate) fn claim_for(&self, carrier: &Arc<dyn Carrier>, action: &'static str) -> Result<ClaimGuard> {
        debug_assert!(std::ptr::eq(carrier.state(HOOK), self), "the carrier must own this state");
        let id = ClaimId::fresh();
        self.cell
            .try_claim(Claim::Move(id), ClaimRule { owner_refuses: true, mutable: true }, &Strict)
            .map_err(|(_, why)| self.refused(why, action, |carrier| ModelError::Owned { carrier }))?;
        Ok(ClaimGuard { carrier: Some(carrier.clone()), id })
    }

    /// The refusal of `action` while a pending operation holds the carrier.
    pub(crate) fn pending_refusal(&self, action: &'static str) -> ModelError {
        self.claimed_err(action)
    }

    fn drop_claim(&self, id: ClaimId) {
        let _ = self.cell.drop_claim_if(|held| held.move_id() == Some(id));
    }
}

/// The judge of a release by an owner: every claim blocks, as for [`Strict`], but the owner
/// `0` passes the ownership check.
struct OwnerPasses(OwnerToken);

impl ClaimJudge<Owner, Claim> for OwnerPasses {
    type Blocked = ();
    type Owner = ();
    fn judge(&self, _held: &Claim) -> Verdict<()> {
        Verdict::Blocks(())
    }
    fn owner(&self, _owner: &Owner) {}
    fn owner_passes(&self, owner: &Owner) -> bool {
        owner.token() == Some(self.0)
    }
}

/// An open public write: the carrier's state stays locked while it lives.
#[derive(Debug)]
pub struct WriteGate<'a> {
    state: &'a CarrierState,
    gate: CellWriteGate<'a, Owner, Claim>,
    owner_ok: Option<OwnerToken>,
}

impl WriteGate<'_> {
    /// Let the owner `token` write even though the carrier is owned.
    pub fn as_owner(mut self, token: OwnerToken) -> Self {
        self.owner_ok = Some(token);
        self
    }

    /// The write checks after the index check: owned by someone else or not mutable →
    /// `NotMutable`; claimed by a pending move → `Claimed`.
    #[inline]
    pub fn check_writable(&self, mutable_hook: bool) -> Result<()> {
        let name = || self.state.name.to_string();
        // A binding's owner is never this write's: only a Rust owner's token admits it.
        let owned = self
            .gate
            .owner()
            .is_some_and(|owner| !matches!((owner.token(), self.owner_ok), (Some(held), Some(ok)) if held == ok));
        if owned {
            return Err(ModelError::NotMutable { carrier: name() });
        }
        if !mutable_hook {
            return Err(ModelError::NotMutable { carrier: name() });
        }
        if self.gate.claim().is_some() {
            return Err(self.state.claimed_err("write to"));
        }
        Ok(())
    }

    /// A slot index out of range of a carrier whose size is 0 now: a committing move that
    /// holds it has freed its storage before marking it released (the index was in range
    /// of the carrier the caller saw), so the claim is the refusal to give.
    #[cold]
    pub(crate) fn refusal_for_emptied(&self, range: ModelError) -> ModelError {
        if self.gate.claim().is_some() {
            self.state.claimed_err("write to")
        } else {
            range
        }
    }

    /// Whether the pending move `id` holds the carrier: its own transfer's writes pass.
    #[inline]
    pub(crate) fn claimed_by(&self, id: ClaimId) -> bool {
        self.gate.claim().and_then(Claim::move_id) == Some(id)
    }

    /// Count the successful write: the version rises by exactly one.
    #[inline]
    pub fn commit(self) {
        self.gate.commit();
    }
}

/// A pending move's hold on one carrier. Dropping it gives the claim back (rollback);
/// [`ClaimGuard::commit_release`] ends it by releasing the carrier in the same critical
/// section, so nobody can slip in between the claim ending and the release.
pub struct ClaimGuard {
    carrier: Option<Arc<dyn Carrier>>,
    id: ClaimId,
}

impl std::fmt::Debug for ClaimGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimGuard").field("id", &self.id).finish()
    }
}

impl ClaimGuard {
    /// The claim this guard holds.
    pub fn id(&self) -> ClaimId {
        self.id
    }

    /// The claimed carrier.
    pub fn carrier(&self) -> &Arc<dyn Carrier> {
        self.carrier.as_ref().expect("live until consumed")
    }

    /// End the claim normally (the destination of a committed move).
    pub fn finish(self) {
        drop(self)
    }

    /// End the claim by releasing the carrier (the source of a committed move): runs the
    /// carrier's release hook ([`Carrier::release_claimed_storage`]) while the claim still
    /// keeps everybody else off the storage, then marks the carrier released and drops the
    /// claim in one step, so nobody can slip in between the claim ending and the release. A
    /// hook that fails leaves the carrier live and still claimed: the guard comes back with
    /// the error, and dropping it gives the claim back.
    pub fn commit_release(mut self) -> std::result::Result<(), (ClaimGuard, ModelError)> {
        let carrier = self.carrier.take().expect("live until consumed");
        match carrier.state(HOOK).release_claimed_by(&*carrier, self.id) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.carrier = Some(carrier);
                Err((self, e))
            }
        }
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        if let Some(carrier) = self.carrier.take() {
            carrier.state(HOOK).drop_claim(self.id);
        }
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
