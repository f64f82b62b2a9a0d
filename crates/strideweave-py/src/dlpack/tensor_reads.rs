//! Reading the exported Tensor and asking whether the framework's own methods are in place.
//!
//! An export reads five Tensor fields and up to three `is_mutable` levels. For an instance of
//! exactly `Tensor` whose methods are the framework's own, these reads happen here without a
//! Python frame (the native view's fields, the predicates evaluated from the same state);
//! anything overridden goes through Python, so overrides always run.

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyType};
use strideweave_core::dlpack::ExportDType;

use super::carrier::ExportCarrier;
use crate::carrier_base::Hooks;
use crate::layout::PyLayout;
use crate::tensor_base::{TensorBase, View};

/// The framework objects the fast paths compare against, imported on first use (the Python
/// package imports this extension, so they cannot be fetched at load time). `None` when the
/// package is not importable, in which case every call takes the general path.
struct Builtins {
    /// `CPU.dlpack_info` and `CPU.pointer`, the plain functions.
    cpu_dlpack_info: Py<PyAny>,
    cpu_pointer: Py<PyAny>,
    /// `Tensor.is_mutable`.
    tensor_is_mutable: Py<PyAny>,
    /// `DType.Float32`, `DType.Int32`.
    float32: Py<PyAny>,
    int32: Py<PyAny>,
    /// `Tensor`, whose instances are read natively.
    tensor_type: Py<PyAny>,
}

/// The Tensor fields an export reads (ARCHITECTURE.md, "Tensor fields").
#[derive(Clone, Copy)]
pub(super) enum Field {
    Subtensors,
    Carrier,
    Layout,
    DType,
    Offset,
}

/// The view of exactly a `Tensor` (a subclass could shadow a field name, so its instances
/// are read through `getattr`).
pub(super) fn native_view<'a>(tensor: &'a Bound<'_, PyAny>) -> Option<&'a View> {
    let b = builtins(tensor.py())?;
    if !is_exactly(tensor, &b.tensor_type) {
        return None;
    }
    // SAFETY: `tensor`'s type is exactly `Tensor`, which `builtins` checked is a subclass of
    // `_TensorBase`, so the object is a `TensorBase` instance (and the cast's own check, a
    // walk of the class's MRO, can be skipped).
    unsafe { tensor.cast_unchecked::<TensorBase>() }.get().view().ok()
}

/// Whether `object`'s type is exactly `class` (a pointer comparison, no new reference).
fn is_exactly(object: &Bound<'_, PyAny>, class: &Py<PyAny>) -> bool {
    std::ptr::eq(object.get_type_ptr().cast::<ffi::PyObject>(), class.as_ptr())
}

/// `tensor.<field>`: a native field read for a `Tensor`, `getattr` for anything else.
pub(super) fn field<'py>(tensor: &Bound<'py, PyAny>, which: Field) -> PyResult<Bound<'py, PyAny>> {
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
    // Anything else is read through the spec's public names (tensor-and-carriers.md §1), so
    // a subclass's overrides of them run.
    match which {
        Field::Subtensors => tensor.getattr(intern!(py, "subtensors")),
        Field::Carrier => tensor.getattr(intern!(py, "carrier")),
        Field::Layout => tensor.getattr(intern!(py, "layout")),
        Field::DType => tensor.call_method0(intern!(py, "dtype")),
        Field::Offset => tensor.getattr(intern!(py, "offset")),
    }
}

static BUILTINS: PyOnceLock<Option<Builtins>> = PyOnceLock::new();

