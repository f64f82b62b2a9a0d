//! The one terminal commit of a move request: what happens, in which order, once the transfer
//! has finished or failed, and the guarantee that it happens exactly once.
//!
//! A request may be finished from more than one place (the thread that ran the copy, a
//! worker, a provider's completion, a failure while submitting), so [`Terminal::commit`]
//! lets the first caller through and turns every later one away. The steps themselves are
//! the request's ([`CommitSteps`]): the Rust model's request ends its `ClaimGuard`s; the
//! Python binding's request (`crates/strideweave-py/src/move_request.rs`) drives the Python
//! carriers' state cells and hooks. The order is fixed here:
//!
//! * success: publish the result, release the source while the request still claims it (so
//!   no other move can take the source in between), then end the claims;
//! * failure (of the transfer, the publication or the release): shrink a destination the
//!   request grew, while it is still claimed (so no other move can start filling it first),
//!   then end the claims. The source stays live and unchanged.
//!
//! ```
//! use strideweave_core::model::movement::{CommitSteps, Terminal};
//!
//! #[derive(Default)]
//! struct Log(Vec<&'static str>);
//! impl CommitSteps for Log {
//!     type Error = String;
//!     fn publish(&mut self) -> Result<(), String> { self.0.push("publish"); Ok(()) }
//!     fn release_source(&mut self) -> Result<(), String> { self.0.push("release"); Ok(()) }
//!     fn shrink_destination(&mut self) { self.0.push("shrink"); }
//!     fn end_claims(&mut self) { self.0.push("end claims"); }
//! }
//!
//! let terminal = Terminal::new();
//! let mut steps = Log::default();
//! assert_eq!(terminal.commit(&mut steps, Err("copy failed".to_string()), true), Some(Err("copy failed".to_string())));
//! assert_eq!(steps.0, ["shrink", "end claims"]);
//! // A second finisher finds the request committed and changes nothing.
//! assert_eq!(terminal.commit(&mut steps, Ok(()), true), None);
//! assert_eq!(steps.0.len(), 2);
//! ```

use std::sync::atomic::{AtomicBool, Ordering};

/// The request-specific steps of a terminal commit. Each is called at most once per commit.
pub trait CommitSteps {
    /// The failure a step (or the transfer) reports.
    type Error;

    /// Make the result visible to whoever waits for it (the Python binding attaches the
    /// autograd node to the result here). A failure fails the move.
    fn publish(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Release the source as the request's own act, while the request still claims it. A
    /// failure (a release hook that raises) fails the move and leaves the source live.
    fn release_source(&mut self) -> Result<(), Self::Error>;

    /// Give a destination the request grew back its empty size (best effort: the move has
    /// failed either way).
    fn shrink_destination(&mut self);

    /// End every claim the request still holds (idempotent).
    fn end_claims(&mut self);
}

/// Once-only guard of a request's terminal commit.
#[derive(Debug, Default)]
pub struct Terminal {
    committed: AtomicBool,
}

impl Terminal {
    /// A request not yet committed.
    pub const fn new() -> Self {
        Terminal { committed: AtomicBool::new(false) }
    }

    /// Whether the terminal commit has begun.
    pub fn is_committed(&self) -> bool {
        self.committed.load(Ordering::Acquire)
    }

    /// Commit once, after a transfer whose outcome is `transfer`: the success or failure
    /// sequence of the module docs. `grown` says whether the request grew its destination.
    /// Returns the move's outcome, or None (nothing done) when the request was already
    /// committed by somebody else.
    pub fn commit<S: CommitSteps + ?Sized>(
        &self,
        steps: &mut S,
        transfer: Result<(), S::Error>,
        grown: bool,
    ) -> Option<Result<(), S::Error>> {
        if self.committed.swap(true, Ordering::AcqRel) {
            return None;
        }
        let outcome = transfer.and_then(|()| steps.publish()).and_then(|()| steps.release_source());
        if outcome.is_err() && grown {
            steps.shrink_destination();
        }
        steps.end_claims();
        Some(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    #[derive(Default)]
    struct Log {
        steps: Vec<&'static str>,
        refuse: Option<&'static str>,
    }

    impl Log {
        fn step(&mut self, name: &'static str) -> Result<(), &'static str> {
            self.steps.push(name);
            if self.refuse == Some(name) {
                Err(name)
            } else {
                Ok(())
            }
        }
    }

    impl CommitSteps for Log {
        type Error = &'static str;
        fn publish(&mut self) -> Result<(), Self::Error> {
            self.step("publish")
        }
        fn release_source(&mut self) -> Result<(), Self::Error> {
            self.step("release")
        }
        fn shrink_destination(&mut self) {
            self.steps.push("shrink");
        }
        fn end_claims(&mut self) {
            self.steps.push("end claims");
        }
    }

    #[test]
    fn success_publishes_then_releases_then_ends_the_claims() {
        let mut log = Log::default();
        assert_eq!(Terminal::new().commit(&mut log, Ok(()), true), Some(Ok(())));
        assert_eq!(log.steps, ["publish", "release", "end claims"]);
    }

    #[test]
    fn a_failed_release_shrinks_a_grown_destination_before_ending_the_claims() {
        let mut log = Log { refuse: Some("release"), ..Log::default() };
        assert_eq!(Terminal::new().commit(&mut log, Ok(()), true), Some(Err("release")));
        assert_eq!(log.steps, ["publish", "release", "shrink", "end claims"]);
    }

    #[test]
    fn a_failed_transfer_touches_neither_the_result_nor_the_source() {
        let mut log = Log::default();
        assert_eq!(Terminal::new().commit(&mut log, Err("copy"), false), Some(Err("copy")));
        assert_eq!(log.steps, ["end claims"]);
    }

    #[test]
    fn of_racing_finishers_exactly_one_commits() {
        for _ in 0..200 {
            let terminal = Arc::new(Terminal::new());
            let start = Arc::new(Barrier::new(8));
            let logs: Vec<Log> = (0..8)
                .map(|k| {
                    let (terminal, start) = (terminal.clone(), start.clone());
                    std::thread::spawn(move || {
                        let mut log = Log::default();
                        start.wait();
                        let transfer = if k % 2 == 0 { Ok(()) } else { Err("copy") };
                        terminal.commit(&mut log, transfer, false);
                        log
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|t| t.join().unwrap())
                .collect();
            let committed = logs.iter().filter(|log| !log.steps.is_empty()).count();
            assert_eq!(committed, 1, "exactly one finisher runs the steps");
            assert!(terminal.is_committed());
        }
    }
}
