//! DLPack export: `dlpack_export(tensor, stream, max_version, dl_device, copy)` and
//! `dlpack_device(tensor)`, the whole of `Tensor.__dlpack__` / `__dlpack_device__`
//! (the Python methods are one-line forwarders).
//!
//! The managed-tensor structures and their deleters live in `strideweave_core::dlpack`; this
//! file reads the Tensor, runs the spec's checks in order, and wraps the result in a capsule
//! whose destructor honours DLPack's ownership convention.
//!
//! Check order (interop-movement.md, "DLPack export ..." through "DLPack is export-only"):
//!
//! 1. More than one subtensor → `NotImplementedError` ("multi-subtensor", "DLPack"). This runs
//!    before anything touches a carrier, as the spec requires.
//! 2. The carrier's `dlpack_info()` hook, its dict conversion (`TypeError`) and its keys
//!    (`KeyError`); hook exceptions propagate unchanged. The spec resolves the carrier before
//!    the dtype, and `__dlpack_device__` depends only on (1) and (2), so both functions share
//!    exactly this prefix and a non-exporting carrier fails identically in both. The null-data
//!    check is part of resolving the carrier for an export (a released CPU carrier reports
//!    pointer 0): it needs the layout's extents, which are read here without side effects.
//! 3. Argument validation: `max_version` (TypeError / ValueError), `dl_device` (TypeError /
//!    ValueError, then BufferError against the device from (2)), a truthy `copy`
//!    (BufferError). `stream` is accepted in any form and ignored. The arguments come after the
//!    carrier because the `dl_device` comparison needs the carrier's device; keeping all
//!    argument checks together after (2) makes the order one rule rather than a mix.
//! 4. The dtype: Float32 and Int32 only, else `BufferError` naming both. Last, so a tensor that
//!    fails both the carrier and the dtype reports the carrier.
//! 5. Build: `tensor.is_mutable()` is read only for a versioned export (a legacy capsule has no
//!    flags word to put it in).
//!
//! Nothing here changes the carrier's version, autograd state or `.grad`: the Tensor is only
//! read (attributes, `is_mutable()`), and the export itself is pure Rust.

use std::ffi::CStr;
use std::mem::ManuallyDrop;

use pyo3::exceptions::{
    PyBufferError, PyKeyError, PyNotImplementedError, PyOverflowError, PyTypeError, PyValueError,
};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use pyo3::{ffi, PyTypeInfo};
use strideweave_core::dlpack::{
    export_legacy, export_versioned, DLDevice, DLDeviceType, DLManagedTensor,
    DLManagedTensorVersioned, ExportDType, Exported, ManagedAbi, TensorDesc, FLAG_READ_ONLY,
};

const LEGACY_NAME: &CStr = c"dltensor";
const VERSIONED_NAME: &CStr = c"dltensor_versioned";

/// The producer reference a managed tensor holds: a strong reference to the exporting Tensor.
///
/// Dropping it may happen on any thread, with or without the GIL (a consumer calls the DLPack
/// deleter wherever it likes), and possibly while the interpreter is finalizing. So the drop
/// attaches to the interpreter itself, and if the interpreter can no longer be attached to it
/// deliberately leaks the reference instead of touching Python.
struct TensorRef(ManuallyDrop<Py<PyAny>>);

impl Drop for TensorRef {
    fn drop(&mut self) {
        // SAFETY: `self.0` is taken exactly once, here, and never used again.
        let mut slot = Some(unsafe { ManuallyDrop::take(&mut self.0) });
        // `try_attach` declines (returns None without running the closure) when the
        // interpreter is not initialized, i.e. from the moment `Py_FinalizeEx` starts tearing
        // down, or during a GC traversal. Inside the closure the thread is attached, so the
        // `Py` drop is an immediate decref rather than a deferred one.
        let _ = Python::try_attach(|_py| drop(slot.take()));
        if let Some(leaked) = slot.take() {
            // Finalizing: the process is going away, and a decref now could run arbitrary
            // Python code in a half-destroyed interpreter. Leaking one reference is the safe
            // choice (interop-movement: "Dropping the producer's reference SHALL be safe during
            // interpreter finalization").
            std::mem::forget(leaked);
        }
    }
}

