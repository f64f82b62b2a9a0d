//! The residency rule of a two-tier composite: which tier holds its values, whether the
//! secondary still holds a clean copy of them, and what a transition to the other tier does.
//!
//! This is the one place the rule lives. The Rust [`Evictable`](super::Evictable) and the
//! Python package's `Evictable` (through `_native.Residency`) each keep a [`Residency`], ask
//! it for the [`Transition`] an evict or a promote needs, do that transition's work with their
//! own tiers, and then [`commit`](Residency::commit) it. A transition that fails is never
//! committed, so the residency stays as it was.
//!
//! The rule (tensor-and-carriers.md §3.2 and §3.2.1):
//! * a transition to the tier that already holds the values does nothing;
//! * evicting values the secondary still holds (a clean composite) releases the primary and
//!   writes nothing;
//! * otherwise an evict moves the values into the secondary, and a promote moves them back,
//!   except that a composite made to retain clean copies promotes by copying, which leaves
//!   the secondary live as a clean copy of the values at the promote's version;
//! * a write (a new version) or a move into the composite makes that copy stale.
//!
//! ```
//! use strideweave_core::model::{Residency, Tier, Transition};
//!
//! let mut r = Residency::new(true); // retains clean copies
//! assert_eq!(r.plan(false, 0), None); // promoted already
//! let evict = r.plan(true, 0).unwrap();
//! assert_eq!((evict, evict.target()), (Transition::Move { evict: true }, Tier::Secondary));
//! r.commit(evict, 0);
//! let promote = r.plan(false, 0).unwrap();
//! assert_eq!(promote, Transition::CopyUp); // the secondary stays as a clean copy
//! r.commit(promote, 0);
//! assert!(r.is_clean(0));
//! assert_eq!(r.plan(true, 0), Some(Transition::DropCleanPrimary)); // nothing to write
//! assert_eq!(r.plan(true, 1), Some(Transition::Move { evict: true })); // written since
//! ```

/// Which tier of a two-tier composite holds its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Tier {
    /// The primary (fast) tier.
    Primary,
    /// The secondary (large) tier.
    Secondary,
}

/// What one evict or promote does (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transition {
    /// Evict values the secondary already holds: release the primary, write nothing.
    DropCleanPrimary,
    /// Move the values into the other tier (into the secondary when `evict`): the move
    /// releases the tier they leave.
    Move {
        /// Whether the values go to the secondary.
        evict: bool,
    },
    /// Promote by copying: the values go to the primary and the secondary stays live as a
    /// clean copy of them.
    CopyUp,
}

impl Transition {
    /// Whether the values end in the secondary.
    pub fn evicts(self) -> bool {
        match self {
            Transition::DropCleanPrimary => true,
            Transition::Move { evict } => evict,
            Transition::CopyUp => false,
        }
    }

    /// The tier the values leave.
    pub fn source(self) -> Tier {
        if self.evicts() {
            Tier::Primary
        } else {
            Tier::Secondary
        }
    }

    /// The tier the values end in.
    pub fn target(self) -> Tier {
        if self.evicts() {
            Tier::Secondary
        } else {
            Tier::Primary
        }
    }

    /// Whether the values are transferred: false only when the target holds them already.
    pub fn transfers(self) -> bool {
        self != Transition::DropCleanPrimary
    }

    /// Whether the source tier is released at the commit (by the move, or as the clean
    /// primary); a copy keeps it live.
    pub fn releases_source(self) -> bool {
        self != Transition::CopyUp
    }
}

/// Where a two-tier composite's values are, and whether its secondary holds a clean copy of
/// them (see the module docs). A composite starts promoted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Residency {
    evicted: bool,
    retain_clean: bool,
    /// `Some(v)` after a promote that copied (`retain_clean`): the secondary holds the values
    /// the composite had at version `v`, until a move into the composite makes it stale.
    clean_at: Option<u64>,
}

impl Residency {
    /// A promoted composite's residency; `retain_clean` makes promotes copy
    /// ([`Transition::CopyUp`]) instead of moving.
    pub const fn new(retain_clean: bool) -> Self {
        Residency { evicted: false, retain_clean, clean_at: None }
    }

    /// Whether the values are in the secondary.
    pub fn is_evicted(self) -> bool {
        self.evicted
    }

    /// The tier holding the values.
    pub fn resident(self) -> Tier {
        if self.evicted {
            Tier::Secondary
        } else {
            Tier::Primary
        }
    }

    /// Whether promotes copy and keep the secondary as a clean copy.
    pub fn retains_clean(self) -> bool {
        self.retain_clean
    }

    /// Whether the secondary holds the values of a composite now at `version`: evicted, or
    /// promoted by a copy at that version and not moved into since.
    pub fn is_clean(self, version: u64) -> bool {
        self.evicted || self.clean_at == Some(version)
    }

    /// A move into the composite changed its values without changing its version: the
    /// secondary's copy is stale from now on.
    pub fn mark_dirty(&mut self) {
        self.clean_at = None;
    }

    /// What taking the values to the secondary (`evict`) or to the primary needs of a
    /// composite now at `version`; `None` when they are there already.
    pub fn plan(self, evict: bool, version: u64) -> Option<Transition> {
        if self.evicted == evict {
            None
        } else if evict && self.is_clean(version) {
            Some(Transition::DropCleanPrimary)
        } else if evict || !self.retain_clean {
            Some(Transition::Move { evict })
        } else {
            Some(Transition::CopyUp)
        }
    }

    /// `transition` has done its work on a composite at `version`: the values are in its
    /// target tier, and only a copy leaves a clean secondary behind.
    pub fn commit(&mut self, transition: Transition, version: u64) {
        self.evicted = transition.evicts();
        self.clean_at = (transition == Transition::CopyUp).then_some(version);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_retain_clean_every_transition_is_a_move() {
        let mut r = Residency::new(false);
        for _ in 0..2 {
            let evict = r.plan(true, 0).unwrap();
            assert_eq!(evict, Transition::Move { evict: true });
            r.commit(evict, 0);
            assert_eq!((r.resident(), r.plan(true, 0)), (Tier::Secondary, None));
            let promote = r.plan(false, 0).unwrap();
            assert_eq!(
                (promote, promote.source(), promote.releases_source()),
                (Transition::Move { evict: false }, Tier::Secondary, true)
            );
            r.commit(promote, 0);
            assert!(!r.is_clean(0), "a moved secondary holds nothing");
        }
    }

    #[test]
    fn a_clean_copy_is_stale_after_a_write_or_a_move_into_the_composite() {
        let mut r = Residency::new(true);
        r.commit(Transition::Move { evict: true }, 3); // the first eviction writes
        r.commit(r.plan(false, 3).unwrap(), 3);
        assert_eq!(r.plan(true, 3), Some(Transition::DropCleanPrimary));
        assert_eq!(r.plan(true, 4), Some(Transition::Move { evict: true }), "a write since");
        r.mark_dirty();
        assert_eq!(r.plan(true, 3), Some(Transition::Move { evict: true }), "a move into it since");
        let drop = Transition::DropCleanPrimary;
        assert!(drop.evicts() && !drop.transfers() && drop.releases_source());
        assert!(!Transition::CopyUp.releases_source() && Transition::CopyUp.target() == Tier::Primary);
    }
}
