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

use parking_lot::{Condvar, Mutex};

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
        loop {
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
            if outcome.finished == self.count {
                self.all_finished.notify_all();
            }
        }
    }
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
    let shared = Arc::new(Shared {
        piece,
        count,
        next: AtomicUsize::new(0),
        failed: AtomicBool::new(false),
        outcome: Mutex::new(Outcome { finished: 0, error: None, panic: None }),
        all_finished: Condvar::new(),
    });
    for _ in 0..helper_count().min(count.saturating_sub(1)) {
        let weak: Weak<Shared<E, F>> = Arc::downgrade(&shared);
        submit(move || {
            if let Some(shared) = weak.upgrade() {
                shared.work();
            }
        });
    }
    shared.work();
    let mut outcome = shared.outcome.lock();
    while outcome.finished < count {
        shared.all_finished.wait(&mut outcome);
    }
    if let Some(panic) = outcome.panic.take() {
        drop(outcome);
        resume_unwind(panic);
    }
    outcome.error.take().map_or(Ok(()), |(_, e)| Err(e))
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
