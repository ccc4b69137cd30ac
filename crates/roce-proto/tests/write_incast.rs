//! WRITEs from many QPs of one device into one peer: the device's cap on
//! unacknowledged request bytes (`EngineConfig::tx_budget_bytes`) bounds
//! the burst the peer has to absorb before it can answer, whatever the
//! number of QPs, and every byte arrives. With the peer's receive buffer
//! modelled (a socket that holds so many bytes until its owner next runs,
//! and drops the rest, as the kernel does), the cap set as the driver sets
//! it (a quarter of the buffer) loses nothing, where the uncapped burst
//! loses its tail and waits for the ACK timeout.

use roce_proto::testkit::*;
use roce_proto::*;

const QPS: usize = 16;
const LEN: usize = 1 << 20;
const MTU: usize = 4096;

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(29).wrapping_add((i >> 12) as u8)).collect()
}

/// Runs the incast with A's cap `cap`; returns the largest run of bytes A
/// sent before B could answer (the pair delivers all that A has to send,
/// then all of B's answers) and A's counters.
fn incast(cap: Option<u64>) -> (usize, Counters) {
    let r = incast_into(cap, usize::MAX);
    assert!(r.delivered);
    (r.burst, r.counters)
}

struct Incast {
    /// The largest run of bytes A sent before B could answer.
    burst: usize,
    /// A's packets the modelled receive buffer dropped.
    dropped: usize,
    /// A's counters.
    counters: Counters,
    /// The model clock when both sides were quiet.
    took: Duration,
    /// Every WRITE completed successfully (and the bytes were checked).
    delivered: bool,
}

/// The incast with A's cap `cap`, B's socket holding `rcvbuf` bytes of
/// A's packets between two of its turns (B's turn comes when it sends --
/// the pair moves all A has to send, then all of B's answers -- or when
/// time passes).
fn incast_into(cap: Option<u64>, rcvbuf: usize) -> Incast {
    incast_of(QPS, LEN, cap, rcvbuf)
}

/// [`incast_into`] from `qps` QPs, each writing `len` bytes.
fn incast_of(qps: usize, len: usize, cap: Option<u64>, rcvbuf: usize) -> Incast {
    let cfg = [A, B].map(|s| {
        let mut c = EngineConfig::new(vec![ip(s)]);
        if s == A {
            c.tx_budget_bytes = cap;
        }
        c
    });
    let mut p = Pair::with_configs(cfg, [7, 8]);
    let conns: Vec<_> =
        (0..qps).map(|q| p.connect(PathMtu::Mtu4096, [q as u32 * 5000, 77], |c| c.timeout = 14)).collect();
    let src = p.region(A, qps * len, 0x1000_0000, Access::ALL);
    let dst = p.region(B, qps * len, 0x2000_0000, Access::ALL);
    let data = pattern(qps * len);
    p.put(&src, 0, &data);
    for (q, c) in conns.iter().enumerate() {
        let off = (q * len) as u64;
        let op = SendOp::Write { remote_addr: dst.keys.addr + off, rkey: dst.keys.rkey };
        p.e[A].post_send(c.qpn[0], SendWr::new(q as u64, op, vec![sge(&src, off, len as u32)])).unwrap();
    }
    let start = p.now;
    let (mut queued, mut dropped, mut last) = (0usize, 0usize, start);
    p.run_timed(
        |now, s, bytes| {
            // B's socket drains when B runs: when it answers, and whenever
            // time has passed (a timer fired).
            if s == B || now != last {
                queued = 0;
                last = now;
            }
            if s == B {
                return true;
            }
            if queued + bytes.len() > rcvbuf {
                dropped += 1;
                return false;
            }
            queued += bytes.len();
            true
        },
        10_000_000,
    );
    let took = p.now - start;
    let mut wcs = Vec::new();
    loop {
        let batch = p.poll(A);
        if batch.is_empty() {
            break;
        }
        wcs.extend(batch);
    }
    assert_eq!(wcs.len(), qps);
    let delivered = wcs.iter().all(|w| w.status == WcStatus::Success);
    if delivered {
        assert!(p.mem(&dst) == data, "every byte written right");
    }
    let mut largest = 0;
    let mut run = 0;
    for (s, bytes) in &p.trace {
        if *s == A {
            run += bytes.len();
            largest = largest.max(run);
        } else {
            run = 0;
        }
    }
    Incast { burst: largest, dropped, counters: p.e[A].counters().clone(), took, delivered }
}

