//! Race tests: 8 threads, at least 300 rounds each. Every pair among release, write, move
//! and a second move races on one source; exactly one side wins, the loser gets the
//! specified error, values are exact, and no claim is left behind.

use super::carrier::HOOK;
use super::movement::{MoveRefusal, Party};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use super::test_support::{Gate, VecCarrier};
use super::*;
use crate::storage::{ElemKind, Scalar};

const THREADS: usize = 8;
const ROUNDS: usize = 300;
const VALUES: [f32; 4] = [1.0, 2.0, 3.0, 4.0];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Move,
    Release,
    Write(f32),
}

enum Outcome {
    Moved(MoveHandle, Arc<dyn Carrier>),
    Done,
    Refused(ModelError),
}

/// A source whose slot reads wait at `gate`, so a move into a non-host carrier stays
/// pending until the test opens it.
fn gated_source(gate: &Arc<Gate>) -> Arc<dyn Carrier> {
    Arc::new(VecCarrier { gate: Some(gate.clone()), ..VecCarrier::new(&VALUES) })
}

fn run(op: Op, t: &Tensor) -> Outcome {
    match op {
        Op::Move => {
            let dst: Arc<dyn Carrier> = HostCarrier::zeros(ElemKind::F32, VALUES.len()).unwrap();
            match move_async(t, &dst) {
                Ok(h) => Outcome::Moved(h, dst),
                Err(e) => Outcome::Refused(e),
            }
        }
        Op::Release => match t.carrier().release() {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::Refused(e),
        },
        Op::Write(v) => match t.set(0, Scalar::F32(v)) {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::Refused(e),
        },
    }
}

/// Runs `ops` on one thread each, all released at once by a barrier.
fn race(ops: &[Op], t: &Tensor) -> Vec<Outcome> {
    let start = Arc::new(Barrier::new(ops.len()));
    let threads: Vec<_> = ops
        .iter()
        .map(|&op| {
            let (t, start) = (t.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                run(op, &t)
            })
        })
        .collect();
    threads.into_iter().map(|h| h.join().expect("no operation panics")).collect()
}

