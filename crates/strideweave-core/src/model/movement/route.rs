//! Route lookup for the built-in exact carrier pairs, and the transfers they run.
//!
//! Routes match the exact class pair by identity (see [`ClassKey`]); nothing is inherited:
//!
//! | source → destination | transfer |
//! | --- | --- |
//! | `HostCarrier` → `FileCarrier` | bulk span: the `cosize` slots from the offset, holes included |
//! | `FileCarrier` → `HostCarrier` | bulk span, as above |
//! | `HostCarrier` → `HostCarrier` | the elementwise copy as one layout gather (`copy.rs`) |
//! | `HostCarrier` ↔ `BlockCarrier` | bulk span through the device's aligned I/O |
//! | any other pair with a `BlockCarrier` | refused: [`ModelError::NoRoute`] |
//! | any other pair | elementwise: `dst[layout(k)] = src[offset + layout(k)]` through the slot hooks |
//!
//! A resolved route holds its storages by `Arc`, so the bytes stay valid for the transfer
//! however the carriers' handles change meanwhile.
//!
//! ```
//! use strideweave_core::model::{route_kind, ClassKey, FileCarrier, HostCarrier, RouteKind};
//!
//! let (host, file) = (ClassKey::of::<HostCarrier>(), ClassKey::of::<FileCarrier>());
//! assert_eq!(route_kind(host, file), RouteKind::HostToFile);
//! assert_eq!(route_kind(ClassKey::Foreign(7), host), RouteKind::Elementwise);
//! ```

use crate::model::carrier::HOOK;
use std::sync::Arc;

#[cfg(feature = "block-devices")]
use super::super::block::BlockCarrier;
use super::super::carrier::{BulkStorage, Carrier, ClassKey};
use super::super::error::{ModelError, Result};
use super::super::file::FileCarrier;
use super::super::host::{HostCarrier, HostStore};
use crate::copy;
use crate::layout::Layout;
#[cfg(feature = "block-devices")]
use crate::storage::block::{BlockDevice, Extent};
use crate::storage::FileStore;

/// Which built-in transfer a move runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteKind {
    /// Host memory to a file: one span of the layout's cosize.
    HostToFile,
    /// A file to host memory: one span of the layout's cosize.
    FileToHost,
    /// Host memory to host memory: one layout gather.
    HostToHost,
    /// Host memory to a block device extent: one span.
    HostToBlock,
    /// A block device extent to host memory: one span.
    BlockToHost,
    /// Slot by slot through the carriers' hooks (foreign pairs).
    Elementwise,
    /// No transfer exists for the pair; the move is refused.
    Unsupported,
}

/// A transfer ready to run: its kind and the storages it holds.
pub(crate) enum Route {
    HostToFile(Arc<HostStore>, Arc<FileStore>),
    FileToHost(Arc<FileStore>, Arc<HostStore>),
    HostToHost(Arc<HostStore>, Arc<HostStore>),
    #[cfg(feature = "block-devices")]
    HostToBlock(Arc<HostStore>, Arc<BlockDevice>, Extent),
    #[cfg(feature = "block-devices")]
    BlockToHost(Arc<BlockDevice>, Extent, Arc<HostStore>),
    Elementwise,
}

/// The route kind for an exact class pair.
pub fn route_kind(source: ClassKey, destination: ClassKey) -> RouteKind {
    let host = ClassKey::of::<HostCarrier>();
    let file = ClassKey::of::<FileCarrier>();
    #[cfg(feature = "block-devices")]
    {
        let block = ClassKey::of::<BlockCarrier>();
        match (source, destination) {
            (s, d) if s == host && d == block => return RouteKind::HostToBlock,
            (s, d) if s == block && d == host => return RouteKind::BlockToHost,
            (s, d) if s == block || d == block => return RouteKind::Unsupported,
            _ => {}
        }
    }
    match (source, destination) {
        (s, d) if s == host && d == file => RouteKind::HostToFile,
        (s, d) if s == file && d == host => RouteKind::FileToHost,
        (s, d) if s == host && d == host => RouteKind::HostToHost,
        _ => RouteKind::Elementwise,
    }
}

/// Resolve the route for a claimed pair, capturing the storages. A carrier that claims a
/// built-in class but exposes no matching storage, or two carriers sharing one host store,
/// get the elementwise transfer, which is correct for any pair.
pub(crate) fn resolve(src: &dyn Carrier, dst: &dyn Carrier) -> Route {
    let kind = route_kind(src.class_key(), dst.class_key());
    match (kind, src.bulk_storage(HOOK), dst.bulk_storage(HOOK)) {
        (RouteKind::HostToFile, Some(BulkStorage::Host(s)), Some(BulkStorage::File(d))) => Route::HostToFile(s, d),
        (RouteKind::FileToHost, Some(BulkStorage::File(s)), Some(BulkStorage::Host(d))) => Route::FileToHost(s, d),
        (RouteKind::HostToHost, Some(BulkStorage::Host(s)), Some(BulkStorage::Host(d))) if !Arc::ptr_eq(&s, &d) => {
            Route::HostToHost(s, d)
        }
        #[cfg(feature = "block-devices")]
        (RouteKind::HostToBlock, Some(BulkStorage::Host(s)), Some(BulkStorage::Block(dev, e))) => {
            Route::HostToBlock(s, dev, e)
        }
        #[cfg(feature = "block-devices")]
        (RouteKind::BlockToHost, Some(BulkStorage::Block(dev, e)), Some(BulkStorage::Host(d))) => {
            Route::BlockToHost(dev, e, d)
        }
        _ => Route::Elementwise,
    }
}

