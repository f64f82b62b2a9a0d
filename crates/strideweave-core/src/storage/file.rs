//! A raw native-endian file of fixed-size slots, accessed with positioned I/O.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::host::HostBuffer;

/// Log records go to the Python logger `strideweave.storage` (the binding maps `::` to `.`).
/// Nothing here logs while holding a lock: the bridge may need the GIL.
const LOG_TARGET: &str = "strideweave::storage";

/// Storage in a file the process created. Positioned reads and writes need no shared seek
/// cursor, so concurrent readers and the transfer engine's threads can share one handle.
#[derive(Debug)]
pub struct FileStore {
    file: File,
    path: PathBuf,
    /// The process that created the file: only it removes the name. A `fork()`ed child shares
    /// the file with its parent, so its exit, finalizers or releases must leave it alone.
    creator: u32,
    /// How many [`snapshot`](Self::snapshot)s of the file are mapped. While any is, `set_len`
    /// refuses to shrink the file: a mapped page past the end of a file raises SIGBUS when
    /// touched. The lock also orders a snapshot's length check against a concurrent resize.
    snapshots: Mutex<usize>,
}

impl FileStore {
    /// Create `path`, failing with `AlreadyExists` if it is there: a FileBacked carrier never
    /// adopts somebody else's file.
    pub fn create_new(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        log::debug!(target: LOG_TARGET, "created file storage {}", path.display());
        Ok(Self { file, path: path.to_path_buf(), creator: std::process::id(), snapshots: Mutex::new(0) })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file (positioned I/O only: never move its cursor).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The file's current length in bytes.
    pub fn len_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    /// Resize to `bytes`; new bytes read as zero (sparse where the filesystem allows). While a
    /// [`snapshot`](Self::snapshot) is mapped, shrinking fails with `ResourceBusy` and changes
    /// nothing.
    pub fn set_len(&self, bytes: u64) -> io::Result<()> {
        let snapshots = self.snapshots.lock();
        if *snapshots > 0 && bytes < self.len_bytes()? {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!("{} cannot shrink while a snapshot of it is mapped", self.path.display()),
            ));
        }
        self.file.set_len(bytes)
    }

    /// A copy-on-write snapshot of bytes `[byte_off, byte_off + len)` as host memory, without
    /// copying: a private mapping of the file. Reads see the file's bytes (its page cache, as
    /// `np.memmap` does); the first write to a page copies that page, so writes never reach
    /// the file. Until the buffer is dropped the file cannot shrink through [`set_len`](Self::set_len).
    ///
    /// `byte_off` must be a multiple of the page size and the range non-empty and inside the
    /// file (`InvalidInput` otherwise).
    ///
    /// # Safety
    /// While the returned buffer lives, the caller must ensure that the file's bytes in the
    /// range do not change, except by being written with the bytes the snapshot holds at that
    /// moment (a write-back of the snapshot itself), and that nothing truncates the file below
    /// the range's end other than through `set_len` (not through [`file`](Self::file), not
    /// another process). A private mapping shows later changes of pages it has not written yet,
    /// so a changed byte would change the snapshot under its readers, and a truncated range
    /// raises SIGBUS when read.
    pub unsafe fn snapshot(self: &Arc<Self>, byte_off: u64, len: usize) -> io::Result<HostBuffer> {
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
        // SAFETY: sysconf has no preconditions.
        let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
        if len == 0 || byte_off % page != 0 {
            return Err(invalid(format!(
                "a snapshot needs a non-empty range at a page boundary, not {len} bytes at {byte_off}"
            )));
        }
        let offset = libc::off_t::try_from(byte_off).map_err(|_| invalid(format!("offset {byte_off} is too large")))?;
        let mut snapshots = self.snapshots.lock();
        let end = byte_off.checked_add(len as u64).ok_or_else(|| invalid("range overflows".into()))?;
        let file_len = self.len_bytes()?;
        if end > file_len {
            return Err(invalid(format!("bytes [{byte_off}, {end}) are not all inside the file's {file_len}")));
        }
        use std::os::fd::AsRawFd;
        // SAFETY: a private mapping of an open file at a kernel-chosen address touches no
        // existing memory; the result is checked against MAP_FAILED before use.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                self.file.as_raw_fd(),
                offset,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let Some(ptr) = std::ptr::NonNull::new(raw.cast::<u8>()) else {
            return Err(io::Error::other("mmap returned a null mapping"));
        };
        *snapshots += 1;
        drop(snapshots);
        // SAFETY: `raw` is a fresh mapping of `len` bytes that nothing else references, of this
        // store's file inside its length, and the count just raised keeps `set_len` from
        // shrinking the file until the buffer's drop unmaps it and lowers the count; the caller
        // promises the rest (see above).
        Ok(unsafe { HostBuffer::from_file_mapping(ptr, len, self.clone(), byte_off) })
    }

    /// A snapshot's mapping is gone: the file may shrink again once none is left.
    pub(super) fn snapshot_unmapped(&self) {
        let mut snapshots = self.snapshots.lock();
        *snapshots = snapshots.saturating_sub(1);
    }

    /// Read exactly `out.len()` bytes at `byte_off`, retrying short reads.
    pub fn read_at(&self, byte_off: u64, out: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(out, byte_off)
    }

    /// Write all of `data` at `byte_off`, retrying short writes.
    pub fn write_at(&self, byte_off: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, byte_off)
    }

    /// Remove the file from its directory. The open handle stays usable until dropped.
    /// In any process but the creator (a forked child) this does nothing: the name is the
    /// creator's.
    pub fn unlink(&self) -> io::Result<()> {
        if std::process::id() != self.creator {
            return Ok(());
        }
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Ok(()) => {
                log::debug!(target: LOG_TARGET, "removed file storage {}", self.path.display());
                Ok(())
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("sw-filestore-{}-{tag}", std::process::id()))
    }

    #[test]
    fn grows_with_zeros_and_round_trips() {
        let path = temp_path("grow");
        let store = FileStore::create_new(&path).unwrap();
        store.set_len(16).unwrap();
        let mut out = [1u8; 16];
        store.read_at(0, &mut out).unwrap();
        assert_eq!(out, [0u8; 16]);
        store.write_at(4, &7.5f32.to_ne_bytes()).unwrap();
        let mut v = [0u8; 4];
        store.read_at(4, &mut v).unwrap();
        assert_eq!(f32::from_ne_bytes(v), 7.5);
        store.unlink().unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn refuses_an_existing_file() {
        let path = temp_path("exists");
        let _first = FileStore::create_new(&path).unwrap();
        assert_eq!(FileStore::create_new(&path).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn reading_past_the_end_fails() {
        let path = temp_path("eof");
        let store = FileStore::create_new(&path).unwrap();
        store.set_len(4).unwrap();
        assert!(store.read_at(2, &mut [0u8; 4]).is_err());
        store.unlink().unwrap();
    }

    /// A snapshot reads the file's bytes without copying them, its writes stay its own, and
    /// while it is mapped the file grows but does not shrink; once it is dropped it shrinks.
    #[test]
    fn a_snapshot_reads_the_file_keeps_its_writes_and_pins_the_length() {
        let path = temp_path("snapshot");
        let store = Arc::new(FileStore::create_new(&path).unwrap());
        let page = 4096;
        let bytes: Vec<u8> = (0..3 * page).map(|i| (i % 251) as u8).collect();
        store.set_len(bytes.len() as u64).unwrap();
        store.write_at(0, &bytes).unwrap();
        // SAFETY: nothing else writes or truncates this test's file meanwhile.
        let mut snap = unsafe { store.snapshot(page as u64, 2 * page) }.unwrap();
        assert!(snap.is_file_snapshot());
        assert!(snap.pages_in_memory().unwrap(), "just written: in the page cache");
        // SAFETY: nothing has written the snapshot yet, and nothing else can reach it.
        unsafe { snap.load_snapshot() }.unwrap();
        assert_eq!(snap.as_slice(), &bytes[page..]);
        snap.write_mut(0, &[255, 254]).unwrap();
        let mut on_file = [0u8; 2];
        store.read_at(page as u64, &mut on_file).unwrap();
        assert_eq!(on_file, [bytes[page], bytes[page + 1]], "a snapshot's write never reaches the file");
        let refused = store.set_len(page as u64).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::ResourceBusy);
        assert_eq!(store.len_bytes().unwrap(), 3 * page as u64, "a refused shrink changes nothing");
        store.set_len(4 * page as u64).unwrap();
        drop(snap);
        store.set_len(page as u64).unwrap();
        store.unlink().unwrap();
    }

    #[test]
    fn a_snapshot_needs_a_page_aligned_range_inside_the_file() {
        let path = temp_path("snapshot-range");
        let store = Arc::new(FileStore::create_new(&path).unwrap());
        store.set_len(8192).unwrap();
        for (off, len) in [(1, 100), (0, 0), (4096, 8192), (8192, 1)] {
            // SAFETY: as above; none of these maps anything.
            let err = unsafe { store.snapshot(off, len) }.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{off} {len}");
        }
        store.set_len(0).unwrap(); // no snapshot was counted
        store.unlink().unwrap();
    }

    /// A snapshot of bytes that are not in the page cache is loaded by reading them into
    /// anonymous pages put in its place: the values are the file's, and writes stay the
    /// snapshot's. (Whether the kernel dropped the pages is its choice; the values are checked
    /// either way.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_snapshot_of_uncached_bytes_loads_the_files_values() {
        use std::os::fd::AsRawFd;
        let path = temp_path("snapshot-uncached");
        let store = Arc::new(FileStore::create_new(&path).unwrap());
        let bytes: Vec<u8> = (0..(4 << 20)).map(|i: u32| (i % 241) as u8).collect();
        store.set_len(bytes.len() as u64).unwrap();
        store.write_at(0, &bytes).unwrap();
        store.file().sync_all().unwrap();
        // SAFETY: advice on the store's own open descriptor; it changes no byte.
        unsafe { libc::posix_fadvise(store.file().as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        for _ in 0..2 {
            // SAFETY: nothing else writes or truncates this test's file meanwhile.
            let mut snap = unsafe { store.snapshot(0, bytes.len()) }.unwrap();
            // SAFETY: the snapshot is fresh and only this thread can reach it.
            unsafe { snap.load_snapshot() }.unwrap();
            assert!(snap.as_slice() == &bytes[..], "the file's values");
            snap.write_mut(7, &[0xAB]).unwrap();
            let mut on_file = [0u8; 1];
            store.read_at(7, &mut on_file).unwrap();
            assert_eq!(on_file[0], bytes[7], "a snapshot's write never reaches the file");
        }
        store.set_len(0).unwrap(); // both snapshots are gone
        store.unlink().unwrap();
    }

    /// The page-cache query (`cachestat`, else `mincore`) answers as `mincore` on the snapshot
    /// does, with the file's bytes dropped from the cache and after they were read back.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_snapshot_knows_whether_its_bytes_are_cached() {
        use std::os::fd::AsRawFd;
        let path = temp_path("snapshot-cached");
        let store = Arc::new(FileStore::create_new(&path).unwrap());
        let bytes = vec![3u8; 4 << 20];
        store.set_len(bytes.len() as u64).unwrap();
        store.write_at(0, &bytes).unwrap();
        store.file().sync_all().unwrap();
        let by_mincore = |snap: &HostBuffer| {
            let mut resident = vec![0u8; snap.len().div_ceil(4096)];
            // SAFETY: the snapshot's own page-aligned mapping, one byte per 4 KiB page (the
            // test runs where pages are 4 KiB or larger, so this is enough room).
            assert_eq!(unsafe { libc::mincore(snap.as_ptr().cast(), snap.len(), resident.as_mut_ptr()) }, 0);
            resident.iter().all(|&r| r & 1 == 1)
        };
        // SAFETY: advice on the store's own open descriptor; it changes no byte.
        unsafe { libc::posix_fadvise(store.file().as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        // SAFETY: nothing else writes or truncates this test's file meanwhile.
        let snap = unsafe { store.snapshot(0, bytes.len()) }.unwrap();
        assert_eq!(snap.pages_in_memory().unwrap(), by_mincore(&snap), "dropped from the cache");
        let mut back = vec![0u8; bytes.len()];
        store.read_at(0, &mut back).unwrap();
        assert!(snap.pages_in_memory().unwrap(), "read back: cached");
        assert!(by_mincore(&snap));
        drop(snap);
        store.unlink().unwrap();
    }
}