fn values(c: &Arc<dyn Carrier>) -> Vec<f32> {
    (0..c.size())
        .map(|i| match c.get(i).unwrap() {
            Scalar::F32(v) => v,
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

fn is_runtime_refusal(e: &ModelError) -> bool {
    matches!(
        e,
        ModelError::Claimed { .. } | ModelError::Released { .. } | ModelError::Move(MoveRefusal::Released { .. })
    )
}

/// Moves, releases and writes race on one idle source. Either one move wins (every other
/// move and every release is refused) or the releases win (every move is refused); a write
/// lands only if it came first, and the moved values include exactly the writes that landed.
#[test]
fn moves_releases_and_writes_racing_on_one_source_have_one_winner() {
    let ops = [Op::Move, Op::Move, Op::Move, Op::Release, Op::Release, Op::Write(10.0), Op::Write(20.0), Op::Move];
    let mut move_wins = 0;
    for _ in 0..ROUNDS {
        let gate = Arc::new(Gate::default());
        let src = gated_source(&gate);
        let t = Tensor::canonical(src.clone(), &[4]).unwrap();
        let outcomes = race(&ops, &t);
        gate.open();

        let mut moved = Vec::new();
        let (mut released, mut written) = (0, Vec::new());
        for (op, outcome) in ops.iter().zip(outcomes) {
            match (op, outcome) {
                (Op::Move, Outcome::Moved(h, dst)) => moved.push((h, dst)),
                (Op::Release, Outcome::Done) => released += 1,
                (Op::Write(v), Outcome::Done) => written.push(*v),
                (_, Outcome::Refused(e)) => assert!(is_runtime_refusal(&e), "{op:?} refused with {e:?}"),
                (op, _) => unreachable!("{op:?}"),
            }
        }
        match (moved.len(), released) {
            (1, 0) => move_wins += 1,
            (0, 2) => {}
            other => panic!("moves won {} and releases {}: not exactly one side", other.0, other.1),
        }
        assert_eq!(src.version(), written.len() as u64, "exactly the landed writes count");
        for (h, dst) in moved {
            let out = h.wait().unwrap();
            let got = values(&dst);
            match written.as_slice() {
                [] => assert_eq!(got, VALUES),
                landed => assert!(landed.contains(&got[0]) && got[1..] == VALUES[1..], "{got:?}"),
            }
            assert_eq!(out.values_f32().unwrap(), got);
            assert!(!dst.state(HOOK).is_claimed() && dst.version() == 0);
        }
        assert!(src.is_released());
        assert!(!src.state(HOOK).is_claimed(), "no claim is left behind");
    }
    assert!(move_wins > 0, "the race never let a move win; the test exercised nothing");
}

/// Against a pending move, every release, write and second move of its source, and every
/// release and write of its destination, is refused with `Claimed`; the move then commits
/// the exact values.
#[test]
fn a_pending_move_refuses_every_conflicting_operation() {
    for _ in 0..ROUNDS {
        let gate = Arc::new(Gate::default());
        let src = gated_source(&gate);
        let t = Tensor::canonical(src.clone(), &[4]).unwrap();
        let dst: Arc<dyn Carrier> = Arc::new(VecCarrier::new(&[0.0; 4]));
        let pending = move_async(&t, &dst).unwrap();
        let dst_view = Tensor::canonical(dst.clone(), &[4]).unwrap();

        let start = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|i| {
                let (t, dst_view, start) = (t.clone(), dst_view.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    let err = match i % 4 {
                        0 => t.carrier().release().unwrap_err(),
                        1 => t.set(1, Scalar::F32(-1.0)).unwrap_err(),
                        2 => match run(Op::Move, &t) {
                            Outcome::Refused(e) => e,
                            _ => panic!("a second move of a claimed source was accepted"),
                        },
                        _ => {
                            let e = dst_view.set(0, Scalar::F32(-1.0)).unwrap_err();
                            assert!(matches!(e, ModelError::Claimed { .. }), "{e:?}");
                            dst_view.carrier().release().unwrap_err()
                        }
                    };
                    assert!(matches!(err, ModelError::Claimed { .. }), "thread {i}: {err:?}");
                })
            })
            .collect();
        for h in threads {
            h.join().unwrap();
        }
        assert!(!pending.is_done());
        gate.open();
        assert_eq!(pending.wait().unwrap().values_f32().unwrap(), VALUES);
        assert_eq!(values(&dst), VALUES);
        assert!(src.is_released() && !src.state(HOOK).is_claimed());
        assert!(!dst.is_released() && !dst.state(HOOK).is_claimed());
        assert_eq!((src.version(), dst.version()), (0, 0));
    }
}

/// Eight moves of one host source into host carriers (the bulk route, no gate): exactly one
/// is accepted, the others are refused while it is pending or after it released the source.
#[test]
fn eight_racing_moves_of_one_source_have_exactly_one_winner() {
    for _ in 0..ROUNDS {
        let src: Arc<dyn Carrier> = HostCarrier::from_f32(&VALUES);
        let t = Tensor::canonical(src.clone(), &[4]).unwrap();
        let outcomes = race(&[Op::Move; THREADS], &t);
        let mut winners = 0;
        for outcome in outcomes {
            match outcome {
                Outcome::Moved(h, dst) => {
                    winners += 1;
                    h.wait().unwrap();
                    assert_eq!(values(&dst), VALUES);
                }
                Outcome::Refused(e) => assert!(is_runtime_refusal(&e), "{e:?}"),
                Outcome::Done => unreachable!(),
            }
        }
        assert_eq!(winners, 1);
        assert!(src.is_released() && !src.state(HOOK).is_claimed());
    }
}

/// A release whose hook is slow (50 ms) racing a move: the carrier is marked released
/// before the hook runs, so the move is refused instead of copying storage being freed;
/// or the move claimed first and the release is refused. Never both, never a crash.
#[test]
fn a_slow_release_hook_racing_a_move() {
    for _ in 0..20 {
        // The gate keeps a winning move pending until both calls have returned, so a
        // release that succeeds can only have come first.
        let gate = Arc::new(Gate::default());
        let src: Arc<dyn Carrier> = Arc::new(VecCarrier {
            release_sleep: Duration::from_millis(50),
            gate: Some(gate.clone()),
            ..VecCarrier::new(&VALUES)
        });
        let t = Tensor::canonical(src.clone(), &[4]).unwrap();
        let outcomes = race(&[Op::Release, Op::Move], &t);
        gate.open();
        match (&outcomes[0], &outcomes[1]) {
            (Outcome::Done, Outcome::Refused(ModelError::Move(MoveRefusal::Released { party: Party::Source, .. }))) => {
            }
            (Outcome::Refused(ModelError::Claimed { .. }), Outcome::Moved(h, dst)) => {
                h.wait().unwrap();
                assert_eq!(values(dst), VALUES);
            }
            _ => panic!("not exactly one winner"),
        }
        assert!(src.is_released() && !src.state(HOOK).is_claimed());
    }
}
