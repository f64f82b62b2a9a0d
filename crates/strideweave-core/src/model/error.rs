//! The object model's error type, one variant per cause.
//!
//! Variants say *why* an operation failed, not which Python exception it becomes; the
//! binding crate maps causes to exception classes in one place. For reference, the
//! specification's classes are: `Released`, `Owned`, `Claimed`, `NotMutable` →
//! RuntimeError; `Move` by its [`kind`](MoveRefusal::kind); `WindowOutOfRange`,
//! `Layout`, `NoSubtensors`, `SubtensorShapesDiffer`, `LengthMismatch` → ValueError; `SlotOutOfRange` → IndexError; `NotExportable` → BufferError;
//! `NoRoute` → NotImplementedError.
//!
//! ```
//! use strideweave_core::model::{HostCarrier, ModelError, Tensor};
//!
//! let t = Tensor::canonical(HostCarrier::from_f32(&[1.0]), &[1]).unwrap();
//! assert!(matches!(t.get::<i32>(0), Err(ModelError::ValueKind { .. })));
//! assert!(matches!(t.get::<f32>(1), Err(ModelError::Layout(_))));
//! ```

use std::sync::Arc;

use thiserror::Error;

use super::movement::MoveRefusal;
use super::state_refusal::{held_text, Holder};
use crate::copy::LayoutCopyError;
use crate::layout::{LayoutError, Shape};
use crate::storage::{ElemKind, Scalar};

