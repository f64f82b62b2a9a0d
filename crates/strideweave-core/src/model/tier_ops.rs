//! What the tier composites ([`Evictable`](super::Evictable),
//! [`TiledEvictable`](super::TiledEvictable)) do to the carriers they own, once: make a fresh
//! owned tier (or tile) like another, copy values between two of them by a move's route, and
//! release one as its owner; and the order a two-tier composite's residency changes run in
//! ([`Transitions`]; a tiled composite's requests follow its
//! [`TileBook`](super::tile_book::TileBook) instead, pinning tiles rather than the composite).

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::awaitable::ResidencyHandle;
use super::carrier::{BulkStorage, Carrier, CarrierExt, ClassKey, HookCall, HOOK};
use super::error::{ModelError, Result};
use super::host::{HostCarrier, HostStore};
use super::movement::route::{self, route_kind, Job};
use super::state::OwnerToken;
use crate::engine::{pool, Completion};
use crate::layout::{Layout, Shape};
use crate::storage::{ElemKind, FileStore};

/// A fresh carrier of `slots` like `like`, owned by `owner`. The composite fills every slot
/// before anybody sees it (or releases it unread), so a host carrier need not be zeroed.
pub(super) fn fresh_like(
    like: &dyn Carrier,
    kind: ElemKind,
    slots: usize,
    owner: OwnerToken,
) -> Result<Arc<dyn Carrier>> {
    let fresh: Arc<dyn Carrier> = if like.class_key() == ClassKey::of::<HostCarrier>() {
        HostCarrier::for_overwrite(kind, slots)?
    } else {
        like.allocate_like(slots)?
    };
    if let Err(e) = fresh.state(HOOK).adopt(owner) {
        let _ = fresh.release();
        return Err(e);
    }
    Ok(fresh)
}

/// Release an owned carrier as its owner, never unowned while live; `keep` leaves it owned
/// (a released tier the composite still lists). Nobody else can claim an owned carrier, so
/// the release cannot be refused.
pub(super) fn release_owned(tier: &dyn Carrier, owner: OwnerToken, keep: bool) {
    release_owned_by(tier, owner, keep, || tier.release_storage(&tier.hook()))
}

/// [`release_owned`], with `release` in place of the carrier's storage release (a tiled
/// tier's host tile hands its buffer back for the next promote's tiles).
pub(super) fn release_owned_by(tier: &dyn Carrier, owner: OwnerToken, keep: bool, release: impl FnOnce()) {
    if let Ok(true) = tier.state(HOOK).release_as_owner(owner) {
        release();
    }
    if !keep {
        tier.state(HOOK).disown(owner);
    }
}

