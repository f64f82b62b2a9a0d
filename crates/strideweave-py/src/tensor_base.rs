//! `_native._TensorBase`: the native base class of `strideweave.Tensor`.
//!
//! It exists for one reason: so that `Tensor.__dlpack__` and `Tensor.__dlpack_device__` are
//! native methods. A consumer such as NumPy calls `obj.__dlpack__(...)` with
//! `PyObject_VectorcallMethod`; when the method found on the type is a native method
//! descriptor, that call goes straight into Rust (no bound-method object, no Python frame, no
//! forwarder re-packing the arguments). Everything the export reads still lives on the Python
//! `Tensor` (its `__slots__`), so the base carries no Rust data and places no constraint on
//! the Python class beyond inheriting from it.
//!
//! The base declares neither `dict` nor `weakref`: the Python subclass keeps its own
//! `__slots__`, including `"__weakref__"`.
//!
//! `__dlpack__` is installed as a raw `METH_FASTCALL | METH_KEYWORDS` method rather than a
//! `#[pymethods]` one. Its keyword arguments are the hot part of the call: NumPy passes
//! `dl_device=`, `copy=` and `max_version=` on every `from_dlpack`, and PyO3's general
//! argument parser matches each keyword by decoding it to UTF-8 and comparing bytes. Here the
//! names are compared by identity with interned strings first (CPython interns keyword names
//! written in source, and NumPy interns its own), then by value, so the common call costs
//! four pointer comparisons. The accepted signature and the TypeErrors are those of
//! `__dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None)`.

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::{PySystemError, PyTypeError};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use pyo3::Borrowed;
use pyo3::PyTypeInfo;

use crate::dlpack;

/// Native base of `strideweave.Tensor` (DLPack methods only; not public API).
#[pyclass(subclass, frozen, module = "strideweave", name = "_TensorBase")]
pub struct TensorBase;

#[pymethods]
impl TensorBase {
    /// Accepts and ignores any arguments: `Tensor(carrier, offset, layout)` passes its
    /// arguments to `__new__` before `Tensor.__init__` validates them, and the framework
    /// constructor calls `cls.__new__(cls)` with none.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        TensorBase
    }

    /// `__dlpack_device__()` → `(device_type, device_id)` of the carrier's DLPack device.
    fn __dlpack_device__(slf: &Bound<'_, Self>) -> PyResult<(u32, i32)> {
        dlpack::device(slf.as_any())
    }
}

/// The parameters of `__dlpack__` after `self`, in declaration order.
const PARAMS: [&str; 4] = ["stream", "max_version", "dl_device", "copy"];

/// Which parameter a keyword names: identity with the interned names first (the usual
/// case, both sides interned), then string equality. `Err` is the TypeError Python raises
/// for an unknown keyword.
fn keyword_index(py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<usize> {
    let interned = [
        intern!(py, "stream"),
        intern!(py, "max_version"),
        intern!(py, "dl_device"),
        intern!(py, "copy"),
    ];
    if let Some(i) = interned.iter().position(|p| p.is(name)) {
        return Ok(i);
    }
    let text = name
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err("__dlpack__() keywords must be strings"))?
        .to_str()?;
    PARAMS.iter().position(|p| *p == text).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "__dlpack__() got an unexpected keyword argument '{text}'"
        ))
    })
}

