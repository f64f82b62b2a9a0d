//! Moving a tensor into a caller-supplied carrier: [`move_tensor`] (blocking) and
//! [`move_async`] (returns a [`MoveHandle`] at once; the transfer runs on the engine's
//! worker pool).
//!
//! Both run the one move request ([`Request`], which every move of the Python binding runs
//! too, each party answering in its own terms: [`MoveParties`]): validation in the
//! specification's order ([`VALIDATION_ORDER`]), claims on both carriers taken atomically
//! with their checks, growth of an empty allocatable destination to the layout's cosize, the
//! transfer of the exact pair's route ([`route`]), and one terminal commit ([`Terminal`]) —
//! publish the result, then release the source — or
//! a rollback that leaves the source live, shrinks a grown destination and frees both
//! claims. A pending move refuses every conflicting write, release and move of its carriers
//! with [`ModelError::Claimed`].
//!
//! ```
//! use strideweave_core::model::{move_tensor, CarrierExt, HostCarrier, Tensor};
//! use strideweave_core::storage::ElemKind;
//!
//! let src = HostCarrier::from_f32(&[1.0, 2.0]);
//! let t = Tensor::canonical(&src, &[2]).unwrap();
//! let moved = move_tensor(&t, HostCarrier::zeros(ElemKind::F32, 2).unwrap()).unwrap();
//! assert_eq!(moved.values_f32().unwrap(), vec![1.0, 2.0]);
//! assert!(src.is_released()); // a move releases its source
//! ```

mod carrier_request;
mod output;
mod refusal;
mod request;
pub mod route;
mod route_cache;
mod table;
mod terminal;

use std::sync::Arc;
use std::time::Duration;

use super::awaitable::Awaitable;
use super::carrier::IntoCarrier;
use super::error::{ModelError, Result};
use super::tensor::{Subtensor, Tensor};
use crate::engine::{pool, Completion};

pub use output::{MoveCommit, MoveOutput};
pub use refusal::{MoveRefusal, Party, RefusalKind};
pub use request::{MoveParties, Request, Validated};
pub use route::{route_kind, RouteKind};
pub use route_cache::RouteCache;
pub use table::{validate, validate_rows, validate_settled, Check, VALIDATION_ORDER};
pub use terminal::{CommitSteps, Terminal};

/// Host-to-host moves of at most this many bytes run on the initiating thread: waking a
/// worker (tens of microseconds) would cost more than the copy.
pub const INLINE_BYTES: usize = 64 << 10;

/// The outcome a move records once.
pub type MoveOutcome = Result<Tensor, ModelError>;

/// A pending or finished move. Clones observe the same single outcome; dropping every
/// handle neither cancels nor blocks the move.
///
/// With the `async` feature (on by default) a handle is also a [`Future`](std::future::Future)
/// of the outcome, for any executor: no runtime is needed, the finishing thread wakes the
/// task that polled last. It is the model's one handle, [`Awaitable`], with the move's route.
#[derive(Debug, Clone)]
pub struct MoveHandle {
    outcome: Awaitable<MoveOutcome>,
    route: RouteKind,
}

#[cfg(feature = "async")]
impl std::future::Future for MoveHandle {
    type Output = MoveOutcome;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<MoveOutcome> {
        std::pin::Pin::new(&mut self.outcome).poll(cx)
    }
}

impl MoveHandle {
    /// Whether the move has reached its terminal outcome. Never blocks.
    pub fn is_done(&self) -> bool {
        self.outcome.is_done()
    }

    /// Block until the move finishes; the moved tensor or the recorded failure (the same
    /// outcome for every caller).
    pub fn wait(&self) -> MoveOutcome {
        self.outcome.wait()
    }

    /// [`wait`](Self::wait) giving up after `timeout` with `None`.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<MoveOutcome> {
        self.outcome.wait_timeout(timeout)
    }

    /// Run `callback` once with the outcome: on the finishing thread, or at once if done.
    pub fn on_done<F: FnOnce(&MoveOutcome) + Send + 'static>(&self, callback: F) {
        self.outcome.on_done(callback)
    }

    /// The route the move runs.
    pub fn route(&self) -> RouteKind {
        self.route
    }
}

