//! Copy kernels between host memory and files, written against raw parts.
//!
//! The move layer calls these with pointers, file handles and flattened layouts so that the
//! kernels stay independent of the storage types that own the bytes. Two families:
//!
//! * span copies: a contiguous byte range host↔host, host↔file, file↔file, moved in large
//!   positioned chunks (the bulk routes of a move carry a layout's whole cosize span), and
//!   gather writes / scatter reads of many host ranges against one file range (`vectored.rs`),
//!   and host copies with streaming stores for large piecewise gathers (`streaming.rs`);
//! * layout copies: every slot a hierarchical layout addresses, given as its flattened leaf
//!   extents and strides (first leaf fastest), copied from `src_offset + index` to
//!   `dst_offset + index` — the elementwise fallback, where the moved result keeps the same
//!   Layout at offset 0 in the destination.
//!
//! ```
//! use std::fs::OpenOptions;
//! use strideweave_core::copy::{file_read_into_host, file_write_from_host};
//!
//! let path = std::env::temp_dir().join(format!("strideweave-copy-doc-{}", std::process::id()));
//! let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
//! file_write_from_host(&file, 16, b"strideweave").unwrap();
//! let mut back = [0u8; 11];
//! file_read_into_host(&file, 16, &mut back).unwrap();
//! assert_eq!(&back, b"strideweave");
//! std::fs::remove_file(&path).unwrap();
//! ```

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use thiserror::Error;

use crate::layout::plan::{addressed_range, check_modes, LoopPlan, PlanError};

mod prefetch;
mod streaming;
pub(crate) mod vectored;
pub use prefetch::{prefetch_read, PREFETCH_MAX_BYTES};
pub use streaming::{copy_span_streaming, stream_fence, stream_rows, STREAM_THRESHOLD};
pub use vectored::{file_read_scatter, file_write_gather, MAX_RANGES};

/// Bytes moved per positioned read or write. Large enough that syscall overhead vanishes
/// next to the copy, small enough that one call never approaches the kernel's ~2 GiB cap.
pub const IO_CHUNK: usize = 8 << 20;

/// Copies `bytes` bytes from `src` to `dst`.
///
/// # Safety
/// `src` must be valid for reads and `dst` valid for writes of `bytes` bytes, the two ranges
/// must not overlap, and no other thread may write either range during the call. Either
/// pointer may be dangling (even null) when `bytes == 0`.
pub unsafe fn copy_span_host_to_host(src: *const u8, dst: *mut u8, bytes: usize) {
    if bytes == 0 {
        return;
    }
    // SAFETY: the caller guarantees both ranges are valid, disjoint and not concurrently
    // written; bytes > 0 so neither pointer is dangling.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, bytes) }
}

fn offset_after(base: u64, done: usize) -> io::Result<u64> {
    base.checked_add(done as u64)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "file offset overflows u64"))
}

/// Writes all of `src` to `file` starting at byte `file_byte_off`, growing the file if needed.
///
/// Short writes are continued and `EINTR` is retried; a write that makes no progress is
/// `WriteZero`. On error some prefix of `src` may already be in the file.
pub fn file_write_from_host(file: &File, file_byte_off: u64, src: &[u8]) -> io::Result<()> {
    reserve_blocks(file, file_byte_off, src.len())?;
    file_write_chunked(file, file_byte_off, src, IO_CHUNK)
}

/// Reserve the blocks a write will fill before writing them (what `ndarray.tofile` does):
/// the filesystem allocates the range in one extent instead of block by block as the writes
/// arrive, and a full disk fails here, before a single byte of the span is written.
/// Filesystems without `fallocate` just skip the reservation.
fn reserve_blocks(file: &File, off: u64, len: usize) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        if len == 0 {
            return Ok(());
        }
        let (Ok(start), Ok(count)) = (libc::off_t::try_from(off), libc::off_t::try_from(len)) else {
            return Ok(()); // beyond off_t: let the writes report it
        };
        // SAFETY: fallocate only reads its integer arguments; the descriptor is borrowed from
        // a live `File`, and KEEP_SIZE leaves the file's visible length alone.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, start, count) };
        if rc != 0 {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL) => Ok(()),
                _ => Err(err),
            };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, off, len);
    Ok(())
}

