//! `_native._TensorBase`: the native base class of `strideweave.Tensor`.
//!
//! It holds the fields every Tensor has (carrier, offset, layout, dtype, subtensors, adjacent
//! layouts, and the autograd state), so the native paths (`Tensor[key]`, DLPack export, the
//! inline move) read them as struct fields, and it carries the native methods:
//! `__getitem__`/`__setitem__` (`access.rs`), `__dlpack__` and `__dlpack_device__`. A
//! consumer such as NumPy calls `obj.__dlpack__(...)` with `PyObject_VectorcallMethod`; when
//! the method found on the type is a native method descriptor, that call goes straight into
//! Rust (no bound-method object, no Python frame, no forwarder re-packing the arguments).
//!
//! The view fields are set once (`_sw_init_view` or `_sw_init_multi`) and never change; the
//! subtensor tuple of a one-subtensor view is built on first use, because most tensors never
//! ask for it and building a `Subtensor` costs more than the rest of a Tensor.
//!
//! The base declares `weakref` and no `dict`: a Tensor has no instance dict.
//!
//! `__dlpack__` is installed as a raw `METH_FASTCALL | METH_KEYWORDS` method rather than a
//! `#[pymethods]` one. Its keyword arguments are the hot part of the call: NumPy passes
//! `dl_device=`, `copy=` and `max_version=` on every `from_dlpack`, and PyO3's general
//! argument parser matches each keyword by decoding it to UTF-8 and comparing bytes. Here the
//! names are compared by identity with interned strings first (CPython interns keyword names
//! written in source, and NumPy interns its own), then by value, so the common call costs
//! a few pointer comparisons. The accepted signature and the TypeErrors are those of
//! `__dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None)`. The raw
//! function still runs inside PyO3's own trampoline for this calling convention (the one its
//! generated methods use), so PyO3 knows the thread is attached without a
//! `PyGILState_Ensure`/`Release` pair, as `Python::attach` would pay here.

use std::ffi::CStr;

use pyo3::exceptions::PyTypeError;
use pyo3::exceptions::{PyAttributeError, PyRuntimeError};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};
use std::sync::OnceLock;

use crate::carrier_base::Slot;
use crate::layout::PyLayout;
use crate::set_once::SetOnce;
use pyo3::Borrowed;
use pyo3::PyTypeInfo;

use crate::access;
use crate::dlpack;

/// The view a Tensor is: set once, never changed.
pub(crate) struct View {
    pub(crate) carrier: Py<PyAny>,
    pub(crate) offset: i64,
    pub(crate) layout: Py<PyLayout>,
    pub(crate) dtype: Py<PyAny>,
    pub(crate) adjacent: Py<PyAny>,
    /// False for a multi-subtensor representation, whose `carrier`/`offset`/`layout` are
    /// its first subtensor's.
    pub(crate) single: bool,
    subtensors: OnceLock<Py<PyAny>>,
}

impl View {
    /// A one-subtensor view (no adjacent layouts; its subtensor tuple built on first use).
    fn one_subtensor(py: Python<'_>, carrier: Py<PyAny>, offset: i64, layout: Py<PyLayout>, dtype: Py<PyAny>) -> Self {
        View {
            carrier,
            offset,
            layout,
            dtype,
            adjacent: PyTuple::empty(py).into_any().unbind(),
            single: true,
            subtensors: OnceLock::new(),
        }
    }
}

/// Native base of `strideweave.Tensor` (fields and native methods; not public API).
#[pyclass(subclass, frozen, weakref, module = "strideweave", name = "_TensorBase")]
pub struct TensorBase {
    view: SetOnce<View>,
    #[pyo3(get, name = "_grad")]
    grad: Slot,
    #[pyo3(get, name = "_autograd_ctx")]
    autograd_ctx: Slot,
    retain_grad: Slot,
    /// What a move handed this Tensor as its `output` (a weak reference to the move request):
    /// while that request still claims the carrier, writes through this Tensor are the
    /// transfer's own and the claim admits them. Writes through anything else are refused.
    grant: Slot,
}

impl TensorBase {
    /// Names the move request (`grant`, a weak reference to it) whose claim admits writes
    /// through this Tensor: a move's `output`.
    pub(crate) fn grant_to(&self, grant: &Bound<'_, PyAny>) {
        assign_or_clear(&self.grant, Some(grant.clone()));
    }

