//! Aligned host memory, owned or borrowed from a caller-supplied pointer.

use std::alloc::{alloc, alloc_zeroed, dealloc, Layout as AllocLayout};
use std::collections::TryReserveError;
use std::ptr::NonNull;
use std::sync::Arc;

use super::file::FileStore;

/// Alignment of small owned buffers: a cache line, and enough for any SIMD load and for
/// DLPack consumers that prefer 64-byte aligned data.
pub const HOST_ALIGN: usize = 64;

/// Alignment of heap buffers from 64 KiB up, and of every mapped buffer: a page, so O_DIRECT
/// block and file transfers can go straight from (or into) the carrier's memory.
pub const PAGE_ALIGN: usize = 4096;

/// Heap buffers of at least this many bytes are page-aligned; below it the padding is not
/// worth it.
pub const PAGE_ALIGN_THRESHOLD: usize = 64 * 1024;

/// Where an owned buffer comes from. Anonymous mappings (transparent huge pages requested,
/// as NumPy does) are zeroed by the kernel on first touch, with no memset pass, and where THP
/// is in `madvise` mode first touch of a 256 MiB tensor takes 128 faults instead of 65536.
/// The heap recycles freed blocks, so repeated allocations of the same size (the fresh
/// results of compute operations) do not fault their pages in again. So: zeroed buffers from
/// 64 KiB and every buffer from 32 MiB (where glibc would map it anyway) are mappings;
/// uninitialised (`empty`) buffers below [`RECYCLE_MIN`] come from the heap, and from it are
/// mappings too, recycled (see there).
pub const MAP_THRESHOLD: usize = 32 * 1024 * 1024;

/// Uninitialised buffers from this size are mappings, served first from the few recently
/// freed mappings of exactly their length that this module keeps ([`RECYCLE_MAX_BYTES`],
/// [`RECYCLE_MAX_BUFFERS`]): their pages are present, so the buffer that replaces a freed one
/// of its size (a layer promoted into memory after another was evicted, a fresh tile) neither
/// faults its pages in nor has the kernel zero them, and no `munmap` interrupts the other
/// threads. Why not the heap, as below this size: glibc keeps freed blocks of this size in
/// each thread's arena with no bound (a 16 MiB tile made on one engine thread and freed on
/// another stays resident), where this keeps a bounded few and unmaps the rest. A recycled
/// buffer holds whatever its last owner wrote, which an uninitialised buffer may; a zeroed
/// request is never served from it.
pub const RECYCLE_MIN: usize = 4 * 1024 * 1024;

/// The freed mappings kept for reuse hold at most this many bytes together; a larger one is
/// unmapped at once.
pub const RECYCLE_MAX_BYTES: usize = 64 * 1024 * 1024;

/// At most this many freed mappings are kept; the oldest leaves first.
pub const RECYCLE_MAX_BUFFERS: usize = 4;

/// The freed mappings kept for reuse, as (address, length), oldest first.
///
/// The list is only ever tried, never waited for: a thread that finds it locked maps or
/// unmaps as if it were empty or full. So no thread ever blocks on it, and a `fork()`ed child
/// whose parent had it locked at the fork (by a thread the child does not have) still
/// allocates and frees, only without recycling.
mod recycled {
    use std::sync::{Mutex, MutexGuard, TryLockError};

    use super::{RECYCLE_MAX_BUFFERS, RECYCLE_MAX_BYTES, RECYCLE_MIN};

    static KEPT: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

    fn kept() -> Option<MutexGuard<'static, Vec<(usize, usize)>>> {
        match KEPT.try_lock() {
            Ok(guard) => Some(guard),
            // A panic while the lock is held leaves the list consistent (every edit is one
            // push, remove or drain), so a poisoned lock is used as it is.
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// A kept mapping of exactly `len` bytes (the most recently freed), now the caller's.
    pub(super) fn take(len: usize) -> Option<usize> {
        let mut kept = kept()?;
        let at = kept.iter().rposition(|&(_, l)| l == len)?;
        Some(kept.remove(at).0)
    }

    /// Keep the mapping at `addr` of `len` bytes (which the caller owned and no longer uses)
    /// for reuse; returns the mappings to unmap now: the given one when it is not kept, else
    /// the oldest ones it pushed out.
    pub(super) fn give(addr: usize, len: usize) -> Vec<(usize, usize)> {
        if !(RECYCLE_MIN..=RECYCLE_MAX_BYTES).contains(&len) {
            return vec![(addr, len)];
        }
        let Some(mut kept) = kept() else {
            return vec![(addr, len)];
        };
        kept.push((addr, len));
        let mut total: usize = kept.iter().map(|&(_, l)| l).sum();
        let mut out = 0;
        while kept.len() - out > RECYCLE_MAX_BUFFERS || total > RECYCLE_MAX_BYTES {
            total -= kept[out].1;
            out += 1;
        }
        kept.drain(..out).collect()
    }

    /// How many mappings are kept and their bytes (tests).
    #[cfg(test)]
    pub(super) fn held() -> (usize, usize) {
        let kept = KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        (kept.len(), kept.iter().map(|&(_, l)| l).sum())
    }
}

/// Uninitialised heap buffers given back in batches ([`HostBuffer::keep_batch`]: a tiled
/// tier's tiles, evicted together) are kept, at most this many bytes of them, for the next
/// batch of their length ([`HostBuffer::uninit_batch`]: the tiles a promote makes). The heap
/// would otherwise return the pages of a few thousand freed tiles to the kernel, and the next
/// promote would fault every page in again (a thousand 16 KiB tiles: four thousand faults,
/// about as long as the copy itself); on a virtual machine that hands freed memory back to its
/// host each of those pages costs more still.
pub const BATCH_KEEP_MAX_BYTES: usize = 64 * 1024 * 1024;

/// The heap buffers kept for batches, by length, with their bytes together. As [`recycled`],
/// tried and never waited for.
mod kept_batches {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

