//! Side-by-side timings of the Rust object model against what a Rust user would otherwise
//! write (a slice copy, a slice index, `std::fs` I/O). Prints figures and ratios; asserts
//! nothing about time. `benches/bench_core_model.py` runs it under `make bench`.
//!
//! `cargo run --release -p strideweave-core --example bench_model [-- --quick]`

use std::hint::black_box;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

use strideweave_core::model::{
    move_async, move_tensor, Carrier, Evictable, FileCarrier, HostCarrier, Tensor, TiledEvictable,
};
use strideweave_core::storage::{ElemKind, Scalar};

/// Median seconds per call of `f` over `rounds` batches of `per_batch` calls.
fn time_per_call(rounds: usize, per_batch: usize, mut f: impl FnMut()) -> f64 {
    let mut samples: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..per_batch {
                f();
            }
            t.elapsed().as_secs_f64() / per_batch as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn row(what: &str, ours: f64, theirs: f64, baseline: &str) {
    println!(
        "{what:<44} {:>10.2} us  vs {baseline:<26} {:>10.2} us  ratio {:>6.2}x",
        ours * 1e6,
        theirs * 1e6,
        ours / theirs
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 5 } else { 21 };

    // Host -> host move of 1024 f32. A move releases its source, so every call builds fresh
    // carriers; the plain-Rust side does the same: two fresh Vec<f32> and a copy.
    let values: Vec<f32> = (0..1024).map(|v| v as f32).collect();
    let setup = || {
        let t = Tensor::canonical(HostCarrier::from_f32(&values), &[1024]).unwrap();
        let dst: Arc<dyn Carrier> = HostCarrier::zeros(ElemKind::F32, 1024).unwrap();
        (t, dst)
    };
    let blocking = time_per_call(rounds, 200, || {
        let (t, dst) = setup();
        black_box(move_tensor(&t, &dst).unwrap());
    });
    let asynchronous = time_per_call(rounds, 200, || {
        let (t, dst) = setup();
        black_box(move_async(&t, &dst).unwrap().wait().unwrap());
    });
    let theirs = time_per_call(rounds, 200, || {
        let src = black_box(values.clone());
        let mut dst = vec![0f32; 1024];
        dst.copy_from_slice(&src);
        black_box(dst);
    });
    row("new carriers + move_tensor, 1024 f32", blocking, theirs, "2 Vecs + copy_from_slice");
    row("new carriers + move_async+wait, 1024 f32", asynchronous, theirs, "2 Vecs + copy_from_slice");

    // Element access.
    let t = Tensor::canonical(HostCarrier::from_f32(&values), &[1024]).unwrap();
    let plain = values.clone();
    let ours = time_per_call(rounds, 20_000, || {
        black_box(t.get::<f32>(black_box(517)).unwrap());
    });
    let theirs = time_per_call(rounds, 20_000, || {
        black_box(plain[black_box(517)]);
    });
    row("Tensor::get", ours, theirs, "slice[i]");
    let mut plain = values.clone();
    let ours = time_per_call(rounds, 20_000, || {
        t.set(black_box(517), Scalar::F32(1.0)).unwrap();
    });
    let theirs = time_per_call(rounds, 20_000, || {
        plain[black_box(517)] = black_box(1.0);
    });
    row("Tensor::set", ours, theirs, "slice[i] = v");

    // Bulk host -> file of 64 MiB (16 MiB quick), a fresh file per call (removed on drop),
    // against creating, writing and removing a file of the same bytes with std::fs.
    let n = if quick { 4 << 20 } else { 16 << 20 };
    let bytes = vec![0u8; n * 4];
    let dir = std::env::temp_dir();
    let bulk_rounds = if quick { 3 } else { 7 };
    let ours = time_per_call(bulk_rounds, 1, || {
        let t = Tensor::canonical(HostCarrier::zeros(ElemKind::F32, n).unwrap(), &[n]).unwrap();
        let file: Arc<dyn Carrier> = FileCarrier::temp(ElemKind::F32).unwrap();
        black_box(move_tensor(&t, &file).unwrap());
    });
    let theirs = time_per_call(bulk_rounds, 1, || {
        let path = dir.join(format!("sw-bench-{}.bin", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(black_box(&bytes)).unwrap();
        drop(f);
        std::fs::remove_file(&path).unwrap();
    });
    row(&format!("move_tensor {} MiB host->file", (n * 4) >> 20), ours, theirs, "File::write_all");

    // A tier round trip: evict host -> file and promote back, against writing the bytes to a
    // file and reading them back with std::fs.
    let e = Evictable::new(HostCarrier::zeros(ElemKind::F32, n).unwrap(), FileCarrier::temp(ElemKind::F32).unwrap())
        .unwrap();
    let ours = time_per_call(bulk_rounds, 1, || {
        e.evict().unwrap();
        e.promote().unwrap();
    });
    let mut back = vec![0u8; n * 4];
    let theirs = time_per_call(bulk_rounds, 1, || {
        let path = dir.join(format!("sw-bench-tier-{}.bin", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(black_box(&bytes)).unwrap();
        drop(f);
        std::fs::File::open(&path).unwrap().read_exact(&mut back).unwrap();
        std::fs::remove_file(&path).unwrap();
    });
    row(&format!("Evictable evict+promote {} MiB", (n * 4) >> 20), ours, theirs, "write_all + read_exact");
    // Clean tiers: after the first eviction a promote copies and an evict writes nothing.
    let clean = Evictable::retaining_clean(
        HostCarrier::zeros(ElemKind::F32, n).unwrap(),
        FileCarrier::temp(ElemKind::F32).unwrap(),
    )
    .unwrap();
    clean.evict().unwrap();
    let ours = time_per_call(bulk_rounds, 1, || {
        clean.promote().unwrap();
        clean.evict().unwrap();
    });
    // The plain-Rust equivalent reads a file written once into a buffer it keeps.
    let path = dir.join(format!("sw-bench-clean-{}.bin", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let theirs = time_per_call(bulk_rounds, 1, || {
        std::fs::File::open(&path).unwrap().read_exact(black_box(&mut back)).unwrap();
    });
    std::fs::remove_file(&path).unwrap();
    row(&format!("clean Evictable promote+evict {} MiB", (n * 4) >> 20), ours, theirs, "File::read_exact");
    // The same clean round trip, the promote started on an engine thread and waited for.
    let ours = time_per_call(bulk_rounds, 1, || {
        clean.promote_async().unwrap().wait().unwrap();
        clean.evict().unwrap();
    });
    row(&format!("clean Evictable promote_async+evict {} MiB", (n * 4) >> 20), ours, theirs, "File::read_exact");

    // Small tiles (issue 24's figure): 1024 tiles of 16 KiB evicted to files and promoted
    // back, against writing the same bytes to one file and reading them back.
    let (tiles, tile) = (1024usize, 4096usize);
    let tiled = TiledEvictable::new(
        HostCarrier::zeros(ElemKind::F32, tiles * tile).unwrap(),
        FileCarrier::temp(ElemKind::F32).unwrap(),
        &[tiles],
        &[tile],
    )
    .unwrap();
    let all: Vec<usize> = (0..tiles).collect();
    let ours = time_per_call(bulk_rounds, 1, || {
        tiled.evict(&all).unwrap();
        tiled.promote(&all).unwrap();
    });
    let small = &bytes[..tiles * tile * 4];
    let mut back = vec![0u8; small.len()];
    let theirs = time_per_call(bulk_rounds, 1, || {
        let path = dir.join(format!("sw-bench-tiles-{}.bin", std::process::id()));
        std::fs::write(&path, black_box(small)).unwrap();
        std::fs::File::open(&path).unwrap().read_exact(&mut back).unwrap();
        std::fs::remove_file(&path).unwrap();
    });
    row("TiledEvictable 1024 x 16 KiB evict+promote", ours, theirs, "write + read_exact");

    // A projection: every other tile, half of them evicted (read in place from the slab),
    // into a fresh dense tensor, against gathering the same tiles from a Vec.
    tiled.evict(&(0..tiles).step_by(4).collect::<Vec<_>>()).unwrap();
    let picks: Vec<usize> = (0..tiles).step_by(2).collect();
    let ours = time_per_call(bulk_rounds, 1, || {
        black_box(tiled.project(std::slice::from_ref(&picks)).unwrap());
    });
    let flat = vec![0f32; tiles * tile];
    let theirs = time_per_call(bulk_rounds, 1, || {
        let mut out = vec![0f32; picks.len() * tile];
        for (k, &p) in picks.iter().enumerate() {
            out[k * tile..(k + 1) * tile].copy_from_slice(&flat[p * tile..(p + 1) * tile]);
        }
        black_box(out);
    });
    row("TiledEvictable project 512 of 1024 tiles", ours, theirs, "Vec gather (all in memory)");
}
