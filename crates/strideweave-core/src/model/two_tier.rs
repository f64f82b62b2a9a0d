//! The two-tier composite's state and the order of its residency changes, once, for every
//! composite whose values live in one of two tiers: this model's [`Evictable`](super::Evictable),
//! whose tiers are carriers of this model, and a binding's (the Python package's `Evictable`),
//! whose tiers are its own objects. What differs between them is only what is done *to* a
//! tier, which a [`TierWork`] says: make a fresh one, transfer the values, release one as the
//! owner. What is the same is here: where the values are ([`Residency`], the one rule), which
//! tier replaces which, when reads are refused, and the order of a change:
//!
//! 1. claim the composite (after a change still running), refused at the call when it is
//!    released, owned or claimed;
//! 2. stage: plan the change by the residency rule, from when on reads of the composite are
//!    refused too until the commit (it is held while the change runs); make a fresh target
//!    when the target is released or too small; a change with nothing to transfer commits
//!    here. The tiers' lock is never held while a tier's code runs;
//! 3. transfer; a panic in a tier's code fails the change like any error;
//! 4. under the lock: commit (swap in the fresh tier, record the residency), then release the
//!    tier it replaced and a clean primary it left; or give back the fresh tier; then the
//!    claim.
//!
//! A blocking change runs on the calling thread; an asynchronous one stages there and
//! transfers on the engine's copy lane, or starts the transfer there when the work does
//! ([`TierWork::starts_transfers`]: a binding's own asynchronous move) and commits where the
//! transfer completes; its handle is done after 4.

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::awaitable::ResidencyHandle;
use super::carrier::{Carrier, HOOK};
use super::error::Result;
use super::residency::{Residency, Tier, Transition};
use super::state::ClaimGuard;
use super::tier_ops::{self, Transitions};

/// What a composite's residency changes do to its tiers (see the module docs). Every method
/// runs while the composite is claimed by the change, so nobody else writes, moves or
/// releases the composite or its tiers meanwhile.
pub trait TierWork: Send + Sync + 'static {
    /// A tier: a carrier of this model, or a binding's handle of its own.
    type Tier: Clone + Send + Sync + 'static;

    /// Whether values cannot go into `target` as it is (released, or smaller than the
    /// composite), so a fresh tier must replace it (a binding's size hook may fail).
    fn needs_fresh(&self, target: &Self::Tier) -> Result<bool>;

    /// A fresh tier like `target`, owned by the composite, for `step` from `source`. On
    /// failure nothing is left owned.
    fn fresh(&self, step: Transition, source: &Self::Tier, target: &Self::Tier) -> Result<Self::Tier>;

    /// The values of `source` into `target` as `step` says: a move (which releases the source
    /// as its owner's) or a copy ([`Transition::CopyUp`], the source stays live).
    fn transfer(&self, step: Transition, source: &Self::Tier, target: &Self::Tier) -> Result<()>;

    /// Release `tier` as its owner (a failure of its release cannot undo a committed change:
    /// it is dropped); `keep` leaves it listed as owned (the source a change left), else the
    /// composite gives it up.
    fn release(&self, tier: &Self::Tier, keep: bool);

    /// Whether this work starts its transfers itself ([`start_transfer`](Self::start_transfer)):
    /// a binding whose transfers are its own asynchronous moves. Otherwise an asynchronous
    /// change runs [`transfer`](Self::transfer) on the engine's copy lane.
    fn starts_transfers(&self) -> bool {
        false
    }

    /// Start [`transfer`](Self::transfer) (when [`starts_transfers`](Self::starts_transfers))
    /// and call `then` with its outcome once it is done, on any thread, exactly once. The
    /// default runs it here.
    fn start_transfer(
        &self,
        step: Transition,
        source: &Self::Tier,
        target: &Self::Tier,
        then: Box<dyn FnOnce(Result<()>) + Send>,
    ) {
        then(self.transfer(step, source, target))
    }
}

/// The composite a change holds: how to claim it for the change (the claim ends when the
/// returned value is dropped), and its version.
pub trait Hold {
    /// The held claim.
    type Claim: Send + 'static;

    /// Claim the composite for `action`: refused when it is released, owned or claimed.
    fn claim(&self, action: &'static str) -> Result<Self::Claim>;

    /// The composite's version now.
    fn version(&self) -> u64;
}

impl Hold for Arc<dyn Carrier> {
    type Claim = ClaimGuard;

    fn claim(&self, action: &'static str) -> Result<ClaimGuard> {
        self.state(HOOK).claim_for(self, action)
    }

