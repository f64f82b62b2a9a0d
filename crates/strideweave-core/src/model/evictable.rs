//! `Evictable`: a two-tier composite carrier. Its values live in one tier at a time, the
//! primary (fast, say host memory) or the secondary (large, say a file); [`Evictable::evict`]
//! moves them to the secondary and [`Evictable::promote`] back. The composite owns both
//! tiers: while it lives, every public write, release or move of a tier is refused
//! (`Owned`/`NotMutable`), and releasing the composite releases both.
//!
//! Each transition copies by the tiers' route, a move's (one span between host memory and a
//! file or a block device, one host copy; slot by slot only for carriers with no bulk
//! storage). A composite made with [`Evictable::retaining_clean`] keeps the secondary as a
//! clean copy when it promotes, and an evict of values unchanged since writes nothing.
//!
//! Evict and promote are failure-atomic: on any error (a tier too small that cannot grow, a
//! hook's failure) a tier the operation grew shrinks back, the values stay where they were
//! and the composite's state is unchanged. Both refuse a released composite and one a pending
//! move claims; neither counts as a write (the version is unchanged).
//!
//! ```
//! use strideweave_core::model::{Carrier, CarrierExt, Evictable, FileCarrier, HostCarrier, Tensor, Tier};
//! use strideweave_core::storage::ElemKind;
//!
//! let host = HostCarrier::from_f32(&[1.0, 2.0, 3.0]);
//! let file = FileCarrier::temp(ElemKind::F32).unwrap();
//! let e = Evictable::new(&host, &file).unwrap();
//! assert!(host.set(0, strideweave_core::storage::Scalar::F32(9.0)).is_err()); // owned tier
//! e.evict().unwrap();
//! assert_eq!((e.resident(), file.size()), (Tier::Secondary, 3));
//! let t = Tensor::canonical(&e, &[3]).unwrap();
//! t.set(2, 30.0f32).unwrap(); // written through to the resident tier
//! e.promote().unwrap();
//! assert_eq!((e.resident(), file.size()), (Tier::Primary, 0)); // the file shrank
//! assert_eq!(t.values_f32().unwrap(), vec![1.0, 2.0, 30.0]);
//! e.release().unwrap();
//! assert!(host.is_released() && file.is_released());
//! ```

use std::sync::Arc;

use parking_lot::Mutex;

use super::carrier::{Carrier, CarrierExt, HookToken, IntoCarrier, HOOK};
use super::error::{ModelError, Result};
use super::movement::route::{self, route_kind, Job};
use super::movement::MoveRefusal;
use super::state::{CarrierState, OwnerToken};
use crate::layout::{Layout, Shape};
use crate::storage::ElemKind;

/// Which tier of an [`Evictable`] holds its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tier {
    /// The primary (fast) tier.
    Primary,
    /// The secondary (large) tier.
    Secondary,
}

struct Tiers {
    primary: Arc<dyn Carrier>,
    secondary: Arc<dyn Carrier>,
    resident: Tier,
    /// `Some(v)` after a promote that kept the secondary (`retaining_clean`): the secondary
    /// holds the values the composite had at version `v`, so while the version is still `v`
    /// an evict writes nothing.
    clean_version: Option<u64>,
}

impl Tiers {
    fn resident(&self) -> &Arc<dyn Carrier> {
        match self.resident {
            Tier::Primary => &self.primary,
            Tier::Secondary => &self.secondary,
        }
    }
}

/// A two-tier composite carrier (see the module docs).
pub struct Evictable {
    state: CarrierState,
    owner: OwnerToken,
    kind: ElemKind,
    /// Whether a promote copies and keeps the secondary as a clean copy.
    retain_clean: bool,
    tiers: Mutex<Tiers>,
}

