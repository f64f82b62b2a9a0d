//! `Evictable`: a two-tier composite carrier. Its values live in one tier at a time, the
//! primary (fast, say host memory) or the secondary (large, say a file); [`Evictable::evict`]
//! moves them to the secondary and [`Evictable::promote`] back, as the specification's
//! `Evictable` does (tensor-and-carriers.md §3.2): the tier the values leave is released, and
//! a transition into a released (or too small) tier first makes a fresh one with the tier's
//! [`allocate_like`](Carrier::allocate_like). The composite owns its tiers: while it lives,
//! every public write, release or move of a tier is refused (`Owned`/`NotMutable`), and
//! releasing the composite releases both. While evicted, its slots cannot be read or written
//! (`Evicted`).
//!
//! What a transition does is the core's one residency rule ([`Residency`](super::Residency)):
//! a composite made with [`Evictable::retaining_clean`] promotes by copying, keeping the
//! secondary as a clean copy, and an evict of values unchanged since then releases the primary
//! and writes nothing. The tiers, the residency and the order of every transition are the
//! core's two-tier composite ([`TwoTier`](super::two_tier)), which the Python
//! package's `Evictable` runs on too; this type adds what is done to tiers that are carriers
//! of this model.
//!
//! Each transition copies by the tiers' route, a move's (one span between host memory and a
//! file or a block device, one host copy; slot by slot only for carriers with no bulk
//! storage). Evict and promote are failure-atomic: on any error (a tier that cannot make a
//! fresh one, a hook's failure) a tier the transition made is released again, the values stay
//! where they were and the composite's state is unchanged. Both refuse a released composite
//! and one a pending move claims; neither counts as a write (the version is unchanged).
//! While a transition runs, blocking or asynchronous, it holds the composite: reads, writes,
//! moves and release of it from any other thread are refused (`Claimed`, as for a pending
//! move), not made to wait, as the specification's `Evictable` refuses them (§3.2).
//!
//! ```
//! use strideweave_core::model::{Carrier, CarrierExt, Evictable, FileCarrier, HostCarrier, Tensor, Tier};
//! use strideweave_core::storage::ElemKind;
//!
//! let host = HostCarrier::from_f32(&[1.0, 2.0, 3.0]);
//! let file = FileCarrier::temp_zeros(ElemKind::F32, 3).unwrap();
//! let e = Evictable::new(&host, &file).unwrap();
//! assert!(host.set(0, strideweave_core::storage::Scalar::F32(9.0)).is_err()); // owned tier
//! e.evict().unwrap();
//! assert_eq!((e.resident(), host.is_released()), (Tier::Secondary, true)); // moved out
//! let t = Tensor::canonical(&e, &[3]).unwrap();
//! assert!(t.values_f32().is_err()); // evicted: promote first
//! e.promote().unwrap(); // into a fresh primary; the file is released
//! assert!(file.is_released() && !e.primary().is_released());
//! t.set(2, 30.0f32).unwrap();
//! assert_eq!(t.values_f32().unwrap(), vec![1.0, 2.0, 30.0]);
//! e.release().unwrap();
//! assert!(e.primary().is_released() && e.secondary().is_released());
//! ```

use std::sync::Arc;

use super::awaitable::ResidencyHandle;
use super::carrier::{admitted, Carrier, CarrierExt, HookCall, HookToken, IntoCarrier, HOOK};
use super::error::{ModelError, Result};
pub use super::residency::Tier;
use super::residency::Transition;
use super::state::{CarrierState, OwnerToken};
use super::tier_ops;
use super::two_tier::{TierWork, TwoTier, Unreadable};
use crate::storage::ElemKind;

/// What this model's Evictable does to its tiers, carriers of this model: fresh tiers by
/// their `allocate_like`, transfers by a move's route, releases as the owner.
struct CarrierTiers {
    owner: OwnerToken,
    kind: ElemKind,
    slots: usize,
}

impl TierWork for CarrierTiers {
    type Tier = Arc<dyn Carrier>;

    fn needs_fresh(&self, target: &Arc<dyn Carrier>) -> Result<bool> {
        Ok(target.is_released() || target.size() < self.slots)
    }

    fn fresh(&self, _: Transition, _: &Arc<dyn Carrier>, target: &Arc<dyn Carrier>) -> Result<Arc<dyn Carrier>> {
        tier_ops::fresh_like(&**target, self.kind, self.slots, self.owner)
    }

