//! [`StateCell`]: the one implementation of a carrier's framework state — version, released,
//! owner, pending claim — and of its transitions, generic over what identifies an owner (`O`)
//! and a claim (`C`).
//!
//! The carrier state of the project, [`CarrierState`](super::CarrierState), is this cell
//! filled with an [`Owner`](super::Owner) and a [`Claim`](super::Claim): the Rust object model
//! stores its tokens there, the Python binding its Python objects (the owning composite's
//! token, the pending move request) as [`Foreign`](super::Foreign) payloads, so both sides
//! share one state type, the same checks and the same atomicity. The cell stays generic so
//! that its transitions are tested on their own.
//!
//! Every transition checks and changes the state inside one critical section of a
//! `parking_lot` mutex, so of two racing transitions exactly one wins. A transition never
//! drops a payload it displaces: it hands it back, so a caller whose payloads run code when
//! dropped (a Python object's `__del__`) drops them after the lock is gone. What a claim
//! check tolerates and what a refusal reports come from a [`ClaimJudge`], which runs inside
//! the critical section and therefore must not block or call back into foreign code.
//!
//! The fast paths read without the lock: `version`, `released` and whether the carrier is
//! owned or claimed are atomics, changed only inside the critical section (the version also
//! by [`StateCell::bump_version`]), so a lock-free read sees a state some transition left.
//!
//! ```
//! use strideweave_core::model::{ClaimRule, Refusal, StateCell, Strict};
//!
//! let cell: StateCell<&str, u32> = StateCell::new();
//! cell.try_claim(1, ClaimRule::FREE, &Strict).unwrap();
//! assert_eq!(cell.try_claim(2, ClaimRule::FREE, &Strict), Err((2, Refusal::Claimed(()))));
//! assert!(cell.is_claimed());
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use std::thread::ThreadId;

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::element_bias::{BiasedAccess, ElementBias};

/// Bits of `StateCell::busy`: which payload slots are occupied.
const OWNED: u8 = 1;
const CLAIMED: u8 = 2;

/// What a [`ClaimJudge`] says of the claim a carrier holds already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict<B> {
    /// The claim does not stand in the way (it is the caller's own, say).
    Passes,
    /// The claim refuses the transition, for the reason given.
    Blocks(B),
}

/// The caller's rules for the payloads it stored: which existing claims block a transition,
/// and what a refusal reports about each. Called inside the critical section: it must be
/// quick and must not run foreign code (no Python).
pub trait ClaimJudge<O, C> {
    /// What a refusal by a held claim reports.
    type Blocked;
    /// What a refusal by an owner reports.
    type Owner;
    /// Whether the held claim `held` lets the transition go ahead, or what it reports.
    fn judge(&self, held: &C) -> Verdict<Self::Blocked>;
    /// What a refusal by `owner` reports.
    fn owner(&self, owner: &O) -> Self::Owner;
    /// Whether `owner` lets the transition go ahead on an owned carrier (a composite
    /// releasing its own tier at the commit of a move between its tiers); no owner does,
    /// unless the judge says so.
    fn owner_passes(&self, _owner: &O) -> bool {
        false
    }
}

/// The judge for which every held claim blocks and refusals report only their cause.
#[derive(Clone, Copy, Debug, Default)]
pub struct Strict;

impl<O, C> ClaimJudge<O, C> for Strict {
    type Blocked = ();
    type Owner = ();
    fn judge(&self, _held: &C) -> Verdict<()> {
        Verdict::Blocks(())
    }
    fn owner(&self, _owner: &O) {}
}

/// Why a transition was refused; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal<B, W> {
    /// The carrier is released.
    Released,
    /// An owner holds the carrier (what the judge reports of it).
    Owned(W),
    /// A claim blocks the transition (what the judge reports of it).
    Claimed(B),
    /// The carrier does not accept writes.
    NotMutable,
    /// A write whose store runs foreign code is in progress ([`StateCell::open_write`]):
    /// claims and releases wait for no one, they are refused.
    BeingWritten,
}