fn builtins(py: Python<'_>) -> Option<&'static Builtins> {
    BUILTINS
        .get_or_init(py, || {
            let load = || -> PyResult<Builtins> {
                let cpu = py.import("strideweave.carriers.cpu")?.getattr("CPU")?;
                let tensor = py.import("strideweave.tensor")?.getattr("Tensor")?;
                // `native_view` relies on this to read a Tensor's fields without a checked cast.
                if !tensor.cast::<PyType>()?.is_subclass_of::<TensorBase>()? {
                    return Err(PyTypeError::new_err("strideweave.Tensor does not subclass _TensorBase"));
                }
                let dtype = py.import("strideweave.carriers.dtype")?.getattr("DType")?;
                Ok(Builtins {
                    cpu_dlpack_info: cpu.getattr("dlpack_info")?.unbind(),
                    cpu_pointer: cpu.getattr("pointer")?.unbind(),
                    tensor_is_mutable: tensor.getattr("is_mutable")?.unbind(),
                    float32: dtype.getattr("Float32")?.unbind(),
                    int32: dtype.getattr("Int32")?.unbind(),
                    tensor_type: tensor.unbind(),
                })
            };
            load().ok()
        })
        .as_ref()
}

/// Whether `carrier`'s class inherits both `dlpack_info` and `pointer` from the built-in
/// `CPU` unchanged (then their answers can be computed without calling them).
pub(super) fn inherits_cpu_hooks(carrier: ExportCarrier<'_, '_>) -> bool {
    let py = carrier.object.py();
    builtins(py).is_some_and(|b| {
        class_hooks_are(carrier, Hooks::CpuDlpack, || {
            class_attr_is(carrier.object, intern!(py, "dlpack_info"), &b.cpu_dlpack_info)
                && class_attr_is(carrier.object, intern!(py, "pointer"), &b.cpu_pointer)
        })
    })
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
fn class_hooks_are(carrier: ExportCarrier<'_, '_>, which: Hooks, check: impl FnOnce() -> bool) -> bool {
    match carrier.base {
        Some(base) => base.get().hooks_are(which, check),
        None => check(),
    }
}

/// `Tensor.is_mutable` is the framework's own (decided once, for exactly `Tensor`).
static TENSOR_IS_MUTABLE_BUILTIN: PyOnceLock<bool> = PyOnceLock::new();

/// The layout's leaf extents and leaf strides, read from the native Layout without building
/// tuples; any other layout object is read through its public `leaf_shape`/`leaf_stride`.
pub(super) fn leaf_modes(layout: &Bound<'_, PyAny>) -> PyResult<(Vec<i64>, Vec<i64>)> {
    if let Ok(native) = layout.cast::<PyLayout>() {
        let native = native.borrow();
        let core = native.core();
        return Ok((core.leaf_extents().to_vec(), core.leaf_strides().to_vec()));
    }
    let py = layout.py();
    Ok((layout.getattr(intern!(py, "leaf_shape"))?.extract()?, layout.getattr(intern!(py, "leaf_stride"))?.extract()?))
}

/// The exportable element type of a logical dtype, or `None`. Identity with the DType
/// singletons first; the name covers objects that are not those singletons.
pub(super) fn export_dtype(dtype: &Bound<'_, PyAny>) -> PyResult<Option<ExportDType>> {
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
/// - `Carrier.is_mutable` with `RustBackedCarrier._is_mutable` (CPU, FileBacked, ...) is "live,
///   unowned and the built-in's mutable flag" (the package says which classes keep both:
///   `access::keeps_builtin_mutability`), computed here from the native state.
///
/// The same attributes are read in the same short-circuit order, so the answer and any
/// exception are the Python methods' own. The first overridden level is called through
/// Python instead, and decides from there on. Whether a level is overridden is decided once
/// and remembered (for `Tensor` once per process, for a carrier once per carrier, from its
/// class): a method assigned to a class later is seen by carriers created afterwards. As for
/// `dlpack_info`, overrides are class attributes: a function stored on one carrier instance
/// under a method's name is not a hook override.
pub(super) fn is_mutable(
    tensor: &Bound<'_, PyAny>,
    carrier: ExportCarrier<'_, '_>,
    subtensors: usize,
    released: Option<bool>,
) -> PyResult<bool> {
    let py = tensor.py();
    let Some(b) = builtins(py) else {
        return tensor.call_method0(intern!(py, "is_mutable"))?.is_truthy();
    };
    let builtin_hook = || class_attr_is(tensor, intern!(py, "is_mutable"), &b.tensor_is_mutable);
    let tensor_hook_is_builtin = if is_exactly(tensor, &b.tensor_type) {
        *TENSOR_IS_MUTABLE_BUILTIN.get_or_init(py, builtin_hook)
    } else {
        builtin_hook()
    };
    if !tensor_hook_is_builtin {
        return tensor.call_method0(intern!(py, "is_mutable"))?.is_truthy();
    }
    if subtensors != 1 {
        return Ok(false);
    }
    let object = carrier.object;
    let builtin = class_hooks_are(carrier, Hooks::BuiltinMutable, || {
        crate::access::keeps_builtin_mutability(object.get_type().as_any())
    });
    match carrier.base {
        Some(base) if builtin => {
            let base = base.get();
            let released = released.unwrap_or_else(|| base.released());
            Ok(!released && base.owner_is_none() && base.mutable_flag())
        }
        _ => object.call_method0(intern!(py, "is_mutable"))?.is_truthy(),
    }
}
