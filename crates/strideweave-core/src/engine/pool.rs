//! The process-wide worker pool that runs transfer jobs off the caller's thread.
//!
//! The pool keeps `CORE_WORKERS` threads alive once started and grows past them when every
//! worker is busy: some jobs block for a long time (a worker waiting on a provider's
//! `ProviderCompletion` that a test opens later), and a fixed pool would let a handful of such
//! waits starve the bulk I/O jobs queued behind them, deadlocking a move that is needed to open
//! the gate. Threads beyond the core count exit after `EXTRA_IDLE_TIMEOUT` without work.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::thread;
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;

/// A unit of work for the pool.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// Threads started on first use and kept for the life of the process.
pub const CORE_WORKERS: usize = 4;
/// Upper bound on threads, so a burst of blocking jobs cannot exhaust the process.
pub const MAX_WORKERS: usize = 256;
/// How long a thread beyond the core count waits for work before it exits.
pub const EXTRA_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Counters that decide when to grow; one lock keeps them mutually consistent.
#[derive(Default)]
struct Counts {
    /// Live worker threads.
    total: usize,
    /// Workers blocked in `recv`, i.e. ready to take a job at once.
    idle: usize,
    /// Jobs sent but not yet taken by a worker.
    queued: usize,
    /// Jobs that finished (including ones that panicked); diagnostics and tests.
    completed: u64,
}

struct Pool {
    tx: Sender<Job>,
    rx: Receiver<Job>,
    counts: Mutex<Counts>,
    /// The process that started this pool's threads.
    pid: u32,
}

/// The current process's pool. Threads do not survive `fork()`, so a child (for instance a
/// `multiprocessing` worker) that finds its parent's pool starts a fresh one with a fresh
/// queue: jobs the parent had queued must not run a second time in the child. Each pool is
/// leaked on purpose; workers borrow it as `&'static` for the life of the process.
static CURRENT: AtomicPtr<Pool> = AtomicPtr::new(std::ptr::null_mut());
static START_LOCK: Mutex<()> = Mutex::new(());

fn current_if_ours(pid: u32) -> Option<&'static Pool> {
    let p = CURRENT.load(Ordering::Acquire);
    // SAFETY: non-null values of CURRENT come from Box::leak below and are never freed.
    let pool = unsafe { p.as_ref() }?;
    (pool.pid == pid).then_some(pool)
}

/// The pool of this process, starting its core workers on first use.
fn ensure_started() -> &'static Pool {
    let pid = std::process::id();
    if let Some(p) = current_if_ours(pid) {
        return p;
    }
    let _guard = START_LOCK.lock();
    if let Some(p) = current_if_ours(pid) {
        return p;
    }
    let (tx, rx) = unbounded();
    let pool: &'static Pool = Box::leak(Box::new(Pool {
        tx,
        rx,
        counts: Mutex::new(Counts {
            total: CORE_WORKERS,
            ..Counts::default()
        }),
        pid,
    }));
    for i in 0..CORE_WORKERS {
        spawn_worker(pool, i, true);
    }
    CURRENT.store(pool as *const Pool as *mut Pool, Ordering::Release);
    pool
}

fn spawn_worker(p: &'static Pool, index: usize, core: bool) {
    let result = thread::Builder::new()
        .name(format!("strideweave-engine-{index}"))
        .spawn(move || worker_loop(p, core));
    if result.is_err() {
        // The thread never started: undo its slot so a later submit may try again.
        p.counts.lock().total -= 1;
    }
}