fn file_write_chunked(file: &File, off: u64, src: &[u8], chunk: usize) -> io::Result<()> {
    let mut done = 0usize;
    while done < src.len() {
        let end = src.len().min(done + chunk);
        match file.write_at(&src[done..end], offset_after(off, done)?) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "positioned write made no progress")),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills all of `dst` from `file` starting at byte `file_byte_off`.
///
/// Short reads are continued and `EINTR` is retried; reaching end of file first is
/// `UnexpectedEof`. On error `dst` may be partly overwritten.
pub fn file_read_into_host(file: &File, file_byte_off: u64, dst: &mut [u8]) -> io::Result<()> {
    file_read_chunked(file, file_byte_off, dst, IO_CHUNK)
}

fn file_read_chunked(file: &File, off: u64, dst: &mut [u8], chunk: usize) -> io::Result<()> {
    let mut done = 0usize;
    while done < dst.len() {
        let end = dst.len().min(done + chunk);
        match file.read_at(&mut dst[done..end], offset_after(off, done)?) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("file ends before byte {}", offset_after(off, dst.len())?),
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Copies `bytes` bytes from `src` at `src_off` to `dst` at `dst_off`.
///
/// Uses the kernel's `copy_file_range` where available (no trip through user memory) and
/// otherwise a bounce buffer. Overlapping ranges of one file are copied as if through an
/// intermediate buffer. Reaching the end of `src` first is `UnexpectedEof`.
pub fn file_copy(src: &File, src_off: u64, dst: &File, dst_off: u64, bytes: u64) -> io::Result<()> {
    // The kernel refuses overlapping ranges of one file; those go through the buffer.
    #[cfg(target_os = "linux")]
    let done = kernel_copy(src, src_off, dst, dst_off, bytes)?;
    #[cfg(not(target_os = "linux"))]
    let done = 0u64;
    if done < bytes {
        bounce_copy(src, src_off + done, dst, dst_off + done, bytes - done, IO_CHUNK)?;
    }
    Ok(())
}

/// Returns how many bytes the kernel copied before declining (`EXDEV`, `ENOSYS`, `EINVAL`,
/// `EOPNOTSUPP` …); the caller finishes the rest with a bounce buffer.
#[cfg(target_os = "linux")]
fn kernel_copy(src: &File, src_off: u64, dst: &File, dst_off: u64, bytes: u64) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    let mut done = 0u64;
    while done < bytes {
        let (Ok(mut s), Ok(mut d)) = (libc::loff_t::try_from(src_off + done), libc::loff_t::try_from(dst_off + done))
        else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "file offset exceeds off_t"));
        };
        let want = (bytes - done).min(1 << 30) as usize;
        // SAFETY: both descriptors are borrowed from live `File`s for the call; the offset
        // pointers point at locals that outlive it; flags must be 0.
        let n = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut s, dst.as_raw_fd(), &mut d, want, 0) };
        if n > 0 {
            done += n as u64;
        } else if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "source file ends before the span"));
        } else {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                // Not an I/O failure, only "not this way": the caller's buffer path decides.
                Some(libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP | libc::EPERM) => return Ok(done),
                _ => return Err(e),
            }
        }
    }
    Ok(done)
}

fn bounce_copy(src: &File, src_off: u64, dst: &File, dst_off: u64, bytes: u64, chunk: usize) -> io::Result<()> {
    let mut buf = vec![0u8; (bytes.min(chunk as u64)) as usize];
    // Walk backwards when the destination lies after the source, so an overlapping range of
    // the same file is read before it is overwritten.
    let backwards = dst_off > src_off;
    let mut remaining = bytes;
    while remaining > 0 {
        let n = remaining.min(buf.len() as u64);
        let pos = if backwards { remaining - n } else { bytes - remaining };
        let piece = &mut buf[..n as usize];
        file_read_into_host(src, src_off + pos, piece)?;
        file_write_from_host(dst, dst_off + pos, piece)?;
        remaining -= n;
    }
    Ok(())
}

