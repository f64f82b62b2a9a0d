//! Aligned I/O on an `O_DIRECT` descriptor: bounce buffers, full reads and writes, and the
//! widening of arbitrary byte ranges to whole blocks (read-modify-write of partial blocks).

use std::fs::File;
use std::io;
use std::ops::Range;

use super::{BlockError, CHUNK_BYTES};

/// A heap buffer whose address is aligned for direct I/O.
pub(super) struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: AlignedBuf uniquely owns its allocation (like a Box<[u8]>); moving it between
// threads moves that ownership, and shared references only allow reads.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above; `&AlignedBuf` exposes only `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    pub(super) fn zeroed(len: usize, align: usize) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(len.max(align), align)
            .expect("bounce buffer layout: alignment is a power of two and size is small");
        // SAFETY: the layout has a non-zero size (at least `align` >= 1 bytes).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, layout }
    }

    fn len(&self) -> usize {
        self.layout.size()
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        // SAFETY: the pointer owns `layout.size()` initialized (zeroed at allocation) bytes,
        // and `&self` rules out a concurrent `&mut` for the returned lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the pointer owns `layout.size()` initialized (zeroed at allocation) bytes,
        // and `&mut self` guarantees exclusive access for the returned lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` was returned by `alloc_zeroed` with exactly this layout and is freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Positioned I/O on a `File`, kept behind a tiny shim so the transfer logic is the same on
/// every Unix (and so unit tests can drive it with a regular file).
pub(super) fn read_at(file: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_at(file, buf, off)
    }
    #[cfg(windows)]
    {
        std::os::windows::fs::FileExt::seek_read(file, buf, off)
    }
}

pub(super) fn write_at(file: &File, buf: &[u8], off: u64) -> io::Result<usize> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_at(file, buf, off)
    }
    #[cfg(windows)]
    {
        std::os::windows::fs::FileExt::seek_write(file, buf, off)
    }
}

/// Reads exactly `buf.len()` bytes at `off`, retrying short transfers and `EINTR`.
pub(super) fn read_full(file: &File, buf: &mut [u8], off: u64) -> Result<(), BlockError> {
    let mut done = 0usize;
    while done < buf.len() {
        match read_at(file, &mut buf[done..], off + done as u64) {
            Ok(0) => return Err(BlockError::ZeroTransfer { offset: off + done as u64, write: false }),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(BlockError::Io(e)),
        }
    }
    Ok(())
}

/// Writes exactly `buf.len()` bytes at `off`, retrying short transfers and `EINTR`.
pub(super) fn write_full(file: &File, buf: &[u8], off: u64) -> Result<(), BlockError> {
    let mut done = 0usize;
    while done < buf.len() {
        match write_at(file, &buf[done..], off + done as u64) {
            Ok(0) => return Err(BlockError::ZeroTransfer { offset: off + done as u64, write: true }),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(BlockError::Io(e)),
        }
    }
    Ok(())
}

/// Bounced transfers smaller than this copy inline: a helper thread would cost more than the
/// memcpy it hides.
const PIPELINE_MIN_BYTES: usize = 256 << 10;

/// Two aligned bounce buffers, grown on demand and kept across calls so that element access
/// does not allocate per call.
#[derive(Default)]
pub(super) struct Bounces([Option<AlignedBuf>; 2]);

impl Bounces {
    /// Buffer `i` grown to at least `len` bytes, and the other buffer (possibly empty).
    fn pair(&mut self, i: usize, len: usize, align: usize) -> (&mut [u8], &[u8]) {
        let [b0, b1] = &mut self.0;
        let (cur, other) = if i == 0 { (b0, b1) } else { (b1, b0) };
        if cur.as_ref().is_none_or(|b| b.len() < len) {
            *cur = Some(AlignedBuf::zeroed(len, align));
        }
        let cur = cur.as_mut().map_or(&mut [][..], |b| b.as_mut_slice());
        let other = other.as_ref().map_or(&[][..], |b| b.as_slice());
        (cur, other)
    }
}

