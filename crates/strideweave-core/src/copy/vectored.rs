//! Positioned gather writes and scatter reads (`pwritev`/`preadv`): many host ranges to or from
//! one contiguous file range in a single system call, with no bounce buffer.
//!
//! The batched tile copies use these where a run of tiles (or a tile's rows) sits back to back
//! in a file but apart in memory: evicting a thousand 16 KiB tiles into consecutive slab
//! regions is a handful of calls instead of a thousand, and no byte is copied twice.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use super::{offset_after, reserve_blocks};

/// Most ranges one call takes (Linux `IOV_MAX`); longer lists are split.
pub const MAX_RANGES: usize = 1024;

fn file_offset(off: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(off).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file offset exceeds off_t"))
}

/// Writes `parts` back to back to `file` from byte `file_byte_off`, reserving the range's
/// blocks first (a full disk fails before a byte is written, as `file_write_from_host` does).
/// Short writes are continued and `EINTR` is retried; on error some prefix may be written.
pub fn file_write_gather(file: &File, file_byte_off: u64, parts: &[&[u8]]) -> io::Result<()> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    reserve_blocks(file, file_byte_off, total)?;
    let mut iovecs: Vec<libc::iovec> =
        parts.iter().map(|p| libc::iovec { iov_base: p.as_ptr().cast_mut().cast(), iov_len: p.len() }).collect();
    // SAFETY: each iovec points into a slice borrowed for the call; pwritev only reads them.
    unsafe {
        transfer(
            &mut iovecs,
            file_byte_off,
            |iov, count, off| libc::pwritev(file.as_raw_fd(), iov, count, off),
            || io::Error::new(io::ErrorKind::WriteZero, "positioned write made no progress"),
        )
    }
}

/// Fills the host ranges `parts` (`(start, len)`) back to back from `file` starting at byte
/// `file_byte_off`. Short reads are continued and `EINTR` is retried; the end of file first
/// is `UnexpectedEof`. On error the ranges may be partly overwritten.
///
/// Ranges are raw so that a caller can pass ranges of one buffer without holding several
/// `&mut` borrows of it at once; the kernel fills them in order.
///
/// # Safety
/// Every range is valid for writes of `len` bytes for the whole call, and nothing else reads
/// or writes any of them meanwhile.
pub unsafe fn file_read_scatter(file: &File, file_byte_off: u64, parts: &[(*mut u8, usize)]) -> io::Result<()> {
    let total: usize = parts.iter().map(|p| p.1).sum();
    let mut iovecs: Vec<libc::iovec> =
        parts.iter().map(|&(base, len)| libc::iovec { iov_base: base.cast(), iov_len: len }).collect();
    let end = offset_after(file_byte_off, total)?;
    // SAFETY: the caller vouches for every range (this function's contract).
    unsafe {
        transfer(
            &mut iovecs,
            file_byte_off,
            |iov, count, off| libc::preadv(file.as_raw_fd(), iov, count, off),
            || io::Error::new(io::ErrorKind::UnexpectedEof, format!("file ends before byte {end}")),
        )
    }
}

/// Runs `call(iovecs, count, file offset)` (a `preadv` or `pwritev`) until every range is
/// done: at most `MAX_RANGES` ranges a call, continuing after short transfers and `EINTR`;
/// a call that moves nothing is `stalled()`.
///
/// # Safety
/// Every iovec is valid for the transfer `call` makes for the whole call.
unsafe fn transfer(
    iovecs: &mut [libc::iovec],
    file_byte_off: u64,
    call: impl Fn(*const libc::iovec, libc::c_int, libc::off_t) -> isize,
    stalled: impl Fn() -> io::Error,
) -> io::Result<()> {
    let (mut first, mut done) = (0usize, 0usize);
    while first < iovecs.len() {
        if iovecs[first].iov_len == 0 {
            first += 1;
            continue;
        }
        let count = (iovecs.len() - first).min(MAX_RANGES);
        let n = call(iovecs[first..].as_ptr(), count as libc::c_int, file_offset(offset_after(file_byte_off, done)?)?);
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(stalled());
        }
        done += n as usize;
        // Skip the ranges the call finished and trim the one it did in part.
        let mut left = n as usize;
        while left > 0 {
            let v = &mut iovecs[first];
            if left >= v.iov_len {
                left -= v.iov_len;
                first += 1;
            } else {
                // SAFETY: `left < iov_len`, so the new base stays inside the same range.
                v.iov_base = unsafe { v.iov_base.cast::<u8>().add(left) }.cast();
                v.iov_len -= left;
                left = 0;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn temp_file(tag: &str) -> (File, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("sw-vectored-{}-{tag}", std::process::id()));
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        (file, path)
    }

    #[test]
    fn gather_and_scatter_round_trip_more_ranges_than_one_call_takes() {
        let (file, path) = temp_file("many");
        let parts: Vec<Vec<u8>> = (0..(MAX_RANGES + 7)).map(|k| vec![(k % 251) as u8; 1 + k % 5]).collect();
        let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        file_write_gather(&file, 3, &refs).unwrap();
        let flat: Vec<u8> = parts.concat();
        let mut back = vec![0u8; flat.len()];
        file.read_exact_at(&mut back, 3).unwrap();
        assert_eq!(back, flat);
        let mut outs: Vec<Vec<u8>> = parts.iter().map(|p| vec![0u8; p.len()]).collect();
        let ranges: Vec<(*mut u8, usize)> = outs.iter_mut().map(|o| (o.as_mut_ptr(), o.len())).collect();
        // SAFETY: each range is a distinct live vector, untouched during the call.
        unsafe { file_read_scatter(&file, 3, &ranges) }.unwrap();
        assert_eq!(outs, parts);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn reading_past_the_end_is_unexpected_eof() {
        let (file, path) = temp_file("eof");
        file.write_all_at(&[1, 2, 3], 0).unwrap();
        let (mut a, mut b) = ([0u8; 2], [0u8; 2]);
        // SAFETY: two live local arrays, untouched during the call.
        let err = unsafe { file_read_scatter(&file, 0, &[(a.as_mut_ptr(), 2), (b.as_mut_ptr(), 2)]) }.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        std::fs::remove_file(path).unwrap();
    }
}
