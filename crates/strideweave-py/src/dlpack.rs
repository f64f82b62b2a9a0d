//! DLPack export: `export(tensor, stream, max_version, dl_device, copy)` and
//! `device(tensor)`, the whole of `Tensor.__dlpack__` / `__dlpack_device__`. Those are native
//! methods of `_native._TensorBase` (tensor_base.rs), the base class of `Tensor`, so a
//! consumer's call reaches this file without a Python frame. `_native.dlpack_export` and
//! `_native.dlpack_device` expose the same two functions for any other object.
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
//!    For a carrier that inherits `dlpack_info` and `pointer` from the built-in CPU unchanged,
//!    the hook's answer is computed in Rust instead of calling it (same result, no Python
//!    frame); every override takes the general path (`carrier_info`).
//! 3. Argument validation: `max_version` (TypeError / ValueError), `dl_device` (TypeError /
//!    ValueError, then BufferError against the device from (2)), a truthy `copy`
//!    (BufferError). `stream` is accepted in any form and ignored. The arguments come after the
//!    carrier because the `dl_device` comparison needs the carrier's device; keeping all
//!    argument checks together after (2) makes the order one rule rather than a mix.
//! 4. The dtype: Float32 and Int32 only, else `BufferError` naming both. Last, so a tensor that
//!    fails both the carrier and the dtype reports the carrier.
//! 5. Build: `tensor.is_mutable()` is read only for a versioned export (a legacy capsule has no
//!    flags word to put it in). When neither `Tensor.is_mutable` nor the carrier's
//!    `is_mutable`/`_is_mutable` is overridden (the built-in Rust-backed carriers), the
//!    predicate is evaluated here from the same attributes the Python methods read; any
//!    override is called through Python (see `is_mutable`).
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
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use pyo3::{ffi, PyTypeInfo};
use strideweave_core::dlpack::{
    export_legacy, export_versioned, DLDevice, DLDeviceType, DLManagedTensor,
    DLManagedTensorVersioned, ExportDType, Exported, ManagedAbi, TensorDesc, FLAG_READ_ONLY,
};

use crate::carrier_base::{CarrierBase, Hooks};
use crate::error;
use crate::layout::PyLayout;
use crate::storage::HostStorage;
use crate::tensor_base::{TensorBase, View};

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

/// Step 1: the one-subtensor requirement, before any carrier is touched. Returns the
/// subtensor count (at most 1), which `Tensor.is_mutable` also tests.
fn require_single_subtensor(tensor: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    let n = match native_view(tensor) {
        Some(view) if view.single => 1,
        _ => field(tensor, Field::Subtensors)?.len()?,
    };
    if n > 1 {
        return Err(PyNotImplementedError::new_err(format!(
            "DLPack export ({what}) is not implemented for a multi-subtensor Tensor \
             ({n} subtensors); export needs exactly one subtensor"
        )));
    }
    Ok(n)
}

/// The framework objects the fast paths compare against, imported on first use (the Python
/// package imports this extension, so they cannot be fetched at load time). `None` when the
/// package is not importable, in which case every call takes the general path.
struct Builtins {
    /// `CPU.dlpack_info` and `CPU.pointer`, the plain functions.
    cpu_dlpack_info: Py<PyAny>,
    cpu_pointer: Py<PyAny>,
    /// `Tensor.is_mutable`, `Carrier.is_mutable`, `RustBackedCarrier._is_mutable`.
    tensor_is_mutable: Py<PyAny>,
    carrier_is_mutable: Py<PyAny>,
    builtin_is_mutable: Py<PyAny>,
    /// `DType.Float32`, `DType.Int32`.
    float32: Py<PyAny>,
    int32: Py<PyAny>,
    /// `Tensor`, whose instances are read natively.
    tensor_type: Py<PyAny>,
}

/// The Tensor fields an export reads (ARCHITECTURE.md, "Tensor fields").
#[derive(Clone, Copy)]
enum Field {
    Subtensors,
    Carrier,
    Layout,
    DType,
    Offset,
}

