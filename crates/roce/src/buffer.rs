//! Buffers for registration, with the kernel's help for large ones.
//!
//! The engine (`roce-proto`) allocates aligned memory and makes no system
//! calls; the advice that the kernel back a large buffer with transparent
//! huge pages belongs here, in the driver.

use std::sync::Arc;

use roce_proto::mem::PAGE_SIZE;
use roce_proto::MemBuf;

/// Size of an x86-64 huge page: buffers of this size or more are aligned to
/// it and offered to the kernel for transparent huge pages.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Allocates `len` zero bytes for registration. Buffers of 2 MiB or more
/// are 2 MiB aligned and offered to the kernel for transparent huge pages
/// (`madvise(MADV_HUGEPAGE)`), which it uses when it has them: fewer TLB
/// misses when the NIC sweeps large regions. Smaller ones are
/// [`MemBuf::new`]'s page-aligned buffers.
pub fn alloc_buffer(len: usize) -> Arc<MemBuf> {
    if len < HUGE_PAGE_SIZE {
        return MemBuf::new(len);
    }
    advise(MemBuf::with_alignment(len, HUGE_PAGE_SIZE))
}

/// [`alloc_buffer`] for a size that comes from outside (a configuration, a
/// command line): `None`, not an abort, where the machine cannot give that
/// much memory.
pub fn try_alloc_buffer(len: usize) -> Option<Arc<MemBuf>> {
    if len < HUGE_PAGE_SIZE {
        return MemBuf::try_with_alignment(len, PAGE_SIZE);
    }
    MemBuf::try_with_alignment(len, HUGE_PAGE_SIZE).map(advise)
}

/// Offers a 2 MiB-aligned buffer's pages to the kernel for transparent
/// huge pages.
fn advise(buf: Arc<MemBuf>) -> Arc<MemBuf> {
    let len = buf.len();
    // `with_alignment` spans `len` rounded up to the alignment.
    let size = len.next_multiple_of(HUGE_PAGE_SIZE);
    // SAFETY: MADV_HUGEPAGE is advice: it changes neither the contents nor
    // the validity of any page, only how the kernel may back the range, so
    // no Rust object can be affected (unlike MADV_DONTNEED or MADV_FREE). The
    // range is the buffer's own allocation, 2 MiB aligned as madvise wants.
    // A kernel without THP refuses it, which is harmless: the return value
    // is ignored on purpose.
    unsafe { libc::madvise(buf.as_ptr().cast(), size, libc::MADV_HUGEPAGE) };
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A size no machine has is refused, not an abort; a fallible buffer
    /// is laid out as the infallible one.
    #[test]
    fn a_buffer_too_large_is_refused() {
        assert!(try_alloc_buffer(isize::MAX as usize).is_none());
        assert!(try_alloc_buffer(usize::MAX).is_none());
        let b = try_alloc_buffer(3 << 20).unwrap();
        assert_eq!((b.len(), b.addr() % HUGE_PAGE_SIZE as u64), (3 << 20, 0));
        let s = try_alloc_buffer(100).unwrap();
        assert_eq!((s.len(), s.addr() % 4096), (100, 0));
    }

    #[test]
    fn large_buffers_are_huge_page_aligned() {
        let b = alloc_buffer(3 << 20);
        assert_eq!(b.addr() % HUGE_PAGE_SIZE as u64, 0);
        assert_eq!(b.len(), 3 << 20);
        let s = alloc_buffer(100);
        assert_eq!((s.len(), s.addr() % 4096), (100, 0));
    }
}
