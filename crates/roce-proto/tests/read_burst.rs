//! READ bursts against a receiver that can absorb only so much: the
//! requester's READ budget keeps the responses within it, and a READ whose
//! tail is lost is asked for again after a few round trips, not the ACK
//! timeout. Time is simulated: the link below moves packets in ticks.

use std::collections::VecDeque;

use roce_proto::testkit::*;
use roce_proto::*;
use roce_wire::opcode::Position;
use roce_wire::{Operation, RocePacket, RocePacketRepr};

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(151).wrapping_add(salt).wrapping_add((i >> 13) as u8)).collect()
}

/// A's receive side as a kernel socket: datagrams from B wait in a buffer
/// of `rx_cap` bytes, of which the engine takes `drain` per tick; one that
/// does not fit is dropped, as the kernel drops a datagram beyond
/// `SO_RCVBUF`. B sends `line` datagrams per tick; each way takes `delay`
/// ticks. A tick is a microsecond. B's `n`-th datagram (from 1) is lost
/// on the way if `n` is in `lose`, and B falls silent for `t` ticks after
/// its `n`-th for each `(n, t)` of `pauses` (a busy or emulated host).
struct Link {
    rx_cap: usize,
    drain: usize,
    line: usize,
    delay: u64,
    lose: &'static [usize],
    pauses: &'static [(usize, u64)],
}

#[derive(Default)]
struct Outcome {
    /// Datagrams A's modelled buffer dropped.
    dropped: usize,
    /// The most READ-response bytes A had asked for and not received.
    max_outstanding: u64,
    /// Simulated time when every WQE had completed, in microseconds.
    done_at: u64,
}

const TICK_NS: u64 = 1_000;

/// Moves packets between the pair over `link` until A has `wqes`
/// completions (collected into `wcs`) or `max_ticks` pass.
fn run_link(p: &mut Pair, link: &Link, wqes: usize, wcs: &mut Vec<Wc>, max_ticks: u64) -> Outcome {
    let mut out = Outcome::default();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    // (arrival tick, meta, bytes)
    let mut to_b: VecDeque<(u64, DatagramMeta, Vec<u8>)> = VecDeque::new();
    let mut to_a: VecDeque<(u64, DatagramMeta, Vec<u8>)> = VecDeque::new();
    let mut socket: VecDeque<(DatagramMeta, Vec<u8>)> = VecDeque::new();
    let mut queued = 0usize;
    let mut sent_b = 0usize;
    let mut silent_until = 0u64;
    for tick in 0..max_ticks {
        p.now = Instant::from_nanos(tick * TICK_NS);
        let now = p.now;
        for e in &mut p.e {
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
        }
        while let Some(tx) = p.e[A].poll_transmit(now, &mut buf) {
            to_b.push_back((tick + link.delay, tx.meta, buf[..tx.len].to_vec()));
        }
        for _ in 0..link.line {
            if tick < silent_until {
                break;
            }
            let Some(tx) = p.e[B].poll_transmit(now, &mut buf) else { break };
            sent_b += 1;
            if let Some(&(_, t)) = link.pauses.iter().find(|(n, _)| *n == sent_b) {
                silent_until = tick + t;
            }
            if !link.lose.contains(&sent_b) {
                to_a.push_back((tick + link.delay, tx.meta, buf[..tx.len].to_vec()));
            }
        }
        while to_b.front().is_some_and(|(t, ..)| *t <= tick) {
            let (_, meta, bytes) = to_b.pop_front().expect("front");
            p.e[B].handle_datagram(now, &meta, &bytes);
        }
        while to_a.front().is_some_and(|(t, ..)| *t <= tick) {
            let (_, meta, bytes) = to_a.pop_front().expect("front");
            if queued + bytes.len() > link.rx_cap {
                out.dropped += 1;
                continue;
            }
            queued += bytes.len();
            socket.push_back((meta, bytes));
        }
        for _ in 0..link.drain {
            let Some((meta, bytes)) = socket.pop_front() else { break };
            queued -= bytes.len();
            p.e[A].handle_datagram(now, &meta, &bytes);
        }
        out.max_outstanding = out.max_outstanding.max(p.e[A].read_outstanding());
        wcs.extend(p.poll(A));
        if wcs.len() >= wqes {
            out.done_at = tick;
            return out;
        }
    }
    panic!("not done in {max_ticks} ticks: {} of {wqes} completions", wcs.len());
}

