//! The process-wide worker pool that runs transfer jobs off the caller's thread.
//!
//! Jobs run in two lanes, so that neither kind can starve the other and the thread count has
//! a bound (README, "Engine threads"):
//!
//! - the **copy lane** ([`submit`]) runs bulk copies and deferred frees: jobs that always
//!   finish on their own. It has a fixed number of threads, `STRIDEWEAVE_WORKERS` (default:
//!   the CPU count clamped to 4..=8, since copies wait on I/O and overlap even on a small
//!   machine), started on first use; a burst of copies queues instead of adding threads.
//! - the **wait lane** ([`submit_blocking`]) runs jobs that may block for as long as somebody
//!   else decides: waiting on a provider's `ProviderCompletion`, block-device I/O driven from
//!   Python. Its threads start when a job finds none idle, up to [`WAIT_WORKERS_MAX`], and exit
//!   after [`EXTRA_IDLE_TIMEOUT`] without work. A blocked wait never occupies a copy thread, so
//!   a copy that is needed to end the wait always finds one, whatever the settings.
//!
//! The only way to stall the engine is more than `WAIT_WORKERS_MAX` simultaneous waits each
//! waiting for a later one to start; that is documented, not silently absorbed by growing.
//!
//! ```
//! use std::sync::mpsc;
//! use strideweave_core::engine::pool::submit;
//!
//! let (tx, rx) = mpsc::channel();
//! submit(move || tx.send(2 + 2).unwrap());
//! assert_eq!(rx.recv().unwrap(), 4);
//! ```

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Once;
use std::thread;
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;

/// A unit of work for the pool.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// The environment variable that sets the copy lane's thread count (a positive integer).
pub const WORKERS_ENV: &str = "STRIDEWEAVE_WORKERS";
/// The largest accepted `STRIDEWEAVE_WORKERS`.
pub const MAX_COPY_WORKERS: usize = 256;
/// Upper bound on wait-lane threads (jobs beyond it queue).
pub const WAIT_WORKERS_MAX: usize = 64;
/// How long an elastic (wait-lane) thread waits for work before it exits.
pub const EXTRA_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// The copy lane's thread count: `STRIDEWEAVE_WORKERS` when it is an integer in
/// `1..=MAX_COPY_WORKERS`, else the default (the Python package refuses a bad value at import,
/// so the fallback only serves Rust users).
pub fn copy_workers() -> usize {
    parse_workers(std::env::var(WORKERS_ENV).ok().as_deref()).unwrap_or_else(default_copy_workers)
}

fn parse_workers(value: Option<&str>) -> Option<usize> {
    let n: usize = value?.trim().parse().ok()?;
    (1..=MAX_COPY_WORKERS).contains(&n).then_some(n)
}

fn default_copy_workers() -> usize {
    thread::available_parallelism().map_or(4, |n| n.get()).clamp(4, 8)
}

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

/// One lane: a queue and the threads serving it. `core` threads live for the process; up to
/// `max - core` more start on demand and exit when idle.
struct Lane {
    /// Whether the lane's threads run as `SCHED_BATCH` (the copy lane; see `run_as_batch`).
    batch: bool,
    tx: Sender<Job>,
    rx: Receiver<Job>,
    counts: Mutex<Counts>,
    core: usize,
    max: usize,
    /// Thread name prefix; kept under 16 bytes with the index so `comm` shows it whole.
    name: &'static str,
}

impl Lane {
    fn new(core: usize, max: usize, name: &'static str, batch: bool) -> Self {
        let (tx, rx) = unbounded();
        Lane { batch, tx, rx, counts: Mutex::new(Counts::default()), core, max, name }
    }
}

struct Pool {
    copy: Lane,
    wait: Lane,
    /// The process that started this pool's threads.
    pid: u32,
}

/// This process's id, as `std::process::id()`, without a system call each time: the pool,
/// and every completion handle a binding makes, compare it with the id they were made in to
/// tell a `fork()`ed child from its parent, and a `getpid` per move was a visible part of a
/// small one. The id is read once and forgotten in a child of `fork()` (a `pthread_atfork`
/// handler), which reads its own at its next call.
pub fn process_id() -> u32 {
    #[cfg(unix)]
    {
        let known = PROCESS_ID.load(Ordering::Acquire);
        if known != 0 {
            return known;
        }
        FORGET_IN_CHILD.call_once(|| {
            // SAFETY: registers, once, a handler that only stores to an atomic, which is
            // async-signal-safe as a child of `fork()` requires. Its code stays mapped for the
            // life of the process: a Rust program links this crate in, and CPython never
            // unloads an extension module that links it.
            unsafe { libc::pthread_atfork(None, None, Some(forget_process_id)) };
        });
        let id = std::process::id();
        PROCESS_ID.store(id, Ordering::Release);
        id
    }
    #[cfg(not(unix))]
    std::process::id()
}

