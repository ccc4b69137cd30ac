//! Memory shared between the application and the NIC.
//!
//! In RDMA, registered memory is written by the NIC (incoming WRITEs, READ
//! responses, RECV payloads, atomics) while the application holds it too.
//! `MemBuf` models that honestly: one allocation that both sides reach only
//! through copies and atomic operations on raw pointers, never through Rust
//! references to the bytes.
//!
//! # Safety argument
//!
//! * Memory. An owned buffer is allocated once with a valid non-zero-size
//!   `Layout` and freed once in `Drop` with the same layout; caller-owned
//!   memory ([`MemBuf::from_raw_parts`]) is valid for `len` bytes until
//!   `Drop` hands it back, by that function's contract. `MemBuf` is only
//!   handed out behind `Arc`, so it outlives every engine object (MR) and
//!   application handle that uses it.
//! * Bounds. Every access is checked against `len` before a pointer is
//!   formed: `check` rejects `offset + n` past the end (with overflow
//!   checked), so all pointers stay inside the memory.
//! * Aliasing. No `&mut [u8]` to the shared bytes is ever created, and a
//!   `&[u8]` only inside `PayloadRef::nic_icrc`, for one ICRC update,
//!   never escaping it (a NIC access like `nic_read`, under the same
//!   argument: nothing writes the bytes while it lives); copies use
//!   `ptr::copy_nonoverlapping` between the memory and a caller's own
//!   slice, which cannot overlap it (no reference into it may exist).
//! * Payload left in memory. A [`PayloadRef`] names bytes of a work
//!   request in progress that a driver hands to the kernel to send (an
//!   `iovec`) instead of the engine copying them into the packet. It holds
//!   the buffer's `Arc`, so the memory outlives it, and its range was
//!   checked against the buffer when the engine made it. Reading through
//!   its pointer is the NIC's read of a send's source: the verbs contract
//!   excludes writes to those bytes until the work request completes, and
//!   the driver sends before it lets anything else run against the engine
//!   (safe code can do nothing with it but take its address and length).
//!   Atomic operations use `AtomicU64::from_ptr` on 8-byte-aligned
//!   addresses (checked) inside the memory.
//! * Data races. Two threads may touch the same bytes at once only if both
//!   read or both use the atomics. Every access is one of:
//!   - the NIC's: `NicBuf`'s methods, the only safe ones that touch the
//!     bytes. A `NicBuf` exists only inside the MR record of one engine
//!     (crate-private, not `Clone`), and the engine calls them only inside
//!     its `&mut self` methods, so one engine's accesses are sequential.
//!     A buffer is bound to at most one engine at a time (`owner`,
//!     `regs`), so two engines never access it concurrently; the binding
//!     is handed over with Release/Acquire, so one engine's accesses
//!     happen before the next one's.
//!   - the application's through the engine: [`Engine::mr_read`],
//!     [`Engine::mr_write`] and [`Engine::mr_fill`] take `&mut Engine`, so
//!     they are sequential with the NIC's accesses, like them.
//!   - the application's directly: [`MemBuf::read`], [`MemBuf::write`],
//!     [`MemBuf::fill`], [`MemBuf::to_vec`], the four atomics and accesses
//!     through raw pointers ([`MemBuf::as_ptr`], or the caller's own for
//!     [`MemBuf::from_raw_parts`]) are `unsafe`: their caller promises that
//!     nothing conflicting runs concurrently, which is the verbs contract
//!     (no work request the NIC may execute against those bytes is in
//!     progress).
//!
//! [`Engine::mr_read`]: crate::Engine::mr_read
//! [`Engine::mr_write`]: crate::Engine::mr_write
//! [`Engine::mr_fill`]: crate::Engine::mr_fill

use core::num::NonZeroU64;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::Arc;

/// Page size: the least alignment of every buffer `MemBuf` allocates.
pub const PAGE_SIZE: usize = 4096;

/// An access outside the buffer, or a misaligned atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("memory access [{offset}, +{len}) outside a {size}-byte buffer or misaligned")]
pub struct OutOfBounds {
    pub offset: usize,
    pub len: usize,
    pub size: usize,
}