/// Why a layout copy was refused before touching memory.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LayoutCopyError {
    /// The loop planner refused the modes (rank mismatch, negative extent, overflow).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// `elem_size` is zero.
    #[error("elem_size must be positive")]
    ZeroElementSize,
}

/// Copies every slot the layout addresses: slot `src_offset + index` of `src_base` to slot
/// `dst_offset + index` of `dst_base`, for `index = Σ c_i * strides[i]` over all coordinates
/// `0 <= c_i < extents[i]`. Slots the layout does not address are left untouched. A
/// non-injective layout (stride 0, overlapping modes) copies each distinct slot once.
///
/// # Safety
/// `src_base` must be valid for reads and `dst_base` for writes at every addressed slot
/// (`offset + index` times `elem_size` bytes, see [`addressed_range`]); the addressed source
/// and destination bytes must not overlap, and no other thread may write them during the call.
pub unsafe fn copy_layout_elements(
    src_base: *const u8,
    src_offset: i64,
    dst_base: *mut u8,
    dst_offset: i64,
    extents: &[i64],
    strides: &[i64],
    elem_size: usize,
) -> Result<(), LayoutCopyError> {
    check_modes(extents, strides)?;
    // SAFETY: forwarded verbatim from this function's contract; equal strides make the
    // destination addressed set the source's shifted by the offset difference.
    unsafe { copy_strided(src_base, src_offset, strides, dst_base, dst_offset, strides, extents, elem_size) }
}

/// Copies slot `src_offset + Σ c_i*src_strides[i]` to slot `dst_offset + Σ c_i*dst_strides[i]`
/// for every coordinate. With distinct stride lists this is a general gather/scatter (for
/// instance compacting a gapped layout into a contiguous one). When several coordinates
/// name one destination slot, which source value lands there is unspecified.
///
/// # Safety
/// As for [`copy_layout_elements`], for the slots each side addresses with its own strides.
#[allow(clippy::too_many_arguments)]
pub unsafe fn copy_strided(
    src_base: *const u8,
    src_offset: i64,
    src_strides: &[i64],
    dst_base: *mut u8,
    dst_offset: i64,
    dst_strides: &[i64],
    extents: &[i64],
    elem_size: usize,
) -> Result<(), LayoutCopyError> {
    check_modes(extents, src_strides)?;
    check_modes(extents, dst_strides)?;
    if elem_size == 0 {
        return Err(LayoutCopyError::ZeroElementSize);
    }
    // Prove every byte offset fits isize before any pointer arithmetic uses it.
    let byte_span = |offset: i64, strides: &[i64]| -> Result<Option<(isize, isize)>, LayoutCopyError> {
        let Some((lo, hi)) = addressed_range(extents, strides)? else {
            return Ok(None);
        };
        let es = elem_size as i64;
        let lo = offset.checked_add(lo).and_then(|v| v.checked_mul(es));
        let hi = offset.checked_add(hi).and_then(|v| v.checked_add(1)).and_then(|v| v.checked_mul(es));
        match (lo.and_then(|v| isize::try_from(v).ok()), hi.and_then(|v| isize::try_from(v).ok())) {
            (Some(l), Some(h)) => Ok(Some((l, h))),
            _ => Err(PlanError::AddressOverflow.into()),
        }
    };
    let Some(_) = byte_span(src_offset, src_strides)? else {
        return Ok(());
    };
    byte_span(dst_offset, dst_strides)?;

    let plan = plan_copy(extents, src_strides, dst_strides);
    // SAFETY (for the `add`/`offset` below): the byte spans above fit isize, and the caller
    // guarantees the bases are valid at every addressed slot, so these pointers stay inside
    // the allocations (or one step outside, never dereferenced).
    let src = unsafe { src_base.offset(src_offset as isize * elem_size as isize) };
    let dst = unsafe { dst_base.offset(dst_offset as isize * elem_size as isize) };
    // SAFETY: forwarded contract; each kernel only touches the addressed slots.
    unsafe {
        match elem_size {
            1 => run::<u8>(src, dst, &plan),
            2 => run::<u16>(src, dst, &plan),
            4 => run::<u32>(src, dst, &plan),
            8 => run::<u64>(src, dst, &plan),
            16 => run::<u128>(src, dst, &plan),
            _ => run_bytes(src, dst, &plan, elem_size),
        }
    }
    Ok(())
}