/// Capsule destructor shared by both capsule kinds.
///
/// # Safety
/// Called by CPython with the GIL held on a live capsule. `name` must be the capsule's
/// unconsumed name and `M` the managed type stored under that name.
unsafe fn destroy_capsule<M: ManagedAbi>(capsule: *mut ffi::PyObject, name: &CStr) {
    // A consumer that took ownership renamed the capsule to `used_dltensor*` and is now
    // responsible for the deleter; then the name no longer matches and we do nothing.
    // PyCapsule_IsValid sets no exception, which matters because a destructor can run while
    // an exception is being raised.
    // SAFETY: `capsule` is live (we are its destructor) and `name` is a valid C string.
    if unsafe { ffi::PyCapsule_IsValid(capsule, name.as_ptr()) } == 0 {
        return;
    }
    // SAFETY: validity was just checked, so GetPointer with the same name succeeds and
    // returns the pointer `dlpack_export` stored: a live `M` whose deleter has not run
    // (nobody consumed the capsule).
    let managed = unsafe { ffi::PyCapsule_GetPointer(capsule, name.as_ptr()) }.cast::<M>();
    // The deleter drops a Tensor reference, which can run arbitrary Python code; keep any
    // in-flight exception intact around it.
    let (mut ty, mut value, mut tb) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    // SAFETY: the GIL is held (CPython calls destructors with it); Fetch/Restore are paired
    // and transfer ownership of the three references back and forth.
    #[allow(deprecated)]
    unsafe {
        ffi::PyErr_Fetch(&mut ty, &mut value, &mut tb)
    };
    if let Some(managed) = std::ptr::NonNull::new(managed) {
        // SAFETY: `managed` is live and unconsumed (see above); this is its single deleter
        // call because the capsule is being destroyed and cannot be consumed any more.
        unsafe { M::delete(managed) };
    }
    // SAFETY: restores exactly the references fetched above.
    #[allow(deprecated)]
    unsafe {
        ffi::PyErr_Restore(ty, value, tb)
    };
}

unsafe extern "C" fn legacy_capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: installed only on capsules named `dltensor` holding a DLManagedTensor.
    unsafe { destroy_capsule::<DLManagedTensor>(capsule, LEGACY_NAME) }
}

unsafe extern "C" fn versioned_capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: installed only on capsules named `dltensor_versioned` holding a
    // DLManagedTensorVersioned.
    unsafe { destroy_capsule::<DLManagedTensorVersioned>(capsule, VERSIONED_NAME) }
}

/// Wraps an export in a capsule named `name` whose destructor is `destructor`.
fn into_capsule<M: ManagedAbi>(
    py: Python<'_>,
    exported: Exported<M>,
    name: &'static CStr,
    destructor: ffi::PyCapsule_Destructor,
) -> PyResult<Py<PyAny>> {
    let raw = exported.into_raw();
    // SAFETY: `raw` is a live managed tensor; `name` is 'static so it outlives the capsule, as
    // PyCapsule requires; the GIL is held (we have `py`).
    let capsule = unsafe { ffi::PyCapsule_New(raw.cast(), name.as_ptr(), Some(destructor)) };
    if capsule.is_null() {
        // Take the error before the deleter runs Python code that could disturb it.
        let err = PyErr::fetch(py);
        // SAFETY: the capsule was not created, so we still own `raw` and nobody else will
        // delete it; reclaiming it runs the deleter once.
        drop(unsafe { Exported::from_raw(raw) });
        return Err(err);
    }
    // SAFETY: PyCapsule_New returned a new (owned) non-null reference.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) }.unbind())
}

/// Step 1: the one-subtensor requirement, before any carrier is touched.
fn require_single_subtensor(tensor: &Bound<'_, PyAny>, what: &str) -> PyResult<()> {
    let py = tensor.py();
    let n = tensor.getattr(intern!(py, "_subtensors"))?.len()?;
    if n > 1 {
        return Err(PyNotImplementedError::new_err(format!(
            "DLPack export ({what}) is not implemented for a multi-subtensor Tensor \
             ({n} subtensors); export needs exactly one subtensor"
        )));
    }
    Ok(())
}

/// What the carrier's `dlpack_info()` hook reported.
struct CarrierInfo<'py> {
    info: Bound<'py, PyDict>,
    device: DLDevice,
}

