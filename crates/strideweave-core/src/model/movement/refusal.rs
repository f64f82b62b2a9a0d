//! The one catalogue of a move request's refusals: every row of the validation table
//! ([`VALIDATION_ORDER`](super::VALIDATION_ORDER)) that refuses does so with one of these,
//! in the words of docs/spec/interop-movement.md, whichever request asks (the Rust model's
//! or the Python binding's). The binding maps them to Python exception classes at one edge,
//! by [`MoveRefusal::kind`].
//!
//! ```
//! use strideweave_core::model::movement::{MoveRefusal, RefusalKind};
//!
//! let too_small = MoveRefusal::TooSmall { carrier: "CPU".into(), size: 2, needed: 3 };
//! assert_eq!(too_small.to_string(), "destination CPU is too small: 2 slots for a layout cosize of 3");
//! assert_eq!(too_small.kind(), RefusalKind::Value);
//! ```

use thiserror::Error;

/// Which exception family a refusal belongs to (the spec's classes: RuntimeError for a
/// carrier's state, TypeError for a wrong kind of argument, ValueError for a wrong value,
/// NotImplementedError for what is not implemented).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalKind {
    /// The carrier's state refuses (RuntimeError).
    State,
    /// An argument of the wrong kind (TypeError).
    Type,
    /// An argument of the wrong value (ValueError).
    Value,
    /// Not implemented (NotImplementedError).
    NotImplemented,
}

/// Which carrier of the move a refusal is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Party {
    /// The tensor's own carrier.
    Source,
    /// The carrier the tensor moves into.
    Destination,
}

impl std::fmt::Display for Party {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Party::Source => "source",
            Party::Destination => "destination",
        })
    }
}

/// Why a move request refused before any effect, one variant per row of the table that can
/// refuse on its own (the claim rows refuse with the carrier state's own refusal).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum MoveRefusal {
    /// A tensor of several subtensors.
    #[error("move is not implemented for a multi-subtensor Tensor")]
    MultiSubtensor,
    /// The tensor argument is not a Tensor.
    #[error("tensor must be a Tensor, not {found}")]
    NotATensor {
        /// The argument's class name.
        found: String,
    },
    /// A released source or destination.
    #[error("the {party} {carrier} carrier is released")]
    Released {
        /// Which carrier.
        party: Party,
        /// Its class name.
        carrier: String,
    },
    /// A source owned by a composite carrier.
    #[error("the source {carrier} carrier is owned by {owner} and cannot be moved directly")]
    SourceOwned {
        /// The source's class name.
        carrier: String,
        /// The owner's class name.
        owner: String,
    },
    /// The destination is the tensor's own carrier.
    #[error("destination must be a different carrier from the tensor's own carrier")]
    SameCarrier,
    /// The destination refuses public writes.
    #[error("the destination {carrier} carrier is not publicly mutable")]
    DestinationNotMutable {
        /// The destination's class name.
        carrier: String,
    },
    /// The destination's dtype is not the tensor's.
    #[error("destination dtype {found} does not match the tensor's dtype {expected}")]
    DTypeMismatch {
        /// The destination's dtype name.
        found: String,
        /// The tensor's dtype name.
        expected: String,
    },
    /// The route's operation pins a carrier class the move's carrier is not.
    #[error("{operation} requires a {pinned} {party} carrier, not {found}")]
    PinnedClass {
        /// The operation's class name.
        operation: String,
        /// The class it pins.
        pinned: String,
        /// Which carrier.
        party: Party,
        /// The carrier's class name.
        found: String,
    },
    /// The destination holds fewer slots than the layout's cosize and cannot grow.
    #[error("destination {carrier} is too small: {size} slots for a layout cosize of {needed}")]
    TooSmall {
        /// The destination's class name.
        carrier: String,
        /// Its size.
        size: usize,
        /// The layout's cosize.
        needed: usize,
    },
}

impl MoveRefusal {
    /// The exception family of this refusal.
    pub fn kind(&self) -> RefusalKind {
        match self {
            MoveRefusal::MultiSubtensor => RefusalKind::NotImplemented,
            MoveRefusal::NotATensor { .. } | MoveRefusal::DTypeMismatch { .. } | MoveRefusal::PinnedClass { .. } => {
                RefusalKind::Type
            }
            MoveRefusal::Released { .. }
            | MoveRefusal::SourceOwned { .. }
            | MoveRefusal::DestinationNotMutable { .. } => RefusalKind::State,
            MoveRefusal::SameCarrier | MoveRefusal::TooSmall { .. } => RefusalKind::Value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's words and class for every refusal (the Python tests match these texts).
    #[test]
    fn every_refusal_has_the_specified_text_and_kind() {
        let s = |x: &str| x.to_string();
        let cases = [
            (
                MoveRefusal::MultiSubtensor,
                "move is not implemented for a multi-subtensor Tensor",
                RefusalKind::NotImplemented,
            ),
            (MoveRefusal::NotATensor { found: s("list") }, "tensor must be a Tensor, not list", RefusalKind::Type),
            (
                MoveRefusal::Released { party: Party::Source, carrier: s("CPU") },
                "the source CPU carrier is released",
                RefusalKind::State,
            ),
            (
                MoveRefusal::SourceOwned { carrier: s("CPU"), owner: s("Evictable") },
                "the source CPU carrier is owned by Evictable and cannot be moved directly",
                RefusalKind::State,
            ),
            (
                MoveRefusal::SameCarrier,
                "destination must be a different carrier from the tensor's own carrier",
                RefusalKind::Value,
            ),
            (
                MoveRefusal::DestinationNotMutable { carrier: s("CPU") },
                "the destination CPU carrier is not publicly mutable",
                RefusalKind::State,
            ),
            (
                MoveRefusal::DTypeMismatch { found: s("Int32"), expected: s("Float32") },
                "destination dtype Int32 does not match the tensor's dtype Float32",
                RefusalKind::Type,
            ),
            (
                MoveRefusal::PinnedClass {
                    operation: s("Op"),
                    pinned: s("CPU"),
                    party: Party::Destination,
                    found: s("FileBacked"),
                },
                "Op requires a CPU destination carrier, not FileBacked",
                RefusalKind::Type,
            ),
            (
                MoveRefusal::TooSmall { carrier: s("CPU"), size: 2, needed: 3 },
                "destination CPU is too small: 2 slots for a layout cosize of 3",
                RefusalKind::Value,
            ),
        ];
        for (refusal, text, kind) in cases {
            assert_eq!((refusal.to_string().as_str(), refusal.kind()), (text, kind));
        }
    }
}