/// Why an object-model operation failed. Nothing changed when one is returned (no value,
/// version, claim, release state or file), unless the variant says otherwise.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The carrier's storage has been released.
    #[error("{carrier} carrier is released")]
    Released {
        /// The carrier's class name.
        carrier: String,
    },
    /// The carrier is owned by a composite carrier and only the owner may mutate, release
    /// or move it.
    #[error("{carrier} carrier is owned by another carrier")]
    Owned {
        /// The carrier's class name.
        carrier: String,
    },
    /// A pending move holds the carrier: mutation, release and another move are refused
    /// until it reaches its terminal commit.
    #[error("cannot {action} {carrier} carrier: {}", held_text(Holder::PendingMove))]
    Claimed {
        /// The carrier's class name.
        carrier: String,
        /// What was refused ("write", "release", "move", …).
        action: &'static str,
    },
    /// The carrier does not accept public writes.
    #[error("{carrier} carrier is not mutable")]
    NotMutable {
        /// The carrier's class name.
        carrier: String,
    },
    /// A slot index outside `[0, size)`.
    #[error("carrier index {index} is outside [0, {size})")]
    SlotOutOfRange {
        /// The index given.
        index: i64,
        /// The carrier's size.
        size: usize,
    },
    /// A value whose kind is not the slot's element kind.
    #[error("a {value:?} value does not suit a {kind:?} slot")]
    ValueKind {
        /// The value given.
        value: Scalar,
        /// The slot's element kind.
        kind: ElemKind,
    },
    /// A tensor's window (offset + cosize) does not fit its carrier.
    #[error("tensor window [{offset}, {offset} + {cosize}) exceeds the carrier's {size} slots")]
    WindowOutOfRange {
        /// The window's first slot.
        offset: usize,
        /// The layout's cosize.
        cosize: usize,
        /// The carrier's size.
        size: usize,
    },
    /// Layout algebra refused a key or a construction.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A tensor was built from an empty list of subtensors.
    #[error("a tensor needs at least one subtensor")]
    NoSubtensors,
    /// The subtensors of one tensor have different shapes.
    #[error("subtensor shapes differ: {first} and {other}")]
    SubtensorShapesDiffer {
        /// The first subtensor's shape.
        first: Box<Shape>,
        /// The shape that differs from it.
        other: Box<Shape>,
    },
    /// A layout copy refused its operands (the move checked them first, so a defect).
    #[error(transparent)]
    LayoutCopy(#[from] LayoutCopyError),
    /// An operation defined for single-subtensor tensors got a multi-subtensor one.
    #[error("{operation} needs a single-subtensor tensor; this one has {count} subtensors")]
    MultiSubtensor {
        /// The operation.
        operation: &'static str,
        /// The tensor's number of subtensors.
        count: usize,
    },
    /// A move request refused before any effect: the catalogue of the validation table's
    /// refusals, shared with the Python binding.
    #[error(transparent)]
    Move(#[from] MoveRefusal),
    /// A tiled carrier's shapes, tier sizes or tile indices refused.
    #[error("TiledEvictable: {message}")]
    Tiling {
        /// What was refused.
        message: String,
    },
    /// A tiled composite's book refused a request, a pin, a write or a release (its tiles'
    /// pins, the residency policy, a release).
    #[error(transparent)]
    Tiles(#[from] super::tile_book::TileRefusal),
    /// A read or write of an evicted composite: its values are in the secondary tier.
    #[error("{carrier} carrier is evicted: promote() it before reading or writing its values")]
    Evicted {
        /// The composite's class name.
        carrier: String,
    },
    /// A composite built over one carrier as both tiers (the Python composites' words).
    #[error("{composite} primary and secondary must be distinct carrier objects")]
    TiersNotDistinct {
        /// The composite's class name.
        composite: &'static str,
    },
    /// A composite built over tiers of different element kinds.
    #[error("{composite} tier dtypes must be identical: primary is {primary}, secondary is {secondary}")]
    TierDTypesDiffer {
        /// The composite's class name.
        composite: &'static str,
        /// The primary's dtype name.
        primary: &'static str,
        /// The secondary's dtype name.
        secondary: &'static str,
    },
    /// A storage hook of a built-in carrier called with a token the framework made for
    /// another carrier's hook (one a carrier's own hook was handed, passed on): refused, so no
    /// hook can reach another carrier's storage around the checks.
    #[error("{carrier} carrier refuses a storage hook call the framework did not make for it")]
    HookNotAdmitted {
        /// The carrier's class name.
        carrier: String,
    },
    /// `allocate` on a carrier that cannot grow.
    #[error("{carrier} carrier cannot allocate")]
    NotAllocatable {
        /// The carrier's class name.
        carrier: String,
    },
    /// The tensor's elements cannot be lent as a slice.
    #[error("no slice of this tensor: {reason}")]
    NoSlice {
        /// Why, in words.
        reason: &'static str,
    },
    /// The tensor's elements cannot be lent as a typed host view.
    #[error("no host view of this tensor: {reason}")]
    NoHostView {
        /// Why, in words.
        reason: &'static str,
    },
    /// A bulk write got another number of values than its window has elements.
    #[error("{found} values for a window of {expected} elements")]
    LengthMismatch {
        /// The window's element count.
        expected: usize,
        /// How many values were given.
        found: usize,
    },
    /// The tensor cannot be exported through DLPack.
    #[error("DLPack export refused: {reason}")]
    NotExportable {
        /// Why, in words.
        reason: String,
    },
    /// The operating system refused an I/O operation.
    #[error("I/O failed while {context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The operating system's error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// No transfer exists for this exact carrier pair (the spec's NotImplementedError).
    #[error("no move route from {from} carrier to {to} carrier")]
    NoRoute {
        /// The source carrier's class name.
        from: String,
        /// The destination carrier's class name.
        to: String,
    },
    /// A block device refused an operation.
    #[error("block device failed while {context}: {message}")]
    Device {
        /// What was being done.
        context: &'static str,
        /// The device's error.
        message: String,
    },
    /// Host memory could not be allocated.
    #[error("cannot allocate {bytes} bytes of host memory")]
    OutOfMemory {
        /// The size asked for.
        bytes: usize,
    },
    /// A bulk transfer failed (its I/O) or refused its ranges; the move was rolled back.
    #[error("{0}")]
    Transfer(Arc<crate::transfer::TransferError>),
    /// A transfer's code panicked; the move was rolled back.
    #[error("the transfer panicked: {message}")]
    TransferPanicked {
        /// The panic's message.
        message: String,
    },
    /// A foreign carrier's hook reported a failure in its own words.
    #[error("{carrier} carrier: {message}")]
    Hook {
        /// The carrier's class name.
        carrier: String,
        /// The hook's message.
        message: String,
    },
    /// A foreign carrier's hook failed with an error of its own type (a binding's exception),
    /// carried unchanged so that the binding can hand the very error back.
    #[error("{0}")]
    Foreign(ForeignError),
}

/// An error of a binding's own type inside a [`ModelError::Foreign`]: shared, so the model
/// error stays cheap to clone, and recoverable by its type.
///
/// ```
/// use strideweave_core::model::{ForeignError, ModelError};
///
/// let e = ModelError::Foreign(ForeignError::new(std::fmt::Error));
/// let ModelError::Foreign(foreign) = &e else { unreachable!() };
/// assert!(foreign.downcast_ref::<std::fmt::Error>().is_some());
/// assert_eq!(e.to_string(), std::fmt::Error.to_string());
/// ```
#[derive(Clone)]
pub struct ForeignError(Arc<dyn std::error::Error + Send + Sync>);

impl ForeignError {
    /// Carry `error`.
    pub fn new<E: std::error::Error + Send + Sync + 'static>(error: E) -> Self {
        ForeignError(Arc::new(error))
    }

    /// The carried error, if it is an `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref::<E>()
    }
}

impl std::fmt::Debug for ForeignError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for ForeignError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

impl From<crate::transfer::TransferError> for ModelError {
    fn from(e: crate::transfer::TransferError) -> Self {
        ModelError::Transfer(Arc::new(e))
    }
}

impl ModelError {
    /// An I/O error with what was being done when it happened.
    pub fn io(context: &'static str, source: std::io::Error) -> Self {
        ModelError::Io { context, source: Arc::new(source) }
    }
}

/// The object model's result type.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
