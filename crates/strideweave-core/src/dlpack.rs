//! DLPack managed-tensor construction on the DLPack 1.0 ABI.
//!
//! This module builds the two structures a DLPack producer hands out — the legacy
//! `DLManagedTensor` and the versioned `DLManagedTensorVersioned` — from a plain description
//! of a strided buffer ([`TensorDesc`]) plus an opaque *owner* value. It knows nothing about
//! Python: the binding crate passes an owner whose `Drop` releases the producing Tensor.
//!
//! Memory model. Every export is one heap block (`Holder`) that starts with the managed
//! structure itself and also holds the shape array, the stride array and the owner. Up to
//! [`INLINE_RANK`] dimensions the arrays sit inside the block, so an export costs exactly one
//! allocation (the round trip through a consumer is short enough for a second `malloc`/`free`
//! pair to show); a higher rank keeps them in one extra boxed slice. The managed structure's
//! `manager_ctx` points at that block, and its deleter reconstitutes the `Box` and drops it,
//! which frees the arrays and drops the owner exactly once. The DLPack
//! contract is that whoever holds the managed tensor calls the deleter exactly once; the Rust
//! side expresses that with [`Exported`], an owning handle whose `Drop` calls the deleter
//! and whose [`Exported::into_raw`] hands the obligation to someone else (a capsule).
//!
//! ```
//! use strideweave_core::dlpack::{export_versioned, DLDevice, DLDeviceType, ExportDType, TensorDesc, FLAG_READ_ONLY};
//!
//! let data = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
//! let cpu = DLDevice { device_type: DLDeviceType::CPU, device_id: 0 };
//! let desc = TensorDesc::new(data.as_ptr() as usize, cpu, ExportDType::Float32, vec![2, 3], vec![3, 1], 0).unwrap();
//! let exported = export_versioned(desc, FLAG_READ_ONLY, ());
//! let t = exported.dl_tensor();
//! assert_eq!((t.ndim, exported.managed().flags), (2, FLAG_READ_ONLY));
//! // SAFETY: the export owns its two-entry shape array until its deleter runs.
//! let shape = unsafe { std::slice::from_raw_parts(t.shape, 2) };
//! assert_eq!(shape, &[2, 3]);
//! drop(exported); // runs the deleter once
//! ```

use std::ffi::c_void;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use thiserror::Error;

// The DLPack 1.0 ABI (`dlpack.h`), defined here so that no type of another crate appears in
// this crate's public API: the structures are `repr(C)` with the header's field order and
// widths, and the enumerations are transparent integers with the header's values as
// associated constants (a consumer may hand over a value this crate has no name for).

/// `DLPackVersion`: the protocol version a versioned managed tensor advertises.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLPackVersion {
    /// Major version; a consumer refuses a major version it does not know.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

/// `DLDeviceType`: the kind of device the data lives on (the header's `kDL…` values).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDeviceType(pub u32);

impl DLDeviceType {
    /// `kDLCPU`: host memory.
    pub const CPU: DLDeviceType = DLDeviceType(1);
    /// `kDLCUDA`: CUDA device memory.
    pub const CUDA: DLDeviceType = DLDeviceType(2);
    /// `kDLCUDAHost`: pinned host memory allocated through CUDA.
    pub const CUDA_HOST: DLDeviceType = DLDeviceType(3);
    /// `kDLOpenCL`.
    pub const OPENCL: DLDeviceType = DLDeviceType(4);
    /// `kDLVulkan`.
    pub const VULKAN: DLDeviceType = DLDeviceType(7);
    /// `kDLMetal`.
    pub const METAL: DLDeviceType = DLDeviceType(8);
    /// `kDLVPI`.
    pub const VPI: DLDeviceType = DLDeviceType(9);
    /// `kDLROCM`.
    pub const ROCM: DLDeviceType = DLDeviceType(10);
    /// `kDLROCMHost`.
    pub const ROCM_HOST: DLDeviceType = DLDeviceType(11);
    /// `kDLExtDev`: reserved for extension devices.
    pub const EXT_DEV: DLDeviceType = DLDeviceType(12);
    /// `kDLCUDAManaged`: CUDA managed (unified) memory.
    pub const CUDA_MANAGED: DLDeviceType = DLDeviceType(13);
    /// `kDLOneAPI`.
    pub const ONE_API: DLDeviceType = DLDeviceType(14);
    /// `kDLWebGPU`.
    pub const WEBGPU: DLDeviceType = DLDeviceType(15);
    /// `kDLHexagon`.
    pub const HEXAGON: DLDeviceType = DLDeviceType(16);
}

