//! Host copies with non-temporal stores, for gathers that write a large destination in many
//! short pieces (a tiled tier's tiles placed into one array: 256-byte rows at a 16 KiB
//! stride). Ordinary stores first read every destination line they touch into the cache;
//! streaming stores write whole lines straight to memory, so a gather of 64 MiB moves a third
//! less memory and keeps the cache for the sources. A memcpy of the same size does that on
//! its own; piece by piece it does not.
//!
//! Streaming stores are weakly ordered: call [`stream_fence`] once the copies are done and
//! before anything signals another thread that the destination is ready.

/// Requests that move at least this many bytes stream their stores; smaller ones are likely
/// read again soon and stay in the cache.
pub const STREAM_THRESHOLD: usize = 8 << 20;

/// Copies `bytes` bytes from `src` to `dst` with streaming stores where the platform has them
/// (x86_64: every whole 16-byte unit of `dst`; the unaligned ends and other platforms use
/// ordinary stores).
///
/// # Safety
/// As [`super::copy_span_host_to_host`]; and [`stream_fence`] runs before another thread
/// relies on the destination.
pub unsafe fn copy_span_streaming(src: *const u8, dst: *mut u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let head = dst.align_offset(16).min(bytes);
        let units = (bytes - head) / 16;
        // SAFETY: the caller vouches for both ranges; head + 16 * units <= bytes.
        unsafe {
            super::copy_span_host_to_host(src, dst, head);
            let (s, d) = (src.add(head), dst.add(head));
            for k in 0..units {
                // SAFETY: unit k lies inside both ranges and `d + 16k` is 16-byte aligned;
                // SSE2 is part of the x86_64 baseline.
                let v = _mm_loadu_si128(s.add(16 * k).cast::<__m128i>());
                _mm_stream_si128(d.add(16 * k).cast::<__m128i>(), v);
            }
            let done = head + 16 * units;
            super::copy_span_host_to_host(src.add(done), dst.add(done), bytes - done);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as the caller vouches.
    unsafe {
        super::copy_span_host_to_host(src, dst, bytes)
    }
}

/// Orders every streaming store made so far before any later store (x86_64 `sfence`).
pub fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no operands and only orders stores; SSE is part of the baseline.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_copies_every_byte_at_any_alignment_and_length() {
        let src: Vec<u8> = (0..300u32).map(|v| (v * 7 % 251) as u8).collect();
        for start in 0..20 {
            for len in [0, 1, 15, 16, 17, 64, 100, 255] {
                let mut dst = vec![0xAAu8; 300];
                // SAFETY: both ranges lie inside live vectors and do not overlap.
                unsafe { copy_span_streaming(src.as_ptr().add(3), dst.as_mut_ptr().add(start), len) };
                stream_fence();
                assert_eq!(&dst[start..start + len], &src[3..3 + len], "start {start} len {len}");
                assert!(dst[..start].iter().chain(&dst[start + len..]).all(|&b| b == 0xAA));
            }
        }
    }
}
