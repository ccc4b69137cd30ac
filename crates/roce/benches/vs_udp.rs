//! RoCE over UDP against raw UDP, measured in the same run on this machine.
//!
//! * Throughput: raw UDP blasting datagrams of the size of an RDMA WRITE
//!   packet at MTU 4096 (4096 B payload + BTH + ICRC), batched with the same
//!   sendmmsg/GSO path the driver uses, received with recvmmsg/GRO; against
//!   64 KiB RDMA WRITEs at MTU 4096, 64 in flight, between two devices.
//! * Latency: raw UDP ping-pong of datagrams the size of an 8-byte
//!   WRITE_ONLY packet, against a ping-pong of 8-byte RDMA WRITEs where each
//!   side polls its memory for the other's write (perftest's write_lat),
//!   both busy-polling. Reported as half the round trip, like perftest.
//!
//! Prints the figures and the two ratios. `ROCE_BENCH_SECS` sets the length
//! of each throughput phase (default 1 s); `ROCE_BENCH_ONLY=bw` or `lat`
//! runs one half, `roce-bw` or `raw-crc` one phase alone (to profile it).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use roce::udp::{RxMeta, TxMsg, UdpIo, BATCH};
use roce::*;

#[path = "support/raw_rx.rs"]
mod raw_rx;
#[path = "../tests/support/udp_pair.rs"]
mod udp_pair;
use raw_rx::{crc_batch, RawRx};

const MSG: u32 = 65536;
const PKT: usize = 12 + 4096 + 4; // BTH + payload + ICRC (RETH only on FIRST)
const LAT_PKT: usize = 12 + 16 + 8 + 4; // WRITE_ONLY of 8 bytes