/// `DLDevice`: a device type and the device's ordinal.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDevice {
    /// The kind of device.
    pub device_type: DLDeviceType,
    /// Which device of that kind (0 for the host).
    pub device_id: i32,
}

/// `DLDataTypeCode`: the class of an element type (the header's `kDL…` values).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDataTypeCode(pub u8);

impl DLDataTypeCode {
    /// `kDLInt`: signed two's-complement integers.
    pub const INT: DLDataTypeCode = DLDataTypeCode(0);
    /// `kDLUInt`: unsigned integers.
    pub const UINT: DLDataTypeCode = DLDataTypeCode(1);
    /// `kDLFloat`: IEEE floating point.
    pub const FLOAT: DLDataTypeCode = DLDataTypeCode(2);
    /// `kDLOpaqueHandle`.
    pub const OPAQUE_HANDLE: DLDataTypeCode = DLDataTypeCode(3);
    /// `kDLBfloat`: bfloat16.
    pub const BFLOAT: DLDataTypeCode = DLDataTypeCode(4);
    /// `kDLComplex`.
    pub const COMPLEX: DLDataTypeCode = DLDataTypeCode(5);
    /// `kDLBool`.
    pub const BOOL: DLDataTypeCode = DLDataTypeCode(6);
}

/// `DLDataType`: an element type as class, bit width and lane count.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDataType {
    /// The class.
    pub code: DLDataTypeCode,
    /// Bits per lane.
    pub bits: u8,
    /// Lanes per element (1 for scalars).
    pub lanes: u16,
}

/// `DLTensor`: a strided view of memory, described by raw pointers the producer keeps
/// valid until the managed tensor's deleter runs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DLTensor {
    /// The data's base address (the element at `byte_offset` from it is the first).
    pub data: *mut c_void,
    /// Where the data lives.
    pub device: DLDevice,
    /// Number of dimensions.
    pub ndim: i32,
    /// The element type.
    pub dtype: DLDataType,
    /// `ndim` extents.
    pub shape: *mut i64,
    /// `ndim` strides in elements (null: compact row-major).
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// `DLManagedTensor`: the legacy (unversioned) managed tensor.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The tensor.
    pub dl_tensor: DLTensor,
    /// The producer's context (for this crate's exports: their heap block).
    pub manager_ctx: *mut c_void,
    /// Frees the tensor; called exactly once by its final holder.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// `DLManagedTensorVersioned`: the DLPack 1.x managed tensor, with a version and flags.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The protocol version of this structure.
    pub version: DLPackVersion,
    /// The producer's context (for this crate's exports: their heap block).
    pub manager_ctx: *mut c_void,
    /// Frees the tensor; called exactly once by its final holder.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// Bit flags ([`FLAG_READ_ONLY`], …).
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

/// The protocol version every versioned export advertises. The producer caps itself at 1.0
/// whatever ceiling the consumer offers (interop-movement: "version field is exactly major 1,
/// minor 0").
pub const EXPORT_VERSION: DLPackVersion = DLPackVersion { major: 1, minor: 0 };

/// DLPack's read-only bit of the versioned `flags` word (`DLPACK_FLAG_BITMASK_READ_ONLY`).
pub const FLAG_READ_ONLY: u64 = 1;

/// The only element types strideweave exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExportDType {
    /// IEEE binary32: DLPack float code, 32 bits, one lane.
    Float32,
    /// Two's-complement 32-bit integer: DLPack int code, 32 bits, one lane.
    Int32,
}

impl ExportDType {
    /// The logical dtype name strideweave uses for this element type.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "Float32" => Some(Self::Float32),
            "Int32" => Some(Self::Int32),
            _ => None,
        }
    }

    /// The DLPack data type descriptor.
    pub fn dl_dtype(self) -> DLDataType {
        let code = match self {
            Self::Float32 => DLDataTypeCode::FLOAT,
            Self::Int32 => DLDataTypeCode::INT,
        };
        DLDataType { code, bits: 32, lanes: 1 }
    }

    /// Bytes per element; `byte_offset` is the element offset times this.
    pub fn item_size(self) -> u64 {
        4
    }
}