/// The copy's loop plan (`layout::plan`): levels that revisit the same slot pair are
/// dropped, the smallest destination stride goes innermost (sequential writes), and levels
/// that continue each other on both sides are fused, so a contiguous layout becomes one
/// level of stride 1: a single memcpy. Extents are non-negative (checked by the caller).
fn plan_copy(extents: &[i64], src_strides: &[i64], dst_strides: &[i64]) -> LoopPlan<2> {
    let extents: Vec<usize> = extents.iter().map(|&e| e as usize).collect();
    let src: Vec<isize> = src_strides.iter().map(|&s| s as isize).collect();
    let dst: Vec<isize> = dst_strides.iter().map(|&s| s as isize).collect();
    LoopPlan::new(&extents, [&src, &dst], true, |[s, d]| (d.unsigned_abs(), s.unsigned_abs()))
}

/// One loop level of a copy: trip count and source/destination strides in elements.
#[derive(Clone, Copy, Debug)]
struct Mode {
    n: usize,
    s: isize,
    d: isize,
}

impl Mode {
    /// Level `i` of `plan`, or a single step where the plan has fewer levels.
    fn of(plan: &LoopPlan<2>, i: usize) -> Mode {
        plan.extents().get(i).map_or(Mode { n: 1, s: 0, d: 0 }, |&n| Mode {
            n,
            s: plan.strides()[0][i],
            d: plan.strides()[1][i],
        })
    }
}

/// Contiguous runs at least this long go to memcpy; shorter ones are cheaper as a loop.
const MEMCPY_MIN_ELEMS: usize = 16;

/// # Safety
/// `src`/`dst` plus every `Σ c_i*stride_i` (in `T` units) must be valid, disjoint slots.
#[inline(always)]
unsafe fn inner<T: Copy>(src: *const T, dst: *mut T, m: Mode) {
    // SAFETY (whole body): the caller guarantees every visited slot is valid and the source
    // and destination slots are disjoint; unaligned accesses because raw pointers from Python
    // carry no alignment promise.
    unsafe {
        if m.s == 1 && m.d == 1 && m.n >= MEMCPY_MIN_ELEMS {
            std::ptr::copy_nonoverlapping(src, dst, m.n);
        } else {
            for k in 0..m.n as isize {
                dst.offset(k * m.d).write_unaligned(src.offset(k * m.s).read_unaligned());
            }
        }
    }
}

/// The plan's odometer over the outer levels; the two innermost levels are plain loops so
/// that short inner runs (a gapped layout's small contiguous pieces) do not pay the odometer
/// per run.
///
/// # Safety
/// As for [`inner`], for every slot `plan` visits.
unsafe fn run<T: Copy>(src: *const u8, dst: *mut u8, plan: &LoopPlan<2>) {
    let src = src as *const T;
    let dst = dst as *mut T;
    let (m0, m1) = (Mode::of(plan, 0), Mode::of(plan, 1));
    plan.odometer(2, [0, 0], |[sp, dp]| {
        for j in 0..m1.n as isize {
            // SAFETY: (sp + j*m1.s, dp + j*m1.d) is a visited slot pair's run start.
            unsafe { inner(src.offset(sp + j * m1.s), dst.offset(dp + j * m1.d), m0) };
        }
    });
}

/// Element sizes without a matching integer type: one small memcpy per element.
///
/// # Safety
/// As for [`inner`], with elements of `es` bytes.
unsafe fn run_bytes(src: *const u8, dst: *mut u8, plan: &LoopPlan<2>, es: usize) {
    let es_i = es as isize;
    plan.odometer(0, [0, 0], |[sp, dp]| {
        // SAFETY: (sp, dp) is a visited slot pair; the caller guarantees validity/disjointness.
        unsafe { std::ptr::copy_nonoverlapping(src.offset(sp * es_i), dst.offset(dp * es_i), es) };
    });
}

#[cfg(test)]
mod tests;
