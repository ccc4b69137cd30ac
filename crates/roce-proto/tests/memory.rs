//! Registered memory: a buffer serves one engine at a time.

use core::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use roce_proto::*;

fn engine(seed: u64) -> (Engine, PdId) {
    let mut e = Engine::new(EngineConfig::new(vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))]), seed);
    let pd = e.alloc_pd();
    (e, pd)
}

fn spec(buf: &Arc<MemBuf>) -> MrSpec {
    MrSpec { buf: buf.clone(), offset: 0, length: buf.len(), iova: None, access: Access::ALL }
}

#[test]
fn a_buffer_is_registered_with_one_engine_at_a_time() {
    let (mut x, xpd) = engine(1);
    let (mut y, ypd) = engine(2);
    let buf = MemBuf::new(4096);
    let k1 = x.reg_mr(xpd, spec(&buf)).unwrap();
    let k2 = x.reg_mr(xpd, spec(&buf)).unwrap();
    assert_eq!(y.reg_mr(ypd, spec(&buf)), Err(VerbsError::BufferOnOtherDevice));
    x.dereg_mr(k1.lkey).unwrap();
    assert_eq!(y.reg_mr(ypd, spec(&buf)), Err(VerbsError::BufferOnOtherDevice));
    x.dereg_mr(k2.lkey).unwrap();
    y.reg_mr(ypd, spec(&buf)).unwrap();
    assert_eq!(x.reg_mr(xpd, spec(&buf)), Err(VerbsError::BufferOnOtherDevice));
    // An engine's end ends its registrations.
    drop(y);
    x.reg_mr(xpd, spec(&buf)).unwrap();
}

#[test]
fn a_refused_registration_draws_no_keys() {
    let (mut x, xpd) = engine(1);
    let (mut y, ypd) = engine(7);
    let (mut z, zpd) = engine(7);
    let taken = MemBuf::new(64);
    x.reg_mr(xpd, spec(&taken)).unwrap();
    assert_eq!(y.reg_mr(ypd, spec(&taken)), Err(VerbsError::BufferOnOtherDevice));
    let free = MemBuf::new(64);
    let mut sy = spec(&free);
    sy.iova = Some(0x1000);
    let mut sz = sy.clone();
    sz.buf = MemBuf::new(64);
    assert_eq!(y.reg_mr(ypd, sy).unwrap(), z.reg_mr(zpd, sz).unwrap());
}

#[test]
fn the_application_reads_and_writes_through_the_engine() {
    let (mut x, xpd) = engine(1);
    let buf = MemBuf::new(4096);
    // A region of bytes [1000, 1100) of the buffer, read-only to the network.
    let mut s = spec(&buf);
    (s.offset, s.length, s.access) = (1000, 100, Access::NONE);
    let k = x.reg_mr(xpd, s).unwrap();
    x.mr_write(k.lkey, 10, b"abc").unwrap();
    x.mr_fill(k.lkey, 13, 2, b'z').unwrap();
    let mut got = [0u8; 6];
    x.mr_read(k.lkey, 9, &mut got).unwrap();
    assert_eq!(&got, b"\0abczz");
    // Offsets are into the region, not the buffer.
    let w = x.reg_mr(xpd, spec(&buf)).unwrap();
    let mut b = [0u8; 3];
    x.mr_read(w.lkey, 1010, &mut b).unwrap();
    assert_eq!(&b, b"abc");

    let outside = |offset, len| Err(VerbsError::OutsideRegion { offset, len, size: 100 });
    assert_eq!(x.mr_write(k.lkey, 98, b"abc"), outside(98, 3));
    assert_eq!(x.mr_read(k.lkey, usize::MAX, &mut [0]), outside(usize::MAX, 1));
    assert_eq!(x.mr_fill(k.lkey, 101, 0, 0), outside(101, 0));
    x.mr_fill(k.lkey, 100, 0, 0).unwrap();
    assert_eq!(x.mr_read(k.lkey ^ 1, 0, &mut [0]), Err(VerbsError::NotFound(Object::Mr)));
    x.dereg_mr(k.lkey).unwrap();
    assert_eq!(x.mr_read(k.lkey, 0, &mut [0]), Err(VerbsError::NotFound(Object::Mr)));
}

/// A box handed to a `MemBuf` as raw parts; `free` takes it back.
struct Owned<T: ?Sized>(*mut T);

// SAFETY: it owns the boxed value it points to, which any thread may free.
unsafe impl<T: ?Sized + Send> Send for Owned<T> {}

impl<T: ?Sized> Owned<T> {
    /// # Safety
    /// Once, when nothing accesses the value any more.
    unsafe fn free(self) -> Box<T> {
        // SAFETY: from `Box::into_raw`, given back once (the caller's word).
        unsafe { Box::from_raw(self.0) }
    }
}