/// Why a buffer description cannot become a managed tensor.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DescError {
    /// `shape` and `strides` have different lengths.
    #[error("layout has {shape} leaf extents but {strides} leaf strides")]
    RankMismatch {
        /// Number of leaf extents.
        shape: usize,
        /// Number of leaf strides.
        strides: usize,
    },
    /// More dimensions than `DLTensor::ndim` (an `i32`) can count.
    #[error("{0} dimensions exceed DLPack's ndim range")]
    TooManyDims(usize),
    /// An extent is negative.
    #[error("leaf extent {extent} of dimension {dim} is negative")]
    NegativeExtent {
        /// The dimension (leaf) index.
        dim: usize,
        /// Its extent.
        extent: i64,
    },
    /// The data pointer is null although the tensor has elements.
    #[error(
        "the carrier reports a null data pointer for a tensor with elements \
         (a DLPack data pointer must be non-null; was the carrier released?)"
    )]
    NullData,
    /// `offset * item_size` does not fit in `u64`.
    #[error("the byte offset overflows 64 bits")]
    OffsetOverflow,
}

/// A validated description of the strided buffer to export.
///
/// `shape` and `strides` are in elements, one entry per exported dimension, kept exactly as
/// given (stride zero included); `byte_offset` is already scaled by the item size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorDesc {
    data: *mut c_void,
    device: DLDevice,
    dtype: DLDataType,
    /// The shape followed by the strides (`2 * ndim` values), which the export keeps as the
    /// arrays the `DLTensor` points into.
    dims: Dims,
    byte_offset: u64,
}

impl TensorDesc {
    /// Checks a description: equal ranks, an `ndim` that fits `i32`, non-negative extents, a
    /// non-null pointer unless the tensor is empty, and a byte offset that fits `u64`.
    ///
    /// `data` is only recorded, never dereferenced, so any address is accepted here.
    pub fn new(
        data: usize,
        device: DLDevice,
        dtype: ExportDType,
        shape: Vec<i64>,
        strides: Vec<i64>,
        offset_elems: u64,
    ) -> Result<Self, DescError> {
        Self::from_modes(data, device, dtype, &shape, &strides, offset_elems)
    }

    /// [`TensorDesc::new`] from borrowed extents and strides (copied once, into one array).
    pub fn from_modes(
        data: usize,
        device: DLDevice,
        dtype: ExportDType,
        shape: &[i64],
        strides: &[i64],
        offset_elems: u64,
    ) -> Result<Self, DescError> {
        if shape.len() != strides.len() {
            return Err(DescError::RankMismatch { shape: shape.len(), strides: strides.len() });
        }
        if i32::try_from(shape.len()).is_err() {
            return Err(DescError::TooManyDims(shape.len()));
        }
        if let Some((dim, &extent)) = shape.iter().enumerate().find(|(_, &e)| e < 0) {
            return Err(DescError::NegativeExtent { dim, extent });
        }
        // A rank-0 tensor has one element; any zero extent makes it empty.
        let has_elements = shape.iter().all(|&e| e > 0);
        if data == 0 && has_elements {
            return Err(DescError::NullData);
        }
        let byte_offset = offset_elems.checked_mul(dtype.item_size()).ok_or(DescError::OffsetOverflow)?;
        let dims = Dims::new(shape, strides);
        Ok(Self { data: data as *mut c_void, device, dtype: dtype.dl_dtype(), dims, byte_offset })
    }

    /// Number of exported dimensions.
    pub fn ndim(&self) -> usize {
        self.dims.ndim()
    }
}

/// Ranks up to this keep their shape and strides inside the export's heap block.
pub const INLINE_RANK: usize = 4;

/// The shape followed by the strides: in place up to [`INLINE_RANK`] dimensions (unused
/// entries stay zero, so the derived comparisons see equal values as equal), boxed beyond.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Dims {
    Inline { ndim: usize, values: [i64; 2 * INLINE_RANK] },
    Boxed(Box<[i64]>),
}