fn config(rx_budget_bytes: u64, floor_us: u64) -> [EngineConfig; 2] {
    [A, B].map(|s| {
        let mut c = EngineConfig::new(vec![ip(s)]);
        c.rx_budget_bytes = rx_budget_bytes;
        c.read_tail_floor = Duration::from_micros(floor_us);
        c
    })
}

/// `n` READs of `len` bytes each from B's region into A's, on `qps` QPs
/// (READ `i` on QP `i % qps`).
struct Reads {
    p: Pair,
    conns: Vec<Conn>,
    local: Region,
    remote: Region,
    data: Vec<u8>,
    len: usize,
    n: usize,
}

fn reads(cfg: [EngineConfig; 2], mtu: PathMtu, qps: usize, n: usize, len: usize, timeout: u8) -> Reads {
    let mut p = Pair::with_configs(cfg, [41, 42]);
    let conns = (0..qps)
        .map(|q| {
            p.connect(mtu, [1000 * q as u32, 0xff_fff0], |c| {
                c.timeout = timeout;
                c.max_rd_atomic = 16;
                c.max_dest_rd_atomic = 16;
            })
        })
        .collect::<Vec<_>>();
    let local = p.region(A, n * len, 0x1000_0000, Access::ALL);
    let remote = p.region(B, n * len, 0x2000_0000, Access::ALL);
    let data = pattern(n * len, 3);
    p.put(&remote, 0, &data);
    for i in 0..n {
        let off = (i * len) as u64;
        let wr = SendWr::new(
            i as u64,
            SendOp::Read { remote_addr: remote.keys.addr + off, rkey: remote.keys.rkey },
            vec![sge(&local, off, len as u32)],
        );
        p.e[A].post_send(conns[i % qps].qpn[0], wr).unwrap();
    }
    Reads { p, conns, local, remote, data, len, n }
}

impl Reads {
    fn check(&mut self, wcs: &[Wc]) {
        assert_eq!(wcs.len(), self.n);
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        assert!(wcs.iter().all(|w| w.byte_len as usize == self.len));
        assert!(self.p.mem(&self.local) == self.data, "every byte read back right");
        assert_eq!(self.p.mem(&self.remote), self.data);
        assert_eq!(self.p.e[A].read_outstanding(), 0, "nothing left charged");
    }
}

/// A receive buffer of 512 KiB drained at 1 datagram per microsecond
/// behind a sender of 4 per microsecond (a receiving driver slower than
/// the link, as on one host).
const SLOW_RX: Link = Link { rx_cap: 512 << 10, drain: 1, line: 4, delay: 5, lose: &[], pauses: &[] };

#[test]
fn a_read_burst_stays_within_the_budget_and_loses_nothing() {
    // 8 MiB READs on 4 QPs, as `ib_read_bw -s 8388608 -q 4`, with a budget
    // of a quarter of the buffer.
    let budget = (SLOW_RX.rx_cap / 4) as u64;
    let mut r = reads(config(budget, 50), PathMtu::Mtu4096, 4, 8, 8 << 20, 14);
    let mut wcs = Vec::new();
    let o = run_link(&mut r.p, &SLOW_RX, r.n, &mut wcs, 100_000_000);
    r.check(&wcs);
    assert_eq!(o.dropped, 0, "the modelled buffer never overflows");
    assert!(o.max_outstanding <= budget, "{} > {budget}", o.max_outstanding);
    let c = r.p.e[A].counters();
    assert_eq!((c.read_tail_rerequests, c.completer_retry_err, c.out_of_seq_response), (0, 0, 0));
    assert!(c.read_budget_waits > 0, "the four QPs shared the budget");
    assert_eq!(r.conns.len(), 4);
}

