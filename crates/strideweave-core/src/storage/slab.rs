//! One file cut into equal regions: the storage of many small same-sized tiles.
//!
//! A tiled tier keeps thousands of tiles of one size. A file per tile costs a create and an
//! unlink each (hundreds of microseconds in a busy directory, more than moving the tile's
//! bytes); a slab costs one file for all of them. Regions are numbered cells of
//! `region_bytes` each, cell `c` at byte `c * region_bytes`:
//!
//! * `allocate(n)` hands out the `n` lowest free cells (so a batch of fresh tiles is mostly
//!   one contiguous range, written or read with few positioned calls), growing the file once;
//! * `free(cells)` returns cells; free cells at the end shrink the file, and when no cell is
//!   in use the file is removed (an empty slab leaves nothing on disk), to be created again
//!   by the next `allocate`.
//!
//! Only the creating process changes the file (grow, shrink, unlink): a `fork()`ed child that
//! inherited the slab shares the file with its parent, so it may still free its own
//! bookkeeping, but it never truncates or removes the parent's bytes, and it cannot allocate.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::FileStore;

/// A file of equal regions, created on first allocation and removed when none is in use.
#[derive(Debug)]
pub struct FileSlab {
    path: PathBuf,
    region_bytes: u64,
    creator: u32,
    state: Mutex<SlabState>,
}

#[derive(Debug, Default)]
struct SlabState {
    /// The file while any cell is in use (or an allocation is being set up).
    store: Option<Arc<FileStore>>,
    /// Free cells below `top`.
    free: BTreeSet<u64>,
    /// Cells the file holds (its length is `top * region_bytes`).
    top: u64,
    /// Cells in use.
    live: u64,
}

impl FileSlab {
    /// A slab whose file will be `path` (not created until the first allocation).
    pub fn new(path: &Path, region_bytes: u64) -> io::Result<Self> {
        if region_bytes == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a slab region needs at least one byte"));
        }
        Ok(Self { path: path.to_path_buf(), region_bytes, creator: std::process::id(), state: Mutex::default() })
    }

    /// The slab file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The size of one region in bytes.
    pub fn region_bytes(&self) -> u64 {
        self.region_bytes
    }

    /// Cells in use now.
    pub fn live(&self) -> u64 {
        self.state.lock().live
    }

    /// Whether this process created the slab (and so may allocate and change the file).
    pub fn is_creator(&self) -> bool {
        std::process::id() == self.creator
    }

    /// `n` free cells and the file that holds them; the lowest free cells first, then new
    /// ones at the end. On error nothing changes (a file created for this call is removed).
    pub fn allocate(&self, n: usize) -> io::Result<(Arc<FileStore>, Vec<u64>)> {
        if !self.is_creator() {
            return Err(io::Error::other("a slab allocates only in the process that created it"));
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a slab allocates at least one region"));
        }
        let mut state = self.state.lock();
        let created = state.store.is_none();
        let store = match &state.store {
            Some(store) => Arc::clone(store),
            None => Arc::new(FileStore::create_new(&self.path)?),
        };
        // Every cell's number is reserved before the file grows, so a count beyond memory is
        // an OutOfMemory error with nothing taken, never an abort (issue 22.4).
        let mut cells: Vec<u64> = Vec::new();
        if cells.try_reserve_exact(n).is_err() {
            if created {
                let _ = store.unlink();
            }
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, format!("cannot allocate memory for {n} regions")));
        }
        let reused: Vec<u64> = state.free.iter().take(n).copied().collect();
        let extra = (n - reused.len()) as u64;
        let top = state
            .top
            .checked_add(extra)
            .filter(|t| t.checked_mul(self.region_bytes).is_some_and(|b| b <= i64::MAX as u64));
        let grown = match top {
            Some(top) if extra == 0 => Ok(top),
            Some(top) => store.set_len(top * self.region_bytes).map(|()| top),
            None => Err(io::Error::new(io::ErrorKind::InvalidInput, "slab size overflows")),
        };
        let top = match grown {
            Ok(top) => top,
            Err(e) => {
                if created {
                    let _ = store.unlink();
                }
                return Err(e);
            }
        };
        for cell in &reused {
            state.free.remove(cell);
        }
        cells.extend_from_slice(&reused);
        cells.extend(state.top..top);
        state.top = top;
        state.live += n as u64;
        state.store = Some(Arc::clone(&store));
        Ok((store, cells))
    }

    /// Returns `cells` (each allocated and not yet freed). Free cells at the end shrink the
    /// file; with no cell left in use the file is removed. Only the creator touches the file;
    /// an error changing it leaves the bookkeeping updated (the cells are free either way).
    ///
    /// When the slab emptied, returns its (unlinked) file: the last handle's close frees the
    /// file's blocks and cached pages, a millisecond per 16 MiB, so the caller chooses the
    /// thread that drops it.
    pub fn free(&self, cells: &[u64]) -> io::Result<Option<Arc<FileStore>>> {
        if cells.is_empty() {
            return Ok(None);
        }
        let mut state = self.state.lock();
        for &cell in cells {
            debug_assert!(cell < state.top && !state.free.contains(&cell), "cell {cell} freed twice");
            state.free.insert(cell);
        }
        state.live -= cells.len() as u64;
        let creator = self.is_creator();
        if state.live == 0 {
            let store = state.store.take();
            state.free.clear();
            state.top = 0;
            // Unlinked under the lock: the next allocation creates the file at the same path.
            return match store {
                Some(store) if creator => store.unlink().map(|()| Some(store)),
                other => Ok(other),
            };
        }
        let old_top = state.top;
        while state.top > 0 && state.free.contains(&(state.top - 1)) {
            let last = state.top - 1;
            state.free.remove(&last);
            state.top = last;
        }
        match &state.store {
            Some(store) if creator && state.top < old_top => {
                store.set_len(state.top * self.region_bytes).map(|()| None)
            }
            _ => Ok(None),
        }
    }
}

