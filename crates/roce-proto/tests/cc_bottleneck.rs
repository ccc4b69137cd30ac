//! DCQCN end to end in virtual time: two RC QPs of engine A write into
//! engine B through one bottleneck link that marks CE above a queue
//! threshold (as a switch's ECN marking does, with Kmin = Kmax). With DCQCN
//! the flows converge to fair shares and the queue stays bounded; without
//! it the same run's queue grows to the buffer and drops.
//!
//! Everything is deterministic: the same seeds give the same run.

use std::collections::VecDeque;

use roce_proto::cc::{CcAlgorithm, DcqcnParams};
use roce_proto::testkit::*;
use roce_proto::*;

/// The bottleneck: 10 Gb/s.
const LINK_BPS: u64 = 10_000_000_000;
/// RED-style ECN marking on enqueue, as switches do (`MODEL-NOTES.md` §4):
/// no mark below Kmin bytes queued, probability rising linearly to Pmax at
/// Kmax, every packet above Kmax.
const KMIN: u64 = 20_000;
const KMAX: u64 = 200_000;
const PMAX_PERCENT: u64 = 20;
/// The buffer: packets that find it full are dropped.
const BUFFER: u64 = 2_000_000;
/// Propagation delay each way.
const DELAY: Duration = Duration::from_micros(2);
const MSG: u32 = 65536;
/// WRITEs each QP keeps outstanding: 2 MiB, the send window.
const DEPTH: u64 = 32;
const RUN: Duration = Duration::from_millis(200);

/// A FIFO served at `LINK_BPS`.
#[derive(Default)]
struct Link {
    queue: VecDeque<(DatagramMeta, Vec<u8>)>,
    queued: u64,
    /// When the packet at the head finishes serialising.
    busy_until: Instant,
    max_queued_late: u64,
    marked: u64,
    dropped: u64,
    /// xorshift64 state of the marking decisions (deterministic).
    rng: u64,
}

