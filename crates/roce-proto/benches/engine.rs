//! Engine throughput: two engines joined in memory (no sockets, no threads),
//! one RC QP pair, in steady state with a pipeline of outstanding WRs.
//!
//! * `write_64KiB/engine`: 64 KiB RDMA WRITEs at path MTU 4096 (16 packets
//!   each), 32 WRs outstanding;
//! * `send_8B/engine`: 8-byte SENDs (one packet each), 64 WRs outstanding, the
//!   receiver keeping 64 receives posted.
//!
//! The driver loop (`tests/support/stream.rs`) moves up to 32 packets from A
//! to B per round, then all of B's packets (its coalesced ACKs) back to A,
//! runs due timers, reaps both CQs and reposts: everything an I/O driver does
//! except the I/O. One criterion iteration is one message, and the throughput
//! is declared as its payload bytes, so criterion prints payload bytes/s.
//!
//! Same-run baseline, `<case>/memcpy`: the same payload bytes copied per
//! message from the source buffer through a path-MTU-sized bounce buffer into
//! the destination buffer (`MemBuf::read` then `MemBuf::write`, chunk by
//! chunk), which is exactly the data movement the engine does (gather into
//! the packet, place into the target MR) without any protocol work. Both
//! use the same two `len`-byte buffers, so the working set is cache-resident
//! for both.
//!
//! After the criterion output, a summary per case gives, over every timed
//! iteration (warm-up included, all of it steady state): payload Gb/s,
//! packets per second from `Counters::sent_pkts` (both engines: data + ACK,
//! and data alone), ns per message, and the ratio engine/memcpy of payload
//! throughput.
//!
//! Then, congestion control's cost with no congestion: each case again as
//! two streams on the wall clock (the engines' `now` is real time, as under
//! a driver, so pacing sees time pass), configured as the `roce` device
//! configures its engine (`pacing_slack` 200 us, 100 Gb/s line rate), one
//! with `cc = none`, one with `cc = dcqcn` (ConnectX defaults; both
//! engines: the requester's reaction point paces every packet, the
//! responder's notification point looks at every packet's ECN). They run
//! interleaved, in blocks of the same number of messages, alternating
//! which goes first; the report gives both throughputs (medians over the
//! blocks) and the median of the per-block ratios on/off, and checks that
//! nothing was marked and no rate was cut. Run with
//!
//! ```sh
//! cargo bench -p roce-proto --bench engine
//! ```

#[path = "../tests/support/stream.rs"]
mod stream;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use roce_proto::cc::{CcAlgorithm, DcqcnParams};
use roce_proto::PathMtu;
use stream::{Kind, Stream};

/// Totals over every timed call of one benchmark.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    ns: u128,
    msgs: u64,
    packets: u64,
    data_packets: u64,
    bytes: u64,
}

impl Tally {
    fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.ns as f64
    }
    fn per_sec(&self, n: u64) -> f64 {
        n as f64 * 1e9 / self.ns as f64
    }
}

struct Case {
    name: &'static str,
    kind: Kind,
    len: u32,
    depth: usize,
}

fn run_case(c: &mut Criterion, case: &Case) -> (Tally, Tally) {
    let mtu = PathMtu::Mtu4096;
    let mut s = Stream::new(case.kind, case.len, mtu, case.depth, 32);
    s.run_messages(20 * case.depth as u64);
    s.check_data();
    let mut engine = Tally::default();
    let mut copy = Tally::default();

    let mut g = c.benchmark_group(case.name);
    g.throughput(Throughput::Bytes(u64::from(case.len)));
    g.bench_function("engine", |b| {
        b.iter_custom(|iters| {
            let (c0, p0, d0) = (s.completed, s.packets(), s.data_packets());
            let t = Instant::now();
            s.run_messages(iters);
            let el = t.elapsed();
            // A round can complete a few messages more than asked: scale.
            let done = s.completed - c0;
            engine.ns += el.as_nanos();
            engine.msgs += done;
            engine.packets += s.packets() - p0;
            engine.data_packets += s.data_packets() - d0;
            engine.bytes += done * u64::from(case.len);
            Duration::from_nanos((el.as_nanos() * u128::from(iters) / u128::from(done.max(1))) as u64)
        })
    });
    let (src, dst) = (s.source().clone(), s.dest().clone());
    let len = case.len as usize;
    let mut bounce = vec![0u8; mtu.bytes()];
    g.bench_function("memcpy", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let mut off = 0;
                while off < len {
                    let n = (len - off).min(bounce.len());
                    // SAFETY: the engines sharing these buffers run on this
                    // thread only and none is inside a call.
                    unsafe {
                        src.read(off, &mut bounce[..n]).unwrap();
                        dst.write(off, black_box(&bounce[..n])).unwrap();
                    }
                    off += n;
                }
            }
            let el = t.elapsed();
            copy.ns += el.as_nanos();
            copy.msgs += iters;
            copy.bytes += iters * len as u64;
            el
        })
    });
    g.finish();
    s.check_data();
    (engine, copy)
}

/// Blocks of the on/off comparison, and how long one block should take.
const CC_BLOCKS: usize = 21;
const CC_BLOCK_SECS: f64 = 0.1;