/// The view of exactly a `Tensor` (a subclass could shadow a field name, so its instances
/// are read through `getattr`).
fn native_view<'a>(tensor: &'a Bound<'_, PyAny>) -> Option<&'a View> {
    let b = builtins(tensor.py())?;
    if !tensor.get_type().is(&b.tensor_type) {
        return None;
    }
    tensor.cast::<TensorBase>().ok()?.get().view().ok()
}

/// `tensor.<field>`: a native field read for a `Tensor`, `getattr` for anything else.
fn field<'py>(tensor: &Bound<'py, PyAny>, which: Field) -> PyResult<Bound<'py, PyAny>> {
    let py = tensor.py();
    if let Some(view) = native_view(tensor) {
        match which {
            Field::Carrier => return Ok(view.carrier.bind(py).clone()),
            Field::Layout => return Ok(view.layout.bind(py).clone().into_any()),
            Field::DType => return Ok(view.dtype.bind(py).clone()),
            Field::Offset => return Ok(view.offset.into_pyobject(py)?.into_any()),
            Field::Subtensors => {}
        }
    }
    let name = match which {
        Field::Subtensors => intern!(py, "_subtensors"),
        Field::Carrier => intern!(py, "_carrier"),
        Field::Layout => intern!(py, "_layout"),
        Field::DType => intern!(py, "_dtype"),
        Field::Offset => intern!(py, "_offset"),
    };
    tensor.getattr(name)
}

static BUILTINS: PyOnceLock<Option<Builtins>> = PyOnceLock::new();

