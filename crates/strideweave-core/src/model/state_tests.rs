//! `CarrierState` with a binding's payloads: a foreign claim or owner is a claim or an owner
//! like any other to the Rust model (its transitions refuse with the usual errors), and a
//! binding's judge that recognises its own object lets it pass.

use std::sync::Arc;

use super::*;
use crate::model::carrier::HOOK;
use crate::model::state_cell::{ClaimJudge, ReleaseStart, Verdict};
use crate::model::test_support::VecCarrier;
use crate::model::CarrierExt;
use crate::storage::Scalar;

/// A binding's object: identity is the name.
#[derive(Debug, PartialEq)]
struct Request(&'static str);

impl ForeignObject for Request {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

fn foreign_claim(name: &'static str) -> Claim {
    Claim::Foreign(Foreign::new(Request(name)))
}

fn carrier() -> Arc<dyn Carrier> {
    Arc::new(VecCarrier::new(&[1.0, 2.0]))
}

/// Held claims block unless they are the binding's `ours`.
struct Binding {
    ours: &'static str,
}

impl ClaimJudge<Owner, Claim> for Binding {
    type Blocked = ();
    type Owner = ();
    fn judge(&self, held: &Claim) -> Verdict<()> {
        match held.foreign().and_then(Foreign::downcast_ref::<Request>) {
            Some(Request(name)) if *name == self.ours => Verdict::Passes,
            _ => Verdict::Blocks(()),
        }
    }
    fn owner(&self, _owner: &Owner) {}
}

#[test]
fn a_foreign_claim_refuses_the_rust_models_claim_release_and_write() {
    let c = carrier();
    let state = c.state(HOOK);
    assert!(state.cell().try_claim(foreign_claim("request"), ClaimRule::FREE, &Strict).unwrap().is_none());
    assert!(state.is_claimed());
    assert_eq!(state.claim(), None, "no move of the Rust model holds it");
    assert!(matches!(
        state.try_claim(&c, ClaimId::fresh(), Role::Source),
        Err(ModelError::Claimed { action: "move", .. })
    ));
    assert!(matches!(c.release(), Err(ModelError::Claimed { action: "release", .. })));
    assert!(matches!(c.set(0, Scalar::F32(9.0)), Err(ModelError::Claimed { action: "write to", .. })));
    assert!(matches!(state.adopt(OwnerToken::fresh()), Err(ModelError::Claimed { action: "adopt", .. })));
    assert_eq!((c.is_released(), c.version()), (false, 0));
    assert_eq!(c.get(1).unwrap(), Scalar::F32(2.0), "reads continue under a claim");

    // A Rust claim's guard does not end a claim it does not hold.
    let displaced = state.cell().drop_claim_if(|held| held.move_id().is_some());
    assert!(displaced.is_none() && state.is_claimed());
    let displaced = state.cell().drop_claim_if(|held| held.foreign().is_some());
    assert!(displaced.is_some_and(|held| held.foreign().unwrap().downcast_ref() == Some(&Request("request"))));
    c.set(0, Scalar::F32(9.0)).unwrap();
    assert_eq!(c.version(), 1);
    c.release().unwrap();
}

#[test]
fn a_judge_that_recognises_its_foreign_claim_lets_it_pass() {
    let c = carrier();
    let cell = c.state(HOOK).cell();
    drop(cell.try_claim(foreign_claim("ours"), ClaimRule::FREE, &Strict).unwrap());
    let (refused, _) =
        cell.try_claim(foreign_claim("theirs"), ClaimRule::FREE, &Binding { ours: "other" }).unwrap_err();
    assert_eq!(refused.foreign().unwrap().downcast_ref(), Some(&Request("theirs")));

    // Ours passes: a second claim displaces it (handed back), a mutation counts, a release begins.
    let judge = Binding { ours: "ours" };
    cell.mutate(&judge).unwrap();
    assert_eq!(c.version(), 1);
    assert_eq!(cell.begin_release(|| foreign_claim("releasing"), &judge), Ok(ReleaseStart::Began { marked: false }));
    let held = cell.finish_release(None).expect("the claim the release kept");
    assert_eq!(held.foreign().unwrap().downcast_ref(), Some(&Request("ours")));
    assert!(c.is_released() && !c.state(HOOK).is_claimed());
}

#[test]
fn a_foreign_owner_refuses_the_rust_models_release_write_and_claim() {
    let c = carrier();
    let state = c.state(HOOK);
    state.cell().adopt(Owner::Foreign(Foreign::new(Request("composite"))), &Strict).unwrap();
    assert!(state.is_owned());
    assert!(matches!(c.release(), Err(ModelError::Owned { .. })));
    assert!(matches!(c.set(0, Scalar::F32(9.0)), Err(ModelError::NotMutable { .. })));
    assert!(matches!(state.try_claim(&c, ClaimId::fresh(), Role::Source), Err(ModelError::Owned { .. })));
    assert!(!state.disown(OwnerToken::fresh()), "no token owns it");
    let owner = state.cell().disown_if(|owner| owner.foreign().is_some()).expect("the foreign owner");
    assert!(owner.token().is_none());
    c.release().unwrap();
}

#[test]
fn the_rust_models_payloads_are_its_tokens() {
    let c = carrier();
    let state = c.state(HOOK);
    let guard = state.try_claim(&c, ClaimId::fresh(), Role::Source).unwrap();
    assert_eq!(state.cell().with_claim(|held| held.and_then(Claim::move_id)), Some(guard.id()));
    assert_eq!(state.claim(), Some(guard.id()));
    drop(guard);
    let owner = OwnerToken::fresh();
    state.adopt(owner).unwrap();
    assert_eq!(state.cell().with_owner(|held| held.and_then(Owner::token)), Some(owner));
    assert!(state.disown(owner));
}
