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

use std::sync::Arc;

#[cfg(feature = "block-devices")]
use super::super::block::BlockCarrier;
use super::super::carrier::{BulkStorage, Carrier, ClaimedHost, ClassKey, HookCall};
use super::super::error::{ModelError, Result};
use super::super::file::FileCarrier;
use super::super::host::{HostCarrier, HostStore};
use crate::copy;
use crate::layout::{plan, Layout};
#[cfg(feature = "block-devices")]
use crate::storage::block::{BlockDevice, Extent};
use crate::storage::FileStore;
use crate::transfer::{Endpoint, LayoutCopy, Progress, SpanCopy};

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
    HostToFile(HostSide, Arc<FileStore>),
    FileToHost(Arc<FileStore>, HostSide),
    HostToHost(HostSide, HostSide),
    #[cfg(feature = "block-devices")]
    HostToBlock(Arc<HostStore>, Arc<BlockDevice>, Extent),
    #[cfg(feature = "block-devices")]
    BlockToHost(Arc<BlockDevice>, Extent, Arc<HostStore>),
    Elementwise,
}

/// Host memory on one side of a transfer: behind its store's lock (this model's
/// [`HostCarrier`]), or guarded by the move's claim ([`ClaimedHost`], a binding's carrier).
pub(crate) enum HostSide {
    Locked(Arc<HostStore>),
    Claimed(ClaimedHost),
}

impl HostSide {
    fn of(storage: BulkStorage) -> Option<Self> {
        match storage {
            BulkStorage::Host(store) => Some(HostSide::Locked(store)),
            BulkStorage::ClaimedHost(claimed) => Some(HostSide::Claimed(claimed)),
            _ => None,
        }
    }

    fn len_bytes(&self) -> usize {
        match self {
            HostSide::Locked(store) => store.len_bytes(),
            HostSide::Claimed(claimed) => claimed.buffer().len(),
        }
    }

    /// Whether both sides are the same memory (a transfer needs two).
    fn same(&self, other: &HostSide) -> bool {
        let addr = |side: &HostSide| match side {
            HostSide::Locked(store) => store.addr(),
            HostSide::Claimed(claimed) => claimed.buffer().as_ptr() as usize,
        };
        addr(self) == addr(other)
    }

    /// `f` over the bytes `[start, end)` (checked against the length by the caller), read.
    fn read<R>(&self, start: usize, end: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            HostSide::Locked(store) => f(&store.read().as_slice()[start..end]),
            HostSide::Claimed(claimed) => {
                let buffer = claimed.buffer();
                assert!(start <= end && end <= buffer.len(), "span checked against the buffer");
                // SAFETY: the range is inside the buffer, which the `Arc` keeps allocated; the
                // move claims its carrier, so by `ClaimedHost::new`'s contract nobody writes
                // these bytes while the slice lives.
                f(unsafe { std::slice::from_raw_parts(buffer.as_ptr().add(start), end - start) })
            }
        }
    }

    /// `f` over the bytes `[start, end)` (checked by the caller), written.
    fn write<R>(&self, start: usize, end: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        match self {
            HostSide::Locked(store) => f(&mut store.write().as_mut_slice()[start..end]),
            HostSide::Claimed(claimed) => {
                let buffer = claimed.buffer();
                assert!(start <= end && end <= buffer.len(), "span checked against the buffer");
                // SAFETY: the range is inside the buffer, which the `Arc` keeps allocated; the
                // move claims its carrier, so by `ClaimedHost::new`'s contract this transfer is
                // the only writer while the slice lives (a reader may see a partial value, as
                // that contract allows).
                f(unsafe { std::slice::from_raw_parts_mut(buffer.as_ptr().add(start), end - start) })
            }
        }
    }
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