#[test]
fn the_device_cap_bounds_an_incast_burst() {
    let cap = 256 << 10;
    let (burst, c) = incast(Some(cap as u64));
    // The cap counts PSNs times the MTU; a datagram carries a few header
    // bytes more.
    let per_packet = MTU + 64;
    let bound = cap / MTU * per_packet;
    assert!(burst <= bound, "burst {burst} > {bound}");
    assert!(c.tx_budget_waits > 0);
    assert_eq!((c.completer_retry_err, c.rcvd_seq_err), (0, 0));
}

#[test]
fn without_the_cap_each_qp_window_adds_up() {
    let (burst, c) = incast(None);
    // 16 QPs with a window of 256 PSNs each: 16 MiB before any answer.
    assert!(burst > QPS * 256 * MTU, "burst {burst}");
    assert_eq!(c.tx_budget_waits, 0);
}

/// The driver's setting: the cap a quarter of the receive buffer (here
/// 1 MiB, as a 4 MiB `rmem_max` grants): 16 MiB from 16 QPs arrive with
/// nothing dropped, no retry, and well inside one ACK timeout (67 ms at
/// timeout 14); uncapped, the same incast overruns the buffer, its lost
/// tail waits for the timeout, and every retry floods the buffer again
/// until the retries run out.
#[test]
fn with_the_cap_a_modelled_receive_buffer_drops_nothing() {
    let rcvbuf = 1 << 20;
    let capped = incast_into(Some(rcvbuf as u64 / 4), rcvbuf);
    assert!(capped.delivered);
    assert_eq!(capped.dropped, 0, "burst {}", capped.burst);
    assert_eq!((capped.counters.completer_retry_err, capped.counters.rcvd_seq_err), (0, 0));
    let ack_timeout = Duration::from_micros(67_109);
    assert!(capped.took < ack_timeout, "took {:?}", capped.took);

    let uncapped = incast_into(None, rcvbuf);
    assert!(uncapped.dropped > 0);
    assert!(uncapped.counters.completer_retry_err > 0);
    assert!(uncapped.took > ack_timeout, "{:?}", uncapped.took);
}

/// More QPs than the cap has packets: 512 QPs of 64 KiB each under a cap
/// of 64 KiB (16 packets). The cap holds for a QP with nothing
/// unacknowledged too, so the burst stays 16 packets and a 256 KiB buffer
/// drops nothing; were every idle QP allowed its one packet, 512 packets
/// (2 MiB) would come at once. The QPs take turns, in the order they
/// began to wait: each finishes, none retries or resends.
#[test]
fn the_cap_holds_for_more_qps_than_it_has_packets() {
    let cap = 64 << 10;
    let r = incast_of(512, 64 << 10, Some(cap as u64), 256 << 10);
    assert!(r.delivered);
    let bound = cap / MTU * (MTU + 64);
    assert!(r.burst <= bound, "burst {} > {bound}", r.burst);
    assert_eq!(r.dropped, 0);
    assert_eq!((r.counters.completer_retry_err, r.counters.rcvd_seq_err), (0, 0));
    // First come first served: a QP woken for room sends with it (one
    // that ran for another reason queues behind it), so no QP waits out
    // an ACK timeout, nothing is sent twice, and each wait ends in a
    // packet. Were the room taken by whichever QP ran first, the same
    // QPs would be turned away again and again.
    let packets = 512 * (64 << 10) / MTU;
    assert_eq!(r.counters.sent_pkts as usize, packets, "resends");
    assert!(r.took < Duration::from_micros(67_109), "took {:?}", r.took);
    assert!(r.counters.tx_budget_waits as usize <= packets, "waits {}", r.counters.tx_budget_waits);
}

/// A receive buffer smaller than the cap (a peer with less room than the
/// sender guessed): packets are lost even under the cap, and the QPs must
/// still finish. Their retransmissions resend PSNs already counted, so the
/// cap lets them go; held back, every QP would wait for ACKs only the
/// resends can bring, spend its retries and fail with RETRY_EXC_ERR.
#[test]
fn under_the_cap_losses_are_still_recovered() {
    let r = incast_into(Some(256 << 10), 96 << 10);
    assert!(r.dropped > 0, "the modelled buffer must overflow");
    assert!(r.delivered, "retries {} dropped {}", r.counters.completer_retry_err, r.dropped);
    assert_eq!(r.counters.retry_exceeded_err, 0);
}
