//! `.await` on moves with a hand-written executor: no async runtime is needed, because a
//! [`MoveHandle`] is a `Future` whose finishing thread wakes the task (the `async` feature,
//! on by default).
//!
//! `cargo run -p strideweave-core --example async_moves`

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use strideweave_core::model::{move_async, FileCarrier, HostCarrier, ModelError, Tensor};
use strideweave_core::storage::ElemKind;

/// Wakes the thread that runs [`block_on`].
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Run `future` to completion on this thread, parking while it is pending.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(out) => return out,
            Poll::Pending => thread::park(),
        }
    }
}

/// Host -> file -> host, awaiting each move; the sum of what came back.
pub async fn round_trip(values: &[f32]) -> Result<f32, ModelError> {
    let host = HostCarrier::from_f32(values);
    let t = Tensor::canonical(&host, &[values.len()])?;
    let file = FileCarrier::temp(ElemKind::F32)?;
    let on_file = move_async(&t, &file)?.await?; // a bulk move on an engine worker
    let back = HostCarrier::zeros(ElemKind::F32, values.len())?;
    let t = move_async(&on_file, &back)?.await?;
    Ok(t.as_slice::<f32>()?.iter().sum())
}

#[allow(dead_code)] // the example's entry point; tests/examples.rs runs the rest
fn main() {
    let values: Vec<f32> = (0..100_000).map(|i| (i % 7) as f32).collect();
    let sum = block_on(round_trip(&values)).expect("the round trip");
    assert_eq!(sum, values.iter().sum::<f32>());
    println!("moved {} f32 to a file and back; sum {sum}", values.len());
}
