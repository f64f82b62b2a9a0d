//! The Rust `TiledEvictable`: geometry, residency requests (atomic, clean tiles, failure),
//! pins (requests on disjoint tiles together, conflicting ones, writes and release refused),
//! the residency policy, asynchronous requests, projections and races.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::error::Result;
use super::test_support::{Gate, VecCarrier};
use super::tile_book::TileRefusal;
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
    assert_eq!(t.tiles_on(Tier::Secondary).unwrap(), vec![1]);
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
    assert_eq!(t.tiles_on(Tier::Secondary).unwrap(), vec![0, 1]);
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
    assert!(secondary.made.lock().is_empty() && t.tiles_on(Tier::Secondary).unwrap().is_empty());
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
    assert!(t.tiles_on(Tier::Secondary).unwrap().is_empty());
    assert!(secondary.made.lock().iter().all(|tile| tile.is_released()), "staged tiles are given back");
    assert_eq!((f32s(&*t), t.version()), (counting(8), 0));
    // A tier that cannot make tiles refuses as well, changing nothing.
    let fixed = Arc::new(VecCarrier { no_factory: true, ..VecCarrier::new(&[]) });
    let t = TiledEvictable::new(HostCarrier::from_f32(&counting(8)), fixed, &[2], &[4]).unwrap();
    assert!(matches!(t.evict(&[1]), Err(ModelError::NotAllocatable { .. })));
    assert_eq!(t.tiles_on(Tier::Primary).unwrap(), vec![0, 1]);
}

/// Two tiles of `counting(8)`, both evicted to a secondary whose slot reads wait for `gate`:
/// a promote stays running until the test opens it.
fn evicted_behind(gate: &Arc<Gate>) -> Arc<TiledEvictable> {
    let secondary = Arc::new(VecCarrier { gate: Some(gate.clone()), ..VecCarrier::new(&[]) });
    let t = TiledEvictable::new(HostCarrier::from_f32(&counting(8)), secondary, &[2], &[4]).unwrap();
    t.evict(&[0, 1]).unwrap(); // writes the secondary tiles: the gate holds only their reads
    t
}

/// A latch a tier's `allocate_like` waits at while it is closed: a request that needs fresh
/// tiles of that tier stays pending until the test opens it, and no tile read is held up (a
/// `Gate` holds slot reads, and a read of the composite holds its book while it reads).
#[derive(Default)]
struct Latch {
    closed: Mutex<bool>,
    cond: Condvar,
    /// How many callers wait at the latch now.
    waiting: AtomicUsize,
}

impl Latch {
    fn close(&self) {
        *self.closed.lock() = true;
    }

    fn open(&self) {
        *self.closed.lock() = false;
        self.cond.notify_all();
    }

    fn pass(&self) {
        let mut closed = self.closed.lock();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        while *closed {
            self.cond.wait(&mut closed);
        }
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }

    /// Until somebody waits at the latch (at most 10 s).
    fn until_waited_on(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.waiting.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "nothing reached the latch");
            std::thread::yield_now();
        }
    }
}

/// `probe`'s answer, from a thread of its own: a probe that waits for the pending request
/// (which waits at `latch`) instead of being answered fails the test after 10 s, the latch
/// opened so that nothing stays stuck.
fn answered<R: Send + 'static>(latch: &Latch, probe: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(probe());
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| {
        latch.open();
        panic!("the call waited for the pending request instead of being answered at once")
    })
}

/// Three tiles of `counting(12)` (4 slots each) in host memory, tile 2 evicted to a
/// secondary of `VecCarrier`s whose `allocate_like` waits at `latch` while it is closed;
/// then the latch closes and an eviction of tile 1 starts, which stays pending (tile 1
/// pinned, still in host memory) until the test opens the latch.
fn pending_eviction_of_tile_1(latch: &Arc<Latch>) -> (Arc<TiledEvictable>, Arc<VecCarrier>, ResidencyHandle) {
    let waits = latch.clone();
    let secondary = Arc::new(VecCarrier { on_allocate: Some(Arc::new(move || waits.pass())), ..VecCarrier::new(&[]) });
    let t = TiledEvictable::new(HostCarrier::from_f32(&counting(12)), secondary.clone(), &[3], &[4]).unwrap();
    t.evict(&[2]).unwrap();
    latch.close();
    let pending = t.evict_async(&[1]).unwrap();
    latch.until_waited_on();
    assert!(!pending.is_done() && t.is_pinned(1).unwrap());
    (t, secondary, pending)
}

