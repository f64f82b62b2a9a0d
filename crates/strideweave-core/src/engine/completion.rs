//! `Completion<T>`: a one-shot, thread-safe terminal-state cell.
//!
//! It is the engine half of the public `AwaitResult` contract: the terminal value is recorded
//! exactly once (later attempts are rejected, not overwritten), every observer sees that same
//! value, waiting blocks only until it is recorded, and each registered callback runs exactly
//! once — on the committing thread, or at once on the registering thread if already done.
//!
//! ```
//! use strideweave_core::engine::Completion;
//!
//! let c = Completion::new();
//! assert!(c.get().is_none());
//! assert!(c.try_commit("first").is_ok());
//! assert_eq!(c.try_commit("second"), Err("second")); // one terminal outcome
//! assert_eq!(c.wait(), &"first");
//! ```

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

type Callback<T> = Box<dyn FnOnce(&T) + Send + 'static>;

struct State<T> {
    committed: bool,
    callbacks: Vec<Callback<T>>,
}

/// A cell that moves from pending to one terminal value, exactly once.
pub struct Completion<T> {
    /// Written once, under `state`'s lock, before `done` is published.
    value: OnceLock<T>,
    /// Lock-free `is_done`; set with `Release` after `value`, so a reader that sees `true`
    /// also sees the value.
    done: AtomicBool,
    state: Mutex<State<T>>,
    cond: Condvar,
}

impl<T> Default for Completion<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for Completion<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion").field("done", &self.is_done()).finish()
    }
}

impl<T> Completion<T> {
    /// A pending cell.
    pub fn new() -> Self {
        Completion {
            value: OnceLock::new(),
            done: AtomicBool::new(false),
            state: Mutex::new(State { committed: false, callbacks: Vec::new() }),
            cond: Condvar::new(),
        }
    }

    /// Whether a terminal value has been recorded. Never blocks.
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The terminal value, if recorded. Never blocks.
    pub fn get(&self) -> Option<&T> {
        if self.is_done() {
            self.value.get()
        } else {
            None
        }
    }

    /// Records `value` as the terminal state if none is recorded yet.
    ///
    /// Returns the value back when the cell was already terminal, so the loser of a race can
    /// decide where its value goes (dropping a Python object, for instance, may need a lock
    /// the caller holds). Callbacks run on this thread after waiters are woken.
    pub fn try_commit(&self, value: T) -> Result<(), T> {
        let callbacks = {
            let mut st = self.state.lock();
            if st.committed {
                return Err(value);
            }
            if self.value.set(value).is_err() {
                unreachable!("value is only set under the lock while uncommitted");
            }
            st.committed = true;
            self.done.store(true, Ordering::Release);
            std::mem::take(&mut st.callbacks)
        };
        self.cond.notify_all();
        let value = self.value.get().expect("just set");
        run_callbacks(callbacks, value);
        Ok(())
    }

    /// Records `value` if the cell is pending; `false` (and `value` dropped) otherwise.
    pub fn commit(&self, value: T) -> bool {
        self.try_commit(value).is_ok()
    }

    /// Blocks until terminal and returns the recorded value (the same one for every caller).
    pub fn wait(&self) -> &T {
        if let Some(v) = self.get() {
            return v;
        }
        // This thread's core is free until the value is ready: spend it on the pieces of an
        // offered transfer (likely the one that makes the value) instead of sleeping.
        super::pieces::help_offered(|| self.get().is_some());
        let mut st = self.state.lock();
        while !st.committed {
            self.cond.wait(&mut st);
        }
        drop(st);
        self.value.get().expect("committed implies set")
    }

    /// Like [`wait`](Self::wait) but gives up after `timeout`, returning `None`.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<&T> {
        if let Some(v) = self.get() {
            return Some(v);
        }
        let deadline = Instant::now().checked_add(timeout);
        let mut st = self.state.lock();
        while !st.committed {
            match deadline {
                Some(d) => {
                    if self.cond.wait_until(&mut st, d).timed_out() && !st.committed {
                        return None;
                    }
                }
                // A timeout too large to represent is a plain wait.
                None => self.cond.wait(&mut st),
            }
        }
        drop(st);
        self.value.get()
    }

    /// Registers `callback` to run exactly once with the terminal value: on the committing
    /// thread, or immediately on this thread when the cell is already terminal.
    pub fn on_done<F>(&self, callback: F)
    where
        F: FnOnce(&T) + Send + 'static,
    {
        {
            let mut st = self.state.lock();
            if !st.committed {
                st.callbacks.push(Box::new(callback));
                return;
            }
        }
        // Outside the lock: the callback may itself inspect or wait on this cell.
        callback(self.value.get().expect("committed implies set"));
    }
}