impl std::fmt::Debug for Evictable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evictable")
            .field("kind", &self.kind)
            .field("resident", &self.resident())
            .field("retain_clean", &self.retain_clean)
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
    /// unchanged since (the composite's version is the same) writes nothing. For weights read
    /// far more often than written, every eviction after the first is free.
    ///
    /// ```
    /// use strideweave_core::model::{Carrier, CarrierExt, Evictable, FileCarrier, HostCarrier, Tier};
    /// use strideweave_core::storage::{ElemKind, Scalar};
    ///
    /// let host = HostCarrier::from_f32(&[1.0, 2.0]);
    /// let file = FileCarrier::temp(ElemKind::F32).unwrap();
    /// let e = Evictable::retaining_clean(&host, &file).unwrap();
    /// e.evict().unwrap(); // written once
    /// e.promote().unwrap();
    /// assert!(e.is_clean() && file.size() == 2); // the file keeps the values
    /// e.evict().unwrap(); // clean: nothing written
    /// e.promote().unwrap();
    /// e.set(1, Scalar::F32(5.0)).unwrap(); // dirty now
    /// assert!(!e.is_clean());
    /// e.evict().unwrap(); // written back
    /// assert_eq!(e.resident(), Tier::Secondary);
    /// assert_eq!(e.get(1).unwrap(), Scalar::F32(5.0));
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
            retain_clean,
            tiers: Mutex::new(Tiers { primary, secondary, resident: Tier::Primary, clean_version: None }),
        }))
    }

    /// The tier holding the values now.
    pub fn resident(&self) -> Tier {
        self.tiers.lock().resident
    }

    /// Whether the secondary holds the current values: evicted, or promoted by a composite
    /// made with [`retaining_clean`](Self::retaining_clean) and not written since (an
    /// [`evict`](Self::evict) then writes nothing).
    pub fn is_clean(&self) -> bool {
        let tiers = self.tiers.lock();
        tiers.resident == Tier::Secondary || tiers.clean_version == Some(self.state.version())
    }

    /// Move the values to the secondary tier (nothing to do if they are there).
    pub fn evict(&self) -> Result<()> {
        self.move_to(Tier::Secondary)
    }

    /// Move the values back to the primary tier (nothing to do if they are there).
    pub fn promote(&self) -> Result<()> {
        self.move_to(Tier::Primary)
    }

    fn move_to(&self, target: Tier) -> Result<()> {
        // The composite's state stays locked across the copy, so no write, release or claim
        // of it interleaves; its tiers are owned, so nothing outside reaches them.
        let gate = self.state.begin_write()?;
        gate.check_writable(true)?;
        let mut tiers = self.tiers.lock();
        if tiers.resident == target {
            return Ok(());
        }
        let (primary, secondary) = (tiers.primary.clone(), tiers.secondary.clone());
        match target {
            Tier::Secondary => {
                // Unchanged since a promote that kept the secondary: it holds these values.
                if tiers.clean_version != Some(self.state.version()) {
                    copy_tier(&*primary, &*secondary)?;
                }
                // The values now live in the secondary; an allocatable primary gives its space
                // back (a failure to shrink leaves it larger, never the values elsewhere).
                if primary.can_allocate() {
                    let _ = primary.allocate(HOOK, 0);
                }
                tiers.clean_version = None;
            }
            Tier::Primary => {
                copy_tier(&*secondary, &*primary)?;
                if self.retain_clean {
                    tiers.clean_version = Some(self.state.version());
                } else if secondary.can_allocate() {
                    let _ = secondary.allocate(HOOK, 0);
                }
            }
        }
        tiers.resident = target;
        Ok(()) // the gate drops uncommitted: evict and promote are not writes
    }
}

/// Copy every slot of `from` into `to`, growing an empty allocatable `to` first; on failure
/// a grown `to` shrinks back to empty.
fn copy_tier(from: &dyn Carrier, to: &dyn Carrier) -> Result<()> {
    let n = from.size();
    let grew = to.size() < n;
    if grew {
        if !(to.size() == 0 && to.can_allocate()) {
            return Err(MoveRefusal::TooSmall {
                carrier: to.state(HOOK).class_name().to_string(),
                size: to.size(),
                needed: n,
            }
            .into());
        }
        to.allocate(HOOK, n)?;
    }
    let copied = transfer(from, to, n);
    if copied.is_err() && grew {
        let _ = to.allocate(HOOK, 0);
    }
    copied
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
        self.tiers.lock().resident().size()
    }

    fn read_slot(&self, _: &HookToken, i: usize) -> Result<crate::storage::Scalar> {
        self.tiers.lock().resident().read_slot(HOOK, i)
    }

    fn write_slot(&self, _: &HookToken, i: usize, v: crate::storage::Scalar) -> Result<()> {
        self.tiers.lock().resident().write_slot(HOOK, i, v)
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