    use super::{HostBuffer, Origin, BATCH_KEEP_MAX_BYTES};

    #[derive(Default)]
    pub(super) struct Kept {
        by_len: HashMap<usize, Vec<HostBuffer>>,
        bytes: usize,
    }

    static KEPT: Mutex<Option<Kept>> = Mutex::new(None);

    fn kept() -> Option<MutexGuard<'static, Option<Kept>>> {
        match KEPT.try_lock() {
            Ok(guard) => Some(guard),
            // Every edit leaves the map and its byte count consistent: a poisoned lock is used.
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Up to `n` kept buffers of exactly `len` bytes, now the caller's.
    pub(super) fn take(len: usize, n: usize) -> Vec<HostBuffer> {
        let Some(mut guard) = kept() else { return Vec::new() };
        let Some(kept) = guard.as_mut() else { return Vec::new() };
        let Some(list) = kept.by_len.get_mut(&len) else { return Vec::new() };
        let out: Vec<HostBuffer> = list.split_off(list.len().saturating_sub(n));
        if list.is_empty() {
            kept.by_len.remove(&len);
        }
        kept.bytes -= out.len() * len;
        out
    }

    /// Keep what fits of `buffers`: heap buffers nobody else holds, making room by letting
    /// go of buffers of other lengths first (the batch given last is the one a promote asks
    /// for next). Returns what is not kept, for the caller to drop, as it was given: nothing
    /// is unwrapped that is not kept.
    pub(super) fn give(buffers: Vec<Arc<HostBuffer>>) -> Vec<Arc<HostBuffer>> {
        let Some(mut guard) = kept() else { return buffers };
        let kept = guard.get_or_insert_with(Kept::default);
        let keepable = |b: &Arc<HostBuffer>| matches!(b.origin, Origin::Heap { .. }) && b.len > 0;
        let incoming: usize = buffers.iter().filter(|b| keepable(b)).map(|b| b.len).sum();
        let mut rest = Vec::new();
        let others: Vec<usize> =
            kept.by_len.keys().copied().filter(|len| !buffers.iter().any(|b| b.len == *len)).collect();
        for len in others {
            if kept.bytes + incoming <= BATCH_KEEP_MAX_BYTES {
                break;
            }
            if let Some(list) = kept.by_len.remove(&len) {
                kept.bytes -= list.len() * len;
                rest.extend(list.into_iter().map(Arc::new));
            }
        }
        for buffer in buffers {
            if !keepable(&buffer) || kept.bytes + buffer.len > BATCH_KEEP_MAX_BYTES {
                rest.push(buffer);
                continue;
            }
            match Arc::try_unwrap(buffer) {
                Ok(owned) => {
                    kept.bytes += owned.len;
                    kept.by_len.entry(owned.len).or_default().push(owned);
                }
                Err(shared) => rest.push(shared),
            }
        }
        rest
    }

    /// How many buffers are kept and their bytes (tests).
    #[cfg(test)]
    pub(super) fn held() -> (usize, usize) {
        let guard = KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        guard.as_ref().map_or((0, 0), |k| (k.by_len.values().map(Vec::len).sum(), k.bytes))
    }

    /// How many buffers of `len` bytes are kept (tests).
    #[cfg(test)]
    pub(super) fn held_of(len: usize) -> usize {
        let guard = KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        guard.as_ref().and_then(|k| k.by_len.get(&len)).map_or(0, Vec::len)
    }
}

/// Heap buffers of at least this many bytes get the huge-page advice too (NumPy's threshold).
pub const HUGE_PAGE_THRESHOLD: usize = 4 * 1024 * 1024;

/// Ask for transparent huge pages on the whole pages inside `[start, start + len)`, which
/// this buffer owns. Advice only: failure (THP disabled) is harmless and ignored.
fn advise_huge_pages(start: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        let first = (start as usize).next_multiple_of(PAGE_ALIGN);
        let end = (start as usize + len) & !(PAGE_ALIGN - 1);
        if end > first {
            // SAFETY: [first, end) lies inside memory this buffer owns; the advice changes only
            // how the kernel backs those pages, never their contents or validity.
            unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, len);
}

const fn wants_mapping(len: usize, zeroed: bool) -> bool {
    len >= MAP_THRESHOLD || len >= RECYCLE_MIN || (zeroed && len >= PAGE_ALIGN_THRESHOLD)
}

/// The alignment of a heap buffer of `len` bytes.
const fn heap_alignment(len: usize) -> usize {
    if len >= PAGE_ALIGN_THRESHOLD {
        PAGE_ALIGN
    } else {
        HOST_ALIGN
    }
}

/// The allocation behind a heap buffer of `len` bytes (a pure function of `len`, so `Drop`
/// recomputes it): a small buffer exactly, cache-line aligned; a page-aligned one as `len`
/// plus a page at the allocator's plain alignment, the buffer starting at the first page
/// boundary inside. Why not ask the allocator for page alignment: glibc serves such a request
/// from a fresh mapping every time (its alignment padding makes the request larger than the
/// freed mapping that raised glibc's mmap threshold), so every new buffer of a size faulted
/// its pages in again; a plain request of the same size is served from the heap after the
/// first is freed, reusing that block's pages, as `np.empty` does.
fn heap_layout(len: usize) -> Option<AllocLayout> {
    if heap_alignment(len) == PAGE_ALIGN {
        AllocLayout::from_size_align(len.checked_add(PAGE_ALIGN)?, PLAIN_ALIGN).ok()
    } else {
        AllocLayout::from_size_align(len, HOST_ALIGN).ok()
    }
}

/// An alignment every allocator serves with its plain `malloc` (glibc: 16 on 64-bit).
const PLAIN_ALIGN: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// From the heap; the buffer starts `lead` bytes into its allocation.
    Heap {
        lead: usize,
    },
    Mapped,
    Wrapped,
    /// A private mapping of a file ([`FileStore::snapshot`]): unmapped on drop, never recycled
    /// (its pages are the file's until written).
    FileSnapshot,
}

/// A byte buffer in host memory.
///
/// Owned buffers are freed on drop; wrapped buffers (a caller's pointer) are never
/// initialised or freed.
///
/// # Access contract
/// The buffer is `Send + Sync`, and through a shared reference it offers only safe *reads*
/// ([`HostBuffer::read`]). Writing needs either `&mut self` ([`HostBuffer::write_mut`], safe)
/// or the `unsafe` [`HostBuffer::write`], whose caller promises that nothing else reads or
/// writes the written range during the call. Without that rule two threads holding one
/// `Arc<HostBuffer>` could race on the same bytes from safe code, which is undefined
/// behaviour. Callers that share a buffer either keep it behind a lock (the core's
/// `model::HostStore` wraps it in an `RwLock`) or uphold the contract by their own protocol
/// (the Python carriers: writes hold the GIL and a pending move's claim refuses them).
#[derive(Debug)]
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
    origin: Origin,
    /// The file a [`Origin::FileSnapshot`] maps and the byte offset of the mapping in it; the
    /// file is told when the mapping is gone.
    mapped_file: Option<(Arc<FileStore>, u64)>,
}