#[test]
fn without_the_budget_the_same_burst_overflows_the_model() {
    // A budget as large as the READ: one request for all of it, as before
    // the budget. The modelled buffer overflows (what the test above
    // avoids is real), and the losses are recovered: every byte arrives.
    let mut r = reads(config(64 << 20, 100), PathMtu::Mtu4096, 1, 1, 8 << 20, 14);
    let mut wcs = Vec::new();
    let o = run_link(&mut r.p, &SLOW_RX, r.n, &mut wcs, 100_000_000);
    r.check(&wcs);
    assert!(o.dropped > 0, "the model does overflow without the budget");
    assert!(o.max_outstanding > (SLOW_RX.rx_cap as u64));
}

/// The READ response packets of a pair's trace from B, by sequence.
fn is_read_response(bytes: &[u8]) -> Option<Position> {
    let v = RocePacket::new_checked(bytes).ok()?;
    let info = v.opcode_info();
    (info.operation == Operation::RdmaReadResponse).then_some(info.position)
}

#[test]
fn a_lost_tail_is_asked_for_again_after_the_floor_not_the_ack_timeout() {
    // One 64 KiB READ at MTU 1024 (64 responses); the last three are lost
    // once. The pair moves packets at no cost, so the round trip measures
    // zero and the wait is the floor, 200 us; the ACK timeout is ~4 ms.
    let mut r = reads(config(1 << 20, 200), PathMtu::Mtu1024, 1, 1, 64 << 10, 10);
    let mut seen = 0;
    let mut dropped = 0;
    r.p.run_with(
        |s, bytes| {
            if s != B || is_read_response(bytes).is_none() {
                return true;
            }
            seen += 1;
            let drop = (62..=64).contains(&seen);
            dropped += usize::from(drop);
            !drop
        },
        100_000,
    );
    assert_eq!(dropped, 3);
    let wcs = r.p.poll(A);
    r.check(&wcs);
    let c = r.p.e[A].counters();
    assert_eq!((c.read_tail_rerequests, c.completer_retry_err), (1, 0), "{c:?}");
    assert_eq!(r.p.now, Instant::from_nanos(200_000), "recovered when the tail timer fired");
    // The re-request asked for the missing tail only: its PSN is that of
    // the first missing response, its RETH the rest of the range.
    let reqs: Vec<_> =
        r.p.trace
            .iter()
            .filter(|(s, _)| *s == A)
            .filter_map(|(_, b)| {
                let v = RocePacket::new_checked(&b[..]).ok()?;
                let repr = RocePacketRepr::parse_view(&v).ok()?;
                (v.opcode_info().operation == Operation::RdmaReadRequest)
                    .then(|| (repr.bth.psn, repr.ext.reth.expect("RETH")))
            })
            .collect();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[1].0, reqs[0].0.add(61));
    assert_eq!(reqs[1].1.va, reqs[0].1.va + 61 * 1024);
    assert_eq!(reqs[1].1.dma_len, 3 * 1024);
}

#[test]
fn a_gap_in_the_middle_is_asked_for_at_once() {
    // The 10th response of a 64-packet READ is lost: the 11th shows the
    // gap and the rest is asked for again at once, before any timer.
    let mut r = reads(config(1 << 20, 200), PathMtu::Mtu1024, 1, 1, 64 << 10, 10);
    let mut seen = 0;
    r.p.run_with(
        |s, bytes| {
            if s == B && is_read_response(bytes).is_some() {
                seen += 1;
                return seen != 10;
            }
            true
        },
        100_000,
    );
    let wcs = r.p.poll(A);
    r.check(&wcs);
    let c = r.p.e[A].counters();
    assert_eq!((c.read_tail_rerequests, c.completer_retry_err), (0, 0), "{c:?}");
    assert_eq!(r.p.now, Instant::ZERO, "no timer was needed");
}

