//! `_native.read_element` / `_native.write_element`: the `Tensor[key]` hot path of the
//! built-in Rust-backed carriers in one call — key walk, layout index, slot range check,
//! value conversion and storage access — with no allocation on success beyond the Python
//! value returned.
//!
//! The Python caller (`Tensor.__getitem__` / `__setitem__`) owns everything stateful: it
//! takes this path only for a live, unowned, unclaimed, mutable carrier of a class that
//! does not override the element hooks, and it bumps the carrier's version after a write.
//! What is left here are the checks whose *order* matters for a valid carrier: key errors
//! (TypeError/ValueError, the layout's rules) before the range (IndexError, the carrier's
//! wording) before the value (TypeError/OverflowError, the storage's write rules).

use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;

use crate::layout::PyLayout;
use crate::storage::{FileStorage, HostStorage};

/// The same words as `carriers.base.check_index`, so both paths raise the same error.
fn carrier_range_error(slot: i64) -> impl FnOnce(usize) -> PyErr {
    move |count| PyIndexError::new_err(format!("carrier index {slot} is outside [0, {count})"))
}

fn not_storage(storage: &Bound<'_, PyAny>) -> PyErr {
    let name = storage
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    PyTypeError::new_err(format!(
        "storage must be a HostStorage or FileStorage, not {name}"
    ))
}

/// `offset + layout(key)`; an offset that would overflow cannot address any slot.
fn slot_of(offset: i64, layout: &Bound<'_, PyLayout>, key: &Bound<'_, PyAny>) -> PyResult<i64> {
    let index = layout.get().index_from_key(key)?;
    offset
        .checked_add(index)
        .ok_or_else(|| PyIndexError::new_err(format!("carrier index {offset} + {index} overflows")))
}

/// Read the element of `key` (an int ordinal or a hierarchical coordinate) of the view
/// `(offset, layout)` over `storage`.
#[pyfunction]
fn read_element(
    py: Python<'_>,
    storage: &Bound<'_, PyAny>,
    offset: i64,
    layout: &Bound<'_, PyLayout>,
    key: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let slot = slot_of(offset, layout, key)?;
    if let Ok(host) = storage.cast::<HostStorage>() {
        host.get().get_slot(py, slot, carrier_range_error(slot))
    } else if let Ok(file) = storage.cast::<FileStorage>() {
        file.get().get_slot(py, slot, carrier_range_error(slot))
    } else {
        Err(not_storage(storage))
    }
}

/// Write `value` to the element of `key` of the view `(offset, layout)` over `storage`.
/// Nothing is written when any check fails.
#[pyfunction]
fn write_element(
    storage: &Bound<'_, PyAny>,
    offset: i64,
    layout: &Bound<'_, PyLayout>,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let slot = slot_of(offset, layout, key)?;
    if let Ok(host) = storage.cast::<HostStorage>() {
        host.get().set_slot(slot, value, carrier_range_error(slot))
    } else if let Ok(file) = storage.cast::<FileStorage>() {
        file.get().set_slot(slot, value, carrier_range_error(slot))
    } else {
        Err(not_storage(storage))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_element, m)?)?;
    m.add_function(wrap_pyfunction!(write_element, m)?)?;
    Ok(())
}