/// Binds a vectorcall argument vector to `PARAMS` and exports.
///
/// # Safety
/// `slf` is a live object; `args` points to `nargs` positional arguments followed by one
/// value per name in `kwnames` (a tuple of str, or NULL), all live for the call.
unsafe fn dlpack_call(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<Py<PyAny>> {
    let npos = usize::try_from(nargs).unwrap_or(0);
    if npos > 1 {
        return Err(PyTypeError::new_err(format!(
            "__dlpack__() takes from 1 to 2 positional arguments but {} were given",
            npos + 1
        )));
    }
    // SAFETY (all `Borrowed::from_ptr` below): the pointers are live borrowed references
    // for the duration of the call, per this function's contract.
    let arg = |i: usize| unsafe { Borrowed::from_ptr(py, *args.add(i)) };
    let mut bound: [Option<Borrowed<'_, '_, PyAny>>; 4] = [None; 4];
    if npos == 1 {
        bound[0] = Some(arg(0));
    }
    if !kwnames.is_null() {
        // SAFETY: `kwnames` is a live tuple (contract).
        let names = unsafe { Borrowed::from_ptr(py, kwnames) };
        let names = names.cast::<PyTuple>()?;
        for (j, name) in names.iter().enumerate() {
            let index = keyword_index(py, &name)?;
            if bound[index].is_some() {
                return Err(PyTypeError::new_err(format!(
                    "__dlpack__() got multiple values for argument '{}'",
                    PARAMS[index]
                )));
            }
            bound[index] = Some(arg(npos + j));
        }
    }
    // SAFETY: `slf` is live (contract).
    let slf = unsafe { Borrowed::from_ptr(py, slf) };
    let [stream, max_version, dl_device, copy] = bound;
    dlpack::export(
        &slf,
        stream.as_deref(),
        max_version.as_deref(),
        dl_device.as_deref(),
        copy.as_deref(),
    )
}

/// `__dlpack__` with the vectorcall convention of a `METH_FASTCALL | METH_KEYWORDS` method.
///
/// # Safety
/// Called by CPython, attached to the interpreter, with `slf` a live instance of
/// `_TensorBase` (the method descriptor checks the type), `args` pointing to `nargs`
/// positional arguments followed by one value per name in the `kwnames` tuple (NULL when
/// there are no keywords), all borrowed for the duration of the call.
unsafe extern "C" fn dlpack_fastcall(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // The thread is attached (CPython only calls methods from attached threads);
        // `Python::attach` makes PyO3 know it, so every PyO3 API in the body behaves as in
        // a `#[pymethods]` method (immediate decrefs included).
        Python::attach(|py| {
            // SAFETY: the arguments satisfy `dlpack_call`'s contract (this function's).
            match unsafe { dlpack_call(py, slf, args, nargs, kwnames) } {
                Ok(capsule) => capsule.into_ptr(),
                Err(err) => {
                    err.restore(py);
                    std::ptr::null_mut()
                }
            }
        })
    }));
    outcome.unwrap_or_else(|_| {
        Python::attach(|py| {
            PySystemError::new_err("panic in strideweave __dlpack__").restore(py);
        });
        std::ptr::null_mut()
    })
}

/// The method definition of `__dlpack__`; CPython keeps a pointer to it for the life of the
/// type, so it is a static.
struct MethodDef(ffi::PyMethodDef);

// SAFETY: the definition is immutable after construction (CPython only reads it) and its
// pointers are to 'static C strings and a function, so sharing it across threads is sound.
unsafe impl Sync for MethodDef {}

const DLPACK_DOC: &CStr =
    c"__dlpack__($self, stream=None, *, max_version=None, dl_device=None, copy=None)
--

A DLPack capsule aliasing this tensor's storage: `dltensor`, or `dltensor_versioned`
(version 1.0) when max_version has major >= 1. The capsule keeps the tensor alive.";

static DLPACK_DEF: MethodDef = MethodDef(ffi::PyMethodDef {
    ml_name: c"__dlpack__".as_ptr(),
    ml_meth: ffi::PyMethodDefPointer {
        PyCFunctionFastWithKeywords: dlpack_fastcall,
    },
    ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
    ml_doc: DLPACK_DOC.as_ptr(),
});

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<TensorBase>()?;
    let ty = TensorBase::type_object(py);
    // SAFETY: `ty` is the live `_TensorBase` type and `DLPACK_DEF` a 'static definition
    // that CPython never writes to; PyDescr_NewMethod returns a new reference or NULL with
    // an exception set.
    let descriptor = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyDescr_NewMethod(
                ty.as_type_ptr(),
                std::ptr::addr_of!(DLPACK_DEF.0).cast_mut(),
            ),
        )
    }?;
    ty.setattr(intern!(py, "__dlpack__"), descriptor)?;
    Ok(())
}
