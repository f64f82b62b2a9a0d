//! Block-device storage: a raw block-special node (a loop device, a disk partition) used as
//! a flat byte space carved into extents.
//!
//! The device is opened with `O_DIRECT` where the kernel allows it, so every transfer must
//! use a file offset, a length and a memory address aligned to the device's blocks. Callers
//! address single `f32` slots at arbitrary byte offsets, so the I/O layer widens every request
//! to the enclosing aligned blocks, stages unaligned pieces through an aligned bounce buffer
//! (read-modify-write for partial blocks) and sends aligned bulk transfers straight from the
//! caller's memory in large chunks.
//!
//! Failure model: any OS error or zero-byte transfer during I/O puts the device in a
//! *faulted* state; from then on reads, writes and allocations fail, while `free` and `close`
//! still work so that the owner can tear everything down. A fault is sticky on purpose: after
//! a failed write the device contents are unknown, and silently continuing could lose values.
//!
//! All state lives behind one mutex per device, which both serializes I/O (the read-modify-write
//! of a shared block must not interleave with another writer) and keeps the allocator coherent.

// `u64::is_multiple_of` needs Rust 1.87; the workspace's MSRV is 1.85.
#![allow(clippy::manual_is_multiple_of)]

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io;
use std::ops::Range;

use parking_lot::Mutex;

/// Largest single transfer (and bounce buffer) size. Large enough that syscall overhead is
/// negligible next to the device's bandwidth, small enough that the bounce buffer stays cheap.
pub const CHUNK_BYTES: usize = 8 << 20;

/// Largest block size accepted as sane geometry; keeps `CHUNK_BYTES` a multiple of the
/// allocation alignment.
const MAX_BLOCK_SIZE: u32 = 1 << 20;

/// Errors of the block-device layer. The binding maps each variant to the Python exception
/// type the spec names (see `strideweave-py/src/block.rs`).
#[derive(Debug)]
pub enum BlockError {
    /// Block devices are only implemented on Linux.
    Unsupported,
    /// The path cannot name a file (it contains NUL).
    InvalidPath(String),
    /// The path names something that is not a block-special node.
    NotBlockDevice(String),
    /// Capacity or block sizes the I/O layer cannot work with.
    BadGeometry(String),
    /// Opening (or querying) the device failed; the device was never usable.
    Open(io::Error),
    /// An OS error during a transfer; the device is now faulted.
    Io(io::Error),
    /// The OS transferred zero bytes where data was expected; the device is now faulted.
    ZeroTransfer { offset: u64, write: bool },
    /// The device was closed.
    Closed,
    /// The device faulted earlier; the message names the original cause.
    Faulted(String),
    /// No free range is large enough.
    NoSpace { requested: u64, capacity: u64 },
    /// A byte range that is not inside one live extent.
    OutOfRange { offset: u64, len: u64 },
    /// `free` of an extent that is not live.
    UnknownExtent { offset: u64, len: u64 },
}

impl BlockError {
    /// Whether this error put (or found) the device in the faulted state.
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            BlockError::Io(_) | BlockError::ZeroTransfer { .. } | BlockError::Faulted(_)
        )
    }
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockError::Unsupported => {
                write!(f, "block devices are only supported on Linux")
            }
            BlockError::InvalidPath(p) => write!(f, "path {p:?} contains a NUL byte"),
            BlockError::NotBlockDevice(p) => write!(f, "path {p:?} is not a block device"),
            BlockError::BadGeometry(why) => write!(f, "bad geometry: {why}"),
            BlockError::Open(e) => write!(f, "cannot open block device: {e}"),
            BlockError::Io(e) => write!(f, "block device I/O error (device faulted): {e}"),
            BlockError::ZeroTransfer { offset, write } => write!(
                f,
                "zero-byte {} at device offset {offset} (device faulted)",
                if *write { "write" } else { "read" }
            ),
            BlockError::Closed => write!(f, "block device is closed"),
            BlockError::Faulted(cause) => {
                write!(f, "block device is faulted by an earlier error: {cause}")
            }
            BlockError::NoSpace {
                requested,
                capacity,
            } => write!(
                f,
                "no room on the block device for an extent of {requested} bytes \
                 (capacity {capacity} bytes)"
            ),
            BlockError::OutOfRange { offset, len } => write!(
                f,
                "byte range [{offset}, {}) is not inside a live extent",
                offset.saturating_add(*len)
            ),
            BlockError::UnknownExtent { offset, len } => {
                write!(f, "no live extent of {len} bytes at offset {offset}")
            }
        }
    }
}

impl std::error::Error for BlockError {}

/// Device geometry as reported by the kernel (or supplied by a test).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub capacity_bytes: u64,
    pub logical_block_size: u32,
    pub physical_block_size: u32,
}

