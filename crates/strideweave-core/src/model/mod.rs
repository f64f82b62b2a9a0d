//! The object model in pure Rust: carriers with atomic state, tensors over them, moves
//! between carriers, and DLPack export — usable without Python.
//!
//! * [`state_cell`]: [`StateCell`], the carrier state's atomic transitions, generic over the
//!   owner and claim payloads.
//! * [`state`]: [`CarrierState`], the one carrier state of the Rust model's carriers and of
//!   every Python carrier (that cell with an [`Owner`] and a [`Claim`]: this model's tokens,
//!   or a binding's [`Foreign`] objects), and the [`ClaimGuard`] whose drop rolls a claim back.
//! * [`carrier`]: the [`Carrier`] trait foreign carriers implement, and [`CarrierExt`], the
//!   checked operations every carrier gets.
//! * [`host`], [`mod@file`], [`block`]: the built-in [`HostCarrier`], [`FileCarrier`] and
//!   [`BlockCarrier`].
//! * [`evictable`], [`tiled`], [`residency`]: the two-tier [`Evictable`], the tiled
//!   [`TiledEvictable`], and the residency rule both share with the Python package's
//!   (`Residency`, `Transition`).
//! * [`tensor`]: [`Tensor`] and [`Subtensor`].
//! * [`element`], [`slices`], [`views`]: typed element access, host slices, and typed
//!   [`HostView`]s by ordinal or coordinate.
//! * [`movement`]: [`move_tensor`], [`move_async`] and [`MoveHandle`].
//! * [`awaitable`]: [`Awaitable`], the one handle of asynchronous work (moves, residency).
//! * [`export`]: DLPack export with [`Tensor::to_dlpack`].
//! * [`error`]: [`ModelError`], one variant per cause.
//!
//! ```
//! use std::sync::Arc;
//! use strideweave_core::model::{move_async, Carrier, CarrierExt, FileCarrier, HostCarrier, Tensor};
//! use strideweave_core::storage::ElemKind;
//!
//! let host = HostCarrier::from_f32(&[1.0, 2.0, 3.0, 4.0]);
//! let t = Tensor::canonical(host.clone(), &[2, 2]).unwrap();
//! let file: Arc<dyn Carrier> = FileCarrier::temp(ElemKind::F32).unwrap();
//! let on_file = move_async(&t, &file).unwrap().wait().unwrap();
//! assert!(host.is_released());
//! let back: Arc<dyn Carrier> = HostCarrier::zeros(ElemKind::F32, 4).unwrap();
//! let t2 = move_async(&on_file, &back).unwrap().wait().unwrap();
//! assert_eq!(t2.values_f32().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
//! ```

pub mod awaitable;
#[cfg(feature = "block-devices")]
pub mod block;
pub mod carrier;
pub mod element;
mod element_bias;
pub mod error;
pub mod evictable;
#[cfg(feature = "dlpack")]
pub mod export;
pub mod file;
pub mod host;
mod lent;
pub mod movement;
pub mod residency;
pub mod slices;
pub mod state;
pub mod state_cell;
pub mod state_refusal;
pub mod tensor;
mod tier_ops;
pub mod tile_book;
pub mod tiled;
pub mod two_tier;
pub mod views;

#[cfg(test)]
mod element_bias_tests;
#[cfg(test)]
mod evictable_tests;
#[cfg(test)]
mod race_tests;
#[cfg(test)]
mod test_support;
#[cfg(all(test, feature = "dlpack", feature = "block-devices"))]
mod tests;
#[cfg(test)]
mod tiled_tests;
#[cfg(test)]
mod typed_tests;

pub use awaitable::{Awaitable, ResidencyHandle};
#[cfg(feature = "block-devices")]
pub use block::BlockCarrier;
pub use carrier::{BulkStorage, Carrier, CarrierExt, ClaimedHost, ClassKey, HookToken, IntoCarrier};
pub use element::{Element, SliceElement};
pub use error::{ForeignError, ModelError};
pub use evictable::Evictable;
pub use file::FileCarrier;
pub use host::{HostCarrier, HostStore};
pub use movement::{
    move_async, move_tensor, prepare_move, prepare_window_move, route_kind, MoveCommit, MoveHandle, MoveOutcome,
    MoveOutput, PendingMove, RouteCache, RouteKind,
};
pub use residency::{Residency, Tier, Transition};
pub use slices::{HostSlice, HostSliceMut};
pub use state::{CarrierState, Claim, ClaimGuard, ClaimId, Foreign, ForeignObject, Owner, OwnerToken, Role};
pub use state_cell::{ClaimJudge, ClaimRule, Refusal, ReleaseStart, StateCell, Strict, Verdict};
pub use state_refusal::{Holder, StateRefusal};
pub use tensor::{Subtensor, Tensor};
pub use tiled::TiledEvictable;
pub use views::{HostView, HostViewMut};
