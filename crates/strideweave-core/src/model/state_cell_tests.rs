//! The generic cell on its own: each transition's checks in order, payloads handed back,
//! the lock-free mirrors, and races between transitions with exactly one winner.

use std::sync::{Arc, Barrier};
use std::thread;

use super::*;

/// Payloads with identities, as the binding's Python objects have.
type Cell = StateCell<&'static str, u32>;

/// Claim 7 is "the caller's own" (passes); 99 is "being released".
struct Judge;

#[derive(Debug, PartialEq)]
enum Why {
    Pending,
    BeingReleased,
}

impl ClaimJudge<&'static str, u32> for Judge {
    type Blocked = Why;
    type Owner = &'static str;
    fn judge(&self, held: &u32) -> Verdict<Why> {
        match held {
            7 => Verdict::Passes,
            99 => Verdict::Blocks(Why::BeingReleased),
            _ => Verdict::Blocks(Why::Pending),
        }
    }
    fn owner(&self, owner: &&'static str) -> &'static str {
        owner
    }
}

const LOOSE: ClaimRule = ClaimRule { owner_refuses: false, mutable: true };

fn claim_of(cell: &Cell) -> Option<u32> {
    cell.with_claim(|c| c.copied())
}

#[test]
fn a_fresh_cell_is_free() {
    let cell = Cell::new();
    assert_eq!(cell.version(), 0);
    assert!(cell.is_free() && !cell.is_released() && !cell.is_owned() && !cell.is_claimed());
}

#[test]
fn claims_check_released_owner_claim_then_mutability() {
    let cell = Cell::new();
    assert_eq!(cell.replace_owner(Some("tiers")), None);
    assert_eq!(cell.replace_claim(Some(1)), None);
    cell.set_released(true);
    assert_eq!(cell.try_claim(2, ClaimRule::FREE, &Judge), Err((2, Refusal::Released)));
    cell.set_released(false);
    assert_eq!(cell.try_claim(2, ClaimRule::FREE, &Judge), Err((2, Refusal::Owned("tiers"))));
    assert_eq!(cell.try_claim(2, LOOSE, &Judge), Err((2, Refusal::Claimed(Why::Pending))));
    assert_eq!(cell.replace_claim(None), Some(1));
    let immutable = ClaimRule { owner_refuses: false, mutable: false };
    assert_eq!(cell.try_claim(2, immutable, &Judge), Err((2, Refusal::NotMutable)));
    assert_eq!(cell.try_claim(2, LOOSE, &Judge), Ok(None));
    assert_eq!(claim_of(&cell), Some(2));
    assert!(cell.is_claimed() && cell.is_owned() && !cell.is_free());
}

#[test]
fn a_claim_the_judge_passes_is_displaced_and_handed_back() {
    let cell = Cell::new();
    assert_eq!(cell.replace_claim(Some(7)), None);
    assert_eq!(cell.try_claim(3, LOOSE, &Judge), Ok(Some(7)));
    assert_eq!(claim_of(&cell), Some(3));
    assert_eq!(cell.drop_claim_if(|c| *c == 4), None);
    assert_eq!(cell.drop_claim_if(|c| *c == 3), Some(3));
    assert!(cell.is_free());
}

#[test]
fn claim_all_checks_every_entry_before_claiming_any() {
    let (a, b) = (Cell::new(), Cell::new());
    b.set_released(true);
    let entries = [(&a, LOOSE), (&b, LOOSE)];
    assert_eq!(Cell::claim_all(&entries, || 5, &Judge), Err((1, Refusal::Released)));
    assert!(a.is_free(), "a refused batch claims nothing");
    b.set_released(false);
    assert_eq!(b.replace_claim(Some(7)), None);
    assert_eq!(Cell::claim_all(&entries, || 5, &Judge), Ok(vec![None, Some(7)]));
    assert_eq!((claim_of(&a), claim_of(&b)), (Some(5), Some(5)));
}

#[test]
fn claim_array_is_claim_all_without_allocating() {
    let (a, b) = (Cell::new(), Cell::new());
    b.set_released(true);
    assert_eq!(Cell::claim_array([(&a, LOOSE), (&b, LOOSE)], || 5, &Judge), Err((1, Refusal::Released)));
    assert!(a.is_free(), "a refused batch claims nothing");
    b.set_released(false);
    assert_eq!(b.replace_claim(Some(7)), None);
    // Listed in either order (the cells lock in address order), the same outcome.
    assert_eq!(Cell::claim_array([(&b, LOOSE), (&a, LOOSE)], || 5, &Judge), Ok([Some(7), None]));
    assert_eq!((claim_of(&a), claim_of(&b)), (Some(5), Some(5)));
    let (c, d) = (Cell::new(), Cell::new());
    let mut made = 0;
    let got = Cell::claim_array(
        [(&c, LOOSE), (&d, LOOSE), (&c, LOOSE)],
        || {
            made += 1;
            9
        },
        &Judge,
    );
    assert_eq!(got, Ok([None, None, None]));
    assert_eq!((made, claim_of(&c), claim_of(&d)), (2, Some(9), Some(9)));
}

