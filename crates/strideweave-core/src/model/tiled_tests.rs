//! The Rust `TiledEvictable`: geometry, residency requests (atomic, clean tiles, failure),
//! asynchronous requests and races.

use std::sync::{Arc, Barrier};

use super::error::Result;
use super::test_support::{Gate, VecCarrier};
use super::*;
use crate::storage::{ElemKind, Scalar};

fn f32s(c: &dyn Carrier) -> Vec<f32> {
    (0..c.size())
        .map(|i| match c.get(i).unwrap() {
            Scalar::F32(v) => v,
            other => panic!("{other:?}"),
        })
        .collect()
}

fn counting(n: usize) -> Vec<f32> {
    (0..n).map(|v| v as f32).collect()
}

/// A 4×4 array of 0..16 in 2×2 tiles, on host memory, whose secondary tiles are
/// `VecCarrier`s the test can look into (`secondary.made`).
fn four_by_four(retain_clean: bool) -> (Arc<TiledEvictable>, Arc<VecCarrier>) {
    let secondary = Arc::new(VecCarrier::new(&[]));
    let build = if retain_clean { TiledEvictable::retaining_clean } else { TiledEvictable::new };
    let t = build(HostCarrier::from_f32(&counting(16)), secondary.clone(), &[2, 2], &[2, 2]).unwrap();
    (t, secondary)
}

#[test]
fn slots_lie_in_the_tiles_the_geometry_names() {
    let (t, secondary) = four_by_four(false);
    assert_eq!(t.tile_index(&[1, 0]).unwrap(), 1);
    t.evict(&[1]).unwrap();
    // Tile (1, 0) holds slots 2, 3, 6 and 7, in-tile first mode fastest.
    let made = secondary.made.lock().clone();
    assert_eq!(made.len(), 1);
    assert_eq!(made[0].values(), vec![2.0, 3.0, 6.0, 7.0]);
    assert_eq!(t.tiles_on(Tier::Secondary), vec![1]);
    assert_eq!(f32s(&*t), counting(16), "a secondary tile is read in place");
    // Three modes, uneven tiles: every slot reads back after every tile went both ways.
    let n = 4 * 3 * 6;
    let t3 = TiledEvictable::new(
        HostCarrier::from_f32(&counting(n)),
        FileCarrier::temp(ElemKind::F32).unwrap(),
        &[2, 1, 3],
        &[2, 3, 2],
    )
    .unwrap();
    assert_eq!((t3.logical_shape(), t3.tile_count()), (&[4usize, 3, 6][..], 6));
    t3.evict(&[0, 2, 4]).unwrap();
    t3.evict(&[1, 3, 5]).unwrap();
    assert_eq!(f32s(&*t3), counting(n));
    t3.promote(&[5, 0, 1, 2, 3, 4]).unwrap();
    assert_eq!((f32s(&*t3), t3.version()), (counting(n), 0));
}

#[test]
fn a_tiled_carrier_seeded_from_its_secondary_starts_evicted() {
    let file = FileCarrier::temp(ElemKind::F32).unwrap();
    let t = TiledEvictable::new(
        HostCarrier::zeros(ElemKind::F32, 0).unwrap(),
        HostCarrier::from_f32(&counting(8)),
        &[2],
        &[4],
    )
    .unwrap();
    assert_eq!(t.tiles_on(Tier::Secondary), vec![0, 1]);
    t.promote(&[1]).unwrap();
    assert_eq!((t.location(1).unwrap(), f32s(&*t)), (Tier::Primary, counting(8)));
    drop(file);
}

#[test]
fn construction_refusals_change_nothing() {
    let host = HostCarrier::from_f32(&counting(8));
    let full = HostCarrier::from_f32(&counting(8));
    let empty = FileCarrier::temp(ElemKind::F32).unwrap();
    let tiling = |r: Result<Arc<TiledEvictable>>| matches!(r, Err(ModelError::Tiling { .. }));
    assert!(tiling(TiledEvictable::new(&host, &empty, &[], &[])));
    assert!(tiling(TiledEvictable::new(&host, &empty, &[2], &[2, 2])));
    assert!(tiling(TiledEvictable::new(&host, &empty, &[0], &[8])));
    assert!(tiling(TiledEvictable::new(&host, &empty, &[2], &[2])), "8 slots are not 2 × 2");
    assert!(tiling(TiledEvictable::new(&host, &full, &[2], &[4])), "both tiers full");
    assert!(matches!(TiledEvictable::new(&host, &host, &[2], &[4]), Err(ModelError::TiersNotDistinct { .. })));
    let kinds = TiledEvictable::new(&host, FileCarrier::temp(ElemKind::F64).unwrap(), &[2], &[4]);
    assert!(matches!(kinds, Err(ModelError::TierDTypesDiffer { .. })));
    assert!(!host.is_owned() && !empty.is_owned() && !full.is_owned());
    let t = TiledEvictable::new(&host, &empty, &[2], &[4]).unwrap();
    assert!(host.is_owned() && empty.is_owned());
    assert!(TiledEvictable::new(&full, &empty, &[2], &[4]).is_err(), "an owned tier");
    assert!(!full.is_owned());
    t.release().unwrap();
    assert!(host.is_released() && empty.is_released());
}

