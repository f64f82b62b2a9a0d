//! `Tensor[key]` and `Tensor[key] = value` (the native `__getitem__`/`__setitem__` of
//! `_TensorBase`), and `_native.read_element` / `_native.write_element`, the same element
//! path as functions: key walk, layout index, slot range check, value conversion and storage
//! access in one call, with no allocation on success beyond the Python value returned.
//!
//! The native path is taken only for a one-subtensor view over a carrier of a built-in class
//! that does not override the element hooks (`keeps_builtin_element_path`, decided once per
//! class when the class is created). Everything else goes to the Python reference path
//! (`Tensor._sw_getitem` / `_sw_setitem`), which runs the public hooks in the contract's
//! order. A read needs a live carrier. A write is a state transition: it needs the carrier
//! live, unowned, unclaimed and mutable (the lock-free reads of `_CarrierBase`'s state cell),
//! converts key and value, checks the state again and then stores and bumps the version with
//! no Python code run in between, so under the GIL no claim or release can slip in between
//! check and store (the state cell's transitions run with the GIL held, except the worker
//! commit, which touches only carriers a move claims). When a state check fails it writes nothing and the reference path
//! decides, raising in the contract's order.
//! What is checked here in order are the errors of a valid carrier: key errors
//! (TypeError/ValueError, the layout's rules) before the range (IndexError, the carrier's
//! wording) before the value (TypeError/OverflowError, the storage's write rules).

use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PySlice, PyTuple};
use strideweave_core::model::Strict;

use pyo3::exceptions::PyRuntimeError;
use pyo3::sync::PyOnceLock;

use crate::carrier_base::CarrierBase;
use crate::layout::PyLayout;
use crate::storage::{FileStorage, HostStorage, SlotAccess};
use crate::tensor_base::TensorBase;

/// The same words as `carriers.base.check_index`, so both paths raise the same error.
fn carrier_range_error(slot: i64) -> impl FnOnce(usize) -> PyErr {
    move |count| PyIndexError::new_err(format!("carrier index {slot} is outside [0, {count})"))
}

fn not_storage(storage: &Bound<'_, PyAny>) -> PyErr {
    let name = storage.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
    PyTypeError::new_err(format!("storage must be a HostStorage or FileStorage, not {name}"))
}

/// `offset + layout(key)`; an offset that would overflow cannot address any slot.
fn slot_of(offset: i64, layout: &Bound<'_, PyLayout>, key: &Bound<'_, PyAny>) -> PyResult<i64> {
    let index = layout.get().index_from_key(key)?;
    offset
        .checked_add(index)
        .ok_or_else(|| PyIndexError::new_err(format!("carrier index {offset} + {index} overflows")))
}

/// `f(storage)` for a built-in storage object; TypeError for anything else.
fn with_storage<R>(
    storage: &Bound<'_, PyAny>,
    host: impl FnOnce(&HostStorage) -> PyResult<R>,
    file: impl FnOnce(&FileStorage) -> PyResult<R>,
) -> PyResult<R> {
    if let Ok(h) = storage.cast::<HostStorage>() {
        host(h.get())
    } else if let Ok(f) = storage.cast::<FileStorage>() {
        file(f.get())
    } else {
        Err(not_storage(storage))
    }
}

/// Writes `value` to the slot of `key` of the view `(offset, layout)` over the built-in
/// carrier `base` and counts it in the version, as one state transition (see the module
/// docs). False, with nothing written, when the reference path must decide.
fn write_slot(
    base: &CarrierBase,
    offset: i64,
    layout: &Bound<'_, PyLayout>,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let py = key.py();
    // The state is checked after every conversion that may run Python code, right before the
    // store: from that check to the version bump no Python code runs and the GIL is held, so
    // no other thread's claim, release or write can come in between. A key, range or value
    // error only stands when the state would have let the write through; otherwise the
    // reference path raises the state error, which comes first in its order.
    let state_first = |err: PyErr| -> PyResult<bool> {
        if base.plainly_writable() {
            Err(err)
        } else {
            Ok(false)
        }
    };
    let slot = match slot_of(offset, layout, key) {
        Ok(slot) => slot,
        Err(err) => return state_first(err),
    };
    let Some(storage) = base.storage.get(py) else {
        return Ok(false);
    };
    // A value of any other type than an exact int, float or bool converts through its own
    // Python code (`__float__`, `__index__`), which is part of the write's store: it runs in
    // a write opened in the state cell, as on the reference path, so that code cannot release,
    // claim or move the carrier it is being written into (RuntimeError "a write to it is in
    // progress"). A refused opening leaves the decision to the reference path.
    let plain = value.is_exact_instance_of::<PyFloat>()
        || value.is_exact_instance_of::<PyInt>()
        || value.is_exact_instance_of::<PyBool>();
    let opened = !plain && base.state().cell().open_write(|_| false, &Strict).is_ok();
    if !plain && !opened {
        return Ok(false);
    }
    let proceed = || Ok(base.plainly_writable());
    let attempt = with_storage(
        storage.bind(py),
        |h| Ok(h.set_slot_if(slot, value, carrier_range_error(slot), proceed)),
        |f| Ok(f.set_slot_if(slot, value, carrier_range_error(slot), proceed)),
    );
    let stored = matches!(attempt, Ok(Ok(true)));
    if opened {
        base.state().cell().close_write(stored);
    } else if stored {
        base.state().cell().bump_version();
    }
    match attempt? {
        Ok(true) => Ok(true),
        Ok(false) => Ok(false),
        Err(err) => state_first(err),
    }
}