/// Move `tensor` into `destination` and wait: returns the tensor backed by `destination`
/// at offset 0 with the same layout, after releasing the source carrier. The transfer runs
/// on the calling thread. Validation failures return before anything changes.
///
/// ```
/// use std::sync::Arc;
/// use strideweave_core::model::{move_tensor, Carrier, CarrierExt, FileCarrier, HostCarrier, Tensor};
/// use strideweave_core::storage::ElemKind;
///
/// let src = HostCarrier::from_f32(&[1.0, 2.0, 3.0]);
/// let t = Tensor::canonical(src.clone(), &[3]).unwrap();
/// let file: Arc<dyn Carrier> = FileCarrier::temp(ElemKind::F32).unwrap();
/// let moved = move_tensor(&t, &file).unwrap();
/// assert_eq!(moved.values_f32().unwrap(), vec![1.0, 2.0, 3.0]);
/// assert!(src.is_released());
/// assert_eq!(file.size(), 3); // grown to the layout's cosize
/// ```
pub fn move_tensor(tensor: &Tensor, destination: impl IntoCarrier) -> MoveOutcome {
    carrier_request::initiate(tensor, destination.into_carrier(), None)?.run()
}

/// A move validated and holding both claims, its transfer not yet run: what
/// [`prepare_move`] returns. [`run`](Self::run) transfers and commits on the calling thread;
/// dropping it instead gives both claims back (a destination it grew shrinks back to empty
/// first) and changes nothing else.
#[must_use = "a pending move holds both carriers until it runs or is dropped"]
pub struct PendingMove(carrier_request::Pending);

impl std::fmt::Debug for PendingMove {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingMove").field("route", &self.route()).field("bytes", &self.bytes()).finish()
    }
}

impl PendingMove {
    /// The route the transfer takes.
    pub fn route(&self) -> RouteKind {
        self.0.route_kind()
    }

    /// The bytes the transfer spans (the layout's cosize in slots of the dtype).
    pub fn bytes(&self) -> usize {
        self.0.bytes()
    }

    /// Count the transfer's bytes into `progress` while it runs (a bulk transfer of host
    /// memory its carrier's claims guard counts chunk by chunk; others count nothing).
    pub fn count_into(&mut self, progress: Arc<crate::transfer::Progress>) {
        self.0.count_into(progress)
    }

    /// Transfer, then the one terminal commit: the moved tensor with the source released, or
    /// the failure with the source live and unchanged and the destination unclaimed.
    pub fn run(self) -> MoveOutcome {
        self.0.run()
    }

    /// [`run`](Self::run), without making the moved tensor: for a caller that makes its own
    /// (a binding's tensor type), or has no use for it.
    pub fn finish(self) -> Result<()> {
        self.0.finish()
    }

    /// Run the transfer yourself (a device's queue, an I/O ring, a worker of your own): the
    /// destination window to fill, [`MoveOutput`], and the move's one terminal commit,
    /// [`MoveCommit`], to make from whichever thread finishes. The claim admits writes through
    /// the output, from any thread, and refuses every other write, release or move of either
    /// carrier until the commit.
    ///
    /// ```
    /// use strideweave_core::model::movement::prepare_move;
    /// use strideweave_core::model::{CarrierExt, HostCarrier, ModelError, Tensor};
    /// use strideweave_core::storage::Scalar;
    ///
    /// let src = HostCarrier::from_f32(&[1.0, 2.0, 3.0]);
    /// let dst = HostCarrier::from_f32(&[0.0; 3]);
    /// let t = Tensor::canonical(src.clone(), &[3]).unwrap();
    /// let (output, commit) = prepare_move(&t, &dst, None).unwrap().into_transfer();
    /// assert!(matches!(dst.set(0, Scalar::F32(9.0)), Err(ModelError::Claimed { .. })));
    /// let moved = std::thread::spawn(move || {
    ///     for k in 0..output.len() {
    ///         output.set(k, t.get::<f32>(k)?)?; // admitted: the move's own transfer
    ///     }
    ///     commit.commit(Ok::<(), ModelError>(()))
    /// });
    /// let moved = moved.join().unwrap().unwrap();
    /// assert_eq!(moved.values_f32().unwrap(), vec![1.0, 2.0, 3.0]);
    /// assert!(src.is_released());
    /// assert_eq!(dst.version(), 0); // the fill is not a write
    /// ```
    pub fn into_transfer(self) -> (MoveOutput, MoveCommit) {
        (self.0.output(), MoveCommit(self.0))
    }
}

