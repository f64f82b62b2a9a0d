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

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

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

    /// `__dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None)`: a
    /// `dltensor` capsule, or a `dltensor_versioned` capsule (version 1.0) when
    /// `max_version` has major >= 1. The capsule aliases the carrier's storage and keeps this
    /// Tensor alive. See `dlpack.rs` for the check order and error types.
    #[pyo3(signature = (stream=None, *, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        slf: &Bound<'_, Self>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<&Bound<'_, PyAny>>,
        copy: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        dlpack::export(slf.as_any(), stream, max_version, dl_device, copy)
    }

    /// `__dlpack_device__()` → `(device_type, device_id)` of the carrier's DLPack device.
    fn __dlpack_device__(slf: &Bound<'_, Self>) -> PyResult<(u32, i32)> {
        dlpack::device(slf.as_any())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TensorBase>()
}