fn pinned_at(r: Result<()>, coordinate: &str) -> bool {
    matches!(r, Err(ModelError::Tiles(TileRefusal::Pinned { coordinate: ref c, .. })) if c == coordinate)
}

/// Requests on disjoint tiles run together: a second asynchronous request is admitted and
/// finishes while the first is still pending.
#[test]
fn async_requests_on_disjoint_tiles_run_together() {
    let latch = Arc::new(Latch::default());
    let (t, _, pending) = pending_eviction_of_tile_1(&latch);
    assert!(!t.is_pinned(0).unwrap() && !t.is_pinned(2).unwrap());
    // Tile 2 back into host memory: no fresh tile of the latched tier, so nothing holds it up.
    let probed = t.clone();
    let other = answered(&latch, move || probed.promote_async(&[2])).unwrap();
    let outcome = other.wait_timeout(Duration::from_secs(10));
    assert!(matches!(outcome, Some(Ok(()))), "the disjoint request finished: {outcome:?}");
    assert!(!pending.is_done(), "while the first one is still pending");
    assert_eq!(t.tiles_on(Tier::Secondary).unwrap(), Vec::<usize>::new(), "tile 1's eviction has not committed");
    latch.open();
    pending.wait().unwrap();
    assert_eq!(t.tiles_on(Tier::Secondary).unwrap(), [1]);
    assert_eq!((f32s(&*t), t.version()), (counting(12), 0));
    t.release().unwrap();
}

/// A request that covers a tile a pending request pins is refused at its call, blocking or
/// asynchronous, before any effect; once the pending request ends it is admitted.
#[test]
fn a_request_overlapping_a_pending_one_is_refused_and_changes_nothing() {
    let latch = Arc::new(Latch::default());
    let (t, secondary, pending) = pending_eviction_of_tile_1(&latch);
    let made = secondary.made.lock().len();
    let probed = t.clone();
    let refusals = answered(&latch, move || {
        [
            pinned_at(probed.evict(&[0, 1]), "(1,)"),
            pinned_at(probed.promote(&[1]), "(1,)"),
            pinned_at(probed.promote_async(&[2, 1]).map(drop), "(1,)"),
        ]
    });
    assert_eq!(refusals, [true; 3]);
    assert_eq!((t.tiles_on(Tier::Primary).unwrap(), t.tiles_on(Tier::Secondary).unwrap()), (vec![0, 1], vec![2]));
    assert_eq!(secondary.made.lock().len(), made, "no fresh tile was made");
    assert!(!t.is_pinned(0).unwrap() && !t.is_pinned(2).unwrap(), "a refused request pins nothing");
    latch.open();
    pending.wait().unwrap();
    t.evict(&[0, 1]).unwrap();
    assert_eq!(t.tiles_on(Tier::Secondary).unwrap(), [0, 1, 2]);
    assert_eq!((f32s(&*t), t.version()), (counting(12), 0));
}

/// A write to a tile a pending request pins is refused (a read of it goes ahead); writes to
/// other tiles, on either tier, go ahead meanwhile.
#[test]
fn writes_to_pinned_tiles_are_refused_and_writes_to_other_tiles_go_ahead() {
    let latch = Arc::new(Latch::default());
    let (t, _, pending) = pending_eviction_of_tile_1(&latch);
    let probed = t.clone();
    let (read, pinned, primary, secondary) = answered(&latch, move || {
        (
            probed.get(5),
            probed.set(5, Scalar::F32(-5.0)),
            probed.set(1, Scalar::F32(-1.0)),
            probed.set(9, Scalar::F32(-9.0)),
        )
    });
    assert_eq!(read.unwrap(), Scalar::F32(5.0), "a pinned tile is read as it is");
    let refused =
        matches!(pinned, Err(ModelError::Tiles(TileRefusal::WritePinned { ref coordinate })) if coordinate == "(1,)");
    assert!(refused, "{pinned:?}");
    primary.unwrap();
    secondary.unwrap();
    assert_eq!(t.version(), 2, "the refused write counted nothing");
    latch.open();
    pending.wait().unwrap();
    t.set(5, Scalar::F32(-5.0)).unwrap(); // unpinned once the request ended
    let mut expected = counting(12);
    (expected[1], expected[5], expected[9]) = (-1.0, -5.0, -9.0);
    assert_eq!((f32s(&*t), t.version()), (expected, 3));
}