/// The first half of [`move_tensor`]: validate `tensor` → `destination` in the
/// specification's order and claim both carriers (growing an empty allocatable destination),
/// without transferring, so a caller can run the transfer where it likes (a binding runs it
/// with its interpreter's lock released). `route` is the route a binding decided for the pair
/// of its classes (None: by the classes' identities, as `move_tensor` does); it cannot permit
/// a pair the identities refuse, and a route whose storages the carriers do not expose falls
/// back to the elementwise transfer.
///
/// ```
/// use strideweave_core::model::movement::prepare_move;
/// use strideweave_core::model::{CarrierExt, HostCarrier, RouteKind, Tensor};
///
/// let src = HostCarrier::from_f32(&[1.0, 2.0]);
/// let dst = HostCarrier::from_f32(&[0.0, 0.0]);
/// let pending = prepare_move(&Tensor::canonical(src.clone(), &[2]).unwrap(), &dst, None).unwrap();
/// assert_eq!((pending.route(), pending.bytes()), (RouteKind::HostToHost, 8));
/// assert!(dst.set(0, strideweave_core::storage::Scalar::F32(9.0)).is_err()); // claimed
/// let moved = pending.run().unwrap();
/// assert_eq!(moved.values_f32().unwrap(), vec![1.0, 2.0]);
/// assert!(src.is_released());
/// ```
pub fn prepare_move(tensor: &Tensor, destination: impl IntoCarrier, route: Option<RouteKind>) -> Result<PendingMove> {
    carrier_request::initiate(tensor, destination.into_carrier(), route).map(PendingMove)
}

/// [`prepare_move`] of the single-subtensor tensor whose one window is `window` (its dtype is
/// the window's carrier's element kind): for a binding that holds the window's parts, which
/// so makes no tensor to move.
pub fn prepare_window_move(
    window: &Subtensor,
    destination: impl IntoCarrier,
    route: Option<RouteKind>,
) -> Result<PendingMove> {
    let dtype = window.carrier().elem_kind();
    carrier_request::initiate_window(window, dtype, destination.into_carrier(), route).map(PendingMove)
}

/// Validate and start moving `tensor` into `destination`; the transfer and the terminal
/// commit run on an engine worker. Validation and claim failures return `Err` at once,
/// without a handle; a transfer failure becomes the handle's outcome.
///
/// ```
/// use std::sync::Arc;
/// use strideweave_core::model::{move_async, Carrier, FileCarrier, HostCarrier, Tensor};
/// use strideweave_core::storage::ElemKind;
///
/// let t = Tensor::canonical(HostCarrier::from_f32(&[4.0, 5.0]), &[2]).unwrap();
/// let file: Arc<dyn Carrier> = FileCarrier::temp(ElemKind::F32).unwrap();
/// let handle = move_async(&t, &file).unwrap();
/// assert_eq!(handle.wait().unwrap().values_f32().unwrap(), vec![4.0, 5.0]);
/// ```
pub fn move_async(tensor: &Tensor, destination: impl IntoCarrier) -> Result<MoveHandle> {
    let pending = carrier_request::initiate(tensor, destination.into_carrier(), None)?;
    let route = pending.route_kind();
    let cell = Arc::new(Completion::new());
    let handle = MoveHandle { outcome: Awaitable::on(cell.clone()), route };
    if route == RouteKind::HostToHost && pending.bytes() <= INLINE_BYTES {
        // A small host copy costs less than waking a worker: it runs here, and the handle
        // is done when returned (a transfer's panic is contained by `run` as on a worker).
        cell.commit(run_contained(pending));
        return Ok(handle);
    }
    let done = cell;
    pool::submit(move || {
        done.commit(run_contained(pending));
    });
    Ok(handle)
}

/// Run a pending move to its outcome. `run` contains the transfer's panics; this catches one
/// from a carrier's release or allocate hook, so the handle still reaches an outcome (the
/// claims' guards have rolled back during the unwind).
fn run_contained(pending: carrier_request::Pending) -> MoveOutcome {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pending.run()))
        .unwrap_or_else(|_| Err(ModelError::TransferPanicked { message: "a carrier hook panicked".into() }))
}

#[cfg(test)]
mod output_tests;
#[cfg(test)]
mod pending_tests;