    fn transfer(&self, step: Transition, source: &Arc<dyn Carrier>, target: &Arc<dyn Carrier>) -> Result<()> {
        tier_ops::transfer(&**source, &**target, self.slots)?;
        if step.releases_source() {
            // Released as a move releases its source; it stays ours until replaced.
            tier_ops::release_owned(&**source, self.owner, true);
        }
        Ok(())
    }

    fn release(&self, tier: &Arc<dyn Carrier>, keep: bool) {
        tier_ops::release_owned(&**tier, self.owner, keep)
    }
}

/// A two-tier composite carrier (see the module docs).
pub struct Evictable {
    state: CarrierState,
    /// The tiers, the residency and the order of changes: the one two-tier model (its work
    /// knows the element kind and the slot count).
    tiers: Arc<TwoTier<CarrierTiers>>,
}

impl std::fmt::Debug for Evictable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let residency = self.tiers.residency();
        f.debug_struct("Evictable")
            .field("kind", &self.tiers.work().kind)
            .field("slots", &self.tiers.work().slots)
            .field("resident", &residency.resident())
            .field("retain_clean", &residency.retains_clean())
            .finish()
    }
}

impl Evictable {
    /// A composite whose values are `primary`'s, with `secondary` as the eviction tier. Both
    /// must be live, unowned, unclaimed, distinct and of one element kind; the composite
    /// becomes their owner. On failure neither tier changes.
    pub fn new(primary: impl IntoCarrier, secondary: impl IntoCarrier) -> Result<Arc<Self>> {
        Self::build(primary.into_carrier(), secondary.into_carrier(), false)
    }

    /// [`new`](Self::new), with clean tiers: [`promote`](Self::promote) copies the values and
    /// keeps the secondary as a clean copy of them, and an [`evict`](Self::evict) of values
    /// unchanged since (the composite's version is the same) releases the primary and writes
    /// nothing. For weights read far more often than written, every eviction after the first
    /// is free.
    ///
    /// ```
    /// use strideweave_core::model::{Carrier, CarrierExt, Evictable, FileCarrier, HostCarrier, Tier};
    /// use strideweave_core::storage::{ElemKind, Scalar};
    ///
    /// let host = HostCarrier::from_f32(&[1.0, 2.0]);
    /// let file = FileCarrier::temp_zeros(ElemKind::F32, 2).unwrap();
    /// let e = Evictable::retaining_clean(&host, &file).unwrap();
    /// e.evict().unwrap(); // written once
    /// e.promote().unwrap();
    /// assert!(e.is_clean() && !file.is_released()); // the file keeps the values
    /// e.evict().unwrap(); // clean: nothing written
    /// e.promote().unwrap();
    /// e.set(1, Scalar::F32(5.0)).unwrap(); // dirty now
    /// assert!(!e.is_clean());
    /// e.evict().unwrap(); // written back
    /// e.promote().unwrap();
    /// assert_eq!((e.resident(), e.get(1).unwrap()), (Tier::Primary, Scalar::F32(5.0)));
    /// ```
    pub fn retaining_clean(primary: impl IntoCarrier, secondary: impl IntoCarrier) -> Result<Arc<Self>> {
        Self::build(primary.into_carrier(), secondary.into_carrier(), true)
    }

    fn build(primary: Arc<dyn Carrier>, secondary: Arc<dyn Carrier>, retain_clean: bool) -> Result<Arc<Self>> {
        if super::carrier::same_carrier(&primary, &secondary) {
            return Err(ModelError::TiersNotDistinct { composite: "Evictable" });
        }
        let kind = primary.elem_kind();
        if secondary.elem_kind() != kind {
            return Err(ModelError::TierDTypesDiffer {
                composite: "Evictable",
                primary: kind.dtype_name(),
                secondary: secondary.elem_kind().dtype_name(),
            });
        }
        let owner = OwnerToken::fresh();
        primary.state(HOOK).adopt(owner)?;
        if let Err(e) = secondary.state(HOOK).adopt(owner) {
            primary.state(HOOK).disown(owner);
            return Err(e);
        }
        let work = CarrierTiers { owner, kind, slots: primary.size() };
        Ok(Arc::new(Evictable {
            state: CarrierState::new("Evictable"),
            tiers: Arc::new(TwoTier::new(work, primary, secondary, retain_clean)),
        }))
    }

    /// The tier holding the values now.
    pub fn resident(&self) -> Tier {
        self.tiers.residency().resident()
    }

    /// The primary tier now: a transition into a released primary replaces it.
    pub fn primary(&self) -> Arc<dyn Carrier> {
        self.tiers.primary()
    }

    /// The secondary tier now: a transition into a released secondary replaces it.
    pub fn secondary(&self) -> Arc<dyn Carrier> {
        self.tiers.secondary()
    }

