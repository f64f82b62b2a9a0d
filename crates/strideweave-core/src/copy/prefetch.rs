//! A hint to bring a small span of host memory into the cache ahead of a copy that reads it.
//!
//! A small move spends most of its time on bookkeeping (validation, claims, the commit), then
//! copies a source that is usually cold (written long before, by another object's fill) into a
//! destination that may be cold too. Asking for both spans' lines when the move starts lets
//! their misses overlap the bookkeeping instead of stalling the copy. Large spans need no hint: the hardware prefetcher follows a
//! long sequential copy by itself.

/// The most bytes one hint covers: beyond this the hardware prefetcher keeps up on its own, and
/// more outstanding requests would only queue behind the line-fill buffers.
pub const PREFETCH_MAX_BYTES: usize = 16 * 1024;

const LINE: usize = 64;

/// Hint that the `len` bytes at `addr` (at most [`PREFETCH_MAX_BYTES`] of them) will be read
/// soon, or written: a line already in the cache also spares a write its wait. Only a hint: it
/// reads nothing a program can observe, and an address that is not mapped, or not the
/// caller's, is ignored by the processor, so any `addr` is sound.
#[inline]
pub fn prefetch_read(addr: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let end = addr.saturating_add(len.min(PREFETCH_MAX_BYTES));
        let mut line = addr & !(LINE - 1);
        while line < end {
            // SAFETY: a prefetch is a hint with no architectural effect: it cannot fault, even
            // on an unmapped address, and it neither reads nor writes memory the program can
            // observe. SSE, which the intrinsic needs, is part of the x86-64 baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line as *const i8) };
            match line.checked_add(LINE) {
                Some(next) => line = next,
                None => break,
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (addr, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_over_any_address_is_harmless() {
        let data = vec![7u8; 3 * PREFETCH_MAX_BYTES];
        prefetch_read(data.as_ptr() as usize, data.len());
        prefetch_read(0, 4096);
        prefetch_read(usize::MAX - 10, 4096);
        assert!(data.iter().all(|&b| b == 7));
    }
}
