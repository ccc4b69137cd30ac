//! Memory shared between the application and the NIC.
//!
//! In RDMA, registered memory is written by the NIC (incoming WRITEs, READ
//! responses, RECV payloads, atomics) while the application may hold it too.
//! `MemBuf` models that honestly: one page-aligned allocation that both sides
//! reach only through this module's copy and atomic operations, never through
//! Rust references to the bytes.
//!
//! # Safety argument
//!
//! * The allocation is made once with a valid non-zero-size `Layout`, owned by
//!   the `MemBuf`, and freed once in `Drop` with the same layout. `MemBuf` is
//!   only handed out behind `Arc`, so it outlives every engine object (MR) and
//!   application handle that uses it.
//! * Every access is bounds-checked against `len` before a pointer is formed:
//!   `check` rejects `offset + n` past the end (with overflow checked). So all
//!   pointers stay inside the allocation.
//! * No `&[u8]`/`&mut [u8]` to the shared bytes is ever created; copies use
//!   `ptr::copy_nonoverlapping` between the allocation and a caller's own
//!   slice, which cannot overlap the allocation (the caller cannot hold a
//!   reference into it). Therefore no Rust aliasing rule is violated.
//! * Atomic operations use `AtomicU64::from_ptr` on 8-byte-aligned addresses
//!   (checked) inside the allocation; the allocation is page aligned, so an
//!   aligned offset is an aligned address.
//! * Concurrent plain copies to overlapping bytes from two threads are a data
//!   race, exactly as in RDMA (the verbs contract: the application must not
//!   touch a buffer while a work request using it is outstanding). The NIC
//!   reaches a buffer only through a `NicBuf`, the binding of the buffer to
//!   one engine, held by that engine's MR records; a buffer is bound to at
//!   most one engine at a time, and an engine accesses it only inside its
//!   `&mut self` methods, so the NICs' accesses are sequential. Drivers that
//!   run the engine on another thread than the application inherit the
//!   verbs contract, which the `roce` crate documents on its memory API.

use core::num::NonZeroU64;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::Arc;

use crate::verbs::VerbsError;

/// Page size used for alignment.
pub const PAGE_SIZE: usize = 4096;
/// Size of an x86-64 huge page: large buffers are aligned to it.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// An access outside the buffer, or a misaligned atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("memory access [{offset}, +{len}) outside a {size}-byte buffer or misaligned")]
pub struct OutOfBounds {
    pub offset: usize,
    pub len: usize,
    pub size: usize,
}

/// A page-aligned, zero-initialised buffer shared by application and NIC.
pub struct MemBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
    /// The engine whose regions use the buffer (`EngineId`), 0 if none.
    owner: AtomicU64,
    /// How many regions of that engine use it.
    regs: AtomicUsize,
}

// SAFETY: MemBuf owns its allocation; all access goes through methods that
// bounds-check and copy (see the module's safety argument). Sharing it between
// threads carries the verbs contract on overlapping concurrent access.
unsafe impl Send for MemBuf {}
// SAFETY: as above.
unsafe impl Sync for MemBuf {}

impl MemBuf {
    /// Allocates `len` zero bytes (at least one page is reserved). Buffers
    /// of 2 MiB or more are aligned to 2 MiB and offered to the kernel for
    /// transparent huge pages (`madvise(MADV_HUGEPAGE)`), which it uses when
    /// it has them: fewer TLB misses when the NIC sweeps large regions.
    pub fn new(len: usize) -> Arc<MemBuf> {
        let huge = len >= HUGE_PAGE_SIZE;
        let align = if huge { HUGE_PAGE_SIZE } else { PAGE_SIZE };
        let size = len.max(1).next_multiple_of(align);
        let layout = Layout::from_size_align(size, align).expect("buffer size overflows isize");
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        if huge {
            // SAFETY: [ptr, ptr+size) is our own mapping-backed allocation,
            // 2 MiB aligned; madvise only changes how the kernel backs it.
            // A kernel without THP returns an error, which is harmless.
            unsafe { libc::madvise(ptr.as_ptr().cast(), size, libc::MADV_HUGEPAGE) };
        }
        Arc::new(MemBuf { ptr, len, layout, owner: AtomicU64::new(0), regs: AtomicUsize::new(0) })
    }