/// Caller-owned memory: registered, written by the engine, given back
/// through `release` once the last user (a region) lets go.
#[test]
fn caller_owned_memory_is_registered_and_given_back() {
    let raw = Box::into_raw(vec![7u8; 100].into_boxed_slice());
    let ptr = core::ptr::NonNull::new(raw.cast::<u8>()).unwrap();
    let released = Arc::new(std::sync::Mutex::new(None::<Box<[u8]>>));
    let (owned, slot) = (Owned(raw), released.clone());
    let release = Box::new(move || {
        // SAFETY: `release` runs once, when the MemBuf goes: nothing accesses
        // the bytes any more.
        *slot.lock().unwrap() = Some(unsafe { owned.free() });
    });
    // SAFETY: the boxed slice is one allocation, valid and initialised until
    // `release` frees it; nothing else touches it meanwhile (the Box is
    // gone, only `raw` remains, unused until `free`).
    let buf = unsafe { MemBuf::from_raw_parts(ptr, 100, Some(release)) };
    assert_eq!((buf.len(), buf.as_ptr()), (100, raw.cast::<u8>()));

    let (mut x, xpd) = engine(1);
    let k = x.reg_mr(xpd, spec(&buf)).unwrap();
    assert_eq!(k.addr, buf.addr(), "registered at its own address");
    x.mr_write(k.lkey, 10, b"hi").unwrap();
    let mut b = [0u8; 4];
    // SAFETY: the engine runs on this thread only and is not inside a call.
    unsafe { buf.read(9, &mut b) }.unwrap();
    assert_eq!(&b, b"\x07hi\x07");

    drop(buf);
    assert!(released.lock().unwrap().is_none(), "the region still uses it");
    x.dereg_mr(k.lkey).unwrap();
    let back = released.lock().unwrap().take().expect("given back when the region went");
    assert_eq!(&back[9..13], b"\x07hi\x07");
}

/// Atomics need an aligned address, whatever the offset: caller-owned
/// memory may start anywhere.
#[test]
fn atomics_follow_the_address_alignment() {
    let words = Box::into_raw(Box::new([0u64; 4]));
    // One byte in: offset 7 is the second word.
    let start = core::ptr::NonNull::new(words.cast::<u8>().wrapping_add(1)).unwrap();
    let owned = Owned(words);
    let release = Box::new(move || {
        // SAFETY: once, when the MemBuf goes.
        drop(unsafe { owned.free() });
    });
    // SAFETY: [start, start + 24) lies in the boxed array, valid and
    // initialised until `release` frees it; nothing else touches it.
    let buf = unsafe { MemBuf::from_raw_parts(start, 24, Some(release)) };
    // SAFETY: the buffer is this test's alone, on this thread.
    unsafe {
        assert!(buf.fetch_add(0, 1).is_err(), "misaligned address");
        assert_eq!(buf.fetch_add(7, 5).unwrap(), 0);
        assert_eq!(buf.compare_swap(7, 5, 9).unwrap(), 5);
        assert_eq!(buf.load_u64(7).unwrap(), 9);
        assert!(buf.load_u64(17).is_err(), "past the end");
    }
}

/// A PD is freed only when no region is in it (ibverbs: `ibv_dealloc_pd`
/// fails with EBUSY while resources use it): each PD counts its own
/// regions, however many PDs and regions the device holds.
#[test]
fn a_pd_with_regions_is_not_freed() {
    let (mut e, a) = engine(1);
    let b = e.alloc_pd();
    let buf = MemBuf::new(4096);
    let a1 = e.reg_mr(a, spec(&buf)).unwrap();
    let a2 = e.reg_mr(a, spec(&buf)).unwrap();
    let b1 = e.reg_mr(b, spec(&buf)).unwrap();
    assert_eq!(e.dealloc_pd(a), Err(VerbsError::InUse(Object::Pd)));
    e.dereg_mr(a1.lkey).unwrap();
    assert_eq!(e.dealloc_pd(a), Err(VerbsError::InUse(Object::Pd)));
    // A failed deregistration changes no count.
    assert!(e.dereg_mr(a1.lkey).is_err());
    e.dereg_mr(a2.lkey).unwrap();
    assert_eq!(e.dealloc_pd(b), Err(VerbsError::InUse(Object::Pd)));
    e.dealloc_pd(a).unwrap();
    e.dereg_mr(b1.lkey).unwrap();
    e.dealloc_pd(b).unwrap();
    assert_eq!(e.dealloc_pd(b), Err(VerbsError::NotFound(Object::Pd)));
}
