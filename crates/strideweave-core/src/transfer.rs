//! Bulk transfers between host memory and files, checked once and then run without further
//! checks: a span of slots ([`SpanCopy`]) and every slot a flattened layout addresses
//! ([`LayoutCopy`]), with the progress a waiting caller reads ([`Progress`]).
//!
//! The moves of the object model run these for carriers whose host memory is guarded by their
//! claims ([`ClaimedHost`]), and the Python binding's storage-to-storage entry points run them
//! directly. A transfer holds its storages by `Arc` for its whole run, so a concurrent release
//! of a carrier only drops the carrier's own reference: a running copy never touches freed
//! memory or a closed descriptor. Who may copy what, and when, is the claims' business
//! ([`ClaimedHost::new`]'s contract); this module only checks ranges.
//!
//! Large spans into host memory are copied in pieces spread over idle copy threads
//! ([`engine::pieces`]), so another core faults in and fills part of
//! the destination meanwhile; a span into a file stays on one thread, since its writes take the
//! file's inode lock one at a time. [`SpanCopy::run_alone`] keeps a span on its own thread:
//! for a prefetch that overlaps the caller's compute, which the other cores are running.
//!
//! ```
//! use std::sync::Arc;
//! use strideweave_core::model::ClaimedHost;
//! use strideweave_core::storage::HostBuffer;
//! use strideweave_core::transfer::{Endpoint, Progress, SpanCopy};
//!
//! let mut src = HostBuffer::new(16, true).unwrap();
//! src.write_mut(0, &[7; 16]).unwrap();
//! let dst = Arc::new(HostBuffer::new(16, true).unwrap());
//! // SAFETY: nothing else reads or writes either buffer while the copy runs.
//! let (from, into) = unsafe { (ClaimedHost::new(Arc::new(src)), ClaimedHost::new(dst.clone())) };
//! let copy = SpanCopy::new(Endpoint::Host(from), 1, Endpoint::Host(into), 0, 3, 4).unwrap();
//! let progress = Arc::new(Progress::new(0));
//! copy.run(Some(&progress)).unwrap();
//! assert_eq!((progress.done(), progress.total()), (12, 12));
//! let mut out = [0u8; 16];
//! dst.read(0, &mut out).unwrap();
//! assert_eq!(out, [7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 0, 0, 0, 0]);
//! ```

use std::borrow::Cow;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::copy;
use crate::engine;
use crate::layout::plan;
use crate::model::ClaimedHost;
use crate::storage::FileStore;

/// Bytes done and in total of one transfer, updated by the transfer after every chunk and
/// read by any thread.
#[derive(Debug, Default)]
pub struct Progress {
    done: AtomicU64,
    total: AtomicU64,
}

impl Progress {
    /// Nothing done yet of `total` bytes.
    pub fn new(total: u64) -> Self {
        Progress { done: AtomicU64::new(0), total: AtomicU64::new(total) }
    }

    /// Bytes done so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// The transfer's size in bytes.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Set both figures (`done` is capped at `total`).
    pub fn set(&self, done: u64, total: u64) {
        self.total.store(total, Ordering::Relaxed);
        self.done.store(done.min(total), Ordering::Relaxed);
    }

    /// Done equals total (a committed transfer).
    pub fn complete(&self) {
        self.done.store(self.total(), Ordering::Relaxed);
    }

    fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }
}

/// A transfer that cannot run, or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransferError {
    /// A span or a layout reaches outside a storage, or two spans of one storage overlap.
    #[error("{0}")]
    Range(String),
    /// The operating system refused the I/O.
    #[error("{context}: {source}")]
    Io {
        /// What the transfer was doing, in words.
        context: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The layout copy refused a layout its constructor had accepted (a defect).
    #[error("{0}")]
    Unchecked(String),
}

/// Chunks of this size are the unit of progress (the positioned-I/O chunk).
const PROGRESS_CHUNK: usize = copy::IO_CHUNK;

/// Spans into host memory from this size on are copied in [`PIECE`]s over idle copy threads.
const SPLIT_MIN: u64 = 2 * PROGRESS_CHUNK as u64;