/// Step 2: call the carrier's public hook (through Python, so subclass overrides run) and
/// check the shape of its answer.
fn carrier_info<'py>(tensor: &Bound<'py, PyAny>) -> PyResult<CarrierInfo<'py>> {
    let py = tensor.py();
    let carrier = tensor.getattr(intern!(py, "_carrier"))?;
    // Any exception the hook raises (the default hook's BufferError included) propagates as is.
    let raw = carrier.call_method0(intern!(py, "dlpack_info"))?;
    let info = match raw.cast_exact::<PyDict>() {
        Ok(d) => d.clone(),
        Err(_) => match PyDict::type_object(py).call1((&raw,)) {
            Ok(d) => d.cast_into::<PyDict>()?,
            // dict() reports some unconvertible values as ValueError (e.g. a string); the spec
            // names TypeError for every value that is not convertible.
            Err(e)
                if e.is_instance_of::<PyTypeError>(py) || e.is_instance_of::<PyValueError>(py) =>
            {
                let err = PyTypeError::new_err(format!(
                    "{}.dlpack_info() must return a value convertible to dict, got {}",
                    carrier.get_type().name()?,
                    raw.get_type().name()?
                ));
                err.set_cause(py, Some(e));
                return Err(err);
            }
            Err(e) => return Err(e),
        },
    };
    let device_type: u32 = required_key(&info, intern!(py, "device_type"))?.extract()?;
    let device_id: i32 = required_key(&info, intern!(py, "device_id"))?.extract()?;
    // `pointer` is required of every hook result, even though only an export reads it.
    required_key(&info, intern!(py, "pointer"))?;
    Ok(CarrierInfo {
        info,
        device: DLDevice {
            device_type: DLDeviceType(device_type),
            device_id,
        },
    })
}

fn required_key<'py>(
    info: &Bound<'py, PyDict>,
    key: &Bound<'py, pyo3::types::PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    info.get_item(key)?.ok_or_else(|| {
        PyKeyError::new_err(format!(
            "dlpack_info() result has no {} key (needs pointer, device_type, device_id)",
            key
        ))
    })
}

/// An integer argument element: `Some(v)` when it fits in i64, `None` for a Python int too
/// large for i64 (its sign is reported separately). Non-integers fail with TypeError.
fn int_element(arg: &str, elem: &Bound<'_, PyAny>) -> PyResult<(Option<i64>, bool)> {
    match elem.extract::<i64>() {
        Ok(v) => Ok((Some(v), v < 0)),
        Err(e) if e.is_instance_of::<PyOverflowError>(elem.py()) => Ok((None, elem.lt(0)?)),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{arg} elements must be integers, got {}",
            elem.get_type().name()?
        ))),
    }
}

/// Accepts None, a tuple or a list (subclasses included); returns its two elements.
fn pair_argument<'py>(
    arg: &str,
    value: Option<&Bound<'py, PyAny>>,
) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
    let Some(value) = value else { return Ok(None) };
    if value.is_none() {
        return Ok(None);
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
    let n = items.len()?;
    if n != 2 {
        return Err(PyValueError::new_err(format!(
            "{arg} must have exactly two elements, got {n}"
        )));
    }
    Ok(Some((items.get_item(0)?, items.get_item(1)?)))
}

/// `max_version` → whether to produce the versioned structure.
fn wants_versioned(max_version: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    let Some((major, minor)) = pair_argument("max_version", max_version)? else {
        return Ok(false);
    };
    let (major_v, major_neg) = int_element("max_version", &major)?;
    let (_, minor_neg) = int_element("max_version", &minor)?;
    if major_neg || minor_neg {
        return Err(PyValueError::new_err(
            "max_version components must be non-negative",
        ));
    }
    // `None` means a non-negative int beyond i64: a very high ceiling, still capped at 1.0.
    Ok(major_v.is_none_or(|m| m >= 1))
}

/// `dl_device` must name the carrier's own device, if given.
fn check_dl_device(dl_device: Option<&Bound<'_, PyAny>>, device: DLDevice) -> PyResult<()> {
    let Some((ty, id)) = pair_argument("dl_device", dl_device)? else {
        return Ok(());
    };
    let (ty_v, _) = int_element("dl_device", &ty)?;
    let (id_v, _) = int_element("dl_device", &id)?;
    let ours = (i64::from(device.device_type.0), i64::from(device.device_id));
    if (ty_v, id_v) != (Some(ours.0), Some(ours.1)) {
        return Err(PyBufferError::new_err(format!(
            "dl_device ({ty}, {id}) differs from the tensor's DLPack device ({}, {}); \
             cross-device export is not implemented",
            ours.0, ours.1
        )));
    }
    Ok(())
}