fn builtins(py: Python<'_>) -> Option<&'static Builtins> {
    BUILTINS
        .get_or_init(py, || {
            let load = || -> PyResult<Builtins> {
                let cpu = py.import("strideweave.carriers.cpu")?.getattr("CPU")?;
                let tensor = py.import("strideweave.tensor")?.getattr("Tensor")?;
                let carrier = py.import("strideweave.carriers.base")?.getattr("Carrier")?;
                let builtin = py
                    .import("strideweave.carriers._builtin")?
                    .getattr("RustBackedCarrier")?;
                let dtype = py.import("strideweave.carriers.dtype")?.getattr("DType")?;
                Ok(Builtins {
                    cpu_dlpack_info: cpu.getattr("dlpack_info")?.unbind(),
                    cpu_pointer: cpu.getattr("pointer")?.unbind(),
                    tensor_is_mutable: tensor.getattr("is_mutable")?.unbind(),
                    carrier_is_mutable: carrier.getattr("is_mutable")?.unbind(),
                    builtin_is_mutable: builtin.getattr("_is_mutable")?.unbind(),
                    float32: dtype.getattr("Float32")?.unbind(),
                    int32: dtype.getattr("Int32")?.unbind(),
                    tensor_type: tensor.unbind(),
                })
            };
            load().ok()
        })
        .as_ref()
}

/// Whether `type(obj).<name>` is exactly `function` (the attribute was not overridden).
///
/// This runs up to five times per export, so it is written against the C API directly: no
/// new reference to the type, and a failed lookup (which only means "not the built-in") is
/// cleared without materializing a `PyErr`.
fn class_attr_is(obj: &Bound<'_, PyAny>, name: &Bound<'_, PyString>, function: &Py<PyAny>) -> bool {
    // SAFETY: `obj` is a live object, so its type is live and borrowed for at least as long
    // as `obj`; `name` is a live str. The GIL is held (we have a `Bound`).
    // PyObject_GetAttr returns a new reference or NULL with an exception set.
    let attr = unsafe { ffi::PyObject_GetAttr(ffi::Py_TYPE(obj.as_ptr()).cast(), name.as_ptr()) };
    if attr.is_null() {
        // SAFETY: an exception is set (GetAttr failed) and the GIL is held.
        unsafe { ffi::PyErr_Clear() };
        return false;
    }
    let same = std::ptr::eq(attr, function.as_ptr());
    // SAFETY: `attr` is the new reference GetAttr returned; this releases it exactly once.
    unsafe { ffi::Py_DECREF(attr) };
    same
}

/// Whether a carrier's class keeps a group of the framework's own hooks (`check`, run once per
/// carrier and remembered on it: a class decides its hooks when it is created, and the
/// issue's rule is that the check is cached, not repeated per call). Objects that are not
/// `_CarrierBase` instances are checked every time.
fn class_hooks_are(carrier: &Bound<'_, PyAny>, which: Hooks, check: impl FnOnce() -> bool) -> bool {
    match carrier.cast::<CarrierBase>() {
        Ok(base) => base.get().hooks_are(which, check),
        Err(_) => check(),
    }
}

/// `Tensor.is_mutable` is the framework's own (decided once, for exactly `Tensor`).
static TENSOR_IS_MUTABLE_BUILTIN: PyOnceLock<bool> = PyOnceLock::new();

/// What resolving the carrier produced: its DLPack device and, for an export, its pointer.
struct CarrierInfo {
    device: DLDevice,
    pointer: usize,
    /// `bool(carrier._sw_released)` when the built-in path read it for the pointer. The
    /// mutability shortcut reuses it, so the capsule's data pointer and its read-only flag
    /// describe one observation of the carrier (and the attribute is read once per export).
    released: Option<bool>,
}

/// Step 2: resolve the carrier's DLPack support through its public `dlpack_info()` hook.
///
/// Fast path: for a carrier whose class inherits both `dlpack_info` and `pointer` from the
/// built-in `CPU` unchanged, the hook's answer is known without running it: device (1, 0)
/// and `pointer()`, which is 0 once released and otherwise the address of the Rust host
/// buffer. Reading those directly keeps the whole export in Rust. Any override of either
/// method, in any subclass, takes the general path and runs the hook through Python.
fn carrier_info(carrier: &Bound<'_, PyAny>, with_pointer: bool) -> PyResult<CarrierInfo> {
    let py = carrier.py();
    if let Some(b) = builtins(py) {
        let builtin = class_hooks_are(carrier, Hooks::CpuDlpack, || {
            class_attr_is(carrier, intern!(py, "dlpack_info"), &b.cpu_dlpack_info)
                && class_attr_is(carrier, intern!(py, "pointer"), &b.cpu_pointer)
        });
        if builtin {
            let device = DLDevice {
                device_type: DLDeviceType::CPU,
                device_id: 0,
            };
            if !with_pointer {
                return Ok(CarrierInfo {
                    device,
                    pointer: 0,
                    released: None,
                });
            }
            if let Some((pointer, released)) = builtin_cpu_pointer(carrier)? {
                return Ok(CarrierInfo {
                    device,
                    pointer,
                    released: Some(released),
                });
            }
        }
    }
    hook_info(carrier, with_pointer)
}

/// `CPU.pointer()` without the Python call: `0 if released else storage.pointer()`, with the
/// released flag. `None` if the carrier does not hold the expected Rust storage (then the
/// hook runs).
fn builtin_cpu_pointer(carrier: &Bound<'_, PyAny>) -> PyResult<Option<(usize, bool)>> {
    let py = carrier.py();
    let Ok(base) = carrier.cast::<CarrierBase>() else {
        return Ok(None);
    };
    let base = base.get();
    if base.released() {
        return Ok(Some((0, true)));
    }
    Ok(base
        .storage
        .with(py, |storage| storage.cast::<HostStorage>().ok().map(|s| s.get().address()))
        .flatten()
        .map(|pointer| (pointer, false)))
}

/// The general path: call the hook through Python, so subclass overrides run.
fn hook_info(carrier: &Bound<'_, PyAny>, with_pointer: bool) -> PyResult<CarrierInfo> {
    let py = carrier.py();
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
    // Every hook result must carry all three keys, even when only the device is needed.
    let pointer = required_key(&info, intern!(py, "pointer"))?;
    let device_type: u32 = required_key(&info, intern!(py, "device_type"))?.extract()?;
    let device_id: i32 = required_key(&info, intern!(py, "device_id"))?.extract()?;
    let pointer: usize = if with_pointer { pointer.extract()? } else { 0 };
    Ok(CarrierInfo {
        device: DLDevice {
            device_type: DLDeviceType(device_type),
            device_id,
        },
        pointer,
        released: None,
    })
}

fn required_key<'py>(
    info: &Bound<'py, PyDict>,
    key: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    info.get_item(key)?.ok_or_else(|| {
        PyKeyError::new_err(format!(
            "dlpack_info() result has no {} key (needs pointer, device_type, device_id)",
            key
        ))
    })
}