/// The pieces of a split span: small enough that a helper which starts late, or is
/// preempted, holds up the end of the copy by little; large enough that claiming one costs
/// nothing next to copying it.
const PIECE: u64 = 2 << 20;

/// The copy of one piece of a split span.
type PieceCopy = Box<dyn Fn(usize) -> Result<(), TransferError> + Send + Sync>;

/// A span copy prepared to run alone, its pieces offered to waiting threads
/// ([`SpanCopy::offer_alone`]); dropped without [`run`](Self::run), the offer is withdrawn.
#[derive(Debug)]
pub struct AloneCopy(Alone);

#[derive(Debug)]
enum Alone {
    Offered(engine::OfferedPieces<TransferError, PieceCopy>),
    Whole(SpanCopy, Option<Arc<Progress>>),
}

impl AloneCopy {
    /// Copies what no waiting thread has taken, waits for what they are copying, and returns
    /// the first failure (of the lowest piece) if any.
    pub fn run(self) -> Result<(), TransferError> {
        match self.0 {
            Alone::Offered(pieces) => pieces.run(),
            Alone::Whole(span, progress) => span.run_whole(progress.as_ref()),
        }
    }
}

/// One side of a transfer: host memory its carrier's claim guards, or a file.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Endpoint {
    /// Host memory (see [`ClaimedHost`]).
    Host(ClaimedHost),
    /// A file of native-endian slots.
    File(Arc<FileStore>),
}