/// The package's functions the element path calls, registered once by `strideweave.tensor`
/// (`configure_element_access`), so that a renamed function fails the import, not an access.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct ElementHooks {
    /// `Tensor._sw_getitem(tensor, key)`, the reference path of a read.
    getitem: Py<PyAny>,
    /// `Tensor._sw_setitem(tensor, key, value)`, the reference path of a write.
    setitem: Py<PyAny>,
    /// `_builtin.keeps_builtin_element_path(cls)`: the class's instances may take this path.
    keeps_builtin_element_path: Py<PyAny>,
    /// `_builtin.keeps_builtin_mutability(cls)`: the class answers `is_mutable` as the
    /// built-ins do, so the DLPack export may compute the answer from the native state.
    keeps_builtin_mutability: Py<PyAny>,
}

static ELEMENT_HOOKS: PyOnceLock<ElementHooks> = PyOnceLock::new();

fn element_hooks(py: Python<'_>) -> PyResult<&ElementHooks> {
    ELEMENT_HOOKS.get(py).ok_or_else(|| PyRuntimeError::new_err("element access is not configured"))
}

/// `configure_element_access({...})` (one item per `ElementHooks` field), once.
#[pyfunction]
fn configure_element_access(py: Python<'_>, hooks: ElementHooks) -> PyResult<()> {
    ELEMENT_HOOKS
        .set(py, hooks)
        .map_err(|_| pyo3::exceptions::PyValueError::new_err("element access is configured once"))
}

/// Whether `class`'s instances keep the built-in element path (false before the package
/// configured the path: the reference path is always right).
pub(crate) fn keeps_builtin_element_path(class: &Bound<'_, PyAny>) -> PyResult<bool> {
    match ELEMENT_HOOKS.get(class.py()) {
        Some(hooks) => hooks.keeps_builtin_element_path.bind(class.py()).call1((class,))?.is_truthy(),
        None => Ok(false),
    }
}

/// Whether `class` answers `is_mutable` as the built-in carriers do (false when unknown).
pub(crate) fn keeps_builtin_mutability(class: &Bound<'_, PyAny>) -> bool {
    ELEMENT_HOOKS.get(class.py()).is_some_and(|hooks| {
        hooks.keeps_builtin_mutability.bind(class.py()).call1((class,)).and_then(|a| a.is_truthy()).unwrap_or(false)
    })
}

/// A slice anywhere in a key makes it a slicing key (a view), which only the reference path
/// builds. Scanned for only on the walker's TypeError, never on the hot path.
fn has_slice(key: &Bound<'_, PyAny>) -> bool {
    key.is_instance_of::<PySlice>()
        || key.cast::<PyTuple>().is_ok_and(|t| t.iter().any(|e| e.is_instance_of::<PySlice>()))
}

/// The carrier of a one-subtensor view when its class keeps the built-in element path.
fn fast_carrier<'py>(
    tensor: &Bound<'py, TensorBase>,
    key: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, CarrierBase>>> {
    let py = tensor.py();
    let view = tensor.get().view()?;
    if !view.single || key.is_instance_of::<PySlice>() {
        return Ok(None);
    }
    let carrier = view.carrier.bind(py);
    let Ok(base) = carrier.cast::<CarrierBase>() else {
        return Ok(None);
    };
    Ok(CarrierBase::fast_access(base)?.then(|| base.clone()))
}

/// `Tensor.__getitem__`.
pub(crate) fn getitem(tensor: &Bound<'_, TensorBase>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let py = tensor.py();
    if let Some(base) = fast_carrier(tensor, key)? {
        let carrier = base.get();
        if !carrier.state().is_released() {
            if let Some(storage) = carrier.storage.get(py) {
                let view = tensor.get().view()?;
                match read_element(py, storage.bind(py), view.offset, view.layout.bind(py), key) {
                    Err(err) if err.is_instance_of::<PyTypeError>(py) && has_slice(key) => {}
                    outcome => return outcome,
                }
            }
        }
    }
    Ok(element_hooks(py)?.getitem.bind(py).call1((tensor, key))?.unbind())
}

/// `Tensor.__setitem__`.
pub(crate) fn setitem(
    tensor: &Bound<'_, TensorBase>,
    key: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let py = tensor.py();
    if let Some(base) = fast_carrier(tensor, key)? {
        let view = tensor.get().view()?;
        match write_slot(base.get(), view.offset, view.layout.bind(py), key, value) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(err) if err.is_instance_of::<PyTypeError>(py) && has_slice(key) => {}
            Err(err) => return Err(err),
        }
    }
    element_hooks(py)?.setitem.bind(py).call1((tensor, key, value))?;
    Ok(())
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
    with_storage(
        storage,
        |h| h.get_slot(py, slot, carrier_range_error(slot)),
        |f| f.get_slot(py, slot, carrier_range_error(slot)),
    )
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
    let Ok(base) = carrier.cast::<CarrierBase>() else {
        return Ok(false);
    };
    write_slot(base.get(), offset, layout, key, value)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(configure_element_access, m)?)?;
    m.add_function(wrap_pyfunction!(read_element, m)?)?;
    m.add_function(wrap_pyfunction!(write_element, m)?)?;
    Ok(())
}