    fn empty() -> Self {
        TensorBase {
            view: SetOnce::default(),
            grad: Slot::default(),
            autograd_ctx: Slot::default(),
            retain_grad: Slot::default(),
            grant: Slot::default(),
        }
    }

    /// The view; AttributeError (as for an unset slot) on a Tensor whose `__init__` never ran.
    pub(crate) fn view(&self) -> PyResult<&View> {
        self.view
            .get()
            .ok_or_else(|| PyAttributeError::new_err("Tensor fields are not set (Tensor.__init__ was not run)"))
    }

    fn set_view(&self, view: View) -> PyResult<()> {
        self.view.set(view).map_err(|_| PyRuntimeError::new_err("a Tensor's fields are set once"))
    }

    /// A new instance of `tensor_type` (a subclass of `_TensorBase`, normally `Tensor`) viewing
    /// `carrier[offset + layout(c)]`, without running its `__init__`: the caller vouches that
    /// the view is valid (a live carrier of at least `offset + cosize` slots of `dtype`).
    pub(crate) fn new_view<'py>(
        tensor_type: &Bound<'py, PyType>,
        carrier: Py<PyAny>,
        offset: i64,
        layout: Py<PyLayout>,
        dtype: Py<PyAny>,
    ) -> PyResult<Bound<'py, TensorBase>> {
        let py = tensor_type.py();
        let object = new_instance(tensor_type)?;
        let tensor = object.cast_into::<TensorBase>()?;
        tensor.get().set_view(View::one_subtensor(py, carrier, offset, layout, dtype))?;
        Ok(tensor)
    }
}

/// `tensor_type.__new__(tensor_type)` through the type's `tp_new` slot, without looking up
/// and binding `__new__` on every result a move builds.
fn new_instance<'py>(tensor_type: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
    let py = tensor_type.py();
    let tp = tensor_type.as_type_ptr();
    // SAFETY: `tp` is a live type object (borrowed through `tensor_type`); `Py_tp_new` is a
    // valid slot id, and `PyType_GetSlot` returns the type's own or inherited `newfunc` (or
    // null), which is what `type.__new__(type)` calls.
    let slot = unsafe { pyo3::ffi::PyType_GetSlot(tp, pyo3::ffi::Py_tp_new) };
    if slot.is_null() {
        return tensor_type.call_method1(intern!(py, "__new__"), (tensor_type,));
    }
    // SAFETY: a non-null `Py_tp_new` slot holds a `newfunc`.
    let new: pyo3::ffi::newfunc = unsafe { std::mem::transmute(slot) };
    let args = PyTuple::empty(py);
    // SAFETY: `new` is the type's `tp_new`, called as `type.__new__` calls it: the type,
    // an argument tuple (empty: `TensorBase.__new__` ignores its arguments) and no keywords;
    // it returns a new reference or null with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, new(tp, args.as_ptr(), std::ptr::null_mut())) }
}

/// A slot reads as its object, or None: what lets `#[pyo3(get)]` expose a `Slot` field.
impl<'py> IntoPyObject<'py> for &Slot {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = std::convert::Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(self.get(py).map_or_else(|| py.None().into_bound(py), |v| v.into_bound(py)))
    }
}

/// A Python assignment to an optional autograd field: assigning None and `del` both empty it,
/// so the getter answers None either way. The previous value is dropped after the slot's lock.
fn assign_or_clear(slot: &Slot, value: Option<Bound<'_, PyAny>>) {
    drop(slot.put(value.filter(|v| !v.is_none()).map(Bound::unbind)));
}

/// `strideweave.core.representation.Subtensor`, looked up once.
static SUBTENSOR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