/// Who frees the memory.
enum Backing {
    /// Allocated by `MemBuf` with this layout.
    Owned(Layout),
    /// The caller's ([`MemBuf::from_raw_parts`]); this runs when the
    /// `MemBuf` goes.
    Foreign(Option<Box<dyn FnOnce() + Send>>),
}

/// Memory shared by application and NIC: allocated zeroed and page aligned
/// by [`MemBuf::new`] / [`MemBuf::with_alignment`], or the caller's own
/// ([`MemBuf::from_raw_parts`]).
///
/// The NIC (an [`Engine`](crate::Engine)) may write these bytes while the
/// application holds them, so safe code cannot touch them directly. The
/// sound ways are
///
/// * through the engine the buffer is registered with:
///   [`Engine::mr_read`](crate::Engine::mr_read),
///   [`Engine::mr_write`](crate::Engine::mr_write),
///   [`Engine::mr_fill`](crate::Engine::mr_fill) (a driver that runs the
///   engine on another thread offers the same behind its lock, as
///   `roce::Mr::read`/`write`/`fill` do);
/// * `unsafe` [`read`](MemBuf::read), [`write`](MemBuf::write),
///   [`fill`](MemBuf::fill), [`to_vec`](MemBuf::to_vec) and the atomics,
///   whose caller keeps the verbs contract.
///
/// ```
/// use core::net::{IpAddr, Ipv4Addr};
/// use roce_proto::*;
///
/// let mut engine = Engine::new(EngineConfig::new(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]), 1);
/// let pd = engine.alloc_pd();
/// let buf = MemBuf::new(4096);
/// let spec = MrSpec { buf: buf.clone(), offset: 0, length: 4096, iova: None, access: Access::ALL };
/// let mr = engine.reg_mr(pd, spec)?;
///
/// // Through the engine: exclusive with the NIC, no `unsafe`.
/// engine.mr_write(mr.lkey, 8, b"hello")?;
/// let mut got = [0u8; 5];
/// engine.mr_read(mr.lkey, 8, &mut got)?;
/// assert_eq!(&got, b"hello");
///
/// // Directly: the caller vouches that nothing runs against these bytes.
/// let mut again = [0u8; 5];
/// // SAFETY: the engine runs on this thread only and is not inside a
/// // call, so no access to the buffer can happen concurrently.
/// unsafe { buf.read(8, &mut again) }.unwrap();
/// assert_eq!(&again, b"hello");
/// # Ok::<(), VerbsError>(())
/// ```
///
/// Reading the shared bytes without `unsafe` does not compile:
///
/// ```compile_fail,E0133
/// let buf = roce_proto::MemBuf::new(4096);
/// let mut x = [0u8; 8];
/// buf.read(0, &mut x).unwrap();
/// ```
pub struct MemBuf {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
    /// The engine whose regions use the buffer (`EngineId`), 0 if none.
    owner: AtomicU64,
    /// How many regions of that engine use it.
    regs: AtomicUsize,
}

// SAFETY: the memory is reached only through the methods that keep the
// module's safety argument, from whichever thread; the `release` closure is
// `Send` and only ever touched by `Drop`, through `&mut self`.
unsafe impl Send for MemBuf {}
// SAFETY: `&MemBuf` gives no safe access to the bytes except through a
// `NicBuf` (one engine at a time) or the engine's `&mut` methods; the unsafe
// accessors carry the contract on concurrent access. `release` is not
// reachable through `&MemBuf`.
unsafe impl Sync for MemBuf {}

impl MemBuf {
    /// Allocates `len` zero bytes, page aligned (at least one page is
    /// reserved).
    pub fn new(len: usize) -> Arc<MemBuf> {
        MemBuf::with_alignment(len, PAGE_SIZE)
    }

