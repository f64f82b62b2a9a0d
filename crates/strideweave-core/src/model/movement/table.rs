//! The order in which a move request checks its arguments: the validation table of
//! docs/spec/interop-movement.md, then the checks that need the resolved route, all before
//! any effect.
//!
//! The order is the specification's, and it is observable: a call that is wrong in two
//! ways reports the earlier row. It is kept here, as data, so that every request follows
//! the one table: the Rust model's [`move_tensor`](super::move_tensor) and the Python
//! binding's request (`crates/strideweave-py/src/move_request.rs`) both walk it with
//! [`validate`], each answering the rows in its own terms (a row the Rust type system
//! already guarantees, such as "the tensor is a Tensor", passes at once there).
//!
//! ```
//! use strideweave_core::model::movement::{validate, Check};
//!
//! let mut asked = Vec::new();
//! let refused = validate(&mut |row| {
//!     asked.push(row);
//!     if row == Check::DestinationLive { Err("the destination is released") } else { Ok(()) }
//! });
//! assert_eq!(refused, Err("the destination is released"));
//! // Every row before it was asked, in order, and none after it.
//! assert_eq!(asked.last(), Some(&Check::DestinationLive));
//! assert!(!asked.contains(&Check::SameDType));
//! ```

/// One check of a move request, in the order of [`VALIDATION_ORDER`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Check {
    /// A Tensor of several subtensors: moving one is not implemented.
    OneSubtensor,
    /// The tensor argument is a Tensor.
    IsTensor,
    /// The source carrier is not released.
    SourceLive,
    /// The source carrier is not owned by a composite (a composite moving its own tier
    /// passes this row).
    SourceUnowned,
    /// No pending move or release holds the source.
    SourceUnclaimed,
    /// The destination argument is a Carrier.
    IsCarrier,
    /// The destination is not the tensor's own carrier.
    DistinctCarriers,
    /// The destination carrier is not released.
    DestinationLive,
    /// The destination accepts writes (publicly; a composite moving between its own tiers
    /// asks the tier's own hook).
    DestinationMutable,
    /// No pending move or release holds the destination.
    DestinationUnclaimed,
    /// The destination's dtype is the tensor's.
    SameDType,
    /// The route's operation, when it pins exact carrier classes, accepts both carriers.
    PinnedClasses,
    /// The destination holds the layout's cosize, or is empty and can grow to it.
    Room,
    /// The resolved route (and, for a recorded move, the reverse route, first) is permitted.
    RoutePermitted,
}

/// Every check of a move request before its first effect, in the order they are made.
pub const VALIDATION_ORDER: [Check; 14] = [
    Check::OneSubtensor,
    Check::IsTensor,
    Check::SourceLive,
    Check::SourceUnowned,
    Check::SourceUnclaimed,
    Check::IsCarrier,
    Check::DistinctCarriers,
    Check::DestinationLive,
    Check::DestinationMutable,
    Check::DestinationUnclaimed,
    Check::SameDType,
    Check::PinnedClasses,
    Check::Room,
    Check::RoutePermitted,
];

/// Ask `check` every row of [`VALIDATION_ORDER`] in turn; the first refusal is the result,
/// and no later row is asked. (Generic, not `dyn`: a request's answer is inlined into the walk,
/// which every move runs.)
pub fn validate<E>(mut check: impl FnMut(Check) -> Result<(), E>) -> Result<(), E> {
    VALIDATION_ORDER.iter().try_for_each(|&row| check(row))
}

impl Check {
    /// A row about a carrier's framework state (live, unowned, unclaimed), which another
    /// thread can change while the request is still checking later rows. (Mutability is a
    /// carrier's own hook, asked once.)
    pub fn is_state(self) -> bool {
        matches!(
            self,
            Check::SourceLive
                | Check::SourceUnowned
                | Check::SourceUnclaimed
                | Check::DestinationLive
                | Check::DestinationUnclaimed
        )
    }
}

/// [`validate`], for a request whose carriers other threads may change while it checks
/// (nothing is claimed yet): when a row refuses, the state rows before it are asked again,
/// and the first of them that refuses now is the answer. A carrier released (say) between its
/// own row and a later one then reports "released", the cause, not the later row's symptom
/// ("too small": a released carrier has no slots).
#[inline(always)]
pub fn validate_settled<E>(mut check: impl FnMut(Check) -> Result<(), E>) -> Result<(), E> {
    // A plain loop, so the answers inline into the walk every move runs.
    let mut refused = None;
    for (position, &row) in VALIDATION_ORDER.iter().enumerate() {
        if let Err(error) = check(row) {
            refused = Some((position, error));
            break;
        }
    }
    let Some((failed, error)) = refused else {
        return Ok(());
    };
    for &row in &VALIDATION_ORDER[..failed] {
        if row.is_state() {
            check(row)?;
        }
    }
    Err(error)
}

/// [`validate`] over the rows from `first` to `last` inclusive, for a request that answers
/// the table in stages (the arguments before the route is resolved, the rest after).
pub fn validate_rows<E>(first: Check, last: Check, mut check: impl FnMut(Check) -> Result<(), E>) -> Result<(), E> {
    let position = |row: Check| VALIDATION_ORDER.iter().position(|&r| r == row).expect("every check is in the table");
    VALIDATION_ORDER[position(first)..=position(last)].iter().try_for_each(|&row| check(row))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_check_appears_once() {
        for (i, row) in VALIDATION_ORDER.iter().enumerate() {
            assert!(!VALIDATION_ORDER[i + 1..].contains(row), "{row:?} appears twice");
        }
    }

    #[test]
    fn the_first_refusal_stops_the_walk() {
        let mut asked = Vec::new();
        let out = validate(&mut |row| {
            asked.push(row);
            if row == Check::SourceUnclaimed {
                Err(row)
            } else {
                Ok(())
            }
        });
        assert_eq!(out, Err(Check::SourceUnclaimed));
        assert_eq!(asked, VALIDATION_ORDER[..5].to_vec());
    }

    #[test]
    fn a_settled_walk_reports_a_state_row_that_fails_by_the_time_a_later_row_refuses() {
        // The destination is live when its row is asked, released by the time Room refuses.
        let mut released = false;
        let out = validate_settled(&mut |row| match row {
            Check::DestinationLive if released => Err(row),
            Check::Room => {
                released = true;
                Err(row)
            }
            _ => Ok(()),
        });
        assert_eq!(out, Err(Check::DestinationLive));
        // Nothing changed: the row that refused is the answer, and non-state rows are not re-asked.
        let mut asked = Vec::new();
        let out = validate_settled(&mut |row| {
            asked.push(row);
            if row == Check::SameDType {
                Err(row)
            } else {
                Ok(())
            }
        });
        assert_eq!(out, Err(Check::SameDType));
        let again: Vec<Check> = asked[11..].to_vec();
        assert!(again.iter().all(|row| row.is_state()), "{again:?}");
        assert_eq!(again.len(), 5);
    }

    #[test]
    fn stages_cover_the_table_between_their_rows() {
        let mut asked = Vec::new();
        let out: Result<(), ()> = validate_rows(Check::IsCarrier, Check::SameDType, &mut |row| {
            asked.push(row);
            Ok(())
        });
        assert_eq!(out, Ok(()));
        assert_eq!(asked, VALIDATION_ORDER[5..11].to_vec());
    }
}
