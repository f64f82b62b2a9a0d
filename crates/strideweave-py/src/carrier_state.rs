//! The Python carriers' state transitions, on the core's `model::CarrierState` — the one
//! carrier state type, the Rust model's too — with Python objects as its foreign payloads: the
//! owning composite's token as owner, the pending move request (or the "being released"
//! marker) as claim, each wrapped in a [`PyPayload`].
//!
//! Each transition is one critical section of the state's cell (`CarrierState::cell`), so its
//! atomicity comes from the core. The rules the Python layer writes in its own terms enter as
//! a [`PyJudge`]: the claim the caller passes as its own (`active`: a move request releasing
//! its source at its commit) does not block, whichever thread runs it, and the
//! `carriers.base.RELEASING` marker blocks with its own message. No claim is lifted for a
//! thread. The judge only compares identities and takes references, so no Python code runs
//! inside the cell's lock; payloads a transition displaces are dropped after it (a `__del__`
//! may read this carrier). Every refusal is the core's catalogue (`model::StateRefusal`),
//! worded as the Python layer worded it when it did these checks itself, and raised through
//! `error::state_refusal`.

use std::any::Any;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;
use strideweave_core::model::{
    Claim, ClaimJudge, ClaimRule, Foreign, ForeignObject, Holder, Owner, Refusal, ReleaseStart, StateCell,
    StateRefusal, Verdict,
};

use crate::carrier_base::CarrierBase;
use crate::error;

/// A Python object as a carrier state's owner or claim payload.
///
/// Each stored payload is a payload of its own, never a clone of another carrier's handle:
/// the carrier's `__traverse__` reports it to the garbage collector as one reference the
/// carrier holds, which it must be.
#[derive(Debug)]
pub(crate) struct PyPayload(Py<PyAny>);

impl ForeignObject for PyPayload {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `object` as a claim.
pub(crate) fn py_claim(object: Py<PyAny>) -> Claim {
    Claim::Foreign(Foreign::new(PyPayload(object)))
}

/// `object` as an owner.
pub(crate) fn py_owner(object: Py<PyAny>) -> Owner {
    Owner::Foreign(Foreign::new(PyPayload(object)))
}

fn payload_object(foreign: Option<&Foreign>) -> Option<&Py<PyAny>> {
    foreign?.downcast_ref::<PyPayload>().map(|payload| &payload.0)
}

/// The Python object of a claim (None for a claim of the core's own move request, which the
/// native fast routes take: `inline_move.rs`, `async_move.rs`).
pub(crate) fn claim_object(claim: &Claim) -> Option<&Py<PyAny>> {
    payload_object(claim.foreign())
}

/// The Python object of an owner (None for an owner of the Rust model, which no Python
/// carrier has).
pub(crate) fn owner_object(owner: &Owner) -> Option<&Py<PyAny>> {
    payload_object(owner.foreign())
}

/// What the Python layer's claims demand beyond a live carrier: ownership is checked by the
/// move's validation table, not by the claim.
const PY_CLAIM: ClaimRule = ClaimRule { owner_refuses: false, mutable: true };

/// Why a held claim refuses a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Held {
    /// The carrier's `_release()` hook is running.
    BeingReleased,
    /// A pending move holds it.
    Pending,
}

/// The Python layer's claim rules (see the module docs).
pub(crate) struct PyJudge<'a, 'py> {
    pub(crate) active: Option<&'a Bound<'py, PyAny>>,
    pub(crate) releasing: &'a Bound<'py, PyAny>,
    /// The owner the transition runs for, if any: that owner does not refuse it.
    pub(crate) owner: Option<&'a Bound<'py, PyAny>>,
}

impl ClaimJudge<Owner, Claim> for PyJudge<'_, '_> {
    type Blocked = Held;
    /// The owner's type, for the message (None: a Rust owner, which has no Python type).
    type Owner = Option<Py<PyType>>;