#[pymethods]
impl TensorBase {
    /// Accepts and ignores any arguments: `Tensor(carrier, offset, layout)` passes its
    /// arguments to `__new__` before `Tensor.__init__` validates them, and the framework
    /// constructor calls `cls.__new__(cls)` with none.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        TensorBase::empty()
    }

    /// Sets a one-subtensor view (validated by the caller, `Tensor.__init__`).
    fn _sw_init_view(
        &self,
        py: Python<'_>,
        carrier: Py<PyAny>,
        offset: i64,
        layout: Py<PyLayout>,
        dtype: Py<PyAny>,
    ) -> PyResult<()> {
        self.set_view(View::one_subtensor(py, carrier, offset, layout, dtype))
    }

    /// Sets the view of a validated representation (`core.representation`): its subtensors,
    /// logical dtype and adjacent layouts.
    fn _sw_init_multi(&self, subtensors: &Bound<'_, PyTuple>, dtype: Py<PyAny>, adjacent: Py<PyAny>) -> PyResult<()> {
        let py = subtensors.py();
        let first = subtensors.get_item(0)?;
        let view = View {
            carrier: first.getattr(intern!(py, "carrier"))?.unbind(),
            offset: first.getattr(intern!(py, "offset"))?.extract()?,
            layout: first.getattr(intern!(py, "layout"))?.extract()?,
            dtype,
            adjacent,
            single: subtensors.len() == 1,
            subtensors: OnceLock::new(),
        };
        let _ = view.subtensors.set(subtensors.clone().into_any().unbind());
        self.set_view(view)
    }

    #[getter(_carrier)]
    fn carrier_field(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.view()?.carrier.clone_ref(py))
    }

    #[getter(_offset)]
    fn offset_field(&self) -> PyResult<i64> {
        Ok(self.view()?.offset)
    }

    #[getter(_layout)]
    fn layout_field(&self, py: Python<'_>) -> PyResult<Py<PyLayout>> {
        Ok(self.view()?.layout.clone_ref(py))
    }

    #[getter(_dtype)]
    fn dtype_field(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.view()?.dtype.clone_ref(py))
    }

    #[getter(_adjacent)]
    fn adjacent_field(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.view()?.adjacent.clone_ref(py))
    }

    /// True for a multi-subtensor representation.
    fn _is_multi(&self) -> PyResult<bool> {
        Ok(!self.view()?.single)
    }

    #[getter(_subtensors)]
    fn subtensors_field(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let view = self.view()?;
        if let Some(tuple) = view.subtensors.get() {
            return Ok(tuple.clone_ref(py));
        }
        let class = SUBTENSOR.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(py.import("strideweave.core.representation")?.getattr("Subtensor")?.unbind())
        })?;
        let sub = class.bind(py).call1((
            view.dtype.clone_ref(py),
            view.carrier.clone_ref(py),
            view.offset,
            view.layout.clone_ref(py),
        ))?;
        let tuple = PyTuple::new(py, [sub])?.into_any().unbind();
        // Another thread may have built it meanwhile: either tuple is equally right, and the
        // first one set is the one every caller sees from now on.
        let _ = view.subtensors.set(tuple);
        Ok(view.subtensors.get().expect("set above").clone_ref(py))
    }

    #[setter(_grad)]
    fn set_grad_field(&self, value: Option<Bound<'_, PyAny>>) {
        assign_or_clear(&self.grad, value);
    }

    #[setter(_autograd_ctx)]
    fn set_autograd_ctx_field(&self, value: Option<Bound<'_, PyAny>>) {
        assign_or_clear(&self.autograd_ctx, value);
    }

    #[getter(_retain_grad)]
    fn retain_grad_field(&self, py: Python<'_>) -> Py<PyAny> {
        self.retain_grad.get(py).unwrap_or_else(|| PyBool::new(py, false).to_owned().into_any().unbind())
    }

    #[setter(_retain_grad)]
    fn set_retain_grad_field(&self, value: Option<Bound<'_, PyAny>>) {
        drop(self.retain_grad.put(value.map(Bound::unbind)));
    }

    /// The move request (a weak reference) whose transfer writes through this Tensor, or None.
    #[getter(_sw_grant)]
    fn grant_field(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.grant.get(py)
    }

    #[setter(_sw_grant)]
    fn set_grant_field(&self, value: Option<Bound<'_, PyAny>>) {
        assign_or_clear(&self.grant, value);
    }

    /// `t[key]`: the element of an int or hierarchical key, or the view of a slicing key.
    fn __getitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        access::getitem(slf, key)
    }

    /// `t[key] = value`: write one element.
    fn __setitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        access::setitem(slf, key, value)
    }

    /// `__dlpack_device__()` → `(device_type, device_id)` of the carrier's DLPack device.
    fn __dlpack_device__(slf: &Bound<'_, Self>) -> PyResult<Py<PyTuple>> {
        dlpack::device(slf.as_any())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(view) = self.view.get() {
            visit.call(&view.carrier)?;
            visit.call(&view.layout)?;
            visit.call(&view.dtype)?;
            visit.call(&view.adjacent)?;
            if let Some(subs) = view.subtensors.get() {
                visit.call(subs)?;
            }
        }
        self.grad.visit(&visit)?;
        self.autograd_ctx.visit(&visit)?;
        self.retain_grad.visit(&visit)?;
        self.grant.visit(&visit)
    }

    fn __clear__(&self) {
        // The view is immutable once set (set once) and so cannot be cleared; the cycles a
        // Tensor takes part in run through its autograd state (a node holding its inputs and
        // results), which is cleared here.
        let dropped =
            (self.grad.put(None), self.autograd_ctx.put(None), self.retain_grad.put(None), self.grant.put(None));
        drop(dropped);
    }
}