impl Drop for FileSlab {
    fn drop(&mut self) {
        if let Some(store) = self.state.get_mut().store.take() {
            let _ = store.unlink(); // only in the creating process (FileStore::unlink checks)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(tag: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("sw-slab-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        path
    }

    #[test]
    fn lowest_cells_first_file_grows_shrinks_and_goes_when_empty() {
        let path = temp_path("cycle");
        let slab = FileSlab::new(&path, 16).unwrap();
        assert!(!path.exists());
        let (store, a) = slab.allocate(3).unwrap();
        assert_eq!(a, [0, 1, 2]);
        assert_eq!(store.len_bytes().unwrap(), 48);
        slab.free(&[1]).unwrap();
        let (_, b) = slab.allocate(2).unwrap();
        assert_eq!(b, [1, 3]); // the hole first, then the end
        assert_eq!(store.len_bytes().unwrap(), 64);
        slab.free(&[3, 2]).unwrap(); // the free tail shrinks the file
        assert_eq!(store.len_bytes().unwrap(), 32);
        assert_eq!(slab.live(), 2);
        let emptied = slab.free(&[0, 1]).unwrap().expect("the emptied slab hands back its file");
        assert!(!path.exists() && slab.live() == 0 && emptied.len_bytes().unwrap() == 32);
        let (again, c) = slab.allocate(1).unwrap(); // a fresh file at the same path
        assert_eq!(c, [0]);
        assert!(path.exists() && again.len_bytes().unwrap() == 16);
        drop(again);
        drop(slab);
        assert!(!path.exists(), "dropping the slab removes its file");
    }

    #[test]
    fn a_failed_allocation_changes_nothing() {
        let path = temp_path("fail");
        let slab = FileSlab::new(&path, u64::MAX / 2).unwrap();
        assert!(slab.allocate(4).is_err());
        assert!(!path.exists() && slab.live() == 0);
        let blocker = temp_path("blocked");
        std::fs::write(&blocker, b"x").unwrap();
        let taken = FileSlab::new(&blocker, 8).unwrap();
        assert_eq!(taken.allocate(1).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(taken.live(), 0);
        std::fs::remove_file(&blocker).unwrap();
        assert!(FileSlab::new(&path, 0).is_err());
        assert!(slab.allocate(0).is_err() && !path.exists());
    }

    #[test]
    fn eight_threads_allocating_and_freeing_never_share_a_cell() {
        let path = temp_path("race");
        let slab = Arc::new(FileSlab::new(&path, 8).unwrap());
        let owners = Arc::new(Mutex::new(std::collections::HashMap::<u64, usize>::new()));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (slab, owners) = (Arc::clone(&slab), Arc::clone(&owners));
                std::thread::spawn(move || {
                    for round in 0..200 {
                        let (store, cells) = slab.allocate(1 + (t + round) % 5).unwrap();
                        for &c in &cells {
                            assert!(owners.lock().insert(c, t).is_none(), "cell {c} handed out twice");
                            store.write_at(c * 8, &(t as u64).to_ne_bytes()).unwrap();
                        }
                        for &c in &cells {
                            let mut b = [0u8; 8];
                            store.read_at(c * 8, &mut b).unwrap();
                            assert_eq!(u64::from_ne_bytes(b), t as u64);
                            owners.lock().remove(&c);
                        }
                        slab.free(&cells).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(slab.live(), 0);
        assert!(!path.exists());
    }
}
