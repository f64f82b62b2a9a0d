//! Batched span copies between host buffers and files: the data path of tiled tiers.
//!
//! A tiled tier moves or gathers many tiles per request. Each tile copy is a list of slot
//! spans `(src store, src slot, dst store, dst slot, count)`; a block gather (a tile placed
//! into a larger dense array) expands into one span per contiguous row. The whole list is
//! checked against every store's size before a byte moves ([`check_spans`]), then run back
//! to back on one thread ([`run_spans`]) with the span kernels of [`crate::copy`]:
//!
//! * adjacent spans that continue each other on both sides are merged first;
//! * a run of spans reading consecutive slots of one file (a tile's rows, or tiles in
//!   neighbouring regions of a slab) is one scatter read straight into the host ranges,
//!   instead of a read per span;
//! * a run of spans writing consecutive slots of one file is one gather write.
//!
//! Block gathers (`blocks.rs`) place dense tiles into a larger dense array, or cut them out
//! of one, row by row without materialising a span per row.
//!
//! Stores are borrowed: the caller (the Python binding) keeps them alive, by `Arc`, for the
//! whole request.
//!
//! ```
//! use strideweave_core::storage::HostBuffer;
//! use strideweave_core::tiles::{check_spans, Span, Store};
//!
//! let (a, b) = (HostBuffer::new(64, true).unwrap(), HostBuffer::new(32, true).unwrap());
//! let stores = [Store::Host(&a), Store::Host(&b)];
//! // Eight 4-byte slots from slot 8 of store 0 to slot 0 of store 1: exactly fits.
//! let fits = Span { src: 0, src_off: 8, dst: 1, dst_off: 0, count: 8 };
//! assert!(check_spans(&stores, 4, &[fits]).is_ok());
//! assert!(check_spans(&stores, 4, &[Span { count: 9, ..fits }]).is_err()); // refused before a byte moves
//! ```

use std::io;

use thiserror::Error;

use crate::copy;
use crate::storage::{FileStore, HostBuffer};

mod blocks;
#[cfg(test)]
mod test_support;

pub use blocks::{check_blocks, placed_on_lattice, run_blocks, Block, BlockGeometry};

/// One end of a span: a host buffer or a file, borrowed for the request.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Store<'a> {
    /// A host buffer.
    Host(&'a HostBuffer),
    /// A file.
    File(&'a FileStore),
}

impl Store<'_> {
    /// Size in bytes now (a file's current length).
    fn len_bytes(&self) -> io::Result<u64> {
        match self {
            Store::Host(b) => Ok(b.len() as u64),
            Store::File(f) => f.len_bytes(),
        }
    }

    fn is_host(&self) -> bool {
        matches!(self, Store::Host(_))
    }
}

/// `count` slots from slot `src_off` of store `src` to slot `dst_off` of store `dst`
/// (indices into the request's store list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Index of the source store in the request.
    pub src: usize,
    /// First source slot.
    pub src_off: u64,
    /// Index of the destination store in the request.
    pub dst: usize,
    /// First destination slot.
    pub dst_off: u64,
    /// Number of slots.
    pub count: u64,
}

/// Why a request was refused before anything was written, or failed while running.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SpanError {
    /// A span names a store index the request does not have.
    #[error("span {span} names store {index}, which the request does not have")]
    NoStore {
        /// The span's index.
        span: usize,
        /// The store index it names.
        index: usize,
    },
    /// A span or block (`item`) reaches past its store's end (`side` is "source" or
    /// "destination").
    #[error("{item} {index} reaches {side} slot {end}, past the storage's {slots} slots")]
    OutOfRange {
        /// "span" or "block".
        item: &'static str,
        /// Its index in the request.
        index: usize,
        /// "source" or "destination".
        side: &'static str,
        /// One past the last slot it reaches.
        end: u64,
        /// The store's size in slots.
        slots: u64,
    },
    /// A span's or block's source and destination overlap in one store.
    #[error("{item} {index} copies between overlapping slots of one storage")]
    Overlap {
        /// "span" or "block".
        item: &'static str,
        /// Its index in the request.
        index: usize,
    },
    /// Block geometry that cannot describe dense arrays.
    #[error("{0}")]
    Geometry(String),
    /// The operating system refused a read or write.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Checks every span against the stores' current sizes (in `elem`-byte slots) and refuses
