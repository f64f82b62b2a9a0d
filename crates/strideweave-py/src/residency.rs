//! `_native.Residency` and `_native.Transition`: the core's residency rule of a two-tier
//! composite (`strideweave_core::model::residency`) for the Python package's `Evictable`,
//! which keeps its residency in one and does each transition's work with its Python tiers.
//! The Rust `Evictable` keeps the same rule; neither has a copy of its own.

use parking_lot::Mutex;
use pyo3::prelude::*;
use strideweave_core::model::{Residency as CoreResidency, Transition as CoreTransition};

/// What one evict or promote does (the core's `Transition`), as `Residency.plan` answers.
#[pyclass(frozen, eq, hash, module = "strideweave._native", name = "Transition")]
#[derive(PartialEq, Eq, Hash)]
pub struct Transition(CoreTransition);

#[pymethods]
impl Transition {
    /// Whether the values end in the secondary tier.
    #[getter]
    fn evicts(&self) -> bool {
        self.0.evicts()
    }

    /// Whether the values are transferred (False: the secondary holds them already and the
    /// primary is only released).
    #[getter]
    fn transfers(&self) -> bool {
        self.0.transfers()
    }

    /// Whether the values are copied, keeping the tier they leave as a clean copy.
    #[getter]
    fn copies(&self) -> bool {
        !self.0.releases_source()
    }

    fn __repr__(&self) -> String {
        match self.0 {
            CoreTransition::DropCleanPrimary => "Transition.DropCleanPrimary".into(),
            CoreTransition::Move { evict } => {
                format!("Transition.Move(evict={})", if evict { "True" } else { "False" })
            }
            CoreTransition::CopyUp => "Transition.CopyUp".into(),
            other => format!("Transition({other:?})"),
        }
    }
}

/// A two-tier composite's residency (the core's `Residency`): where its values are and
/// whether its secondary holds a clean copy of them. The composite changes it only under its
/// own transition claim; the lock makes each call one step.
#[pyclass(frozen, module = "strideweave._native", name = "Residency")]
pub struct Residency(Mutex<CoreResidency>);

#[pymethods]
impl Residency {
    /// A promoted composite's residency; `retain_clean` makes promotes copy.
    #[new]
    #[pyo3(signature = (retain_clean))]
    fn new(retain_clean: bool) -> Self {
        Residency(Mutex::new(CoreResidency::new(retain_clean)))
    }

    /// Whether the values are in the secondary tier.
    fn is_evicted(&self) -> bool {
        self.0.lock().is_evicted()
    }

    /// Whether promotes copy and keep the secondary as a clean copy.
    fn retains_clean(&self) -> bool {
        self.0.lock().retains_clean()
    }

    /// Whether the secondary holds the values of the composite at `version`.
    fn is_clean(&self, version: u64) -> bool {
        self.0.lock().is_clean(version)
    }

    /// A write or a move into the composite: the clean copy is stale.
    fn mark_dirty(&self) {
        self.0.lock().mark_dirty();
    }

    /// The transition an evict (`evict=True`) or a promote of the composite at `version`
    /// needs, or None when the values are there already.
    fn plan(&self, evict: bool, version: u64) -> Option<Transition> {
        self.0.lock().plan(evict, version).map(Transition)
    }

    /// `transition` has done its work on the composite at `version`.
    fn commit(&self, transition: &Transition, version: u64) {
        self.0.lock().commit(transition.0, version);
    }

    fn __repr__(&self) -> String {
        format!("{:?}", *self.0.lock())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Residency>()?;
    m.add_class::<Transition>()
}
