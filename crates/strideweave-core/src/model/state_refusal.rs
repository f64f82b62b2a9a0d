//! The one catalogue of a carrier state transition's refusals: a claim, a release, an
//! adoption, a version bump or a write that the carrier's state refuses does so with one of
//! these, in one wording, whichever side asks (the Rust model's `CarrierState` or the Python
//! binding's carriers). All are the specification's RuntimeError family
//! ([`RefusalKind::State`](super::movement::RefusalKind::State)); the binding maps them to
//! that class at one edge.
//!
//! ```
//! use strideweave_core::model::{Holder, StateRefusal};
//!
//! let refusal = StateRefusal::Held { carrier: "CPU".into(), action: "release".into(), by: Holder::PendingMove };
//! assert_eq!(refusal.to_string(), "cannot release CPU carrier: it participates in a pending move");
//! ```

use thiserror::Error;

/// What holds a carrier so that a transition must wait its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Holder {
    /// A pending move (or a composite's own operation) claims it.
    PendingMove,
    /// Its release hook is running.
    BeingReleased,
    /// A public write is storing into it.
    BeingWritten,
}

/// Why a carrier's state refused a transition; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StateRefusal {
    /// A claim, release, version bump or write meets a holder.
    #[error("cannot {action} {carrier} carrier: {}", held_text(*.by))]
    Held {
        /// The carrier's class name.
        carrier: String,
        /// What was refused ("move", "release", "write to", ...).
        action: String,
        /// What holds the carrier.
        by: Holder,
    },
    /// A move's claim on a released carrier.
    #[error("the {role} {carrier} carrier is released")]
    PartyReleased {
        /// "source" or "destination".
        role: String,
        /// The carrier's class name.
        carrier: String,
    },
    /// A composite's own operation on a released carrier ("cannot evict a released ...").
    #[error("cannot {action} a released {carrier} carrier")]
    ActionOnReleased {
        /// The composite's operation.
        action: String,
        /// The carrier's class name.
        carrier: String,
    },
    /// A composite's own operation on a carrier another composite owns.
    #[error("cannot {action} {carrier} carrier: it is owned by {owner}")]
    ActionOnOwned {
        /// The composite's operation.
        action: String,
        /// The carrier's class name.
        carrier: String,
        /// The owner's class name.
        owner: String,
    },
    /// A public release of an owned carrier.
    #[error("{carrier} carrier is owned by {owner} and cannot be released directly")]
    ReleaseOfOwned {
        /// The carrier's class name.
        carrier: String,
        /// The owner's class name.
        owner: String,
    },
    /// A version bump of an owned carrier.
    #[error("{carrier} carrier is owned by {owner}")]
    Owned {
        /// The carrier's class name.
        carrier: String,
        /// The owner's class name.
        owner: String,
    },
    /// A public write to a released carrier.
    #[error("{carrier} carrier is released")]
    Released {
        /// The carrier's class name.
        carrier: String,
    },
    /// A public write to an owned carrier.
    #[error("{carrier} carrier is not mutable: owned by {owner}")]
    WriteToOwned {
        /// The carrier's class name.
        carrier: String,
        /// The owner's class name.
        owner: String,
    },
}

/// The words for what holds a carrier (shared with [`ModelError::Claimed`](super::ModelError::Claimed)).
pub(crate) fn held_text(by: Holder) -> &'static str {
    match by {
        Holder::PendingMove => "it participates in a pending move",
        Holder::BeingReleased => "it is being released",
        Holder::BeingWritten => "a write to it is in progress",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelError;

    #[test]
    fn the_rust_model_words_a_claimed_carrier_as_the_catalogue_does() {
        let model = ModelError::Claimed { carrier: "HostCarrier".into(), action: "release" };
        let catalogue =
            StateRefusal::Held { carrier: "HostCarrier".into(), action: "release".into(), by: Holder::PendingMove };
        assert_eq!(model.to_string(), catalogue.to_string());
    }

    #[test]
    fn every_holder_has_its_own_words() {
        let text = |by| StateRefusal::Held { carrier: "CPU".into(), action: "move".into(), by }.to_string();
        assert_eq!(text(Holder::BeingReleased), "cannot move CPU carrier: it is being released");
        assert_eq!(text(Holder::BeingWritten), "cannot move CPU carrier: a write to it is in progress");
    }
}