fn worker_loop(p: &'static Pool, core: bool) {
    loop {
        p.counts.lock().idle += 1;
        let next = if core {
            p.rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            p.rx.recv_timeout(EXTRA_IDLE_TIMEOUT)
        };
        let job = {
            let mut c = p.counts.lock();
            c.idle -= 1;
            match next {
                Ok(job) => {
                    c.queued -= 1;
                    job
                }
                Err(_) => {
                    // Re-check under the lock: a job may have been queued between the
                    // timeout and here, counting on this thread being idle.
                    if c.queued > c.idle {
                        drop(c);
                        continue;
                    }
                    c.total -= 1;
                    return;
                }
            }
        };
        // A panicking job must not take the worker (and every later job) down with it.
        let _ = catch_unwind(AssertUnwindSafe(job));
        p.counts.lock().completed += 1;
    }
}

/// Runs `job` on a pool thread. Never blocks the caller and never runs `job` inline.
///
/// Jobs start in submission order; they may finish in any order.
pub fn submit<F>(job: F)
where
    F: FnOnce() + Send + 'static,
{
    let p = ensure_started();
    let spawn_index = {
        let mut c = p.counts.lock();
        c.queued += 1;
        if c.queued > c.idle && c.total < MAX_WORKERS {
            c.total += 1;
            Some(c.total - 1)
        } else {
            None
        }
    };
    // The receiver lives in the same static as the sender, so the channel never disconnects.
    p.tx.send(Box::new(job))
        .expect("engine channel is never disconnected");
    if let Some(index) = spawn_index {
        spawn_worker(p, index, false);
    }
}

/// A snapshot of the pool's counters: `(live threads, jobs completed)`.
pub fn stats() -> (usize, u64) {
    let c = ensure_started().counts.lock();
    (c.total, c.completed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc, Barrier};

    #[test]
    fn runs_every_job_exactly_once_from_many_threads() {
        const THREADS: usize = 8;
        const PER_THREAD: usize = 500;
        let hits: Arc<Vec<AtomicUsize>> = Arc::new(
            (0..THREADS * PER_THREAD)
                .map(|_| AtomicUsize::new(0))
                .collect(),
        );
        let (done_tx, done_rx) = mpsc::channel();
        let start = Arc::new(Barrier::new(THREADS));
        let submitters: Vec<_> = (0..THREADS)
            .map(|t| {
                let hits = hits.clone();
                let done_tx = done_tx.clone();
                let start = start.clone();
                thread::spawn(move || {
                    start.wait();
                    for k in 0..PER_THREAD {
                        let hits = hits.clone();
                        let done_tx = done_tx.clone();
                        submit(move || {
                            hits[t * PER_THREAD + k].fetch_add(1, Ordering::SeqCst);
                            done_tx.send(()).unwrap();
                        });
                    }
                })
            })
            .collect();
        for s in submitters {
            s.join().unwrap();
        }
        for _ in 0..THREADS * PER_THREAD {
            done_rx.recv().unwrap();
        }
        assert!(hits.iter().all(|h| h.load(Ordering::SeqCst) == 1));
    }

    #[test]
    fn blocked_workers_do_not_starve_later_jobs() {
        // More blocking jobs than core workers: the job that opens the gate must still run.
        let gate = Arc::new(Barrier::new(CORE_WORKERS * 2 + 1));
        for _ in 0..CORE_WORKERS * 2 {
            let gate = gate.clone();
            submit(move || {
                gate.wait();
            });
        }
        let (tx, rx) = mpsc::channel();
        let opener = gate.clone();
        submit(move || {
            opener.wait();
            tx.send(()).unwrap();
        });
        rx.recv().unwrap();
    }

    #[test]
    fn a_panicking_job_leaves_the_pool_usable() {
        for _ in 0..CORE_WORKERS * 2 {
            submit(|| panic!("job failure is contained"));
        }
        let (tx, rx) = mpsc::channel();
        submit(move || tx.send(7).unwrap());
        assert_eq!(rx.recv().unwrap(), 7);
    }

    #[test]
    fn never_runs_inline() {
        let caller = thread::current().id();
        let (tx, rx) = mpsc::channel();
        submit(move || tx.send(thread::current().id()).unwrap());
        assert_ne!(rx.recv().unwrap(), caller);
    }
}
