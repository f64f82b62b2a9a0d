//! DLPack export of a host tensor as a managed tensor (`dlpack.rs` structures).
//!
//! The export is zero-copy: the managed tensor points at the carrier's host memory and owns
//! an `Arc` of its [`HostStore`](super::host::HostStore), so the bytes stay allocated while
//! the consumer holds the managed tensor, even if the carrier is released meanwhile. The
//! layout's flattened leaf modes become the DLPack shape and strides, the offset the byte
//! offset. Only `f32` and `i32` tensors export, as Float32 and Int32.
//!
//! ```
//! use strideweave_core::model::{HostCarrier, Tensor};
//!
//! let t = Tensor::canonical(HostCarrier::from_f32(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), &[2, 3]).unwrap();
//! let exported = t.to_dlpack().unwrap();
//! assert_eq!(exported.dl_tensor().ndim, 2);
//! ```

use super::carrier::{BulkStorage, CarrierExt};
use super::carrier::{HookCall, HOOK};
use super::error::{ModelError, Result};
use super::tensor::Tensor;
use crate::dlpack::{
    export_legacy, export_versioned, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned, ExportDType,
    Exported, TensorDesc, FLAG_READ_ONLY,
};
use crate::storage::ElemKind;

fn refuse(reason: impl Into<String>) -> ModelError {
    ModelError::NotExportable { reason: reason.into() }
}

impl Tensor {
    fn dlpack_parts(&self) -> Result<(TensorDesc, std::sync::Arc<super::host::HostStore>, bool)> {
        let sub = self.single("DLPack export")?;
        let carrier = sub.carrier();
        carrier.state(HOOK).check_live()?;
        let dtype = match self.dtype() {
            ElemKind::F32 => ExportDType::Float32,
            ElemKind::I32 => ExportDType::Int32,
            other => return Err(refuse(format!("dtype {other:?} is not exportable (only f32 and i32)"))),
        };
        let store = match carrier.bulk_storage(&carrier.hook()) {
            Some(BulkStorage::Host(store)) => store,
            _ => return Err(refuse(format!("{} carrier is not host memory", carrier.state(HOOK).class_name()))),
        };
        let layout = sub.layout();
        let desc = TensorDesc::new(
            store.addr(),
            DLDevice { device_type: DLDeviceType::CPU, device_id: 0 },
            dtype,
            layout.leaf_extents().to_vec(),
            layout.leaf_strides().to_vec(),
            sub.offset() as u64,
        )
        .map_err(|e| refuse(e.to_string()))?;
        Ok((desc, store, carrier.is_mutable()))
    }

    /// Export as a DLPack 1.0 versioned managed tensor; an immutable tensor carries the
    /// read-only flag. Dropping the returned handle (or the consumer calling the deleter
    /// after [`Exported::into_raw`]) lets go of the storage.
    ///
    /// ```
    /// use strideweave_core::model::{HostCarrier, Tensor};
    ///
    /// let t = Tensor::canonical(HostCarrier::from_f32(&[1.5, 2.5]), &[2]).unwrap();
    /// let managed = t.to_dlpack().unwrap();
    /// let dl = managed.dl_tensor();
    /// assert_eq!(dl.ndim, 1);
    /// // SAFETY: the export describes 2 live f32 values at `data + byte_offset`.
    /// let values = unsafe { std::slice::from_raw_parts(dl.data.cast::<f32>(), 2) };
    /// assert_eq!(values, &[1.5, 2.5]);
    /// ```
    pub fn to_dlpack(&self) -> Result<Exported<DLManagedTensorVersioned>> {
        let (desc, store, mutable) = self.dlpack_parts()?;
        Ok(export_versioned(desc, if mutable { 0 } else { FLAG_READ_ONLY }, store))
    }

    /// Export as a legacy (pre-1.0) managed tensor, which has no read-only flag.
    pub fn to_dlpack_legacy(&self) -> Result<Exported<DLManagedTensor>> {
        let (desc, store, _) = self.dlpack_parts()?;
        Ok(export_legacy(desc, store))
    }
}
