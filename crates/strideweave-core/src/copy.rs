//! Copy kernels between host memory and files, written against raw parts.
//!
//! The move layer calls these with pointers, file handles and flattened layouts so that the
//! kernels stay independent of the storage types that own the bytes. Two families:
//!
//! * span copies: a contiguous byte range host↔host, host↔file, file↔file, moved in large
//!   positioned chunks (the bulk routes of a move carry a layout's whole cosize span);
//! * layout copies: every slot a hierarchical layout addresses, given as its flattened leaf
//!   extents and strides (first leaf fastest), copied from `src_offset + index` to
//!   `dst_offset + index` — the elementwise fallback, where the moved result keeps the same
//!   Layout at offset 0 in the destination.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

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
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "positioned write made no progress",
                ))
            }
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
        bounce_copy(
            src,
            src_off + done,
            dst,
            dst_off + done,
            bytes - done,
            IO_CHUNK,
        )?;
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
        let (Ok(mut s), Ok(mut d)) = (
            libc::loff_t::try_from(src_off + done),
            libc::loff_t::try_from(dst_off + done),
        ) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "file offset exceeds off_t",
            ));
        };
        let want = (bytes - done).min(1 << 30) as usize;
        // SAFETY: both descriptors are borrowed from live `File`s for the call; the offset
        // pointers point at locals that outlive it; flags must be 0.
        let n = unsafe {
            libc::copy_file_range(src.as_raw_fd(), &mut s, dst.as_raw_fd(), &mut d, want, 0)
        };
        if n > 0 {
            done += n as u64;
        } else if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "source file ends before the span",
            ));
        } else {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                // Not an I/O failure, only "not this way": the caller's buffer path decides.
                Some(
                    libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP | libc::EPERM,
                ) => return Ok(done),
                _ => return Err(e),
            }
        }
    }
    Ok(done)
}

fn bounce_copy(
    src: &File,
    src_off: u64,
    dst: &File,
    dst_off: u64,
    bytes: u64,
    chunk: usize,
) -> io::Result<()> {
    let mut buf = vec![0u8; (bytes.min(chunk as u64)) as usize];
    // Walk backwards when the destination lies after the source, so an overlapping range of
    // the same file is read before it is overwritten.
    let backwards = dst_off > src_off;
    let mut remaining = bytes;
    while remaining > 0 {
        let n = remaining.min(buf.len() as u64);
        let pos = if backwards {
            remaining - n
        } else {
            bytes - remaining
        };
        let piece = &mut buf[..n as usize];
        file_read_into_host(src, src_off + pos, piece)?;
        file_write_from_host(dst, dst_off + pos, piece)?;
        remaining -= n;
    }
    Ok(())
}

/// Why a layout copy was refused before touching memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutCopyError {
    /// `extents` and a stride list differ in length.
    RankMismatch { extents: usize, strides: usize },
    /// A leaf extent is negative.
    NegativeExtent { leaf: usize, extent: i64 },
    /// `elem_size` is zero.
    ZeroElementSize,
    /// Some addressed slot index or byte offset does not fit the address space.
    Overflow,
}

impl fmt::Display for LayoutCopyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RankMismatch { extents, strides } => {
                write!(
                    f,
                    "leaf_strides has {strides} entries but leaf_extents has {extents}"
                )
            }
            Self::NegativeExtent { leaf, extent } => {
                write!(f, "leaf_extents[{leaf}] is negative ({extent})")
            }
            Self::ZeroElementSize => write!(f, "elem_size must be positive"),
            Self::Overflow => write!(f, "addressed slots overflow the address space"),
        }
    }
}

impl std::error::Error for LayoutCopyError {}

/// The smallest and largest slot index, relative to the offset, that a layout with these
/// flattened leaf `extents` and `strides` addresses; `None` when it addresses nothing.
pub fn addressed_range(
    extents: &[i64],
    strides: &[i64],
) -> Result<Option<(i64, i64)>, LayoutCopyError> {
    check_modes(extents, strides)?;
    if extents.contains(&0) {
        return Ok(None);
    }
    let (mut lo, mut hi) = (0i64, 0i64);
    for (&e, &s) in extents.iter().zip(strides) {
        let reach = (e - 1).checked_mul(s).ok_or(LayoutCopyError::Overflow)?;
        if reach < 0 {
            lo = lo.checked_add(reach).ok_or(LayoutCopyError::Overflow)?;
        } else {
            hi = hi.checked_add(reach).ok_or(LayoutCopyError::Overflow)?;
        }
    }
    Ok(Some((lo, hi)))
}