impl Geometry {
    /// Validates the numbers the I/O layer relies on: a non-empty capacity that is a whole
    /// number of logical blocks, and block sizes that are powers of two no larger than 1 MiB.
    pub fn new(
        capacity_bytes: u64,
        logical_block_size: u32,
        physical_block_size: u32,
    ) -> Result<Self, BlockError> {
        if capacity_bytes == 0 {
            return Err(BlockError::BadGeometry(
                "capacity is 0 bytes (no medium or no backing file?)".into(),
            ));
        }
        for (name, v) in [
            ("logical block size", logical_block_size),
            ("physical block size", physical_block_size),
        ] {
            if v == 0 || !v.is_power_of_two() || v > MAX_BLOCK_SIZE {
                return Err(BlockError::BadGeometry(format!(
                    "{name} {v} is not a power of two between 1 and {MAX_BLOCK_SIZE}"
                )));
            }
        }
        if capacity_bytes % u64::from(logical_block_size) != 0 {
            return Err(BlockError::BadGeometry(format!(
                "capacity {capacity_bytes} is not a multiple of the logical block size \
                 {logical_block_size}"
            )));
        }
        Ok(Geometry {
            capacity_bytes,
            logical_block_size,
            physical_block_size,
        })
    }

    /// Extents start and end on this boundary: the larger block size, so that no two extents
    /// ever share a physical block (a read-modify-write of one never touches the other).
    pub fn allocation_alignment(&self) -> u64 {
        u64::from(self.logical_block_size.max(self.physical_block_size))
    }

    /// Bytes extents may occupy: the capacity rounded down to the alignment, because a
    /// direct transfer of a trailing partial alignment unit would run past the device end.
    pub fn usable_bytes(&self) -> u64 {
        let a = self.allocation_alignment();
        self.capacity_bytes - self.capacity_bytes % a
    }
}

/// A live allocation: `len` bytes at device offset `offset`, both multiples of the alignment.
/// A zero-length extent occupies nothing and is not tracked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub offset: u64,
    pub len: u64,
}

/// A heap buffer whose address is aligned for direct I/O.
struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: AlignedBuf uniquely owns its allocation (like a Box<[u8]>); moving it between
// threads moves that ownership, and shared references only allow reads.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above; `&AlignedBuf` exposes only `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    fn zeroed(len: usize, align: usize) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(len.max(align), align)
            .expect("bounce buffer layout: alignment is a power of two and size is small");
        // SAFETY: the layout has a non-zero size (at least `align` >= 1 bytes).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, layout }
    }

    fn len(&self) -> usize {
        self.layout.size()
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: the pointer owns `layout.size()` initialized (zeroed at allocation) bytes,
        // and `&self` rules out a concurrent `&mut` for the returned lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
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
fn read_at(file: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_at(file, buf, off)
    }
    #[cfg(windows)]
    {
        std::os::windows::fs::FileExt::seek_read(file, buf, off)
    }
}