    /// Identity (`is`) with `active` and `releasing`; a claim that is no Python object (the
    /// core's move request's, which the native fast routes take) blocks as a pending move.
    fn judge(&self, held: &Claim) -> Verdict<Held> {
        match claim_object(held) {
            Some(held) if self.active.is_some_and(|active| active.is(held)) => Verdict::Passes,
            Some(held) if self.releasing.is(held) => Verdict::Blocks(Held::BeingReleased),
            _ => Verdict::Blocks(Held::Pending),
        }
    }

    fn owner(&self, owner: &Owner) -> Option<Py<PyType>> {
        owner_object(owner).map(|owner| owner.bind(self.releasing.py()).get_type().unbind())
    }

    fn owner_passes(&self, owner: &Owner) -> bool {
        owner_object(owner).is_some_and(|owner| self.owner.is_some_and(|ours| ours.is(owner)))
    }
}

type PyRefusal = Refusal<Held, Option<Py<PyType>>>;

/// `type(obj).__name__`.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(obj.get_type().name()?.to_string())
}

/// The error `Carrier._sw_check_unclaimed(action)` raises.
fn claimed_error(carrier: &str, action: &str, why: Held) -> PyErr {
    let by = match why {
        Held::BeingReleased => Holder::BeingReleased,
        Held::Pending => Holder::PendingMove,
    };
    error::state_refusal(StateRefusal::Held { carrier: carrier.into(), action: action.into(), by })
}

/// The error of a claim or a release refused because a write is storing through a Python hook
/// (`Carrier._sw_write_slot`): the write began first, and the carrier's state must not change
/// under it.
fn being_written_error(carrier: &str, action: &str) -> PyErr {
    error::state_refusal(StateRefusal::Held {
        carrier: carrier.into(),
        action: action.into(),
        by: Holder::BeingWritten,
    })
}

/// The class name of the owner a refusal names.
fn owner_name(py: Python<'_>, owner: &Option<Py<PyType>>) -> PyResult<String> {
    match owner {
        Some(owner) => Ok(owner.bind(py).name()?.to_string()),
        // A Rust model's owner: never one of a Python carrier.
        None => Ok("OwnerToken".into()),
    }
}

/// After a refusal by an open write: waits, with the GIL released (a writer's store runs Python
/// code), until the writes other threads have open on `cell` close, and returns true so the
/// caller tries again; false at once when this thread has a write open there (its store's own
/// code asking for the transition), which stays refused.
fn waited_out_writes(py: Python<'_>, cell: &StateCell<Owner, Claim>) -> bool {
    py.detach(|| cell.wait_out_writes())
}

/// A refusal only the checks named by the caller can produce; anything else is a bug.
fn unexpected(why: &PyRefusal) -> PyErr {
    PyRuntimeError::new_err(format!("internal error: unexpected carrier state refusal {why:?}"))
}

