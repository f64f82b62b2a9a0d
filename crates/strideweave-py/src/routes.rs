//! Routes are data. The Python package resolves an exact (source class, destination class)
//! pair once, through the registries the specification defines in Python terms (the legacy
//! `MoveOperation` registry, a carrier definition's transfer routes), into a frozen
//! [`Route`]; the core's [`RouteCache`] keeps it by the two classes' identities until a
//! registry change drops every decision (`forget_routes`). The move entry's fast routes, the
//! general request's route rows and a recorded move's autograd node all read the same
//! decision, so "which route does this pair take" has one answer, asked of the registries
//! once per pair.
//!
//! A resolution that started before a registry change is not cached (the cache's
//! generation): a decision is never older than the registry it came from.

use std::sync::{Arc, LazyLock};

use pyo3::exceptions::PyNotImplementedError;
use pyo3::prelude::*;
use pyo3::types::PyType;
use strideweave_core::model::{ClassKey, RouteCache};

use crate::py_carrier::MoveHooks;

/// How one exact pair moves, as the Python registries decided it.
#[pyclass(frozen, module = "strideweave._native")]
pub struct Route {
    /// The `MoveOperation` class whose `_copy` runs the transfer (None for a definition
    /// provider's route).
    #[pyo3(get)]
    operation_class: Option<Py<PyAny>>,
    /// A definition-backed pair's `RouteDecision` (its provider and fallback), else None.
    #[pyo3(get)]
    decision: Option<Py<PyAny>>,
    /// The documented refusal of a pair no operation may serve, raised (NotImplementedError)
    /// only once the whole validation table has passed.
    #[pyo3(get)]
    refusal: Option<String>,
    /// Whether the move entry's native fast routes serve the pair: a built-in pair (or a pair
    /// of CPU subclasses that override no move hook but those the native move calls itself)
    /// at its framework default operation.
    #[pyo3(get)]
    native: bool,
    /// The source class's overridden native move hooks (a `py_carrier::MoveHooks` mask).
    #[pyo3(get)]
    source_hooks: u8,
    /// The destination class's overridden native move hooks (a `py_carrier::MoveHooks` mask).
    #[pyo3(get)]
    destination_hooks: u8,
}

impl Route {
    /// The route of one `MoveOperation` class, served by the general request.
    pub(crate) fn operation(operation_class: Bound<'_, PyAny>) -> Self {
        Route {
            operation_class: Some(operation_class.unbind()),
            decision: None,
            refusal: None,
            native: false,
            source_hooks: 0,
            destination_hooks: 0,
        }
    }

    /// The hooks the native move calls for each carrier: (source's, destination's).
    pub(crate) fn hooks(&self) -> (MoveHooks, MoveHooks) {
        (MoveHooks::from_bits(self.source_hooks), MoveHooks::from_bits(self.destination_hooks))
    }

    /// The route's `MoveOperation` class, if it has one.
    pub(crate) fn operation_class(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.operation_class.as_ref().map(|class| class.clone_ref(py))
    }
}

#[pymethods]
impl Route {
    #[new]
    #[pyo3(signature = (operation_class=None, decision=None, refusal=None, native=false, source_hooks=0, destination_hooks=0))]
    fn new(
        operation_class: Option<Bound<'_, PyAny>>,
        decision: Option<Bound<'_, PyAny>>,
        refusal: Option<String>,
        native: bool,
        source_hooks: u8,
        destination_hooks: u8,
    ) -> Self {
        Route {
            operation_class: operation_class.map(Bound::unbind),
            decision: decision.map(Bound::unbind),
            refusal,
            native,
            source_hooks,
            destination_hooks,
        }
    }

