//! Transfer engine: worker threads, one-shot completion cells, and one job's pieces spread
//! over idle workers.
//!
//! The move layer submits bulk copies and provider waits here so that `move_async` returns
//! before the work is done; each request's terminal outcome is recorded once in a
//! [`Completion`], which backs the public `AwaitResult` handles.
//!
//! ```
//! use std::sync::Arc;
//! use strideweave_core::engine::{submit, Completion};
//!
//! let done = Arc::new(Completion::new());
//! let cell = done.clone();
//! submit(move || {
//!     cell.commit(6 * 7);
//! });
//! assert_eq!(*done.wait(), 42); // committed once, on a worker thread
//! ```

pub mod completion;
pub mod pieces;
pub mod pool;

pub use completion::Completion;
pub use pieces::{help_offered, offer_pieces, run_pieces, OfferedPieces};
pub use pool::{submit, submit_blocking, Job};