/// `take_claims`: claims every `(carrier, role, action)` for `claim`, or none (see
/// `carriers.base.take_claims`).
pub(crate) fn take_claims(
    claim: &Bound<'_, PyAny>,
    entries: &[(Bound<'_, CarrierBase>, String, String)],
    judge: &PyJudge<'_, '_>,
) -> PyResult<()> {
    let cells: Vec<(&StateCell<Owner, Claim>, ClaimRule)> =
        entries.iter().map(|(c, _, _)| (c.get().state().cell(), PY_CLAIM)).collect();
    let outcome = loop {
        // One payload per carrier (see `PyPayload`).
        match StateCell::claim_all(&cells, || py_claim(claim.clone().unbind()), judge) {
            Err((n, Refusal::BeingWritten)) if waited_out_writes(claim.py(), cells[n].0) => continue,
            outcome => break outcome,
        }
    };
    match outcome {
        Ok(displaced) => {
            drop(displaced);
            Ok(())
        }
        Err((n, why)) => {
            let (carrier, role, action) = &entries[n];
            let name = type_name(carrier.as_any())?;
            Err(match why {
                Refusal::Released => {
                    error::state_refusal(StateRefusal::PartyReleased { role: role.clone(), carrier: name })
                }
                Refusal::Claimed(held) => claimed_error(&name, action, held),
                Refusal::BeingWritten => being_written_error(&name, action),
                other => unexpected(&other),
            })
        }
    }
}

/// `take_claim`: claims one carrier for a composite's own operation (`action`: "evict",
/// "project into", ...) if it is live, unowned and no blocking claim holds it, checked in
/// that order in the same critical section as the claim. The refusals are worded in terms
/// of the action, as `Evictable.evict()` words them.
pub(crate) fn take_claim(
    carrier: &Bound<'_, CarrierBase>,
    claim: &Bound<'_, PyAny>,
    action: &str,
    judge: &PyJudge<'_, '_>,
) -> PyResult<()> {
    let py = carrier.py();
    let rule = ClaimRule { owner_refuses: true, mutable: true };
    let cell = carrier.get().state().cell();
    let outcome = loop {
        match cell.try_claim(py_claim(claim.clone().unbind()), rule, judge) {
            Err((refused, Refusal::BeingWritten)) if waited_out_writes(py, cell) => drop(refused),
            outcome => break outcome,
        }
    };
    match outcome {
        Ok(displaced) => {
            drop(displaced);
            Ok(())
        }
        Err((refused, why)) => {
            drop(refused);
            let name = type_name(carrier.as_any())?;
            Err(match why {
                Refusal::Released => {
                    error::state_refusal(StateRefusal::ActionOnReleased { action: action.into(), carrier: name })
                }
                Refusal::Owned(owner) => error::state_refusal(StateRefusal::ActionOnOwned {
                    action: action.into(),
                    carrier: name,
                    owner: owner_name(py, &owner)?,
                }),
                Refusal::Claimed(held) => claimed_error(&name, action, held),
                Refusal::BeingWritten => being_written_error(&name, action),
                other => unexpected(&other),
            })
        }
    }
}

/// `adopt`: makes `owner` the owner of a live, unowned carrier no blocking claim holds, in
/// one step. False when refused: the caller words the refusal by its own checks, which the
/// refused state now fails.
pub(crate) fn adopt(carrier: &CarrierBase, owner: &Bound<'_, PyAny>, judge: &PyJudge<'_, '_>) -> bool {
    let cell = carrier.state().cell();
    loop {
        match cell.adopt(py_owner(owner.clone().unbind()), judge) {
            Ok(()) => return true,
            Err((refused, why)) => {
                drop(refused);
                if !(matches!(why, Refusal::BeingWritten) && waited_out_writes(owner.py(), cell)) {
                    return false;
                }
            }
        }
    }
}

/// Drops `claim` if the carrier still holds it (idempotent).
pub(crate) fn drop_claim(carrier: &CarrierBase, claim: &Bound<'_, PyAny>) {
    drop(carrier.state().cell().drop_claim_if(|held| claim_object(held).is_some_and(|held| claim.is(held))));
}

/// `_sw_check_unclaimed(action)`: the claim is read in one critical section.
pub(crate) fn check_unclaimed(carrier: &Bound<'_, CarrierBase>, action: &str, judge: &PyJudge<'_, '_>) -> PyResult<()> {
    let held = carrier.get().state().cell().with_claim(|held| {
        held.and_then(|held| match judge.judge(held) {
            Verdict::Blocks(why) => Some(why),
            // `PyJudge` gives only these two verdicts; any other lets the claim pass.
            _ => None,
        })
    });
    match held {
        None => Ok(()),
        Some(why) => Err(claimed_error(&type_name(carrier.as_any())?, action, why)),
    }
}

/// What `Carrier.release()` raises for an owned carrier.
fn release_refused(carrier: &Bound<'_, CarrierBase>, why: PyRefusal) -> PyResult<PyErr> {
    let py = carrier.py();
    let name = type_name(carrier.as_any())?;
    Ok(match why {
        Refusal::Owned(owner) => {
            error::state_refusal(StateRefusal::ReleaseOfOwned { carrier: name, owner: owner_name(py, &owner)? })
        }
        Refusal::Claimed(held) => claimed_error(&name, "release", held),
        Refusal::BeingWritten => being_written_error(&name, "release"),
        other => unexpected(&other),
    })
}

/// The first half of `release()`: `(began, saved)` where `saved` is the claim to restore
/// afterwards (the active move's, or None when the carrier now holds the marker). Raises
/// for an owned or claimed carrier; `(False, None)` if released already.
pub(crate) fn begin_release(
    carrier: &Bound<'_, CarrierBase>,
    judge: &PyJudge<'_, '_>,
) -> PyResult<(bool, Option<Py<PyAny>>)> {
    let marker = || py_claim(judge.releasing.clone().unbind());
    let cell = carrier.get().state().cell();
    let outcome = loop {
        match cell.begin_release(marker, judge) {
            Err(Refusal::BeingWritten) if waited_out_writes(carrier.py(), cell) => continue,
            outcome => break outcome,
        }
    };
    match outcome {
        Ok(ReleaseStart::AlreadyReleased) => Ok((false, None)),
        Ok(ReleaseStart::Began { marked: true }) => Ok((true, None)),
        // Only the active move's claim lets a release of a claimed carrier begin.
        Ok(ReleaseStart::Began { marked: false }) => Ok((true, judge.active.map(|a| a.clone().unbind()))),
        Err(why) => Err(release_refused(carrier, why)?),
        Ok(other) => Err(PyRuntimeError::new_err(format!("internal error: unexpected release start {other:?}"))),
    }
}

/// `_increment_version()`: owned or claimed raises, else the version rises by one.
pub(crate) fn mutate(carrier: &Bound<'_, CarrierBase>, judge: &PyJudge<'_, '_>) -> PyResult<()> {
    let py = carrier.py();
    match carrier.get().state().cell().mutate(judge) {
        Ok(()) => Ok(()),
        Err(why) => {
            let name = type_name(carrier.as_any())?;
            Err(match why {
                Refusal::Owned(owner) => {
                    error::state_refusal(StateRefusal::Owned { carrier: name, owner: owner_name(py, &owner)? })
                }
                Refusal::Claimed(held) => claimed_error(&name, "mutate", held),
                other => unexpected(&other),
            })
        }
    }
}

/// `_sw_open_write`: opens a public write whose store runs a Python hook (see
/// `StateCell::open_write`): RuntimeError, with the public write's own messages, if the carrier
/// is released, owned (unless `admitted_owner` is its owner, or `any_owner`), or claimed (unless
/// by `judge.active`); else the write is open until `close_write`, and every claim and
/// release is refused meanwhile.
pub(crate) fn open_write(
    carrier: &Bound<'_, CarrierBase>,
    admitted_owner: Option<&Bound<'_, PyAny>>,
    any_owner: bool,
    judge: &PyJudge<'_, '_>,
) -> PyResult<()> {
    let py = carrier.py();
    let admitted = |owner: &Owner| {
        any_owner || owner_object(owner).is_some_and(|owner| admitted_owner.is_some_and(|ours| ours.is(owner)))
    };
    match carrier.get().state().cell().open_write(admitted, judge) {
        Ok(()) => Ok(()),
        Err(why) => {
            let name = type_name(carrier.as_any())?;
            Err(match why {
                Refusal::Released => error::state_refusal(StateRefusal::Released { carrier: name }),
                Refusal::Owned(owner) => {
                    error::state_refusal(StateRefusal::WriteToOwned { carrier: name, owner: owner_name(py, &owner)? })
                }
                Refusal::Claimed(held) => claimed_error(&name, "write to", held),
                other => unexpected(&other),
            })
        }
    }
}
