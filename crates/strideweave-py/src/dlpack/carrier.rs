//! Step 2 of an export: the carrier's DLPack device and data pointer, from its public
//! `dlpack_info()` hook, or computed in Rust for a carrier that inherits the built-in CPU's
//! hook and `pointer()` unchanged.

use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use pyo3::PyTypeInfo;
use strideweave_core::dlpack::{DLDevice, DLDeviceType};

use super::tensor_reads::inherits_cpu_hooks;
use crate::carrier_base::CarrierBase;
use crate::storage::HostStorage;

/// The exported Tensor's carrier, with its native base when it has one (cast once per
/// export: for a subclass of `_CarrierBase`, every cast walks the class's MRO).
#[derive(Clone, Copy)]
pub(super) struct ExportCarrier<'a, 'py> {
    pub(super) object: &'a Bound<'py, PyAny>,
    pub(super) base: Option<&'a Bound<'py, CarrierBase>>,
}

impl<'a, 'py> ExportCarrier<'a, 'py> {
    pub(super) fn new(object: &'a Bound<'py, PyAny>) -> Self {
        Self { object, base: object.cast::<CarrierBase>().ok() }
    }
}

/// What resolving the carrier produced: its DLPack device and, for an export, its pointer.
pub(super) struct CarrierInfo {
    pub(super) device: DLDevice,
    pub(super) pointer: usize,
    /// `bool(carrier._sw_released)` when the built-in path read it for the pointer. The
    /// mutability shortcut reuses it, so the capsule's data pointer and its read-only flag
    /// describe one observation of the carrier (and the attribute is read once per export).
    pub(super) released: Option<bool>,
}

/// Step 2: resolve the carrier's DLPack support through its public `dlpack_info()` hook.
///
/// Fast path: for a carrier whose class inherits both `dlpack_info` and `pointer` from the
/// built-in `CPU` unchanged, the hook's answer is known without running it: device (1, 0)
/// and `pointer()`, which is 0 once released and otherwise the address of the Rust host
/// buffer. Reading those directly keeps the whole export in Rust. Any override of either
/// method, in any subclass, takes the general path and runs the hook through Python.
pub(super) fn carrier_info(carrier: ExportCarrier<'_, '_>, with_pointer: bool) -> PyResult<CarrierInfo> {
    if inherits_cpu_hooks(carrier) {
        let device = DLDevice { device_type: DLDeviceType::CPU, device_id: 0 };
        if !with_pointer {
            return Ok(CarrierInfo { device, pointer: 0, released: None });
        }
        if let Some((pointer, released)) = builtin_cpu_pointer(carrier)? {
            return Ok(CarrierInfo { device, pointer, released: Some(released) });
        }
    }
    hook_info(carrier.object, with_pointer)
}

/// `CPU.pointer()` without the Python call: `0 if released else storage.pointer()`, with the
/// released flag. `None` if the carrier does not hold the expected Rust storage (then the
/// hook runs).
fn builtin_cpu_pointer(carrier: ExportCarrier<'_, '_>) -> PyResult<Option<(usize, bool)>> {
    let Some(base) = carrier.base else {
        return Ok(None);
    };
    let base = base.get();
    if base.released() {
        return Ok(Some((0, true)));
    }
    Ok(base
        .storage
        .with(carrier.object.py(), |storage| storage.cast::<HostStorage>().ok().map(|s| s.get().address()))
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
            Err(e) if e.is_instance_of::<PyTypeError>(py) || e.is_instance_of::<PyValueError>(py) => {
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
    Ok(CarrierInfo { device: DLDevice { device_type: DLDeviceType(device_type), device_id }, pointer, released: None })
}

fn required_key<'py>(info: &Bound<'py, PyDict>, key: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
    info.get_item(key)?.ok_or_else(|| {
        PyKeyError::new_err(format!("dlpack_info() result has no {} key (needs pointer, device_type, device_id)", key))
    })
}