/// The refusal type of judge `J`.
pub type RefusalOf<J, O, C> = Refusal<<J as ClaimJudge<O, C>>::Blocked, <J as ClaimJudge<O, C>>::Owner>;

/// What a claim requires beyond a live carrier that no blocking claim holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimRule {
    /// An owned carrier refuses the claim (`Refusal::Owned`).
    pub owner_refuses: bool,
    /// The caller's mutability answer (a destination's hook, asked before the transition);
    /// `false` refuses with `Refusal::NotMutable`, checked last.
    pub mutable: bool,
}

impl ClaimRule {
    /// Live, unowned and unclaimed: what the core model asks of a move's source.
    pub const FREE: ClaimRule = ClaimRule { owner_refuses: true, mutable: true };
}

/// How [`StateCell::begin_release`] started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseStart {
    /// Released already: nothing to do (release is idempotent).
    AlreadyReleased,
    /// The release hook may run now. `marked`: the cell was unclaimed and holds the caller's
    /// "being released" marker until [`StateCell::finish_release`] or
    /// [`StateCell::abort_release`]; otherwise a claim the judge let pass stays in place.
    Began {
        /// Whether the cell holds the caller's "being released" marker.
        marked: bool,
    },
}

#[derive(Debug)]
struct Slots<O, C> {
    owner: Option<O>,
    claim: Option<C>,
    /// The threads of the writes opened by [`StateCell::open_write`] and not yet closed (a
    /// write opens and closes on one thread; a thread may have several open, nested).
    writers: Vec<ThreadId>,
}

/// A carrier's framework state (see the module docs).
#[derive(Debug)]
pub struct StateCell<O, C> {
    version: AtomicU64,
    released: AtomicBool,
    /// `OWNED`/`CLAIMED` bits mirroring the slots, for lock-free reads.
    busy: AtomicU8,
    slots: Mutex<Slots<O, C>>,
    /// Signalled when the last open write closes ([`StateCell::wait_out_writes`]).
    unwritten: Condvar,
    /// The thread, if any, whose element accesses go without the lock (see
    /// `model::element_bias`); every change that turns accesses away, and every write or
    /// count the owner does not make, revokes it under the lock.
    bias: ElementBias,
}

impl<O, C> Default for StateCell<O, C> {
    fn default() -> Self {
        Self::new()
    }
}

/// The locked state: every change goes through here, so the mirrors stay true.
struct Locked<'a, O, C> {
    cell: &'a StateCell<O, C>,
    slots: MutexGuard<'a, Slots<O, C>>,
}

impl<O, C> Locked<'_, O, C> {
    fn released(&self) -> bool {
        self.cell.released.load(Ordering::Relaxed)
    }

    fn set_released(&mut self, released: bool) {
        self.cell.released.store(released, Ordering::Release);
        if released {
            self.cell.bias.revoke_others();
        }
    }

    /// Set or clear a `busy` bit. Only a holder of the lock changes `busy`, so a plain
    /// load and store suffice (no read-modify-write: a locked instruction per claim and per
    /// release was a measurable part of a small move); lock-free readers see it by `Release`.
    fn mark(&mut self, bit: u8, set: bool) {
        let busy = self.cell.busy.load(Ordering::Relaxed);
        self.cell.busy.store(if set { busy | bit } else { busy & !bit }, Ordering::Release);
        if set {
            self.cell.bias.revoke_others();
        }
    }

    fn put_owner(&mut self, owner: Option<O>) -> Option<O> {
        self.mark(OWNED, owner.is_some());
        std::mem::replace(&mut self.slots.owner, owner)
    }

    fn put_claim(&mut self, claim: Option<C>) -> Option<C> {
        self.mark(CLAIMED, claim.is_some());
        std::mem::replace(&mut self.slots.claim, claim)
    }

    /// The checks every claim makes, in order: released, owner (if the rule says so), a
    /// blocking claim, an open write, mutability.
    fn check_claim<J: ClaimJudge<O, C>>(&self, rule: ClaimRule, judge: &J) -> Result<(), RefusalOf<J, O, C>> {
        if self.released() {
            return Err(Refusal::Released);
        }
        if rule.owner_refuses {
            if let Some(owner) = &self.slots.owner {
                return Err(Refusal::Owned(judge.owner(owner)));
            }
        }
        self.check_claim_passes(judge)?;
        self.check_not_written()?;
        if !rule.mutable {
            return Err(Refusal::NotMutable);
        }
        Ok(())
    }

    fn check_owner<J: ClaimJudge<O, C>>(&self, judge: &J) -> Result<(), RefusalOf<J, O, C>> {
        match &self.slots.owner {
            Some(owner) if !judge.owner_passes(owner) => Err(Refusal::Owned(judge.owner(owner))),
            _ => Ok(()),
        }
    }

    /// Refuses while a write opened by [`StateCell::open_write`] is in progress: its checks
    /// were made when it opened, and a claim or a release must not change what they saw
    /// before its store is done.
    fn check_not_written<B, W>(&self) -> Result<(), Refusal<B, W>> {
        if !self.slots.writers.is_empty() {
            return Err(Refusal::BeingWritten);
        }
        Ok(())
    }

    fn check_claim_passes<J: ClaimJudge<O, C>>(&self, judge: &J) -> Result<(), RefusalOf<J, O, C>> {
        match self.slots.claim.as_ref().map(|held| judge.judge(held)) {
            Some(Verdict::Blocks(why)) => Err(Refusal::Claimed(why)),
            _ => Ok(()),
        }
    }
}