    fn version(&self) -> u64 {
        self.state(HOOK).version()
    }
}

/// The tiers, where the values are, and whether a change runs now.
struct Tiers<T> {
    primary: T,
    secondary: T,
    residency: Residency,
    /// A change runs (from its plan to its commit): reads are refused.
    in_transition: bool,
}

impl<T> Tiers<T> {
    fn tier(&self, which: Tier) -> &T {
        match which {
            Tier::Primary => &self.primary,
            Tier::Secondary => &self.secondary,
        }
    }

    fn replace(&mut self, which: Tier, fresh: T) -> T {
        let slot = match which {
            Tier::Primary => &mut self.primary,
            Tier::Secondary => &mut self.secondary,
        };
        std::mem::replace(slot, fresh)
    }
}

/// A change planned and ready to transfer: its step, the composite's version, the tier the
/// values leave, the one they go to, and the fresh tier replacing that one, if any.
struct Staged<T> {
    step: Transition,
    version: u64,
    source: T,
    target: T,
    fresh: Option<T>,
}

/// A refusal of a read or write of the composite: its values are between tiers, or evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unreadable {
    /// A residency change runs.
    InTransition,
    /// The values are in the secondary tier.
    Evicted,
}

/// A two-tier composite's tiers, residency and changes (see the module docs).
pub struct TwoTier<W: TierWork> {
    work: W,
    tiers: Mutex<Tiers<W::Tier>>,
    /// One change at a time, blocking or asynchronous.
    transitions: Transitions,
}

impl<W: TierWork> std::fmt::Debug for TwoTier<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tiers = self.tiers.lock();
        f.debug_struct("TwoTier")
            .field("residency", &tiers.residency)
            .field("in_transition", &tiers.in_transition)
            .finish_non_exhaustive()
    }
}

/// The tiers locked with the values readable in the primary: a read or write of the composite
/// goes to [`primary`](Promoted::primary) while this lives, so no change releases it meanwhile.
pub struct Promoted<'a, T> {
    tiers: MutexGuard<'a, Tiers<T>>,
}

impl<T> std::fmt::Debug for Promoted<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Promoted").field("residency", &self.tiers.residency).finish_non_exhaustive()
    }
}

impl<T> Promoted<'_, T> {
    /// The primary tier, which holds the values.
    pub fn primary(&self) -> &T {
        &self.tiers.primary
    }

    /// A write into the composite: the secondary's clean copy is stale from now on.
    pub fn mark_dirty(&mut self) {
        self.tiers.residency.mark_dirty();
    }
}

impl<W: TierWork> TwoTier<W> {
    /// A promoted composite over `primary` and `secondary` (owned by the caller's composite
    /// already), whose tiers `work` handles; `retain_clean` makes promotes copy.
    pub fn new(work: W, primary: W::Tier, secondary: W::Tier, retain_clean: bool) -> Self {
        TwoTier {
            work,
            tiers: Mutex::new(Tiers {
                primary,
                secondary,
                residency: Residency::new(retain_clean),
                in_transition: false,
            }),
            transitions: Transitions::default(),
        }
    }

    /// What handles the tiers.
    pub fn work(&self) -> &W {
        &self.work
    }

    /// Where the values are.
    pub fn residency(&self) -> Residency {
        self.tiers.lock().residency
    }

    /// The primary tier now (a change into a released primary replaces it).
    pub fn primary(&self) -> W::Tier {
        self.tiers.lock().primary.clone()
    }

    /// The secondary tier now.
    pub fn secondary(&self) -> W::Tier {
        self.tiers.lock().secondary.clone()
    }

    /// Both tiers now, primary first.
    pub fn both(&self) -> [W::Tier; 2] {
        let tiers = self.tiers.lock();
        [tiers.primary.clone(), tiers.secondary.clone()]
    }

    /// A move into the composite wrote its values without a public write: the secondary's
    /// clean copy is stale from now on.
    pub fn mark_dirty(&self) {
        self.tiers.lock().residency.mark_dirty();
    }