#[cfg(unix)]
static PROCESS_ID: AtomicU32 = AtomicU32::new(0);
#[cfg(unix)]
static FORGET_IN_CHILD: Once = Once::new();

#[cfg(unix)]
extern "C" fn forget_process_id() {
    PROCESS_ID.store(0, Ordering::Release);
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

/// The pool of this process, starting the copy lane's threads on first use.
fn ensure_started() -> &'static Pool {
    let pid = process_id();
    if let Some(p) = current_if_ours(pid) {
        return p;
    }
    let _guard = START_LOCK.lock();
    if let Some(p) = current_if_ours(pid) {
        return p;
    }
    let copies = copy_workers();
    let pool: &'static Pool = Box::leak(Box::new(Pool {
        copy: Lane::new(copies, copies, "sw-copy", true),
        wait: Lane::new(0, WAIT_WORKERS_MAX, "sw-wait", false),
        pid,
    }));
    for lane in [&pool.copy, &pool.wait] {
        lane.counts.lock().total = lane.core;
        for i in 0..lane.core {
            spawn_worker(lane, i, true);
        }
    }
    CURRENT.store(pool as *const Pool as *mut Pool, Ordering::Release);
    pool
}

fn spawn_worker(lane: &'static Lane, index: usize, core: bool) {
    let result = thread::Builder::new().name(format!("{}-{index}", lane.name)).spawn(move || worker_loop(lane, core));
    if result.is_err() {
        // The thread never started: undo its slot so a later submit may try again.
        lane.counts.lock().total -= 1;
    }
}

/// Makes the calling thread a `SCHED_BATCH` thread (Linux; elsewhere nothing): the scheduler
/// then never lets a wake-up of this thread preempt the thread that woke it. A copy worker is
/// woken by `submit`, and on a machine with no idle core a normal thread woken that way
/// usually takes the submitter's core at once: the submitter (`move_async`, which must return
/// within microseconds) then waits a whole time slice, milliseconds, to return from its
/// submission. A batch thread still gets its full share of the CPU, and an idle core at once;
/// it only waits for the next tick instead of preempting. Best effort: a refusal (a sandbox
/// forbidding `sched_setscheduler`) leaves the thread as it was.
fn run_as_batch() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid, initialised `sched_param` that outlives the call; pid 0
        // names the calling thread, and the call changes nothing but its scheduling policy.
        let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    }
}