#[test]
fn claim_all_claims_a_cell_listed_twice_once() {
    let a = Cell::new();
    let mut made = 0;
    let got = Cell::claim_all(
        &[(&a, LOOSE), (&a, LOOSE)],
        || {
            made += 1;
            5
        },
        &Judge,
    );
    assert_eq!(got, Ok(vec![None, None]));
    assert_eq!((made, claim_of(&a)), (1, Some(5)));
}

#[test]
fn release_checks_owner_then_claim_then_is_idempotent() {
    let cell = Cell::new();
    assert_eq!(cell.replace_owner(Some("tiers")), None);
    assert_eq!(cell.replace_claim(Some(99)), None);
    assert_eq!(cell.mark_released(&Judge), Err(Refusal::Owned("tiers")));
    assert_eq!(cell.replace_owner(None), Some("tiers"));
    assert_eq!(cell.mark_released(&Judge), Err(Refusal::Claimed(Why::BeingReleased)));
    assert_eq!(cell.replace_claim(Some(7)), Some(99));
    assert_eq!(cell.mark_released(&Judge), Ok(true));
    assert_eq!(cell.mark_released(&Judge), Ok(false));
    assert!(cell.is_released());
}

#[test]
fn a_release_in_two_steps_holds_a_marker_while_its_hook_runs() {
    let cell = Cell::new();
    assert_eq!(cell.begin_release(|| 99, &Judge), Ok(ReleaseStart::Began { marked: true }));
    assert_eq!(claim_of(&cell), Some(99));
    assert_eq!(cell.try_claim(1, LOOSE, &Judge), Err((1, Refusal::Claimed(Why::BeingReleased))));
    assert_eq!(cell.abort_release(None), Some(99));
    assert!(cell.is_free(), "a failed hook leaves the carrier as it was");
    assert_eq!(cell.begin_release(|| 99, &Judge), Ok(ReleaseStart::Began { marked: true }));
    assert_eq!(cell.finish_release(None), Some(99));
    assert!(cell.is_released() && !cell.is_claimed());
    assert_eq!(cell.begin_release(|| 99, &Judge), Ok(ReleaseStart::AlreadyReleased));
}

#[test]
fn a_release_under_a_passing_claim_keeps_that_claim() {
    let cell = Cell::new();
    assert_eq!(cell.replace_claim(Some(7)), None);
    assert_eq!(cell.begin_release(|| 99, &Judge), Ok(ReleaseStart::Began { marked: false }));
    assert_eq!(claim_of(&cell), Some(7));
    assert_eq!(cell.finish_release(Some(7)), Some(7));
    assert!(cell.is_released() && cell.is_claimed());
}

#[test]
fn release_claimed_ends_the_claim_and_releases_at_once() {
    let cell = Cell::new();
    assert_eq!(cell.try_claim(1, LOOSE, &Judge), Ok(None));
    assert_eq!(cell.release_claimed(), (true, Some(1)));
    assert_eq!(cell.release_claimed(), (false, None));
}

#[test]
fn adopt_and_disown() {
    let cell = Cell::new();
    assert_eq!(cell.adopt("a", &Judge), Ok(()));
    assert_eq!(cell.adopt("b", &Judge), Err(("b", Refusal::Owned("a"))));
    assert_eq!(cell.disown_if(|o| *o == "b"), None);
    assert_eq!(cell.disown_if(|o| *o == "a"), Some("a"));
    assert!(!cell.is_owned());
}