fn write_at(file: &File, buf: &[u8], off: u64) -> io::Result<usize> {
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
fn read_full(file: &File, buf: &mut [u8], off: u64) -> Result<(), BlockError> {
    let mut done = 0usize;
    while done < buf.len() {
        match read_at(file, &mut buf[done..], off + done as u64) {
            Ok(0) => {
                return Err(BlockError::ZeroTransfer {
                    offset: off + done as u64,
                    write: false,
                })
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(BlockError::Io(e)),
        }
    }
    Ok(())
}

/// Writes exactly `buf.len()` bytes at `off`, retrying short transfers and `EINTR`.
fn write_full(file: &File, buf: &[u8], off: u64) -> Result<(), BlockError> {
    let mut done = 0usize;
    while done < buf.len() {
        match write_at(file, &buf[done..], off + done as u64) {
            Ok(0) => {
                return Err(BlockError::ZeroTransfer {
                    offset: off + done as u64,
                    write: true,
                })
            }
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
struct Bounces([Option<AlignedBuf>; 2]);

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
struct Io<'a> {
    file: &'a File,
    direct: bool,
    /// File offsets and lengths of direct transfers are multiples of this.
    align: u64,
    /// Memory addresses of direct transfers are multiples of this.
    mem_align: usize,
}

fn round_down(x: u64, a: u64) -> u64 {
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
            off % self.align == 0
                && len as u64 % self.align == 0
                && ptr as usize % self.mem_align == 0,
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
            let plen = if p < off || p >= mid_end {
                a
            } else {
                chunk.min(mid_end - p)
            };
            let item = (p, plen, p.max(off), (p + plen).min(end));
            p += plen;
            Some(item)
        })
    }

    fn read(&self, off: u64, out: &mut [u8], bounces: &mut Bounces) -> Result<(), BlockError> {
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

    fn write(&self, off: u64, data: &[u8], bounces: &mut Bounces) -> Result<(), BlockError> {
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
    fn zero(&self, off: u64, len: u64, bounces: &mut Bounces) -> Result<(), BlockError> {
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

struct State {
    /// `None` once closed.
    file: Option<File>,
    /// The cause of the first fault, if any.
    fault: Option<String>,
    /// Live extents, offset → length; never overlapping, all inside `usable_bytes`.
    extents: BTreeMap<u64, u64>,
    bounce: Bounces,
}

/// An open block device with an extent allocator and aligned positioned I/O.
///
/// Every method takes `&self`; a single internal mutex serializes them.
pub struct BlockDevice {
    geometry: Geometry,
    direct: bool,
    state: Mutex<State>,
}

impl fmt::Debug for BlockDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockDevice")
            .field("geometry", &self.geometry)
            .field("direct", &self.direct)
            .finish_non_exhaustive()
    }
}

#[cfg(target_os = "linux")]
mod sys {
    //! The Linux-specific part: open flags, the block-special check and the geometry ioctls.
    use super::{BlockError, Geometry};
    use std::fs::{File, OpenOptions};
    use std::io;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

    const BLKSSZGET: libc::Ioctl = libc::_IO(0x12, 104);
    const BLKPBSZGET: libc::Ioctl = libc::_IO(0x12, 123);
    const BLKGETSIZE64: libc::Ioctl = libc::_IOR::<libc::size_t>(0x12, 114);

    /// Opens `path` read-write with `O_DIRECT` (falling back to buffered I/O when the kernel
    /// refuses `O_DIRECT` with `EINVAL`) and reads its geometry. Writes nothing.
    pub(super) fn open(path: &str) -> Result<(File, Geometry, bool), BlockError> {
        // Check the node type before opening: opening other kinds of node can have side
        // effects (a FIFO, a tty), and "not a block device" must win over e.g. EISDIR.
        let meta = std::fs::metadata(path).map_err(BlockError::Open)?;
        if !meta.file_type().is_block_device() {
            return Err(BlockError::NotBlockDevice(path.to_owned()));
        }
        let open = |flags: i32| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(flags | libc::O_CLOEXEC)
                .open(path)
        };
        let (file, direct) = match open(libc::O_DIRECT) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                (open(0).map_err(BlockError::Open)?, false)
            }
            Err(e) => return Err(BlockError::Open(e)),
        };
        // The node may have been swapped between the stat and the open.
        let meta = file.metadata().map_err(BlockError::Open)?;
        if !meta.file_type().is_block_device() {
            return Err(BlockError::NotBlockDevice(path.to_owned()));
        }
        let fd = file.as_raw_fd();
        let mut capacity: u64 = 0;
        let mut logical: libc::c_int = 0;
        let mut physical: libc::c_uint = 0;
        // SAFETY: `fd` is a valid open descriptor owned by `file`; each ioctl writes exactly
        // one value of the pointee type the kernel ABI documents (u64 for BLKGETSIZE64, int for
        // BLKSSZGET, unsigned int for BLKPBSZGET) into a live local.
        let rcs = unsafe {
            [
                libc::ioctl(fd, BLKGETSIZE64, &mut capacity as *mut u64),
                libc::ioctl(fd, BLKSSZGET, &mut logical as *mut libc::c_int),
                libc::ioctl(fd, BLKPBSZGET, &mut physical as *mut libc::c_uint),
            ]
        };
        if rcs.iter().any(|&rc| rc != 0) {
            return Err(BlockError::Open(io::Error::last_os_error()));
        }
        let logical = u32::try_from(logical)
            .map_err(|_| BlockError::BadGeometry(format!("logical block size {logical}")))?;
        let geometry = Geometry::new(capacity, logical, physical)?;
        Ok((file, geometry, direct))
    }
}

impl BlockDevice {
    /// Opens the block-special node at `path` (Linux only).
    ///
    /// Errors: [`BlockError::InvalidPath`] (NUL in the path), [`BlockError::NotBlockDevice`],
    /// [`BlockError::BadGeometry`], [`BlockError::Open`] (the OS refused),
    /// [`BlockError::Unsupported`] on other systems.
    pub fn open(path: &str) -> Result<BlockDevice, BlockError> {
        if path.contains('\0') {
            return Err(BlockError::InvalidPath(path.to_owned()));
        }
        #[cfg(target_os = "linux")]
        {
            let (file, geometry, direct) = sys::open(path)?;
            log::debug!(
                target: LOG_TARGET,
                "opened block device {path}: {} bytes, logical/physical block {}/{}, O_DIRECT {}",
                geometry.capacity_bytes,
                geometry.logical_block_size,
                geometry.physical_block_size,
                direct
            );
            Ok(BlockDevice::from_file(file, geometry, direct))
        }
        #[cfg(not(target_os = "linux"))]
        {
            Err(BlockError::Unsupported)
        }
    }

