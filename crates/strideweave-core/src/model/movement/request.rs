//! The one move request every move runs, whatever its carriers: the Rust model's
//! (`carrier_request.rs`, which the fast routes of the Python binding run too) and the Python
//! binding's general request (`crates/strideweave-py/src/move_request.rs`).
//!
//! [`Request`] owns the sequence and its rules; the parties ([`MoveParties`]) answer and act in
//! their own terms (the Rust carrier trait, or Python hooks and Python class names):
//!
//! 1. [`Request::validate`]: every row of the validation table, in its order
//!    ([`validate_settled`]: a refusal reports the earliest row that fails by then), then the
//!    parties' last refusal before any effect ([`MoveParties::prepare`]). Nothing has changed.
//! 2. [`Request::admit`]: both claims in one step ([`MoveParties::claim`], which re-makes the
//!    table's claim checks atomically), then, while claimed, the growth of an empty destination
//!    the table allowed to grow. A growth that fails ends the claims and changes nothing else.
//! 3. The transfer: the caller's (a route, an operation, a provider), writing through what it
//!    was handed.
//! 4. [`Request::commit`]: the one terminal commit ([`Terminal`]), from whichever thread
//!    finishes, exactly once; or [`Request::abandon`] of a request whose transfer never started.
//!
//! ```
//! use strideweave_core::model::movement::{Check, CommitSteps, MoveParties, Request};
//!
//! /// Parties that only log what the request asks of them.
//! #[derive(Default)]
//! struct Log(Vec<String>);
//! impl CommitSteps for Log {
//!     type Error = String;
//!     fn release_source(&mut self) -> Result<(), String> { self.0.push("release".into()); Ok(()) }
//!     fn shrink_destination(&mut self) { self.0.push("shrink".into()); }
//!     fn end_claims(&mut self) { self.0.push("end claims".into()); }
//! }
//! impl MoveParties for Log {
//!     fn check(&mut self, _: Check) -> Result<(), String> { Ok(()) }
//!     fn claim(&mut self) -> Result<(), String> { self.0.push("claim".into()); Ok(()) }
//!     fn grow(&mut self) -> Result<bool, String> { self.0.push("grow".into()); Ok(true) }
//! }
//!
//! let mut parties = Log::default();
//! let request = Request::initiate(&mut parties).unwrap();
//! // ... the transfer fails ...
//! assert_eq!(request.commit(&mut parties, Err("copy failed".into())), Some(Err("copy failed".into())));
//! assert_eq!(parties.0, ["claim", "grow", "shrink", "end claims"]);
//! assert_eq!(request.commit(&mut parties, Ok(())), None); // committed once only
//! ```

use std::sync::atomic::{AtomicBool, Ordering};

use super::table::{validate_settled, Check};
use super::terminal::{CommitSteps, Terminal};

/// What a request asks of a move's two carriers, answered in the parties' own terms. The
/// commit's steps ([`CommitSteps`]) are theirs too: [`Request::admit`] ends the claims through
/// them when the growth fails.
pub trait MoveParties: CommitSteps {
    /// Answer one row of the validation table: `Err` refuses the move with the row's error.
    /// Called in the table's order, before any effect; a row may be asked again after a later
    /// row refused (see [`validate_settled`]).
    fn check(&mut self, row: Check) -> Result<(), Self::Error>;

    /// After the table, before any effect: a refusal only the parties can still make (a
    /// route's own preparation). Passes by default.
    fn prepare(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Claim both carriers in one step, checking again, atomically, that each is live and no
    /// other claim holds it. Refused: neither is claimed.
    fn claim(&mut self) -> Result<(), Self::Error>;

    /// Grow the claimed destination to the span if it must: it is empty and the table allowed
    /// it to grow (asked again now, under the claim, where nobody else can resize it). True if
    /// it grew; failed, the destination is as it was.
    fn grow(&mut self) -> Result<bool, Self::Error>;
}

/// Proof that a request's parties passed the table and their preparation: what
/// [`Request::admit`] takes.
#[derive(Debug)]
#[must_use = "a validated move claims nothing until it is admitted"]
pub struct Validated(());

/// One move from its admission to its one terminal commit. Share it with whoever finishes the
/// transfer: any thread may commit it, and only the first commit does anything.
#[derive(Debug, Default)]
pub struct Request {
    terminal: Terminal,
    grown: AtomicBool,
}

impl Request {
    /// A request not yet admitted: nothing claimed, nothing grown, not committed.
    pub const fn new() -> Self {
        Request { terminal: Terminal::new(), grown: AtomicBool::new(false) }
    }

    /// Validate, then admit, `parties` (steps 1 and 2 of the module docs) into a new request.
    #[inline]
    pub fn initiate<P: MoveParties>(parties: &mut P) -> Result<Request, P::Error> {
        let validated = Self::validate(parties)?;
        let request = Request::new();
        request.admit(validated, parties)?;
        Ok(request)
    }

    /// Step 1: the table in its order, then [`MoveParties::prepare`]. Nothing changes.
    #[inline(always)]
    pub fn validate<P: MoveParties>(parties: &mut P) -> Result<Validated, P::Error> {
        validate_settled(|row| parties.check(row))?;
        parties.prepare()?;
        Ok(Validated(()))
    }