    /// Allocates `len` zero bytes aligned to `align` (at least a page). The
    /// allocation spans `len` rounded up to a multiple of the alignment, at
    /// least one alignment unit: a driver may ask the kernel for huge pages
    /// for a 2 MiB-aligned buffer (`roce::alloc_buffer` does).
    ///
    /// # Panics
    /// If `align` is not a power of two, or the size overflows `isize`.
    /// Aborts, as `Vec` does, if the allocator has no room.
    pub fn with_alignment(len: usize, align: usize) -> Arc<MemBuf> {
        let layout = MemBuf::layout(len, align).expect("buffer size overflows isize");
        MemBuf::alloc(layout, len).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
    }

    /// [`MemBuf::with_alignment`] for a size that comes from outside (a
    /// configuration): `None`, not an abort, where the size overflows or
    /// the allocator has no room.
    ///
    /// # Panics
    /// If `align` is not a power of two.
    pub fn try_with_alignment(len: usize, align: usize) -> Option<Arc<MemBuf>> {
        MemBuf::alloc(MemBuf::layout(len, align)?, len)
    }

    /// `len` rounded up to a multiple of the alignment (at least a page),
    /// at least one unit; `None` if that overflows `isize`.
    fn layout(len: usize, align: usize) -> Option<Layout> {
        assert!(align.is_power_of_two(), "alignment {align} is not a power of two");
        let align = align.max(PAGE_SIZE);
        let size = len.max(1).checked_next_multiple_of(align)?;
        Layout::from_size_align(size, align).ok()
    }