    /// Wraps an already open file with the given geometry. `direct` says whether the file
    /// was opened with `O_DIRECT`, i.e. whether transfers must be block-aligned.
    ///
    /// This is how the tests drive the allocator and the I/O paths with a regular file; the
    /// file must be at least `geometry.capacity_bytes` long for reads to succeed.
    pub fn from_file(file: File, geometry: Geometry, direct: bool) -> BlockDevice {
        BlockDevice {
            geometry,
            direct,
            state: Mutex::new(State {
                file: Some(file),
                fault: None,
                extents: BTreeMap::new(),
                bounce: Bounces::default(),
            }),
        }
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Whether transfers bypass the page cache (`O_DIRECT` was accepted).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    pub fn is_closed(&self) -> bool {
        self.state.lock().file.is_none()
    }

    pub fn is_faulted(&self) -> bool {
        self.state.lock().fault.is_some()
    }

    /// The error that faulted the device, if any.
    pub fn fault_reason(&self) -> Option<String> {
        self.state.lock().fault.clone()
    }

    /// The OS descriptor, for diagnostics; `None` once closed.
    pub fn raw_fd(&self) -> Option<i32> {
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            self.state.lock().file.as_ref().map(|f| f.as_raw_fd())
        }
        #[cfg(not(unix))]
        {
            None
        }
    }

    /// Live extents in offset order.
    pub fn live_extents(&self) -> Vec<Extent> {
        self.state
            .lock()
            .extents
            .iter()
            .map(|(&offset, &len)| Extent { offset, len })
            .collect()
    }

    /// Closes the descriptor. Idempotent; live extents stay tracked so `free` keeps working.
    pub fn close(&self) {
        self.state.lock().file = None;
    }

    /// Reserves `bytes` rounded up to the allocation alignment in the lowest free range that
    /// fits, zero-filling it on the device unless `zero` is false. Zero bytes yield an empty
    /// extent at offset 0 that occupies nothing.
    ///
    /// On any error nothing is reserved. A write error while zeroing faults the device.
    pub fn allocate(&self, bytes: u64, zero: bool) -> Result<Extent, BlockError> {
        let mut st = self.state.lock();
        let st = &mut *st;
        let file = usable(&st.fault, &st.file)?;
        let align = self.geometry.allocation_alignment();
        let usable_bytes = self.geometry.usable_bytes();
        let no_space = BlockError::NoSpace {
            requested: bytes,
            capacity: self.geometry.capacity_bytes,
        };
        let len = match bytes.checked_add(align - 1) {
            Some(v) => round_down(v, align),
            None => return Err(no_space),
        };
        if len == 0 {
            return Ok(Extent { offset: 0, len: 0 });
        }
        let mut cursor = 0u64;
        let mut found = None;
        for (&off, &elen) in &st.extents {
            if off - cursor >= len {
                found = Some(cursor);
                break;
            }
            cursor = off + elen;
        }
        let offset = match found {
            Some(o) => o,
            None if usable_bytes - cursor >= len => cursor,
            None => return Err(no_space),
        };
        if zero {
            let io = self.io(file);
            if let Err(e) = io.zero(offset, len, &mut st.bounce) {
                return Err(fault(&mut st.fault, e));
            }
        }
        st.extents.insert(offset, len);
        Ok(Extent { offset, len })
    }

    /// Returns a live extent to the free space. Works on closed and faulted devices.
    pub fn free(&self, extent: Extent) -> Result<(), BlockError> {
        if extent.len == 0 {
            return Ok(());
        }
        let mut st = self.state.lock();
        match st.extents.get(&extent.offset) {
            Some(&len) if len == extent.len => {
                st.extents.remove(&extent.offset);
                Ok(())
            }
            _ => Err(BlockError::UnknownExtent {
                offset: extent.offset,
                len: extent.len,
            }),
        }
    }

    /// Frees the live extent starting at `offset`, whatever its length.
    pub fn free_at(&self, offset: u64) -> Result<Extent, BlockError> {
        let mut st = self.state.lock();
        match st.extents.remove(&offset) {
            Some(len) => Ok(Extent { offset, len }),
            None => Err(BlockError::UnknownExtent { offset, len: 0 }),
        }
    }

