//! Biased element access (`element_bias`) through the public API: a host tensor's `get`/`set`
//! without a lock on the thread that holds the bias, and every transition of another thread
//! (a write, a move, a release, a lent view) racing it. Values and versions stay exact, the
//! loser gets the specified error, and nothing crashes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use super::carrier::HOOK;
use super::*;
use crate::storage::ElemKind;

const THREADS: usize = 8;
const ROUNDS: usize = 300;

fn host_tensor(values: &[f32]) -> (Arc<HostCarrier>, Tensor) {
    let host = HostCarrier::from_f32(values);
    let t = Tensor::canonical(host.clone(), &[values.len()]).unwrap();
    (host, t)
}

/// Whether this thread holds `carrier`'s bias: its accesses go without the lock.
fn biased_here(carrier: &HostCarrier) -> bool {
    carrier.state(HOOK).cell().is_biased_here()
}

#[test]
fn the_thread_that_accesses_a_host_tensor_gets_its_bias_and_keeps_exact_values() {
    let (host, t) = host_tensor(&[1.0, 2.0, 3.0]);
    assert!(!biased_here(&host));
    assert_eq!(t.get::<f32>(1).unwrap(), 2.0); // the locked way, which biases
    assert!(biased_here(&host), "membarrier is available on Linux, so the carrier is biased");
    t.set(1, 5.0f32).unwrap(); // biased
    t.set(2, crate::storage::Scalar::F32(6.0)).unwrap();
    assert_eq!(t.get::<f32>(1).unwrap(), 5.0);
    assert_eq!(t.values_f32().unwrap(), vec![1.0, 5.0, 6.0]);
    assert_eq!(host.version(), 2, "every biased write counts once");
    // The checks are the locked way's: a wrong kind, a slot out of range.
    assert!(matches!(t.get::<i32>(0), Err(ModelError::ValueKind { .. })));
    assert!(matches!(t.set(0, 1i32), Err(ModelError::ValueKind { .. })));
    assert!(t.get::<f32>(3).is_err());
    assert_eq!(host.version(), 2, "a refused write counts nothing");
}

#[test]
fn an_immutable_host_tensor_refuses_a_biased_write() {
    let host = HostCarrier::with_mutability(ElemKind::F32, 2, false).unwrap();
    let t = Tensor::canonical(host.clone(), &[2]).unwrap();
    t.get::<f32>(0).unwrap();
    assert!(biased_here(&host));
    assert!(matches!(t.set(0, 1.0f32), Err(ModelError::NotMutable { .. })));
    assert_eq!((t.get::<f32>(0).unwrap(), host.version()), (0.0, 0));
}

#[test]
fn another_threads_writes_revoke_the_bias_and_every_write_counts() {
    const WRITES: usize = 20_000;
    let (host, t) = host_tensor(&[0.0; THREADS]);
    let start = Arc::new(Barrier::new(THREADS));
    thread::scope(|s| {
        for k in 0..THREADS {
            let (t, start) = (&t, start.clone());
            s.spawn(move || {
                start.wait();
                for n in 1..=WRITES {
                    t.set(k, n as f32).unwrap();
                    assert_eq!(t.get::<f32>(k).unwrap(), n as f32);
                }
            });
        }
    });
    assert_eq!(t.values_f32().unwrap(), vec![WRITES as f32; THREADS]);
    assert_eq!(host.version(), (THREADS * WRITES) as u64, "no write lost or counted twice");
}

/// Writers (one of them holds the bias) race a move of their tensor: each writer's last
/// accepted value is what the moved tensor holds, the source counts exactly the accepted
/// writes, and the writes after the move are refused (`Claimed` while pending, `Released`
/// after).
#[test]
fn biased_writes_racing_a_move_lose_nothing() {
    for round in 0..ROUNDS {
        let (host, t) = host_tensor(&[0.0; THREADS]);
        t.get::<f32>(0).unwrap(); // the test thread holds the bias at first
        let start = Arc::new(Barrier::new(THREADS + 1));
        let (moved, last) = thread::scope(|s| {
            let writers: Vec<_> = (0..THREADS)
                .map(|k| {
                    let (t, start) = (&t, start.clone());
                    s.spawn(move || {
                        t.get::<f32>(k).unwrap(); // may take the bias
                        start.wait();
                        let mut last = 0.0;
                        for n in 1.. {
                            match t.set(k, n as f32) {
                                Ok(()) => last = n as f32,
                                Err(ModelError::Claimed { .. } | ModelError::Released { .. }) => return last,
                                Err(e) => panic!("round {round}: {e}"),
                            }
                        }
                        unreachable!()
                    })
                })
                .collect();
            start.wait();
            thread::yield_now();
            let destination: Arc<dyn Carrier> = if round % 2 == 0 {
                HostCarrier::zeros(ElemKind::F32, THREADS).unwrap()
            } else {
                FileCarrier::temp(ElemKind::F32).unwrap()
            };
            let moved = move_tensor(&t, &destination).unwrap();
            (moved, writers.into_iter().map(|w| w.join().unwrap()).collect::<Vec<f32>>())
        });
        assert_eq!(moved.values_f32().unwrap(), last, "round {round}");
        assert_eq!(host.version(), last.iter().map(|&v| v as u64).sum::<u64>(), "round {round}");
        assert!(host.is_released());
    }
}