impl Endpoint {
    fn same_storage(&self, other: &Endpoint) -> bool {
        match (self, other) {
            (Endpoint::Host(a), Endpoint::Host(b)) => Arc::ptr_eq(a.buffer(), b.buffer()),
            (Endpoint::File(a), Endpoint::File(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    fn len_bytes(&self, name: &str) -> Result<u64, TransferError> {
        match self {
            Endpoint::Host(b) => Ok(b.buffer().len() as u64),
            Endpoint::File(f) => f
                .len_bytes()
                .map_err(|source| TransferError::Io { context: format!("reading the size of {name}"), source }),
        }
    }
}

/// A checked span: `count` slots from `src` slot `src_slot` to `dst` slot `dst_slot`.
#[derive(Debug)]
pub struct SpanCopy {
    src: Endpoint,
    src_byte: u64,
    dst: Endpoint,
    dst_byte: u64,
    nbytes: u64,
}

impl SpanCopy {
    /// The span of `count` slots of `elem_size` bytes from `src` slot `src_slot` to `dst`
    /// slot `dst_slot`, checked inside both storages (and, within one storage, not
    /// overlapping).
    pub fn new(
        src: Endpoint,
        src_slot: u64,
        dst: Endpoint,
        dst_slot: u64,
        count: u64,
        elem_size: usize,
    ) -> Result<Self, TransferError> {
        let size = elem_size as u64;
        let mut bytes = [0u64; 2];
        for (i, (name, slot, end, storage)) in
            [("src_slot", src_slot, "src", &src), ("dst_slot", dst_slot, "dst", &dst)].into_iter().enumerate()
        {
            let slots = storage.len_bytes(end)? / size.max(1);
            if slot.checked_add(count).is_none_or(|last| last > slots) {
                return Err(TransferError::Range(format!(
                    "{count} slots from {name} {slot} run past the end of {end} ({slots} slots)"
                )));
            }
            bytes[i] = slot * size;
        }
        let nbytes = count * size;
        if src.same_storage(&dst) && nbytes > 0 && bytes[0].abs_diff(bytes[1]) < nbytes {
            return Err(TransferError::Range("src and dst spans overlap in one storage".into()));
        }
        Ok(SpanCopy { src, src_byte: bytes[0], dst, dst_byte: bytes[1], nbytes })
    }

    /// The span's length in bytes.
    pub fn bytes(&self) -> u64 {
        self.nbytes
    }

    /// Copy the span in chunks of the I/O chunk, counting each into `progress` (whose total
    /// becomes the span's length); a large span into host memory in parallel pieces.
    pub fn run(self, progress: Option<&Arc<Progress>>) -> Result<(), TransferError> {
        if let Some(progress) = progress {
            progress.total.store(self.nbytes, Ordering::Relaxed);
        }
        if matches!(self.dst, Endpoint::Host(_)) && self.nbytes >= SPLIT_MIN {
            let (count, piece) = self.into_pieces(progress.cloned());
            return engine::run_pieces(count, piece);
        }
        self.run_whole(progress)
    }

    /// [`run`](Self::run) on the calling thread alone: for a transfer that overlaps the
    /// caller's own work (a prefetch), where helpers on the other cores would take the cores
    /// that work runs on. A thread that waits for a result meanwhile may run some of its
    /// pieces ([`offer_alone`](Self::offer_alone)).
    pub fn run_alone(self, progress: Option<&Arc<Progress>>) -> Result<(), TransferError> {
        self.offer_alone(progress.cloned()).run()
    }

    /// [`run_alone`](Self::run_alone) in two steps: a span of at least two pieces into host
    /// memory is offered now to threads that block waiting for a result
    /// ([`engine::help_offered`]), and [`AloneCopy::run`] copies what none of them has taken.
    /// For a copy submitted to a worker: a caller that waits for it at once lends its core
    /// even before the worker starts.
    pub fn offer_alone(self, progress: Option<Arc<Progress>>) -> AloneCopy {
        if let Some(progress) = &progress {
            progress.total.store(self.nbytes, Ordering::Relaxed);
        }
        if matches!(self.dst, Endpoint::Host(_)) && self.nbytes >= 2 * PIECE {
            let (count, piece) = self.into_pieces(progress);
            return AloneCopy(Alone::Offered(engine::offer_pieces(count, piece)));
        }
        AloneCopy(Alone::Whole(self, progress))
    }

    /// The span as [`PIECE`]s: how many, and the copy of piece `k`, counted into `progress`.
    fn into_pieces(self, progress: Option<Arc<Progress>>) -> (usize, PieceCopy) {
        let count = self.nbytes.div_ceil(PIECE) as usize;
        let job = Arc::new(self);
        let piece = move |k: usize| {
            let at = k as u64 * PIECE;
            let n = (job.nbytes - at).min(PIECE);
            job.run_piece(at, n)?;
            if let Some(progress) = &progress {
                progress.add(n);
            }
            Ok(())
        };
        (count, Box::new(piece))
    }

    /// The span on this thread, one I/O chunk after another.
    fn run_whole(self, progress: Option<&Arc<Progress>>) -> Result<(), TransferError> {
        let mut done = 0u64;
        while done < self.nbytes {
            let n = (self.nbytes - done).min(PROGRESS_CHUNK as u64);
            self.run_piece(done, n)?;
            done += n;
            if let Some(progress) = progress {
                progress.done.store(done, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Copies bytes `[at, at + len)` of the span.
    fn run_piece(&self, at: u64, len: u64) -> Result<(), TransferError> {
        let (src_byte, dst_byte, n) = (self.src_byte + at, self.dst_byte + at, len as usize);
        let io = |source: io::Error, what: &str| TransferError::Io {
            context: format!("while {what} {len} bytes at byte {at} of a {}-byte span", self.nbytes),
            source,
        };
        match (&self.src, &self.dst) {
            (Endpoint::Host(s), Endpoint::Host(d)) => {
                // SAFETY: both ranges were checked inside their buffers, which this copy keeps
                // allocated through its `Arc`s; they are disjoint (distinct buffers, or checked
                // non-overlapping in one); by `ClaimedHost::new`'s contract nothing else writes
                // them while the copy runs.
                let (from, to) =
                    unsafe { (s.buffer().as_ptr().add(src_byte as usize), d.buffer().as_ptr().add(dst_byte as usize)) };
                if self.nbytes >= SPLIT_MIN {
                    // The span is split into pieces (`run`), each too small for memcpy to
                    // stream its stores as it would the whole span; stream them here, and
                    // fence before the piece counts as done (another thread commits).
                    // SAFETY: as above, for the `n` bytes of this piece.
                    unsafe { copy::copy_span_streaming(from, to, n) };
                    copy::stream_fence();
                } else {
                    // SAFETY: as above, for the `n` bytes of this piece.
                    unsafe { copy::copy_span_host_to_host(from, to, n) };
                }
                Ok(())
            }
            (Endpoint::Host(s), Endpoint::File(f)) => {
                // SAFETY: the range is inside the buffer this copy keeps allocated; by
                // `ClaimedHost::new`'s contract nobody writes it meanwhile.
                let src = unsafe { std::slice::from_raw_parts(s.buffer().as_ptr().add(src_byte as usize), n) };
                copy::file_write_from_host(f.file(), dst_byte, src).map_err(|e| io(e, "writing"))
            }
            (Endpoint::File(f), Endpoint::Host(d)) => {
                // SAFETY: the range is inside the buffer this copy keeps allocated; by
                // `ClaimedHost::new`'s contract this copy is its only writer meanwhile.
                let dst = unsafe { std::slice::from_raw_parts_mut(d.buffer().as_ptr().add(dst_byte as usize), n) };
                copy::file_read_into_host(f.file(), src_byte, dst).map_err(|e| io(e, "reading"))
            }
            (Endpoint::File(a), Endpoint::File(b)) => {
                copy::file_copy(a.file(), src_byte, b.file(), dst_byte, len).map_err(|e| io(e, "copying"))
            }
        }
    }
}

/// A checked layout copy between two host buffers: slot `src_offset + i` to slot
/// `dst_offset + i` for every slot `i` the flattened layout addresses.
///
/// The buffers and the leaves are borrowed or owned (owned for a copy sent to another thread),
/// so a copy run where its move holds them allocates nothing and touches no reference count.
#[derive(Debug)]
pub struct LayoutCopy<'a> {
    src: Cow<'a, ClaimedHost>,
    src_offset: i64,
    dst: Cow<'a, ClaimedHost>,
    dst_offset: i64,
    extents: Cow<'a, [i64]>,
    strides: Cow<'a, [i64]>,
    elem_size: usize,
}

impl<'a> LayoutCopy<'a> {
    /// The copy of every slot the layout (`extents`, `strides`) addresses, checked inside both
    /// buffers, which must be distinct.
    pub fn new(
        src: impl Into<Cow<'a, ClaimedHost>>,
        src_offset: i64,
        dst: impl Into<Cow<'a, ClaimedHost>>,
        dst_offset: i64,
        extents: impl Into<Cow<'a, [i64]>>,
        strides: impl Into<Cow<'a, [i64]>>,
        elem_size: usize,
    ) -> Result<Self, TransferError> {
        let (src, dst) = (src.into(), dst.into());
        let (extents, strides) = (extents.into(), strides.into());
        let range = plan::addressed_range(&extents, &strides).map_err(|e| TransferError::Range(e.to_string()))?;
        if let Some((lo, hi)) = range {
            for (name, offset, buffer) in [("src_offset", src_offset, &*src), ("dst_offset", dst_offset, &*dst)] {
                let slots = (buffer.buffer().len() / elem_size.max(1)) as i64;
                let inside = matches!((offset.checked_add(lo), offset.checked_add(hi)),
                                      (Some(f), Some(l)) if f >= 0 && l < slots);
                if !inside {
                    return Err(TransferError::Range(format!(
                        "the layout at {name} {offset} addresses slots outside the storage ({slots} slots)"
                    )));
                }
            }
            if Arc::ptr_eq(src.buffer(), dst.buffer()) {
                return Err(TransferError::Range("src and dst are the same storage".into()));
            }
        }
        Ok(LayoutCopy { src, src_offset, dst, dst_offset, extents, strides, elem_size })
    }

    /// Copy: a dense layout (the bulk of host moves) as one span, in parallel pieces when it
    /// is large, counted into `progress`; any other layout as one strided walk.
    pub fn run(self, progress: Option<&Arc<Progress>>) -> Result<(), TransferError> {
        if let Some(slots) = plan::single_run(&self.extents, &self.strides) {
            let nbytes = (slots * self.elem_size) as u64;
            let byte = |offset: i64| offset as u64 * self.elem_size as u64; // checked >= 0
            if nbytes >= SPLIT_MIN {
                let span = SpanCopy {
                    src_byte: byte(self.src_offset),
                    dst_byte: byte(self.dst_offset),
                    src: Endpoint::Host(self.src.into_owned()),
                    dst: Endpoint::Host(self.dst.into_owned()),
                    nbytes,
                };
                return span.run(progress);
            }
            // A small span: one copy of its bytes, without planning a strided walk.
            // SAFETY: `new` checked every addressed slot, here `[offset, offset + slots)`,
            // inside both buffers (offsets are >= 0 there), which this copy keeps allocated;
            // the buffers are distinct, so the ranges cannot overlap, and by
            // `ClaimedHost::new`'s contract nothing else writes them meanwhile.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.src.buffer().as_ptr().add(byte(self.src_offset) as usize),
                    self.dst.buffer().as_ptr().add(byte(self.dst_offset) as usize),
                    nbytes as usize,
                );
            }
            if let Some(progress) = progress {
                progress.set(nbytes, nbytes);
            }
            return Ok(());
        }
        // SAFETY: every addressed slot was checked inside both buffers, which this copy keeps
        // allocated; the buffers are distinct, and by `ClaimedHost::new`'s contract nothing
        // else writes them meanwhile.
        unsafe {
            copy::copy_layout_elements(
                self.src.buffer().as_ptr(),
                self.src_offset,
                self.dst.buffer().as_ptr(),
                self.dst_offset,
                &self.extents,
                &self.strides,
                self.elem_size,
            )
        }
        .map_err(|e| TransferError::Unchecked(e.to_string()))?;
        if let Some(progress) = progress {
            progress.complete();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::HostBuffer;

    /// A span large enough to be split, copied by `run` and by `run_alone`: the same bytes and
    /// the same progress either way.
    #[test]
    fn a_span_run_alone_copies_what_a_split_run_copies() {
        let len = (SPLIT_MIN + PIECE + 12) as usize;
        let mut src = HostBuffer::new(len, false).unwrap();
        let seed: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        src.write_mut(0, &seed).unwrap();
        let src = Arc::new(src);
        for alone in [false, true] {
            let dst = Arc::new(HostBuffer::new(len, true).unwrap());
            // SAFETY: nothing else reads or writes either buffer while the copy runs.
            let (from, into) = unsafe { (ClaimedHost::new(src.clone()), ClaimedHost::new(dst.clone())) };
            let copy =
                SpanCopy::new(Endpoint::Host(from), 1, Endpoint::Host(into), 0, (len / 4 - 1) as u64, 4).unwrap();
            let progress = Arc::new(Progress::new(0));
            if alone { copy.run_alone(Some(&progress)) } else { copy.run(Some(&progress)) }.unwrap();
            let mut out = vec![0u8; len];
            dst.read(0, &mut out).unwrap();
            assert_eq!(&out[..len - 4], &seed[4..], "alone: {alone}");
            assert_eq!((progress.done(), progress.total()), ((len - 4) as u64, (len - 4) as u64), "alone: {alone}");
        }
    }

    #[test]
    fn a_span_offered_alone_is_copied_by_a_waiting_thread_before_its_owner_runs() {
        let len = (2 * PIECE + 12) as usize;
        let mut src = HostBuffer::new(len, false).unwrap();
        let seed: Vec<u8> = (0..len).map(|i| (i * 13 % 241) as u8).collect();
        src.write_mut(0, &seed).unwrap();
        let dst = Arc::new(HostBuffer::new(len, true).unwrap());
        // SAFETY: nothing else reads or writes either buffer while the copy runs.
        let (from, into) = unsafe { (ClaimedHost::new(Arc::new(src)), ClaimedHost::new(dst.clone())) };
        let copy = SpanCopy::new(Endpoint::Host(from), 0, Endpoint::Host(into), 0, (len / 4) as u64, 4).unwrap();
        let progress = Arc::new(Progress::new(0));
        let offered = copy.offer_alone(Some(progress.clone()));
        // A thread that waits for something claims every piece; the owner then has none left
        // to copy, and waits for any other helper still copying.
        std::thread::spawn(|| engine::help_offered(|| false)).join().unwrap();
        assert!(progress.done() > 0, "helpers copied before the owner ran");
        offered.run().unwrap();
        assert_eq!(progress.done(), len as u64);
        let mut out = vec![0u8; len];
        dst.read(0, &mut out).unwrap();
        assert_eq!(out, seed);
    }
}