#[test]
fn requests_refuse_bad_indices_before_any_effect() {
    let (t, secondary) = four_by_four(false);
    assert!(matches!(t.evict(&[0, 4]), Err(ModelError::Tiling { .. })));
    assert!(matches!(t.evict(&[2, 2]), Err(ModelError::Tiling { .. })));
    assert!(matches!(t.tile_index(&[2, 0]), Err(ModelError::Tiling { .. })));
    assert!(secondary.made.lock().is_empty() && t.tiles_on(Tier::Secondary).is_empty());
}

#[test]
fn writes_count_and_residency_changes_do_not() {
    let (t, _) = four_by_four(false);
    t.evict(&[0, 3]).unwrap();
    t.set(15, Scalar::F32(-15.0)).unwrap(); // tile 3, on the secondary
    t.promote(&[0, 1, 2, 3]).unwrap();
    t.evict(&[3]).unwrap();
    let mut expected = counting(16);
    expected[15] = -15.0;
    assert_eq!((f32s(&*t), t.version()), (expected, 1));
}

#[test]
fn clean_tiles_are_evicted_without_a_write_until_written() {
    let (t, secondary) = four_by_four(true);
    t.evict(&[0, 1]).unwrap(); // the first eviction copies
    t.promote(&[0, 1]).unwrap(); // copies, keeping both secondary tiles
    assert!(t.is_clean(0).unwrap() && t.is_clean(1).unwrap());
    let kept = secondary.made.lock().clone();
    assert!(kept.iter().all(|tile| !tile.is_released()));
    t.set(0, Scalar::F32(-1.0)).unwrap(); // tile 0: dirty, its copy released at once
    assert!(!t.is_clean(0).unwrap() && kept[0].is_released());
    t.evict(&[0, 1]).unwrap(); // tile 1 clean: no copy; tile 0 copied into a fresh tile
    assert_eq!(secondary.made.lock().len(), 3, "one fresh secondary tile, for the dirty one");
    assert!(!kept[1].is_released(), "the clean copy is current again");
    let mut expected = counting(16);
    expected[0] = -1.0;
    assert_eq!(f32s(&*t), expected);
}

#[test]
fn a_failed_copy_changes_no_tile() {
    // Fresh secondary tiles fail their write of slot 1: every copy into them fails.
    let secondary = Arc::new(VecCarrier { fail_write_at: Some(1), ..VecCarrier::new(&[]) });
    let t = TiledEvictable::new(HostCarrier::from_f32(&counting(8)), secondary.clone(), &[2], &[4]).unwrap();
    assert!(t.evict(&[0, 1]).is_err());
    assert!(t.tiles_on(Tier::Secondary).is_empty());
    assert!(secondary.made.lock().iter().all(|tile| tile.is_released()), "staged tiles are given back");
    assert_eq!((f32s(&*t), t.version()), (counting(8), 0));
    // A tier that cannot make tiles refuses as well, changing nothing.
    let fixed = Arc::new(VecCarrier { no_factory: true, ..VecCarrier::new(&[]) });
    let t = TiledEvictable::new(HostCarrier::from_f32(&counting(8)), fixed, &[2], &[4]).unwrap();
    assert!(matches!(t.evict(&[1]), Err(ModelError::NotAllocatable { .. })));
    assert_eq!(t.tiles_on(Tier::Primary), vec![0, 1]);
}

/// Two tiles of `counting(8)`, both evicted to a secondary whose slot reads wait for `gate`:
/// a promote stays running until the test opens it.
fn evicted_behind(gate: &Arc<Gate>) -> Arc<TiledEvictable> {
    let secondary = Arc::new(VecCarrier { gate: Some(gate.clone()), ..VecCarrier::new(&[]) });
    let t = TiledEvictable::new(HostCarrier::from_f32(&counting(8)), secondary, &[2], &[4]).unwrap();
    t.evict(&[0, 1]).unwrap(); // writes the secondary tiles: the gate holds only their reads
    t
}