impl Route {
    pub(crate) fn kind(&self) -> RouteKind {
        match self {
            Route::HostToFile(..) => RouteKind::HostToFile,
            Route::FileToHost(..) => RouteKind::FileToHost,
            Route::HostToHost(..) => RouteKind::HostToHost,
            #[cfg(feature = "block-devices")]
            Route::HostToBlock(..) => RouteKind::HostToBlock,
            #[cfg(feature = "block-devices")]
            Route::BlockToHost(..) => RouteKind::BlockToHost,
            Route::Elementwise => RouteKind::Elementwise,
        }
    }
}

/// What one transfer copies: the source window and the destination (offset 0, same layout).
pub(crate) struct Job<'a> {
    pub src: &'a dyn Carrier,
    pub dst: &'a dyn Carrier,
    pub offset: usize,
    pub layout: &'a Layout,
    pub elem_size: usize,
}

/// `[start, end)` in bytes of `slots` slots from slot `first`, checked against `len`.
fn byte_span(first: usize, slots: usize, elem_size: usize, len: usize) -> Result<(usize, usize)> {
    let start = first.checked_mul(elem_size);
    let end = first.checked_add(slots).and_then(|e| e.checked_mul(elem_size));
    match (start, end) {
        (Some(s), Some(e)) if e <= len => Ok((s, e)),
        _ => Err(ModelError::WindowOutOfRange { offset: first, cosize: slots, size: len / elem_size }),
    }
}

/// Run the transfer. The caller holds both claims, so neither carrier is released or
/// written by anyone else meanwhile; the storages' own locks make the byte access sound.
pub(crate) fn execute(route: &Route, job: &Job<'_>) -> Result<()> {
    let cosize = job.layout.cosize() as usize;
    let es = job.elem_size;
    match route {
        Route::HostToFile(src, dst) => {
            let (start, end) = byte_span(job.offset, cosize, es, src.len_bytes())?;
            let buf = src.read();
            copy::file_write_from_host(dst.file(), 0, &buf.as_slice()[start..end])
                .map_err(|e| ModelError::io("writing the span to the destination file", e))
        }
        Route::FileToHost(src, dst) => {
            let (_, end) = byte_span(0, cosize, es, dst.len_bytes())?;
            let mut buf = dst.write();
            copy::file_read_into_host(src.file(), (job.offset * es) as u64, &mut buf.as_mut_slice()[..end])
                .map_err(|e| ModelError::io("reading the span from the source file", e))
        }
        #[cfg(feature = "block-devices")]
        Route::HostToBlock(src, dev, extent) => {
            let (start, end) = byte_span(job.offset, cosize, es, src.len_bytes())?;
            let buf = src.read();
            dev.write(extent.offset, &buf.as_slice()[start..end])
                .map_err(|e| ModelError::Device { context: "writing the span to the device", message: e.to_string() })
        }
        #[cfg(feature = "block-devices")]
        Route::BlockToHost(dev, extent, dst) => {
            let (_, end) = byte_span(0, cosize, es, dst.len_bytes())?;
            let mut buf = dst.write();
            dev.read(extent.offset + (job.offset * es) as u64, &mut buf.as_mut_slice()[..end])
                .map_err(|e| ModelError::Device { context: "reading the span from the device", message: e.to_string() })
        }
        Route::HostToHost(src, dst) => {
            byte_span(job.offset, cosize, es, src.len_bytes())?;
            byte_span(0, cosize, es, dst.len_bytes())?;
            let from = src.read();
            let mut to = dst.write();
            // SAFETY: every addressed slot is below cosize (layout invariant), so the source
            // slots lie in [offset, offset + cosize) and the destination slots in
            // [0, cosize), both checked against the buffers above; the buffers are distinct
            // allocations (resolve refuses one store on both sides), so they cannot overlap;
            // the read guard and the write guard exclude every other writer for the call.
            unsafe {
                copy::copy_layout_elements(
                    from.as_ptr(),
                    job.offset as i64,
                    to.as_mut_slice().as_mut_ptr(),
                    0,
                    job.layout.leaf_extents(),
                    job.layout.leaf_strides(),
                    es,
                )
            }
            .map_err(ModelError::from)
        }
        Route::Elementwise => {
            let (src_size, dst_size) = (job.src.size(), job.dst.size());
            byte_span(job.offset, cosize, 1, src_size)?;
            byte_span(0, cosize, 1, dst_size)?;
            for k in 0..job.layout.size() {
                let index = job.layout.index_of_int(k) as usize;
                let v = job.src.read_slot(HOOK, job.offset + index)?;
                job.dst.write_slot(HOOK, index, v)?;
            }
            Ok(())
        }
    }
}