#[test]
fn a_large_read_is_asked_for_in_chunks_whose_psns_follow_each_other() {
    // Budget 64 KiB at MTU 1024: requests of 16 KiB (16 PSNs each), four
    // in flight at most; a 100 KiB READ takes 7, the last of 4 KiB.
    let mut r = reads(config(64 << 10, 200), PathMtu::Mtu1024, 1, 1, 100 << 10, 10);
    r.p.run();
    let wcs = r.p.poll(A);
    r.check(&wcs);
    let reqs: Vec<_> =
        r.p.trace
            .iter()
            .filter(|(s, _)| *s == A)
            .filter_map(|(_, b)| {
                let v = RocePacket::new_checked(&b[..]).ok()?;
                let repr = RocePacketRepr::parse_view(&v).ok()?;
                (v.opcode_info().operation == Operation::RdmaReadRequest)
                    .then(|| (repr.bth.psn, repr.ext.reth.expect("RETH")))
            })
            .collect();
    assert_eq!(reqs.len(), 7, "{reqs:?}");
    for (i, (psn, reth)) in reqs.iter().enumerate() {
        assert_eq!(*psn, reqs[0].0.add(16 * i as u32));
        assert_eq!(reth.va, r.remote.keys.addr + (i as u64) * (16 << 10));
        assert_eq!(reth.dma_len, if i < 6 { 16 << 10 } else { 4 << 10 });
    }
    let last_responses =
        r.p.trace
            .iter()
            .filter(|(s, b)| *s == B && is_read_response(b).is_some_and(|p| p.ends_message()))
            .count();
    assert_eq!(last_responses, 7, "one response message per request");
    // A sends four requests, the budget, before B answers any: the fifth
    // waits for room.
    assert!(r.p.e[A].counters().read_budget_waits > 0);
}

/// A responder that pauses inside a READ's stream (rxe in an emulated VM
/// does, for tens of milliseconds): a pause a little longer than the
/// floor, after shorter ones, is a pause, not a lost tail. 1 MiB at MTU
/// 1024, one packet per microsecond, floor 200 us; B pauses 150 us after
/// its 300th response, then 400 us after its 600th. Learning the first
/// pause sets the wait to 8 x 150 us, so the second asks for nothing again.
#[test]
fn a_responder_that_pauses_is_not_taken_for_a_lost_tail() {
    const PAUSING: Link =
        Link { rx_cap: 64 << 20, drain: 4, line: 1, delay: 5, lose: &[], pauses: &[(300, 150), (600, 400)] };
    let mut r = reads(config(64 << 20, 200), PathMtu::Mtu1024, 1, 1, 1 << 20, 16);
    let mut wcs = Vec::new();
    run_link(&mut r.p, &PAUSING, r.n, &mut wcs, 1_000_000);
    r.check(&wcs);
    let (a, b) = (r.p.e[A].counters(), r.p.e[B].counters());
    assert_eq!((a.read_tail_rerequests, a.completer_retry_err, b.duplicate_request), (0, 0, 0), "{a:?}");
}

/// One response lost early in a long READ from a slow responder: the gap
/// is asked for once, and the responder, which answers the repeated
/// request after the rest of the first stream (rxe does so, and so does
/// this engine), keeps sending that stream for longer than the ACK
/// timeout. Those responses are stale, however late, and they show the
/// responder alive: no second request, no transport retry. 2 MiB at MTU
/// 1024 (2,048 responses), one per microsecond; the 100th is lost; ACK
/// timeout ~1 ms.
#[test]
fn a_long_stale_stream_after_a_gap_asks_once_and_spends_no_retry() {
    const SLOW: Link = Link { rx_cap: 64 << 20, drain: 4, line: 1, delay: 5, lose: &[100], pauses: &[] };
    let mut r = reads(config(64 << 20, 200), PathMtu::Mtu1024, 1, 1, 2 << 20, 8);
    let mut wcs = Vec::new();
    run_link(&mut r.p, &SLOW, r.n, &mut wcs, 1_000_000);
    r.check(&wcs);
    let (a, b) = (r.p.e[A].counters(), r.p.e[B].counters());
    assert_eq!((b.duplicate_request, a.completer_retry_err, a.read_tail_rerequests), (1, 0, 0), "{a:?}");
}