#[test]
fn a_pending_async_request_holds_the_carrier_reads_see_the_old_tiles_and_a_later_request_waits() {
    let gate = Arc::new(Gate::default());
    let t = evicted_behind(&gate);
    let pending = t.promote_async(&[1]).unwrap();
    assert!(!pending.is_done());
    let claimed = |r: Result<()>| matches!(r, Err(ModelError::Claimed { .. }));
    assert!(claimed(t.set(0, Scalar::F32(9.0))));
    assert!(claimed(t.release()));
    let later = {
        let t = t.clone();
        std::thread::spawn(move || t.evict(&[0]))
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(!later.is_finished(), "the later request waits for the pending one");
    gate.open();
    pending.wait().unwrap();
    later.join().unwrap().unwrap();
    assert_eq!((t.location(1).unwrap(), f32s(&*t), t.version()), (Tier::Primary, counting(8), 0));
}

/// A running blocking request holds the carrier as a pending asynchronous one does: another
/// thread's write and release are refused `Claimed`, not made to wait for it.
#[test]
fn a_running_blocking_request_refuses_other_threads_instead_of_making_them_wait() {
    let gate = Arc::new(Gate::default());
    let t = evicted_behind(&gate);
    let request = {
        let t = t.clone();
        std::thread::spawn(move || t.promote(&[1]))
    };
    let (probed, held) = (t.clone(), t.clone());
    let probes = super::test_support::probe_while_held(
        &gate,
        move || held.state(super::carrier::HOOK).is_claimed(),
        move || {
            let claimed = |r: Result<()>| matches!(r, Err(ModelError::Claimed { .. }));
            [claimed(probed.set(0, Scalar::F32(9.0))), claimed(probed.release())]
        },
    );
    assert_eq!(probes, [true; 2], "write and release are refused");
    gate.open();
    request.join().unwrap().unwrap();
    assert_eq!((t.location(1).unwrap(), f32s(&*t), t.version()), (Tier::Primary, counting(8), 0));
    t.release().unwrap(); // no claim left behind
}

/// While a blocking request copies, another thread's read goes ahead at once instead of
/// waiting for it: the request keeps no lock across its copy, as an asynchronous one keeps
/// none, and commits only after it.
#[test]
fn reads_during_a_running_blocking_request_see_the_old_tiles_without_waiting() {
    let gate = Arc::new(Gate::default());
    let secondary = Arc::new(VecCarrier { gate: Some(gate.clone()), ..VecCarrier::new(&[]) });
    let t = TiledEvictable::new(HostCarrier::from_f32(&counting(8)), secondary, &[2], &[4]).unwrap();
    t.evict(&[1]).unwrap(); // tile 1 into the gated tier; tile 0 stays in host memory
    let request = {
        let t = t.clone();
        std::thread::spawn(move || t.promote(&[1]))
    };
    let (probed, held) = (t.clone(), gate.clone());
    let read = super::test_support::probe_while_held(&gate, move || held.is_waited_on(), move || probed.get(2));
    assert_eq!(read.unwrap(), Scalar::F32(2.0));
    assert_eq!(t.location(1).unwrap(), Tier::Secondary, "not committed while the copy runs");
    gate.open();
    request.join().unwrap().unwrap();
    assert_eq!((t.location(1).unwrap(), f32s(&*t), t.version()), (Tier::Primary, counting(8), 0));
    t.release().unwrap(); // no claim left behind
}

#[test]
fn eight_threads_racing_requests_reads_writes_and_release_leave_no_claim() {
    for round in 0..300 {
        let t = TiledEvictable::retaining_clean(
            HostCarrier::from_f32(&counting(8)),
            FileCarrier::temp(ElemKind::F32).unwrap(),
            &[4],
            &[2],
        )
        .unwrap();
        let start = Barrier::new(8);
        std::thread::scope(|s| {
            for k in 0..8usize {
                let (t, start) = (&t, &start);
                s.spawn(move || {
                    start.wait();
                    let tiles = [k % 4, (k + 1) % 4];
                    let outcome = match (k + round) % 7 {
                        // A read racing a commit sees the old tile or the new one, never a released one.
                        6 => (0..8).try_for_each(|i| t.get(i).map(|_| ())),
                        0 => t.evict_async(&tiles).and_then(|h| h.wait()),
                        1 => t.promote_async(&tiles).and_then(|h| h.wait()),
                        2 => t.evict(&tiles),
                        3 => t.promote(&tiles),
                        4 => t.set(k % 8, Scalar::F32(-1.0)),
                        _ => t.release(),
                    };
                    match outcome {
                        Ok(()) | Err(ModelError::Claimed { .. } | ModelError::Released { .. }) => {}
                        Err(other) => panic!("round {round}: {other:?}"),
                    }
                });
            }
        });
        if !t.is_released() {
            // Every value is its seed or a write's, on whichever tier.
            assert!(f32s(&*t).iter().enumerate().all(|(i, &v)| v == i as f32 || v == -1.0));
        }
        t.release().unwrap(); // refused if anything still held it
        assert!(t.primary().is_released() && t.secondary().is_released(), "round {round}");
    }
}

#[cfg(feature = "async")]
#[test]
fn a_request_handle_can_be_awaited() {
    let t = TiledEvictable::new(
        HostCarrier::from_f32(&counting(1 << 14)),
        FileCarrier::temp(ElemKind::F32).unwrap(),
        &[4],
        &[1 << 12],
    )
    .unwrap();
    let outcome = super::test_support::block_on(t.evict_async(&[0, 1, 2, 3]).unwrap());
    assert!(outcome.is_ok());
    assert_eq!(t.tiles_on(Tier::Secondary).len(), 4);
    assert_eq!(f32s(&*t), counting(1 << 14));
}

#[test]
fn a_projection_gathers_the_selected_tiles_where_they_are() {
    let (t, _) = four_by_four(false);
    t.evict(&[1, 2]).unwrap();
    // Tiles (1, 0) and (0, 0) of row-of-tiles 1: grid x in [1, 0], grid y in [1].
    let picked = t.project(&[vec![1, 0], vec![1]]).unwrap();
    // Tile (1, 1) holds slots 10, 11, 14, 15 and tile (0, 1) slots 8, 9, 12, 13; the result
    // is 4 × 2, first mode fastest.
    assert_eq!(picked.values_f32().unwrap(), vec![10.0, 11.0, 8.0, 9.0, 14.0, 15.0, 12.0, 13.0]);
    assert_eq!(t.tiles_on(Tier::Secondary), vec![1, 2], "residency unchanged");
    let bad = |sel: &[Vec<usize>]| matches!(t.project(sel), Err(ModelError::Tiling { .. }));
    assert!(bad(&[vec![0]]) && bad(&[vec![], vec![0]]) && bad(&[vec![0, 0], vec![0]]) && bad(&[vec![2], vec![0]]));
    t.release().unwrap();
    assert!(matches!(t.project(&[vec![0], vec![0]]), Err(ModelError::Released { .. })));
}

/// Reads racing requests' commits: a read sees a tile's old carrier or its new one, never
/// one the commit released (8 threads: two move every tile back and forth 300 times, six read).
#[test]
fn reads_racing_commits_never_see_a_released_tile() {
    let n = 64 * 256;
    let t = TiledEvictable::new(
        HostCarrier::from_f32(&counting(n)),
        FileCarrier::temp(ElemKind::F32).unwrap(),
        &[64],
        &[256],
    )
    .unwrap();
    let all: Vec<usize> = (0..64).collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for half in 0..2 {
            let (t, all, done) = (&t, &all, &done);
            s.spawn(move || {
                for _ in 0..300 {
                    t.evict(&all[half * 32..(half + 1) * 32]).unwrap();
                    t.promote(&all[half * 32..(half + 1) * 32]).unwrap();
                }
                done.store(true, std::sync::atomic::Ordering::Relaxed);
            });
        }
        for k in 0..6 {
            let (t, done) = (&t, &done);
            s.spawn(move || {
                let mut i = k * 997;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    assert_eq!(t.get(i % n).unwrap(), Scalar::F32((i % n) as f32));
                    i += 257;
                }
            });
        }
    });
}

