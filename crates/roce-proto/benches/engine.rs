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
//! throughput. Run with
//!
//! ```sh
//! cargo bench -p roce-proto --bench engine
//! ```

#[path = "../tests/support/stream.rs"]
mod stream;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
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
}
