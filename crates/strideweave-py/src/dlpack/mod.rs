//! DLPack export: `export(tensor, stream, max_version, dl_device, copy)` and
//! `device(tensor)`, the whole of `Tensor.__dlpack__` / `__dlpack_device__`. Those are native
//! methods of `_native._TensorBase` (tensor_base.rs), the base class of `Tensor`, so a
//! consumer's call reaches this file without a Python frame. `_native.dlpack_export` and
//! `_native.dlpack_device` expose the same two functions for any other object.
//!
//! The managed-tensor structures and their deleters live in `strideweave_core::dlpack`. This
//! file runs the spec's checks in order; `tensor_reads.rs` reads the Tensor (directly when
//! nothing is overridden), `carrier.rs` resolves the carrier, `arguments.rs` checks the
//! arguments, and `capsule.rs` wraps the result in a capsule whose destructor honours DLPack's
//! ownership convention.
//!
//! Check order (docs/spec/interop-movement.md, "DLPack export ..." through "DLPack is export-only"):
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

mod arguments;
mod capsule;
mod carrier;
mod tensor_reads;

use pyo3::exceptions::{PyBufferError, PyNotImplementedError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;
use strideweave_core::dlpack::{DLDeviceType, TensorDesc, FLAG_READ_ONLY};

use crate::error;
use crate::tensor_base::View;
use arguments::{check_dl_device, wants_versioned};
use carrier::{carrier_info, CarrierInfo, ExportCarrier};
use tensor_reads::{export_dtype, field, is_mutable, leaf_modes, native_view, Field};

/// Step 1: the one-subtensor requirement, before any carrier is touched. Returns the
/// subtensor count (at most 1), which `Tensor.is_mutable` also tests.
fn require_single_subtensor(tensor: &Bound<'_, PyAny>, view: Option<&View>, what: &str) -> PyResult<usize> {
    let n = match view {
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

/// `dlpack_export(tensor, stream=None, max_version=None, dl_device=None, copy=None)`, the
/// export behind `Tensor.__dlpack__` (tensor_base.rs calls it directly).
///
/// Returns a `dltensor` capsule (legacy), or a `dltensor_versioned` capsule at version 1.0
/// when `max_version` has major >= 1. The capsule aliases the carrier's storage and holds a
/// strong reference to `tensor`.
#[pyfunction]
#[pyo3(name = "dlpack_export", signature = (tensor, stream=None, max_version=None, dl_device=None, copy=None))]
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

    // Exactly a `Tensor`: its fields are read once, natively.
    let view = native_view(tensor);

    // 1. multi-subtensor
    let subtensors = require_single_subtensor(tensor, view, "__dlpack__")?;

    // The fields of exactly a Tensor are borrowed from its view (no new references); any
    // other object's are read through `getattr` and held here.
    let (read_carrier, read_layout, read_dtype);

    // 2. carrier: hook, device, pointer; then the null-data check, which needs the extents.
    let carrier = ExportCarrier::new(match view {
        Some(v) => v.carrier.bind(py),
        None => {
            read_carrier = field(tensor, Field::Carrier)?;
            &read_carrier
        }
    });
    let CarrierInfo { device, pointer, released } = carrier_info(carrier, true)?;
    let layout_object = match view {
        Some(v) => v.layout.bind(py).as_any(),
        None => {
            read_layout = field(tensor, Field::Layout)?;
            &read_layout
        }
    };
    let native_layout = layout_object.cast::<crate::layout::PyLayout>().ok();
    let read_modes;
    let (shape, strides): (&[i64], &[i64]) = match native_layout {
        Some(native) => (native.get().core().leaf_extents(), native.get().core().leaf_strides()),
        None => {
            read_modes = leaf_modes(layout_object)?;
            (&read_modes.0, &read_modes.1)
        }
    };
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
    let dtype = match view {
        Some(v) => v.dtype.bind(py),
        None => {
            read_dtype = field(tensor, Field::DType)?;
            &read_dtype
        }
    };
    let Some(export_dtype) = export_dtype(dtype)? else {
        return Err(PyBufferError::new_err(format!(
            "DLPack export supports only the Float32 and Int32 dtypes, not {dtype}"
        )));
    };

    // 5. build
    let offset: u64 = match view {
        Some(view) => u64::try_from(view.offset).map_err(|_| PyValueError::new_err("negative tensor offset"))?,
        None => field(tensor, Field::Offset)?.extract()?,
    };
    let desc =
        TensorDesc::from_modes(pointer, device, export_dtype, shape, strides, offset).map_err(error::dlpack_desc)?;
    if versioned {
        // Advisory read-only bit: exactly when the tensor is not publicly mutable right now.
        let flags = if is_mutable(tensor, carrier, subtensors, released)? { 0 } else { FLAG_READ_ONLY };
        capsule::versioned(py, desc, flags, tensor)
    } else {
        capsule::legacy(py, desc, tensor)
    }
}

/// `dlpack_device(tensor)` → `(device_type, device_id)`, the device behind
/// `Tensor.__dlpack_device__`: depends only on the one-subtensor requirement and the
/// carrier's `dlpack_info()` hook, never on the dtype.
#[pyfunction]
#[pyo3(name = "dlpack_device")]
pub(crate) fn device(tensor: &Bound<'_, PyAny>) -> PyResult<Py<PyTuple>> {
    let view = native_view(tensor);
    require_single_subtensor(tensor, view, "__dlpack_device__")?;
    let read_carrier;
    let carrier = ExportCarrier::new(match view {
        Some(v) => v.carrier.bind(tensor.py()),
        None => {
            read_carrier = field(tensor, Field::Carrier)?;
            &read_carrier
        }
    });
    let CarrierInfo { device, .. } = carrier_info(carrier, false)?;
    let py = tensor.py();
    if device.device_type == DLDeviceType::CPU && device.device_id == 0 {
        // Every built-in exporter's answer: one shared tuple (tuples are immutable) instead
        // of a new one per call.
        return CPU_DEVICE
            .get_or_try_init(py, || PyTuple::new(py, [1u32, 0]).map(Bound::unbind))
            .map(|t| t.clone_ref(py));
    }
    Ok(PyTuple::new(py, [i64::from(device.device_type.0), i64::from(device.device_id)])?.unbind())
}

/// `(1, 0)`, the DLPack device of host memory, built once.
static CPU_DEVICE: PyOnceLock<Py<PyTuple>> = PyOnceLock::new();

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(export, m)?)?;
    m.add_function(wrap_pyfunction!(device, m)?)?;
    Ok(())
}