/// The layout's leaf extents and leaf strides, read from the native Layout without building
/// tuples; any other layout object is read through its public `leaf_shape`/`leaf_stride`.
fn leaf_modes(layout: &Bound<'_, PyAny>) -> PyResult<(Vec<i64>, Vec<i64>)> {
    if let Ok(native) = layout.cast::<PyLayout>() {
        let native = native.borrow();
        let core = native.core();
        return Ok((core.leaf_extents().to_vec(), core.leaf_strides().to_vec()));
    }
    let py = layout.py();
    Ok((
        layout.getattr(intern!(py, "leaf_shape"))?.extract()?,
        layout.getattr(intern!(py, "leaf_stride"))?.extract()?,
    ))
}

/// The exportable element type of a logical dtype, or `None`. Identity with the DType
/// singletons first; the name covers objects that are not those singletons.
fn export_dtype(dtype: &Bound<'_, PyAny>) -> PyResult<Option<ExportDType>> {
    let py = dtype.py();
    if let Some(b) = builtins(py) {
        if dtype.is(&b.float32) {
            return Ok(Some(ExportDType::Float32));
        }
        if dtype.is(&b.int32) {
            return Ok(Some(ExportDType::Int32));
        }
    }
    let name = dtype.getattr(intern!(py, "name"))?;
    Ok(name.extract::<&str>().ok().and_then(ExportDType::from_name))
}