/// The on/off comparison of one case, medians over the blocks.
struct CcCost {
    /// Messages per second: cc none, a second cc none stream (the
    /// control), cc dcqcn.
    msgs_per_sec: [f64; 3],
    /// Per-block ratios dcqcn/none and control/none (the noise floor).
    ratio: f64,
    control: f64,
}

fn cc_overhead(case: &Case) -> CcCost {
    let stream = |cc: CcAlgorithm| {
        let configure = |c: &mut roce_proto::EngineConfig| {
            c.cc = cc.clone();
            c.pacing_slack = roce_proto::Duration::from_micros(200);
        };
        let mut s =
            Stream::with_config(case.kind, case.len, PathMtu::Mtu4096, case.depth, 32, configure, true);
        s.run_messages(20 * case.depth as u64);
        s
    };
    let mut s = [
        stream(CcAlgorithm::None),
        stream(CcAlgorithm::None),
        stream(CcAlgorithm::Dcqcn(DcqcnParams::nvidia())),
    ];
    // Size a block from a short timed run.
    let t = Instant::now();
    s[2].run_messages(200);
    let per_msg = t.elapsed().as_secs_f64() / 200.0;
    let n = ((CC_BLOCK_SECS / per_msg) as u64).max(100);
    let mut rates = [Vec::new(), Vec::new(), Vec::new()];
    let (mut ratios, mut controls) = (Vec::new(), Vec::new());
    for block in 0..CC_BLOCKS {
        let mut r = [0.0; 3];
        // Each stream takes each place in the order in turn.
        for i in 0..3 {
            let k = (block + i) % 3;
            let c0 = s[k].completed;
            let t = Instant::now();
            s[k].run_messages(n);
            r[k] = (s[k].completed - c0) as f64 / t.elapsed().as_secs_f64();
            rates[k].push(r[k]);
        }
        ratios.push(r[2] / r[0]);
        controls.push(r[1] / r[0]);
    }
    for (k, s) in s.iter_mut().enumerate() {
        s.check_data();
        let c = s.p.e[0].counters();
        assert_eq!((c.cnp_rcvd, c.cc_rate_cuts), (0, 0), "stream {k} saw congestion: {c:?}");
        assert_eq!(s.p.e[1].counters().ecn_ce_rcvd, 0);
    }
    let rate = s[2].p.e[0].qp_rate(s[2].qpn[0]).expect("the DCQCN stream has a rate");
    assert_eq!(rate.rate_bps, roce_proto::limits::LINE_RATE_BPS, "{rate:?}");
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    CcCost { msgs_per_sec: rates.map(median), ratio: median(ratios), control: median(controls) }
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let cases = [
        Case { name: "write_64KiB", kind: Kind::Write, len: 64 << 10, depth: 32 },
        Case { name: "send_8B", kind: Kind::Send, len: 8, depth: 64 },
    ];
    let results: Vec<_> = cases.iter().map(|case| (case.name, run_case(&mut c, case))).collect();
    c.final_summary();
    let cc: Vec<_> = cases.iter().map(cc_overhead).collect();

    println!("\nsummary (all timed iterations, steady state, one core):");
    for (name, (e, m)) in results {
        if e.ns == 0 || e.msgs == 0 {
            println!("{name}: engine not run");
            continue;
        }
        println!(
            "{name}/engine: {:.2} Gb/s payload, {:.3} Mpps ({:.3} Mpps data + {:.3} Mpps ACK), \
             {:.1} packets/msg, {:.0} ns/msg, {} msgs timed",
            e.gbps(),
            e.per_sec(e.packets) / 1e6,
            e.per_sec(e.data_packets) / 1e6,
            e.per_sec(e.packets - e.data_packets) / 1e6,
            e.packets as f64 / e.msgs as f64,
            e.ns as f64 / e.msgs as f64,
            e.msgs,
        );
        if m.ns == 0 || m.msgs == 0 {
            println!("{name}/memcpy: not run");
            continue;
        }
        println!(
            "{name}/memcpy: {:.2} Gb/s, {:.1} ns/msg; engine/memcpy throughput ratio = {:.4} \
             (the engine takes {:.1}x the copy's time)",
            m.gbps(),
            m.ns as f64 / m.msgs as f64,
            e.gbps() / m.gbps(),
            m.gbps() / e.gbps(),
        );
    }

    println!(
        "\ncongestion control with no congestion (wall clock, pacing_slack 200 us, 100 Gb/s line rate; \
         {CC_BLOCKS} interleaved blocks of ~{CC_BLOCK_SECS} s each, medians):"
    );
    for (case, c) in cases.iter().zip(cc) {
        let gbps = |m: f64| m * f64::from(case.len) * 8.0 / 1e9;
        let [off, _, on] = c.msgs_per_sec;
        println!(
            "{}: cc none {:.3} Mmsg/s ({:.2} Gb/s), cc dcqcn {:.3} Mmsg/s ({:.2} Gb/s); \
             dcqcn/none = {:.4} ({:+.1}%); control none/none = {:.4} ({:+.1}%)",
            case.name,
            off / 1e6,
            gbps(off),
            on / 1e6,
            gbps(on),
            c.ratio,
            (c.ratio - 1.0) * 100.0,
            c.control,
            (c.control - 1.0) * 100.0,
        );
    }
}