    /// Reads `out.len()` bytes at device offset `offset`, which must lie inside one live
    /// extent. Any OS error or zero-byte transfer faults the device.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BlockError> {
        log_new_fault(self.read_locked(offset, out))
    }

    fn read_locked(&self, offset: u64, out: &mut [u8]) -> Result<(), BlockError> {
        let mut st = self.state.lock();
        let st = &mut *st;
        let file = usable(&st.fault, &st.file)?;
        check_range(&st.extents, offset, out.len() as u64)?;
        if out.is_empty() {
            return Ok(());
        }
        let io = self.io(file);
        io.read(offset, out, &mut st.bounce)
            .map_err(|e| fault(&mut st.fault, e))
    }

    /// Writes `data` at device offset `offset`, which must lie inside one live extent.
    /// Partial blocks are read-modify-written, so neighbouring bytes keep their values.
    /// Any OS error or zero-byte transfer faults the device.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), BlockError> {
        log_new_fault(self.write_locked(offset, data))
    }

    fn write_locked(&self, offset: u64, data: &[u8]) -> Result<(), BlockError> {
        let mut st = self.state.lock();
        let st = &mut *st;
        let file = usable(&st.fault, &st.file)?;
        check_range(&st.extents, offset, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        let io = self.io(file);
        io.write(offset, data, &mut st.bounce)
            .map_err(|e| fault(&mut st.fault, e))
    }

    /// Reads one native-endian `f32` at `offset`.
    pub fn read_f32(&self, offset: u64) -> Result<f32, BlockError> {
        let mut b = [0u8; 4];
        self.read(offset, &mut b)?;
        Ok(f32::from_ne_bytes(b))
    }

    /// Writes one native-endian `f32` at `offset`.
    pub fn write_f32(&self, offset: u64, value: f32) -> Result<(), BlockError> {
        self.write(offset, &value.to_ne_bytes())
    }

    fn io<'a>(&self, file: &'a File) -> Io<'a> {
        Io {
            file,
            direct: self.direct,
            align: self.geometry.allocation_alignment(),
            mem_align: self.geometry.logical_block_size as usize,
        }
    }
}

/// The open file of a device that is neither closed nor faulted.
fn usable<'a>(fault: &Option<String>, file: &'a Option<File>) -> Result<&'a File, BlockError> {
    if let Some(cause) = fault {
        return Err(BlockError::Faulted(cause.clone()));
    }
    file.as_ref().ok_or(BlockError::Closed)
}

/// Log records go to the Python logger `strideweave.blockdev`.
const LOG_TARGET: &str = "strideweave::blockdev";

/// Warns once per fault, after the device lock is released (the logging bridge may need the
/// GIL, which a Python thread could hold while waiting for that lock). A transfer error is
/// `Io`/`ZeroTransfer` only on the call that faulted the device; later calls see `Faulted`.
fn log_new_fault(result: Result<(), BlockError>) -> Result<(), BlockError> {
    if let Err(e @ (BlockError::Io(_) | BlockError::ZeroTransfer { .. })) = &result {
        log::warn!(target: LOG_TARGET, "{e}");
    }
    result
}

/// Records a transfer error as the device's fault (keeping the first cause) and passes it on.
fn fault(slot: &mut Option<String>, e: BlockError) -> BlockError {
    if e.is_fault() && slot.is_none() {
        *slot = Some(e.to_string());
    }
    e
}

