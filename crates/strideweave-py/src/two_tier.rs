//! `_native.TwoTier`: the core's two-tier composite (`model::two_tier::TwoTier`, the Rust
//! `Evictable`'s own) for the Python `Evictable`. The core keeps the tiers, the residency and
//! the order of every change: the claim of the composite (through its state cell, with the
//! Python layer's words), one change at a time, the plan by the residency rule, reads refused
//! from the plan to the commit, the commit or the give-back, the release of what the change
//! left. What is done *to* a tier is the Python package's (`carriers/evictable.py`,
//! `_TierWork`): a fresh tier by the class's `allocate_like`, the transfer as a move between
//! tiers by the pair's route (or a copy for a `retain_clean` promote), a release as the owner,
//! each called through its public method name.
//!
//! No lock of the core is held while Python code runs, and every change runs with the GIL
//! released, so a tier's hook may run on another thread, wait, or read the composite. An
//! asynchronous change starts its transfer through the package's `start_transfer` (a move
//! between tiers, or the copy on the engine's copy lane) and commits on the thread that
//! completes it, as a move's commit does: one thread hop, no thread waiting for another. The
//! object keeps no reference to its composite (which holds it): each call is handed the
//! composite.

use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyTuple, PyType};
use strideweave_core::model::two_tier::{Hold, TierWork, TwoTier as CoreTwoTier, Unreadable};
use strideweave_core::model::{ForeignError, Holder, ModelError, StateRefusal, Transition};

use crate::carrier_base::CarrierBase;
use crate::carrier_state::{self, claim_object, PyJudge};
use crate::engine::AwaitResult;
use crate::error;

/// A Python error as the core's error, raised again unchanged at the edge (`error::model`).
fn foreign(err: PyErr) -> ModelError {
    ModelError::Foreign(ForeignError::new(err))
}

/// A Python tier, shared by the core's tiers and its staged changes (a `Py` is cloned only
/// with the GIL held; an `Arc` of one anywhere).
#[derive(Clone)]
struct PyTier(Arc<Py<PyAny>>);

impl PyTier {
    fn bind<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        self.0.bind(py)
    }
}

/// The Python tiers' work: the package's `_TierWork` object.
struct PyTiers {
    work: Py<PyAny>,
}

impl PyTiers {
    fn call<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        args: impl pyo3::call::PyCallArgs<'py>,
    ) -> Result<Bound<'py, PyAny>, ModelError> {
        self.work.bind(py).call_method1(method, args).map_err(foreign)
    }
}

impl TierWork for PyTiers {
    type Tier = PyTier;

    fn needs_fresh(&self, target: &PyTier) -> Result<bool, ModelError> {
        Python::attach(|py| self.call(py, "needs_fresh", (target.bind(py),))?.is_truthy().map_err(foreign))
    }

    fn fresh(&self, step: Transition, source: &PyTier, target: &PyTier) -> Result<PyTier, ModelError> {
        Python::attach(|py| {
            let args = (source.bind(py), target.bind(py), step.evicts(), step == Transition::CopyUp);
            Ok(PyTier(Arc::new(self.call(py, "fresh", args)?.unbind())))
        })
    }

    /// A blocking transition's transfer (an asynchronous one's goes through `start_transfer`).
    fn transfer(&self, step: Transition, source: &PyTier, target: &PyTier) -> Result<(), ModelError> {
        Python::attach(|py| {
            self.call(py, "transfer", (source.bind(py), target.bind(py), step == Transition::CopyUp))?;
            Ok(())
        })
    }

    fn release(&self, tier: &PyTier, keep: bool) {
        Python::attach(|py| {
            // After a committed change a failing release cannot undo it (the package's
            // `release` already drops a hook's failure).
            let _ = self.call(py, "release", (tier.bind(py), keep));
        })
    }

    fn starts_transfers(&self) -> bool {
        true
    }

    /// The package's `start_transfer(source, target, copies, then)`: it starts the move between
    /// tiers (or the copy) and calls `then` with None or the exception once it is done, where
    /// it completes; a failure to start is the transfer's failure.
    fn start_transfer(
        &self,
        step: Transition,
        source: &PyTier,
        target: &PyTier,
        then: Box<dyn FnOnce(Result<(), ModelError>) + Send>,
    ) {
        Python::attach(|py| {
            let then = Arc::new(Mutex::new(Some(then)));
            let callback = {
                let then = then.clone();
                PyCFunction::new_closure(py, None, None, move |args: &Bound<'_, PyTuple>, _kwargs| -> PyResult<()> {
                    let failure = args.get_item(0)?;
                    let outcome = if failure.is_none() { Ok(()) } else { Err(foreign(PyErr::from_value(failure))) };
                    if let Some(then) = then.lock().take() {
                        then(outcome);
                    }
                    Ok(())
                })
            };
            let started = callback.and_then(|callback| {
                let args = (source.bind(py), target.bind(py), step == Transition::CopyUp, callback);
                self.work.bind(py).call_method1("start_transfer", args)
            });
            if let Err(err) = started {
                if let Some(then) = then.lock().take() {
                    then(Err(foreign(err)));
                }
            }
        })
    }
}

/// The Python composite as the core's `Hold`: claimed in its state cell for the change, with a
/// claim object of the package's claim class, refused in the Python layer's words.
struct PyHold<'a> {
    composite: Py<CarrierBase>,
    claim_type: &'a Py<PyType>,
    releasing: &'a Py<PyAny>,
}

/// A change's claim of the Python composite; dropping it gives the claim back.
struct PyClaim {
    composite: Py<CarrierBase>,
    claim: Py<PyAny>,
}