fn check_modes(extents: &[i64], strides: &[i64]) -> Result<(), LayoutCopyError> {
    if extents.len() != strides.len() {
        return Err(LayoutCopyError::RankMismatch {
            extents: extents.len(),
            strides: strides.len(),
        });
    }
    if let Some((leaf, &extent)) = extents.iter().enumerate().find(|(_, &e)| e < 0) {
        return Err(LayoutCopyError::NegativeExtent { leaf, extent });
    }
    Ok(())
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
    unsafe {
        copy_strided(
            src_base, src_offset, strides, dst_base, dst_offset, strides, extents, elem_size,
        )
    }
}

/// One loop level after simplification: trip count and per-step strides in elements.
#[derive(Clone, Copy, Debug)]
struct Mode {
    n: usize,
    s: isize,
    d: isize,
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
    let byte_span =
        |offset: i64, strides: &[i64]| -> Result<Option<(isize, isize)>, LayoutCopyError> {
            let Some((lo, hi)) = addressed_range(extents, strides)? else {
                return Ok(None);
            };
            let es = elem_size as i64;
            let lo = offset.checked_add(lo).and_then(|v| v.checked_mul(es));
            let hi = offset
                .checked_add(hi)
                .and_then(|v| v.checked_add(1))
                .and_then(|v| v.checked_mul(es));
            match (
                lo.and_then(|v| isize::try_from(v).ok()),
                hi.and_then(|v| isize::try_from(v).ok()),
            ) {
                (Some(l), Some(h)) => Ok(Some((l, h))),
                _ => Err(LayoutCopyError::Overflow),
            }
        };
    let Some(_) = byte_span(src_offset, src_strides)? else {
        return Ok(());
    };
    byte_span(dst_offset, dst_strides)?;

    let modes = simplify(extents, src_strides, dst_strides);
    // SAFETY (for the `add`/`offset` below): the byte spans above fit isize, and the caller
    // guarantees the bases are valid at every addressed slot, so these pointers stay inside
    // the allocations (or one step outside, never dereferenced).
    let src = unsafe { src_base.offset(src_offset as isize * elem_size as isize) };
    let dst = unsafe { dst_base.offset(dst_offset as isize * elem_size as isize) };
    // SAFETY: forwarded contract; each kernel only touches the addressed slots.
    unsafe {
        match elem_size {
            1 => run::<u8>(src, dst, &modes),
            2 => run::<u16>(src, dst, &modes),
            4 => run::<u32>(src, dst, &modes),
            8 => run::<u64>(src, dst, &modes),
            16 => run::<u128>(src, dst, &modes),
            _ => run_bytes(src, dst, &modes, elem_size),
        }
    }
    Ok(())
}

/// Reorders and fuses loop levels without changing which (source, destination) slot pairs
/// are visited: extent-1 levels and levels that revisit the same pair (both strides 0) are
/// dropped, levels are sorted so the smallest destination stride is innermost (sequential
/// writes), and adjacent levels that continue each other on both sides are fused, so a
/// contiguous layout becomes one level of stride 1 — a single memcpy.
fn simplify(extents: &[i64], src_strides: &[i64], dst_strides: &[i64]) -> Vec<Mode> {
    let mut modes: Vec<Mode> = extents
        .iter()
        .zip(src_strides.iter().zip(dst_strides))
        .filter(|(&e, (&s, &d))| e > 1 && !(s == 0 && d == 0))
        .map(|(&e, (&s, &d))| Mode {
            n: e as usize,
            s: s as isize,
            d: d as isize,
        })
        .collect();
    modes.sort_by_key(|m| (m.d.unsigned_abs(), m.s.unsigned_abs()));
    let mut fused: Vec<Mode> = Vec::with_capacity(modes.len());
    for m in modes {
        if let Some(last) = fused.last_mut() {
            let n = last.n as isize;
            if m.s == last.s * n && m.d == last.d * n {
                last.n *= m.n;
                continue;
            }
        }
        fused.push(m);
    }
    fused
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
                dst.offset(k * m.d)
                    .write_unaligned(src.offset(k * m.s).read_unaligned());
            }
        }
    }
}

