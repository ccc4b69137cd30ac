//! `Cq::poll_or_drive`: a thread spinning on an empty CQ while a pipeline
//! of its sends is outstanding takes the socket over from the driver
//! thread and brings its own completions; once it stops calling, the
//! driver thread takes the socket back; with a single message in flight it
//! never takes over.

use std::time::{Duration, Instant};

#[path = "support/udp_pair.rs"]
mod udp_pair;

use roce::*;
use udp_pair::{Side, SideOptions, UdpPair};

const LEN: usize = 4096;

/// Posts `n` signalled WRITEs of `LEN` bytes from `x` into `y`, message
/// `i` filled with byte `i + 1`.
fn post_writes(x: &Side, y: &Side, n: usize) {
    for i in 0..n {
        let at = i * LEN;
        x.mr.write(at, &vec![i as u8 + 1; LEN]).unwrap();
        let wr = SendWr::new(
            i as u64,
            SendOp::Write { remote_addr: y.mr.addr() + at as u64, rkey: y.mr.rkey() },
            vec![x.mr.sge(at as u64, LEN as u32)],
        );
        x.qp.post_send(wr).unwrap();
    }
}

/// Every message landed in `y`, and the completions came in order.
fn check(y: &Side, n: usize, wcs: &[Wc]) {
    assert_eq!(wcs.len(), n);
    for (i, w) in wcs.iter().enumerate() {
        assert_eq!((w.wr_id, w.status), (i as u64, WcStatus::Success), "{w:?}");
    }
    let mut got = vec![0u8; LEN];
    for i in 0..n {
        y.mr.read(i * LEN, &mut got).unwrap();
        assert!(got.iter().all(|&b| b == i as u8 + 1), "message {i} landed whole");
    }
}

fn pair() -> (Side, Side) {
    UdpPair::new(SideOptions::default().mr_len(64 * LEN).cq_depth(128).qp_depths(64, 64)).open()
}

/// A pair whose `y` is a busy-poll device this test drives by hand: it
/// answers only when the test says, so `x`'s first poll always finds its
/// pipeline outstanding and nothing completed.
fn pair_with_a_held_peer() -> (Side, Side) {
    UdpPair::new(SideOptions::default().mr_len(64 * LEN).cq_depth(128).qp_depths(64, 64))
        .y(SideOptions::default().mr_len(64 * LEN).cq_depth(128).qp_depths(64, 64).busy_poll(true))
        .open()
}

#[test]
fn a_spinning_poller_brings_its_pipeline_home() {
    let (x, y) = pair_with_a_held_peer();
    let n = 48;
    post_writes(&x, &y, n);
    let mut buf = [WC_ZERO; 8];
    assert_eq!(x.cq.poll_or_drive(&mut buf, &[x.qp.qpn()], 2).unwrap(), 0, "nothing is ACKed yet");
    assert_eq!(x.dev.driver_stats().drive_takeovers, 1, "the poller took the socket");
    let mut wcs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while wcs.len() < n {
        assert!(Instant::now() < deadline, "{} of {n} completions in 20 s", wcs.len());
        y.dev.progress().unwrap();
        let k = x.cq.poll_or_drive(&mut buf, &[x.qp.qpn()], 2).unwrap();
        wcs.extend_from_slice(&buf[..k]);
    }
    check(&y, n, &wcs);
}

/// The peer is a busy-poll device that this test drives by hand, so the
/// ACKs come only when it says: the poll finds the pipeline outstanding
/// and takes the socket; afterwards only `x`'s driver thread can receive
/// them (plain `Cq::poll` does not), which it does once the lease ends.
#[test]
fn the_driver_thread_takes_the_socket_back() {
    let (x, y) = pair_with_a_held_peer();
    let n = 8;
    post_writes(&x, &y, n);
    let mut buf = [WC_ZERO; 8];
    assert_eq!(x.cq.poll_or_drive(&mut buf, &[x.qp.qpn()], 2).unwrap(), 0, "nothing is ACKed yet");
    assert_eq!(x.dev.driver_stats().drive_takeovers, 1);
    let mut wcs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while wcs.len() < n {
        assert!(Instant::now() < deadline, "{} of {n} completions in 20 s", wcs.len());
        y.dev.progress().unwrap();
        let k = x.cq.poll(&mut buf).unwrap();
        wcs.extend_from_slice(&buf[..k]);
        std::thread::yield_now();
    }
    check(&y, n, &wcs);
    assert_eq!(x.dev.driver_stats().drive_takeovers, 1, "only the one poll took the socket");
}

/// One message in flight is a latency loop's: the poll receives once
/// and leaves the socket to the driver thread.
#[test]
fn one_message_in_flight_is_left_to_the_driver_thread() {
    let (x, y) = pair();
    let mut buf = [WC_ZERO; 1];
    for round in 0..20 {
        post_writes(&x, &y, 1);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(Instant::now() < deadline, "round {round}: no completion in 20 s");
            if x.cq.poll_or_drive(&mut buf, &[x.qp.qpn()], 2).unwrap() == 1 {
                break;
            }
        }
        assert_eq!(buf[0].status, WcStatus::Success);
    }
    assert_eq!(x.dev.driver_stats().drive_takeovers, 0);
}
