//! `BlockCarrier`: `f32` slots in one extent of a raw block device ([`BlockDevice`]).
//!
//! The device does its own locking, alignment and read-modify-write of partial blocks, so
//! slot access and transfers share it by `Arc`. Only host carriers move to or from a block
//! carrier (in bulk); every other pair is refused with [`ModelError::NoRoute`] after
//! validation and before any effect, as the specification decides for BlockDeviceCarrier.
//!
//! On a real device (a loop device, say; needs the rights to open it):
//!
//! ```no_run
//! use std::sync::Arc;
//! use strideweave_core::model::{move_tensor, BlockCarrier, HostCarrier, Tensor};
//! use strideweave_core::storage::block::BlockDevice;
//!
//! let dev = Arc::new(BlockDevice::open("/dev/loop0").unwrap());
//! let t = Tensor::canonical(HostCarrier::from_f32(&[1.0, 2.0]), &[2]).unwrap();
//! let on_device = move_tensor(&t, BlockCarrier::empty(&dev)).unwrap();
//! assert_eq!(on_device.get::<f32>(1).unwrap(), 2.0);
//! ```

use super::carrier::{admitted, HookCall, HookToken};
use std::sync::Arc;

use parking_lot::RwLock;

use super::carrier::{BulkStorage, Carrier};
use super::error::{ModelError, Result};
use super::state::CarrierState;
use crate::storage::block::{BlockDevice, BlockError, Extent};
use crate::storage::{ElemKind, Scalar};

const SLOT: u64 = 4;

fn device_err(context: &'static str) -> impl FnOnce(BlockError) -> ModelError {
    move |e| ModelError::Device { context, message: e.to_string() }
}

/// A carrier whose `f32` slots are one extent of a block device. Releasing it frees the
/// extent; an empty block carrier can allocate one.
///
/// ```no_run
/// use std::sync::Arc;
/// use strideweave_core::model::{BlockCarrier, CarrierExt};
/// use strideweave_core::storage::block::BlockDevice;
/// use strideweave_core::storage::Scalar;
///
/// let dev = Arc::new(BlockDevice::open("/dev/loop0").unwrap());
/// let c = BlockCarrier::zeros(&dev, 1024).unwrap();
/// c.set(0, Scalar::F32(1.0)).unwrap();
/// c.release().unwrap(); // the extent is free again
/// ```
#[derive(Debug)]
pub struct BlockCarrier {
    state: CarrierState,
    dev: Arc<BlockDevice>,
    /// The live extent and its slot count; `None` when empty or released.
    extent: RwLock<Option<(Extent, usize)>>,
}

impl BlockCarrier {
    /// An empty carrier on `dev` (it allocates when a move fills it).
    pub fn empty(dev: &Arc<BlockDevice>) -> Arc<Self> {
        Arc::new(BlockCarrier { state: CarrierState::new("BlockCarrier"), dev: dev.clone(), extent: RwLock::new(None) })
    }

    /// `slots` zeroed slots in a fresh extent of `dev`.
    pub fn zeros(dev: &Arc<BlockDevice>, slots: usize) -> Result<Arc<Self>> {
        let c = Self::empty(dev);
        c.allocate(&c.hook(), slots)?;
        Ok(c)
    }

    /// The extent holding the slots, if any.
    pub fn extent(&self) -> Option<Extent> {
        self.extent.read().map(|(e, _)| e)
    }

    fn live_offset(&self) -> Result<u64> {
        self.extent().map(|e| e.offset).ok_or_else(|| ModelError::Released { carrier: "BlockCarrier".into() })
    }
}

impl Carrier for BlockCarrier {
    fn state(&self, _: &HookToken) -> &CarrierState {
        &self.state
    }

    fn elem_kind(&self) -> ElemKind {
        ElemKind::F32
    }

    fn size(&self) -> usize {
        self.extent.read().map_or(0, |(_, slots)| slots)
    }

    fn read_slot(&self, token: &HookToken, i: usize) -> Result<Scalar> {
        admitted(token, &self.state)?;
        let base = self.live_offset()?;
        self.dev.read_f32(base + i as u64 * SLOT).map(Scalar::F32).map_err(device_err("reading a slot"))
    }

    fn write_slot(&self, token: &HookToken, i: usize, v: Scalar) -> Result<()> {
        admitted(token, &self.state)?;
        let Scalar::F32(x) = v else {
            return Err(ModelError::ValueKind { value: v, kind: ElemKind::F32 });
        };
        let base = self.live_offset()?;
        self.dev.write_f32(base + i as u64 * SLOT, x).map_err(device_err("writing a slot"))
    }

    fn is_mutable_hook(&self) -> bool {
        true
    }

    fn bulk_storage(&self, token: &HookToken) -> Option<BulkStorage> {
        if !token.admits(&self.state) {
            return None;
        }
        self.extent().map(|e| BulkStorage::Block(self.dev.clone(), e))
    }

    fn release_storage(&self, token: &HookToken) {
        if !token.admits(&self.state) {
            return;
        }
        if let Some((extent, _)) = self.extent.write().take() {
            // A transfer still holding the device may finish its I/O first; freeing only
            // returns the range to the allocator. A failure means the extent was not live.
            let _ = self.dev.free(extent);
        }
    }

    fn can_allocate(&self) -> bool {
        true
    }

    /// Replace the extent by a zeroed one of `slots` slots (0 frees it).
    fn allocate(&self, token: &HookToken, slots: usize) -> Result<()> {
        admitted(token, &self.state)?;
        let bytes = (slots as u64).checked_mul(SLOT).ok_or(ModelError::OutOfMemory { bytes: usize::MAX })?;
        let mut extent = self.extent.write();
        let fresh = if slots == 0 {
            None
        } else {
            Some((self.dev.allocate(bytes, true).map_err(device_err("allocating an extent"))?, slots))
        };
        if let Some((old, _)) = std::mem::replace(&mut *extent, fresh) {
            let _ = self.dev.free(old);
        }
        Ok(())
    }
}