/// `release()` while a request is pending is refused and changes nothing (the composite, its
/// tiers and its tiles stay live, and it is not left claimed); after the request it succeeds.
#[test]
fn release_while_a_request_is_pending_is_refused_and_changes_nothing() {
    let latch = Arc::new(Latch::default());
    let (t, secondary, pending) = pending_eviction_of_tile_1(&latch);
    let probed = t.clone();
    let refused = answered(&latch, move || probed.release());
    assert!(matches!(refused, Err(ModelError::Tiles(TileRefusal::Pending { action: "release" }))), "{refused:?}");
    assert!(!t.is_released() && !t.primary().is_released() && !t.secondary().is_released());
    assert!(!t.state(super::carrier::HOOK).is_claimed(), "the release's claim was given back");
    assert!(secondary.made.lock().iter().all(|tile| !tile.is_released()));
    t.set(0, Scalar::F32(-0.5)).unwrap(); // live and writable
    latch.open();
    pending.wait().unwrap();
    t.release().unwrap();
    assert!(t.is_released() && t.primary().is_released() && t.secondary().is_released());
    assert!(secondary.made.lock().iter().all(|tile| tile.is_released()), "every tile is released with it");
    t.release().unwrap(); // idempotent
}

/// A move of the composite's tensor while a request is pending reads every slot, then its
/// commit (the composite's release) is refused: the move fails and the composite stays
/// live, values and all. After the request the move goes through.
#[test]
fn a_move_of_the_composite_while_a_request_is_pending_fails_and_leaves_it_live() {
    let latch = Arc::new(Latch::default());
    let (t, _, pending) = pending_eviction_of_tile_1(&latch);
    let tensor = Tensor::canonical(t.clone(), &[12]).unwrap();
    let moving = tensor.clone();
    let moved =
        answered(&latch, move || move_tensor(&moving, HostCarrier::zeros(ElemKind::F32, 12).unwrap()).map(drop));
    assert!(matches!(moved, Err(ModelError::Tiles(TileRefusal::Pending { .. }))), "{moved:?}");
    assert!(!t.is_released() && !t.state(super::carrier::HOOK).is_claimed());
    latch.open();
    pending.wait().unwrap();
    assert_eq!(f32s(&*t), counting(12));
    let moved = move_tensor(&tensor, HostCarrier::zeros(ElemKind::F32, 12).unwrap()).unwrap();
    assert_eq!(moved.values_f32().unwrap(), counting(12));
    assert!(t.is_released() && t.primary().is_released() && t.secondary().is_released());
}

/// The trait's `release()` (through an `Arc<dyn Carrier>`) cannot be refused: while a
/// request is pending it marks the composite released and the request, once it ends,
/// releases the tiles and the tiers.
#[test]
fn a_release_through_the_carrier_trait_while_a_request_is_pending_is_finished_by_the_request() {
    let latch = Arc::new(Latch::default());
    let (t, secondary, pending) = pending_eviction_of_tile_1(&latch);
    let as_carrier: Arc<dyn Carrier> = t.clone();
    answered(&latch, move || as_carrier.release()).unwrap();
    assert!(t.is_released() && matches!(t.get(0), Err(ModelError::Released { .. })));
    assert!(!t.primary().is_released(), "the tiles and tiers wait for the pending request");
    assert!(matches!(t.promote(&[2]), Err(ModelError::Released { .. })));
    latch.open();
    pending.wait().unwrap();
    assert!(t.primary().is_released() && t.secondary().is_released());
    assert!(secondary.made.lock().iter().all(|tile| tile.is_released()));
}