/// A responder that falls silent for longer than the ACK timeout in the
/// middle of a READ (rxe in a busy emulated VM does): the timeout repeats
/// the outstanding requests, once. The responder finishes what it was
/// sending and the requests queued behind it, and only then replays the
/// repeated ones, for longer than the ACK timeout again. Those replayed
/// responses are duplicates, but they show the responder answering: the
/// ACK timer waits for them, and no further retry repeats the requests
/// sent since (which the responder would replay too, and so on until the
/// retries ran out: eight timeouts before this rule). Two 4 MiB READs at MTU 1024 with a budget of 4 MiB
/// (eight requests of 1 MiB, four in flight); one response per
/// microsecond; B pauses 1.5 ms after its 100th; ACK timeout ~1 ms.
#[test]
fn a_replay_after_a_timeout_keeps_the_ack_timer_waiting() {
    const STALL: Link =
        Link { rx_cap: 64 << 20, drain: 4, line: 1, delay: 5, lose: &[], pauses: &[(100, 1_500)] };
    let mut r = reads(config(4 << 20, 200), PathMtu::Mtu1024, 1, 2, 4 << 20, 8);
    let mut wcs = Vec::new();
    run_link(&mut r.p, &STALL, r.n, &mut wcs, 1_000_000);
    r.check(&wcs);
    let (a, b) = (r.p.e[A].counters(), r.p.e[B].counters());
    assert_eq!(a.completer_retry_err, 1, "one timeout, during the pause: {a:?}");
    // The replay outlasted the ACK timeout (a response per microsecond).
    assert!(a.duplicate_response > 1_050, "{a:?}");
    assert_eq!(b.duplicate_request, a.sent_pkts - 8, "only the timeout repeated requests: {b:?}");
}

/// Responses lost at random, one in 200 (`every`, from `seed`): the
/// numbers of B's datagrams that the link loses.
fn random_losses(n: usize, every: u64, seed: u64) -> &'static [usize] {
    let mut x = seed;
    let lost: Vec<usize> = (1..=n)
        .filter(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % every == 0
        })
        .collect();
    Box::leak(lost.into_boxed_slice())
}

/// Large READs over a lossy link from a responder that serves a repeated
/// request after what it was sending (rxe does, and so does this engine):
/// every lost response is asked for alone, and the responses behind it
/// are kept, so the responder sends little more than the data. Going back
/// from each gap instead made it send each window again per loss, many
/// times the data, for long enough that a lossy run against rxe timed out.
/// Four 8 MiB READs at MTU 1024 on one QP, a budget of 4 MiB (requests of
/// 1 MiB, four in flight), one response per microsecond, 1 in 200 lost;
/// ACK timeout ~1 ms.
#[test]
fn random_losses_cost_the_lost_packets_not_the_window() {
    let packets = 4 * (8 << 20) / 1024;
    for seed in [1, 2, 3] {
        let lose = random_losses(packets * 2, 200, seed);
        let lossy = Link { rx_cap: 64 << 20, drain: 4, line: 1, delay: 5, lose, pauses: &[] };
        let mut r = reads(config(4 << 20, 200), PathMtu::Mtu1024, 1, 4, 8 << 20, 8);
        let mut wcs = Vec::new();
        run_link(&mut r.p, &lossy, r.n, &mut wcs, 10_000_000);
        r.check(&wcs);
        let (a, b) = (r.p.e[A].counters(), r.p.e[B].counters());
        let lost = lose.iter().filter(|&&n| n <= b.sent_pkts as usize).count() as u64;
        assert!(lost > 100, "seed {seed}: {lost} lost");
        assert!(a.read_placed_past_gap > 0 && a.read_gap_rerequests > 0, "seed {seed}: {a:?}");
        // Each loss costs its own packet again, and that repeat may be lost too.
        assert!(
            b.sent_pkts <= packets as u64 + 3 * lost,
            "seed {seed}: B sent {} for {packets} responses with {lost} lost: {a:?}",
            b.sent_pkts
        );
        assert_eq!((a.completer_retry_err, a.retry_exceeded_err), (0, 0), "seed {seed}: {a:?}");
    }
}