impl Dims {
    /// `shape` and `strides` have equal lengths (checked by the caller).
    fn new(shape: &[i64], strides: &[i64]) -> Self {
        let ndim = shape.len();
        if ndim > INLINE_RANK {
            return Self::Boxed([shape, strides].concat().into_boxed_slice());
        }
        let mut values = [0; 2 * INLINE_RANK];
        values[..ndim].copy_from_slice(shape);
        values[ndim..2 * ndim].copy_from_slice(strides);
        Self::Inline { ndim, values }
    }

    fn ndim(&self) -> usize {
        match self {
            Self::Inline { ndim, .. } => *ndim,
            Self::Boxed(values) => values.len() / 2,
        }
    }

    /// The shape array followed by the stride array.
    fn values_mut(&mut self) -> &mut [i64] {
        match self {
            Self::Inline { ndim, values } => &mut values[..2 * *ndim],
            Self::Boxed(values) => values,
        }
    }
}

/// The heap block behind one export. `managed` is the first field of a `repr(C)` struct, so a
/// pointer to the block is also a pointer to the managed structure; the deleter nevertheless
/// finds the block through `manager_ctx`, the field DLPack reserves for exactly that.
#[repr(C)]
struct Holder<M, O> {
    managed: M,
    // The DLTensor's shape/strides pointers point into these values (shape, then strides),
    // which may be inside this very block: they are set once the block is on the heap, where
    // it stays until the deleter frees it.
    dims: Dims,
    _owner: O,
}

/// The two managed-tensor ABIs, so construction and deletion are written once.
pub trait ManagedAbi: Sized + 'static {
    /// The structure's deleter field.
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)>;
    /// The embedded plain `DLTensor`.
    fn dl_tensor(&self) -> &DLTensor;
    /// The embedded plain `DLTensor`, to point it at its arrays.
    fn dl_tensor_mut(&mut self) -> &mut DLTensor;
    /// The `manager_ctx` field (for an export of this crate: its heap block).
    fn manager_ctx(&self) -> *mut c_void;
    /// Sets the `manager_ctx` field.
    fn set_manager_ctx(&mut self, ctx: *mut c_void);

    /// Calls this structure's deleter, if any.
    ///
    /// # Safety
    /// `ptr` must point to a live managed tensor whose deleter has not run yet; it is dangling
    /// afterwards.
    unsafe fn delete(ptr: NonNull<Self>) {
        // SAFETY: the caller guarantees `ptr` is live and not yet deleted; reading the
        // deleter field is a plain load from that live structure.
        let deleter = unsafe { ptr.as_ref() }.deleter();
        if let Some(deleter) = deleter {
            // SAFETY: DLPack's contract: the deleter of a live managed tensor may be called
            // exactly once with a pointer to it; the caller hands us that single call.
            unsafe { deleter(ptr.as_ptr()) }
        }
    }
}

// Both structures name these three fields alike.
macro_rules! managed_abi {
    ($($managed:ty),*) => {$(
        impl ManagedAbi for $managed {
            fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
                self.deleter
            }
            fn dl_tensor(&self) -> &DLTensor {
                &self.dl_tensor
            }
            fn dl_tensor_mut(&mut self) -> &mut DLTensor {
                &mut self.dl_tensor
            }
            fn manager_ctx(&self) -> *mut c_void {
                self.manager_ctx
            }
            fn set_manager_ctx(&mut self, ctx: *mut c_void) {
                self.manager_ctx = ctx;
            }
        }
    )*};
}
managed_abi!(DLManagedTensor, DLManagedTensorVersioned);

/// An owning handle to one exported managed tensor: dropping it runs the deleter once.
///
/// The owner type `O` is erased at this point; it lives in the heap block and is dropped by the
/// deleter, on whatever thread calls it. That is why every export requires `O: Send`.
pub struct Exported<M: ManagedAbi> {
    ptr: NonNull<M>,
    _marker: PhantomData<M>,
}

impl<M: ManagedAbi> std::fmt::Debug for Exported<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exported").field("ptr", &self.ptr).finish()
    }
}

// SAFETY: the managed tensor is a heap block with no thread affinity: its shape/strides are
// plain boxed slices and its owner is `Send` (enforced by the constructors), and DLPack
// allows the deleter to run on any thread.
unsafe impl<M: ManagedAbi> Send for Exported<M> {}

