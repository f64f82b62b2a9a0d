//! One job's independent pieces, run on the calling thread and on idle copy-lane threads at
//! once ([`run_pieces`]).
//!
//! Why: a bulk copy into host memory on one thread is bound by that thread, which faults the
//! destination's pages in and copies, one after the other. A second thread on another core
//! doing half of the pieces finishes the whole sooner (on a 2-core machine, 256 MiB from the
//! page cache into a fresh buffer: about 74 ms on one thread, 40 ms on two; a 256 MiB memcpy:
//! 24 ms, 15 ms), which a single-threaded `np.fromfile` or `np.copyto` cannot do.
//!
//! How: the pieces are claimed one at a time from a shared counter, by the calling thread and
//! by helper jobs queued on the copy lane, so a helper that starts late (its core busy) only
//! takes what is left and the caller never waits for a piece nobody has started. The caller
//! waits only for pieces another thread is already running, so calling this from a copy-lane
//! job cannot deadlock even when every lane thread does the same. Helpers hold the shared
//! state weakly: once the caller returns, a helper still queued finds nothing and keeps
//! nothing (the storages the pieces hold are not kept alive by it).
//!
//! [`offer_pieces`] queues no helper: it is for a job that should stay on its own thread
//! while the caller computes on the other cores (a prefetch). It offers its pieces instead
//! to threads that block waiting for a result ([`help_offered`], which
//! [`Completion::wait`](super::Completion::wait) and the binding's handles call): a caller that
//! waits for the prefetch it started has its core free, and copies half of what is left
//! instead of sleeping until the lane thread is done.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use strideweave_core::engine::run_pieces;
//!
//! let sum = Arc::new(AtomicUsize::new(0));
//! let s = sum.clone();
//! run_pieces::<(), _>(10, move |k| {
//!     s.fetch_add(k, Ordering::Relaxed);
//!     Ok(())
//! })
//! .unwrap();
//! assert_eq!(sum.load(Ordering::Relaxed), 45); // every piece ran once
//! ```

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::pool::{copy_workers, submit};

/// Most helper threads one call asks for: beyond four cores a copy is bound by memory
/// bandwidth, not by the threads driving it.
const MAX_HELPERS: usize = 3;

/// How many helpers a call queues: one per other core, within the copy lane and the cap.
fn helper_count() -> usize {
    static HELPERS: OnceLock<usize> = OnceLock::new();
    *HELPERS.get_or_init(|| {
        // Read once: `available_parallelism` reads the affinity mask and cgroup files.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores - 1).min(copy_workers() - 1).min(MAX_HELPERS)
    })
}

/// What the threads report: pieces finished, the failure of the lowest failed piece, and a
/// panic (re-raised on the caller).
struct Outcome<E> {
    finished: usize,
    error: Option<(usize, E)>,
    panic: Option<Box<dyn Any + Send>>,
}

struct Shared<E, F> {
    piece: F,
    count: usize,
    /// The next piece to claim.
    next: AtomicUsize,
    /// Set at the first failure: the pieces not yet started are skipped.
    failed: AtomicBool,
    outcome: Mutex<Outcome<E>>,
    all_finished: Condvar,
}

impl<E, F: Fn(usize) -> Result<(), E>> Shared<E, F> {
    /// Claims and runs pieces until none is left.
    fn work(&self) {
        self.work_until(&|| false);
    }

    /// Claims and runs pieces until none is left or `stop()` answers true (asked before each).
    fn work_until(&self, stop: &dyn Fn() -> bool) {
        loop {
            if stop() {
                return;
            }
            let k = self.next.fetch_add(1, Ordering::Relaxed);
            if k >= self.count {
                return;
            }
            let ran = if self.failed.load(Ordering::Relaxed) {
                Ok(Ok(()))
            } else {
                catch_unwind(AssertUnwindSafe(|| (self.piece)(k)))
            };
            let mut outcome = self.outcome.lock();
            match ran {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    self.failed.store(true, Ordering::Relaxed);
                    if outcome.error.as_ref().is_none_or(|(first, _)| k < *first) {
                        outcome.error = Some((k, e));
                    }
                }
                Err(panic) => {
                    self.failed.store(true, Ordering::Relaxed);
                    outcome.panic.get_or_insert(panic);
                }
            }
            outcome.finished += 1;
            // Every piece, not only the last: a withdrawn offer waits for the pieces claimed
            // before it (no waiter: one atomic load).
            self.all_finished.notify_all();
        }
    }
}