    /// The route itself, when the pair may move; NotImplementedError with the pair's
    /// documented refusal otherwise.
    fn check_permitted(slf: &Bound<'_, Self>) -> PyResult<Py<Self>> {
        match &slf.get().refusal {
            Some(refusal) => Err(PyNotImplementedError::new_err(refusal.clone())),
            None => Ok(slf.clone().unbind()),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let name = |value: &Option<Py<PyAny>>| -> PyResult<String> {
            Ok(match value {
                Some(v) => v.bind(py).repr()?.to_string(),
                None => "None".into(),
            })
        };
        Ok(format!(
            "Route(operation_class={}, decision={}, refusal={:?}, native={}, source_hooks={}, destination_hooks={})",
            name(&self.operation_class)?,
            name(&self.decision)?,
            self.refusal,
            if self.native { "True" } else { "False" },
            self.source_hooks,
            self.destination_hooks,
        ))
    }
}

/// A cached decision, holding both classes so that their identities (the cache's keys) stay
/// theirs while it is cached.
struct Cached {
    route: Py<Route>,
    _classes: (Py<PyType>, Py<PyType>),
}

static ROUTES: LazyLock<RouteCache<Arc<Cached>>> = LazyLock::new(RouteCache::new);

fn key(class: &Bound<'_, PyType>) -> ClassKey {
    ClassKey::Foreign(class.as_ptr() as usize as u64)
}

/// The cached route of the pair, if its classes were resolved since the last registry change.
#[pyfunction]
fn cached_route(py: Python<'_>, source: &Bound<'_, PyType>, destination: &Bound<'_, PyType>) -> Option<Py<Route>> {
    ROUTES.with(key(source), key(destination), |cached| cached.map(|c| c.route.clone_ref(py)))
}

/// The generation to pass to `remember_route`: read it before resolving a pair.
#[pyfunction]
fn route_generation() -> u64 {
    ROUTES.generation()
}

/// Caches `route` for the pair unless a registry changed since `generation`; returns the
/// route every move of the pair uses from now on (one a racing resolution cached first, else
/// `route`).
#[pyfunction]
fn remember_route(
    py: Python<'_>,
    source: &Bound<'_, PyType>,
    destination: &Bound<'_, PyType>,
    route: &Bound<'_, Route>,
    generation: u64,
) -> Py<Route> {
    let cached = Arc::new(Cached {
        route: route.clone().unbind(),
        _classes: (source.clone().unbind(), destination.clone().unbind()),
    });
    let kept = ROUTES.remember(key(source), key(destination), cached, generation);
    kept.route.clone_ref(py)
}

/// A registry changed: every cached decision is stale.
#[pyfunction]
fn forget_routes() {
    let forgotten = ROUTES.forget();
    drop(forgotten); // outside the cache's lock: dropping a class may run Python code
}

/// The cached route of the pair when the native fast routes serve it (see [`Route::native`]).
pub(crate) fn native_route(
    py: Python<'_>,
    source: &Bound<'_, PyType>,
    destination: &Bound<'_, PyType>,
) -> Option<Py<Route>> {
    ROUTES.with(key(source), key(destination), |cached| {
        cached.filter(|c| c.route.get().native).map(|c| c.route.clone_ref(py))
    })
}

/// A move's route and, if it records a node, its reverse route.
pub(crate) type NativeRoutes = (Py<Route>, Option<Py<Route>>);

/// The fast routes' decision for a move of the pair: its cached route and, for a `recording`
/// move, the reverse pair's (the route the node's backward takes), each only while the native
/// fast routes serve it; None when either is not.
pub(crate) fn native_routes(
    py: Python<'_>,
    source: &Bound<'_, PyType>,
    destination: &Bound<'_, PyType>,
    recording: bool,
) -> Option<NativeRoutes> {
    let route = native_route(py, source, destination)?;
    let reverse = if recording { Some(native_route(py, destination, source)?) } else { None };
    Some((route, reverse))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Route>()?;
    m.add_function(wrap_pyfunction!(cached_route, m)?)?;
    m.add_function(wrap_pyfunction!(route_generation, m)?)?;
    m.add_function(wrap_pyfunction!(remember_route, m)?)?;
    m.add_function(wrap_pyfunction!(forget_routes, m)?)?;
    Ok(())
}