/// A projection pins the tiles it reads while it copies them (without holding the book):
/// writes to them and requests on them are refused meanwhile, other tiles are free.
#[test]
fn a_projection_pins_the_tiles_it_reads_until_it_is_done() {
    let gate = Arc::new(Gate::default());
    let secondary = Arc::new(VecCarrier { gate: Some(gate.clone()), ..VecCarrier::new(&[]) });
    let t = TiledEvictable::new(HostCarrier::from_f32(&counting(12)), secondary, &[3], &[4]).unwrap();
    t.evict(&[1]).unwrap(); // tile 1 into the gated tier: the projection's reads of it wait
    let projection = {
        let t = t.clone();
        std::thread::spawn(move || t.project(&[vec![1, 0]]).map(|p| p.values_f32().unwrap()))
    };
    let (probed, held) = (t.clone(), gate.clone());
    let (pins, write, request, other_request, other_write) = super::test_support::probe_while_held(
        &gate,
        move || held.is_waited_on(),
        move || {
            (
                [0, 1, 2].map(|i| probed.is_pinned(i).unwrap()),
                probed.set(4, Scalar::F32(-4.0)),
                probed.promote(&[1]),
                probed.evict(&[2]),
                probed.set(8, Scalar::F32(-8.0)),
            )
        },
    );
    assert_eq!(pins, [true, true, false]);
    assert!(matches!(write, Err(ModelError::Tiles(TileRefusal::WritePinned { .. }))), "{write:?}");
    assert!(pinned_at(request, "(1,)"));
    other_request.unwrap();
    other_write.unwrap();
    gate.open();
    assert_eq!(projection.join().unwrap().unwrap(), vec![4.0, 5.0, 6.0, 7.0, 0.0, 1.0, 2.0, 3.0]);
    assert_eq!([0, 1, 2].map(|i| t.is_pinned(i).unwrap()), [false; 3]);
    t.release().unwrap();
}

/// A running blocking request pins its tiles as a pending asynchronous one does: another
/// thread's write to them, request on them and release of the composite are refused, not
/// made to wait for it; a write to another tile goes ahead.
#[test]
fn a_running_blocking_request_refuses_other_threads_instead_of_making_them_wait() {
    let gate = Arc::new(Gate::default());
    let t = evicted_behind(&gate);
    let request = {
        let t = t.clone();
        std::thread::spawn(move || t.promote(&[1]))
    };
    let (probed, held) = (t.clone(), gate.clone());
    let probes = super::test_support::probe_while_held(
        &gate,
        move || held.is_waited_on(),
        move || {
            [
                matches!(probed.set(4, Scalar::F32(9.0)), Err(ModelError::Tiles(TileRefusal::WritePinned { .. }))),
                pinned_at(probed.evict(&[1]), "(1,)"),
                matches!(probed.release(), Err(ModelError::Tiles(TileRefusal::Pending { .. }))),
                probed.set(0, Scalar::F32(9.0)).is_ok(), // tile 0: not pinned
            ]
        },
    );
    assert_eq!(probes, [true; 4], "write, request and release refused; the other tile's write done");
    gate.open();
    request.join().unwrap().unwrap();
    let mut expected = counting(8);
    expected[0] = 9.0;
    assert_eq!((t.location(1).unwrap(), f32s(&*t), t.version()), (Tier::Primary, expected, 1));
    t.release().unwrap(); // nothing left pinned
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
    t.release().unwrap(); // nothing left pinned
}