impl Link {
    fn mark(&mut self) -> bool {
        if self.queued <= KMIN {
            return false;
        }
        if self.queued >= KMAX {
            return true;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        // p = Pmax (q - Kmin) / (Kmax - Kmin), in millionths.
        let p = PMAX_PERCENT * 10_000 * (self.queued - KMIN) / (KMAX - KMIN);
        self.rng % 1_000_000 < p
    }
}

fn wire_ns(len: usize) -> u64 {
    ((len as u64 + limits::wire_overhead(ip(B))) * 8 * 1_000_000_000).div_ceil(LINK_BPS)
}

struct Outcome {
    /// Bytes each QP completed in the second half of the run.
    late_bytes: [u64; 2],
    max_queue_late: u64,
    marked: u64,
    dropped: u64,
    cnp_sent: u64,
    rate_cuts: u64,
    /// Each QP's smoothed RTT and its sample count, under congestion control.
    rtt: [Option<(Duration, u64)>; 2],
}

fn run(cc: CcAlgorithm) -> Outcome {
    let mut cfg = [EngineConfig::new(vec![ip(A)]), EngineConfig::new(vec![ip(B)])];
    cfg[A].cc = cc;
    cfg[A].line_rate_bps = LINK_BPS;
    let mut p = Pair::with_configs(cfg, [31, 32]);
    let c1 = p.connect(PathMtu::Mtu4096, [100, 200], |_| {});
    let c2 = p.connect(PathMtu::Mtu4096, [300, 400], |_| {});
    let qps = [c1.qpn[0], c2.qpn[0]];
    let src = p.region(A, 1 << 20, 0x1000, Access::ALL);
    let dst = p.region(B, 1 << 20, 0x100_0000, Access::ALL);
    let post = |p: &mut Pair, q: usize, id: u64| {
        let op = SendOp::Write { remote_addr: dst.keys.addr + (q as u64) * 262_144, rkey: dst.keys.rkey };
        p.e[A].post_send(qps[q], SendWr::new(id, op, vec![sge(&src, 0, MSG)])).unwrap();
    };
    for q in 0..2 {
        for i in 0..DEPTH {
            post(&mut p, q, (q as u64) << 32 | i);
        }
    }
    let mut link = Link { rng: 0x9e37_79b9_7f4a_7c15, ..Link::default() };
    // Packets in flight to A (responses, CNPs): arrival time and datagram.
    let mut to_a: VecDeque<(Instant, DatagramMeta, Vec<u8>)> = VecDeque::new();
    // Packets leaving the link towards B.
    let mut to_b: VecDeque<(Instant, DatagramMeta, Vec<u8>)> = VecDeque::new();
    let mut late_bytes = [0u64; 2];
    let half = Instant::ZERO + Duration::from_nanos(RUN.as_nanos() / 2);
    let end = Instant::ZERO + RUN;
    let mut wcs = vec![Wc::EMPTY; 64];
    while p.now < end {
        let now = p.now;
        // A's packets join the bottleneck queue.
        for (mut meta, bytes) in p.take(A) {
            if link.queued + bytes.len() as u64 > BUFFER {
                link.dropped += 1;
                continue;
            }
            if meta.ecn != 0 && link.mark() {
                meta.ecn = 3;
                link.marked += 1;
            }
            if link.queue.is_empty() {
                link.busy_until = now + Duration::from_nanos(wire_ns(bytes.len()));
            }
            link.queued += bytes.len() as u64;
            link.queue.push_back((meta, bytes));
        }
        if now >= half {
            link.max_queued_late = link.max_queued_late.max(link.queued);
        }
        // B's packets go straight back.
        to_a.extend(p.take(B).into_iter().map(|(m, b)| (now + DELAY, m, b)));
        // Completions keep eight WRITEs outstanding per QP.
        let n = p.e[A].poll_cq(p.cq[A], &mut wcs).unwrap();
        for w in &wcs[..n] {
            assert_eq!(w.status, WcStatus::Success);
            let q = (w.wr_id >> 32) as usize;
            if now >= half {
                late_bytes[q] += u64::from(MSG);
            }
            post(&mut p, q, w.wr_id + DEPTH);
        }
        let _ = p.e[B].poll_cq(p.cq[B], &mut wcs);
        // The next event.
        let next = [
            (!link.queue.is_empty()).then_some(link.busy_until),
            to_a.front().map(|x| x.0),
            to_b.front().map(|x| x.0),
            p.e[A].poll_timeout(),
            p.e[B].poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { break };
        p.now = next.max(now);
        let now = p.now;
        if !link.queue.is_empty() && link.busy_until <= now {
            let (meta, bytes) = link.queue.pop_front().expect("not empty");
            link.queued -= bytes.len() as u64;
            to_b.push_back((now + DELAY, meta, bytes));
            if let Some((_, b)) = link.queue.front() {
                link.busy_until = now + Duration::from_nanos(wire_ns(b.len()));
            }
        }
        while to_b.front().is_some_and(|x| x.0 <= now) {
            let (_, m, b) = to_b.pop_front().expect("front");
            p.e[B].handle_datagram(now, &m, &b);
        }
        while to_a.front().is_some_and(|x| x.0 <= now) {
            let (_, m, b) = to_a.pop_front().expect("front");
            p.e[A].handle_datagram(now, &m, &b);
        }
        for s in [A, B] {
            if p.e[s].poll_timeout().is_some_and(|t| t <= now) {
                p.e[s].handle_timeout(now);
            }
        }
    }
    Outcome {
        late_bytes,
        max_queue_late: link.max_queued_late,
        marked: link.marked,
        dropped: link.dropped,
        cnp_sent: p.e[B].counters().cnp_sent,
        rate_cuts: p.e[A].counters().cc_rate_cuts,
        rtt: qps.map(|q| p.e[A].qp_rate(q).and_then(|s| Some((s.rtt?, s.rtt_samples)))),
    }
}

fn jain(x: &[u64]) -> f64 {
    let s: f64 = x.iter().map(|&v| v as f64).sum();
    let q: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    s * s / (x.len() as f64 * q)
}

#[test]
fn dcqcn_converges_to_fair_shares_with_a_bounded_queue() {
    for set in ["paper", "nvidia", "hpcc"] {
        let on = run(CcAlgorithm::Dcqcn(DcqcnParams::named(set).unwrap()));
        let j = jain(&on.late_bytes);
        let goodput =
            (on.late_bytes[0] + on.late_bytes[1]) as f64 * 8.0 / (RUN.as_nanos() as f64 / 2e9) / 1e9;
        eprintln!(
            "{set}: late bytes {:?} (Jain {j:.3}, {goodput:.2} Gb/s), max queue {} B, marked {}, CNPs {}, cuts {}, dropped {}",
            on.late_bytes, on.max_queue_late, on.marked, on.cnp_sent, on.rate_cuts, on.dropped
        );
        assert!(on.cnp_sent > 0 && on.rate_cuts > 0, "{set}: DCQCN never acted");
        assert!(j >= 0.95, "{set}: unfair {:?} (Jain {j:.3})", on.late_bytes);
        assert_eq!(on.dropped, 0, "{set}: the buffer overflowed");
        assert!(on.max_queue_late < BUFFER / 2, "{set}: queue {} B", on.max_queue_late);
        assert!(goodput > 5.0, "{set}: the link idled ({goodput:.2} Gb/s)");
        // The RTT the engine measured lies between the propagation delay
        // both ways and that plus a full buffer's drain time.
        let ceiling = 2 * DELAY.as_nanos() + BUFFER * 8 * 1_000_000_000 / LINK_BPS;
        for (q, r) in on.rtt.iter().enumerate() {
            let (rtt, samples) = r.unwrap_or_else(|| panic!("{set}: QP {q} measured no RTT"));
            eprintln!("{set}: QP {q} smoothed RTT {} ns over {samples} samples", rtt.as_nanos());
            assert!(samples > 100, "{set}: QP {q}: {samples} RTT samples");
            assert!((2 * DELAY.as_nanos()..=ceiling).contains(&rtt.as_nanos()), "{set}: QP {q}: RTT {rtt:?}");
        }
    }
    let off = run(CcAlgorithm::None);
    eprintln!(
        "none: late bytes {:?}, max queue {} B, marked {}, dropped {}",
        off.late_bytes, off.max_queue_late, off.marked, off.dropped
    );
    assert!(
        off.dropped > 0 || off.max_queue_late >= BUFFER * 9 / 10,
        "without congestion control the queue stayed small"
    );
    assert_eq!(off.rate_cuts, 0);
    assert_eq!(off.rtt, [None, None], "no congestion control, no rate state");
}

#[test]
fn the_same_seeds_give_the_same_run() {
    let a = run(CcAlgorithm::Dcqcn(DcqcnParams::paper()));
    let b = run(CcAlgorithm::Dcqcn(DcqcnParams::paper()));
    assert_eq!(
        (a.late_bytes, a.max_queue_late, a.marked, a.cnp_sent),
        (b.late_bytes, b.max_queue_late, b.marked, b.cnp_sent)
    );
}
