//! DLPack capsules: the managed tensor wrapped in a `dltensor` / `dltensor_versioned`
//! capsule whose destructor honours DLPack's ownership convention (a consumer that renamed
//! the capsule owns the deleter), and the producer reference the managed tensor holds.

use std::ffi::CStr;
use std::mem::ManuallyDrop;

use pyo3::ffi;
use pyo3::prelude::*;
use strideweave_core::dlpack::{
    export_legacy, export_versioned, DLManagedTensor, DLManagedTensorVersioned, Exported, ManagedAbi, TensorDesc,
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
    let (mut ty, mut value, mut tb) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
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

/// A `dltensor_versioned` capsule of `desc` at version 1.0 with `flags`, owning a strong
/// reference to `tensor`.
pub(super) fn versioned(
    py: Python<'_>,
    desc: TensorDesc,
    flags: u64,
    tensor: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let owner = TensorRef(ManuallyDrop::new(tensor.clone().unbind()));
    into_capsule(py, export_versioned(desc, flags, owner), VERSIONED_NAME, versioned_capsule_destructor)
}

/// A legacy `dltensor` capsule of `desc`, owning a strong reference to `tensor`.
pub(super) fn legacy(py: Python<'_>, desc: TensorDesc, tensor: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let owner = TensorRef(ManuallyDrop::new(tensor.clone().unbind()));
    into_capsule(py, export_legacy(desc, owner), LEGACY_NAME, legacy_capsule_destructor)
}