    /// Whether the secondary holds the current values: evicted, or promoted by a composite
    /// made with [`retaining_clean`](Self::retaining_clean) and not written since (an
    /// [`evict`](Self::evict) then writes nothing).
    pub fn is_clean(&self) -> bool {
        !self.state.is_released() && self.tiers.residency().is_clean(self.state.version())
    }

    /// Move the values to the secondary tier (nothing to do if they are there). Waits first
    /// for an asynchronous transition still running.
    pub fn evict(self: &Arc<Self>) -> Result<()> {
        self.tiers.transition(&self.composite(), true)
    }

    /// Move the values back to the primary tier (nothing to do if they are there). Waits
    /// first for an asynchronous transition still running.
    pub fn promote(self: &Arc<Self>) -> Result<()> {
        self.tiers.transition(&self.composite(), false)
    }

    /// Start [`evict`](Self::evict) on an engine thread. Refusals of the composite's state
    /// (released, claimed by a pending move) return here, before any effect; a transition
    /// with nothing to transfer (already evicted, or clean) is done when this returns. Until
    /// the handle is done, reads, writes, moves and release of the composite are refused
    /// (`Claimed`, as for a pending move), and a later transition waits for it.
    ///
    /// ```
    /// use strideweave_core::model::{CarrierExt, Evictable, FileCarrier, HostCarrier, ModelError};
    /// use strideweave_core::storage::{ElemKind, Scalar};
    ///
    /// let layer = Evictable::retaining_clean(
    ///     HostCarrier::from_f32(&[0.5; 1024]),
    ///     FileCarrier::temp(ElemKind::F32).unwrap(),
    /// )
    /// .unwrap();
    /// layer.evict().unwrap();
    /// let ready = layer.promote_async().unwrap(); // prefetch while computing elsewhere
    /// // ... work on another layer ...
    /// ready.wait().unwrap();
    /// assert_eq!(layer.get(1023).unwrap(), Scalar::F32(0.5));
    /// ```
    pub fn evict_async(self: &Arc<Self>) -> Result<ResidencyHandle> {
        self.tiers.transition_async(&self.composite(), true)
    }

    /// Start [`promote`](Self::promote) on an engine thread (see
    /// [`evict_async`](Self::evict_async)): prefetch the values, then wait for the handle (or
    /// `.await` it) before reading them.
    pub fn promote_async(self: &Arc<Self>) -> Result<ResidencyHandle> {
        self.tiers.transition_async(&self.composite(), false)
    }

    fn composite(self: &Arc<Self>) -> Arc<dyn Carrier> {
        self.clone()
    }

    /// The tiers, locked, with the values in the primary: refused while a transition runs
    /// (as for a pending move), or `Evicted`. The caller reads or writes the
    /// primary under this lock, so no transition releases it meanwhile.
    fn promoted(&self, action: &'static str) -> Result<super::two_tier::Promoted<'_, Arc<dyn Carrier>>> {
        self.tiers.promoted().map_err(|why| match why {
            Unreadable::InTransition => self.state.pending_refusal(action),
            _ => ModelError::Evicted { carrier: self.state.class_name().to_string() },
        })
    }
}

impl Carrier for Evictable {
    fn state(&self, _: &HookToken) -> &CarrierState {
        &self.state
    }

    fn elem_kind(&self) -> ElemKind {
        self.tiers.work().kind
    }

    fn size(&self) -> usize {
        self.state.live_size(self.tiers.work().slots)
    }

    fn read_slot(&self, token: &HookToken, i: usize) -> Result<crate::storage::Scalar> {
        admitted(token, &self.state)?;
        let promoted = self.promoted("read")?;
        promoted.primary().read_slot(&promoted.primary().hook(), i)
    }

    /// Every write into the composite (a public one, or a move's) makes the clean copy stale.
    fn write_slot(&self, token: &HookToken, i: usize, v: crate::storage::Scalar) -> Result<()> {
        admitted(token, &self.state)?;
        let mut promoted = self.promoted("write to")?;
        promoted.mark_dirty();
        promoted.primary().write_slot(&promoted.primary().hook(), i, v)
    }

    fn is_mutable_hook(&self) -> bool {
        true
    }

    /// Releases both tiers: the composite gives up their ownership and releases them.
    fn release_storage(&self, token: &HookToken) {
        if !token.admits(&self.state) {
            return;
        }
        let owner = self.tiers.work().owner;
        for tier in self.tiers.both() {
            tier.state(HOOK).disown(owner);
            let _ = tier.release();
        }
    }
}
