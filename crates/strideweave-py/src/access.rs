//! `_native.read_element` / `_native.write_element`: the `Tensor[key]` hot path of the
//! built-in Rust-backed carriers in one call — key walk, layout index, slot range check,
//! value conversion and storage access — with no allocation on success beyond the Python
//! value returned.
//!
//! The Python caller (`Tensor.__getitem__` / `__setitem__`) takes this path only for a
//! carrier of a class that does not override the element hooks. A read needs a live carrier,
//! checked by the caller. A write is a state transition: `write_element` checks that the
//! carrier is live, unowned, unclaimed and mutable, converts key and value, checks the state
//! again and then stores and bumps the version with no Python code run in between, so under
//! the GIL no claim or release can slip in between check and store (Python-level transitions
//! change that state under `carriers.base.STATE_LOCK` while holding the GIL, and a state a
//! preempted one left half-changed is a claim not yet taken: the write simply comes first).
//! When a state check fails it writes nothing and returns False, and the caller takes the
//! reference path, which raises in the contract's order.
//! What is checked here in order are the errors of a valid carrier: key errors
//! (TypeError/ValueError, the layout's rules) before the range (IndexError, the carrier's
//! wording) before the value (TypeError/OverflowError, the storage's write rules).

use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

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

/// True when a public write to `carrier` may proceed: live, unowned, unclaimed, mutable. Read
/// from the instance dict, where `Carrier.__init__` keeps this state (the fast path is taken
/// only for built-in classes that do not override it); a missing entry means "take the
/// reference path".
fn writable(state: &Bound<'_, PyDict>) -> PyResult<bool> {
    let py = state.py();
    let is = |name: &Bound<'_, PyString>, want_none: bool| -> PyResult<bool> {
        Ok(match state.get_item(name)? {
            Some(v) => v.is_none() == want_none,
            None => false,
        })
    };
    let flag = |name: &Bound<'_, PyString>| -> PyResult<Option<bool>> {
        state.get_item(name)?.map(|v| v.is_truthy()).transpose()
    };
    Ok(flag(intern!(py, "_sw_released"))? == Some(false)
        && is(intern!(py, "_sw_owner"), true)?
        && is(intern!(py, "_sw_claim"), true)?
        && flag(intern!(py, "_mutable"))? == Some(true))
}

/// Write `value` to the element of `key` of the view `(offset, layout)` over the built-in
/// `carrier`'s storage and count it in the version, as one state transition (see the module
/// docs). False, with nothing written, when the caller must take the reference path.
#[pyfunction]
fn write_element(
    carrier: &Bound<'_, PyAny>,
    offset: i64,
    layout: &Bound<'_, PyLayout>,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let py = carrier.py();
    let state = carrier.getattr(intern!(py, "__dict__"))?;
    let state = state.cast::<PyDict>()?;
    // The state is checked after every conversion that may run Python code, right before the
    // store: from that check to the version bump no Python code runs and the GIL is held, so
    // no other thread's claim, release or write can come in between. A key, range or value
    // error only stands when the state would have let the write through; otherwise the
    // reference path raises the state error, which comes first in its order.
    let state_first = |err: PyErr| -> PyResult<bool> {
        if writable(state)? {
            Err(err)
        } else {
            Ok(false)
        }
    };
    let slot = match slot_of(offset, layout, key) {
        Ok(slot) => slot,
        Err(err) => return state_first(err),
    };
    let Some(storage) = state.get_item(intern!(py, "_storage"))? else {
        return Ok(false);
    };
    let proceed = || writable(state);
    let attempt = if let Ok(host) = storage.cast::<HostStorage>() {
        host.get().set_slot_if(slot, value, carrier_range_error(slot), proceed)
    } else if let Ok(file) = storage.cast::<FileStorage>() {
        file.get().set_slot_if(slot, value, carrier_range_error(slot), proceed)
    } else {
        return Err(not_storage(&storage));
    };
    let written = match attempt {
        Ok(written) => written,
        Err(err) => return state_first(err),
    };
    if written {
        let version = state.get_item(intern!(py, "_sw_version"))?.ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err("carrier has no version (Carrier.__init__ was not run)")
        })?;
        state.set_item(intern!(py, "_sw_version"), version.add(1)?)?;
    }
    Ok(written)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_element, m)?)?;
    m.add_function(wrap_pyfunction!(write_element, m)?)?;
    Ok(())
}