impl<M: ManagedAbi> Exported<M> {
    /// The managed structure (read-only view, for inspection and tests).
    pub fn managed(&self) -> &M {
        // SAFETY: `ptr` is live until `self` is dropped or consumed by `into_raw`, and nothing
        // else mutates the block while this handle owns it.
        unsafe { self.ptr.as_ref() }
    }

    /// The embedded `DLTensor`.
    pub fn dl_tensor(&self) -> &DLTensor {
        self.managed().dl_tensor()
    }

    /// Gives up ownership: the caller now must call the managed deleter exactly once (for a
    /// capsule, its destructor or its consumer does).
    pub fn into_raw(self) -> *mut M {
        let ptr = self.ptr.as_ptr();
        std::mem::forget(self);
        ptr
    }

    /// Takes back ownership of a pointer produced by [`Exported::into_raw`].
    ///
    /// # Safety
    /// `ptr` must come from `into_raw` of the same `M`, and its deleter must not have run and
    /// must not be run by anyone else afterwards.
    pub unsafe fn from_raw(ptr: *mut M) -> Option<Self> {
        NonNull::new(ptr).map(|ptr| Self { ptr, _marker: PhantomData })
    }
}

impl<M: ManagedAbi> Drop for Exported<M> {
    fn drop(&mut self) {
        // SAFETY: this handle is the unique owner of a live managed tensor whose deleter has
        // not run (`into_raw` forgets the handle instead of dropping it).
        unsafe { M::delete(self.ptr) }
    }
}

/// The `DLTensor` of `desc`, its shape/strides pointers still null (the arrays move into the
/// heap block first), and the arrays.
fn plain_tensor(desc: TensorDesc) -> (DLTensor, Dims) {
    let tensor = DLTensor {
        data: desc.data,
        device: desc.device,
        // `TensorDesc::from_modes` checked that the rank fits i32.
        ndim: desc.dims.ndim() as i32,
        dtype: desc.dtype,
        shape: ptr::null_mut(),
        strides: ptr::null_mut(),
        byte_offset: desc.byte_offset,
    };
    (tensor, desc.dims)
}

/// The deleter of every export: frees the block behind a managed tensor and drops its owner.
unsafe extern "C" fn delete_holder<M: ManagedAbi, O: Send + 'static>(managed: *mut M) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` is a live tensor built by `leak_holder::<M, O>` (only that function's
    // callers install this deleter), so `manager_ctx` is the `Box<Holder<M, O>>` pointer it
    // leaked. DLPack guarantees a single deleter call, so the box is reconstituted exactly
    // once. Dropping it frees shape, strides and drops the owner; nothing here can unwind (an
    // owner's Drop must not panic, and a panic would abort at this extern "C" boundary).
    unsafe {
        let holder = (*managed).manager_ctx() as *mut Holder<M, O>;
        drop(Box::from_raw(holder));
    }
}

/// Moves `managed` (whose deleter is `delete_holder::<M, O>`), its arrays and `owner` into
/// one heap block, points the `DLTensor` at the arrays where they now live, and records the
/// block in `manager_ctx`. Rank 0 keeps null arrays, which DLPack allows for `ndim == 0`.
fn leak_holder<M: ManagedAbi, O: Send + 'static>(managed: M, dims: Dims, owner: O) -> Exported<M> {
    // The fields are written straight into the new block: `Box::new(Holder { .. })` builds
    // the whole block on the stack first and then copies it, a `memmove` call that cost
    // more than the allocation.
    let mut block = Box::<Holder<M, O>>::new_uninit();
    let uninit = block.as_mut_ptr();
    // SAFETY: `uninit` points to the block's uninitialized, properly aligned storage; each
    // field is written exactly once through a raw field pointer (no reference to
    // uninitialized memory is made), after which the whole struct is initialized.
    let raw = unsafe {
        ptr::addr_of_mut!((*uninit).managed).write(managed);
        ptr::addr_of_mut!((*uninit).dims).write(dims);
        ptr::addr_of_mut!((*uninit)._owner).write(owner);
        Box::into_raw(block.assume_init())
    };
    // SAFETY: `raw` is the unique pointer to the block just leaked, so this is the only
    // reference to it; the block stays where it is until the deleter frees it.
    let holder = unsafe { &mut *raw };
    let ndim = holder.dims.ndim();
    if ndim > 0 {
        let values = holder.dims.values_mut().as_mut_ptr();
        let tensor = holder.managed.dl_tensor_mut();
        tensor.shape = values;
        // SAFETY: `values` holds `2 * ndim` entries, so offset `ndim` (the first stride) is
        // in bounds of the same allocation.
        tensor.strides = unsafe { values.add(ndim) };
    }
    holder.managed.set_manager_ctx(raw.cast());
    // `managed` is the first field of the repr(C) Holder, so the addresses coincide.
    Exported {
        // SAFETY: `Box::into_raw` never returns null.
        ptr: unsafe { NonNull::new_unchecked(raw.cast::<M>()) },
        _marker: PhantomData,
    }
}

