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
//! What a transition does is the core's one residency rule ([`Residency`], which the Python
//! package's `Evictable` follows too): a composite made with [`Evictable::retaining_clean`]
//! promotes by copying, keeping the secondary as a clean copy, and an evict of values
//! unchanged since then releases the primary and writes nothing.
//!
//! Each transition copies by the tiers' route, a move's (one span between host memory and a
//! file or a block device, one host copy; slot by slot only for carriers with no bulk
//! storage). Evict and promote are failure-atomic: on any error (a tier that cannot make a
//! fresh one, a hook's failure) a tier the transition made is released again, the values stay
//! where they were and the composite's state is unchanged. Both refuse a released composite
//! and one a pending move claims; neither counts as a write (the version is unchanged).
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

use parking_lot::Mutex;

use super::carrier::{Carrier, CarrierExt, ClassKey, HookToken, IntoCarrier, HOOK};
use super::error::{ModelError, Result};
use super::host::HostCarrier;
use super::movement::route::{self, route_kind, Job};
use super::residency::Residency;
pub use super::residency::Tier;
use super::state::{CarrierState, OwnerToken};
use crate::layout::{Layout, Shape};
use crate::storage::ElemKind;

struct Tiers {
    primary: Arc<dyn Carrier>,
    secondary: Arc<dyn Carrier>,
    residency: Residency,
}

impl Tiers {
    fn tier(&self, which: Tier) -> &Arc<dyn Carrier> {
        match which {
            Tier::Primary => &self.primary,
            Tier::Secondary => &self.secondary,
        }
    }

    fn replace(&mut self, which: Tier, fresh: Arc<dyn Carrier>) -> Arc<dyn Carrier> {
        let slot = match which {
            Tier::Primary => &mut self.primary,
            Tier::Secondary => &mut self.secondary,
        };
        std::mem::replace(slot, fresh)
    }
}

/// A two-tier composite carrier (see the module docs).
pub struct Evictable {
    state: CarrierState,
    owner: OwnerToken,
    kind: ElemKind,
    slots: usize,
    tiers: Mutex<Tiers>,
}