// SAFETY: HostBuffer is a plain region of memory with no thread affinity; synchronisation of
// reads and writes is the responsibility of the callers (see the type docs).
unsafe impl Send for HostBuffer {}
// SAFETY: a shared reference allows only reads of the bytes (`read`) and raw pointers;
// every write through `&HostBuffer` is `unsafe` and its caller guarantees exclusive access to
// the range (see the type's access contract), so `&HostBuffer` cannot cause a data race from
// safe code.
unsafe impl Sync for HostBuffer {}

fn out_of_memory() -> TryReserveError {
    // Reuse the std reservation error to report an impossible size uniformly.
    Vec::<u8>::new().try_reserve(usize::MAX).unwrap_err()
}

impl HostBuffer {
    /// Allocate `len` bytes, zeroed when `zeroed` is true (mapped buffers are always zero).
    pub fn new(len: usize, zeroed: bool) -> Result<Self, TryReserveError> {
        if len == 0 {
            return Ok(Self {
                ptr: NonNull::<u64>::dangling().cast(),
                len: 0,
                origin: Origin::Heap { lead: 0 },
                mapped_file: None,
            });
        }
        if wants_mapping(len, zeroed) {
            if !zeroed && len >= RECYCLE_MIN {
                if let Some(addr) = recycled::take(len) {
                    let ptr = NonNull::new(addr as *mut u8).ok_or_else(out_of_memory)?;
                    return Ok(Self { ptr, len, origin: Origin::Mapped, mapped_file: None });
                }
            }
            return Self::map(len);
        }
        let layout = heap_layout(len).ok_or_else(out_of_memory)?;
        // SAFETY: layout has a non-zero size (len > 0 checked above).
        let raw = unsafe {
            if zeroed {
                alloc_zeroed(layout)
            } else {
                alloc(layout)
            }
        };
        if raw.is_null() {
            return Err(out_of_memory());
        }
        // The buffer starts at the first boundary of its alignment inside the allocation
        // (which has room for it: see `heap_layout`).
        let lead = raw.align_offset(heap_alignment(len));
        // SAFETY: lead < the alignment, and the allocation is `len` + that alignment bytes
        // long whenever the alignment exceeds the allocator's (else lead is 0).
        let ptr = NonNull::new(unsafe { raw.add(lead) }).ok_or_else(out_of_memory)?;
        if len >= HUGE_PAGE_THRESHOLD {
            advise_huge_pages(ptr.as_ptr(), len);
        }
        Ok(Self { ptr, len, origin: Origin::Heap { lead }, mapped_file: None })
    }