/// Under a policy of two tiles, promotes evict to make room: clean tiles first, then the
/// least recently used; the primary tier never holds more than two tiles, and a promote
/// larger than the budget is refused before any effect.
#[test]
fn a_residency_policy_evicts_clean_tiles_first_then_the_least_recently_used() {
    // Four tiles of 2 f32 (8 bytes each), seeded on the secondary tier.
    let t = TiledEvictable::with_policy(
        HostCarrier::zeros(ElemKind::F32, 0).unwrap(),
        HostCarrier::from_f32(&counting(8)),
        &[4],
        &[2],
        true,
        2 * 8,
    )
    .unwrap();
    assert_eq!(t.residency_budget().map(|b| (b.bytes(), b.tiles())), Some((16, 2)));
    let on_primary = |t: &TiledEvictable| {
        let tiles = t.tiles_on(Tier::Primary).unwrap();
        assert!(tiles.len() <= 2, "over budget: {tiles:?}");
        tiles
    };
    t.promote(&[0]).unwrap();
    t.promote(&[1]).unwrap();
    assert_eq!(on_primary(&t), [0, 1]);
    t.get(0).unwrap(); // tile 0 used after tile 1
    t.promote(&[2]).unwrap();
    assert_eq!(on_primary(&t), [0, 2], "tile 1, used least recently, made room");
    assert!(t.is_clean(0).unwrap() && t.is_clean(2).unwrap());
    t.set(4, Scalar::F32(-4.0)).unwrap(); // tile 2 dirty
    t.get(1).unwrap(); // tile 0 used last
    t.promote(&[3]).unwrap();
    assert_eq!(on_primary(&t), [2, 3], "the clean tile went first, though used more recently");
    let over = t.promote(&[0, 1, 2]);
    assert!(
        matches!(over, Err(ModelError::Tiles(TileRefusal::OverBudget { tiles: 3, bytes: 24, budget: 16 }))),
        "{over:?}"
    );
    assert_eq!(on_primary(&t), [2, 3], "refused before any effect");
    t.evict(&[2, 3]).unwrap(); // explicit evicts are not the policy's
    t.promote(&[0, 1]).unwrap();
    assert_eq!(on_primary(&t), [0, 1]);
    let mut expected = counting(8);
    expected[4] = -4.0;
    assert_eq!((f32s(&*t), t.version()), (expected, 1));
    // A budget below a tile, and a primary tier seeding more tiles than the budget holds.
    let build = |primary: Arc<HostCarrier>, secondary: Arc<HostCarrier>, budget| {
        TiledEvictable::with_policy(primary, secondary, &[4], &[2], false, budget)
    };
    let empty = || HostCarrier::zeros(ElemKind::F32, 0).unwrap();
    let full = HostCarrier::from_f32(&counting(8));
    assert!(matches!(build(empty(), full.clone(), 7), Err(ModelError::Tiling { .. })));
    assert!(matches!(build(full.clone(), empty(), 16), Err(ModelError::Tiling { .. })));
    assert!(!full.is_owned(), "refused before any effect");
    assert_eq!(build(full, empty(), 32).unwrap().tiles_on(Tier::Primary).unwrap(), [0, 1, 2, 3]);
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
                    // Refused by a pin (a request on, or a write to, a tile another request
                    // pins; a release while one is pending), by a release's claim, or by the
                    // release itself.
                    match outcome {
                        Ok(())
                        | Err(
                            ModelError::Claimed { .. }
                            | ModelError::Released { .. }
                            | ModelError::Tiles(
                                TileRefusal::Pinned { .. }
                                | TileRefusal::WritePinned { .. }
                                | TileRefusal::Pending { .. },
                            ),
                        ) => {}
                        Err(other) => panic!("round {round}: {other:?}"),
                    }
                });
            }
        });
        if !t.is_released() {
            // Every value is its seed or a write's, on whichever tier.
            assert!(f32s(&*t).iter().enumerate().all(|(i, &v)| v == i as f32 || v == -1.0));
        }
        t.release().unwrap(); // refused if anything still pinned a tile
        assert!(t.primary().is_released() && t.secondary().is_released(), "round {round}");
    }
}

/// A small deterministic generator for the race below (no dependency for it).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }

    /// 1 to 3 distinct tiles of `count`, in a random order.
    fn tiles(&mut self, count: usize) -> Vec<usize> {
        let mut picked = Vec::new();
        for _ in 0..1 + self.below(3) {
            let tile = self.below(count);
            if !picked.contains(&tile) {
                picked.push(tile);
            }
        }
        picked
    }
}