impl std::fmt::Debug for Evictable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let residency = self.tiers.lock().residency;
        f.debug_struct("Evictable")
            .field("kind", &self.kind)
            .field("slots", &self.slots)
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
        Ok(Arc::new(Evictable {
            state: CarrierState::new("Evictable"),
            owner,
            kind,
            slots: primary.size(),
            tiers: Mutex::new(Tiers { primary, secondary, residency: Residency::new(retain_clean) }),
        }))
    }

    /// The tier holding the values now.
    pub fn resident(&self) -> Tier {
        self.tiers.lock().residency.resident()
    }

    /// The primary tier now: a transition into a released primary replaces it.
    pub fn primary(&self) -> Arc<dyn Carrier> {
        self.tiers.lock().primary.clone()
    }

    /// The secondary tier now: a transition into a released secondary replaces it.
    pub fn secondary(&self) -> Arc<dyn Carrier> {
        self.tiers.lock().secondary.clone()
    }

    /// Whether the secondary holds the current values: evicted, or promoted by a composite
    /// made with [`retaining_clean`](Self::retaining_clean) and not written since (an
    /// [`evict`](Self::evict) then writes nothing).
    pub fn is_clean(&self) -> bool {
        !self.state.is_released() && self.tiers.lock().residency.is_clean(self.state.version())
    }

    /// Move the values to the secondary tier (nothing to do if they are there).
    pub fn evict(&self) -> Result<()> {
        self.transition(true)
    }

    /// Move the values back to the primary tier (nothing to do if they are there).
    pub fn promote(&self) -> Result<()> {
        self.transition(false)
    }

    fn transition(&self, evict: bool) -> Result<()> {
        // The composite's state stays locked across the copy, so no write, release or claim
        // of it interleaves; its tiers are owned, so nothing outside reaches them.
        let gate = self.state.begin_write()?;
        gate.check_writable(true)?;
        let mut tiers = self.tiers.lock();
        let version = self.state.version();
        let Some(step) = tiers.residency.plan(evict, version) else { return Ok(()) };
        let source = tiers.tier(step.source()).clone();
        if step.transfers() {
            let target = tiers.tier(step.target()).clone();
            let fresh = if target.is_released() || target.size() < self.slots {
                Some(self.fresh_tier(&*target)?)
            } else {
                None
            };
            if let Err(e) = transfer(&*source, &**fresh.as_ref().unwrap_or(&target), self.slots) {
                if let Some(fresh) = fresh {
                    self.release_tier(&*fresh, false);
                }
                return Err(e);
            }
            if let Some(fresh) = fresh {
                let replaced = tiers.replace(step.target(), fresh);
                self.release_tier(&*replaced, false);
            }
        }
        if step.releases_source() {
            // Released as a move releases its source; it stays ours until replaced.
            self.release_tier(&*source, true);
        }
        tiers.residency.commit(step, version);
        Ok(()) // the gate drops uncommitted: evict and promote are not writes
    }

    /// A fresh tier like `like`, owned by the composite. The transition fills every slot
    /// before the tier is seen (or releases it unread), so a host tier need not be zeroed.
    fn fresh_tier(&self, like: &dyn Carrier) -> Result<Arc<dyn Carrier>> {
        let fresh: Arc<dyn Carrier> = if like.class_key() == ClassKey::of::<HostCarrier>() {
            HostCarrier::for_overwrite(self.kind, self.slots)?
        } else {
            like.allocate_like(self.slots)?
        };
        if let Err(e) = fresh.state(HOOK).adopt(self.owner) {
            let _ = fresh.release();
            return Err(e);
        }
        Ok(fresh)
    }

    /// Release an owned tier as its owner, never unowned while live; `keep` leaves it owned.
    /// Nobody else can claim an owned tier, so the release cannot be refused.
    fn release_tier(&self, tier: &dyn Carrier, keep: bool) {
        if let Ok(true) = tier.state(HOOK).release_as_owner(self.owner) {
            tier.release_storage(HOOK);
        }
        if !keep {
            tier.state(HOOK).disown(self.owner);
        }
    }

    /// The resident primary, or `Evicted`.
    fn promoted(&self) -> Result<Arc<dyn Carrier>> {
        let tiers = self.tiers.lock();
        if tiers.residency.is_evicted() {
            return Err(ModelError::Evicted { carrier: self.state.class_name().to_string() });
        }
        Ok(tiers.primary.clone())
    }

    /// A write into the composite, a public one or a move's: the clean copy is stale.
    fn moved_into(&self) {
        self.tiers.lock().residency.mark_dirty();
    }
}

/// Slots `[0, n)` of `from` into the same slots of `to`, by the pair's route, a move's: one
/// span between host memory and a file or a block device, one host copy, or slot by slot for
/// carriers with no bulk storage.
fn transfer(from: &dyn Carrier, to: &dyn Carrier, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let extent = i64::try_from(n).map_err(|_| ModelError::Layout(crate::layout::LayoutError::SizeOverflow))?;
    let layout = Layout::canonical(&Shape::flat(&[extent])?)?;
    let route = route::resolve_as(route_kind(from.class_key(), to.class_key()), from, to);
    let job =
        Job { src: from, dst: to, offset: 0, layout: &layout, elem_size: from.elem_kind().size(), progress: None };
    route::execute(&route, &job)
}

impl Carrier for Evictable {
    fn state(&self, _: &HookToken) -> &CarrierState {
        &self.state
    }

    fn elem_kind(&self) -> ElemKind {
        self.kind
    }

    fn size(&self) -> usize {
        if self.state.is_released() {
            0
        } else {
            self.slots
        }
    }

    fn read_slot(&self, _: &HookToken, i: usize) -> Result<crate::storage::Scalar> {
        self.promoted()?.read_slot(HOOK, i)
    }

    /// Every write into the composite (a public one, or a move's) makes the clean copy stale.
    fn write_slot(&self, _: &HookToken, i: usize, v: crate::storage::Scalar) -> Result<()> {
        let primary = self.promoted()?;
        self.moved_into();
        primary.write_slot(HOOK, i, v)
    }

    fn is_mutable_hook(&self) -> bool {
        true
    }

    /// Releases both tiers: the composite gives up their ownership and releases them.
    fn release_storage(&self, _: &HookToken) {
        let tiers = self.tiers.lock();
        for tier in [&tiers.primary, &tiers.secondary] {
            tier.state(HOOK).disown(self.owner);
            let _ = tier.release();
        }
    }
}