/// Readers (one of them holds the bias) race a release, after which the freed memory is
/// reused at once with other values: every read is the value or `Released`, never what the
/// memory holds after the free, and the readers stop once released.
#[test]
fn biased_reads_racing_a_release_see_the_value_or_released() {
    const SLOTS: usize = 64;
    for round in 0..ROUNDS {
        let (host, t) = host_tensor(&[7.0; SLOTS]);
        let start = Arc::new(Barrier::new(THREADS + 1));
        thread::scope(|s| {
            for k in 0..THREADS {
                let (t, start) = (&t, start.clone());
                s.spawn(move || {
                    let slot = (k * 7) % SLOTS;
                    t.get::<f32>(slot).unwrap();
                    start.wait();
                    loop {
                        match t.get::<f32>(slot) {
                            Ok(v) => assert_eq!(v, 7.0, "round {round}: a read of freed memory"),
                            Err(ModelError::Released { .. }) => return,
                            Err(e) => panic!("round {round}: {e}"),
                        }
                    }
                });
            }
            start.wait();
            thread::yield_now();
            host.release().unwrap();
            // The allocator hands the freed buffer out again: fill it with other values.
            let reuse: Vec<_> = (0..16).map(|_| HostCarrier::from_f32(&[9.0; SLOTS])).collect();
            drop(reuse);
        });
        assert!(host.is_released());
    }
}

/// A biased writer races lent views of its tensor: while a view lives, no write lands (the
/// view's values and the version stay as they were), and no write is lost.
#[test]
fn a_lent_view_stops_biased_writes_for_its_life() {
    let (host, t) = host_tensor(&[0.0; 4]);
    let done = AtomicBool::new(false);
    let accepted = thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut accepted = 0u64;
            let mut n = 0u32;
            while !done.load(Ordering::Relaxed) {
                n += 1;
                match t.set(0, n as f32) {
                    Ok(()) => accepted += 1,
                    Err(ModelError::Claimed { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            accepted
        });
        for _ in 0..ROUNDS {
            let Ok(view) = t.host_view::<f32>() else { continue };
            let (first, version) = (*view.get(0).unwrap(), host.version());
            for _ in 0..200 {
                std::hint::spin_loop();
            }
            assert_eq!(*view.get(0).unwrap(), first, "a write landed under a lent view");
            assert_eq!(host.version(), version);
        }
        done.store(true, Ordering::Relaxed);
        writer.join().unwrap()
    });
    assert_eq!(host.version(), accepted, "every accepted write counts once");
}

/// A tensor read on one thread is moved into by another while the reader keeps reading the
/// destination: every read is the old value or the moved one, never a torn or freed one.
#[test]
fn biased_reads_of_a_destination_racing_a_move_into_it() {
    for round in 0..ROUNDS / 3 {
        let destination = HostCarrier::zeros(ElemKind::F32, 4).unwrap();
        let view = Tensor::canonical(destination.clone(), &[4]).unwrap();
        let (_, source) = host_tensor(&[1.0, 2.0, 3.0, 4.0]);
        view.get::<f32>(0).unwrap();
        let start = Arc::new(Barrier::new(THREADS + 1));
        let done = AtomicBool::new(false);
        thread::scope(|s| {
            for k in 0..THREADS {
                let (view, start, done) = (&view, start.clone(), &done);
                s.spawn(move || {
                    view.get::<f32>(k % 4).unwrap();
                    start.wait();
                    while !done.load(Ordering::Acquire) {
                        match view.get::<f32>(k % 4) {
                            Ok(v) => assert!(v == 0.0 || v == (k % 4 + 1) as f32, "round {round}: {v}"),
                            Err(ModelError::Claimed { .. }) => {}
                            Err(e) => panic!("round {round}: {e}"),
                        }
                    }
                });
            }
            start.wait();
            let moved = move_tensor(&source, &(destination.clone() as Arc<dyn Carrier>)).unwrap();
            assert_eq!(moved.values_f32().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
            done.store(true, Ordering::Release);
        });
    }
}