#[test]
fn an_owner_the_judge_admits_releases_and_stays_the_owner() {
    /// Judge that lets owner "a" release its own carrier.
    struct OwnerA;
    impl ClaimJudge<&'static str, u32> for OwnerA {
        type Blocked = Why;
        type Owner = &'static str;
        fn judge(&self, held: &u32) -> Verdict<Why> {
            Judge.judge(held)
        }
        fn owner(&self, owner: &&'static str) -> &'static str {
            owner
        }
        fn owner_passes(&self, owner: &&'static str) -> bool {
            *owner == "a"
        }
    }
    let cell = Cell::new();
    assert_eq!(cell.adopt("b", &Judge), Ok(()));
    assert_eq!(cell.begin_release(|| 99, &OwnerA), Err(Refusal::Owned("b")), "another owner refuses");
    assert_eq!(cell.disown_if(|o| *o == "b"), Some("b"));
    assert_eq!(cell.adopt("a", &Judge), Ok(()));
    assert_eq!(cell.begin_release(|| 99, &Judge), Err(Refusal::Owned("a")), "no owner passes by default");
    assert_eq!(cell.begin_release(|| 99, &OwnerA), Ok(ReleaseStart::Began { marked: true }));
    assert_eq!(cell.finish_release(None), Some(99));
    assert!(cell.is_released() && cell.is_owned(), "released for its owner, which it stays");
}

#[test]
fn mutations_and_writes_count_in_the_version() {
    let cell = Cell::new();
    assert_eq!(cell.mutate(&Judge), Ok(()));
    assert!(cell.count_write());
    assert_eq!(cell.replace_claim(Some(7)), None);
    assert_eq!(cell.mutate(&Judge), Ok(()), "a passing claim does not stop a mutation");
    assert!(!cell.count_write(), "a claimed carrier's writes are its move's, not counted");
    assert_eq!(cell.replace_claim(Some(1)), Some(7));
    assert_eq!(cell.mutate(&Judge), Err(Refusal::Claimed(Why::Pending)));
    assert_eq!(cell.version(), 3);
    let gate = cell.begin_write().expect("live");
    assert_eq!(gate.claim(), Some(&1));
    gate.commit();
    assert_eq!(cell.version(), 4);
    cell.set_released(true);
    assert!(matches!(cell.begin_write(), Err(Refusal::Released)));
}

const THREADS: usize = 8;
const ROUNDS: usize = 300;

/// Runs `op(thread)` on 8 threads at once per round; `check` sees the outcomes and the cell.
fn race<R: Send + 'static>(
    setup: impl Fn() -> Cell,
    op: impl Fn(&Cell, u32) -> R + Send + Sync + 'static,
    check: impl Fn(&Cell, Vec<R>),
) {
    let op = Arc::new(op);
    for _ in 0..ROUNDS {
        let cell = Arc::new(setup());
        let start = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS as u32)
            .map(|n| {
                let (cell, start, op) = (cell.clone(), start.clone(), op.clone());
                thread::spawn(move || {
                    start.wait();
                    op(&cell, n + 10)
                })
            })
            .collect();
        let outcomes = threads.into_iter().map(|t| t.join().expect("no panic")).collect();
        check(&cell, outcomes);
    }
}

#[test]
fn racing_claims_have_exactly_one_winner() {
    race(
        Cell::new,
        |c, n| c.try_claim(n, ClaimRule::FREE, &Judge).is_ok(),
        |cell, won| {
            assert_eq!(won.iter().filter(|w| **w).count(), 1);
            assert!(cell.is_claimed());
        },
    );
}

#[test]
fn racing_batches_over_crossed_cells_have_exactly_one_winner() {
    let pair = Arc::new((Cell::new(), Cell::new()));
    let shared = pair.clone();
    race(
        Cell::new,
        move |_, n| {
            let (a, b) = (&shared.0, &shared.1);
            // Half the threads list the cells the other way round: address order still
            // prevents a deadlock.
            let entries = if n % 2 == 0 { [(a, LOOSE), (b, LOOSE)] } else { [(b, LOOSE), (a, LOOSE)] };
            let won = Cell::claim_all(&entries, || n, &Judge).is_ok();
            (won, n)
        },
        |_, outcomes| {
            let winners: Vec<u32> = outcomes.iter().filter(|(w, _)| *w).map(|(_, n)| *n).collect();
            assert_eq!(winners.len(), 1);
            assert_eq!((claim_of(&pair.0), claim_of(&pair.1)), (Some(winners[0]), Some(winners[0])));
            assert_eq!(pair.0.replace_claim(None), Some(winners[0]));
            assert_eq!(pair.1.replace_claim(None), Some(winners[0]));
        },
    );
}

#[test]
fn a_release_racing_claims_has_exactly_one_winner() {
    race(
        Cell::new,
        |c, n| {
            if n == 10 {
                match c.begin_release(|| 99, &Judge) {
                    Ok(ReleaseStart::Began { marked: true }) => {
                        assert_eq!(c.finish_release(None), Some(99));
                        true
                    }
                    _ => false,
                }
            } else {
                c.try_claim(n, ClaimRule::FREE, &Judge).is_ok()
            }
        },
        |cell, won| {
            assert_eq!(won.iter().filter(|w| **w).count(), 1);
            assert!(cell.is_released() != cell.is_claimed(), "either released or claimed, never both");
        },
    );
}