    /// Step 2: claim both carriers, then grow an empty destination the table allowed to grow.
    /// A growth that fails ends the claims (through the parties' commit steps, so the request
    /// counts as committed) and is returned; nothing else changed.
    #[inline]
    pub fn admit<P: MoveParties>(&self, _: Validated, parties: &mut P) -> Result<(), P::Error> {
        parties.claim()?;
        match parties.grow() {
            Ok(true) => self.mark_grown(),
            Ok(false) => {}
            Err(error) => {
                return match self.terminal.commit(parties, Err(error), false) {
                    Some(Err(error)) => Err(error),
                    _ => unreachable!("a fresh request commits the growth's failure"),
                };
            }
        }
        Ok(())
    }

    /// Record that the destination was grown for this request (admission does; a caller that
    /// grows it outside [`admit`](Self::admit) says so here), so a failed commit shrinks it.
    #[inline]
    pub fn mark_grown(&self) {
        self.grown.store(true, Ordering::Release);
    }

    /// Whether the destination was grown for this request.
    #[inline]
    pub fn grown(&self) -> bool {
        self.grown.load(Ordering::Acquire)
    }

    /// Step 4: the one terminal commit with `transfer`, the transfer's outcome ([`Terminal`]'s
    /// order). None when the request was committed already: nothing happens then.
    #[inline]
    pub fn commit<S: CommitSteps + ?Sized>(
        &self,
        steps: &mut S,
        transfer: Result<(), S::Error>,
    ) -> Option<Result<(), S::Error>> {
        self.terminal.commit(steps, transfer, self.grown())
    }

    /// Undo an admitted request whose transfer never started, for `reason`: a grown
    /// destination shrinks back, the claims end, the source stays as it was. False when the
    /// request was committed already.
    #[inline]
    pub fn abandon<S: CommitSteps + ?Sized>(&self, steps: &mut S, reason: S::Error) -> bool {
        self.commit(steps, Err(reason)).is_some()
    }

    /// Whether the terminal commit (or an abandonment) has run.
    pub fn is_committed(&self) -> bool {
        self.terminal.is_committed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parties that log each step and refuse the one named.
    #[derive(Default)]
    struct Log {
        steps: Vec<String>,
        refuse: Option<&'static str>,
        grow: bool,
    }

    impl Log {
        fn step(&mut self, name: &str) -> Result<(), String> {
            self.steps.push(name.into());
            if self.refuse == Some(name) {
                Err(name.into())
            } else {
                Ok(())
            }
        }
    }

    impl CommitSteps for Log {
        type Error = String;
        fn release_source(&mut self) -> Result<(), String> {
            self.step("release")
        }
        fn shrink_destination(&mut self) {
            self.steps.push("shrink".into());
        }
        fn end_claims(&mut self) {
            self.steps.push("end claims".into());
        }
    }

    impl MoveParties for Log {
        fn check(&mut self, row: Check) -> Result<(), String> {
            let name = format!("{row:?}");
            self.step(&name)
        }
        fn prepare(&mut self) -> Result<(), String> {
            self.step("prepare")
        }
        fn claim(&mut self) -> Result<(), String> {
            self.step("claim")
        }
        fn grow(&mut self) -> Result<bool, String> {
            if !self.grow {
                return Ok(false);
            }
            self.step("grow").map(|()| true)
        }
    }

    #[test]
    fn the_table_then_the_preparation_then_the_claims_then_the_growth() {
        let mut parties = Log { grow: true, ..Log::default() };
        let request = Request::initiate(&mut parties).unwrap();
        let rows: Vec<String> = super::super::VALIDATION_ORDER.iter().map(|r| format!("{r:?}")).collect();
        assert_eq!(parties.steps[..rows.len()], rows[..]);
        assert_eq!(parties.steps[rows.len()..], ["prepare", "claim", "grow"]);
        assert!(request.grown() && !request.is_committed());
        assert_eq!(request.commit(&mut parties, Ok(())), Some(Ok(())));
        assert_eq!(parties.steps[rows.len() + 3..], ["release", "end claims"]);
    }

    #[test]
    fn a_refused_row_or_preparation_or_claim_has_no_effect() {
        for refuse in ["SameDType", "prepare", "claim"] {
            let mut parties = Log { refuse: Some(refuse), grow: true, ..Log::default() };
            assert_eq!(Request::initiate(&mut parties).unwrap_err(), refuse);
            assert!(!parties.steps.iter().any(|s| s == "grow" || s == "end claims"), "{refuse}: {:?}", parties.steps);
        }
    }

    #[test]
    fn a_failed_growth_ends_the_claims_and_shrinks_nothing() {
        let mut parties = Log { refuse: Some("grow"), grow: true, ..Log::default() };
        assert_eq!(Request::initiate(&mut parties).unwrap_err(), "grow");
        let after_claim: Vec<&str> = parties.steps.iter().skip_while(|s| *s != "claim").map(String::as_str).collect();
        assert_eq!(after_claim, ["claim", "grow", "end claims"]);
    }

    #[test]
    fn an_abandoned_request_shrinks_what_it_grew_and_commits_nothing_later() {
        let mut parties = Log { grow: true, ..Log::default() };
        let request = Request::initiate(&mut parties).unwrap();
        parties.steps.clear();
        assert!(request.abandon(&mut parties, "never submitted".into()));
        assert_eq!(parties.steps, ["shrink", "end claims"]);
        assert!(!request.abandon(&mut parties, "again".into()));
        assert_eq!(request.commit(&mut parties, Ok(())), None);
        assert_eq!(parties.steps.len(), 2);
    }
}
