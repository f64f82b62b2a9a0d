//! A carrier's own hook cannot reach another carrier's storage around the checks: the token
//! the framework hands a hook names the carrier the call is for, and every built-in carrier
//! refuses a token made for another (found by an outside audit: a user carrier's `read_slot`
//! passed its token on, wrote an immutable host carrier with no version bump and shrank a
//! file under a live tensor).

use std::sync::{Arc, Mutex};

use strideweave_core::model::{
    Carrier, CarrierExt, CarrierState, Evictable, FileCarrier, HookToken, HostCarrier, ModelError, Tensor,
};
use strideweave_core::storage::{ElemKind, Scalar};

/// A user carrier whose `read_slot` passes the token it was handed to other carriers' hooks,
/// and records what they answered.
struct Passing {
    state: CarrierState,
    victims: Vec<Arc<dyn Carrier>>,
    answers: Mutex<Vec<String>>,
}

fn refused(r: Result<(), ModelError>) -> String {
    match r {
        Err(ModelError::HookNotAdmitted { carrier }) => format!("refused by {carrier}"),
        other => format!("{other:?}"),
    }
}

impl Carrier for Passing {
    fn state(&self, _: &HookToken) -> &CarrierState {
        &self.state
    }

    fn elem_kind(&self) -> ElemKind {
        ElemKind::F32
    }

    fn size(&self) -> usize {
        1
    }

    fn read_slot(&self, token: &HookToken, _: usize) -> Result<Scalar, ModelError> {
        let mut answers = self.answers.lock().unwrap();
        for victim in &self.victims {
            answers.push(refused(victim.write_slot(token, 0, Scalar::F32(666.0))));
            answers.push(refused(victim.allocate(token, 0)));
            answers.push(refused(victim.read_slot(token, 0).map(|_| ())));
            answers.push(format!("bulk storage: {}", victim.bulk_storage(token).is_some()));
            victim.release_storage(token);
        }
        Ok(Scalar::F32(0.0))
    }

    fn write_slot(&self, _: &HookToken, _: usize, _: Scalar) -> Result<(), ModelError> {
        Ok(())
    }
}

#[test]
fn a_hook_that_passes_its_token_on_reaches_no_other_carriers_storage() {
    let frozen = HostCarrier::with_mutability(ElemKind::F32, 1, false).unwrap();
    let file = FileCarrier::temp_zeros(ElemKind::F32, 4).unwrap();
    let over_file = Tensor::canonical(&file, &[4]).unwrap();
    let owned = HostCarrier::from_f32(&[3.0]);
    let composite = Evictable::new(&owned, FileCarrier::temp(ElemKind::F32).unwrap()).unwrap();
    let victims: Vec<Arc<dyn Carrier>> = vec![frozen.clone(), file.clone(), owned.clone(), composite.clone()];
    let passing = Arc::new(Passing { state: CarrierState::new("Passing"), victims, answers: Mutex::new(Vec::new()) });

    passing.get(0).unwrap(); // the framework calls `read_slot` with a token for `passing`

    let answers = passing.answers.lock().unwrap().clone();
    for (k, name) in ["HostCarrier", "FileCarrier", "HostCarrier", "Evictable"].iter().enumerate() {
        let of_victim = &answers[k * 4..k * 4 + 4];
        assert_eq!(of_victim[0], format!("refused by {name}"), "write_slot of victim {k}");
        assert_eq!(of_victim[2], format!("refused by {name}"), "read_slot of victim {k}");
        assert_eq!(of_victim[3], "bulk storage: false", "bulk_storage of victim {k}");
        if *name == "FileCarrier" {
            assert_eq!(of_victim[1], "refused by FileCarrier", "allocate of the file");
        }
    }
    assert_eq!((frozen.get(0).unwrap(), frozen.version(), frozen.is_released()), (Scalar::F32(0.0), 0, false));
    assert_eq!((file.size(), over_file.values_f32().unwrap()), (4, vec![0.0; 4]));
    assert_eq!((owned.get(0).unwrap(), owned.is_released()), (Scalar::F32(3.0), false));
    assert_eq!(composite.get(0).unwrap(), Scalar::F32(3.0));
}