/// An eviction gives its host tiles' buffers back together, and the promote after it makes
/// its fresh tiles of them (their pages present, nothing zeroed): the kept buffers of the
/// tiles' length are there after the eviction and gone after the promote, and every value
/// reads back. A tile size of its own (37 × 53 f32), so no other test takes those buffers; a
/// few attempts, since a give-back that finds the kept list locked by another test's thread
/// keeps nothing.
#[test]
fn a_promote_reuses_the_buffers_an_eviction_gave_back() {
    let (tile, grid) = ([37usize, 53], [4usize, 4]);
    let (n, bytes) = (tile[0] * tile[1] * grid[0] * grid[1], tile[0] * tile[1] * 4);
    let t = TiledEvictable::new(
        HostCarrier::from_f32(&counting(n)),
        FileCarrier::temp(ElemKind::F32).unwrap(),
        &grid,
        &tile,
    )
    .unwrap();
    let every: Vec<usize> = (0..t.tile_count()).collect();
    let reused = (0..5).any(|_| {
        t.evict(&every).unwrap();
        let given_back = crate::storage::HostBuffer::kept_of(bytes);
        t.promote(&every).unwrap();
        given_back >= every.len() && crate::storage::HostBuffer::kept_of(bytes) == given_back - every.len()
    });
    assert!(reused, "the evicted tiles' buffers were not given back, or the promote made others");
    assert_eq!(f32s(&*t), counting(n));
}
