//! Step 3 of an export: the `max_version` and `dl_device` arguments (TypeError for the wrong
//! kind of value, ValueError for a wrong length or a negative version, BufferError for a
//! device other than the carrier's).

use pyo3::exceptions::{PyBufferError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use strideweave_core::dlpack::DLDevice;

/// An integer argument element: `Some(v)` when it fits in i64, `None` for a Python int too
/// large for i64 (its sign is reported separately). Non-integers fail with TypeError.
fn int_element(arg: &str, elem: &Bound<'_, PyAny>) -> PyResult<(Option<i64>, bool)> {
    match elem.extract::<i64>() {
        Ok(v) => Ok((Some(v), v < 0)),
        Err(e) if e.is_instance_of::<PyOverflowError>(elem.py()) => Ok((None, elem.lt(0)?)),
        Err(_) => {
            Err(PyTypeError::new_err(format!("{arg} elements must be integers, got {}", elem.get_type().name()?)))
        }
    }
}

/// Accepts None, a tuple or a list (subclasses included) and passes its two elements to
/// `read`; `None` for None.
fn pair_argument<R>(
    arg: &str,
    value: Option<&Bound<'_, PyAny>>,
    read: impl FnOnce(&Bound<'_, PyAny>, &Bound<'_, PyAny>) -> PyResult<R>,
) -> PyResult<Option<R>> {
    let Some(value) = value else { return Ok(None) };
    if value.is_none() {
        return Ok(None);
    }
    let two_elements = |n: usize| match n {
        2 => Ok(()),
        _ => Err(PyValueError::new_err(format!("{arg} must have exactly two elements, got {n}"))),
    };
    if let Ok(t) = value.cast_exact::<PyTuple>() {
        // The common case (NumPy passes `max_version=(1, 0)`): an exact tuple cannot
        // override item access, so its items are read directly, borrowed (the tuple holds
        // them), instead of through the sequence protocol.
        two_elements(t.len())?;
        let (first, second) = (t.get_borrowed_item(0)?, t.get_borrowed_item(1)?);
        return read(&first, &second).map(Some);
    }
    let items = if let Ok(t) = value.cast::<PyTuple>() {
        t.as_sequence().clone()
    } else if let Ok(l) = value.cast::<PyList>() {
        l.as_sequence().clone()
    } else {
        return Err(PyTypeError::new_err(format!(
            "{arg} must be None, a tuple or a list, got {}",
            value.get_type().name()?
        )));
    };
    two_elements(items.len()?)?;
    read(&items.get_item(0)?, &items.get_item(1)?).map(Some)
}

/// `max_version` → whether to produce the versioned structure.
pub(super) fn wants_versioned(max_version: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    let versioned = pair_argument("max_version", max_version, |major, minor| {
        let (major_v, major_neg) = int_element("max_version", major)?;
        let (_, minor_neg) = int_element("max_version", minor)?;
        if major_neg || minor_neg {
            return Err(PyValueError::new_err("max_version components must be non-negative"));
        }
        // `None` means a non-negative int beyond i64: a very high ceiling, still capped at 1.0.
        Ok(major_v.is_none_or(|m| m >= 1))
    })?;
    Ok(versioned.unwrap_or(false))
}

/// `dl_device` must name the carrier's own device, if given.
pub(super) fn check_dl_device(dl_device: Option<&Bound<'_, PyAny>>, device: DLDevice) -> PyResult<()> {
    pair_argument("dl_device", dl_device, |ty, id| {
        let (ty_v, _) = int_element("dl_device", ty)?;
        let (id_v, _) = int_element("dl_device", id)?;
        let ours = (i64::from(device.device_type.0), i64::from(device.device_id));
        if (ty_v, id_v) != (Some(ours.0), Some(ours.1)) {
            return Err(PyBufferError::new_err(format!(
                "dl_device ({ty}, {id}) differs from the tensor's DLPack device ({}, {}); \
                 cross-device export is not implemented",
                ours.0, ours.1
            )));
        }
        Ok(())
    })?;
    Ok(())
}