    /// `n` uninitialised buffers of `len` bytes each, as `new(len, false)` makes them, served
    /// first from the buffers of that length a [`keep_batch`](Self::keep_batch) kept (their
    /// pages present: no faults, nothing zeroed). Either all `n` or an error, with the kept
    /// buffers taken kept again.
    pub fn uninit_batch(len: usize, n: usize) -> Result<Vec<Self>, TryReserveError> {
        let mut out = kept_batches::take(len, n);
        if let Err(e) = out.try_reserve_exact(n - out.len()) {
            drop(Self::keep_batch(out.into_iter().map(Arc::new).collect()));
            return Err(e);
        }
        while out.len() < n {
            match Self::new(len, false) {
                Ok(buffer) => out.push(buffer),
                Err(e) => {
                    drop(Self::keep_batch(out.into_iter().map(Arc::new).collect()));
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// Give back buffers a batch is done with: an uninitialised-capable heap buffer nobody
    /// else holds is kept for a later [`uninit_batch`](Self::uninit_batch) of its length, up
    /// to 64 MiB together (`BATCH_KEEP_MAX_BYTES`). Returns the rest, which the caller drops (a
    /// mapping freed is unmapped or recycled then, as any other).
    pub fn keep_batch(buffers: Vec<Arc<Self>>) -> Vec<Arc<Self>> {
        kept_batches::give(buffers)
    }

    /// Frees this buffer as its drop does, except for the system calls: a mapping the recycled
    /// list keeps is kept here and now (a push onto a list), and what needs a system call (an
    /// unmapping of the mappings the list pushed out, or of this buffer when it is not kept; a
    /// heap free, which may return memory to the kernel) is returned, to be run wherever the
    /// caller likes. A carrier's release hands that to an engine worker, and so a buffer that
    /// is simply recycled (a promoted layer's primary, evicted) wakes no thread.
    pub fn free_but_system_calls(self) -> Option<Box<dyn FnOnce() + Send>> {
        if self.origin != Origin::Mapped {
            return Some(Box::new(move || drop(self)));
        }
        let this = std::mem::ManuallyDrop::new(self);
        let unmaps = recycled::give(this.ptr.as_ptr() as usize, this.len);
        if unmaps.is_empty() {
            return None;
        }
        // SAFETY: the ranges `recycled::give` returned, as in the drop of a mapped buffer.
        Some(Box::new(move || unsafe { unmap_released(unmaps) }))
    }

    /// How many buffers of `len` bytes [`keep_batch`](Self::keep_batch) keeps now (tests of
    /// the layers that give buffers back).
    #[cfg(test)]
    pub(crate) fn kept_of(len: usize) -> usize {
        kept_batches::held_of(len)
    }

    fn map(len: usize) -> Result<Self, TryReserveError> {
        // SAFETY: an anonymous private mapping at a kernel-chosen address touches no existing
        // memory; the result is checked against MAP_FAILED before use.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(out_of_memory());
        }
        advise_huge_pages(raw.cast(), len);
        debug_assert_eq!(raw as usize % PAGE_ALIGN, 0, "mappings are page-aligned");
        let ptr = NonNull::new(raw.cast::<u8>()).ok_or_else(out_of_memory)?;
        Ok(Self { ptr, len, origin: Origin::Mapped, mapped_file: None })
    }

    /// Borrow `len` bytes at `ptr` without taking ownership.
    ///
    /// # Safety
    /// `ptr` must address `len` readable and writable bytes that stay valid for the life of
    /// the returned buffer.
    pub unsafe fn wrap(ptr: NonNull<u8>, len: usize) -> Self {
        Self { ptr, len, origin: Origin::Wrapped, mapped_file: None }
    }

    /// Take ownership of a private mapping of `file` (see [`FileStore::snapshot`]).
    ///
    /// # Safety
    /// `ptr` must be a mapping of exactly `len` bytes that nothing else references or unmaps,
    /// and `file` must have counted it as a snapshot.
    pub(super) unsafe fn from_file_mapping(ptr: NonNull<u8>, len: usize, file: Arc<FileStore>, byte_off: u64) -> Self {
        Self { ptr, len, origin: Origin::FileSnapshot, mapped_file: Some((file, byte_off)) }
    }

    /// Whether the buffer is a copy-on-write snapshot of a file ([`FileStore::snapshot`]).
    pub fn is_file_snapshot(&self) -> bool {
        self.origin == Origin::FileSnapshot
    }

    /// Whether every page of this buffer is in memory: for a file snapshot, whether the file's
    /// bytes it maps are all in the page cache, so reading it waits for no disk. Other buffers
    /// answer true. An error of the query is returned as is.
    ///
    /// The page cache is asked by `cachestat` (Linux 6.5), whose cost is per cached folio: a
    /// few microseconds for a file the kernel caches in 2 MiB folios. Where it does not exist,
    /// `mincore` on the snapshot, which looks each 4 KiB page up (about 220 µs for 16 MiB).
    pub fn pages_in_memory(&self) -> std::io::Result<bool> {
        #[cfg(target_os = "linux")]
        if let (Origin::FileSnapshot, Some((file, byte_off))) = (self.origin, &self.mapped_file) {
            // SAFETY: sysconf has no preconditions.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
            let pages = self.len.div_ceil(page);
            if let Some(cached) = cached_pages(file, *byte_off, self.len) {
                return Ok(cached >= pages as u64);
            }
            let mut resident = vec![0u8; pages];
            // SAFETY: the range is exactly this buffer's own page-aligned mapping, alive while
            // `&self` is, and `resident` has one byte per page of it, as mincore writes.
            let rc = unsafe { libc::mincore(self.ptr.as_ptr().cast(), self.len, resident.as_mut_ptr()) };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
            return Ok(resident.iter().all(|&r| r & 1 == 1));
        }
        Ok(true)
    }

    /// Bring a file snapshot's bytes into memory ahead of its reads (on another thread, say), so
    /// that its readers neither wait for the disk nor fault. When the file's bytes are all in
    /// the page cache ([`pages_in_memory`](Self::pages_in_memory)) their pages are mapped
    /// (`MADV_POPULATE_READ`): nothing is copied. Otherwise they are read from the file into
    /// the snapshot with one positioned read, whose large requests are about twice as fast as
    /// faulting a mapping in one readahead window at a time; the snapshot's pages become the
    /// process's own then. Either way no byte changes. On a buffer that is not a snapshot, or
    /// where the advice does not exist (before Linux 5.14), nothing happens.
    ///
    /// # Safety
    /// No page of the snapshot may have been written yet, and nobody may write it during the
    /// call: the read writes the file's bytes over the snapshot's, which equal them only while
    /// it is unwritten.
    pub unsafe fn load_snapshot(&self) -> std::io::Result<()> {
        let Some((file, byte_off)) = &self.mapped_file else {
            return Ok(());
        };
        if self.pages_in_memory()? {
            #[cfg(target_os = "linux")]
            // SAFETY: the range is exactly this buffer's own mapping, alive while `&self` is;
            // the advice maps pages for reading and changes no byte, so no reader or writer of
            // the memory can observe it. Advice only: an old kernel's EINVAL is ignored.
            unsafe {
                libc::madvise(self.ptr.as_ptr().cast(), self.len, libc::MADV_POPULATE_READ)
            };
            return Ok(());
        }
        // A write into the file mapping would first fault every page in from the disk to copy
        // it: the range becomes anonymous memory first, then is read into.
        // SAFETY: the caller guarantees nothing reads or writes the snapshot meanwhile, so its
        // pages may be swapped for others of the same length at the same address.
        unsafe { self.replace_with_anonymous_pages() }?;
        // SAFETY: the range is `len` writable bytes alive while `&self` is; the caller
        // guarantees that nothing writes or reads it meanwhile, and the read stores into every
        // byte the value the snapshot showed before (the file's).
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) };
        file.read_at(*byte_off, bytes)
    }

    /// Put private anonymous pages where this snapshot's file pages are, at the same address:
    /// a kept mapping of its length ([`recycled`]: pages present, no faults) moved there, or a
    /// fresh one. The bytes are unspecified afterwards.
    ///
    /// # Safety
    /// Nothing may read or write the buffer during the call.
    #[cfg(target_os = "linux")]
    unsafe fn replace_with_anonymous_pages(&self) -> std::io::Result<()> {
        let at = self.ptr.as_ptr().cast::<libc::c_void>();
        if let Some(kept) = recycled::take(self.len) {
            // SAFETY: `kept` is a mapping of exactly `len` bytes now ours alone; moving it onto
            // `at` replaces this buffer's own mapping of the same length, which nobody uses.
            let moved = unsafe {
                libc::mremap(
                    kept as *mut libc::c_void,
                    self.len,
                    self.len,
                    libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                    at,
                )
            };
            if moved != libc::MAP_FAILED {
                return Ok(());
            }
            // SAFETY: the kept mapping was not moved, so it is still ours: unmap it.
            unsafe { libc::munmap(kept as *mut libc::c_void, self.len) };
        }
        // SAFETY: a fixed anonymous mapping over exactly this buffer's own range, which nobody
        // uses; nothing else is mapped there.
        let raw = unsafe {
            libc::mmap(
                at,
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        advise_huge_pages(raw.cast(), self.len);
        Ok(())
    }

    #[cfg(not(target_os = "linux"))]
    unsafe fn replace_with_anonymous_pages(&self) -> std::io::Result<()> {
        Ok(())
    }

    /// The first byte (dangling but aligned when empty).
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the buffer owns its memory (false for a wrapped pointer).
    pub fn is_owned(&self) -> bool {
        self.origin != Origin::Wrapped
    }

    /// Read `out.len()` bytes at `byte_off`; `None` when the range is out of bounds.
    #[inline]
    pub fn read(&self, byte_off: usize, out: &mut [u8]) -> Option<()> {
        let end = byte_off.checked_add(out.len())?;
        if end > self.len {
            return None;
        }
        // SAFETY: [byte_off, end) lies inside the buffer (checked above) and `out` is a
        // distinct Rust slice, so the regions cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(byte_off), out.as_mut_ptr(), out.len()) };
        Some(())
    }

    /// Write `data` at `byte_off` through a shared reference; `None` when the range is out
    /// of bounds.
    ///
    /// # Safety
    /// No other thread may read or write `[byte_off, byte_off + data.len())` of this buffer
    /// (through [`read`](Self::read), [`as_ptr`](Self::as_ptr) or another `write`) while the
    /// call runs. Prefer [`write_mut`](Self::write_mut), where the borrow checker proves it.
    #[inline]
    pub unsafe fn write(&self, byte_off: usize, data: &[u8]) -> Option<()> {
        let end = byte_off.checked_add(data.len())?;
        if end > self.len {
            return None;
        }
        // SAFETY: the destination range is inside the buffer (checked above); `data` is a
        // distinct Rust slice; the caller guarantees nobody else touches the range meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(byte_off), data.len()) };
        Some(())
    }

    /// Write `data` at `byte_off`; `None` when the range is out of bounds. The exclusive
    /// borrow proves no other access to the buffer can run meanwhile.
    #[inline]
    pub fn write_mut(&mut self, byte_off: usize, data: &[u8]) -> Option<()> {
        // SAFETY: `&mut self` is the only reference to this buffer for the call.
        unsafe { self.write(byte_off, data) }
    }

    /// The whole buffer as a byte slice.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the buffer owns (or, wrapped, was promised) `len` readable bytes at `ptr`;
        // writes through `&self` are excluded for the slice's lifetime by the access contract.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The whole buffer as a mutable byte slice.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as for `as_slice`, and `&mut self` makes the slice the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// Unmaps the mappings `recycled::give` returned.
///
/// # Safety
/// Each range must be exactly one mapping `map` created that nobody uses any more (the
/// buffer given, or one the recycled list pushed out: the list holds a mapping only between a
/// drop and the `take` that hands it out), and is unmapped once.
unsafe fn unmap_released(ranges: Vec<(usize, usize)>) {
    for (addr, len) in ranges {
        // SAFETY: the caller's contract, range by range.
        unsafe { libc::munmap(addr as *mut libc::c_void, len) };
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        match self.origin {
            Origin::Wrapped => {}
            Origin::Heap { lead } if self.len > 0 => {
                let layout = heap_layout(self.len).expect("the layout `new` allocated with");
                // SAFETY: non-empty heap buffers were allocated in `new` with exactly this
                // layout, and start `lead` bytes into that allocation.
                unsafe { dealloc(self.ptr.as_ptr().sub(lead), layout) };
            }
            Origin::Heap { .. } => {}
            Origin::Mapped => {
                // Mapped buffers are exactly a mapping created in `map`: kept for reuse by a
                // later uninitialised buffer of its length, or unmapped, once.
                // SAFETY: the ranges `recycled::give` returned for this buffer.
                unsafe { unmap_released(recycled::give(self.ptr.as_ptr() as usize, self.len)) };
            }
            Origin::FileSnapshot => {
                // SAFETY: the buffer is exactly the mapping `FileStore::snapshot` made, which
                // nothing else references, unmapped once.
                unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
                if let Some((file, _)) = self.mapped_file.take() {
                    file.snapshot_unmapped();
                }
            }
        }
    }
}

/// The number of pages of `file`'s bytes `[byte_off, byte_off + len)` in the page cache, by
/// the `cachestat` system call; None where the kernel has no such call (before Linux 6.5) or
/// refuses it. The `libc` crate declares neither the call's number nor its structures for
/// x86_64 glibc, so they are written here, from the kernel's uapi (`linux/mman.h`): the number
/// is 451 on every architecture since the call exists.
#[cfg(target_os = "linux")]
fn cached_pages(file: &FileStore, byte_off: u64, len: usize) -> Option<u64> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct CachestatRange {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Cachestat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = CachestatRange { off: byte_off, len: len as u64 };
    let mut stat = Cachestat::default();
    // SAFETY: cachestat reads `range` and writes `stat`, both live locals of the layouts the
    // kernel's uapi declares; the descriptor is the store's open file, alive while `file` is.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.file().as_raw_fd() as libc::c_uint,
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0 as libc::c_uint,
        )
    };
    (rc == 0).then_some(stat.nr_cache)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_buffers_are_aligned_and_zeroed() {
        let b = HostBuffer::new(1000, true).unwrap();
        assert_eq!(b.as_ptr() as usize % HOST_ALIGN, 0);
        let mut out = [1u8; 1000];
        b.read(0, &mut out).unwrap();
        assert!(out.iter().all(|&x| x == 0));
    }

    /// Zeroed ones read zero; an uninitialised one may be a recycled mapping (whatever its
    /// last owner wrote), so only its origin and alignment are checked.
    #[test]
    fn large_buffers_are_mapped_page_aligned_and_zero() {
        for (len, zeroed) in [(MAP_THRESHOLD, false), (PAGE_ALIGN_THRESHOLD + 12345, true), (MAP_THRESHOLD + 1, true)] {
            let mut b = HostBuffer::new(len, zeroed).unwrap();
            assert_eq!(b.origin, Origin::Mapped);
            assert_eq!(b.as_ptr() as usize % PAGE_ALIGN, 0);
            let mut out = vec![1u8; len];
            b.read(0, &mut out).unwrap();
            assert!(!zeroed || out.iter().all(|&x| x == 0));
            b.write_mut(len - 4, &[7, 7, 7, 7]).unwrap();
            assert!(b.is_owned());
        }
    }

    #[test]
    fn mid_sized_uninitialised_buffers_come_from_the_heap_page_aligned() {
        for len in [PAGE_ALIGN_THRESHOLD, RECYCLE_MIN - 1] {
            let mut b = HostBuffer::new(len, false).unwrap();
            assert!(matches!(b.origin, Origin::Heap { .. }));
            assert_eq!(b.as_ptr() as usize % PAGE_ALIGN, 0);
            b.write_mut(0, &[1]).unwrap();
            b.write_mut(len - 1, &[2]).unwrap(); // the whole length is usable
            assert_eq!((b.as_slice()[0], b.as_slice()[len - 1]), (1, 2));
        }
    }

    /// A freed mid-sized buffer's pages serve the next buffer of its size: writing all of it
    /// again faults nothing in (glibc's heap; before, every such buffer was a fresh mapping).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_freed_mid_sized_buffer_is_reused_without_faults() {
        fn faults() -> i64 {
            // SAFETY: getrusage writes only the struct it is given.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
            usage.ru_minflt
        }
        let len = 1 << 20;
        let per_round: Vec<i64> = (0..6)
            .map(|round| {
                let mut b = HostBuffer::new(len, false).unwrap();
                let before = faults();
                for page in (0..len).step_by(PAGE_ALIGN) {
                    b.write_mut(page, &[round as u8]).unwrap();
                }
                faults() - before
            })
            .collect();
        assert!(per_round[1..].contains(&0), "faults per round: {per_round:?}");
    }

    /// Freed but for its system calls, a mapping the recycled list keeps leaves nothing to run
    /// and serves the next buffer of its length; a heap buffer leaves its free to run. A few
    /// attempts, as below: the list may be locked by another test's thread.
    #[test]
    fn a_kept_mapping_freed_but_for_system_calls_leaves_nothing_to_run() {
        let len = RECYCLE_MIN + 5 * PAGE_ALIGN;
        let kept_once = (0..5).any(|_| {
            let mut first = HostBuffer::new(len, false).unwrap();
            first.write_mut(len - 1, &[4]).unwrap();
            let addr = first.as_ptr();
            let rest = first.free_but_system_calls();
            let again = HostBuffer::new(len, false).unwrap();
            rest.is_none() && again.as_ptr() == addr && again.as_slice()[len - 1] == 4
        });
        assert!(kept_once, "kept at once, nothing left to run, and reused");
        let heap = HostBuffer::new(4096, true).unwrap();
        let rest = heap.free_but_system_calls().expect("a heap buffer's free is left to run");
        rest();
    }

    /// A freed mapping serves the next uninitialised buffer of its length (its bytes as the
    /// last owner left them, its pages present), never a zeroed one, and at most
    /// `RECYCLE_MAX_BUFFERS` are kept. Sizes of their own, so other tests do not take them;
    /// a few attempts, since a drop that finds the list locked by another test's thread
    /// unmaps instead of keeping (by design: the list is never waited for).
    #[test]
    fn freed_mappings_serve_uninitialised_buffers_of_their_length_only() {
        let len = RECYCLE_MIN + 3 * PAGE_ALIGN;
        let recycled_once = (0..5).any(|_| {
            let mut first = HostBuffer::new(len, false).unwrap();
            assert_eq!(first.origin, Origin::Mapped);
            first.write_mut(len - 1, &[9]).unwrap();
            let addr = first.as_ptr();
            drop(first);
            let zeroed = HostBuffer::new(len, true).unwrap();
            assert_eq!(zeroed.as_slice()[len - 1], 0, "a zeroed buffer is never a recycled one");
            let again = HostBuffer::new(len, false).unwrap();
            let other = HostBuffer::new(len + PAGE_ALIGN, false).unwrap();
            let fresh_if_there = other.as_ptr() != addr || other.as_slice()[len - 1] == 0;
            assert!(fresh_if_there, "another length never takes it");
            again.as_ptr() == addr && again.origin == Origin::Mapped && again.as_slice()[len - 1] == 9
        });
        assert!(recycled_once, "the freed mapping, its bytes as left, served the next buffer of its length");
        let many: Vec<HostBuffer> = (0..RECYCLE_MAX_BUFFERS + 2)
            .map(|k| HostBuffer::new(RECYCLE_MIN + (7 + k) * PAGE_ALIGN, false).unwrap())
            .collect();
        drop(many);
        let (count, bytes) = recycled::held();
        assert!(count <= RECYCLE_MAX_BUFFERS && bytes <= RECYCLE_MAX_BYTES, "{count} kept, {bytes} bytes");
    }

    /// A batch given back serves the next batch of its length: the same buffers, their bytes
    /// as left; a buffer somebody else still holds, another length or bytes beyond the bound
    /// are not kept. A length of its own, so other tests do not take them; a few attempts,
    /// since a give that finds the list locked by another test's thread keeps nothing.
    #[test]
    fn a_batch_given_back_serves_the_next_batch_of_its_length() {
        let len = 16 * 1024 + 3 * HOST_ALIGN;
        let served_again = (0..5).any(|_| {
            let mut batch = HostBuffer::uninit_batch(len, 3).unwrap();
            for (k, b) in batch.iter_mut().enumerate() {
                b.write_mut(len - 1, &[k as u8 + 1]).unwrap();
            }
            let addrs: Vec<usize> = batch.iter().map(|b| b.as_ptr() as usize).collect();
            let held: Vec<Arc<HostBuffer>> = batch.into_iter().map(Arc::new).collect();
            let still_held = Arc::clone(&held[0]);
            let rest = HostBuffer::keep_batch(held);
            assert!(rest.iter().any(|b| Arc::ptr_eq(b, &still_held)), "a shared buffer is not kept");
            drop(rest);
            let again = HostBuffer::uninit_batch(len, 2).unwrap();
            let other = HostBuffer::uninit_batch(len + HOST_ALIGN, 2).unwrap();
            assert!(
                other.iter().all(|b| !addrs[1..].contains(&(b.as_ptr() as usize))),
                "another length never takes them"
            );
            let mut got: Vec<(usize, u8)> =
                again.iter().map(|b| (b.as_ptr() as usize, b.as_slice()[len - 1])).collect();
            got.sort_unstable();
            let mut want: Vec<(usize, u8)> = vec![(addrs[1], 2), (addrs[2], 3)];
            want.sort_unstable();
            got == want
        });
        assert!(served_again, "the kept buffers, their bytes as left, served the next batch of their length");
        let big = HostBuffer::uninit_batch(1 << 20, BATCH_KEEP_MAX_BYTES / (1 << 20) + 2).unwrap();
        drop(HostBuffer::keep_batch(big.into_iter().map(Arc::new).collect()));
        let (_, bytes) = kept_batches::held();
        assert!(bytes <= BATCH_KEEP_MAX_BYTES, "{bytes} bytes kept");
        // A later batch of another length takes the room (the one a promote asks for next).
        let later_len = (1 << 20) + HOST_ALIGN;
        let made_room = (0..5).any(|_| {
            let later = HostBuffer::uninit_batch(later_len, 4).unwrap();
            let addrs: Vec<usize> = later.iter().map(|b| b.as_ptr() as usize).collect();
            drop(HostBuffer::keep_batch(later.into_iter().map(Arc::new).collect()));
            let again = HostBuffer::uninit_batch(later_len, 4).unwrap();
            again.iter().all(|b| addrs.contains(&(b.as_ptr() as usize)))
        });
        assert!(made_room, "the last batch given back is kept, making room");
    }

    /// Eight threads taking and giving back batches of one length at once: no buffer is
    /// ever handed to two of them (each writes its mark into every buffer it holds and finds
    /// it there before giving the batch back), and the bound holds.
    #[test]
    fn eight_threads_taking_and_giving_back_batches_never_share_a_buffer() {
        let len = 16 * 1024 + 5 * HOST_ALIGN;
        std::thread::scope(|scope| {
            for thread in 0..8u8 {
                scope.spawn(move || {
                    for round in 0..200u32 {
                        let mut batch = HostBuffer::uninit_batch(len, 1 + (round as usize % 7)).unwrap();
                        let mark = [thread, round as u8];
                        for b in &mut batch {
                            b.write_mut(0, &mark).unwrap();
                            b.write_mut(len - 2, &mark).unwrap();
                        }
                        std::thread::yield_now();
                        for b in &batch {
                            assert_eq!(&b.as_slice()[..2], &mark);
                            assert_eq!(&b.as_slice()[len - 2..], &mark);
                        }
                        drop(HostBuffer::keep_batch(batch.into_iter().map(Arc::new).collect()));
                    }
                });
            }
        });
        let (_, bytes) = kept_batches::held();
        assert!(bytes <= BATCH_KEEP_MAX_BYTES, "{bytes} bytes kept");
    }

    #[test]
    fn out_of_bounds_access_is_refused() {
        let mut b = HostBuffer::new(8, true).unwrap();
        assert!(b.write_mut(6, &[1, 2, 3]).is_none());
        assert!(b.read(usize::MAX, &mut [0u8; 2]).is_none());
        b.write_mut(4, &[9, 9, 9, 9]).unwrap();
        assert_eq!(&b.as_slice()[4..], &[9; 4]);
        let mut out = [0u8; 4];
        b.read(4, &mut out).unwrap();
        assert_eq!(out, [9; 4]);
    }

    #[test]
    fn wrapped_memory_is_not_freed() {
        let mut backing = vec![5u8; 16];
        let ptr = NonNull::new(backing.as_mut_ptr()).unwrap();
        // SAFETY: backing outlives the wrapper.
        let b = unsafe { HostBuffer::wrap(ptr, 16) };
        assert!(!b.is_owned());
        drop(b);
        assert_eq!(backing[3], 5);
    }
}