/// Whether order slot `k` is the first of its cell (the one holding the cell's lock).
fn locked_present(k: usize, order: &[usize], address: &impl Fn(usize) -> usize) -> bool {
    k == 0 || address(order[k - 1]) != address(order[k])
}

impl<O, C> StateCell<O, C> {
    /// Version 0, live, unowned, unclaimed.
    pub const fn new() -> Self {
        StateCell {
            version: AtomicU64::new(0),
            released: AtomicBool::new(false),
            busy: AtomicU8::new(0),
            slots: Mutex::new(Slots { owner: None, claim: None, writers: Vec::new() }),
            unwritten: Condvar::new(),
            bias: ElementBias::new(),
        }
    }

    // ----- biased element access (see `model::element_bias`) ------------------------------

    /// Begin an element access without the lock: `Some` when this thread owns the carrier's
    /// bias and the carrier is live, unowned and unclaimed; the state stays so until the
    /// access drops.
    #[inline]
    pub(crate) fn enter_biased(&self) -> Option<BiasedAccess<'_>> {
        let access = self.bias.enter()?;
        // Plain loads suffice: a transition made its change before revoking the bias, and the
        // revocation's barrier makes it visible here, or waits for this access.
        let free = !self.released.load(Ordering::Relaxed) && self.busy.load(Ordering::Relaxed) == 0;
        free.then_some(access)
    }

    /// Count a write made by a biased access: the bias owner is the only writer of the
    /// version while it holds the bias, so no locked instruction is needed.
    #[inline]
    pub(crate) fn count_biased_write(&self, _access: &BiasedAccess<'_>) {
        self.version.store(self.version.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// After an element access on the locked path: bias the carrier to this thread if it is
    /// live, unowned, unclaimed and unbiased (and no revocation is recent).
    pub(crate) fn offer_bias(&self) {
        if !self.bias.unowned() {
            return;
        }
        let state = self.lock();
        if !state.released() && self.busy.load(Ordering::Relaxed) == 0 {
            self.bias.offer();
        }
    }

    /// Whether this thread holds the carrier's bias.
    #[cfg(test)]
    pub(crate) fn is_biased_here(&self) -> bool {
        self.bias.is_mine()
    }

    /// End another thread's bias before a carrier's storage goes away. The release or the
    /// claim or owner that comes before revoked it already, and none is taken since (a bias
    /// needs a live, unowned, unclaimed carrier), so this takes the lock only if one is left.
    pub(crate) fn revoke_bias(&self) {
        if !self.bias.unowned() {
            let _state = self.lock();
            self.bias.revoke_others();
        }
    }

    fn lock(&self) -> Locked<'_, O, C> {
        Locked { cell: self, slots: self.slots.lock() }
    }

    // ----- lock-free reads ---------------------------------------------------------------

    /// The version: +1 per counted write.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    /// Whether the carrier is released.
    pub fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Whether an owner holds the carrier.
    pub fn is_owned(&self) -> bool {
        self.busy.load(Ordering::Acquire) & OWNED != 0
    }

    /// Whether a claim (a pending move) holds the carrier.
    pub fn is_claimed(&self) -> bool {
        self.busy.load(Ordering::Acquire) & CLAIMED != 0
    }

    /// Live, unowned and unclaimed.
    pub fn is_free(&self) -> bool {
        !self.is_released() && self.busy.load(Ordering::Acquire) == 0
    }

    // ----- plain stores (the state as a settable record) ----------------------------------

    /// Count one write without any check: for a caller that has just checked the state in a
    /// way no transition can interleave with (the binding's element path, under the GIL).
    ///
    /// A biased carrier (a host carrier whose elements a thread accesses without the lock)
    /// must be counted under the lock, so that its bias is revoked first; every caller in
    /// the crate does so.
    pub fn bump_version(&self) {
        self.bias.revoke_others();
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    /// Set the version without any check (the binding's settable record).
    pub fn set_version(&self, version: u64) {
        let _state = self.lock();
        self.bias.revoke_others();
        self.version.store(version, Ordering::Relaxed);
    }

    /// Set the released flag without any check or hook (the binding's settable record).
    pub fn set_released(&self, released: bool) {
        self.lock().set_released(released);
    }

    /// `f(owner)` under the lock (`f` must not run foreign code).
    pub fn with_owner<R>(&self, f: impl FnOnce(Option<&O>) -> R) -> R {
        f(self.slots.lock().owner.as_ref())
    }

    /// `f(claim)` under the lock (`f` must not run foreign code).
    pub fn with_claim<R>(&self, f: impl FnOnce(Option<&C>) -> R) -> R {
        f(self.slots.lock().claim.as_ref())
    }

    /// Sets the owner; the previous one is handed back.
    #[must_use = "drop the displaced owner after the call"]
    pub fn replace_owner(&self, owner: Option<O>) -> Option<O> {
        self.lock().put_owner(owner)
    }

    /// Sets the claim; the previous one is handed back.
    #[must_use = "drop the displaced claim after the call"]
    pub fn replace_claim(&self, claim: Option<C>) -> Option<C> {
        self.lock().put_claim(claim)
    }

    /// Drops the owner if `is_ours(owner)`; hands it back.
    #[must_use = "drop the displaced owner after the call"]
    pub fn disown_if(&self, is_ours: impl FnOnce(&O) -> bool) -> Option<O> {
        let mut state = self.lock();
        if state.slots.owner.as_ref().is_some_and(is_ours) {
            state.put_owner(None)
        } else {
            None
        }
    }

    /// Drops the claim if `is_ours(claim)`; hands it back.
    #[must_use = "drop the displaced claim after the call"]
    pub fn drop_claim_if(&self, is_ours: impl FnOnce(&C) -> bool) -> Option<C> {
        let mut state = self.lock();
        if state.slots.claim.as_ref().is_some_and(is_ours) {
            state.put_claim(None)
        } else {
            None
        }
    }

    // ----- transitions -------------------------------------------------------------------

    /// Claims the carrier with `claim` if [`ClaimRule`] and `judge` allow it (checks in the
    /// order released, owner, held claim, mutability). `Ok` hands back the claim displaced (one
    /// the judge let pass); `Err` hands back `claim` with the refusal.
    #[allow(clippy::type_complexity)]
    pub fn try_claim<J: ClaimJudge<O, C>>(
        &self,
        claim: C,
        rule: ClaimRule,
        judge: &J,
    ) -> Result<Option<C>, (C, RefusalOf<J, O, C>)> {
        let mut state = self.lock();
        match state.check_claim(rule, judge) {
            Ok(()) => Ok(state.put_claim(Some(claim))),
            Err(why) => Err((claim, why)),
        }
    }

    /// Claims every cell of `entries` or none: all are locked (in address order, so two
    /// callers cannot deadlock), each is checked in the order given, and only then does each
    /// take a claim from `make`. `Ok` hands back the displaced claims, one per entry; `Err`
    /// gives the index of the first entry refused, and why. A cell listed twice is checked
    /// twice and claimed once.
    #[allow(clippy::type_complexity)]
    pub fn claim_all<J: ClaimJudge<O, C>>(
        entries: &[(&Self, ClaimRule)],
        mut make: impl FnMut() -> C,
        judge: &J,
    ) -> Result<Vec<Option<C>>, (usize, RefusalOf<J, O, C>)> {
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by_key(|&i| entries[i].0 as *const Self as usize);
        order.dedup_by_key(|i| entries[*i].0 as *const Self as usize);
        let mut locked: Vec<Locked<'_, O, C>> = order.iter().map(|&i| entries[i].0.lock()).collect();
        let slot_of = |cell: &Self| {
            order.iter().position(|&i| std::ptr::eq(entries[i].0, cell)).expect("every entry's cell is locked")
        };
        for (n, (cell, rule)) in entries.iter().enumerate() {
            locked[slot_of(cell)].check_claim(*rule, judge).map_err(|why| (n, why))?;
        }
        let mut displaced: Vec<Option<C>> = Vec::with_capacity(entries.len());
        let mut claimed = vec![false; locked.len()];
        for (cell, _) in entries {
            let k = slot_of(cell);
            displaced.push(if std::mem::replace(&mut claimed[k], true) {
                None
            } else {
                locked[k].put_claim(Some(make()))
            });
        }
        Ok(displaced)
    }

    /// [`claim_all`](Self::claim_all) for a fixed number of entries, without allocating:
    /// the hot path of a move, which claims its two carriers.
    #[allow(clippy::type_complexity)]
    pub fn claim_array<J: ClaimJudge<O, C>, const N: usize>(
        entries: [(&Self, ClaimRule); N],
        mut make: impl FnMut() -> C,
        judge: &J,
    ) -> Result<[Option<C>; N], (usize, RefusalOf<J, O, C>)> {
        let address = |i: usize| entries[i].0 as *const Self as usize;
        let mut order: [usize; N] = std::array::from_fn(|i| i);
        order.sort_unstable_by_key(|&i| address(i));
        // In address order (so two callers cannot deadlock), each distinct cell locked once.
        let mut locked: [Option<Locked<'_, O, C>>; N] = std::array::from_fn(|k| {
            let repeat = k > 0 && address(order[k - 1]) == address(order[k]);
            (!repeat).then(|| entries[order[k]].0.lock())
        });
        let slot_of = |cell: &Self| {
            (0..N)
                .find(|&k| std::ptr::eq(entries[order[k]].0, cell) && locked_present(k, &order, &address))
                .expect("every entry's cell is locked")
        };
        for (n, (cell, rule)) in entries.iter().enumerate() {
            let guard = locked[slot_of(cell)].as_mut().expect("the first slot of a cell holds its lock");
            guard.check_claim(*rule, judge).map_err(|why| (n, why))?;
        }
        let mut claimed = [false; N];
        let mut displaced: [Option<C>; N] = std::array::from_fn(|_| None);
        for (n, (cell, _)) in entries.iter().enumerate() {
            let k = slot_of(cell);
            if !std::mem::replace(&mut claimed[k], true) {
                let guard = locked[k].as_mut().expect("the first slot of a cell holds its lock");
                displaced[n] = guard.put_claim(Some(make()));
            }
        }
        Ok(displaced)
    }

    /// Public release in one step: owned → `Owned`; a blocking claim → `Claimed`; `Ok(false)`
    /// if released already; else marks it released and returns `Ok(true)` (the caller then
    /// frees the storage, outside the lock).
    pub fn mark_released<J: ClaimJudge<O, C>>(&self, judge: &J) -> Result<bool, RefusalOf<J, O, C>> {
        let mut state = self.lock();
        state.check_owner(judge)?;
        state.check_claim_passes(judge)?;
        state.check_not_written()?;
        if state.released() {
            return Ok(false);
        }
        state.set_released(true);
        Ok(true)
    }

    /// A release whose hook may fail: the checks of [`mark_released`](Self::mark_released),
    /// then, instead of marking it released, claims an unclaimed carrier with `marker()` so
    /// nothing else starts while the hook runs. The caller runs its hook outside the lock and
    /// then calls [`finish_release`](Self::finish_release) or
    /// [`abort_release`](Self::abort_release).
    pub fn begin_release<J: ClaimJudge<O, C>>(
        &self,
        marker: impl FnOnce() -> C,
        judge: &J,
    ) -> Result<ReleaseStart, RefusalOf<J, O, C>> {
        let mut state = self.lock();
        state.check_owner(judge)?;
        state.check_claim_passes(judge)?;
        if state.released() {
            return Ok(ReleaseStart::AlreadyReleased);
        }
        state.check_not_written()?;
        let marked = state.slots.claim.is_none();
        if marked {
            let none = state.put_claim(Some(marker()));
            debug_assert!(none.is_none());
        }
        Ok(ReleaseStart::Began { marked })
    }

    /// The hook succeeded: released, and the claim back to `restore` (what it was before
    /// [`begin_release`](Self::begin_release)), in one step. Hands back the displaced claim.
    #[must_use = "drop the displaced claim after the call"]
    pub fn finish_release(&self, restore: Option<C>) -> Option<C> {
        let mut state = self.lock();
        state.set_released(true);
        state.put_claim(restore)
    }

    /// The hook failed: the claim back to `restore`, still live. Hands back the displaced claim.
    #[must_use = "drop the displaced claim after the call"]
    pub fn abort_release(&self, restore: Option<C>) -> Option<C> {
        self.lock().put_claim(restore)
    }

    /// The end of a committed move for its source: released and unclaimed in one step, so
    /// nobody can take the carrier in between. Returns whether it was live until now (the
    /// caller then frees the storage) and the claim it held.
    #[must_use = "drop the displaced claim after the call"]
    pub fn release_claimed(&self) -> (bool, Option<C>) {
        let mut state = self.lock();
        let newly = !state.released();
        state.set_released(true);
        (newly, state.put_claim(None))
    }

    /// Makes `owner` the owner of a live, unowned carrier that no blocking claim holds; on
    /// refusal hands `owner` back.
    #[allow(clippy::type_complexity)]
    pub fn adopt<J: ClaimJudge<O, C>>(&self, owner: O, judge: &J) -> Result<(), (O, RefusalOf<J, O, C>)> {
        let mut state = self.lock();
        if let Err(why) = state.check_claim(ClaimRule::FREE, judge) {
            return Err((owner, why));
        }
        let none = state.put_owner(Some(owner));
        debug_assert!(none.is_none());
        Ok(())
    }

    /// A framework mutation outside the element path: owned → `Owned`, a blocking claim →
    /// `Claimed`, else the version rises by one.
    pub fn mutate<J: ClaimJudge<O, C>>(&self, judge: &J) -> Result<(), RefusalOf<J, O, C>> {
        let state = self.lock();
        state.check_owner(judge)?;
        state.check_claim_passes(judge)?;
        self.bump_version();
        Ok(())
    }

    /// Counts a write that went through: the version rises by one unless a claim is held (a
    /// pending move's own transfer writing into its carriers relocates, it does not mutate).
    /// Returns whether it counted.
    pub fn count_write(&self) -> bool {
        let state = self.lock();
        let counts = state.slots.claim.is_none();
        if counts {
            self.bump_version();
        }
        counts
    }

    /// Opens a write whose store runs foreign code (a Python `set_value` hook), which must not
    /// run under the cell's lock: checks, in order, released, the owner (`owner_admitted`:
    /// the write is the owner's, or the owner does not stop it), a held claim (the judge: a
    /// move's own write through what it handed its transfer passes), and then counts the
    /// write as open. Until [`close_write`](Self::close_write), every claim and every release
    /// is refused with [`Refusal::BeingWritten`], so no claim or release falls between the
    /// caller's checks and its store, and no lock is held while the store runs. Writes do not
    /// exclude each other. A refused claim or release of another thread may
    /// [`wait_out_writes`](Self::wait_out_writes) and try again; one of the writing thread
    /// itself (its store's own code) stays refused.
    pub fn open_write<J: ClaimJudge<O, C>>(
        &self,
        owner_admitted: impl FnOnce(&O) -> bool,
        judge: &J,
    ) -> Result<(), RefusalOf<J, O, C>> {
        let mut state = self.lock();
        if state.released() {
            return Err(Refusal::Released);
        }
        if let Some(owner) = &state.slots.owner {
            if !owner_admitted(owner) {
                return Err(Refusal::Owned(judge.owner(owner)));
            }
        }
        state.check_claim_passes(judge)?;
        state.slots.writers.push(std::thread::current().id());
        Ok(())
    }

    /// Closes a write [`open_write`](Self::open_write) opened; with `count`, its store went
    /// through and is counted as [`count_write`](Self::count_write) counts (in the same step).
    /// Returns whether the version rose.
    pub fn close_write(&self, count: bool) -> bool {
        let mut state = self.lock();
        let me = std::thread::current().id();
        let mine = state.slots.writers.iter().rposition(|t| *t == me);
        debug_assert!(mine.is_some(), "close_write on a thread with no open write");
        if let Some(k) = mine {
            state.slots.writers.swap_remove(k);
        }
        if state.slots.writers.is_empty() {
            self.unwritten.notify_all();
        }
        let counts = count && state.slots.claim.is_none();
        if counts {
            self.bump_version();
        }
        counts
    }

    /// Whether a write opened by [`open_write`](Self::open_write) is in progress.
    pub fn is_being_written(&self) -> bool {
        !self.lock().slots.writers.is_empty()
    }

    /// After a [`Refusal::BeingWritten`]: blocks until no write is open and returns true,
    /// so the caller tries its transition again; returns false at once when this thread has
    /// a write open here (its own store asking: waiting would never end). A caller holding
    /// a lock that a writer needs (Python's GIL) must release it around this call.
    pub fn wait_out_writes(&self) -> bool {
        let me = std::thread::current().id();
        let mut state = self.lock();
        if state.slots.writers.contains(&me) {
            return false;
        }
        while !state.slots.writers.is_empty() {
            self.unwritten.wait(&mut state.slots);
        }
        true
    }

    /// Opens a write of a live carrier: `Released` now, else the state stays locked until
    /// the gate is dropped or committed, so no claim or release can slip in between the
    /// caller's checks and its store (for stores that run no foreign code).
    pub fn begin_write(&self) -> Result<CellWriteGate<'_, O, C>, Refusal<(), ()>> {
        let state = self.lock();
        if state.released() {
            return Err(Refusal::Released);
        }
        // Another thread's biased write must not overlap this one's count (nor, through a
        // store, its slot).
        self.bias.revoke_others();
        Ok(CellWriteGate { state })
    }
}

/// An open write (see [`StateCell::begin_write`]): the state stays locked while it lives.
pub struct CellWriteGate<'a, O, C> {
    state: Locked<'a, O, C>,
}

impl<O, C> std::fmt::Debug for CellWriteGate<'_, O, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellWriteGate").finish_non_exhaustive()
    }
}

impl<O, C> CellWriteGate<'_, O, C> {
    /// The owner, if any, as the write sees it.
    pub fn owner(&self) -> Option<&O> {
        self.state.slots.owner.as_ref()
    }

    /// The claim, if any, as the write sees it.
    pub fn claim(&self) -> Option<&C> {
        self.state.slots.claim.as_ref()
    }

    /// Count the write: the version rises by exactly one.
    pub fn commit(self) {
        self.state.cell.bump_version();
    }
}

#[cfg(test)]
#[path = "state_cell_tests.rs"]
mod tests;