    /// Allocates a buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> Arc<MemBuf> {
        let b = MemBuf::new(data.len());
        b.write(0, data).expect("fits by construction");
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first byte (what ibverbs would use as the VA).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    fn check(&self, offset: usize, n: usize) -> Result<(), OutOfBounds> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(OutOfBounds { offset, len: n, size: self.len }),
        }
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        self.check(offset, dst.len())?;
        // SAFETY: bounds checked above; dst is the caller's own memory and
        // cannot overlap the allocation (no references into it exist).
        unsafe { core::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` into the buffer at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfBounds> {
        self.check(offset, src.len())?;
        // SAFETY: as in `read`.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len()) };
        Ok(())
    }

    /// Fills `[offset, offset + n)` with `byte`.
    pub fn fill(&self, offset: usize, n: usize, byte: u8) -> Result<(), OutOfBounds> {
        self.check(offset, n)?;
        // SAFETY: bounds checked above.
        unsafe { core::ptr::write_bytes(self.ptr.as_ptr().add(offset), byte, n) };
        Ok(())
    }

    /// Copies the whole buffer out (for checks and tests).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.read(0, &mut v).expect("whole buffer is in bounds");
        v
    }

    fn atomic(&self, offset: usize) -> Result<&AtomicU64, OutOfBounds> {
        self.check(offset, 8)?;
        if offset % 8 != 0 {
            return Err(OutOfBounds { offset, len: 8, size: self.len });
        }
        // SAFETY: in bounds, 8-byte aligned (page-aligned base + aligned offset),
        // valid for the lifetime of &self; all concurrent access to these bytes
        // by the NIC is atomic.
        Ok(unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(offset).cast::<u64>()) })
    }

    /// Atomic compare-and-swap of the 64-bit word at `offset`, in the byte
    /// order of RDMA atomics (the word is stored in host order, as the NIC
    /// executes on host memory). Returns the original value.
    pub fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, OutOfBounds> {
        let a = self.atomic(offset)?;
        Ok(match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(v) | Err(v) => v,
        })
    }

    /// Atomic fetch-and-add on the 64-bit word at `offset`. Returns the original value.
    pub fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, OutOfBounds> {
        Ok(self.atomic(offset)?.fetch_add(add, Ordering::SeqCst))
    }

    /// Atomic 64-bit load.
    pub fn load_u64(&self, offset: usize) -> Result<u64, OutOfBounds> {
        Ok(self.atomic(offset)?.load(Ordering::SeqCst))
    }

    /// Atomic 64-bit store (RDMA ATOMIC WRITE).
    pub fn store_u64(&self, offset: usize, v: u64) -> Result<(), OutOfBounds> {
        self.atomic(offset)?.store(v, Ordering::SeqCst);
        Ok(())
    }

    /// Binds the buffer to `engine` for one more of its regions. Fails if
    /// another engine has it.
    fn bind(&self, engine: EngineId) -> Result<(), VerbsError> {
        let id = engine.0.get();
        // Acquire: the previous engine's accesses happen before ours (its
        // `release` stored 0 with Release).
        match self.owner.compare_exchange(0, id, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {}
            Err(cur) if cur == id => {}
            Err(_) => return Err(VerbsError::BufferOnOtherDevice),
        }
        // Only the owner changes the count, inside its `&mut` calls.
        self.regs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Ends one region's binding; the last one frees the buffer for
    /// another engine.
    fn release(&self) {
        if self.regs.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.owner.store(0, Ordering::Release);
        }
    }
}

impl Drop for MemBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

impl core::fmt::Debug for MemBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "MemBuf({} bytes @ {:#x})", self.len, self.addr())
    }
}

/// Identifies one engine, for binding buffers: unique in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EngineId(NonZeroU64);

impl EngineId {
    /// A number no other engine of this process had.
    pub(crate) fn fresh() -> EngineId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1))
            .expect("2^64 engines created");
        EngineId(NonZeroU64::new(id).expect("starts at 1, never wraps"))
    }
}

/// A buffer as one region of one engine sees it: the NIC's way to the
/// bytes, and the application's through `Engine::mr_*`. Exists only in the
/// engine's MR records (not `Clone`), and its methods are called only
/// inside the engine's `&mut self` methods, so one engine's accesses are
/// sequential and no two engines access a buffer.
#[derive(Debug)]
pub(crate) struct NicBuf {
    buf: Arc<MemBuf>,
}

impl NicBuf {
    /// Binds `buf` to `engine` for one region; fails if another engine has
    /// it. Dropping the `NicBuf` ends the binding.
    pub(crate) fn bind(buf: Arc<MemBuf>, engine: EngineId) -> Result<NicBuf, VerbsError> {
        buf.bind(engine)?;
        Ok(NicBuf { buf })
    }

    #[inline]
    pub(crate) fn nic_read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        self.buf.read(offset, dst)
    }

    #[inline]
    pub(crate) fn nic_write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfBounds> {
        self.buf.write(offset, src)
    }

    #[inline]
    pub(crate) fn nic_fill(&self, offset: usize, n: usize, byte: u8) -> Result<(), OutOfBounds> {
        self.buf.fill(offset, n, byte)
    }

    pub(crate) fn nic_compare_swap(
        &self,
        offset: usize,
        compare: u64,
        swap: u64,
    ) -> Result<u64, OutOfBounds> {
        self.buf.compare_swap(offset, compare, swap)
    }

    pub(crate) fn nic_fetch_add(&self, offset: usize, add: u64) -> Result<u64, OutOfBounds> {
        self.buf.fetch_add(offset, add)
    }
}

impl Drop for NicBuf {
    fn drop(&mut self) {
        self.buf.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_atomics() {
        let b = MemBuf::new(100);
        assert_eq!(b.len(), 100);
        assert_eq!(b.addr() % PAGE_SIZE as u64, 0);
        b.write(96, &[1, 2, 3, 4]).unwrap();
        assert!(b.write(97, &[1, 2, 3, 4]).is_err());
        assert!(b.read(usize::MAX, &mut [0]).is_err());
        let mut x = [0u8; 4];
        b.read(96, &mut x).unwrap();
        assert_eq!(x, [1, 2, 3, 4]);
        assert_eq!(b.fetch_add(8, 5).unwrap(), 0);
        assert_eq!(b.compare_swap(8, 5, 9).unwrap(), 5);
        assert_eq!(b.compare_swap(8, 5, 1).unwrap(), 9);
        assert_eq!(b.load_u64(8).unwrap(), 9);
        assert!(b.fetch_add(4, 1).is_err());
        assert!(b.fetch_add(96, 1).is_err());
    }

    #[test]
    fn large_buffers_are_huge_page_aligned() {
        let b = MemBuf::new(3 << 20);
        assert_eq!(b.addr() % HUGE_PAGE_SIZE as u64, 0);
        assert_eq!(b.len(), 3 << 20);
        b.write((3 << 20) - 1, &[1]).unwrap();
        assert!(b.write(3 << 20, &[1]).is_err());
    }

    #[test]
    fn one_engine_at_a_time() {
        let (x, y) = (EngineId::fresh(), EngineId::fresh());
        assert_ne!(x, y);
        let b = MemBuf::new(64);
        let r1 = NicBuf::bind(b.clone(), x).unwrap();
        let r2 = NicBuf::bind(b.clone(), x).unwrap();
        assert_eq!(NicBuf::bind(b.clone(), y).unwrap_err(), VerbsError::BufferOnOtherDevice);
        drop(r1);
        assert_eq!(NicBuf::bind(b.clone(), y).unwrap_err(), VerbsError::BufferOnOtherDevice);
        drop(r2);
        let r3 = NicBuf::bind(b.clone(), y).unwrap();
        r3.nic_write(0, &[7; 8]).unwrap();
        assert_eq!(r3.nic_fetch_add(0, 1).unwrap(), 0x0707_0707_0707_0707);
        assert_eq!(NicBuf::bind(b, x).unwrap_err(), VerbsError::BufferOnOtherDevice);
    }
}
