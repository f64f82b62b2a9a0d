//! A configurable foreign carrier for the object model's tests: slots in a `Vec<f32>`,
//! with an optional gate that holds every slot read (so a move stays pending as long as a
//! test needs), injected write failures and panics, and a slow release hook.

use super::carrier::HookToken;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::carrier::Carrier;
use super::error::{ModelError, Result};
use super::state::CarrierState;
use crate::storage::{ElemKind, Scalar};

/// `probe`'s answer, run on a thread of its own once `held` says an operation gated by `gate`
/// holds its carrier: a probe that waited for that operation (a lock, not a claim) would
/// wait forever, so after 10 s the gate opens and the test fails.
pub(crate) fn probe_while_held<R: Send + 'static>(
    gate: &Gate,
    held: impl Fn() -> bool + Send + 'static,
    probe: impl FnOnce() -> R + Send + 'static,
) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        while !held() {
            std::thread::yield_now();
        }
        let _ = tx.send(probe());
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| {
        gate.open();
        panic!("another thread's access waited for the running operation instead of being answered at once")
    })
}

/// A gate that starts closed; `open` lets every waiter through for good.
#[derive(Default)]
pub(crate) struct Gate {
    open: Mutex<bool>,
    cond: Condvar,
    /// How many callers are held at the gate now.
    waiting: std::sync::atomic::AtomicUsize,
}

impl Gate {
    pub fn open(&self) {
        *self.open.lock() = true;
        self.cond.notify_all();
    }

    /// Whether somebody waits at the gate: the gated operation is under way.
    pub fn is_waited_on(&self) -> bool {
        self.waiting.load(std::sync::atomic::Ordering::SeqCst) > 0
    }

    fn pass(&self) {
        let mut open = self.open.lock();
        self.waiting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        while !*open {
            self.cond.wait(&mut open);
        }
        self.waiting.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[derive(Default)]
pub(crate) struct VecCarrier {
    pub state: CarrierState,
    pub slots: Mutex<Vec<f32>>,
    pub gate: Option<Arc<Gate>>,
    /// `write_slot` of this slot index fails.
    pub fail_write_at: Option<usize>,
    /// `read_slot` panics.
    pub panic_on_read: bool,
    pub release_sleep: Duration,
    pub allocatable: bool,
    pub immutable: bool,
    /// Every carrier `allocate_like` made (they share this list, and the gate and the
    /// injected write failure of the carrier that made them).
    pub made: Arc<Mutex<Vec<Arc<VecCarrier>>>>,
    /// `allocate_like` refuses (`NotAllocatable`), as a carrier with no factory does.
    pub no_factory: bool,
    /// `allocate_like` runs this first (a hook that re-enters what called it).
    pub on_allocate: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl Default for CarrierState {
    fn default() -> Self {
        CarrierState::new("VecCarrier")
    }
}

impl VecCarrier {
    pub fn new(values: &[f32]) -> Self {
        VecCarrier { slots: Mutex::new(values.to_vec()), ..Default::default() }
    }

    #[cfg_attr(not(all(feature = "dlpack", feature = "block-devices")), allow(dead_code))]
    pub fn values(&self) -> Vec<f32> {
        self.slots.lock().clone()
    }
}

impl Carrier for VecCarrier {
    fn state(&self, _: &HookToken) -> &CarrierState {
        &self.state
    }

    fn elem_kind(&self) -> ElemKind {
        ElemKind::F32
    }

    fn size(&self) -> usize {
        self.slots.lock().len()
    }

    fn read_slot(&self, _: &HookToken, i: usize) -> Result<Scalar> {
        if let Some(gate) = &self.gate {
            gate.pass();
        }
        assert!(!self.panic_on_read, "injected read panic");
        Ok(Scalar::F32(self.slots.lock()[i]))
    }

    fn write_slot(&self, _: &HookToken, i: usize, v: Scalar) -> Result<()> {
        if self.fail_write_at == Some(i) {
            return Err(ModelError::Hook { carrier: "VecCarrier".into(), message: format!("injected failure at {i}") });
        }
        let Scalar::F32(x) = v else { unreachable!("the framework checks kinds") };
        self.slots.lock()[i] = x;
        Ok(())
    }

    fn is_mutable_hook(&self) -> bool {
        !self.immutable
    }

    fn release_storage(&self, _: &HookToken) {
        std::thread::sleep(self.release_sleep);
        self.slots.lock().clear();
    }

    fn can_allocate(&self) -> bool {
        self.allocatable
    }

    fn allocate_like(&self, slots: usize) -> Result<Arc<dyn Carrier>> {
        if self.no_factory {
            return Err(ModelError::NotAllocatable { carrier: "VecCarrier".into() });
        }
        if let Some(hook) = &self.on_allocate {
            hook();
        }
        let fresh = Arc::new(VecCarrier {
            slots: Mutex::new(vec![0.0; slots]),
            gate: self.gate.clone(),
            fail_write_at: self.fail_write_at,
            made: self.made.clone(),
            ..Default::default()
        });
        self.made.lock().push(fresh.clone());
        Ok(fresh)
    }

    fn allocate(&self, _: &HookToken, slots: usize) -> Result<()> {
        assert!(self.allocatable, "allocate called on a fixed carrier");
        self.slots.lock().resize(slots, 0.0);
        Ok(())
    }
}

/// Drive `future` to its output on this thread: poll, park until woken (a minimal executor,
/// for the handles' `Future` impls).
#[cfg(feature = "async")]
pub(crate) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark()
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(output) => return output,
            std::task::Poll::Pending => std::thread::park(),
        }
    }
}
