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
    assert_eq!(x.mr_read(k.lkey ^ 1, 0, &mut [0]), Err(VerbsError::NotFound("MR")));
    x.dereg_mr(k.lkey).unwrap();
    assert_eq!(x.mr_read(k.lkey, 0, &mut [0]), Err(VerbsError::NotFound("MR")));
}
