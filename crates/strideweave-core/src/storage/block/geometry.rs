//! The device's geometry (capacity, logical and physical block size) and, on Linux, the
//! open flags, block-special check and geometry ioctls that read it.

use super::{BlockError, MAX_BLOCK_SIZE};

/// Device geometry as reported by the kernel (or supplied by a test).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
///
/// The fields are private so that every `Geometry` went through [`Geometry::new`]'s checks,
/// which the aligned I/O relies on.
pub struct Geometry {
    capacity_bytes: u64,
    logical_block_size: u32,
    physical_block_size: u32,
}

impl Geometry {
    /// The device's size in bytes (a whole number of logical blocks).
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// The smallest unit of direct I/O, in bytes (a power of two).
    pub fn logical_block_size(&self) -> u32 {
        self.logical_block_size
    }

    /// The device's preferred I/O unit, in bytes (a power of two).
    pub fn physical_block_size(&self) -> u32 {
        self.physical_block_size
    }

    /// Validates the numbers the I/O layer relies on: a non-empty capacity that is a whole
    /// number of logical blocks, and block sizes that are powers of two no larger than 1 MiB.
    pub fn new(capacity_bytes: u64, logical_block_size: u32, physical_block_size: u32) -> Result<Self, BlockError> {
        if capacity_bytes == 0 {
            return Err(BlockError::BadGeometry("capacity is 0 bytes (no medium or no backing file?)".into()));
        }
        for (name, v) in [("logical block size", logical_block_size), ("physical block size", physical_block_size)] {
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
        Ok(Geometry { capacity_bytes, logical_block_size, physical_block_size })
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

#[cfg(target_os = "linux")]
pub(super) mod sys {
    //! The Linux-specific part: open flags, the block-special check and the geometry ioctls.
    use super::super::BlockError;
    use super::Geometry;
    use std::fs::{File, OpenOptions};
    use std::io;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

    const BLKSSZGET: libc::Ioctl = libc::_IO(0x12, 104);
    const BLKPBSZGET: libc::Ioctl = libc::_IO(0x12, 123);
    const BLKGETSIZE64: libc::Ioctl = libc::_IOR::<libc::size_t>(0x12, 114);

    /// Opens `path` read-write with `O_DIRECT` (falling back to buffered I/O when the kernel
    /// refuses `O_DIRECT` with `EINVAL`) and reads its geometry. Writes nothing.
    pub(in crate::storage::block) fn open(path: &str) -> Result<(File, Geometry, bool), BlockError> {
        // Check the node type before opening: opening other kinds of node can have side
        // effects (a FIFO, a tty), and "not a block device" must win over e.g. EISDIR.
        let meta = std::fs::metadata(path).map_err(BlockError::Open)?;
        if !meta.file_type().is_block_device() {
            return Err(BlockError::NotBlockDevice(path.to_owned()));
        }
        let open =
            |flags: i32| OpenOptions::new().read(true).write(true).custom_flags(flags | libc::O_CLOEXEC).open(path);
        let (file, direct) = match open(libc::O_DIRECT) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(0).map_err(BlockError::Open)?, false),
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
        let logical =
            u32::try_from(logical).map_err(|_| BlockError::BadGeometry(format!("logical block size {logical}")))?;
        let geometry = Geometry::new(capacity, logical, physical)?;
        Ok((file, geometry, direct))
    }
}