    fn alloc(layout: Layout, len: usize) -> Option<Arc<MemBuf>> {
        // SAFETY: layout has non-zero size (at least one page).
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)?;
        Some(Arc::new(MemBuf::with_backing(ptr, len, Backing::Owned(layout))))
    }

    fn with_backing(ptr: NonNull<u8>, len: usize, backing: Backing) -> MemBuf {
        MemBuf { ptr, len, backing, owner: AtomicU64::new(0), regs: AtomicUsize::new(0) }
    }

    /// Allocates a buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> Arc<MemBuf> {
        let b = MemBuf::new(data.len());
        // SAFETY: the buffer is new; no one else has it yet.
        unsafe { b.write(0, data) }.expect("fits by construction");
        b
    }

    /// Memory the caller owns, for registration: a C library registering
    /// the application's buffers. When the `MemBuf` goes (the last `Arc`,
    /// after every region using it), `release` runs, if given, on the thread
    /// that drops it; the caller frees the memory there or later. Atomics
    /// need an 8-byte-aligned address (not just offset): elsewhere they fail,
    /// and a peer's atomic gets a NAK.
    ///
    /// # Safety
    /// * `[ptr, ptr + len)` lies in one allocated object and is valid for
    ///   reads and writes, and initialised, until `release` is called (for
    ///   ever without `release`); `len <= isize::MAX`.
    /// * While the `MemBuf` lives, those bytes are accessed only through it,
    ///   or through raw pointers under the contracts of [`MemBuf::read`] and
    ///   [`MemBuf::write`]; never through a Rust reference (`&[u8]`,
    ///   `&mut [u8]`, ...) to them.
    /// * If another live `MemBuf` covers some of the same bytes, the two are
    ///   never registered with different engines at the same time (an engine
    ///   serialises only its own accesses), and the contracts of the unsafe
    ///   accessors hold for accesses through either.
    pub unsafe fn from_raw_parts(
        ptr: NonNull<u8>,
        len: usize,
        release: Option<Box<dyn FnOnce() + Send>>,
    ) -> Arc<MemBuf> {
        Arc::new(MemBuf::with_backing(ptr, len, Backing::Foreign(release)))
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

    /// The first byte, for drivers (a kernel or device doing the copies,
    /// advice to the kernel about the pages) and C bindings. Reading or
    /// writing through it is bound by the contract of [`MemBuf::read`] and
    /// [`MemBuf::write`].
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn check(&self, offset: usize, n: usize) -> Result<(), OutOfBounds> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(OutOfBounds { offset, len: n, size: self.len }),
        }
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    ///
    /// # Safety
    /// No write to `[offset, offset + dst.len())` may happen concurrently
    /// (concurrent reads are fine). In particular no work request that the
    /// NIC may execute by writing those bytes may be in progress: a posted
    /// receive whose scatter list covers them, an RDMA READ or atomic of
    /// ours that returns into them, or, while a region covering them grants
    /// Remote Write or Remote Atomic, a WRITE or atomic a peer may direct
    /// at them. Once the completion (or the peer's word) says such work is
    /// done, reading is fine.
    #[inline]
    pub unsafe fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        self.check(offset, dst.len())?;
        // SAFETY: bounds checked above; dst is the caller's own memory and
        // cannot overlap ours (no references into it exist); no concurrent
        // write by the caller's contract.
        unsafe { core::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` into the buffer at `offset`.
    ///
    /// # Safety
    /// No other access to `[offset, offset + src.len())` may happen
    /// concurrently, reads included. In particular no work request that the
    /// NIC may execute against those bytes may be in progress: a posted
    /// receive whose scatter list covers them, a send, WRITE, READ or atomic
    /// of ours that gathers from them or returns into them, or, while a
    /// region covering them grants remote access, a WRITE, READ or atomic a
    /// peer may direct at them.
    #[inline]
    pub unsafe fn write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfBounds> {
        self.check(offset, src.len())?;
        // SAFETY: as in `read`; no concurrent access by the caller's contract.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len()) };
        Ok(())
    }

    /// Fills `[offset, offset + n)` with `byte`.
    ///
    /// # Safety
    /// As [`MemBuf::write`] for those bytes.
    #[inline]
    pub unsafe fn fill(&self, offset: usize, n: usize, byte: u8) -> Result<(), OutOfBounds> {
        self.check(offset, n)?;
        // SAFETY: bounds checked above; no concurrent access by the
        // caller's contract.
        unsafe { core::ptr::write_bytes(self.ptr.as_ptr().add(offset), byte, n) };
        Ok(())
    }

    /// Copies the whole buffer out (for checks and tests).
    ///
    /// # Safety
    /// As [`MemBuf::read`] for the whole buffer.
    pub unsafe fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        // SAFETY: the caller's contract is `read`'s.
        unsafe { self.read(0, &mut v) }.expect("whole buffer is in bounds");
        v
    }

    /// The 64-bit word at `offset`, as an atomic.
    ///
    /// # Safety
    /// Every access to the word while the returned reference lives is
    /// atomic, or none races with it (the atomics' contract).
    unsafe fn atomic(&self, offset: usize) -> Result<&AtomicU64, OutOfBounds> {
        self.check(offset, 8)?;
        let p = self.ptr.as_ptr().wrapping_add(offset);
        if p as usize % 8 != 0 {
            return Err(OutOfBounds { offset, len: 8, size: self.len });
        }
        // SAFETY: in bounds, 8-byte aligned (checked), valid while &self
        // lives; concurrent accesses are atomic by the caller's contract.
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// Atomic compare-and-swap of the 64-bit word at `offset` (the word is
    /// in host byte order, as the NIC executes RDMA atomics on host memory).
    /// Returns the original value. Fails if the word's address is not
    /// 8-byte aligned.
    ///
    /// # Safety
    /// No non-atomic access to the word may happen concurrently: only these
    /// four atomics (the NIC's RDMA atomics are atomic too). In particular
    /// no receive, WRITE or READ the NIC may execute against the word may
    /// be in progress, nor an atomic of ours returning into it.
    pub unsafe fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, OutOfBounds> {
        // SAFETY: the caller's contract is `atomic`'s.
        let a = unsafe { self.atomic(offset) }?;
        Ok(match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(v) | Err(v) => v,
        })
    }

    /// Atomic fetch-and-add on the 64-bit word at `offset`. Returns the
    /// original value.
    ///
    /// # Safety
    /// As [`MemBuf::compare_swap`].
    pub unsafe fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, OutOfBounds> {
        // SAFETY: the caller's contract is `atomic`'s.
        Ok(unsafe { self.atomic(offset) }?.fetch_add(add, Ordering::SeqCst))
    }

    /// Atomic 64-bit load.
    ///
    /// # Safety
    /// As [`MemBuf::compare_swap`], except that concurrent non-atomic reads
    /// (the NIC sending the word) are fine: a load is a read.
    pub unsafe fn load_u64(&self, offset: usize) -> Result<u64, OutOfBounds> {
        // SAFETY: the caller's contract is `atomic`'s (two reads never race).
        Ok(unsafe { self.atomic(offset) }?.load(Ordering::SeqCst))
    }

    /// Atomic 64-bit store (RDMA ATOMIC WRITE).
    ///
    /// # Safety
    /// As [`MemBuf::compare_swap`].
    pub unsafe fn store_u64(&self, offset: usize, v: u64) -> Result<(), OutOfBounds> {
        // SAFETY: the caller's contract is `atomic`'s.
        unsafe { self.atomic(offset) }?.store(v, Ordering::SeqCst);
        Ok(())
    }

    /// Binds the buffer to `engine` for one more of its regions. Fails if
    /// another engine has it.
    fn bind(&self, engine: EngineId) -> Result<(), OnOtherDevice> {
        let id = engine.0.get();
        // Acquire: the previous engine's accesses happen before ours (its
        // `release` stored 0 with Release).
        match self.owner.compare_exchange(0, id, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {}
            Err(cur) if cur == id => {}
            Err(_) => return Err(OnOtherDevice),
        }
        // Only the owner changes the count, inside its `&mut` calls.
        self.regs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Whether a region of `engine` uses the buffer now.
    fn bound_to(&self, engine: EngineId) -> bool {
        // Acquire: as `bind`, so a previous engine's accesses come first.
        self.owner.load(Ordering::Acquire) == engine.0.get()
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
        match &mut self.backing {
            // SAFETY: allocated in `with_alignment` with exactly this
            // layout, freed once.
            Backing::Owned(layout) => unsafe { dealloc(self.ptr.as_ptr(), *layout) },
            Backing::Foreign(release) => {
                if let Some(f) = release.take() {
                    f()
                }
            }
        }
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

/// A buffer as one region of one engine sees it: the NIC's only way to the
/// bytes. Exists only in the engine's MR records (not `Clone`); its methods
/// may be called only inside the engine's `&mut self` methods (the module's
/// safety argument rests on it).
#[derive(Debug)]
pub(crate) struct NicBuf {
    buf: Arc<MemBuf>,
}

/// A buffer bound to one engine was offered to another: a buffer serves
/// one device at a time, which keeps the NICs' accesses to it sequential
/// (the engine reports it as `VerbsError::BufferOnOtherDevice`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnOtherDevice;

impl NicBuf {
    /// Binds `buf` to `engine` for one region; fails if another engine has
    /// it. Dropping the `NicBuf` ends the binding.
    pub(crate) fn bind(buf: Arc<MemBuf>, engine: EngineId) -> Result<NicBuf, OnOtherDevice> {
        buf.bind(engine)?;
        Ok(NicBuf { buf })
    }

    // SAFETY (all methods below): the buffer is bound to this engine, so
    // no other engine accesses it; the engine makes these calls one at a
    // time inside its `&mut self` methods, so they are sequential with
    // each other and with `Engine::mr_*`; every other access is one of the
    // unsafe accessors, whose contract excludes racing with these.

    /// The bytes `[offset, offset + len)` left in place for a driver to
    /// send (see [`PayloadRef`]).
    #[inline]
    pub(crate) fn nic_ref(&self, offset: usize, len: usize) -> Result<PayloadRef, OutOfBounds> {
        self.buf.check(offset, len)?;
        Ok(PayloadRef { buf: self.buf.clone(), offset, len })
    }

    #[inline]
    pub(crate) fn nic_read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        // SAFETY: see above.
        unsafe { self.buf.read(offset, dst) }
    }

    #[inline]
    pub(crate) fn nic_write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfBounds> {
        // SAFETY: see above.
        unsafe { self.buf.write(offset, src) }
    }

    #[inline]
    pub(crate) fn nic_fill(&self, offset: usize, n: usize, byte: u8) -> Result<(), OutOfBounds> {
        // SAFETY: see above.
        unsafe { self.buf.fill(offset, n, byte) }
    }

    pub(crate) fn nic_compare_swap(
        &self,
        offset: usize,
        compare: u64,
        swap: u64,
    ) -> Result<u64, OutOfBounds> {
        // SAFETY: see above.
        unsafe { self.buf.compare_swap(offset, compare, swap) }
    }

    pub(crate) fn nic_fetch_add(&self, offset: usize, add: u64) -> Result<u64, OutOfBounds> {
        // SAFETY: see above.
        unsafe { self.buf.fetch_add(offset, add) }
    }
}

/// Payload bytes left in registered memory: a piece of a packet that a
/// driver passes to the kernel by address (an `iovec` of `sendmsg`)
/// instead of having the engine copy it into the packet
/// ([`crate::Engine::poll_transmit_batch_refs`]). It keeps the buffer
/// alive; its range lies inside the buffer. See the module's safety
/// argument: the bytes belong to a work request in progress, and are to
/// be sent before the engine is used again.
#[derive(Clone)]
pub struct PayloadRef {
    buf: Arc<MemBuf>,
    offset: usize,
    len: usize,
}

impl PayloadRef {
    /// Bytes named.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte, for an `iovec`: valid for `len()` bytes while this
    /// lives.
    pub fn as_ptr(&self) -> *const u8 {
        self.buf.ptr.as_ptr().wrapping_add(self.offset)
    }

    /// Feeds the bytes to a running ICRC: inside the engine call that made
    /// the reference (see `nic_copy`).
    pub(crate) fn nic_icrc(&self, h: &mut roce_wire::icrc::IcrcHasher) {
        // SAFETY: within the bounds checked when the reference was made,
        // inside the `&mut` engine call that made it (a NIC read, see
        // `NicBuf`): nothing writes the bytes while the shared slice lives,
        // and it does not outlive this update.
        h.update(unsafe { core::slice::from_raw_parts(self.as_ptr(), self.len) });
    }

    /// Copies the bytes into `dst` (`len()` bytes) if a region of `engine`
    /// still uses the buffer, which keeps every other engine from it; the
    /// caller is inside a `&mut` method of that engine (a NIC read, see
    /// `NicBuf`). False, copying nothing, if the buffer was let go.
    pub(crate) fn nic_copy_bound(&self, engine: EngineId, dst: &mut [u8]) -> bool {
        if !self.buf.bound_to(engine) {
            return false;
        }
        self.nic_copy(dst);
        true
    }

    /// Copies the bytes into `dst` (`len()` bytes): inside the engine
    /// call that made the reference, whose buffer is then still bound to
    /// that engine (a NIC read, see `NicBuf`).
    pub(crate) fn nic_copy(&self, dst: &mut [u8]) {
        // SAFETY: as `NicBuf::nic_read`: called only inside the `&mut`
        // engine method that made this reference.
        unsafe { self.buf.read(self.offset, &mut dst[..self.len]) }.expect("checked when made");
    }
}

impl core::fmt::Debug for PayloadRef {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "PayloadRef({} bytes at {:#x})", self.len, self.buf.addr() + self.offset as u64)
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
        // SAFETY: the buffer is this test's alone, on this thread.
        unsafe {
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
    }

    #[test]
    fn alignment() {
        let b = MemBuf::with_alignment(3 << 20, 2 << 20);
        assert_eq!(b.addr() % (2 << 20), 0);
        assert_eq!(b.len(), 3 << 20);
        // SAFETY: the buffer is this test's alone, on this thread.
        unsafe {
            b.write((3 << 20) - 1, &[1]).unwrap();
            assert!(b.write(3 << 20, &[1]).is_err());
        }
        // Never less than a page.
        assert_eq!(MemBuf::with_alignment(10, 8).addr() % PAGE_SIZE as u64, 0);
    }

    /// Caller-owned memory: reached only through the buffer while it
    /// lives (bounds and atomics as for owned memory), handed back by the
    /// release closure when the last `Arc` goes.
    #[test]
    fn caller_memory_until_released() {
        struct Owned(*mut [u64]);
        // SAFETY: the allocation is moved to the releasing thread whole.
        unsafe impl Send for Owned {}
        let words: Box<[u64]> = vec![0u64; 4].into_boxed_slice();
        let raw = Box::into_raw(words);
        let ptr = NonNull::new(raw.cast::<u8>()).unwrap();
        let released = Arc::new(AtomicUsize::new(0));
        let (owned, r) = (Owned(raw), released.clone());
        let release: Box<dyn FnOnce() + Send> = Box::new(move || {
            let owned = owned;
            // SAFETY: made by `Box::into_raw` above, freed once, here.
            drop(unsafe { Box::from_raw(owned.0) });
            r.fetch_add(1, Ordering::SeqCst);
        });
        // SAFETY: 32 bytes, valid until `release`; reached only through `b`.
        let b = unsafe { MemBuf::from_raw_parts(ptr, 32, Some(release)) };
        let nic = NicBuf::bind(b.clone(), EngineId::fresh()).unwrap();
        nic.nic_write(0, &[1, 2, 3]).unwrap();
        assert!(nic.nic_write(30, &[0; 3]).is_err());
        assert_eq!(nic.nic_fetch_add(8, 2).unwrap(), 0);
        drop(nic);
        // SAFETY: no engine holds the buffer; this thread alone uses it.
        unsafe {
            let mut got = [0u8; 3];
            b.read(0, &mut got).unwrap();
            assert_eq!(got, [1, 2, 3]);
            assert_eq!(b.load_u64(8).unwrap(), 2);
            assert!(b.fetch_add(1, 1).is_err(), "misaligned");
        }
        drop(b);
        assert_eq!(released.load(Ordering::SeqCst), 1);
    }

    /// The application's atomics and the NIC's on the same word from two
    /// threads at once: both atomic, so no data race.
    #[test]
    fn concurrent_atomics() {
        let b = MemBuf::new(64);
        let nic = NicBuf::bind(b.clone(), EngineId::fresh()).unwrap();
        let t = std::thread::spawn(move || {
            for _ in 0..50 {
                nic.nic_fetch_add(16, 1).unwrap();
            }
        });
        for _ in 0..50 {
            // SAFETY: only atomics touch word 16 concurrently.
            unsafe { b.fetch_add(16, 1) }.unwrap();
        }
        t.join().unwrap();
        // SAFETY: the other thread is done.
        assert_eq!(unsafe { b.load_u64(16) }.unwrap(), 100);
    }

    /// A buffer handed from one engine to another on another thread: the
    /// first engine's plain writes happen before the second's reads
    /// through the binding's Release/Acquire alone (Miri's race detector
    /// would flag them otherwise).
    #[test]
    fn handover_between_engines_orders_accesses() {
        let b = MemBuf::new(64);
        let first = NicBuf::bind(b.clone(), EngineId::fresh()).unwrap();
        let second = EngineId::fresh();
        let t = std::thread::spawn(move || {
            first.nic_write(0, &[9; 16]).unwrap();
            drop(first);
        });
        let nic = loop {
            match NicBuf::bind(b.clone(), second) {
                Ok(n) => break n,
                Err(_) => std::thread::yield_now(),
            }
        };
        let mut got = [0u8; 16];
        nic.nic_read(0, &mut got).unwrap();
        assert_eq!(got, [9; 16]);
        t.join().unwrap();
    }

    #[test]
    fn one_engine_at_a_time() {
        let (x, y) = (EngineId::fresh(), EngineId::fresh());
        assert_ne!(x, y);
        let b = MemBuf::new(64);
        let r1 = NicBuf::bind(b.clone(), x).unwrap();
        let r2 = NicBuf::bind(b.clone(), x).unwrap();
        assert_eq!(NicBuf::bind(b.clone(), y).unwrap_err(), OnOtherDevice);
        drop(r1);
        assert_eq!(NicBuf::bind(b.clone(), y).unwrap_err(), OnOtherDevice);
        drop(r2);
        let r3 = NicBuf::bind(b.clone(), y).unwrap();
        r3.nic_write(0, &[7; 8]).unwrap();
        assert_eq!(r3.nic_fetch_add(0, 1).unwrap(), 0x0707_0707_0707_0707);
        assert_eq!(NicBuf::bind(b, x).unwrap_err(), OnOtherDevice);
    }
}
