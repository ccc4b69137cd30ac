//! WRITEs from many QPs of one device into one peer: the device's cap on
//! unacknowledged request bytes (`EngineConfig::tx_budget_bytes`) bounds
//! the burst the peer has to absorb before it can answer, whatever the
//! number of QPs, and every byte arrives.

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
    let cfg = [A, B].map(|s| {
        let mut c = EngineConfig::new(vec![ip(s)]);
        if s == A {
            c.tx_budget_bytes = cap;
        }
        c
    });
    let mut p = Pair::with_configs(cfg, [7, 8]);
    let conns: Vec<_> =
        (0..QPS).map(|q| p.connect(PathMtu::Mtu4096, [q as u32 * 5000, 77], |c| c.timeout = 14)).collect();
    let src = p.region(A, QPS * LEN, 0x1000_0000, Access::ALL);
    let dst = p.region(B, QPS * LEN, 0x2000_0000, Access::ALL);
    let data = pattern(QPS * LEN);
    p.put(&src, 0, &data);
    for (q, c) in conns.iter().enumerate() {
        let off = (q * LEN) as u64;
        let op = SendOp::Write { remote_addr: dst.keys.addr + off, rkey: dst.keys.rkey };
        p.e[A].post_send(c.qpn[0], SendWr::new(q as u64, op, vec![sge(&src, off, LEN as u32)])).unwrap();
    }
    p.run();
    let wcs = p.poll(A);
    assert_eq!(wcs.len(), QPS);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert!(p.mem(&dst) == data, "every byte written right");
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
    (largest, p.e[A].counters().clone())
}

#[test]
fn the_device_cap_bounds_an_incast_burst() {
    let cap = 256 << 10;
    let (burst, c) = incast(Some(cap as u64));
    // The cap counts PSNs times the MTU; a datagram carries a few header
    // bytes more, and a QP with nothing unacknowledged may always send one.
    let per_packet = MTU + 64;
    let bound = cap / MTU * per_packet + (QPS + 1) * per_packet;
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