/// Shared pieces a waiting thread may run: type-erased, so one list holds them all.
trait Offered: Send + Sync {
    fn has_unclaimed(&self) -> bool;
    fn work_until(&self, stop: &dyn Fn() -> bool);
}

impl<E: Send, F: Fn(usize) -> Result<(), E> + Send + Sync> Offered for Shared<E, F> {
    fn has_unclaimed(&self) -> bool {
        self.next.load(Ordering::Relaxed) < self.count
    }

    fn work_until(&self, stop: &dyn Fn() -> bool) {
        Shared::work_until(self, stop);
    }
}

/// The pieces of every [`offer_pieces`] offer standing, oldest first, held weakly: an offer's
/// entry leaves when it has run or is dropped.
///
/// Only ever tried, never waited for, as the host storage's recycled mappings are: offering
/// and helping are only ever a speed-up, so a thread that finds the list locked goes without,
/// and a `fork()`ed child whose parent had it locked at the fork still runs its copies.
static OFFERED: Mutex<Vec<Weak<dyn Offered>>> = Mutex::new(Vec::new());

/// Runs unclaimed pieces of the offers standing ([`offer_pieces`]), newest first, on this
/// thread, until none is left or `stop()` answers true (asked before each piece). For a
/// thread about to block until some result is ready (`stop` answers whether it is): the
/// pieces it runs are likely that result's, and its core would otherwise sit idle. Returns at
/// once when nothing is offered.
pub fn help_offered(stop: impl Fn() -> bool) {
    loop {
        if stop() {
            return;
        }
        let Some(offered) = OFFERED.try_lock() else {
            return;
        };
        let next = offered.iter().rev().filter_map(Weak::upgrade).find(|o| o.has_unclaimed());
        drop(offered);
        match next {
            Some(offered) => offered.work_until(&stop),
            None => return,
        }
    }
}

/// Offers the pieces of a job to waiting threads at once ([`help_offered`]), before the thread
/// that will run it ([`OfferedPieces::run`]) starts: a job submitted to a worker and waited
/// for at once gets the waiter's help even while it is still queued. Dropped without running,
/// the offer is withdrawn: no piece starts after that, and the drop returns once the pieces
/// waiters were running are done (so nothing writes on behalf of an abandoned job afterwards).
pub fn offer_pieces<E, F>(count: usize, piece: F) -> OfferedPieces<E, F>
where
    E: Send + 'static,
    F: Fn(usize) -> Result<(), E> + Send + Sync + 'static,
{
    let shared = new_shared(count, piece);
    let weak: Weak<dyn Offered> = {
        let erased: Arc<dyn Offered> = shared.clone();
        Arc::downgrade(&erased)
    };
    if let Some(mut offered) = OFFERED.try_lock() {
        // Entries of offers gone while the list was busy leave here.
        offered.retain(|w| w.strong_count() > 0);
        offered.push(weak.clone());
    }
    OfferedPieces { shared, weak, ran: false }
}

/// A job's pieces, offered to waiting threads ([`offer_pieces`]) until it has run.
pub struct OfferedPieces<E, F> {
    shared: Arc<Shared<E, F>>,
    weak: Weak<dyn Offered>,
    ran: bool,
}

impl<E, F: Fn(usize) -> Result<(), E>> OfferedPieces<E, F> {
    /// Runs every piece no waiting thread has claimed on this thread, waits for those they
    /// are running, and returns as [`run_pieces`] does.
    pub fn run(mut self) -> Result<(), E> {
        self.ran = true;
        self.shared.work();
        finish(&self.shared, self.shared.count)
    }
}