    /// The tiers locked, with the values in the primary; else why not.
    pub fn promoted(&self) -> std::result::Result<Promoted<'_, W::Tier>, Unreadable> {
        let tiers = self.tiers.lock();
        if tiers.in_transition {
            Err(Unreadable::InTransition)
        } else if tiers.residency.is_evicted() {
            Err(Unreadable::Evicted)
        } else {
            Ok(Promoted { tiers })
        }
    }

    /// Take the values to the secondary (`evict`) or the primary, on this thread, holding
    /// `composite` (whose tiers these are) for the change.
    pub fn transition(&self, composite: &impl Hold, evict: bool) -> Result<()> {
        self.transitions.blocking(
            || composite.claim(action(evict)),
            || match self.begin(composite.version(), evict)? {
                Some(staged) => self.complete(staged),
                None => Ok(()),
            },
        )
    }

    /// [`transition`](Self::transition) on an engine thread: refusals and a change with
    /// nothing to transfer return here; the handle is done once the change is final.
    pub fn transition_async(self: &Arc<Self>, composite: &impl Hold, evict: bool) -> Result<ResidencyHandle> {
        if !self.work.starts_transfers() {
            let this = self.clone();
            return self.transitions.start(
                || composite.claim(action(evict)),
                || self.begin(composite.version(), evict),
                move |staged| this.complete(staged),
            );
        }
        let this = self.clone();
        self.transitions.start_with(
            || composite.claim(action(evict)),
            || self.begin(composite.version(), evict),
            move |staged, finish| {
                let (step, source) = (staged.step, staged.source.clone());
                let into = staged.fresh.clone().unwrap_or_else(|| staged.target.clone());
                let work = this.clone();
                // Committed where the transfer completes, the change's code marked as running there.
                let then = Box::new(move |transferred: Result<()>| {
                    let outcome = {
                        let _here = finish.running_here();
                        this.finish(staged, transferred)
                    };
                    finish.finish(outcome);
                });
                work.work.start_transfer(step, &source, &into, then);
            },
        )
    }

    /// Stage the change `evict` needs of the composite at `version` (nobody writes a claimed
    /// composite, so it holds until the commit): `None` when nothing is left to transfer (done
    /// already, or a clean eviction, committed here); else the staged change. Reads are
    /// refused from here to the commit: the composite is held while the change runs. The
    /// tiers' lock is never held while a tier's code runs (a binding's code may wait for a
    /// thread that waits for the lock); the claim keeps the plan valid.
    fn begin(&self, version: u64, evict: bool) -> Result<Option<Staged<W::Tier>>> {
        let (step, source, target) = {
            let mut tiers = self.tiers.lock();
            let Some(step) = tiers.residency.plan(evict, version) else { return Ok(None) };
            tiers.in_transition = true;
            (step, tiers.tier(step.source()).clone(), tiers.tier(step.target()).clone())
        };
        let fresh = tier_ops::contained(|| {
            if step.transfers() && self.work.needs_fresh(&target)? {
                self.work.fresh(step, &source, &target).map(Some)
            } else {
                Ok(None)
            }
        });
        let fresh = match fresh {
            Ok(fresh) => fresh,
            Err(e) => {
                self.tiers.lock().in_transition = false;
                return Err(e);
            }
        };
        let staged = Staged { step, version, source, target, fresh };
        if !step.transfers() {
            self.finish(staged, Ok(()))?;
            return Ok(None);
        }
        Ok(Some(staged))
    }

    /// Transfer a staged change, then commit it or give back what it made, and let reads in
    /// again.
    fn complete(&self, staged: Staged<W::Tier>) -> Result<()> {
        let into = staged.fresh.as_ref().unwrap_or(&staged.target);
        let transferred = tier_ops::contained(|| self.work.transfer(staged.step, &staged.source, into));
        self.finish(staged, transferred)
    }

    /// Commit a staged change whose transfer succeeded, or give back what it made; reads are
    /// let in again with the commit. The tiers it leaves behind are released after it.
    fn finish(&self, staged: Staged<W::Tier>, transferred: Result<()>) -> Result<()> {
        let Staged { step, version, source, fresh, .. } = staged;
        let outcome = {
            let mut tiers = self.tiers.lock();
            tiers.in_transition = false;
            match (transferred, fresh) {
                (Err(e), fresh) => Err((e, fresh)),
                (Ok(()), fresh) => {
                    let replaced = fresh.map(|fresh| tiers.replace(step.target(), fresh));
                    tiers.residency.commit(step, version);
                    Ok(replaced)
                }
            }
        };
        match outcome {
            Err((e, fresh)) => {
                if let Some(fresh) = fresh {
                    self.work.release(&fresh, false);
                }
                Err(e)
            }
            Ok(replaced) => {
                if let Some(replaced) = replaced {
                    self.work.release(&replaced, false);
                }
                if step == Transition::DropCleanPrimary {
                    // A move releases its own source; the clean primary nobody moved is
                    // released here. Either way it stays the composite's until replaced.
                    self.work.release(&source, true);
                }
                Ok(())
            }
        }
    }
}

/// The word a refusal of an evict (`evict`) or a promote uses.
pub(super) fn action(evict: bool) -> &'static str {
    if evict {
        "evict"
    } else {
        "promote"
    }
}