/// The parameters of `__dlpack__` after `self`, in declaration order.
const PARAMS: [&str; 4] = ["stream", "max_version", "dl_device", "copy"];

/// Which parameter a keyword names: identity with the interned names first (the usual
/// case, both sides interned), then string equality. `Err` is the TypeError Python raises
/// for an unknown keyword.
fn keyword_index(interned: &[&Bound<'_, PyString>; 4], name: &Bound<'_, PyAny>) -> PyResult<usize> {
    if let Some(i) = interned.iter().position(|p| p.is(name)) {
        return Ok(i);
    }
    let text =
        name.cast::<PyString>().map_err(|_| PyTypeError::new_err("__dlpack__() keywords must be strings"))?.to_str()?;
    PARAMS
        .iter()
        .position(|p| *p == text)
        .ok_or_else(|| PyTypeError::new_err(format!("__dlpack__() got an unexpected keyword argument '{text}'")))
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
        let interned =
            [intern!(py, "stream"), intern!(py, "max_version"), intern!(py, "dl_device"), intern!(py, "copy")];
        for j in 0..names.len() {
            // Borrowed: the tuple holds its names for the whole call.
            let name = names.get_borrowed_item(j)?;
            let index = keyword_index(&interned, &name)?;
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
    dlpack::export(&slf, stream.as_deref(), max_version.as_deref(), dl_device.as_deref(), copy.as_deref())
}

/// `__dlpack__` with the vectorcall convention of a `METH_FASTCALL | METH_KEYWORDS` method,
/// run inside PyO3's own method trampoline (see `DLPACK_DEF`).
///
/// # Safety
/// Called by CPython, attached to the interpreter, with `slf` a live instance of
/// `_TensorBase` (the method descriptor checks the type), `args` pointing to `nargs`
/// positional arguments followed by one value per name in the `kwnames` tuple (NULL when
/// there are no keywords), all borrowed for the duration of the call.
unsafe fn dlpack_fastcall(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: the arguments satisfy `dlpack_call`'s contract (this function's).
    unsafe { dlpack_call(py, slf, args, nargs, kwnames) }.map(Py::into_ptr)
}

/// The method definition of `__dlpack__`; CPython keeps a pointer to it for the life of the
/// type, so it is a static.
struct MethodDef(ffi::PyMethodDef);

// SAFETY: the definition is immutable after construction (CPython only reads it) and its
// pointers are to 'static C strings and a function, so sharing it across threads is sound.
unsafe impl Sync for MethodDef {}

const DLPACK_DOC: &CStr = c"__dlpack__($self, stream=None, *, max_version=None, dl_device=None, copy=None)
--

A DLPack capsule aliasing this tensor's storage: `dltensor`, or `dltensor_versioned`
(version 1.0) when max_version has major >= 1. The capsule keeps the tensor alive.";

static DLPACK_DEF: MethodDef = MethodDef(ffi::PyMethodDef {
    ml_name: c"__dlpack__".as_ptr(),
    ml_meth: ffi::PyMethodDefPointer {
        // PyO3's trampoline for this calling convention, the one its generated methods use:
        // it tells PyO3 the thread is attached without a `PyGILState_Ensure` (which
        // `Python::attach` pays when entered from a raw C callback, about a tenth of an
        // export), turns a panic into PanicException, and restores an `Err` as the raised
        // exception.
        PyCFunctionFastWithKeywords: pyo3::get_trampoline_function!(fastcall_cfunction_with_keywords, dlpack_fastcall),
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
            ffi::PyDescr_NewMethod(ty.as_type_ptr(), std::ptr::addr_of!(DLPACK_DEF.0).cast_mut()),
        )
    }?;
    ty.setattr(intern!(py, "__dlpack__"), descriptor)?;
    Ok(())
}
