//! Transfer engine: worker threads and one-shot completion cells.
//!
//! The move layer submits bulk copies and provider waits here so that `move_async` returns
//! before the work is done; each request's terminal outcome is recorded once in a
//! [`Completion`], which backs the public `AwaitResult` handles.

pub mod completion;
pub mod pool;

pub use completion::Completion;
pub use pool::{submit, submit_blocking, Job};
