//! [`Awaitable`]: the one handle type of the model's asynchronous work (a move's
//! [`MoveHandle`](super::MoveHandle) wraps one; an [`Evictable`](super::Evictable)'s
//! asynchronous evict or promote returns one, [`ResidencyHandle`]). It observes a single
//! terminal outcome, which every clone sees; it can be waited on, with or without a timeout,
//! given a callback, or, with the `async` feature (on by default), awaited as a
//! [`Future`](std::future::Future) on any executor: no runtime is needed, the finishing thread
//! wakes the task that polled last. Dropping every handle neither cancels nor blocks the work.
//!
//! ```
//! use std::sync::mpsc;
//! use std::time::Duration;
//! use strideweave_core::model::{Evictable, FileCarrier, HostCarrier};
//! use strideweave_core::storage::ElemKind;
//!
//! let layer = Evictable::new(HostCarrier::from_f32(&[1.0; 256]), FileCarrier::temp(ElemKind::F32).unwrap()).unwrap();
//! let evicted = layer.evict_async().unwrap(); // a ResidencyHandle, an Awaitable
//! let (tx, rx) = mpsc::channel();
//! evicted.on_done(move |outcome| tx.send(outcome.is_ok()).unwrap()); // on the finishing thread
//! assert!(evicted.wait_timeout(Duration::from_secs(10)).is_some_and(|outcome| outcome.is_ok()));
//! assert!(evicted.is_done() && rx.recv().unwrap());
//! evicted.wait().unwrap(); // every clone and every wait sees the one outcome
//! ```

use std::sync::Arc;
use std::time::Duration;

use super::error::ModelError;
use crate::engine::Completion;

/// A pending or finished piece of asynchronous work's one outcome (see the module docs).
#[derive(Debug)]
pub struct Awaitable<T> {
    cell: Arc<Completion<T>>,
    #[cfg(feature = "async")]
    waker: Arc<WakerSlot>,
}

/// What an [`Evictable`](super::Evictable)'s `evict_async` or `promote_async` returns: done
/// when the transition is, with its failure (which, as for `evict`, changed nothing).
pub type ResidencyHandle = Awaitable<Result<(), ModelError>>;

/// The waker of the task awaiting a handle, and whether the completion callback that wakes
/// it is registered.
#[cfg(feature = "async")]
#[derive(Debug, Default)]
struct WakerSlot {
    waker: parking_lot::Mutex<Option<std::task::Waker>>,
    registered: std::sync::atomic::AtomicBool,
}

impl<T> Clone for Awaitable<T> {
    /// Another handle on the same outcome. A clone has its own waker slot, so clones awaited
    /// by different tasks each wake their own.
    fn clone(&self) -> Self {
        Awaitable {
            cell: self.cell.clone(),
            #[cfg(feature = "async")]
            waker: Arc::default(),
        }
    }
}

impl<T> Awaitable<T> {
    /// A handle on `cell`'s outcome.
    pub(crate) fn on(cell: Arc<Completion<T>>) -> Self {
        Awaitable {
            cell,
            #[cfg(feature = "async")]
            waker: Arc::default(),
        }
    }

    /// A handle already done with `outcome`.
    pub(crate) fn done(outcome: T) -> Self {
        let cell = Arc::new(Completion::new());
        cell.commit(outcome);
        Self::on(cell)
    }

    /// Whether the work has reached its terminal outcome. Never blocks.
    pub fn is_done(&self) -> bool {
        self.cell.is_done()
    }

    /// Run `callback` once with the outcome: on the finishing thread, or at once if done.
    pub fn on_done<F: FnOnce(&T) + Send + 'static>(&self, callback: F) {
        self.cell.on_done(callback)
    }
}

impl<T: Clone> Awaitable<T> {
    /// Block until the work finishes; its outcome (the same for every caller).
    pub fn wait(&self) -> T {
        self.cell.wait().clone()
    }

    /// [`wait`](Self::wait) giving up after `timeout` with `None`.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<T> {
        self.cell.wait_timeout(timeout).cloned()
    }
}

#[cfg(feature = "async")]
impl<T: Clone> std::future::Future for Awaitable<T> {
    type Output = T;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<T> {
        use std::sync::atomic::Ordering;
        use std::task::Poll;
        if let Some(outcome) = self.cell.get() {
            return Poll::Ready(outcome.clone());
        }
        {
            let mut slot = self.waker.waker.lock();
            match &*slot {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *slot = Some(cx.waker().clone()),
            }
        }
        if !self.waker.registered.swap(true, Ordering::AcqRel) {
            let slot = self.waker.clone();
            // Runs once, on the finishing thread (or here, if the work finished meanwhile).
            self.cell.on_done(move |_| {
                if let Some(w) = slot.waker.lock().take() {
                    w.wake();
                }
            });
        }
        // The work may have finished between the first look and storing the waker.
        match self.cell.get() {
            Some(outcome) => Poll::Ready(outcome.clone()),
            None => Poll::Pending,
        }
    }
}