/// `dlpack_export(tensor, stream=None, max_version=None, dl_device=None, copy=None)`
///
/// The implementation of `Tensor.__dlpack__`: returns a `dltensor` capsule (legacy), or a
/// `dltensor_versioned` capsule at version 1.0 when `max_version` has major >= 1. The capsule
/// aliases the carrier's storage and holds a strong reference to `tensor`.
#[pyfunction]
#[pyo3(signature = (tensor, stream=None, max_version=None, dl_device=None, copy=None))]
fn dlpack_export(
    tensor: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
    max_version: Option<&Bound<'_, PyAny>>,
    dl_device: Option<&Bound<'_, PyAny>>,
    copy: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let py = tensor.py();
    // Export does no work a stream could order (CPU storage, no pending writes).
    let _ = stream;

    // 1. multi-subtensor
    require_single_subtensor(tensor, "__dlpack__")?;

    // 2. carrier: hook, device, pointer; then the null-data check, which needs the extents.
    let CarrierInfo { info, device } = carrier_info(tensor)?;
    let pointer: usize = required_key(&info, intern!(py, "pointer"))?.extract()?;
    let layout = tensor.getattr(intern!(py, "_layout"))?;
    let shape: Vec<i64> = layout.getattr(intern!(py, "leaf_shape"))?.extract()?;
    let strides: Vec<i64> = layout.getattr(intern!(py, "leaf_stride"))?.extract()?;
    if pointer == 0 && shape.iter().all(|&e| e > 0) {
        return Err(PyBufferError::new_err(
            "the carrier reports a null data pointer for a tensor with elements; a DLPack \
             data pointer must be non-null (was the carrier released?)",
        ));
    }

    // 3. arguments
    let versioned = wants_versioned(max_version)?;
    check_dl_device(dl_device, device)?;
    if let Some(copy) = copy {
        if copy.is_truthy()? {
            return Err(PyBufferError::new_err(
                "copy=True is not supported: DLPack export only aliases the tensor's storage",
            ));
        }
    }

    // 4. dtype
    let dtype = tensor.getattr(intern!(py, "_dtype"))?;
    let name = dtype.getattr(intern!(py, "name"))?;
    let Some(export_dtype) = name.extract::<&str>().ok().and_then(ExportDType::from_name) else {
        return Err(PyBufferError::new_err(format!(
            "DLPack export supports only the Float32 and Int32 dtypes, not {name}"
        )));
    };

    // 5. build
    let offset: u64 = tensor.getattr(intern!(py, "_offset"))?.extract()?;
    let desc = TensorDesc::new(pointer, device, export_dtype, shape, strides, offset)
        .map_err(|e| PyBufferError::new_err(e.to_string()))?;
    let owner = TensorRef(ManuallyDrop::new(tensor.clone().unbind()));
    if versioned {
        // Advisory read-only bit: exactly when the tensor is not publicly mutable right now.
        let flags = if tensor
            .call_method0(intern!(py, "is_mutable"))?
            .is_truthy()?
        {
            0
        } else {
            FLAG_READ_ONLY
        };
        into_capsule(
            py,
            export_versioned(desc, flags, owner),
            VERSIONED_NAME,
            versioned_capsule_destructor,
        )
    } else {
        into_capsule(
            py,
            export_legacy(desc, owner),
            LEGACY_NAME,
            legacy_capsule_destructor,
        )
    }
}

/// `dlpack_device(tensor)` → `(device_type, device_id)`
///
/// The implementation of `Tensor.__dlpack_device__`: depends only on the one-subtensor
/// requirement and the carrier's `dlpack_info()` hook, never on the dtype.
#[pyfunction]
fn dlpack_device(tensor: &Bound<'_, PyAny>) -> PyResult<(u32, i32)> {
    require_single_subtensor(tensor, "__dlpack_device__")?;
    let CarrierInfo { device, .. } = carrier_info(tensor)?;
    Ok((device.device_type.0, device.device_id))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(dlpack_export, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack_device, m)?)?;
    Ok(())
}
