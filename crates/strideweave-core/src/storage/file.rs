//! A raw native-endian file of fixed-size slots, accessed with positioned I/O.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

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
}

impl FileStore {
    /// Create `path`, failing with `AlreadyExists` if it is there: a FileBacked carrier never
    /// adopts somebody else's file.
    pub fn create_new(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        log::debug!(target: LOG_TARGET, "created file storage {}", path.display());
        Ok(Self { file, path: path.to_path_buf(), creator: std::process::id() })
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

    /// Resize to `bytes`; new bytes read as zero (sparse where the filesystem allows).
    pub fn set_len(&self, bytes: u64) -> io::Result<()> {
        self.file.set_len(bytes)
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
}