#[test]
fn an_open_write_checks_released_owner_then_claim() {
    let cell = Cell::new();
    assert_eq!(cell.replace_owner(Some("tiers")), None);
    assert_eq!(cell.open_write(|_| false, &Judge), Err(Refusal::Owned("tiers")));
    assert_eq!(cell.replace_claim(Some(1)), None);
    assert_eq!(cell.open_write(|o| *o == "tiers", &Judge), Err(Refusal::Claimed(Why::Pending)));
    assert_eq!(cell.replace_claim(Some(7)), Some(1));
    assert_eq!(cell.open_write(|o| *o == "tiers", &Judge), Ok(()), "the caller's own claim admits it");
    assert!(!cell.close_write(true), "a write under a claim relocates; it is not counted");
    cell.set_released(true);
    assert_eq!(cell.open_write(|_| true, &Judge), Err(Refusal::Released));
    assert!(!cell.is_being_written(), "nothing opened by a refusal");
}

#[test]
fn an_open_write_refuses_claims_and_releases_until_it_closes() {
    let cell = Cell::new();
    cell.open_write(|_| false, &Judge).unwrap();
    cell.open_write(|_| false, &Judge).unwrap(); // writes do not exclude each other
    assert_eq!(cell.try_claim(2, LOOSE, &Judge), Err((2, Refusal::BeingWritten)));
    assert_eq!(cell.begin_release(|| 99, &Judge), Err(Refusal::BeingWritten));
    assert_eq!(cell.mark_released(&Judge), Err(Refusal::BeingWritten));
    assert_eq!(cell.adopt("tiers", &Judge), Err(("tiers", Refusal::BeingWritten)));
    assert!(cell.close_write(true));
    assert_eq!(cell.try_claim(2, LOOSE, &Judge), Err((2, Refusal::BeingWritten)), "one write still open");
    assert!(!cell.close_write(false), "a failed store is not counted");
    assert_eq!(cell.version(), 1);
    assert_eq!(cell.try_claim(2, LOOSE, &Judge), Ok(None));
    assert!(cell.is_free() || cell.is_claimed());
}

#[test]
fn a_write_racing_claims_and_a_release_sees_exactly_one_order() {
    // Each round: one thread opens and closes a write, others claim or release. Whatever
    // wins, the state is consistent: a write that opened was counted or met a claim taken
    // after it closed; a claim or release that went ahead never overlapped an open write.
    for _ in 0..200 {
        let cell = Arc::new(Cell::new());
        let barrier = Arc::new(Barrier::new(3));
        let writer = {
            let (cell, barrier) = (cell.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                match cell.open_write(|_| false, &Judge) {
                    Ok(()) => {
                        let claimed_during = cell.is_claimed() || cell.is_released();
                        cell.close_write(true);
                        assert!(!claimed_during, "nothing is claimed or released while a write is open");
                        true
                    }
                    Err(_) => false,
                }
            })
        };
        let claimer = {
            let (cell, barrier) = (cell.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                cell.try_claim(3, LOOSE, &Judge).is_ok()
            })
        };
        barrier.wait();
        let released = matches!(cell.begin_release(|| 99, &Judge), Ok(ReleaseStart::Began { .. }));
        let wrote = writer.join().unwrap();
        let claimed = claimer.join().unwrap();
        assert!(!cell.is_being_written());
        if wrote {
            assert_eq!(cell.version(), 1);
        }
        assert!(!(claimed && released), "a release never begins over a claim");
    }
}

#[test]
fn a_refused_transition_of_another_thread_waits_out_the_open_writes() {
    let cell = Arc::new(Cell::new());
    cell.open_write(|_| false, &Judge).unwrap();
    assert!(!cell.wait_out_writes(), "the writing thread itself is never made to wait");
    let waiter = {
        let cell = cell.clone();
        thread::spawn(move || {
            assert_eq!(cell.try_claim(2, LOOSE, &Judge), Err((2, Refusal::BeingWritten)));
            assert!(cell.wait_out_writes());
            cell.try_claim(2, LOOSE, &Judge)
        })
    };
    thread::sleep(std::time::Duration::from_millis(20));
    assert!(cell.close_write(true));
    assert_eq!(waiter.join().unwrap(), Ok(None));
    assert_eq!((cell.version(), claim_of(&cell)), (1, Some(2)));
}
