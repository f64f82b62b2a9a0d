//! Rust API benchmarks, each side by side with what a caller would otherwise write, so the
//! report reads as a ratio: integer-key indexing vs decode-then-index, the injectivity
//! shortcut (steps 1-4) vs enumerating the image, and a completion cell's commit-and-wait
//! round trip vs a plain `std::sync::mpsc` channel.

use std::hint::black_box;
use std::sync::{mpsc, Arc};
use std::thread;

use criterion::{criterion_group, criterion_main, Criterion};
use strideweave_core::engine::Completion;
use strideweave_core::layout::{Layout, Shape, Stride};

fn layout(extents: &[i64], strides: &[i64]) -> Layout {
    Layout::new(Shape::flat(extents).unwrap(), Stride::flat(strides).unwrap()).unwrap()
}

fn indexing(c: &mut Criterion) {
    let l = layout(&[4, 8, 16, 2], &[1, 40, 4, 700]);
    let n = l.size();
    let mut g = c.benchmark_group("layout index, all 1024 integer keys");
    g.bench_function("index_of_int", |b| b.iter(|| (0..n).map(|k| l.index_of_int(black_box(k))).sum::<i64>()));
    g.bench_function("decode + index_of_coord", |b| {
        b.iter(|| (0..n).map(|k| l.index_of_coord(&l.decode(black_box(k)).unwrap()).unwrap()).sum::<i64>())
    });
    g.finish();
}

/// Brute force: mark every reached index in a bit set (what the spec's step 5 falls back to).
fn injective_by_enumeration(l: &Layout) -> bool {
    let mut seen = vec![false; l.cosize() as usize];
    (0..l.size()).all(|k| !std::mem::replace(&mut seen[l.index_of_int(k) as usize], true))
}

fn injectivity(c: &mut Criterion) {
    let gapped = layout(&[16, 16, 8], &[1, 20, 400]);
    let mut g = c.benchmark_group("is_injective, gapped 16x16x8");
    g.bench_function("is_injective", |b| b.iter(|| black_box(&gapped).is_injective()));
    g.bench_function("enumerate image", |b| b.iter(|| injective_by_enumeration(black_box(&gapped))));
    g.finish();
}

fn completion(c: &mut Criterion) {
    let mut g = c.benchmark_group("commit on another thread, wait here");
    g.bench_function("Completion", |b| {
        b.iter(|| {
            let cell = Arc::new(Completion::new());
            let writer = cell.clone();
            let t = thread::spawn(move || writer.commit(7u64));
            let v = *cell.wait();
            t.join().unwrap();
            v
        })
    });
    g.bench_function("mpsc channel", |b| {
        b.iter(|| {
            let (tx, rx) = mpsc::channel();
            let t = thread::spawn(move || tx.send(7u64).unwrap());
            let v = rx.recv().unwrap();
            t.join().unwrap();
            v
        })
    });
    g.finish();
}

criterion_group!(benches, indexing, injectivity, completion);
criterion_main!(benches);
