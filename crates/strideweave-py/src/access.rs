//! `_native.read_element` / `_native.write_element`: the `Tensor[key]` hot path of the
//! built-in Rust-backed carriers in one call — key walk, layout index, slot range check,
//! value conversion and storage access — with no allocation on success beyond the Python
//! value returned.
//!
//! The Python caller (`Tensor.__getitem__` / `__setitem__`) takes this path only for a
//! carrier of a class that does not override the element hooks. A read needs a live carrier,
//! checked by the caller. A write is a state transition: `write_element` takes the carrier's
//! state lock (`carriers.base.STATE_LOCK`, without blocking), checks that the carrier is live,
//! unowned, unclaimed and mutable, writes and bumps the version, all before letting the lock
//! go, so no claim or release can slip in between check and store. When the lock is busy or
//! a state check fails it writes nothing and returns False, and the caller takes the
//! reference path, which waits for the lock and raises in the contract's order.
//! What is checked here in order are the errors of a valid carrier: key errors
//! (TypeError/ValueError, the layout's rules) before the range (IndexError, the carrier's
//! wording) before the value (TypeError/OverflowError, the storage's write rules).

use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

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

static STATE_LOCK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// True when a public write to `carrier` may proceed: live, unowned, unclaimed, mutable.
fn writable(carrier: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = carrier.py();
    Ok(!carrier.getattr(intern!(py, "_sw_released"))?.is_truthy()?
        && carrier.getattr(intern!(py, "_sw_owner"))?.is_none()
        && carrier.getattr(intern!(py, "_sw_claim"))?.is_none()
        && carrier.getattr(intern!(py, "_mutable"))?.is_truthy()?)
}

/// The write itself, with the state lock held: checks, store, version bump.
fn write_locked(
    carrier: &Bound<'_, PyAny>,
    offset: i64,
    layout: &Bound<'_, PyLayout>,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let py = carrier.py();
    if !writable(carrier)? {
        return Ok(false);
    }
    let slot = slot_of(offset, layout, key)?;
    let storage = carrier.getattr(intern!(py, "_storage"))?;
    if let Ok(host) = storage.cast::<HostStorage>() {
        host.get().set_slot(slot, value, carrier_range_error(slot))?;
    } else if let Ok(file) = storage.cast::<FileStorage>() {
        file.get().set_slot(slot, value, carrier_range_error(slot))?;
    } else {
        return Err(not_storage(&storage));
    }
    let version = carrier.getattr(intern!(py, "_sw_version"))?;
    carrier.setattr(intern!(py, "_sw_version"), version.add(1)?)?;
    Ok(true)
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
    let lock = STATE_LOCK.import(py, "strideweave.carriers.base", "STATE_LOCK")?;
    if !lock.call_method1(intern!(py, "acquire"), (false,))?.is_truthy()? {
        return Ok(false);
    }
    let written = write_locked(carrier, offset, layout, key, value);
    lock.call_method0(intern!(py, "release"))?;
    written
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_element, m)?)?;
    m.add_function(wrap_pyfunction!(write_element, m)?)?;
    Ok(())
}
