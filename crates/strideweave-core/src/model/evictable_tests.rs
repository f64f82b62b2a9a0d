//! The Rust `Evictable`: ownership of its tiers, evict/promote, failure atomicity.

use super::*;
use crate::storage::{ElemKind, Scalar};
use std::sync::Arc;

#[test]
fn a_failed_evict_leaves_values_tiers_and_version_as_they_were() {
    let host = HostCarrier::from_f32(&[1.0, 2.0, 3.0]);
    // Too small, and it cannot make a larger tier like itself.
    let small = Arc::new(super::test_support::VecCarrier {
        no_factory: true,
        ..super::test_support::VecCarrier::new(&[0.0, 0.0])
    });
    let e = Evictable::new(&host, &small).unwrap();
    assert!(matches!(e.evict(), Err(ModelError::NotAllocatable { .. })));
    assert_eq!(e.resident(), Tier::Primary);
    assert_eq!((e.version(), small.size(), host.is_released(), small.is_released()), (0, 2, false, false));
    let t = Tensor::canonical(&e, &[3]).unwrap();
    assert_eq!(t.values_f32().unwrap(), vec![1.0, 2.0, 3.0]);
}

#[test]
fn a_transfer_that_fails_releases_the_tier_it_made_and_changes_nothing() {
    let primary = Arc::new(super::test_support::VecCarrier::new(&[1.0, 2.0]));
    // An empty file alone in its directory: the evict makes a fresh file beside it.
    let dir = std::env::temp_dir().join(format!("strideweave-evict-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = FileCarrier::create(&dir.join("secondary"), ElemKind::F32).unwrap();
    let e = Evictable::new(&primary, &file).unwrap();
    primary.slots.lock().truncate(1); // the source now fails its second read
    assert!(e.evict().is_err());
    assert_eq!((e.resident(), primary.is_released()), (Tier::Primary, false));
    assert!(super::carrier::same_carrier(&e.secondary(), &(file.clone() as Arc<dyn Carrier>)), "not replaced");
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|f| f.unwrap().file_name()).collect();
    assert_eq!(names, ["secondary"], "the fresh file is gone");
    e.release().unwrap();
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn evict_and_promote_move_the_values_release_what_they_leave_and_are_not_writes() {
    let host = HostCarrier::from_f32(&[1.0, 2.0]);
    let file = FileCarrier::temp(ElemKind::F32).unwrap();
    let e = Evictable::new(&host, &file).unwrap();
    e.evict().unwrap();
    e.evict().unwrap(); // already there: nothing to do
                        // The empty file was too small: a fresh one beside it took the values, and it went.
    let secondary = e.secondary();
    assert!(file.is_released() && host.is_released() && host.is_owned());
    assert_eq!((e.resident(), secondary.size(), e.version(), e.size()), (Tier::Secondary, 2, 0, 2));
    assert!(matches!(e.get(0), Err(ModelError::Evicted { .. })));
    assert!(matches!(e.set(0, Scalar::F32(5.0)), Err(ModelError::Evicted { .. })));
    assert_eq!(e.version(), 0);
    e.promote().unwrap();
    assert!(secondary.is_released() && !e.primary().is_released());
    assert_eq!((e.resident(), e.version()), (Tier::Primary, 0));
    e.set(0, Scalar::F32(5.0)).unwrap();
    e.evict().unwrap();
    e.promote().unwrap();
    assert_eq!((e.get(0).unwrap(), e.get(1).unwrap(), e.version()), (Scalar::F32(5.0), Scalar::F32(2.0), 1));
}

#[test]
fn the_composite_owns_its_tiers_and_a_failed_construction_adopts_nothing() {
    let (a, b, c) = (HostCarrier::from_f32(&[1.0]), HostCarrier::from_f32(&[2.0]), HostCarrier::from_f32(&[3.0]));
    let e = Evictable::new(&a, &b).unwrap();
    assert!(matches!(a.set(0, Scalar::F32(0.0)), Err(ModelError::NotMutable { .. })));
    assert!(matches!(b.release(), Err(ModelError::Owned { .. })));
    let t = Tensor::canonical(&a, &[1]).unwrap();
    assert!(move_tensor(&t, HostCarrier::zeros(ElemKind::F32, 1).unwrap()).is_err());
    assert!(Evictable::new(&c, &b).is_err()); // b is owned already
    assert!(!c.is_owned(), "the first tier is given back when the second refuses");
    e.release().unwrap();
    assert!(a.is_released() && b.is_released());
}

/// A secondary tier that counts the slots written into it (a foreign carrier: its transfers
/// go slot by slot, through its hooks).
struct Counting {
    inner: super::test_support::VecCarrier,
    writes: std::sync::atomic::AtomicUsize,
}

impl Carrier for Counting {
    fn state(&self, token: &HookToken) -> &CarrierState {
        self.inner.state(token)
    }

    fn elem_kind(&self) -> ElemKind {
        ElemKind::F32
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn read_slot(&self, token: &HookToken, i: usize) -> Result<Scalar, ModelError> {
        self.inner.read_slot(token, i)
    }

    fn write_slot(&self, token: &HookToken, i: usize, v: Scalar) -> Result<(), ModelError> {
        self.writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.write_slot(token, i, v)
    }

    fn is_mutable_hook(&self) -> bool {
        true
    }
}

#[test]
fn a_clean_tier_is_written_only_when_its_values_changed() {
    use std::sync::atomic::Ordering;
    let host = HostCarrier::from_f32(&[1.0, 2.0, 3.0]);
    // As large as the primary: the evict writes into it, and a copy keeps it live.
    let secondary =
        Arc::new(Counting { inner: super::test_support::VecCarrier::new(&[0.0; 3]), writes: Default::default() });
    let e = Evictable::retaining_clean(&host, &secondary).unwrap();
    e.evict().unwrap();
    assert_eq!(secondary.writes.load(Ordering::Relaxed), 3);
    e.promote().unwrap();
    assert_eq!((secondary.is_released(), e.is_clean()), (false, true)); // kept as the clean copy
    e.evict().unwrap();
    assert_eq!(secondary.writes.load(Ordering::Relaxed), 3, "a clean evict writes nothing");
    e.promote().unwrap();
    e.set(2, Scalar::F32(30.0)).unwrap();
    assert!(!e.is_clean());
    e.evict().unwrap();
    assert_eq!(secondary.writes.load(Ordering::Relaxed), 6, "a dirty evict writes the values back");
    e.promote().unwrap();
    assert_eq!(Tensor::canonical(&e, &[3]).unwrap().values_f32().unwrap(), vec![1.0, 2.0, 30.0]);
}

#[test]
fn a_large_tier_moves_between_host_memory_and_a_file_in_bulk() {
    // 4 Mi slots: one span each way (slot by slot, 4 Mi positioned reads would take seconds).
    let n = 4 << 20;
    let values: Vec<f32> = (0..n).map(|i| (i % 1021) as f32).collect();
    let host = HostCarrier::from_f32(&values);
    let file = FileCarrier::temp(ElemKind::F32).unwrap();
    let e = Evictable::new(&host, &file).unwrap();
    e.evict().unwrap();
    assert_eq!((e.secondary().size(), host.is_released()), (n, true));
    e.promote().unwrap();
    e.set(n - 1, Scalar::F32(-1.0)).unwrap();
    e.evict().unwrap();
    e.promote().unwrap();
    assert!(e.secondary().is_released());
    let back = Tensor::canonical(&e, &[n]).unwrap().values_f32().unwrap();
    assert_eq!(&back[..n - 1], &values[..n - 1]);
    assert_eq!(back[n - 1], -1.0);
}

#[test]
fn a_move_into_the_composite_makes_its_clean_copy_stale() {
    let e =
        Evictable::retaining_clean(HostCarrier::from_f32(&[1.0]), FileCarrier::temp_zeros(ElemKind::F32, 1).unwrap())
            .unwrap();
    e.evict().unwrap();
    e.promote().unwrap();
    assert!(e.is_clean());
    let t = Tensor::canonical(HostCarrier::from_f32(&[7.0]), &[1]).unwrap();
    move_tensor(&t, e.clone() as Arc<dyn Carrier>).unwrap(); // writes no version
    assert_eq!((e.version(), e.is_clean()), (0, false));
    e.evict().unwrap(); // a dirty evict: written back
    e.promote().unwrap();
    assert_eq!(e.get(0).unwrap(), Scalar::F32(7.0));
}

/// 8 threads × 300 rounds on one composite: two evict and promote, four write a slot each,
/// two read. No write is lost across the transitions, a refused access is `Evicted` (or
/// `Claimed` while a transition holds the composite), and the version counts exactly the
/// writes that succeeded.
#[test]
fn transitions_racing_writes_and_reads_lose_no_write() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Barrier;
    const ROUNDS: usize = 300;
    let e = Evictable::retaining_clean(HostCarrier::from_f32(&[0.0; 4]), FileCarrier::temp(ElemKind::F32).unwrap())
        .unwrap();
    let start = Barrier::new(8);
    let writes = AtomicU64::new(0);
    let last: Vec<f32> = std::thread::scope(|s| {
        for mover in 0..2 {
            let (e, start) = (&e, &start);
            s.spawn(move || {
                start.wait();
                for round in 0..ROUNDS {
                    if (round + mover) % 2 == 0 { e.evict() } else { e.promote() }.unwrap();
                }
            });
        }
        for _ in 0..2 {
            let (e, start) = (&e, &start);
            s.spawn(move || {
                start.wait();
                for round in 0..ROUNDS {
                    match e.get(round % 4) {
                        // Refused while a transition holds the composite (§3.2).
                        Ok(_) | Err(ModelError::Evicted { .. } | ModelError::Claimed { .. }) => {}
                        Err(other) => panic!("a read got {other:?}"),
                    }
                }
            });
        }
        let writers: Vec<_> = (0..4)
            .map(|slot| {
                let (e, start, writes) = (&e, &start, &writes);
                s.spawn(move || {
                    start.wait();
                    let mut written = 0.0;
                    for round in 1..=ROUNDS {
                        let v = (slot * 1000 + round) as f32;
                        match e.set(slot, Scalar::F32(v)) {
                            Ok(()) => {
                                written = v;
                                writes.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(ModelError::Evicted { .. } | ModelError::Claimed { .. }) => {}
                            Err(other) => panic!("a write got {other:?}"),
                        }
                    }
                    written
                })
            })
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    e.promote().unwrap();
    let now: Vec<f32> = (0..4)
        .map(|i| match e.get(i).unwrap() {
            Scalar::F32(v) => v,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(now, last, "every slot holds its last successful write");
    assert_eq!(e.version(), writes.load(Ordering::Relaxed));
    e.release().unwrap();
    assert!(e.primary().is_released() && e.secondary().is_released());
}

/// 8 threads × 300 rounds, each round a fresh composite: a release races evicts and
/// promotes. Exactly one release wins; a transition either finishes first or is refused
/// `Released`; afterwards every tier the composite ever held is released and nothing panics.
#[test]
fn a_release_racing_transitions_releases_every_tier() {
    use std::sync::Barrier;
    for round in 0..300 {
        let first = HostCarrier::from_f32(&[1.0, 2.0]);
        let e = Evictable::new(&first, FileCarrier::temp(ElemKind::F32).unwrap()).unwrap();
        let start = Barrier::new(8);
        let seen: Vec<Arc<dyn Carrier>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..8)
                .map(|k| {
                    let (e, start) = (&e, &start);
                    s.spawn(move || {
                        start.wait();
                        loop {
                            let outcome = match (k + round) % 3 {
                                0 => e.release(),
                                1 => e.evict(),
                                _ => e.promote(),
                            };
                            match outcome {
                                Ok(()) | Err(ModelError::Released { .. }) => break,
                                // A release while a transition holds the composite is
                                // refused as for a pending move (§3.2); it tries again.
                                Err(ModelError::Claimed { .. }) if (k + round) % 3 == 0 => {}
                                Err(other) => panic!("got {other:?}"),
                            }
                        }
                        vec![e.primary(), e.secondary()]
                    })
                })
                .collect();
            threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
        });
        assert!(e.is_released() && first.is_released());
        for tier in seen.iter().chain([e.primary(), e.secondary()].iter()) {
            assert!(tier.is_released(), "round {round}: a tier outlived its composite");
        }
    }
}

/// A composite whose secondary holds `[1, 2, 3]` and reads its slots only through `gate`:
/// a promote stays pending until the test opens it.
fn evicted_behind(gate: &Arc<super::test_support::Gate>) -> Arc<Evictable> {
    let secondary = Arc::new(super::test_support::VecCarrier {
        gate: Some(gate.clone()),
        ..super::test_support::VecCarrier::new(&[0.0; 3])
    });
    let e = Evictable::new(HostCarrier::from_f32(&[1.0, 2.0, 3.0]), secondary).unwrap();
    e.evict().unwrap(); // writes only: the gate holds reads
    e
}

#[test]
fn a_pending_async_promote_holds_the_composite_and_a_later_transition_waits_for_it() {
    let gate = Arc::new(super::test_support::Gate::default());
    let e = evicted_behind(&gate);
    let handle = e.promote_async().unwrap();
    assert!(!handle.is_done());
    let claimed = |r: Result<(), ModelError>| matches!(r, Err(ModelError::Claimed { .. }));
    assert!(matches!(e.get(0), Err(ModelError::Claimed { action: "read", .. })));
    assert!(claimed(e.set(0, Scalar::F32(9.0))));
    assert!(claimed(e.release()));
    let t = Tensor::canonical(&e, &[3]).unwrap();
    assert!(move_tensor(&t, HostCarrier::zeros(ElemKind::F32, 3).unwrap()).is_err());
    let later = {
        let e = e.clone();
        std::thread::spawn(move || e.promote())
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(!later.is_finished(), "the later promote waits for the pending one");
    gate.open();
    assert!(handle.wait().is_ok());
    later.join().unwrap().unwrap(); // then finds its work done
    assert_eq!((e.version(), t.values_f32().unwrap()), (0, vec![1.0, 2.0, 3.0]));
}

/// A blocking promote holds the composite as an asynchronous one does (§3.2: "Hold the
/// Evictable while they run"): another thread's read, write, release and move are refused
/// `Claimed` while it runs, instead of waiting for it, and nothing they tried changed anything.
#[test]
fn a_running_blocking_promote_refuses_other_threads_instead_of_making_them_wait() {
    let gate = Arc::new(super::test_support::Gate::default());
    let e = evicted_behind(&gate);
    let promote = {
        let e = e.clone();
        std::thread::spawn(move || e.promote())
    };
    // The promote's transfer waits at the gate, holding the composite.
    // Probed once the transfer waits at the gate: from the claim to the plan, reads still
    // pass, so a probe right after the claim could read.
    let (probed, held) = (e.clone(), gate.clone());
    let probes = super::test_support::probe_while_held(
        &gate,
        move || held.is_waited_on(),
        move || {
            let e = probed;
            let refused = |r: Result<(), ModelError>| matches!(r, Err(ModelError::Claimed { .. }));
            let read = matches!(e.get(1), Err(ModelError::Claimed { action: "read", .. }));
            let (write, release) = (refused(e.set(0, Scalar::F32(9.0))), refused(e.release()));
            let t = Tensor::canonical(&e, &[3]).unwrap();
            let moved = move_tensor(&t, HostCarrier::zeros(ElemKind::F32, 3).unwrap()).is_err();
            [read, write, release, moved]
        },
    );
    assert_eq!(probes, [true; 4], "read, write, release and move are refused");
    let t = Tensor::canonical(&e, &[3]).unwrap();
    assert!(!promote.is_finished());
    gate.open();
    promote.join().unwrap().unwrap();
    assert_eq!((e.version(), e.resident(), t.values_f32().unwrap()), (0, Tier::Primary, vec![1.0, 2.0, 3.0]));
    e.release().unwrap(); // no claim left behind
}

#[test]
fn a_failed_async_transition_changes_nothing_and_gives_the_composite_back() {
    let primary = Arc::new(super::test_support::VecCarrier::new(&[1.0, 2.0]));
    let e = Evictable::new(&primary, FileCarrier::temp(ElemKind::F32).unwrap()).unwrap();
    primary.slots.lock().truncate(1); // its second read fails
    let secondary = e.secondary();
    let failed = e.evict_async().unwrap().wait();
    assert!(failed.is_err());
    assert!(super::carrier::same_carrier(&e.secondary(), &secondary) && !primary.is_released());
    assert_eq!(e.resident(), Tier::Primary);
    e.release().unwrap(); // no claim left behind
}

#[test]
fn async_transitions_with_nothing_to_transfer_are_done_at_once() {
    let e =
        Evictable::retaining_clean(HostCarrier::from_f32(&[1.0]), FileCarrier::temp(ElemKind::F32).unwrap()).unwrap();
    assert!(e.promote_async().unwrap().is_done()); // promoted already
    e.evict_async().unwrap().wait().unwrap();
    e.promote_async().unwrap().wait().unwrap();
    let clean = e.evict_async().unwrap(); // the secondary holds the values: nothing to write
    assert!(clean.is_done() && e.primary().is_released());
    e.release().unwrap();
    assert!(matches!(e.promote_async(), Err(ModelError::Released { .. })));
}

#[cfg(feature = "async")]
#[test]
fn a_residency_handle_is_a_future() {
    let e = Evictable::new(HostCarrier::from_f32(&[4.0; 4096]), FileCarrier::temp(ElemKind::F32).unwrap()).unwrap();
    let evicted = e.evict_async().unwrap();
    let outcome = super::test_support::block_on(evicted);
    assert!(outcome.is_ok() && e.resident() == Tier::Secondary);
}

/// 8 threads × 300 rounds, each round a fresh composite: asynchronous evicts and promotes
/// race writes, moves out and a release. Every refusal is one the contract names, nothing
/// panics, and afterwards no claim is left: the composite releases, and with it every tier.
#[test]
fn async_transitions_racing_writes_moves_and_release_leave_no_claim() {
    use std::sync::Barrier;
    for round in 0..300 {
        let e = Evictable::retaining_clean(
            HostCarrier::from_f32(&[1.0, 2.0, 3.0, 4.0]),
            FileCarrier::temp(ElemKind::F32).unwrap(),
        )
        .unwrap();
        let start = Barrier::new(8);
        std::thread::scope(|s| {
            let threads: Vec<_> = (0..8)
                .map(|k| {
                    let (e, start) = (&e, &start);
                    s.spawn(move || {
                        start.wait();
                        let outcome = match (k + round) % 5 {
                            0 => e.evict_async().and_then(|h| h.wait()),
                            1 => e.promote_async().and_then(|h| h.wait()),
                            2 => e.set(1, Scalar::F32(k as f32)),
                            3 => Tensor::canonical(e, &[4])
                                .and_then(|t| move_tensor(&t, HostCarrier::zeros(ElemKind::F32, 4).unwrap()))
                                .map(|_| ()),
                            _ => e.release(),
                        };
                        match outcome {
                            Ok(()) => {}
                            Err(
                                ModelError::Claimed { .. } | ModelError::Released { .. } | ModelError::Evicted { .. },
                            ) => {}
                            Err(ModelError::Move(refusal)) => {
                                assert!(
                                    refusal.to_string().contains("released") || refusal.to_string().contains("pending"),
                                    "{refusal}"
                                );
                            }
                            Err(other) => panic!("round {round}: {other:?}"),
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        });
        e.release().unwrap(); // refused if anything still held it
        assert!(e.primary().is_released() && e.secondary().is_released(), "round {round}");
    }
}

/// A tier's hook that asks its own composite for another transition, or to release, while
/// the transition that called it runs: refused `Claimed`, as every other caller is while the
/// composite is held, instead of waiting for the transition that is waiting for the hook.
#[test]
fn a_tier_hook_that_re_enters_its_composite_is_refused_instead_of_waiting_for_itself() {
    use std::sync::{Mutex as StdMutex, OnceLock, Weak};
    let composite: Arc<OnceLock<Weak<Evictable>>> = Arc::new(OnceLock::new());
    let answers = Arc::new(StdMutex::new(Vec::new()));
    let hook = {
        let (composite, answers) = (composite.clone(), answers.clone());
        Arc::new(move || {
            let e = composite.get().and_then(Weak::upgrade).expect("the composite is alive");
            let claimed = |r: super::error::Result<()>| matches!(r, Err(ModelError::Claimed { .. }));
            let mut answers = answers.lock().unwrap();
            answers.push(claimed(e.promote()));
            answers.push(claimed(e.evict()));
            answers.push(e.promote_async().err().is_some_and(|err| claimed(Err(err))));
            answers.push(claimed(e.release()));
        }) as Arc<dyn Fn() + Send + Sync>
    };
    let secondary = Arc::new(super::test_support::VecCarrier {
        on_allocate: Some(hook),
        ..super::test_support::VecCarrier::new(&[])
    });
    let e = Evictable::new(HostCarrier::from_f32(&[1.0, 2.0]), &secondary).unwrap();
    composite.set(Arc::downgrade(&e)).unwrap();
    let evict = {
        let e = e.clone();
        std::thread::spawn(move || e.evict())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !evict.is_finished() {
        assert!(std::time::Instant::now() < deadline, "the hook's call waited for the transition running it");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    evict.join().unwrap().unwrap();
    assert_eq!(*answers.lock().unwrap(), [true; 4]);
    e.promote().unwrap();
    let t = Tensor::canonical(&e, &[2]).unwrap();
    assert_eq!((t.values_f32().unwrap(), e.version()), (vec![1.0, 2.0], 0));
    e.release().unwrap(); // no claim left behind
}