/// same-store overlaps. Nothing is read or written.
pub fn check_spans(stores: &[Store<'_>], elem: usize, spans: &[Span]) -> Result<(), SpanError> {
    let slots = store_slots(stores, elem)?;
    for (k, s) in spans.iter().enumerate() {
        check_range(&slots, "span", k, "source", s.src, s.src_off, s.count)?;
        check_range(&slots, "span", k, "destination", s.dst, s.dst_off, s.count)?;
        let disjoint = s.src_off + s.count <= s.dst_off || s.dst_off + s.count <= s.src_off;
        if s.src == s.dst && s.count > 0 && !disjoint {
            return Err(SpanError::Overlap { item: "span", index: k });
        }
    }
    Ok(())
}

/// Every store's size in `elem`-byte slots, now.
fn store_slots(stores: &[Store<'_>], elem: usize) -> Result<Vec<u64>, SpanError> {
    Ok(stores.iter().map(|s| s.len_bytes().map(|b| b / elem as u64)).collect::<io::Result<Vec<u64>>>()?)
}

/// `[off, off + count)` lies inside store `store` (of `slots[store]` slots).
#[allow(clippy::too_many_arguments)]
fn check_range(
    slots: &[u64],
    item: &'static str,
    index: usize,
    side: &'static str,
    store: usize,
    off: u64,
    count: u64,
) -> Result<(), SpanError> {
    let have = *slots.get(store).ok_or(SpanError::NoStore { span: index, index: store })?;
    match off.checked_add(count) {
        Some(end) if end <= have => Ok(()),
        end => Err(SpanError::OutOfRange { item, index, side, end: end.unwrap_or(u64::MAX), slots: have }),
    }
}

/// Merges each span into its predecessor when it continues it on both sides.
fn coalesce(spans: &[Span]) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    for s in spans.iter().filter(|s| s.count > 0) {
        if let Some(p) = out.last_mut() {
            if p.src == s.src && p.dst == s.dst && p.src_off + p.count == s.src_off && p.dst_off + p.count == s.dst_off
            {
                p.count += s.count;
                continue;
            }
        }
        out.push(*s);
    }
    out
}

/// How many spans from `first` form one run: `same(prev, next)` holds between neighbours and
/// the run stays within one I/O chunk of bytes (a single span may be larger) and within the
/// ranges one vectored call takes.
fn run_length(spans: &[Span], first: usize, elem: usize, same: impl Fn(&Span, &Span) -> bool) -> usize {
    let mut bytes = spans[first].count as usize * elem;
    let mut end = first + 1;
    while end < spans.len() && end - first < copy::MAX_RANGES && same(&spans[end - 1], &spans[end]) {
        bytes += spans[end].count as usize * elem;
        if bytes > copy::IO_CHUNK {
            break;
        }
        end += 1;
    }
    end - first
}

/// The bytes of `count` slots at slot `off` of a host buffer.
///
/// # Safety
/// The range lies inside `buf` (checked by [`check_spans`]) and no other thread writes it
/// during the request (the carrier layer pins or claims every store it names).
pub(crate) unsafe fn host_bytes(buf: &HostBuffer, off: u64, count: u64, elem: usize) -> &[u8] {
    // SAFETY: per this function's contract; the pointer is non-null for a live buffer.
    unsafe { std::slice::from_raw_parts(buf.as_ptr().add(off as usize * elem), count as usize * elem) }
}

/// Mutable bytes of `count` slots at slot `off` of a host buffer.
///
/// # Safety
/// As [`host_bytes`], and nothing else reads or writes the range during the call.
#[allow(clippy::mut_from_ref)]
pub(crate) unsafe fn host_bytes_mut(buf: &HostBuffer, off: u64, count: u64, elem: usize) -> &mut [u8] {
    // SAFETY: per this function's contract.
    unsafe { std::slice::from_raw_parts_mut(buf.as_ptr().add(off as usize * elem), count as usize * elem) }
}

/// Runs every span in order. Call [`check_spans`] first: this trusts the ranges.
///
/// # Safety
/// The spans passed [`check_spans`] for these stores, the stores stay alive, and no other
/// thread writes any destination range or source range during the call.
pub unsafe fn run_spans(stores: &[Store<'_>], elem: usize, spans: &[Span]) -> io::Result<()> {
    let spans = coalesce(spans);
    let mut i = 0;
    while i < spans.len() {
        let s = spans[i];
        let bytes = s.count as usize * elem;
        let (src_byte, dst_byte) = (s.src_off * elem as u64, s.dst_off * elem as u64);
        match (stores[s.src], stores[s.dst]) {
            (Store::Host(a), Store::Host(b)) => {
                // SAFETY: ranges checked in bounds and not overlapping (check_spans); no
                // concurrent writers per this function's contract.
                unsafe {
                    let src = host_bytes(a, s.src_off, s.count, elem);
                    let dst = host_bytes_mut(b, s.dst_off, s.count, elem);
                    copy::copy_span_host_to_host(src.as_ptr(), dst.as_mut_ptr(), bytes);
                }
                i += 1;
            }
            (Store::File(f), Store::Host(b)) => {
                let n = run_length(&spans, i, elem, |p, q| {
                    q.src == p.src && q.src_off == p.src_off + p.count && stores[q.dst].is_host()
                });
                if n == 1 {
                    // SAFETY: as above; the destination range is ours alone for the call.
                    let dst = unsafe { host_bytes_mut(b, s.dst_off, s.count, elem) };
                    copy::file_read_into_host(f.file(), src_byte, dst)?;
                } else {
                    // One scatter read for the run, straight into every destination range.
                    let parts: Vec<(*mut u8, usize)> = spans[i..i + n]
                        .iter()
                        .map(|r| {
                            let Store::Host(dst) = stores[r.dst] else { unreachable!("run keeps host destinations") };
                            // SAFETY: r.dst_off + r.count lies inside the buffer (check_spans).
                            (unsafe { dst.as_ptr().add(r.dst_off as usize * elem) }, r.count as usize * elem)
                        })
                        .collect();
                    // SAFETY: every range lies inside a live destination buffer (checked), and
                    // no other thread touches destinations during the request (this
                    // function's contract).
                    unsafe { copy::file_read_scatter(f.file(), src_byte, &parts) }?;
                }
                i += n;
            }
            (Store::Host(a), Store::File(f)) => {
                let n = run_length(&spans, i, elem, |p, q| {
                    q.dst == p.dst && q.dst_off == p.dst_off + p.count && stores[q.src].is_host()
                });
                if n == 1 {
                    // SAFETY: as above.
                    let src = unsafe { host_bytes(a, s.src_off, s.count, elem) };
                    copy::file_write_from_host(f.file(), dst_byte, src)?;
                } else {
                    // One gather write for the run, straight from every source range.
                    let parts: Vec<&[u8]> = spans[i..i + n]
                        .iter()
                        .map(|r| {
                            let Store::Host(src) = stores[r.src] else { unreachable!("run keeps host sources") };
                            // SAFETY: as above.
                            unsafe { host_bytes(src, r.src_off, r.count, elem) }
                        })
                        .collect();
                    copy::file_write_gather(f.file(), dst_byte, &parts)?;
                }
                i += n;
            }
            (Store::File(a), Store::File(b)) => {
                copy::file_copy(a.file(), src_byte, b.file(), dst_byte, bytes as u64)?;
                i += 1;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::test_support::{file_values, host_values, host_with, temp_file};
    use super::*;

    fn run(stores: &[Store<'_>], spans: &[Span]) -> Result<(), SpanError> {
        check_spans(stores, 4, spans)?;
        // SAFETY: checked above; the test owns every store.
        unsafe { run_spans(stores, 4, spans) }.map_err(SpanError::from)
    }

    #[test]
    fn host_file_round_trip_through_scattered_spans() {
        let src = host_with(&(0..16).collect::<Vec<_>>());
        let (file, path) = temp_file("round");
        file.set_len(64).unwrap();
        let back = HostBuffer::new(64, true).unwrap();
        let stores = [Store::Host(&src), Store::File(&file), Store::Host(&back)];
        // Reverse the four quarters into the file (a gather run per contiguous dst).
        let out: Vec<Span> =
            (0..4).map(|q| Span { src: 0, src_off: 12 - 4 * q, dst: 1, dst_off: 4 * q, count: 4 }).collect();
        run(&stores, &out).unwrap();
        assert_eq!(file_values(&file), [12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3]);
        // Read the file's rows back to scattered places (one read, scattered).
        let back_spans: Vec<Span> =
            (0..4).map(|q| Span { src: 1, src_off: 4 * q, dst: 2, dst_off: 12 - 4 * q, count: 4 }).collect();
        run(&stores, &back_spans).unwrap();
        assert_eq!(host_values(&back), (0..16).collect::<Vec<_>>());
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn out_of_range_and_overlap_are_refused_before_writing() {
        let a = host_with(&[1, 2, 3, 4]);
        let b = host_with(&[9, 9, 9, 9]);
        let stores = [Store::Host(&a), Store::Host(&b)];
        let spans = [
            Span { src: 0, src_off: 0, dst: 1, dst_off: 0, count: 2 },
            Span { src: 0, src_off: 2, dst: 1, dst_off: 3, count: 2 },
        ];
        let err = run(&stores, &spans).unwrap_err();
        assert!(
            matches!(err, SpanError::OutOfRange { item: "span", index: 1, side: "destination", end: 5, slots: 4 }),
            "{err}"
        );
        assert_eq!(host_values(&b), [9, 9, 9, 9]);
        let overlap = [Span { src: 0, src_off: 0, dst: 0, dst_off: 1, count: 2 }];
        assert!(matches!(run(&stores, &overlap).unwrap_err(), SpanError::Overlap { index: 0, .. }));
        let missing = [Span { src: 0, src_off: 0, dst: 7, dst_off: 0, count: 1 }];
        assert!(matches!(run(&stores, &missing).unwrap_err(), SpanError::NoStore { span: 0, index: 7 }));
        let huge = [Span { src: 0, src_off: u64::MAX, dst: 1, dst_off: 0, count: 2 }];
        assert!(matches!(run(&stores, &huge).unwrap_err(), SpanError::OutOfRange { .. }));
    }

    #[test]
    fn coalescing_merges_only_continuations() {
        let s = |src_off, dst_off, count| Span { src: 0, src_off, dst: 1, dst_off, count };
        assert_eq!(coalesce(&[s(0, 0, 2), s(2, 2, 2), s(4, 8, 1), s(0, 0, 0)]), vec![s(0, 0, 4), s(4, 8, 1)]);
    }
}