/// Builds a legacy (`dltensor`) managed tensor owning its shape/stride arrays and `owner`.
pub fn export_legacy<O: Send + 'static>(desc: TensorDesc, owner: O) -> Exported<DLManagedTensor> {
    let (dl_tensor, dims) = plain_tensor(desc);
    let managed =
        DLManagedTensor { dl_tensor, manager_ctx: ptr::null_mut(), deleter: Some(delete_holder::<DLManagedTensor, O>) };
    leak_holder(managed, dims, owner)
}

/// Builds a versioned (`dltensor_versioned`) managed tensor at version 1.0 with `flags`
/// (callers pass [`FLAG_READ_ONLY`] or 0), owning its arrays and `owner`.
pub fn export_versioned<O: Send + 'static>(
    desc: TensorDesc,
    flags: u64,
    owner: O,
) -> Exported<DLManagedTensorVersioned> {
    let (dl_tensor, dims) = plain_tensor(desc);
    let managed = DLManagedTensorVersioned {
        version: EXPORT_VERSION,
        manager_ctx: ptr::null_mut(),
        deleter: Some(delete_holder::<DLManagedTensorVersioned, O>),
        flags,
        dl_tensor,
    };
    leak_holder(managed, dims, owner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts how many times it is dropped.
    struct Probe(Arc<AtomicUsize>);
    impl Drop for Probe {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn cpu() -> DLDevice {
        DLDevice { device_type: DLDeviceType::CPU, device_id: 0 }
    }

    fn desc(shape: Vec<i64>, strides: Vec<i64>, offset: u64) -> TensorDesc {
        TensorDesc::new(0x1000, cpu(), ExportDType::Float32, shape, strides, offset).unwrap()
    }

    /// Reads the exported shape/strides back through the raw pointers, as a consumer would.
    fn dims(t: &DLTensor) -> (Vec<i64>, Vec<i64>) {
        let n = t.ndim as usize;
        if n == 0 {
            return (vec![], vec![]);
        }
        // SAFETY: the export owns `ndim` valid elements behind both pointers while alive.
        unsafe { (std::slice::from_raw_parts(t.shape, n).to_vec(), std::slice::from_raw_parts(t.strides, n).to_vec()) }
    }

    /// The structures have the header's sizes and field offsets on a 64-bit target, so a C
    /// consumer reads what this crate writes.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn abi_matches_the_dlpack_header() {
        use std::mem::{offset_of, size_of};
        assert_eq!((size_of::<DLPackVersion>(), size_of::<DLDevice>(), size_of::<DLDataType>()), (8, 8, 4));
        assert_eq!(size_of::<DLTensor>(), 48);
        assert_eq!(
            [
                offset_of!(DLTensor, device),
                offset_of!(DLTensor, ndim),
                offset_of!(DLTensor, dtype),
                offset_of!(DLTensor, shape),
                offset_of!(DLTensor, strides),
                offset_of!(DLTensor, byte_offset)
            ],
            [8, 16, 20, 24, 32, 40]
        );
        assert_eq!(offset_of!(DLDataType, bits), 1);
        assert_eq!(offset_of!(DLDataType, lanes), 2);
        assert_eq!((size_of::<DLManagedTensor>(), offset_of!(DLManagedTensor, manager_ctx)), (64, 48));
        assert_eq!(offset_of!(DLManagedTensor, deleter), 56);
        assert_eq!(size_of::<DLManagedTensorVersioned>(), 80);
        assert_eq!(
            [
                offset_of!(DLManagedTensorVersioned, manager_ctx),
                offset_of!(DLManagedTensorVersioned, deleter),
                offset_of!(DLManagedTensorVersioned, flags),
                offset_of!(DLManagedTensorVersioned, dl_tensor)
            ],
            [8, 16, 24, 32]
        );
        assert_eq!((DLDeviceType::CPU.0, DLDataTypeCode::FLOAT.0, DLDataTypeCode::INT.0, FLAG_READ_ONLY), (1, 2, 0, 1));
    }

    #[test]
    fn legacy_fields_and_single_owner_drop() {
        let drops = Arc::new(AtomicUsize::new(0));
        let exp = export_legacy(desc(vec![2, 3, 4], vec![1, 0, 6], 5), Probe(drops.clone()));
        let t = exp.dl_tensor();
        assert_eq!(t.data as usize, 0x1000);
        assert_eq!(t.ndim, 3);
        assert_eq!(dims(t), (vec![2, 3, 4], vec![1, 0, 6]));
        assert_eq!(t.byte_offset, 20);
        assert_eq!(t.dtype, DLDataType { code: DLDataTypeCode::FLOAT, bits: 32, lanes: 1 });
        assert_eq!(t.device, cpu());
        assert!(!exp.managed().manager_ctx.is_null());
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(exp);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn versioned_is_exactly_1_0_with_flags() {
        let drops = Arc::new(AtomicUsize::new(0));
        let exp = export_versioned(desc(vec![4], vec![1], 0), FLAG_READ_ONLY, Probe(drops.clone()));
        let m = exp.managed();
        assert_eq!((m.version.major, m.version.minor), (1, 0));
        assert_eq!(m.flags, FLAG_READ_ONLY);
        assert_eq!(dims(&m.dl_tensor), (vec![4], vec![1]));
        drop(exp);
        let exp = export_versioned(desc(vec![4], vec![1], 0), 0, Probe(drops.clone()));
        assert_eq!(exp.managed().flags, 0);
        drop(exp);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn int32_codes() {
        let d = TensorDesc::new(8, cpu(), ExportDType::Int32, vec![1], vec![1], 3).unwrap();
        let exp = export_legacy(d, ());
        assert_eq!(exp.dl_tensor().dtype, DLDataType { code: DLDataTypeCode::INT, bits: 32, lanes: 1 });
        assert_eq!(exp.dl_tensor().byte_offset, 12);
        assert_eq!(ExportDType::from_name("Int32"), Some(ExportDType::Int32));
        assert_eq!(ExportDType::from_name("Float32"), Some(ExportDType::Float32));
        assert_eq!(ExportDType::from_name("Bool"), None);
    }

    #[test]
    fn raw_round_trip_runs_deleter_through_the_c_pointer() {
        let drops = Arc::new(AtomicUsize::new(0));
        let raw = export_versioned(desc(vec![2], vec![1], 0), 0, Probe(drops.clone())).into_raw();
        assert_eq!(drops.load(Ordering::SeqCst), 0, "into_raw must not run the deleter");
        // Call the deleter the way a C consumer does: through the struct's function pointer.
        // SAFETY: `raw` is live and this is its only deleter call.
        unsafe { ((*raw).deleter.unwrap())(raw) };
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn from_raw_takes_back_ownership() {
        let drops = Arc::new(AtomicUsize::new(0));
        let raw = export_legacy(desc(vec![2], vec![1], 0), Probe(drops.clone())).into_raw();
        // SAFETY: `raw` came from into_raw and nobody else deletes it.
        let back = unsafe { Exported::from_raw(raw) }.unwrap();
        assert_eq!(back.dl_tensor().ndim, 1);
        drop(back);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        // SAFETY: null is always accepted and yields None.
        assert!(unsafe { Exported::<DLManagedTensor>::from_raw(ptr::null_mut()) }.is_none());
    }

    #[test]
    fn deleter_may_run_on_another_thread() {
        let drops = Arc::new(AtomicUsize::new(0));
        let exp = export_legacy(desc(vec![3], vec![1], 0), Probe(drops.clone()));
        std::thread::spawn(move || drop(exp)).join().unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn rank_zero_uses_null_arrays() {
        let exp = export_legacy(desc(vec![], vec![], 0), ());
        let t = exp.dl_tensor();
        assert_eq!(t.ndim, 0);
        assert!(t.shape.is_null() && t.strides.is_null());
    }

    #[test]
    fn low_ranks_keep_their_arrays_in_the_block() {
        // One allocation per export: the arrays sit inside the block `manager_ctx` names.
        let exp = export_versioned(desc(vec![2, 3, 4], vec![1, 0, 6], 0), 0, ());
        let block = exp.managed().manager_ctx as usize;
        let size = std::mem::size_of::<Holder<DLManagedTensorVersioned, ()>>();
        let shape = exp.dl_tensor().shape as usize;
        assert!(shape > block && shape < block + size);
        assert_eq!(dims(exp.dl_tensor()), (vec![2, 3, 4], vec![1, 0, 6]));
    }

    #[test]
    fn every_rank_round_trips_inline_and_boxed() {
        for ndim in [1, INLINE_RANK - 1, INLINE_RANK, INLINE_RANK + 1, 3 * INLINE_RANK] {
            let shape: Vec<i64> = (1..=ndim as i64).collect();
            let strides: Vec<i64> = shape.iter().map(|e| e * 10).collect();
            let d = desc(shape.clone(), strides.clone(), 0);
            assert_eq!(d.ndim(), ndim);
            assert_eq!(d, desc(shape.clone(), strides.clone(), 0));
            let exp = export_legacy(d, ());
            assert_eq!(exp.dl_tensor().ndim as usize, ndim);
            assert_eq!(dims(exp.dl_tensor()), (shape.clone(), strides.clone()));
            let exp = export_versioned(desc(shape.clone(), strides.clone(), 0), 0, ());
            assert_eq!(dims(exp.dl_tensor()), (shape, strides));
        }
    }

    #[test]
    fn arrays_are_distinct_per_export() {
        // Two exports of the same description must not share shape storage, or one deleter
        // would free the other's arrays.
        let a = export_legacy(desc(vec![2, 2], vec![1, 2], 0), ());
        let b = export_legacy(desc(vec![2, 2], vec![1, 2], 0), ());
        assert_ne!(a.dl_tensor().shape, b.dl_tensor().shape);
        assert_ne!(a.dl_tensor().strides, b.dl_tensor().strides);
    }

    #[test]
    fn description_checks() {
        let e = TensorDesc::new(8, cpu(), ExportDType::Float32, vec![2], vec![1, 1], 0);
        assert_eq!(e.unwrap_err(), DescError::RankMismatch { shape: 1, strides: 2 });
        let e = TensorDesc::new(8, cpu(), ExportDType::Float32, vec![2, -1], vec![1, 1], 0);
        assert_eq!(e.unwrap_err(), DescError::NegativeExtent { dim: 1, extent: -1 });
        let e = TensorDesc::new(0, cpu(), ExportDType::Float32, vec![2], vec![1], 0);
        assert_eq!(e.unwrap_err(), DescError::NullData);
        // Rank 0 has one element, so a null pointer is refused there too.
        let e = TensorDesc::new(0, cpu(), ExportDType::Float32, vec![], vec![], 0);
        assert_eq!(e.unwrap_err(), DescError::NullData);
        // An empty tensor may have a null pointer.
        assert!(TensorDesc::new(0, cpu(), ExportDType::Float32, vec![0, 3], vec![1, 0], 0).is_ok());
        let e = TensorDesc::new(8, cpu(), ExportDType::Float32, vec![1], vec![1], u64::MAX / 2);
        assert_eq!(e.unwrap_err(), DescError::OffsetOverflow);
        assert!(DescError::NullData.to_string().contains("null"));
    }

    #[test]
    fn foreign_device_is_kept_verbatim() {
        let dev = DLDevice { device_type: DLDeviceType(12), device_id: 7 };
        let d = TensorDesc::new(8, dev, ExportDType::Float32, vec![1], vec![1], 0).unwrap();
        let exp = export_versioned(d, 0, ());
        assert_eq!(exp.dl_tensor().device, dev);
    }
}