impl<E, F> Drop for OfferedPieces<E, F> {
    fn drop(&mut self) {
        // Busy: the entry stays, dead once `shared` is dropped, until the next offer's sweep.
        if let Some(mut offered) = OFFERED.try_lock() {
            offered.retain(|w| w.strong_count() > 0 && !w.ptr_eq(&self.weak));
        }
        if !self.ran {
            // Withdrawn unrun: claim what is left, so no waiter starts another piece, and wait
            // for the pieces waiters claimed before (each claim counts as finished once run).
            let shared = &self.shared;
            let claimed = shared.next.swap(shared.count, Ordering::Relaxed).min(shared.count);
            drop(wait_finished(shared, claimed));
        }
    }
}

impl<E, F> std::fmt::Debug for OfferedPieces<E, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfferedPieces").field("count", &self.shared.count).finish_non_exhaustive()
    }
}

fn new_shared<E, F>(count: usize, piece: F) -> Arc<Shared<E, F>> {
    Arc::new(Shared {
        piece,
        count,
        next: AtomicUsize::new(0),
        failed: AtomicBool::new(false),
        outcome: Mutex::new(Outcome { finished: 0, error: None, panic: None }),
        all_finished: Condvar::new(),
    })
}

/// Waits until `n` pieces have finished; returns the outcome, locked.
fn wait_finished<E, F>(shared: &Shared<E, F>, n: usize) -> MutexGuard<'_, Outcome<E>> {
    let mut outcome = shared.outcome.lock();
    while outcome.finished < n {
        shared.all_finished.wait(&mut outcome);
    }
    outcome
}

/// Waits for the pieces other threads are running, then the call's outcome.
fn finish<E, F>(shared: &Shared<E, F>, count: usize) -> Result<(), E> {
    let mut outcome = wait_finished(shared, count);
    if let Some(panic) = outcome.panic.take() {
        drop(outcome);
        resume_unwind(panic);
    }
    outcome.error.take().map_or(Ok(()), |(_, e)| Err(e))
}

