//! Aligned host memory, owned or borrowed from a caller-supplied pointer.

use std::alloc::{alloc, alloc_zeroed, dealloc, Layout as AllocLayout};
use std::ptr::NonNull;

/// Alignment of small owned buffers: a cache line, and enough for any SIMD load and for
/// DLPack consumers that prefer 64-byte aligned data.
pub const HOST_ALIGN: usize = 64;

/// Alignment of large owned buffers: a page, so that O_DIRECT block and file transfers can go
/// straight from (or into) the carrier's memory without a bounce buffer.
pub const PAGE_ALIGN: usize = 4096;

/// Buffers of at least this many bytes are page-aligned; below it the padding is not worth it.
pub const PAGE_ALIGN_THRESHOLD: usize = 64 * 1024;

/// The alignment an owned buffer of `len` bytes gets (a pure function of `len`, so `Drop`
/// recomputes the exact allocation layout).
pub const fn owned_alignment(len: usize) -> usize {
    if len >= PAGE_ALIGN_THRESHOLD { PAGE_ALIGN } else { HOST_ALIGN }
}

/// A byte buffer in host memory.
///
/// Owned buffers are freed on drop; wrapped buffers (a caller's pointer) are never
/// initialised or freed. The buffer is `Send + Sync`: concurrent access is coordinated by the
/// carrier object model (pending moves claim their carriers), exactly as for `CPU.pointer()`.
#[derive(Debug)]
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
    owned: bool,
}

// SAFETY: HostBuffer is a plain region of memory with no thread affinity; synchronisation of
// reads and writes is the responsibility of the callers (see the type docs).
unsafe impl Send for HostBuffer {}
// SAFETY: as above; &HostBuffer hands out raw pointers only.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// Allocate `len` bytes, zeroed when `zeroed` is true.
    pub fn new(len: usize, zeroed: bool) -> Result<Self, std::collections::TryReserveError> {
        if len == 0 {
            return Ok(Self { ptr: NonNull::<u64>::dangling().cast(), len: 0, owned: true });
        }
        let layout = AllocLayout::from_size_align(len, owned_alignment(len)).map_err(|_| {
            // Reuse the std reservation error to report an impossible size uniformly.
            Vec::<u8>::new().try_reserve(usize::MAX).unwrap_err()
        })?;
        // SAFETY: layout has a non-zero size (len > 0 checked above).
        let raw = unsafe { if zeroed { alloc_zeroed(layout) } else { alloc(layout) } };
        match NonNull::new(raw) {
            Some(ptr) => Ok(Self { ptr, len, owned: true }),
            None => Err(Vec::<u8>::new().try_reserve(usize::MAX).unwrap_err()),
        }
    }

    /// Borrow `len` bytes at `ptr` without taking ownership.
    ///
    /// # Safety
    /// `ptr` must address `len` readable and writable bytes that stay valid for the life of
    /// the returned buffer.
    pub unsafe fn wrap(ptr: NonNull<u8>, len: usize) -> Self {
        Self { ptr, len, owned: false }
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_owned(&self) -> bool {
        self.owned
    }

    /// Read `out.len()` bytes at `byte_off`; `None` when the range is out of bounds.
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

    /// Write `data` at `byte_off`; `None` when the range is out of bounds.
    pub fn write(&self, byte_off: usize, data: &[u8]) -> Option<()> {
        let end = byte_off.checked_add(data.len())?;
        if end > self.len {
            return None;
        }
        // SAFETY: the destination range is inside the buffer (checked above); `data` is a
        // distinct Rust slice.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(byte_off), data.len()) };
        Some(())
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if self.owned && self.len > 0 {
            // SAFETY: owned non-empty buffers were allocated in `new` with exactly this layout.
            unsafe { dealloc(self.ptr.as_ptr(), AllocLayout::from_size_align_unchecked(self.len, owned_alignment(self.len))) };
        }
    }
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

    #[test]
    fn large_buffers_are_page_aligned() {
        let b = HostBuffer::new(PAGE_ALIGN_THRESHOLD, false).unwrap();
        assert_eq!(b.as_ptr() as usize % PAGE_ALIGN, 0);
    }

    #[test]
    fn out_of_bounds_access_is_refused() {
        let b = HostBuffer::new(8, true).unwrap();
        assert!(b.write(6, &[1, 2, 3]).is_none());
        assert!(b.read(usize::MAX, &mut [0u8; 2]).is_none());
        b.write(4, &[9, 9, 9, 9]).unwrap();
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