/// The transfer engine for one open file: knows whether direct I/O is on and which
/// alignments it imposes.
pub(super) struct Io<'a> {
    pub(super) file: &'a File,
    pub(super) direct: bool,
    /// File offsets and lengths of direct transfers are multiples of this.
    pub(super) align: u64,
    /// Memory addresses of direct transfers are multiples of this.
    pub(super) mem_align: usize,
}

pub(super) fn round_down(x: u64, a: u64) -> u64 {
    x - x % a
}

impl Io<'_> {
    /// Every transfer on a direct descriptor goes through these two, which assert (in debug
    /// builds, i.e. under `cargo test`) the alignment `O_DIRECT` demands.
    fn direct_read(&self, buf: &mut [u8], off: u64) -> Result<(), BlockError> {
        self.debug_check_aligned(buf.as_ptr(), buf.len(), off);
        read_full(self.file, buf, off)
    }

    fn direct_write(&self, buf: &[u8], off: u64) -> Result<(), BlockError> {
        self.debug_check_aligned(buf.as_ptr(), buf.len(), off);
        write_full(self.file, buf, off)
    }

    fn debug_check_aligned(&self, ptr: *const u8, len: usize, off: u64) {
        debug_assert!(
            off % self.align == 0 && len as u64 % self.align == 0 && ptr as usize % self.mem_align == 0,
            "misaligned direct transfer: offset {off}, length {len}, address {ptr:p}"
        );
    }

    /// The aligned pieces covering `[off, off + len)`: `(piece_start, piece_len, lo, hi)` where
    /// `[lo, hi)` is the part of the request inside the piece. A partially covered first or
    /// last block is a piece of its own (one alignment unit), so the chunks in between are
    /// whole and can go straight to or from the caller's memory when its address allows.
    fn pieces(&self, off: u64, len: u64) -> impl Iterator<Item = (u64, u64, u64, u64)> {
        let a = self.align;
        let end = off + len;
        let aend = round_down(end + a - 1, a);
        let mid_end = round_down(end, a);
        let chunk = CHUNK_BYTES as u64;
        let mut p = round_down(off, a);
        std::iter::from_fn(move || {
            if p >= aend {
                return None;
            }
            let plen = if p < off || p >= mid_end { a } else { chunk.min(mid_end - p) };
            let item = (p, plen, p.max(off), (p + plen).min(end));
            p += plen;
            Some(item)
        })
    }

    pub(super) fn read(&self, off: u64, out: &mut [u8], bounces: &mut Bounces) -> Result<(), BlockError> {
        if !self.direct {
            for (i, piece) in out.chunks_mut(CHUNK_BYTES).enumerate() {
                read_full(self.file, piece, off + (i * CHUNK_BYTES) as u64)?;
            }
            return Ok(());
        }
        // Bounced pieces alternate between the two buffers: while piece k is read into one,
        // a helper thread copies piece k-1 out of the other, so the memcpy hides behind I/O.
        let mut pending: Option<(Range<usize>, Range<usize>)> = None;
        let mut next = 0usize;
        for (p, plen, lo, hi) in self.pieces(off, out.len() as u64) {
            let dst = (lo - off) as usize..(hi - off) as usize;
            let whole = lo == p && hi == p + plen;
            if whole && (out[dst.clone()].as_ptr() as usize) % self.mem_align == 0 {
                self.direct_read(&mut out[dst], p)?;
                continue;
            }
            let plen = plen as usize;
            let (cur, prev) = bounces.pair(next, plen, self.buffer_align());
            next ^= 1;
            match pending.take() {
                Some((pdst, psrc)) if psrc.len() >= PIPELINE_MIN_BYTES => {
                    let (dst_prev, src_prev) = (&mut out[pdst], &prev[psrc]);
                    std::thread::scope(|sc| {
                        sc.spawn(|| dst_prev.copy_from_slice(src_prev));
                        self.direct_read(&mut cur[..plen], p)
                    })?;
                }
                Some((pdst, psrc)) => {
                    out[pdst].copy_from_slice(&prev[psrc]);
                    self.direct_read(&mut cur[..plen], p)?;
                }
                None => self.direct_read(&mut cur[..plen], p)?,
            }
            pending = Some((dst, (lo - p) as usize..(hi - p) as usize));
        }
        if let Some((pdst, psrc)) = pending {
            // The last bounced piece used the buffer `next` no longer points at.
            let (_, last) = bounces.pair(next, 0, self.buffer_align());
            out[pdst].copy_from_slice(&last[psrc]);
        }
        Ok(())
    }

    pub(super) fn write(&self, off: u64, data: &[u8], bounces: &mut Bounces) -> Result<(), BlockError> {
        if !self.direct {
            for (i, piece) in data.chunks(CHUNK_BYTES).enumerate() {
                write_full(self.file, piece, off + (i * CHUNK_BYTES) as u64)?;
            }
            return Ok(());
        }
        // Mirror image of `read`: piece k is copied into one bounce buffer by a helper thread
        // while piece k-1 is written from the other. `pending` is a filled buffer not yet
        // written: (device offset, length).
        let mut pending: Option<(u64, usize)> = None;
        let mut next = 0usize;
        for (p, plen, lo, hi) in self.pieces(off, data.len() as u64) {
            let src = &data[(lo - off) as usize..(hi - off) as usize];
            let whole = lo == p && hi == p + plen;
            if whole && (src.as_ptr() as usize) % self.mem_align == 0 {
                self.direct_write(src, p)?;
                continue;
            }
            let plen = plen as usize;
            let (cur, prev) = bounces.pair(next, plen, self.buffer_align());
            next ^= 1;
            if whole {
                match pending.take() {
                    Some((pp, pl)) if plen >= PIPELINE_MIN_BYTES => {
                        let fill = &mut cur[..plen];
                        std::thread::scope(|sc| {
                            sc.spawn(|| fill.copy_from_slice(src));
                            self.direct_write(&prev[..pl], pp)
                        })?;
                    }
                    Some((pp, pl)) => {
                        self.direct_write(&prev[..pl], pp)?;
                        cur[..plen].copy_from_slice(src);
                    }
                    None => cur[..plen].copy_from_slice(src),
                }
            } else {
                // A partially covered block (pieces() makes it exactly one alignment unit):
                // read-modify-write, so the bytes around the request keep their values.
                if let Some((pp, pl)) = pending.take() {
                    self.direct_write(&prev[..pl], pp)?;
                }
                self.direct_read(&mut cur[..plen], p)?;
                cur[(lo - p) as usize..(hi - p) as usize].copy_from_slice(src);
            }
            pending = Some((p, plen));
        }
        if let Some((pp, pl)) = pending {
            let (_, last) = bounces.pair(next, 0, self.buffer_align());
            self.direct_write(&last[..pl], pp)?;
        }
        Ok(())
    }

    /// Bounce buffers serve both as direct-I/O memory and as whole alignment units.
    fn buffer_align(&self) -> usize {
        (self.align as usize).max(self.mem_align)
    }

    /// Zero-fills an aligned range in chunk-sized writes from a zeroed bounce buffer.
    pub(super) fn zero(&self, off: u64, len: u64, bounces: &mut Bounces) -> Result<(), BlockError> {
        let chunk = (CHUNK_BYTES as u64).min(len) as usize;
        let (b, _) = bounces.pair(0, chunk, self.buffer_align());
        let b = &mut b[..chunk];
        b.fill(0);
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(chunk as u64) as usize;
            self.direct_write(&b[..n], off + done)?;
            done += n as u64;
        }
        Ok(())
    }
}
