//! `Mr::wait_byte`: a thread waiting for the last byte of an incoming RDMA
//! WRITE (perftest's write-latency loop) sees it land, with the driver
//! thread receiving or with the waiting call driving a busy-poll device
//! itself; a byte that never comes is a timeout, and an offset outside the
//! region an error. `Mr::with_bytes(_mut)` lends the region's bytes in
//! place.

use std::time::Duration;

#[path = "support/udp_pair.rs"]
mod udp_pair;

use roce::*;
use udp_pair::{SideOptions, UdpPair};

/// `x` writes 100 counter bytes into `y`, each once `y` has seen the last;
/// `y` waits for each with `wait_byte` (busy-polling or not).
fn ping_pong_of_bytes(busy: bool) {
    let (x, y) = UdpPair::new(SideOptions::default()).y(SideOptions::default().busy_poll(busy)).open();
    let at = 4095usize;
    let (seen_tx, seen) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            for n in 1..=100u8 {
                assert!(y.mr.wait_byte(at, n, Duration::from_secs(10)).unwrap(), "byte {n} within 10 s");
                seen_tx.send(n).unwrap();
            }
        });
        let mut wc = [WC_ZERO];
        for n in 1..=100u8 {
            x.mr.write(at, &[n]).unwrap();
            let wr = SendWr::new(
                u64::from(n),
                SendOp::Write { remote_addr: y.mr.addr() + at as u64, rkey: y.mr.rkey() },
                vec![x.mr.sge(at as u64, 1)],
            );
            x.qp.post_send(wr).unwrap();
            assert_eq!(x.cq.wait(&mut wc, Duration::from_secs(10)).unwrap(), 1);
            assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
            assert_eq!(seen.recv_timeout(Duration::from_secs(10)), Ok(n), "the waiter saw byte {n}");
        }
        waiter.join().unwrap();
    });
    let mut b = [0u8];
    y.mr.read(at, &mut b).unwrap();
    assert_eq!(b[0], 100);
}

#[test]
fn sees_each_write_land_driver_thread() {
    ping_pong_of_bytes(false);
}

#[test]
fn sees_each_write_land_busy_poll() {
    ping_pong_of_bytes(true);
}

#[test]
fn a_byte_that_never_comes_is_a_timeout_and_a_bad_offset_an_error() {
    let (_x, y) = UdpPair::new(SideOptions::default()).open();
    y.mr.write(10, &[1]).unwrap();
    assert!(!y.mr.wait_byte(10, 2, Duration::from_millis(20)).unwrap());
    assert!(y.mr.wait_byte(10, 1, Duration::ZERO).unwrap(), "already there: no wait needed");
    assert!(y.mr.wait_byte(y.mr.len(), 0, Duration::from_millis(1)).is_err());
}

/// `Mr::with_bytes_mut` / `with_bytes`: staged bytes go out in a WRITE
/// without a copy into the region, the peer's WRITE is read in place, and a
/// range outside the region is an error, never a slice.
#[test]
fn bytes_in_place_are_the_regions_bytes() {
    let (x, y) = UdpPair::new(SideOptions::default()).open();
    let n = x.mr.with_bytes_mut(100, 8, |b| {
        b.copy_from_slice(b"in place");
        b.len()
    });
    assert_eq!(n.unwrap(), 8);
    let wr = SendWr::new(
        1,
        SendOp::Write { remote_addr: y.mr.addr() + 200, rkey: y.mr.rkey() },
        vec![x.mr.sge(100, 8)],
    );
    x.qp.post_send(wr).unwrap();
    let mut wc = [WC_ZERO];
    assert_eq!(x.cq.wait(&mut wc, Duration::from_secs(10)).unwrap(), 1);
    assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
    assert_eq!(y.mr.with_bytes(200, 8, |b| b.to_vec()).unwrap(), b"in place");
    let mut copy = [0u8; 8];
    y.mr.read(200, &mut copy).unwrap();
    assert_eq!(&copy, b"in place");
    let len = y.mr.len();
    assert!(y.mr.with_bytes(len - 4, 8, |_| ()).is_err(), "past the end");
    assert!(y.mr.with_bytes(usize::MAX, 2, |_| ()).is_err(), "overflowing");
    assert_eq!(y.mr.with_bytes(len, 0, |b| b.len()).unwrap(), 0);
}