/// Odometer over the outer levels; the two innermost levels are plain loops so that short
/// inner runs (a gapped layout's small contiguous pieces) do not pay the odometer per run.
///
/// # Safety
/// As for [`inner`], for every slot `modes` visits.
unsafe fn run<T: Copy>(src: *const u8, dst: *mut u8, modes: &[Mode]) {
    let src = src as *const T;
    let dst = dst as *mut T;
    let unit = Mode { n: 1, s: 0, d: 0 };
    let m0 = modes.first().copied().unwrap_or(unit);
    let m1 = modes.get(1).copied().unwrap_or(unit);
    let outer = modes.get(2..).unwrap_or(&[]);
    let mut idx = vec![0usize; outer.len()];
    let (mut sp, mut dp) = (0isize, 0isize);
    loop {
        for j in 0..m1.n as isize {
            // SAFETY: (sp + j*m1.s, dp + j*m1.d) is a visited slot pair's run start.
            unsafe { inner(src.offset(sp + j * m1.s), dst.offset(dp + j * m1.d), m0) };
        }
        if !advance(&mut idx, outer, &mut sp, &mut dp) {
            return;
        }
    }
}

/// One odometer step over `modes` (first mode fastest): bump the coordinate `idx` and the
/// source/destination slot offsets `sp`/`dp` that track it. False once every coordinate has
/// been visited.
fn advance(idx: &mut [usize], modes: &[Mode], sp: &mut isize, dp: &mut isize) -> bool {
    for (k, m) in modes.iter().enumerate() {
        idx[k] += 1;
        *sp += m.s;
        *dp += m.d;
        if idx[k] < m.n {
            return true;
        }
        *sp -= m.s * m.n as isize;
        *dp -= m.d * m.n as isize;
        idx[k] = 0;
    }
    false
}