/// Runs every callback even if one panics, then re-raises the first panic, so one faulty
/// observer cannot silently swallow the notifications of the others.
fn run_callbacks<T>(callbacks: Vec<Callback<T>>, value: &T) {
    let mut first_panic = None;
    for cb in callbacks {
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| cb(value))) {
            first_panic.get_or_insert(p);
        }
    }
    if let Some(p) = first_panic {
        resume_unwind(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Barrier};
    use std::thread;

    #[test]
    fn starts_pending_and_commits_once() {
        let c = Completion::new();
        assert!(!c.is_done());
        assert!(c.get().is_none());
        assert!(c.commit(1));
        assert!(c.is_done());
        assert!(!c.commit(2));
        assert_eq!(c.try_commit(3), Err(3));
        assert_eq!(*c.wait(), 1);
        assert_eq!(c.get(), Some(&1));
    }

    #[test]
    fn many_waiters_observe_the_same_value() {
        const WAITERS: usize = 16;
        let c = Arc::new(Completion::<Box<u64>>::new());
        let ready = Arc::new(Barrier::new(WAITERS + 1));
        let waiters: Vec<_> = (0..WAITERS)
            .map(|_| {
                let c = c.clone();
                let ready = ready.clone();
                thread::spawn(move || {
                    ready.wait();
                    let v: &u64 = c.wait();
                    // The address proves every waiter got the one stored value, not a copy.
                    (*v, v as *const u64 as usize)
                })
            })
            .collect();
        ready.wait();
        assert!(c.commit(Box::new(42)));
        let addr = &**c.wait() as *const u64 as usize;
        for w in waiters {
            assert_eq!(w.join().unwrap(), (42, addr));
        }
    }

    #[test]
    fn concurrent_commits_have_exactly_one_winner() {
        const RACERS: usize = 12;
        for _round in 0..200 {
            let c = Arc::new(Completion::<usize>::new());
            let go = Arc::new(Barrier::new(RACERS));
            let racers: Vec<_> = (0..RACERS)
                .map(|i| {
                    let c = c.clone();
                    let go = go.clone();
                    thread::spawn(move || {
                        go.wait();
                        c.commit(i)
                    })
                })
                .collect();
            let wins: Vec<usize> =
                racers.into_iter().enumerate().filter_map(|(i, r)| r.join().unwrap().then_some(i)).collect();
            assert_eq!(wins.len(), 1);
            assert_eq!(*c.wait(), wins[0]);
        }
    }

    #[test]
    fn callbacks_run_once_whether_registered_before_or_after() {
        let c = Arc::new(Completion::<i32>::new());
        let runs = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let runs = runs.clone();
            c.on_done(move |v| {
                assert_eq!(*v, 5);
                runs.fetch_add(1, Ordering::SeqCst);
            });
        }
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        c.commit(5);
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        c.commit(6);
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        let late = runs.clone();
        c.on_done(move |v| {
            assert_eq!(*v, 5);
            late.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(runs.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn callbacks_registered_during_a_commit_race_run_exactly_once() {
        for _round in 0..200 {
            let c = Arc::new(Completion::<u8>::new());
            let runs = Arc::new(AtomicUsize::new(0));
            let go = Arc::new(Barrier::new(3));
            let registrar = {
                let (c, runs, go) = (c.clone(), runs.clone(), go.clone());
                thread::spawn(move || {
                    go.wait();
                    for _ in 0..50 {
                        let runs = runs.clone();
                        c.on_done(move |_| {
                            runs.fetch_add(1, Ordering::SeqCst);
                        });
                    }
                })
            };
            let committers: Vec<_> = (0..2)
                .map(|i| {
                    let (c, go) = (c.clone(), go.clone());
                    thread::spawn(move || {
                        go.wait();
                        c.commit(i)
                    })
                })
                .collect();
            registrar.join().unwrap();
            let wins = committers.into_iter().map(|h| h.join().unwrap());
            assert_eq!(wins.filter(|won| *won).count(), 1);
            assert_eq!(runs.load(Ordering::SeqCst), 50);
        }
    }

    #[test]
    fn a_panicking_callback_does_not_skip_the_others() {
        let c = Completion::<()>::new();
        let runs = Arc::new(AtomicUsize::new(0));
        c.on_done(|_| panic!("observer failure"));
        let r = runs.clone();
        c.on_done(move |_| {
            r.fetch_add(1, Ordering::SeqCst);
        });
        let outcome = catch_unwind(AssertUnwindSafe(|| c.commit(())));
        assert!(outcome.is_err());
        assert!(c.is_done());
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn wait_timeout_gives_up_then_sees_the_value() {
        let c = Arc::new(Completion::<i32>::new());
        assert!(c.wait_timeout(Duration::from_millis(1)).is_none());
        let c2 = c.clone();
        let t = thread::spawn(move || c2.wait_timeout(Duration::from_secs(3600)).copied());
        c.commit(9);
        assert_eq!(t.join().unwrap(), Some(9));
        assert_eq!(c.wait_timeout(Duration::ZERO), Some(&9));
    }

    #[test]
    fn a_callback_may_wait_on_its_own_cell() {
        let c = Arc::new(Completion::<i32>::new());
        let inner = c.clone();
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        c.on_done(move |_| {
            s.store(*inner.wait() as usize, Ordering::SeqCst);
        });
        c.commit(3);
        assert_eq!(seen.load(Ordering::SeqCst), 3);
    }
}