thread_local! {
    /// Whether this thread is a copy-lane worker (see [`on_copy_lane`]).
    static COPY_LANE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is one of the copy lane's workers. Code that may run user code
/// which blocks (a handle's done-callback) checks it and hands that code to the wait lane
/// instead: a copy thread that blocks until a copy queued behind it is done never wakes when
/// the lane has one thread (`STRIDEWEAVE_WORKERS=1`), and slows every copy otherwise.
pub fn on_copy_lane() -> bool {
    COPY_LANE.with(|c| c.get())
}

fn worker_loop(lane: &'static Lane, core: bool) {
    if lane.batch {
        run_as_batch();
        COPY_LANE.with(|c| c.set(true));
    }
    loop {
        lane.counts.lock().idle += 1;
        let next = if core {
            lane.rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            lane.rx.recv_timeout(EXTRA_IDLE_TIMEOUT)
        };
        let job = {
            let mut c = lane.counts.lock();
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
        lane.counts.lock().completed += 1;
    }
}

fn submit_to(lane: &'static Lane, job: Job) {
    let spawn_index = {
        let mut c = lane.counts.lock();
        c.queued += 1;
        if c.queued > c.idle && c.total < lane.max {
            c.total += 1;
            Some(c.total - 1)
        } else {
            None
        }
    };
    // The receiver lives in the same static as the sender, so the channel never disconnects.
    lane.tx.send(job).expect("engine channel is never disconnected");
    if let Some(index) = spawn_index {
        spawn_worker(lane, index, false);
    }
}

/// Runs `job` on a copy-lane thread: for work that finishes on its own (copies, frees).
/// Never blocks the caller and never runs `job` inline.
///
/// Jobs start in submission order; they may finish in any order.
pub fn submit<F>(job: F)
where
    F: FnOnce() + Send + 'static,
{
    submit_to(&ensure_started().copy, Box::new(job));
}

/// Runs `job` on a wait-lane thread: for work that may block until something else happens
/// (a provider's completion). Never blocks the caller and never runs `job` inline.
pub fn submit_blocking<F>(job: F)
where
    F: FnOnce() + Send + 'static,
{
    submit_to(&ensure_started().wait, Box::new(job));
}

/// Waits until no job is queued or running on either lane, or `timeout` passes; true when
/// the pool is quiet. Bindings call it as their host shuts down (Python's `atexit`), so no
/// worker is still inside a job (which may call back into the host) when the host tears
/// itself down. A pool never started, or one inherited from a parent, is quiet.
pub fn quiesce(timeout: std::time::Duration) -> bool {
    let Some(pool) = current_if_ours(process_id()) else {
        return true;
    };
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let quiet = [&pool.copy, &pool.wait].iter().all(|lane| {
            let c = lane.counts.lock();
            c.queued == 0 && c.idle == c.total
        });
        if quiet {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// A snapshot of the pool's counters: `(live threads, jobs completed)` over both lanes.
pub fn stats() -> (usize, u64) {
    let p = ensure_started();
    let (copy, wait) = (p.copy.counts.lock(), p.wait.counts.lock());
    (copy.total + wait.total, copy.completed + wait.completed)
}

/// Live threads per lane: `(copy, wait)`.
pub fn lane_threads() -> (usize, usize) {
    let p = ensure_started();
    let copy = p.copy.counts.lock().total;
    let wait = p.wait.counts.lock().total;
    (copy, wait)
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
        let hits: Arc<Vec<AtomicUsize>> = Arc::new((0..THREADS * PER_THREAD).map(|_| AtomicUsize::new(0)).collect());
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
                        let job = move || {
                            hits[t * PER_THREAD + k].fetch_add(1, Ordering::SeqCst);
                            done_tx.send(()).unwrap();
                        };
                        if k % 2 == 0 {
                            submit(job)
                        } else {
                            submit_blocking(job)
                        }
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
    fn blocked_waits_do_not_starve_copies() {
        // More blocking waits than copy threads: the copy that opens the gate must still run.
        let waits = copy_workers() * 2;
        let gate = Arc::new(Barrier::new(waits + 1));
        let (tx, rx) = mpsc::channel();
        for _ in 0..waits {
            let gate = gate.clone();
            let tx = tx.clone();
            submit_blocking(move || {
                gate.wait();
                tx.send(()).unwrap();
            });
        }
        let opener = gate.clone();
        submit(move || {
            opener.wait();
        });
        for _ in 0..waits {
            rx.recv().unwrap();
        }
    }

    #[test]
    fn a_burst_of_copies_never_grows_the_copy_lane() {
        let (tx, rx) = mpsc::channel();
        let gate = Arc::new(Barrier::new(2));
        // Hold one copy thread so the burst really queues.
        let held = gate.clone();
        submit(move || {
            held.wait();
        });
        for _ in 0..5000 {
            let tx = tx.clone();
            submit(move || tx.send(()).unwrap());
        }
        assert!(lane_threads().0 <= copy_workers());
        gate.wait();
        for _ in 0..5000 {
            rx.recv().unwrap();
        }
        let (copy, wait) = lane_threads();
        assert!(copy <= copy_workers() && wait <= WAIT_WORKERS_MAX);
    }

    #[test]
    fn worker_settings_parse_strictly() {
        assert_eq!(parse_workers(Some("3")), Some(3));
        assert_eq!(parse_workers(Some(" 1 ")), Some(1));
        for bad in ["0", "-1", "1.5", "many", "", "257"] {
            assert_eq!(parse_workers(Some(bad)), None, "{bad:?}");
        }
        assert_eq!(parse_workers(None), None);
        assert!((4..=8).contains(&default_copy_workers()));
    }

    #[test]
    fn a_panicking_job_leaves_the_pool_usable() {
        for _ in 0..8 {
            submit(|| panic!("job failure is contained"));
            submit_blocking(|| panic!("job failure is contained"));
        }
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        submit(move || tx.send(7).unwrap());
        submit_blocking(move || tx2.send(8).unwrap());
        let mut got = [rx.recv().unwrap(), rx.recv().unwrap()];
        got.sort();
        assert_eq!(got, [7, 8]);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn copy_workers_never_preempt_their_submitter() {
        // SAFETY: sched_getscheduler(0) only reads the calling thread's policy.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        submit(move || tx.send(("copy", policy())).unwrap());
        submit_blocking(move || tx2.send(("wait", policy())).unwrap());
        let mut got = [rx.recv().unwrap(), rx.recv().unwrap()];
        got.sort();
        assert_eq!(got, [("copy", libc::SCHED_BATCH), ("wait", libc::SCHED_OTHER)]);
    }

    #[test]
    fn never_runs_inline() {
        let caller = thread::current().id();
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        submit(move || tx.send(thread::current().id()).unwrap());
        submit_blocking(move || tx2.send(thread::current().id()).unwrap());
        assert_ne!(rx.recv().unwrap(), caller);
        assert_ne!(rx.recv().unwrap(), caller);
    }
}