/// `tensor.is_mutable()`, the public predicate, for the read-only flag.
///
/// Each level is evaluated here only while its Python definition is the framework's own,
/// checked by identity on the class (an override anywhere in a subclass changes what the
/// class attribute resolves to):
/// - `Tensor.is_mutable` is `len(self._subtensors) == 1 and self._carrier.is_mutable()`;
/// - `Carrier.is_mutable` is `not self._sw_released and self._sw_owner is None and
///   bool(self._is_mutable())`;
/// - `RustBackedCarrier._is_mutable` (CPU, FileBacked, ...) is `self._mutable`.
///
/// The same attributes are read in the same short-circuit order, so the answer and any
/// exception are the Python methods' own. The first overridden level is called through
/// Python instead, and decides from there on. The checks run on every export (nothing is
/// cached per class), so a method assigned to a class after its first export is honoured.
/// As for `dlpack_info`, overrides are class attributes: a function stored on one carrier
/// instance under a method's name is not a hook override.
fn is_mutable(
    tensor: &Bound<'_, PyAny>,
    carrier: &Bound<'_, PyAny>,
    subtensors: usize,
    released: Option<bool>,
) -> PyResult<bool> {
    let py = tensor.py();
    let Some(b) = builtins(py) else {
        return tensor.call_method0(intern!(py, "is_mutable"))?.is_truthy();
    };
    let exact_tensor = tensor.get_type().is(&b.tensor_type);
    if !(exact_tensor && *TENSOR_IS_MUTABLE_BUILTIN.get_or_init(py, || {
        class_attr_is(tensor, intern!(py, "is_mutable"), &b.tensor_is_mutable)
    })) && !class_attr_is(tensor, intern!(py, "is_mutable"), &b.tensor_is_mutable)
    {
        return tensor.call_method0(intern!(py, "is_mutable"))?.is_truthy();
    }
    if subtensors != 1 {
        return Ok(false);
    }
    let builtin = class_hooks_are(carrier, Hooks::BuiltinMutable, || {
        class_attr_is(carrier, intern!(py, "is_mutable"), &b.carrier_is_mutable)
            && class_attr_is(carrier, intern!(py, "_is_mutable"), &b.builtin_is_mutable)
    });
    if !builtin {
        return carrier.call_method0(intern!(py, "is_mutable"))?.is_truthy();
    }
    if let Ok(base) = carrier.cast::<CarrierBase>() {
        let base = base.get();
        let released = released.unwrap_or_else(|| base.released());
        return Ok(!released && base.owner_is_none() && base.mutable_flag());
    }
    let released = match released {
        Some(released) => released,
        None => carrier.getattr(intern!(py, "_sw_released"))?.is_truthy()?,
    };
    Ok(!released
        && carrier.getattr(intern!(py, "_sw_owner"))?.is_none()
        && carrier.getattr(intern!(py, "_mutable"))?.is_truthy()?)
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
    if let Ok(t) = value.cast_exact::<PyTuple>() {
        // The common case (NumPy passes `max_version=(1, 0)`): an exact tuple cannot
        // override item access, so read its items directly instead of through the sequence
        // protocol.
        let n = t.len();
        if n != 2 {
            return Err(PyValueError::new_err(format!(
                "{arg} must have exactly two elements, got {n}"
            )));
        }
        return Ok(Some((t.get_item(0)?, t.get_item(1)?)));
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
/// `Tensor.__dlpack__` as a function: returns a `dltensor` capsule (legacy), or a
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
    export(tensor, stream, max_version, dl_device, copy)
}

/// The export behind `Tensor.__dlpack__` (tensor_base.rs) and `dlpack_export`.
pub(crate) fn export(
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
    let subtensors = require_single_subtensor(tensor, "__dlpack__")?;

    // 2. carrier: hook, device, pointer; then the null-data check, which needs the extents.
    let carrier = field(tensor, Field::Carrier)?;
    let CarrierInfo {
        device,
        pointer,
        released,
    } = carrier_info(&carrier, true)?;
    let (shape, strides) = leaf_modes(&field(tensor, Field::Layout)?)?;
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
    let dtype = field(tensor, Field::DType)?;
    let Some(export_dtype) = export_dtype(&dtype)? else {
        return Err(PyBufferError::new_err(format!(
            "DLPack export supports only the Float32 and Int32 dtypes, not {dtype}"
        )));
    };

    // 5. build
    let offset: u64 = match native_view(tensor) {
        Some(view) => u64::try_from(view.offset).map_err(|_| PyValueError::new_err("negative tensor offset"))?,
        None => field(tensor, Field::Offset)?.extract()?,
    };
    let desc = TensorDesc::new(pointer, device, export_dtype, shape, strides, offset)
        .map_err(error::dlpack_desc)?;
    if versioned {
        // Advisory read-only bit: exactly when the tensor is not publicly mutable right now.
        let flags = if is_mutable(tensor, &carrier, subtensors, released)? {
            0
        } else {
            FLAG_READ_ONLY
        };
        let owner = TensorRef(ManuallyDrop::new(tensor.clone().unbind()));
        into_capsule(
            py,
            export_versioned(desc, flags, owner),
            VERSIONED_NAME,
            versioned_capsule_destructor,
        )
    } else {
        let owner = TensorRef(ManuallyDrop::new(tensor.clone().unbind()));
        into_capsule(
            py,
            export_legacy(desc, owner),
            LEGACY_NAME,
            legacy_capsule_destructor,
        )
    }
}

/// `dlpack_device(tensor)` → `(device_type, device_id)`, `Tensor.__dlpack_device__` as a
/// function.
#[pyfunction]
fn dlpack_device(tensor: &Bound<'_, PyAny>) -> PyResult<(u32, i32)> {
    device(tensor)
}

/// The device behind `Tensor.__dlpack_device__` and `dlpack_device`: depends only on the
/// one-subtensor requirement and the carrier's `dlpack_info()` hook, never on the dtype.
pub(crate) fn device(tensor: &Bound<'_, PyAny>) -> PyResult<(u32, i32)> {
    require_single_subtensor(tensor, "__dlpack_device__")?;
    let carrier = field(tensor, Field::Carrier)?;
    let CarrierInfo { device, .. } = carrier_info(&carrier, false)?;
    Ok((device.device_type.0, device.device_id))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(dlpack_export, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack_device, m)?)?;
    Ok(())
}