impl Drop for PyClaim {
    fn drop(&mut self) {
        let ours = self.claim.as_ptr();
        let displaced = self
            .composite
            .get()
            .state()
            .cell()
            .drop_claim_if(|held| claim_object(held).is_some_and(|held| held.as_ptr() == ours));
        // A displaced payload dropped without the GIL is released by PyO3 once it is held.
        drop(displaced);
    }
}

impl Hold for PyHold<'_> {
    type Claim = PyClaim;

    fn claim(&self, action: &'static str) -> Result<PyClaim, ModelError> {
        Python::attach(|py| {
            let claim = self.claim_type.bind(py).call0().map_err(foreign)?;
            let judge = PyJudge { active: None, releasing: self.releasing.bind(py), owner: None };
            carrier_state::take_claim(self.composite.bind(py), &claim, action, &judge).map_err(foreign)?;
            Ok(PyClaim { composite: self.composite.clone_ref(py), claim: claim.unbind() })
        })
    }

    fn version(&self) -> u64 {
        self.composite.get().state().version()
    }
}

/// The tiers, residency and changes of a Python two-tier composite (see the module docs).
#[pyclass(frozen, module = "strideweave._native", name = "TwoTier")]
pub struct TwoTier {
    core: Arc<CoreTwoTier<PyTiers>>,
    /// The class of the claim object a change holds (the package's `_TransitionClaim`).
    claim_type: Py<PyType>,
    /// The package's "being released" marker (`carriers.base.RELEASING`).
    releasing: Py<PyAny>,
}

impl TwoTier {
    fn hold(&self, composite: &Bound<'_, CarrierBase>) -> PyHold<'_> {
        PyHold { composite: composite.clone().unbind(), claim_type: &self.claim_type, releasing: &self.releasing }
    }
}

#[pymethods]
impl TwoTier {
    /// A promoted composite over `primary` and `secondary` (both owned by the composite
    /// already), whose tiers `work` handles (`needs_fresh`, `fresh`, `transfer`, `release`).
    #[new]
    #[pyo3(signature = (work, primary, secondary, retain_clean, claim_type, releasing))]
    fn new(
        work: Py<PyAny>,
        primary: Py<PyAny>,
        secondary: Py<PyAny>,
        retain_clean: bool,
        claim_type: Py<PyType>,
        releasing: Py<PyAny>,
    ) -> Self {
        TwoTier {
            core: Arc::new(CoreTwoTier::new(
                PyTiers { work },
                PyTier(Arc::new(primary)),
                PyTier(Arc::new(secondary)),
                retain_clean,
            )),
            claim_type,
            releasing,
        }
    }

    /// Take the values of `composite` to the secondary (`evict`) or the primary, on this
    /// thread: refusals of the composite's state raise RuntimeError; a failed change changed
    /// nothing and raises its failure.
    fn transition(&self, py: Python<'_>, composite: &Bound<'_, CarrierBase>, evict: bool) -> PyResult<()> {
        let hold = self.hold(composite);
        py.detach(|| self.core.transition(&hold, evict)).map_err(|e| error::model(py, e))
    }

    /// `transition` on an engine thread, completing `handle` (an `AwaitResidency`) once the
    /// change is final; refusals raise here, before any effect.
    fn transition_async(
        &self,
        py: Python<'_>,
        composite: &Bound<'_, CarrierBase>,
        evict: bool,
        handle: Py<AwaitResult>,
    ) -> PyResult<()> {
        let hold = self.hold(composite);
        let started = py.detach(|| self.core.transition_async(&hold, evict)).map_err(|e| error::model(py, e))?;
        started.on_done(move |outcome| {
            Python::attach(|py| {
                let handle = handle.get();
                match outcome {
                    Ok(()) => {
                        handle.succeed(py.None());
                    }
                    Err(e) => {
                        let _ = handle.fail(error::model(py, e.clone()).into_value(py).bind(py).as_any());
                    }
                }
            })
        });
        Ok(())
    }

    /// The primary tier now.
    #[getter]
    fn primary(&self, py: Python<'_>) -> Py<PyAny> {
        self.core.primary().0.clone_ref(py)
    }

    /// The secondary tier now.
    #[getter]
    fn secondary(&self, py: Python<'_>) -> Py<PyAny> {
        self.core.secondary().0.clone_ref(py)
    }

    /// The primary, which holds the values, for a read or write of `composite` (`action`
    /// words the refusal): RuntimeError while a change transfers them; None when evicted.
    fn readable_primary(&self, composite: &Bound<'_, CarrierBase>, action: &str) -> PyResult<Option<Py<PyAny>>> {
        match self.core.promoted() {
            Ok(promoted) => Ok(Some(promoted.primary().0.clone_ref(composite.py()))),
            Err(Unreadable::Evicted) => Ok(None),
            Err(_) => Err(error::state_refusal(StateRefusal::Held {
                carrier: carrier_state::type_name(composite.as_any())?,
                action: action.into(),
                by: Holder::PendingMove,
            })),
        }
    }

    /// Whether the values are in the secondary tier.
    fn is_evicted(&self) -> bool {
        self.core.residency().is_evicted()
    }

    /// Whether promotes copy and keep the secondary as a clean copy.
    fn retains_clean(&self) -> bool {
        self.core.residency().retains_clean()
    }

    /// Whether the secondary holds the values of the composite at `version`.
    fn is_clean(&self, version: u64) -> bool {
        self.core.residency().is_clean(version)
    }

    /// A write or a move into the composite: the clean copy is stale.
    fn mark_dirty(&self) {
        self.core.mark_dirty();
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.core)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TwoTier>()?;
    Ok(())
}