fn secs() -> f64 {
    std::env::var("ROCE_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0)
}

/// How the raw UDP baseline batches and what it does with the bytes.
#[derive(Clone, Copy, PartialEq)]
enum Raw {
    /// sendmmsg of 15-datagram GSO buffers, recvmmsg with GRO: the same
    /// batching the driver uses.
    Gso,
    /// As `Gso`, plus one CRC32 pass over every datagram on each side (the
    /// sender fills the last four bytes, the receiver checks them): the
    /// least work any RoCE stack adds, since the ICRC covers every byte.
    GsoCrc,
    /// sendmmsg of 32 single datagrams, no GSO.
    Plain,
}

fn raw_udp_throughput(mode: Raw) -> f64 {
    let rx = UdpIo::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut tx = UdpIo::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let gso = tx.gso() && mode != Raw::Plain;
    let check = mode == Raw::GsoCrc;
    let dst = rx.local_addr();
    let receiver = RawRx::spawn(rx, check);
    // 15 datagrams per GSO buffer (the most below 64 KiB), 32 buffers per sendmmsg.
    let per = if gso { 15 } else { 1 };
    // One buffer, sent BATCH times per call: roce's sender also reads one
    // hot 64 KiB source (perftest's fixed address for large messages).
    let mut data = vec![0x5au8; PKT * per];
    let t0 = Instant::now();
    let start_bytes = receiver.bytes();
    let dur = Duration::from_secs_f64(secs());
    while t0.elapsed() < dur {
        if check {
            // the CRC work of BATCH distinct buffers
            crc_batch(&mut data, PKT, BATCH);
        }
        let msgs =
            [TxMsg { dst, tos: 2, data: &data, pieces: &[], segment: gso.then_some(PKT as u16) }; BATCH];
        let mut sent = 0;
        while sent < msgs.len() {
            match tx.send(&msgs[sent..]).unwrap() {
                0 => std::thread::yield_now(),
                k => sent += k,
            }
        }
    }
    let el = t0.elapsed().as_secs_f64();
    let b = receiver.bytes() - start_bytes;
    receiver.stop();
    // goodput: payload bytes only
    b as f64 * 4096.0 / PKT as f64 * 8.0 / el / 1e9
}

type End = udp_pair::Side;

/// Two devices on IPv4 loopback, both busy-polling or both with a driver
/// thread: a 4096-entry CQ, 256 send and receive WRs, a 64 MiB MR from
/// `alloc_buffer` (huge-page aligned) each, connected at MTU 4096.
fn pair(busy: bool, encrypt: bool) -> (End, End) {
    let side =
        udp_pair::SideOptions::default().busy_poll(busy).cq_depth(4096).qp_depths(256, 256).mr_len(64 << 20);
    udp_pair::UdpPair::new(side).mtu(PathMtu::Mtu4096).encrypted(encrypt).open()
}

/// What a throughput phase of roce moves, A's WRs with B's region.
#[derive(Clone, Copy, PartialEq)]
enum Op {
    /// RDMA WRITEs from A into B.
    Write,
    /// RDMA READs by A of B: the payload flows B -> A, in READ responses.
    Read,
    /// SENDs from A into receives B posts (and reposts, on a thread of its
    /// own, as perftest's send_bw server does).
    Send,
}

/// `encrypt`: both QPs protected (AES-128-GCM, `Qp::protect`).
fn roce_write_bw(encrypt: bool) -> f64 {
    roce_bw(Op::Write, encrypt)
}

/// Gb/s of payload of 64 KiB `op`s, 64 posted at a time, the requester
/// spinning on its CQ as perftest's *_bw do.
fn roce_bw(op: Op, encrypt: bool) -> f64 {
    let (a, b) = pair(false, encrypt);
    let depth = 64u64;
    // perftest's *_bw move a message's address through their cycle buffer
    // (a page) only for messages up to half of it; larger messages, like
    // these, all use the same source and destination address.
    let wr = |i: u64| {
        let (addr, rkey) = (b.mr.addr(), b.mr.rkey());
        let verb = match op {
            Op::Write => SendOp::Write { remote_addr: addr, rkey },
            Op::Read => SendOp::Read { remote_addr: addr, rkey },
            Op::Send => SendOp::Send,
        };
        let mut w = SendWr::new(i, verb, vec![a.mr.sge(0, MSG)]);
        w.signaled = true;
        w
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let done = std::thread::scope(|s| {
        if op == Op::Send {
            let recv = |i| RecvWr { wr_id: i, sg_list: vec![b.mr.sge(0, MSG)] };
            for i in 0..256 {
                b.qp.post_recv(recv(i)).unwrap();
            }
            let stop = &stop;
            let (b, recv) = (&b, recv);
            s.spawn(move || {
                let mut got = [WC_ZERO; 64];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok(n) = b.cq.wait(&mut got, Duration::from_millis(20)) else { continue };
                    for w in &got[..n] {
                        assert_eq!(w.status, WcStatus::Success);
                        b.qp.post_recv(recv(w.wr_id)).unwrap();
                    }
                }
            });
        }
        let mut posted = 0;
        a.qp.post_send_batch((0..depth).map(wr)).unwrap();
        posted += depth;
        let mut done = 0u64;
        let mut buf = [WC_ZERO; 64];
        let t0 = Instant::now();
        let dur = Duration::from_secs_f64(secs());
        while t0.elapsed() < dur {
            // perftest spins on the CQ (ibv_poll_cq, which the C library
            // runs as this poll-or-drive).
            let n = a.cq.poll_or_drive(&mut buf, &[a.qp.qpn()], 1).unwrap();
            for w in &buf[..n] {
                assert_eq!(w.status, WcStatus::Success);
            }
            done += n as u64;
            a.qp.post_send_batch((posted..posted + n as u64).map(wr)).unwrap();
            posted += n as u64;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (done, t0.elapsed().as_secs_f64())
    });
    let (done, el) = done;
    let c = a.dev.counters();
    eprintln!(
        "  roce: {done} messages, {} packets sent, {} retries, {} tx dropped by the kernel",
        c.sent_pkts,
        c.completer_retry_err + c.rcvd_seq_err,
        a.dev.driver_stats().tx_dropped
    );
    done as f64 * MSG as f64 * 8.0 / el / 1e9
}

fn raw_udp_latency(iters: usize) -> f64 {
    let mut a = UdpIo::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut b = UdpIo::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let (aa, ba) = (a.local_addr(), b.local_addr());
    let echo = std::thread::spawn(move || {
        let mut bufs = vec![vec![0u8; 2048]; 1];
        let mut metas = vec![RxMeta::default(); 1];
        let mut n = 0;
        while n < iters {
            if b.recv(&mut bufs, &mut metas).unwrap() == 1 {
                b.send(&[TxMsg { dst: aa, tos: 2, data: &bufs[0][..LAT_PKT], pieces: &[], segment: None }])
                    .unwrap();
                n += 1;
            }
        }
    });
    let data = [7u8; LAT_PKT];
    let mut bufs = vec![vec![0u8; 2048]; 1];
    let mut metas = vec![RxMeta::default(); 1];
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        a.send(&[TxMsg { dst: ba, tos: 2, data: &data, pieces: &[], segment: None }]).unwrap();
        while a.recv(&mut bufs, &mut metas).unwrap() == 0 {}
        samples.push(t.elapsed());
    }
    echo.join().unwrap();
    median_half(&mut samples)
}

fn median_half(s: &mut [Duration]) -> f64 {
    s.sort();
    s[s.len() / 2].as_secs_f64() * 1e6 / 2.0
}

/// perftest's write_lat: each side writes its iteration number into the
/// other's buffer and spins on its own buffer for the reply.
fn roce_write_lat(iters: usize) -> f64 {
    let (a, b) = pair(true, false);
    let run = |me: &End, peer: &End, first: bool| {
        let (rkey, raddr) = (peer.mr.rkey(), peer.mr.addr());
        let mut samples = Vec::with_capacity(iters);
        let mut cqe = [WC_ZERO; 16];
        let mut word = [0u8; 8];
        for i in 1..=iters as u64 {
            let t = Instant::now();
            if !first {
                // wait for the peer's i-th write first
                loop {
                    me.dev.progress().unwrap();
                    me.mr.read(0, &mut word).unwrap();
                    if u64::from_le_bytes(word) >= i {
                        break;
                    }
                }
            }
            me.mr.write(8, &i.to_le_bytes()).unwrap();
            let mut wr = SendWr::new(i, SendOp::Write { remote_addr: raddr, rkey }, vec![me.mr.sge(8, 8)]);
            wr.inline = true;
            wr.signaled = i % 64 == 0;
            me.qp.post_send(wr).unwrap();
            if first {
                loop {
                    me.dev.progress().unwrap();
                    me.mr.read(0, &mut word).unwrap();
                    if u64::from_le_bytes(word) >= i {
                        break;
                    }
                }
                samples.push(t.elapsed());
            }
            let _ = me.cq.poll(&mut cqe);
        }
        samples
    };
    let mut samples = std::thread::scope(|s| {
        let h = s.spawn(|| run(&b, &a, false));
        let r = run(&a, &b, true);
        h.join().unwrap();
        r
    });
    median_half(&mut samples)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing we need.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let _ = SocketAddr::from(([127, 0, 0, 1], 0));
    let only = std::env::var("ROCE_BENCH_ONLY").unwrap_or_default();
    if only == "roce-bw" {
        // for profiling the roce side alone
        println!("roce write-bw: {:.2} Gb/s", roce_write_bw(false));
        return;
    }
    if only == "raw-crc" {
        // the baseline alone, for profiling it beside roce-bw
        println!("raw UDP +CRC: {:.2} Gb/s", raw_udp_throughput(Raw::GsoCrc));
        return;
    }
    if only != "lat" {
        throughput();
    }
    if only != "bw" {
        latency();
    }
}

fn throughput() {
    println!("throughput (64 KiB messages, MTU 4096, {} s per phase):", secs());
    let gso = UdpIo::bind("127.0.0.1:0".parse().unwrap()).unwrap().gso();
    println!(
        "  raw UDP: sendmmsg{} of {PKT} B datagrams; +CRC: the same with one CRC32 pass per datagram on \
         each side; plain: sendmmsg of single datagrams",
        if gso { " + GSO" } else { "" }
    );
    // Alternating rounds, as for latency: this VM's throughput drifts by 2x
    // within a minute, so only neighbouring phases compare.
    let rounds = 3;
    let (mut vs_udp, mut vs_crc, mut vs_plain, mut enc) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut read_crc, mut send_crc) = (Vec::new(), Vec::new());
    for r in 1..=rounds {
        let udp = raw_udp_throughput(Raw::Gso);
        let roce = roce_write_bw(false);
        let roce_enc = roce_write_bw(true);
        let crc = if gso { raw_udp_throughput(Raw::GsoCrc) } else { udp };
        let read = roce_bw(Op::Read, false);
        let send = roce_bw(Op::Send, false);
        let plain = raw_udp_throughput(Raw::Plain);
        println!(
            "  round {r}: raw UDP {udp:.1}, +CRC {crc:.1}, plain {plain:.1}, roce write-bw {roce:.1}, \
             read-bw {read:.1}, send-bw {send:.1}, encrypted write-bw {roce_enc:.1} Gb/s of payload"
        );
        vs_udp.push(roce / udp);
        vs_crc.push(roce / crc);
        read_crc.push(read / crc);
        send_crc.push(send / crc);
        vs_plain.push(roce / plain);
        enc.push(roce_enc / roce);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "  for scale: roce / raw UDP without CRC {:.2}, roce / plain raw UDP {:.2}",
        median(vs_udp),
        median(vs_plain)
    );
    // The floor of any stack that honours the ICRC: one CRC pass per side.
    println!(
        "  ratio roce / raw UDP +CRC: write-bw {:.2}, read-bw {:.2}, send-bw {:.2} (medians of {rounds} rounds; \
         target >= 0.8)",
        median(vs_crc),
        median(read_crc),
        median(send_crc)
    );
    println!("  ratio roce encrypted (AES-128-GCM) / roce: {:.2} (median of {rounds} rounds)", median(enc));
}

/// Alternates rounds of raw UDP and roce so that both see the same machine
/// state: on a VM the ping-pong time can shift between runs (vCPU
/// placement), and a ratio is only meaningful between neighbouring rounds.
fn latency() {
    let (rounds, iters) = (6, 5_000);
    println!("latency (8 B, busy-poll, half round trip, median of {iters} per round):");
    let mut ratios = Vec::new();
    for r in 1..=rounds {
        let ul = raw_udp_latency(iters);
        let rl = roce_write_lat(iters);
        println!(
            "  round {r}: raw UDP ping-pong ({LAT_PKT} B) {ul:.2} us, roce write-lat {rl:.2} us, ratio {:.2}",
            rl / ul
        );
        ratios.push(rl / ul);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "  ratio roce / raw UDP: {:.2} (median of {rounds} rounds, range {:.2}-{:.2}; target <= 1.2)",
        (ratios[rounds / 2 - 1] + ratios[rounds / 2]) / 2.0,
        ratios[0],
        ratios[rounds - 1]
    );
}
