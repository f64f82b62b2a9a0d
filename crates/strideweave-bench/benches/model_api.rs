//! The Rust object model's hot paths side by side with what a Rust user would otherwise
//! write, printing the ratios at the end of one run (issue 25's goals: `get`/`set` of f32 on
//! a host tensor ≤ 3× a slice read/write; a 4 KiB host→host `move_async(..).await` ≤ 20×
//! `copy_from_slice` plus the allocation it replaces). Asserts nothing about time.
//!
//! `Tensor::get`/`set` make every check on every call: on the thread that holds the host
//! carrier's bias (see `strideweave_core::model`'s `element_bias`) with plain loads and
//! stores, which is what the loop below measures after its first call. A `HostView`/
//! `HostViewMut` makes the checks once when lent and holds the store's lock, so both paths
//! are measured.
//!
//! `cargo bench -p strideweave-bench --bench model_api [-- --quick]`

use std::future::Future;
use std::hint::black_box;
use std::path::PathBuf;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use criterion::{BatchSize, Criterion};
use strideweave_core::model::{move_async, prepare_move, HostCarrier, Tensor};
use strideweave_core::storage::ElemKind;

const N: usize = 1024; // 4 KiB of f32

/// Poll to completion with a no-op waker, spinning (a small host move is done at once).
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::hint::spin_loop();
    }
}

fn element_access(c: &mut Criterion) {
    let t = Tensor::canonical(HostCarrier::zeros(ElemKind::F32, N).unwrap(), &[N]).unwrap();
    let mut slice = vec![0f32; N];
    let mut g = c.benchmark_group("f32 element");
    let mut k = 0usize;
    g.bench_function("Tensor::get", |b| {
        b.iter(|| {
            k = (k + 517) % N;
            black_box(t.get::<f32>(black_box(k)).unwrap())
        })
    });
    {
        let view = t.host_view::<f32>().unwrap();
        g.bench_function("HostView::get", |b| {
            b.iter(|| {
                k = (k + 517) % N;
                black_box(*view.get(black_box(k)).unwrap())
            })
        });
    }
    g.bench_function("slice read", |b| {
        b.iter(|| {
            k = (k + 517) % N;
            black_box(black_box(&slice)[black_box(k)])
        })
    });
    g.bench_function("Tensor::set", |b| {
        b.iter(|| {
            k = (k + 517) % N;
            t.set(black_box(k), black_box(1.5f32)).unwrap()
        })
    });
    {
        let mut view = t.host_view_mut::<f32>().unwrap();
        g.bench_function("HostViewMut::set", |b| {
            b.iter(|| {
                k = (k + 517) % N;
                view.set(black_box(k), black_box(1.5f32)).unwrap()
            })
        });
    }
    g.bench_function("slice write", |b| {
        b.iter(|| {
            k = (k + 517) % N;
            black_box(&mut slice)[black_box(k)] = black_box(1.5f32);
        })
    });
    g.finish();
}

fn small_move(c: &mut Criterion) {
    let values = vec![1.0f32; N];
    let mut g = c.benchmark_group("4 KiB host to host");
    g.bench_function("move_async await", |b| {
        b.iter_batched(
            || Tensor::canonical(HostCarrier::from_f32(&values), &[N]).unwrap(),
            |t| {
                let dst = HostCarrier::zeros(ElemKind::F32, N).unwrap();
                black_box(block_on(move_async(&t, &dst).unwrap()).unwrap())
            },
            BatchSize::SmallInput,
        )
    });
    // The caller runs the transfer itself (a device queue's stand-in): prepare, fill the
    // output the claim admits in one hold of the destination, commit.
    g.bench_function("into_transfer write_from", |b| {
        b.iter_batched(
            || Tensor::canonical(HostCarrier::from_f32(&values), &[N]).unwrap(),
            |t| {
                let dst = HostCarrier::zeros(ElemKind::F32, N).unwrap();
                let (output, commit) = prepare_move(&t, &dst, None).unwrap().into_transfer();
                output.write_from(black_box(&values)).unwrap();
                black_box(commit.commit(Ok(())).unwrap())
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("alloc + copy_from_slice", |b| {
        b.iter(|| {
            let mut dst = vec![0f32; N];
            dst.copy_from_slice(black_box(&values));
            black_box(dst)
        })
    });
    g.finish();
}

/// Criterion's mean estimate of one row, in ns, from its report directory.
fn mean_ns(group: &str, function: &str) -> Option<f64> {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let clean = |s: &str| s.replace(['/', ':', '<', '>', '?', '*', '|', '"', '\\'], "_");
    let path = dir.join("criterion").join(clean(group)).join(clean(function)).join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let mean = &text[text.find("\"mean\"")?..];
    let value = &mean[mean.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
    value[..value.find([',', '}'])?].trim().parse().ok()
}

fn ratio(group: &str, ours: &str, theirs: &str, goal: f64) {
    match (mean_ns(group, ours), mean_ns(group, theirs)) {
        (Some(a), Some(b)) => {
            println!("{group}: {ours} {a:.1} ns / {theirs} {b:.1} ns = {:.1}x (goal <= {goal}x)", a / b)
        }
        _ => println!("{group}: {ours} / {theirs}: no estimates found"),
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    element_access(&mut c);
    small_move(&mut c);
    c.final_summary();
    println!("\nratios of this run:");
    // Checked on every call (carrier state, locks, window, kind, mutability, claims):
    ratio("f32 element", "Tensor::get", "slice read", 3.0);
    ratio("f32 element", "Tensor::set", "slice write", 3.0);
    // The same checks made once, when the typed view is lent:
    ratio("f32 element", "HostView::get", "slice read", 3.0);
    ratio("f32 element", "HostViewMut::set", "slice write", 3.0);
    ratio("4 KiB host to host", "move_async await", "alloc + copy_from_slice", 20.0);
    // The caller-run transfer, held to the engine's goal.
    ratio("4 KiB host to host", "into_transfer write_from", "alloc + copy_from_slice", 20.0);
}