/// Element sizes without a matching integer type: one small memcpy per element.
///
/// # Safety
/// As for [`inner`], with elements of `es` bytes.
unsafe fn run_bytes(src: *const u8, dst: *mut u8, modes: &[Mode], es: usize) {
    let mut idx = vec![0usize; modes.len()];
    let (mut sp, mut dp) = (0isize, 0isize);
    let es_i = es as isize;
    loop {
        // SAFETY: (sp, dp) is a visited slot pair; the caller guarantees validity/disjointness.
        unsafe { std::ptr::copy_nonoverlapping(src.offset(sp * es_i), dst.offset(dp * es_i), es) };
        if !advance(&mut idx, modes, &mut sp, &mut dp) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::fs::OpenOptions;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Every coordinate's (src, dst) slot pair, by the definition.
    fn brute_pairs(extents: &[i64], ss: &[i64], ds: &[i64], so: i64, dof: i64) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        if extents.contains(&0) {
            return out;
        }
        let mut c = vec![0i64; extents.len()];
        loop {
            let si: i64 = so + c.iter().zip(ss).map(|(a, b)| a * b).sum::<i64>();
            let di: i64 = dof + c.iter().zip(ds).map(|(a, b)| a * b).sum::<i64>();
            out.push((si, di));
            let mut k = 0;
            loop {
                if k == c.len() {
                    return out;
                }
                c[k] += 1;
                if c[k] < extents[k] {
                    break;
                }
                c[k] = 0;
                k += 1;
            }
        }
    }

    /// Runs the layout copy on byte buffers whose elements are distinct, and compares the
    /// whole destination (addressed slots copied, others untouched) to the definition.
    fn check_layout(extents: &[i64], strides: &[i64], so: i64, dof: i64, es: usize) {
        let (lo, hi) = addressed_range(extents, strides)
            .unwrap()
            .unwrap_or_default();
        let slots = (hi - lo + 1 + so.max(dof) + 2) as usize;
        let (so, dof) = (so - lo, dof - lo);
        let src: Vec<u8> = (0..slots * es).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0xEEu8; slots * es];
        let mut want = dst.clone();
        for (si, di) in brute_pairs(extents, strides, strides, so, dof) {
            let (si, di) = (si as usize * es, di as usize * es);
            want[di..di + es].copy_from_slice(&src[si..si + es]);
        }
        // SAFETY: the buffers cover every addressed slot (sized from addressed_range) and are
        // distinct allocations.
        unsafe {
            copy_layout_elements(
                src.as_ptr(),
                so,
                dst.as_mut_ptr(),
                dof,
                extents,
                strides,
                es,
            )
            .unwrap()
        };
        assert_eq!(dst, want, "extents {extents:?} strides {strides:?} es {es}");
    }

    #[test]
    fn contiguous_layout_is_one_span() {
        check_layout(&[4, 3, 2], &[1, 4, 12], 0, 0, 4);
        assert_eq!(simplify(&[4, 3, 2], &[1, 4, 12], &[1, 4, 12]).len(), 1);
    }

    #[test]
    fn gapped_hierarchical_layout_copies_only_addressed_slots() {
        // ((2, 3), 4) : ((1, 5), 20) leaves gaps after every pair and after every block.
        check_layout(&[2, 3, 4], &[1, 5, 20], 3, 1, 4);
        check_layout(&[2, 3, 4], &[1, 5, 20], 0, 0, 8);
        check_layout(&[2, 3, 4], &[1, 5, 20], 2, 0, 1);
        check_layout(&[40, 3], &[1, 50], 0, 0, 4);
    }

    #[test]
    fn broadcast_and_negative_strides() {
        check_layout(&[2, 3], &[1, 0], 0, 0, 4);
        check_layout(&[3, 2], &[0, 0], 1, 0, 8);
        check_layout(&[5, 2], &[-1, 7], 0, 0, 4);
    }

    #[test]
    fn odd_element_sizes() {
        check_layout(&[3, 4], &[2, 9], 1, 0, 3);
        check_layout(&[3, 4], &[1, 3], 0, 0, 16);
        check_layout(&[20], &[1], 0, 5, 2);
    }

    #[test]
    fn empty_layout_copies_nothing() {
        check_layout(&[3, 0, 2], &[1, 3, 0], 0, 0, 4);
        check_layout(&[], &[], 2, 1, 4);
        let src = [1u8; 4];
        let mut dst = [0u8; 4];
        // SAFETY: a zero extent addresses nothing, so the pointers are never read or written.
        unsafe {
            copy_layout_elements(src.as_ptr(), 0, dst.as_mut_ptr(), 0, &[0], &[1], 4).unwrap()
        };
        assert_eq!(dst, [0; 4]);
    }

    #[test]
    fn bad_modes_are_refused_before_copying() {
        let src = [1u8; 8];
        let mut dst = [0u8; 8];
        let p = (src.as_ptr(), dst.as_mut_ptr());
        // SAFETY: each call is refused during validation and touches no memory.
        unsafe {
            assert_eq!(
                copy_layout_elements(p.0, 0, p.1, 0, &[2], &[1, 2], 4),
                Err(LayoutCopyError::RankMismatch {
                    extents: 1,
                    strides: 2
                })
            );
            assert_eq!(
                copy_layout_elements(p.0, 0, p.1, 0, &[2, -1], &[1, 2], 4),
                Err(LayoutCopyError::NegativeExtent {
                    leaf: 1,
                    extent: -1
                })
            );
            assert_eq!(
                copy_layout_elements(p.0, 0, p.1, 0, &[2], &[1], 0),
                Err(LayoutCopyError::ZeroElementSize)
            );
            assert_eq!(
                copy_layout_elements(p.0, 0, p.1, 0, &[3], &[i64::MAX / 2], 4),
                Err(LayoutCopyError::Overflow)
            );
        }
        assert_eq!(dst, [0; 8]);
    }

    #[test]
    fn gather_compacts_a_gapped_layout() {
        let extents = [2i64, 3, 4];
        let ss = [1i64, 5, 20];
        let ds = [1i64, 2, 6];
        let src: Vec<u32> = (0..80).collect();
        let mut dst = vec![u32::MAX; 24];
        // SAFETY: src covers slots up to 1+10+60=71 < 80, dst covers 0..24; distinct buffers.
        unsafe {
            copy_strided(
                src.as_ptr().cast(),
                0,
                &ss,
                dst.as_mut_ptr().cast(),
                0,
                &ds,
                &extents,
                4,
            )
            .unwrap()
        };
        let want: Vec<u32> = brute_pairs(&extents, &ss, &ds, 0, 0).into_iter().fold(
            vec![u32::MAX; 24],
            |mut w, (s, d)| {
                w[d as usize] = src[s as usize];
                w
            },
        );
        assert_eq!(dst, want);
        assert!(dst.iter().all(|&v| v != u32::MAX));
    }

    proptest! {
        #[test]
        fn layout_copy_matches_definition(
            modes in proptest::collection::vec((0i64..5, -6i64..12), 0..5),
            so in 0i64..4,
            dof in 0i64..4,
            es in prop_oneof![Just(1usize), Just(2), Just(4), Just(8), Just(3)],
        ) {
            let extents: Vec<i64> = modes.iter().map(|m| m.0).collect();
            let strides: Vec<i64> = modes.iter().map(|m| m.1).collect();
            check_layout(&extents, &strides, so, dof, es);
        }

        #[test]
        fn gather_matches_definition_for_injective_destinations(
            extents in proptest::collection::vec(1i64..5, 1..4),
            src_strides in proptest::collection::vec(-5i64..9, 4),
            perm_seed in 0usize..24,
        ) {
            // Destination: a permuted column-major packing, which is injective.
            let n = extents.len();
            let mut order: Vec<usize> = (0..n).collect();
            order.rotate_left(perm_seed % n);
            let mut ds = vec![0i64; n];
            let mut acc = 1;
            for &k in &order { ds[k] = acc; acc *= extents[k]; }
            let ss = &src_strides[..n];
            let (lo, hi) = addressed_range(&extents, ss).unwrap().unwrap();
            let src: Vec<u64> = (0..(hi - lo + 1) as u64).map(|v| v * 31 + 1).collect();
            let mut dst = vec![0u64; acc as usize];
            // SAFETY: src covers offset -lo plus [lo, hi]; dst covers the packed range.
            unsafe {
                copy_strided(src.as_ptr().cast(), -lo, ss, dst.as_mut_ptr().cast(), 0, &ds, &extents, 8).unwrap()
            };
            let mut want = vec![0u64; acc as usize];
            for (s, d) in brute_pairs(&extents, ss, &ds, -lo, 0) {
                want[d as usize] = src[s as usize];
            }
            prop_assert_eq!(dst, want);
        }
    }

    #[test]
    fn host_span_copy() {
        let src: Vec<u8> = (0..=255).collect();
        let mut dst = vec![0u8; 256];
        // SAFETY: both buffers hold 256 bytes and are distinct.
        unsafe { copy_span_host_to_host(src.as_ptr(), dst.as_mut_ptr(), 256) };
        assert_eq!(src, dst);
        // SAFETY: zero bytes: the pointers are not used.
        unsafe { copy_span_host_to_host(std::ptr::null(), std::ptr::null_mut(), 0) };
    }

    struct TempPath(PathBuf);
    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    fn temp_file() -> (TempPath, File) {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "strideweave-copy-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&p)
            .unwrap();
        (TempPath(p), f)
    }

    #[test]
    fn file_round_trip_across_many_chunks() {
        let (_p, f) = temp_file();
        let data: Vec<u8> = (0..100_003u32).map(|i| (i % 251) as u8).collect();
        // A tiny chunk forces the continuation logic that large chunks rarely exercise.
        file_write_chunked(&f, 17, &data, 4096).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 17 + data.len() as u64);
        let mut back = vec![0u8; data.len()];
        file_read_chunked(&f, 17, &mut back, 999).unwrap();
        assert_eq!(back, data);
        let mut again = vec![0u8; data.len()];
        file_read_into_host(&f, 17, &mut again).unwrap();
        assert_eq!(again, data);
    }

    #[test]
    fn reading_past_the_end_is_unexpected_eof() {
        let (_p, f) = temp_file();
        file_write_from_host(&f, 0, &[1, 2, 3]).unwrap();
        let mut dst = [0u8; 8];
        let e = file_read_into_host(&f, 0, &mut dst).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn writing_to_a_read_only_handle_fails() {
        let (p, f) = temp_file();
        drop(f);
        let ro = File::open(&p.0).unwrap();
        assert!(file_write_from_host(&ro, 0, &[1, 2, 3]).is_err());
    }

    #[test]
    fn file_to_file_copy_between_and_within_files() {
        let (_a, fa) = temp_file();
        let (_b, fb) = temp_file();
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 13 % 256) as u8).collect();
        file_write_from_host(&fa, 0, &data).unwrap();
        file_copy(&fa, 100, &fb, 7, 40_000).unwrap();
        let mut back = vec![0u8; 40_000];
        file_read_into_host(&fb, 7, &mut back).unwrap();
        assert_eq!(back, &data[100..40_100]);
        // Source too short.
        assert!(file_copy(&fa, 45_000, &fb, 0, 10_000).is_err());
    }

    #[test]
    fn overlapping_bounce_copy_behaves_like_memmove() {
        for (src_off, dst_off) in [(0u64, 300u64), (300, 0)] {
            let (_a, fa) = temp_file();
            let data: Vec<u8> = (0..2000u32).map(|i| (i % 256) as u8).collect();
            file_write_from_host(&fa, 0, &data).unwrap();
            bounce_copy(&fa, src_off, &fa, dst_off, 1000, 128).unwrap();
            let mut back = vec![0u8; 1000];
            file_read_into_host(&fa, dst_off, &mut back).unwrap();
            assert_eq!(back, &data[src_off as usize..src_off as usize + 1000]);
        }
    }
}