fn check_range(extents: &BTreeMap<u64, u64>, offset: u64, len: u64) -> Result<(), BlockError> {
    let out = BlockError::OutOfRange { offset, len };
    let end = offset
        .checked_add(len)
        .ok_or(BlockError::OutOfRange { offset, len })?;
    match extents.range(..=offset).next_back() {
        Some((&eoff, &elen)) if end <= eoff + elen => Ok(()),
        _ => Err(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom};

    fn temp_path(tag: &str) -> std::path::PathBuf {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::env::temp_dir().join(format!("sw-block-{}-{tag}-{n}", std::process::id()))
    }

    struct TempFile(std::path::PathBuf);
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// A regular file of `cap` bytes filled with 0xAB (so zeroing is observable), wrapped as
    /// a device. `direct` only switches the alignment logic on; the file itself is buffered,
    /// so a misaligned direct transfer would not fail here: `Io::direct_read`/`direct_write`
    /// assert the alignment in debug builds instead.
    fn device(cap: u64, logical: u32, physical: u32, direct: bool) -> (BlockDevice, TempFile) {
        let path = temp_path("dev");
        std::fs::write(&path, vec![0xABu8; cap as usize]).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let g = Geometry::new(cap, logical, physical).unwrap();
        (BlockDevice::from_file(file, g, direct), TempFile(path))
    }

    fn file_bytes(t: &TempFile) -> Vec<u8> {
        let mut v = Vec::new();
        let mut f = File::open(&t.0).unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut v).unwrap();
        v
    }

    #[test]
    fn geometry_validation() {
        assert!(matches!(
            Geometry::new(0, 512, 512),
            Err(BlockError::BadGeometry(_))
        ));
        assert!(matches!(
            Geometry::new(4096, 0, 512),
            Err(BlockError::BadGeometry(_))
        ));
        assert!(matches!(
            Geometry::new(4096, 512, 1000),
            Err(BlockError::BadGeometry(_))
        ));
        assert!(matches!(
            Geometry::new(4096, 1 << 21, 512),
            Err(BlockError::BadGeometry(_))
        ));
        assert!(matches!(
            Geometry::new(4100, 512, 512),
            Err(BlockError::BadGeometry(_))
        ));
        let g = Geometry::new(4096 * 3 + 512, 512, 4096).unwrap();
        assert_eq!(g.allocation_alignment(), 4096);
        assert_eq!(g.usable_bytes(), 4096 * 3);
    }

    #[test]
    fn allocate_rounds_zeroes_and_first_fits() {
        let (d, t) = device(64 * 1024, 512, 4096, true);
        let a = d.allocate(1, true).unwrap();
        assert_eq!(
            a,
            Extent {
                offset: 0,
                len: 4096
            }
        );
        let b = d.allocate(4097, true).unwrap();
        assert_eq!(
            b,
            Extent {
                offset: 4096,
                len: 8192
            }
        );
        let c = d.allocate(4096, false).unwrap();
        assert_eq!(
            c,
            Extent {
                offset: 12288,
                len: 4096
            }
        );
        let bytes = file_bytes(&t);
        assert!(
            bytes[..12288].iter().all(|&x| x == 0),
            "zeroed extents read zero"
        );
        assert!(
            bytes[12288..16384].iter().all(|&x| x == 0xAB),
            "zero=false leaves bytes"
        );
        // Freeing the middle extent makes its range the lowest fit again.
        d.free(b).unwrap();
        assert_eq!(
            d.allocate(100, true).unwrap(),
            Extent {
                offset: 4096,
                len: 4096
            }
        );
        // A request larger than the hole skips it.
        assert_eq!(
            d.allocate(8192, true).unwrap(),
            Extent {
                offset: 16384,
                len: 8192
            }
        );
        assert_eq!(
            d.allocate(4096, true).unwrap(),
            Extent {
                offset: 8192,
                len: 4096
            }
        );
        let live = d.live_extents();
        for w in live.windows(2) {
            assert!(
                w[0].offset + w[0].len <= w[1].offset,
                "extents overlap: {live:?}"
            );
        }
    }

    #[test]
    fn zero_length_extent_occupies_nothing() {
        let (d, _t) = device(8192, 512, 512, true);
        let z = d.allocate(0, true).unwrap();
        assert_eq!(z.len, 0);
        assert!(d.live_extents().is_empty());
        d.free(z).unwrap();
        assert_eq!(
            d.allocate(8192, true).unwrap(),
            Extent {
                offset: 0,
                len: 8192
            }
        );
    }

    #[test]
    fn no_space_reserves_nothing() {
        let (d, _t) = device(16384 + 512, 512, 4096, true);
        let a = d.allocate(8192, true).unwrap();
        assert!(matches!(
            d.allocate(8193, true),
            Err(BlockError::NoSpace { .. })
        ));
        assert!(matches!(
            d.allocate(u64::MAX, true),
            Err(BlockError::NoSpace { .. })
        ));
        assert_eq!(d.live_extents(), vec![a]);
        // The trailing partial alignment unit is never handed out.
        assert_eq!(
            d.allocate(8192, true).unwrap(),
            Extent {
                offset: 8192,
                len: 8192
            }
        );
        assert!(matches!(
            d.allocate(1, true),
            Err(BlockError::NoSpace { .. })
        ));
    }

    #[test]
    fn free_unknown_and_mismatched() {
        let (d, _t) = device(16384, 512, 512, true);
        let a = d.allocate(1024, true).unwrap();
        assert!(matches!(
            d.free(Extent {
                offset: a.offset,
                len: 512
            }),
            Err(BlockError::UnknownExtent { .. })
        ));
        assert!(matches!(
            d.free_at(512),
            Err(BlockError::UnknownExtent { .. })
        ));
        assert_eq!(d.free_at(0).unwrap(), a);
        assert!(matches!(d.free(a), Err(BlockError::UnknownExtent { .. })));
    }

    #[test]
    fn element_and_unaligned_round_trips() {
        for direct in [true, false] {
            let (d, t) = device(1 << 20, 512, 4096, direct);
            let _guard = d.allocate(4096, true).unwrap();
            let e = d.allocate(3 * 4096, true).unwrap();
            for (i, off) in [0u64, 4, 508, 510, 4094, 4096 * 3 - 4].iter().enumerate() {
                d.write_f32(e.offset + off, i as f32 + 0.5).unwrap();
                assert_eq!(d.read_f32(e.offset + off).unwrap(), i as f32 + 0.5);
            }
            // A run crossing block boundaries, starting and ending mid-block.
            let data: Vec<u8> = (0..9000u32).map(|i| (i % 251) as u8).collect();
            d.write(e.offset + 300, &data).unwrap();
            let mut back = vec![0u8; 9000];
            d.read(e.offset + 300, &mut back).unwrap();
            assert_eq!(back, data);
            let bytes = file_bytes(&t);
            let base = e.offset as usize;
            assert_eq!(&bytes[base + 300..base + 9300], &data[..]);
            // Read-modify-write kept the neighbours: the f32 at 0 survives, the guard extent
            // and the bytes after the run are untouched.
            assert_eq!(d.read_f32(e.offset).unwrap(), 0.5);
            assert!(bytes[..4096].iter().all(|&x| x == 0));
            assert_eq!(d.read_f32(e.offset + 4096 * 3 - 4).unwrap(), 5.5);
        }
    }

    #[test]
    fn bulk_round_trip_spans_chunks() {
        let cap = (CHUNK_BYTES * 3) as u64;
        let (d, _t) = device(cap, 512, 512, true);
        let e = d.allocate(cap, false).unwrap();
        let n = CHUNK_BYTES * 2 + 1024;
        // `src` and `back` are block-aligned buffers: at `shift == 0` the aligned pieces go
        // straight from/to the caller's memory, at `shift == 1` everything is bounced.
        let mut src = AlignedBuf::zeroed(n + 512, 4096);
        for (i, x) in src.as_mut_slice().iter_mut().enumerate() {
            *x = (i * 7 % 256) as u8;
        }
        let mut back = AlignedBuf::zeroed(n + 512, 4096);
        // (memory shift, device offset): aligned; misaligned memory (everything bounced and
        // pipelined); both off by one, i.e. congruent (head/tail blocks bounced, the middle
        // chunks direct).
        for (shift, dev_off) in [(0usize, 512u64), (1, 512), (1, 513)] {
            let data = &src.as_mut_slice()[shift..shift + n].to_vec();
            let s = &src.as_mut_slice()[shift..shift + n];
            d.write(e.offset + dev_off, s).unwrap();
            let b = &mut back.as_mut_slice()[shift..shift + n];
            b.fill(0);
            d.read(e.offset + dev_off, b).unwrap();
            assert_eq!(&b[..], &data[..]);
            let mut byte = [0u8; 1];
            d.read(e.offset + dev_off + n as u64, &mut byte).unwrap();
            assert_eq!(byte[0], 0xAB, "the byte after the run is untouched");
        }
    }

    #[test]
    fn access_outside_live_extents_is_refused() {
        let (d, _t) = device(16384, 512, 512, true);
        let e = d.allocate(1024, true).unwrap();
        assert!(matches!(
            d.read_f32(1022),
            Err(BlockError::OutOfRange { .. })
        ));
        assert!(matches!(
            d.write_f32(1024, 1.0),
            Err(BlockError::OutOfRange { .. })
        ));
        assert!(matches!(
            d.read_f32(u64::MAX - 1),
            Err(BlockError::OutOfRange { .. })
        ));
        d.free(e).unwrap();
        assert!(matches!(d.read_f32(0), Err(BlockError::OutOfRange { .. })));
        assert!(
            !d.is_faulted(),
            "range errors are caller errors, not device faults"
        );
    }

    #[test]
    fn os_error_faults_device_but_free_and_close_work() {
        let path = temp_path("ro");
        std::fs::write(&path, vec![0u8; 8192]).unwrap();
        let _t = TempFile(path.clone());
        // A read-only descriptor makes every write fail with EBADF: a real OS error.
        let file = File::open(&path).unwrap();
        let d = BlockDevice::from_file(file, Geometry::new(8192, 512, 512).unwrap(), false);
        let e = d.allocate(1024, false).unwrap();
        assert_eq!(d.read_f32(0).unwrap(), 0.0);
        assert!(matches!(d.write_f32(4, 1.0), Err(BlockError::Io(_))));
        assert!(d.is_faulted());
        assert!(d.fault_reason().unwrap().contains("I/O error"));
        assert!(matches!(d.read_f32(0), Err(BlockError::Faulted(_))));
        assert!(matches!(
            d.allocate(512, false),
            Err(BlockError::Faulted(_))
        ));
        d.free(e).unwrap();
        d.close();
        d.close();
        assert!(d.is_closed());
    }

    #[test]
    fn zeroing_failure_reserves_nothing_and_faults() {
        let path = temp_path("ro2");
        std::fs::write(&path, vec![0u8; 8192]).unwrap();
        let _t = TempFile(path.clone());
        let file = File::open(&path).unwrap();
        let d = BlockDevice::from_file(file, Geometry::new(8192, 512, 512).unwrap(), true);
        assert!(matches!(d.allocate(512, true), Err(BlockError::Io(_))));
        assert!(d.live_extents().is_empty());
        assert!(d.is_faulted());
    }

    #[test]
    fn zero_byte_read_faults_device() {
        // The geometry claims more bytes than the file has, so a read past the file's end
        // returns 0 bytes, the same thing a shrunken block device does.
        let (d, _t) = device(4096, 512, 512, true);
        let d2 = {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&_t.0)
                .unwrap();
            BlockDevice::from_file(file, Geometry::new(16384, 512, 512).unwrap(), true)
        };
        drop(d);
        let e = d2.allocate(16384, false).unwrap();
        assert!(matches!(
            d2.read_f32(e.offset + 8192),
            Err(BlockError::ZeroTransfer { write: false, .. })
        ));
        assert!(d2.is_faulted());
        assert!(matches!(d2.write_f32(0, 1.0), Err(BlockError::Faulted(_))));
    }

    #[test]
    fn closed_device_refuses_io_and_allocation() {
        let (d, _t) = device(16384, 512, 512, true);
        let e = d.allocate(512, true).unwrap();
        d.close();
        assert!(matches!(d.read_f32(0), Err(BlockError::Closed)));
        assert!(matches!(d.allocate(512, true), Err(BlockError::Closed)));
        assert!(d.raw_fd().is_none());
        d.free(e).unwrap();
    }

    #[test]
    fn open_rejects_nul_and_non_block_paths() {
        assert!(matches!(
            BlockDevice::open("/dev/lo\0op0"),
            Err(BlockError::InvalidPath(_))
        ));
        #[cfg(target_os = "linux")]
        {
            let t = TempFile(temp_path("plain"));
            std::fs::write(&t.0, b"x").unwrap();
            let p = t.0.to_str().unwrap();
            assert!(matches!(
                BlockDevice::open(p),
                Err(BlockError::NotBlockDevice(_))
            ));
            assert!(matches!(
                BlockDevice::open("/"),
                Err(BlockError::NotBlockDevice(_))
            ));
            assert!(matches!(
                BlockDevice::open("/nonexistent/strideweave"),
                Err(BlockError::Open(e)) if e.kind() == io::ErrorKind::NotFound
            ));
        }
    }

    /// Real loop device: needs root and `losetup`; skipped with a printed reason otherwise.
    #[cfg(target_os = "linux")]
    #[test]
    fn loop_device_round_trip() {
        use std::process::Command;
        let backing = TempFile(temp_path("loop"));
        let f = File::create(&backing.0).unwrap();
        f.set_len(8 << 20).unwrap();
        drop(f);
        let out = Command::new("losetup")
            .args(["--find", "--show", "--direct-io=on"])
            .arg(&backing.0)
            .output();
        let dev = match out {
            Ok(o) if o.status.success() => String::from_utf8(o.stdout).unwrap().trim().to_owned(),
            Ok(o) => {
                eprintln!(
                    "SKIPPED loop_device_round_trip: losetup failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                return;
            }
            Err(e) => {
                eprintln!("SKIPPED loop_device_round_trip: cannot run losetup: {e}");
                return;
            }
        };
        struct Detach(String);
        impl Drop for Detach {
            fn drop(&mut self) {
                let _ = std::process::Command::new("losetup")
                    .args(["-d", &self.0])
                    .status();
            }
        }
        let _detach = Detach(dev.clone());
        let d = BlockDevice::open(&dev).unwrap();
        let g = d.geometry();
        assert_eq!(g.capacity_bytes, 8 << 20);
        assert!(g.logical_block_size >= 512);
        assert!(d.is_direct(), "loop devices accept O_DIRECT");
        let e = d.allocate(10_000, true).unwrap();
        assert_eq!(e.offset, 0);
        d.write_f32(e.offset + 6, 2.5).unwrap();
        assert_eq!(d.read_f32(e.offset + 6).unwrap(), 2.5);
        assert_eq!(d.read_f32(e.offset + 10).unwrap(), 0.0);
        d.close();
        // The value reached the device, not just a cache: read it back through a fresh open.
        let d = BlockDevice::open(&dev).unwrap();
        let e = d.allocate(10_000, false).unwrap();
        assert_eq!(d.read_f32(e.offset + 6).unwrap(), 2.5);
    }
}