/// Eight threads × 300 rounds of blocking and asynchronous promotes and evicts of random
/// tiles, writes, reads and projections, under a residency policy and with clean copies.
/// Every call succeeds or is refused by the book (a pinned tile, no room under the policy);
/// nothing deadlocks (each thread reports over a channel, waited on with a timeout); the
/// primary tier never passes the budget; every thread sees its own last write in reads and
/// projections, and at the end every slot holds its last successful write (or its seed);
/// no tile stays pinned, so the release goes through.
#[test]
fn eight_threads_racing_requests_writes_and_projections_keep_every_write_and_leave_no_pin() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 300;
    const TILES: usize = 8;
    const TILE: usize = 4;
    const BUDGET_TILES: usize = 5;
    // Seeded on a file secondary: the primary holds no tile until promoted.
    let seed = FileCarrier::temp_zeros(ElemKind::F32, TILES * TILE).unwrap();
    for slot in 0..TILES * TILE {
        seed.set(slot, Scalar::F32(slot as f32)).unwrap();
    }
    let t = TiledEvictable::with_policy(
        HostCarrier::zeros(ElemKind::F32, 0).unwrap(),
        seed,
        &[TILES],
        &[TILE],
        true,
        BUDGET_TILES * TILE * 4,
    )
    .unwrap();
    // Slot `s` is written by thread `s % THREADS` only, with values that name it.
    let written = |slot: usize, round: usize| (100_000 + slot * 1000 + round) as f32;
    let plausible = |slot: usize, v: f32| v == slot as f32 || (v >= 100_000.0 && (v as usize - 100_000) / 1000 == slot);
    let (tx, rx) = mpsc::channel();
    for k in 0..THREADS {
        let (t, tx) = (t.clone(), tx.clone());
        std::thread::spawn(move || {
            let body = || -> std::result::Result<Vec<(usize, f32)>, String> {
                let mut rng = Lcg(k as u64 + 1);
                // This thread's slots and the value each holds (its seed, or its last write).
                let mut mine: Vec<(usize, f32)> = (k..TILES * TILE).step_by(THREADS).map(|s| (s, s as f32)).collect();
                let check = |slot: usize, v: f32, mine: &[(usize, f32)]| -> std::result::Result<(), String> {
                    match mine.iter().find(|(s, _)| *s == slot) {
                        Some(&(_, last)) if v != last => Err(format!("slot {slot}: {v}, its last write {last}")),
                        _ if !plausible(slot, v) => Err(format!("slot {slot}: {v} was never written there")),
                        _ => Ok(()),
                    }
                };
                for round in 0..ROUNDS {
                    let tiles = rng.tiles(TILES);
                    let outcome = match rng.below(8) {
                        0 => t.promote(&tiles),
                        1 => t.evict(&tiles),
                        2 => t.promote_async(&tiles).and_then(|h| h.wait()),
                        3 => t.evict_async(&tiles).and_then(|h| h.wait()),
                        4 | 5 => {
                            let at = rng.below(mine.len());
                            let slot = mine[at].0;
                            let outcome = t.set(slot, Scalar::F32(written(slot, round)));
                            if outcome.is_ok() {
                                mine[at].1 = written(slot, round);
                            }
                            outcome
                        }
                        6 => match t.project(std::slice::from_ref(&tiles)) {
                            Ok(projected) => {
                                let values = projected.values_f32().unwrap();
                                for (at, &tile) in tiles.iter().enumerate() {
                                    for within in 0..TILE {
                                        let slot = tile * TILE + within;
                                        check(slot, values[at * TILE + within], &mine)
                                            .map_err(|why| format!("round {round}, projection: {why}"))?;
                                    }
                                }
                                Ok(())
                            }
                            Err(e) => Err(e),
                        },
                        _ => {
                            let slot = rng.below(TILES * TILE);
                            match t.get(slot) {
                                Ok(Scalar::F32(v)) => {
                                    check(slot, v, &mine).map_err(|why| format!("round {round}, read: {why}"))?;
                                    Ok(())
                                }
                                Ok(other) => return Err(format!("slot {slot}: {other:?}")),
                                Err(e) => Err(e),
                            }
                        }
                    };
                    match outcome {
                        Ok(())
                        | Err(ModelError::Tiles(
                            TileRefusal::Pinned { .. } | TileRefusal::WritePinned { .. } | TileRefusal::NoRoom { .. },
                        )) => {}
                        Err(other) => return Err(format!("thread {k}, round {round}: {other:?}")),
                    }
                    let on_primary = t.tiles_on(Tier::Primary).unwrap().len();
                    if on_primary > BUDGET_TILES {
                        return Err(format!("round {round}: {on_primary} tiles on the primary tier"));
                    }
                }
                Ok(mine)
            };
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body))
                .unwrap_or_else(|_| Err(format!("thread {k} panicked")));
            let _ = tx.send(outcome);
        });
    }
    drop(tx);
    let mut last = counting(TILES * TILE);
    for _ in 0..THREADS {
        let outcome = rx.recv_timeout(Duration::from_secs(120)).expect("a thread did not finish: deadlock");
        for (slot, value) in outcome.unwrap() {
            last[slot] = value;
        }
    }
    assert_eq!(f32s(&*t), last, "every slot holds its last successful write");
    assert!((0..TILES).all(|i| !t.is_pinned(i).unwrap()), "no tile left pinned");
    t.release().unwrap();
    assert!(t.primary().is_released() && t.secondary().is_released());
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
    assert_eq!(t.tiles_on(Tier::Secondary).unwrap().len(), 4);
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
    assert_eq!(t.tiles_on(Tier::Secondary).unwrap(), vec![1, 2], "residency unchanged");
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