/// Runs `piece(k)` once for every `k` in `0..count`, on this thread and on idle copy-lane
/// threads (one per other core, at most three), and returns once every piece has run: `Ok`,
/// or the error of the lowest-numbered failed piece. After a failure the pieces not yet
/// started are skipped. A panicking piece panics here, once every running piece is done.
///
/// Pieces may run in any order and at the same time, so they must not depend on each other.
pub fn run_pieces<E, F>(count: usize, piece: F) -> Result<(), E>
where
    E: Send + 'static,
    F: Fn(usize) -> Result<(), E> + Send + Sync + 'static,
{
    let shared = new_shared(count, piece);
    for _ in 0..helper_count().min(count.saturating_sub(1)) {
        let weak: Weak<Shared<E, F>> = Arc::downgrade(&shared);
        submit(move || {
            if let Some(shared) = weak.upgrade() {
                shared.work();
            }
        });
    }
    shared.work();
    finish(&shared, count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    #[test]
    fn runs_every_piece_exactly_once() {
        for count in [0, 1, 2, 3, 17, 200] {
            let hits: Arc<Vec<AtomicUsize>> = Arc::new((0..count).map(|_| AtomicUsize::new(0)).collect());
            let seen = hits.clone();
            let done: Result<(), ()> = run_pieces(count, move |k| {
                seen[k].fetch_add(1, Ordering::SeqCst);
                Ok(())
            });
            assert_eq!(done, Ok(()));
            assert!(hits.iter().all(|h| h.load(Ordering::SeqCst) == 1), "count {count}");
        }
    }

    #[test]
    fn uses_another_thread_when_a_core_is_free() {
        if helper_count() == 0 {
            return; // one core: nothing to spread over
        }
        // Piece 0 waits until some other thread runs a piece: it returns only if one does.
        let (tx, rx) = mpsc::channel::<thread::ThreadId>();
        let rx = Mutex::new(rx);
        let done: Result<(), ()> = run_pieces(2, move |k| {
            if k == 0 {
                let other = rx.lock().recv_timeout(Duration::from_secs(30)).expect("a helper ran piece 1");
                assert_ne!(other, thread::current().id());
            } else {
                tx.send(thread::current().id()).unwrap();
            }
            Ok(())
        });
        assert_eq!(done, Ok(()));
    }

    #[test]
    fn returns_the_lowest_failed_piece_and_skips_the_rest() {
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = ran.clone();
        let done = run_pieces(1000, move |k| {
            counter.fetch_add(1, Ordering::SeqCst);
            if k == 3 || k == 5 {
                Err(k)
            } else {
                Ok(())
            }
        });
        // Piece 3 is claimed before 5 by whichever thread; 5 may have failed first, but the
        // lowest failure is reported; most of the 1000 pieces are skipped.
        assert!(done == Err(3) || done == Err(5));
        assert!(ran.load(Ordering::SeqCst) < 1000);
        let only = run_pieces(4, |k| if k == 2 { Err(k) } else { Ok(()) });
        assert_eq!(only, Err(2));
    }

    #[test]
    fn a_panicking_piece_panics_on_the_caller_after_the_others_finish() {
        let finished = Arc::new(AtomicUsize::new(0));
        let counter = finished.clone();
        let caught = catch_unwind(AssertUnwindSafe(|| {
            let _: Result<(), ()> = run_pieces(2, move |k| {
                if k == 1 {
                    panic!("piece failure");
                }
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(())
            });
        }));
        let message = caught.expect_err("the panic reaches the caller");
        assert_eq!(message.downcast_ref::<&str>(), Some(&"piece failure"));
        assert_eq!(finished.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn every_copy_thread_splitting_at_once_does_not_deadlock() {
        // More splitting jobs than copy threads, each waiting on its pieces: helpers queue
        // behind them, and each job then runs its own pieces.
        let jobs = copy_workers() * 2;
        let (tx, rx) = mpsc::channel();
        for j in 0..jobs {
            let tx = tx.clone();
            submit(move || {
                let sum = Arc::new(AtomicUsize::new(0));
                let add = sum.clone();
                let done: Result<(), ()> = run_pieces(8, move |k| {
                    thread::sleep(Duration::from_millis(2));
                    add.fetch_add(k, Ordering::SeqCst);
                    Ok(())
                });
                tx.send((j, done, sum.load(Ordering::SeqCst))).unwrap();
            });
        }
        for _ in 0..jobs {
            let (_, done, sum) = rx.recv_timeout(Duration::from_secs(60)).expect("no deadlock");
            assert_eq!((done, sum), (Ok(()), 28));
        }
    }

    // Other tests' threads wait on completions, and so may help the offers made here: the
    // checks below hold whoever else helps.

    #[test]
    fn a_waiting_thread_runs_the_pieces_offered_before_their_owner_starts() {
        let ran_by: Arc<Vec<Mutex<Option<thread::ThreadId>>>> = Arc::new((0..6).map(|_| Mutex::new(None)).collect());
        let record = ran_by.clone();
        let offered = offer_pieces::<(), _>(6, move |k| {
            *record[k].lock() = Some(thread::current().id());
            Ok(())
        });
        // The owner (this thread) has not started: a helper takes every piece.
        thread::spawn(|| help_offered(|| false)).join().unwrap();
        let owner = thread::current().id();
        assert!(ran_by.iter().all(|r| r.lock().is_some_and(|id| id != owner)));
        // The owner finds nothing left to run.
        assert_eq!(offered.run(), Ok(()));
        assert!(ran_by.iter().all(|r| r.lock().is_some_and(|id| id != owner)));
    }

    #[test]
    fn a_helper_stops_when_its_result_is_ready_and_the_owner_runs_the_rest() {
        let ran = Arc::new(AtomicUsize::new(0));
        let here = Arc::new(AtomicUsize::new(0));
        let helper = thread::current().id();
        let (counter, mine) = (ran.clone(), here.clone());
        let offered = offer_pieces::<(), _>(10, move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            if thread::current().id() == helper {
                mine.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        });
        // "Ready" once three pieces have run: this thread claims no piece after that.
        help_offered(|| ran.load(Ordering::SeqCst) >= 3);
        assert!(here.load(Ordering::SeqCst) <= 3);
        assert!(ran.load(Ordering::SeqCst) >= 3);
        assert_eq!(offered.run(), Ok(()));
        assert_eq!(ran.load(Ordering::SeqCst), 10, "every piece ran exactly once");
    }

    #[test]
    fn a_withdrawn_offer_is_not_helped_and_a_failure_reaches_the_owner() {
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = ran.clone();
        drop(offer_pieces::<(), _>(4, move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }));
        let before = ran.load(Ordering::SeqCst);
        help_offered(|| false);
        assert_eq!(ran.load(Ordering::SeqCst), before, "a dropped offer runs nothing");
        // A piece a helper runs fails: its owner returns the failure.
        let offered = offer_pieces(4, |k| if k == 1 { Err(k) } else { Ok(()) });
        help_offered(|| false);
        assert_eq!(offered.run(), Err(1));
    }

    #[test]
    fn a_withdrawn_offer_waits_for_the_piece_a_helper_is_running_and_starts_no_other() {
        let (started_tx, started_rx) = mpsc::channel::<()>();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (started_tx, go_rx) = (Mutex::new(started_tx), Mutex::new(go_rx));
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = ran.clone();
        let offered = offer_pieces::<(), _>(3, move |_| {
            let _ = started_tx.lock().send(());
            go_rx.lock().recv_timeout(Duration::from_secs(30)).expect("released by the test");
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        let helper = thread::spawn(|| help_offered(|| false));
        started_rx.recv_timeout(Duration::from_secs(30)).expect("a helper started a piece");
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = dropped.clone();
        let dropper = thread::spawn(move || {
            drop(offered);
            flag.store(true, Ordering::SeqCst);
        });
        thread::sleep(Duration::from_millis(50));
        assert!(!dropped.load(Ordering::SeqCst), "the drop waits for the running piece");
        // One release per piece, in case another test's waiting thread took one too. Once the
        // running piece ends, the drop returns and frees the pieces' code with its receiver,
        // so a later release may find nobody to receive it.
        for _ in 0..3 {
            let _ = go_tx.send(());
        }
        dropper.join().unwrap();
        helper.join().unwrap();
        assert!(dropped.load(Ordering::SeqCst));
        let ran = ran.load(Ordering::SeqCst);
        assert!(ran >= 1, "the running piece finished before the drop returned");
        assert!(ran < 3, "no piece started after the drop (ran {ran})");
    }

    #[test]
    fn waiting_for_a_completion_helps_the_offered_copy_that_fills_it() {
        // The owner is held back until the waiter has run a piece, so the wait returns only
        // because the waiting thread helped.
        let (tx, rx) = mpsc::channel::<()>();
        let tx = Mutex::new(tx);
        let done = Arc::new(super::super::Completion::<usize>::new());
        let offered = offer_pieces::<(), _>(3, move |_| {
            let _ = tx.lock().send(());
            Ok(())
        });
        let cell = done.clone();
        let owner = thread::spawn(move || {
            rx.recv_timeout(Duration::from_secs(30)).expect("the waiter ran a piece first");
            offered.run().unwrap();
            cell.commit(7);
        });
        assert_eq!(*done.wait(), 7);
        owner.join().unwrap();
    }

    #[test]
    fn a_late_helper_keeps_nothing_alive() {
        // Hold every copy thread so the helpers stay queued until after the call returns.
        let gate = Arc::new(std::sync::Barrier::new(copy_workers() + 1));
        for _ in 0..copy_workers() {
            let gate = gate.clone();
            submit(move || {
                gate.wait();
            });
        }
        let held = Arc::new(());
        let probe = Arc::downgrade(&held);
        let done: Result<(), ()> = run_pieces(4, move |_| {
            let _ = &held;
            Ok(())
        });
        assert_eq!(done, Ok(()));
        assert!(probe.upgrade().is_none(), "the pieces' captures were dropped with the call");
        gate.wait();
    }
}
