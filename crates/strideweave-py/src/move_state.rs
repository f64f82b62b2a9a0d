//! `_native.MoveState`: what a recorded move's autograd node keeps for its backward (the
//! source carrier, the destination, the moved layout and the reverse route), as a frozen
//! native value.
//!
//! It is native, not a Python class with `__init__`, because every recorded move makes one:
//! the native moves build it without calling Python, and the Python request's `MoveState(...)`
//! is one C call. Constructing the Python class (`__init__` with four arguments) was about a
//! third of a small move's recording.

use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

/// What a move node keeps for backward. Immutable: the recorded move is history.
#[pyclass(frozen, module = "strideweave._native")]
pub struct MoveState {
    /// The carrier the move released (backward's result lands in a fresh carrier of its class).
    #[pyo3(get)]
    source_carrier: Py<PyAny>,
    /// The carrier the move filled (backward stages the cotangent in its class).
    #[pyo3(get)]
    destination_carrier: Py<PyAny>,
    /// The moved tensor's layout.
    #[pyo3(get)]
    source_layout: Py<PyAny>,
    /// The route of the reverse pair, which backward's move takes (None when unresolved).
    #[pyo3(get)]
    reverse_route: Option<Py<PyAny>>,
}

#[pymethods]
impl MoveState {
    /// The state of a recorded move: what the Python request passes, and what the native moves
    /// build from the parts they already hold.
    #[new]
    #[pyo3(signature = (source_carrier, destination_carrier, source_layout, reverse_route))]
    pub(crate) fn new(
        source_carrier: Bound<'_, PyAny>,
        destination_carrier: Bound<'_, PyAny>,
        source_layout: Bound<'_, PyAny>,
        reverse_route: Option<Bound<'_, PyAny>>,
    ) -> Self {
        MoveState {
            source_carrier: source_carrier.unbind(),
            destination_carrier: destination_carrier.unbind(),
            source_layout: source_layout.unbind(),
            reverse_route: reverse_route.map(Bound::unbind),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let class = |v: &Py<PyAny>| -> PyResult<String> { Ok(v.bind(py).get_type().name()?.to_string()) };
        Ok(format!(
            "MoveState({} -> {}, layout={})",
            class(&self.source_carrier)?,
            class(&self.destination_carrier)?,
            self.source_layout.bind(py).repr()?
        ))
    }

    // The node, its result tensor and the carriers can form a cycle; the collector sees the
    // state's references (the node's `__dict__` is what it clears).
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.source_carrier)?;
        visit.call(&self.destination_carrier)?;
        visit.call(&self.source_layout)?;
        if let Some(r) = &self.reverse_route {
            visit.call(r)?;
        }
        Ok(())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MoveState>()
}