/// Resolve the route of kind `kind` for a claimed pair, capturing the storages: the kind of
/// the classes' identities ([`route_kind`]) or one a binding decided for the pair of its
/// classes. A carrier that exposes no storage matching the kind, or two carriers sharing one
/// host buffer, get the elementwise transfer, which is correct for any pair.
pub(crate) fn resolve_as(kind: RouteKind, src: &dyn Carrier, dst: &dyn Carrier) -> Route {
    match (kind, src.bulk_storage(&src.hook()), dst.bulk_storage(&dst.hook())) {
        (RouteKind::HostToFile, Some(s), Some(BulkStorage::File(d))) => match HostSide::of(s) {
            Some(s) => Route::HostToFile(s, d),
            None => Route::Elementwise,
        },
        (RouteKind::FileToHost, Some(BulkStorage::File(s)), Some(d)) => match HostSide::of(d) {
            Some(d) => Route::FileToHost(s, d),
            None => Route::Elementwise,
        },
        (RouteKind::HostToHost, Some(s), Some(d)) => match (HostSide::of(s), HostSide::of(d)) {
            (Some(s), Some(d)) if !s.same(&d) => Route::HostToHost(s, d),
            _ => Route::Elementwise,
        },
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
    /// Where a bulk transfer of claimed host memory counts its bytes.
    pub progress: Option<&'a Arc<Progress>>,
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

/// The cosize span from the job's offset in `src` to slot 0 of `dst`, by the core's span copy
/// (pieces, progress), for host memory its carrier's claims guard.
fn claimed_span(job: &Job<'_>, src: Endpoint, dst: Endpoint) -> Result<()> {
    let cosize = job.layout.cosize() as u64;
    let span = SpanCopy::new(src, job.offset as u64, dst, 0, cosize, job.elem_size)?;
    Ok(span.run(job.progress)?)
}

/// Run the transfer. The caller holds both claims, so neither carrier is released or
/// written by anyone else meanwhile; the storages' own locks make the byte access sound.
pub(crate) fn execute(route: &Route, job: &Job<'_>) -> Result<()> {
    let cosize = job.layout.cosize() as usize;
    let es = job.elem_size;
    match route {
        Route::HostToFile(HostSide::Claimed(src), dst) => {
            claimed_span(job, Endpoint::Host(src.clone()), Endpoint::File(dst.clone()))
        }
        Route::FileToHost(src, HostSide::Claimed(dst)) => {
            claimed_span(job, Endpoint::File(src.clone()), Endpoint::Host(dst.clone()))
        }
        Route::HostToHost(HostSide::Claimed(src), HostSide::Claimed(dst)) => {
            // Borrowed: the route holds both buffers for as long as the copy runs.
            let copy = LayoutCopy::new(
                src,
                job.offset as i64,
                dst,
                0,
                job.layout.leaf_extents(),
                job.layout.leaf_strides(),
                es,
            )?;
            Ok(copy.run(job.progress)?)
        }
        Route::HostToFile(src, dst) => {
            let (start, end) = byte_span(job.offset, cosize, es, src.len_bytes())?;
            src.read(start, end, |bytes| copy::file_write_from_host(dst.file(), 0, bytes))
                .map_err(|e| ModelError::io("writing the span to the destination file", e))
        }
        Route::FileToHost(src, dst) => {
            let (_, end) = byte_span(0, cosize, es, dst.len_bytes())?;
            dst.write(0, end, |bytes| copy::file_read_into_host(src.file(), (job.offset * es) as u64, bytes))
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
            let (start, end) = byte_span(job.offset, cosize, es, src.len_bytes())?;
            byte_span(0, cosize, es, dst.len_bytes())?;
            let leaves = (job.layout.leaf_extents(), job.layout.leaf_strides());
            src.read(start, end, |from| {
                dst.write(0, end - start, |to| {
                    // A dense layout (the bulk of moves) is one span: a plain copy, no plan.
                    if let Some(run) = plan::single_run(leaves.0, leaves.1) {
                        let n = run * es;
                        to[..n].copy_from_slice(&from[..n]);
                        return Ok(());
                    }
                    // SAFETY: every addressed slot is below cosize (layout invariant), so the
                    // source slots lie in `from` (the span [offset, offset + cosize)) and the
                    // destination slots in `to` ([0, cosize)), both checked against their
                    // buffers above; the two are distinct memory (`resolve` refuses one buffer
                    // on both sides), so they cannot overlap.
                    unsafe {
                        copy::copy_layout_elements(
                            from.as_ptr(),
                            0,
                            to.as_mut_ptr(),
                            0,
                            job.layout.leaf_extents(),
                            job.layout.leaf_strides(),
                            es,
                        )
                    }
                })
            })
            .map_err(ModelError::from)
        }
        Route::Elementwise => {
            let (src_size, dst_size) = (job.src.size(), job.dst.size());
            byte_span(job.offset, cosize, 1, src_size)?;
            byte_span(0, cosize, 1, dst_size)?;
            for k in 0..job.layout.size() {
                let index = job.layout.index_of_int(k) as usize;
                let v = job.src.read_slot(&job.src.hook(), job.offset + index)?;
                job.dst.write_slot(&job.dst.hook(), index, v)?;
            }
            Ok(())
        }
    }
}