/// Slots `[0, n)` of `from` into the same slots of `to`, by the pair's route, a move's: one
/// span between host memory and a file or a block device, one host copy, or slot by slot for
/// carriers with no bulk storage.
pub(super) fn transfer(from: &dyn Carrier, to: &dyn Carrier, n: usize) -> Result<()> {
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

/// Where a carrier's slot 0 lives, for copies of runs of slots in bulk: host memory, a file
/// from a byte offset (a whole file, or a region of a slab), or only its slot hooks.
#[derive(Clone)]
pub(super) enum Window {
    /// Host memory behind its lock.
    Host(Arc<HostStore>),
    /// A file, slot 0 at this byte offset.
    File(Arc<FileStore>, u64),
    /// No bulk access: slot by slot, through the carrier's hooks.
    Slots,
}

impl Window {
    /// A carrier's window as its bulk storage gives it.
    pub(super) fn of(carrier: &dyn Carrier) -> Window {
        match carrier.bulk_storage(&carrier.hook()) {
            Some(BulkStorage::Host(store)) => Window::Host(store),
            Some(BulkStorage::File(store)) => Window::File(store, 0),
            _ => Window::Slots,
        }
    }
}

/// Runs of slots `(from slot, to slot, count)` of `from` into `to`, through their windows:
/// one copy, positioned read or positioned write per run between host memory and files, slot
/// by slot otherwise. Every run is checked against both sizes before a slot moves.
pub(super) fn copy_runs(
    (from, from_at): (&dyn Carrier, &Window),
    (to, to_at): (&dyn Carrier, &Window),
    runs: &[(usize, usize, usize)],
) -> Result<()> {
    let fits = |size: usize, first: usize, count: usize| first.checked_add(count).is_some_and(|end| end <= size);
    if let Some(&(first, _, count)) = runs.iter().find(|&&(f, _, c)| !fits(from.size(), f, c)) {
        return Err(ModelError::WindowOutOfRange { offset: first, cosize: count, size: from.size() });
    }
    if let Some(&(_, first, count)) = runs.iter().find(|&&(_, t, c)| !fits(to.size(), t, c)) {
        return Err(ModelError::WindowOutOfRange { offset: first, cosize: count, size: to.size() });
    }
    let es = from.elem_kind().size();
    let bytes = |first: usize, count: usize| first * es..(first + count) * es;
    let at = |base: u64, first: usize| base + (first * es) as u64;
    let io = |what: &'static str| move |e| ModelError::io(what, e);
    match (from_at, to_at) {
        (Window::Host(src), Window::Host(dst)) if !Arc::ptr_eq(src, dst) => {
            let (src, mut dst) = (src.read(), dst.write());
            for &(f, t, c) in runs {
                dst.as_mut_slice()[bytes(t, c)].copy_from_slice(&src.as_slice()[bytes(f, c)]);
            }
        }
        (Window::Host(src), Window::File(dst, base)) => {
            let src = src.read();
            for &(f, t, c) in runs {
                dst.write_at(at(*base, t), &src.as_slice()[bytes(f, c)]).map_err(io("writing a run of slots"))?;
            }
        }
        (Window::File(src, base), Window::Host(dst)) => {
            let mut dst = dst.write();
            for &(f, t, c) in runs {
                src.read_at(at(*base, f), &mut dst.as_mut_slice()[bytes(t, c)])
                    .map_err(io("reading a run of slots"))?;
            }
        }
        _ => {
            for &(f, t, c) in runs {
                for k in 0..c {
                    to.write_slot(&to.hook(), t + k, from.read_slot(&from.hook(), f + k)?)?;
                }
            }
        }
    }
    Ok(())
}

/// The order of a tier composite's residency changes, one at a time: a change first waits
/// for an asynchronous one still running. Every change, blocking or asynchronous, holds a
/// claim of the composite from its call until it is final, so refusals of the composite's
/// state return at the call, and writes, moves and release of the composite by anybody else
/// are refused while it runs (tensor-and-carriers.md §3.2: "Hold the Evictable while they
/// run"), instead of waiting for it as a lock would make them; a blocking change runs on the
/// calling thread, an asynchronous one on the engine's copy lane.
#[derive(Default)]
pub(super) struct Transitions {
    /// The handle of the last asynchronous change.
    pending: Mutex<Option<ResidencyHandle>>,
}

thread_local! {
    /// The changes running on this thread now, by their composite's [`Transitions`] address.
    static RUNNING_HERE: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Marks a composite's change as running on this thread while it lives.
struct RunningHere(usize);

impl RunningHere {
    fn enter(key: usize) -> Self {
        RUNNING_HERE.with(|running| running.borrow_mut().push(key));
        RunningHere(key)
    }
}

impl Drop for RunningHere {
    fn drop(&mut self) {
        RUNNING_HERE.with(|running| {
            let mut running = running.borrow_mut();
            if let Some(at) = running.iter().rposition(|&key| key == self.0) {
                running.remove(at);
            }
        });
    }
}

impl Transitions {
    fn key(&self) -> usize {
        self as *const Transitions as usize
    }

    /// Take the composite's `claim`, after the change running, and run `change` on this
    /// thread under it.
    pub(super) fn blocking<G>(
        &self,
        claim: impl FnOnce() -> Result<G>,
        change: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let (_pending, _here) = self.after_the_running_change();
        let claim = claim()?;
        let outcome = change();
        drop(claim);
        outcome
    }

    /// Take the composite's `claim`, after the change running, and `stage` the change under
    /// it: `None` when it finished there (nothing to transfer), else what `work` then does on
    /// the copy lane, its outcome the handle's. The claim ends before the handle completes,
    /// so a waiter finds the composite free.
    pub(super) fn start<S: Send + 'static, G: Send + 'static>(
        &self,
        claim: impl FnOnce() -> Result<G>,
        stage: impl FnOnce() -> Result<Option<S>>,
        work: impl FnOnce(S) -> Result<()> + Send + 'static,
    ) -> Result<ResidencyHandle> {
        self.start_with(claim, stage, move |staged, finish| {
            pool::submit(move || {
                let outcome = {
                    let _here = finish.running_here();
                    work(staged)
                };
                finish.finish(outcome);
            })
        })
    }

    /// [`start`](Self::start), with the staged change handed to `launch` on the calling
    /// thread, which starts its work wherever it runs and calls [`Finish::finish`] with its
    /// outcome, on any thread, once (a `Finish` dropped unfinished fails the change).
    pub(super) fn start_with<S, G: Send + 'static>(
        &self,
        claim: impl FnOnce() -> Result<G>,
        stage: impl FnOnce() -> Result<Option<S>>,
        launch: impl FnOnce(S, Finish<G>),
    ) -> Result<ResidencyHandle> {
        let (mut pending, _here) = self.after_the_running_change();
        let claim = claim()?;
        let Some(staged) = stage()? else { return Ok(ResidencyHandle::done(Ok(()))) };
        let cell = Arc::new(Completion::new());
        let handle = ResidencyHandle::on(cell.clone());
        if let Some(pending) = pending.as_mut() {
            **pending = Some(handle.clone());
        }
        launch(staged, Finish { claim: Some(claim), cell, key: self.key() });
        Ok(handle)
    }

    /// Wait for the change running, holding the slot of the last asynchronous one, and mark
    /// this thread as running this composite's next change; or, when this is the code of a
    /// running change itself (a tier's hook asking for another change), neither: waiting
    /// would wait for itself, and the claim the running change holds refuses the caller, as
    /// it refuses any other while the composite is held. The thread decides nothing else: it
    /// admits nothing.
    fn after_the_running_change(&self) -> (Option<MutexGuard<'_, Option<ResidencyHandle>>>, Option<RunningHere>) {
        let key = self.key();
        if RUNNING_HERE.with(|running| running.borrow().contains(&key)) {
            return (None, None);
        }
        let mut pending = self.pending.lock();
        if let Some(running) = pending.take() {
            let _ = running.wait();
        }
        (Some(pending), Some(RunningHere::enter(key)))
    }
}

/// The end of an asynchronous change: [`finish`](Self::finish) gives the composite's claim
/// back, then completes the change's handle with the outcome.
pub(super) struct Finish<G> {
    claim: Option<G>,
    cell: Arc<Completion<Result<()>>>,
    key: usize,
}

impl<G> Finish<G> {
    /// Marks this thread as running the change while the result lives: a change its code
    /// asks for is refused instead of waiting for this one.
    pub(super) fn running_here(&self) -> impl Drop {
        RunningHere::enter(self.key)
    }

    /// The change is final with `outcome`: the claim ends, then the handle completes.
    pub(super) fn finish(mut self, outcome: Result<()>) {
        drop(self.claim.take());
        self.cell.commit(outcome);
    }
}

impl<G> Drop for Finish<G> {
    fn drop(&mut self) {
        if self.claim.is_some() {
            // Dropped unfinished (its work panicked or was lost): the change failed.
            drop(self.claim.take());
            self.cell.commit(Err(ModelError::TransferPanicked { message: "a tier's transfer was abandoned".into() }));
        }
    }
}

/// `copy`, its panic (a carrier hook's) turned into the change's failure, so the change still
/// commits or gives back what it made.
pub(super) fn contained<T>(copy: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(copy))
        .unwrap_or_else(|_| Err(ModelError::TransferPanicked { message: "a tier's hook panicked".into() }))
}
