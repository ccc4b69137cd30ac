//! Would io_uring lift the driver's ceiling on this kernel? The sending
//! side is what bounds `roce write-bw` on loopback (its thread spends most
//! of its time inside `sendmmsg`), so this measures the raw path the
//! driver rests on, in the same run, three ways:
//!
//! * `sendmmsg`: what the driver does (32 GSO messages of 15 datagrams of
//!   4112 bytes per call, the `vs_udp` raw baseline);
//! * io_uring `IORING_OP_SENDMSG`: the same 32 messages as 32 SQEs, one
//!   `io_uring_enter` per batch;
//! * io_uring `IORING_OP_SENDMSG_ZC`: the same, zero-copy, each batch
//!   waiting for the kernel's notifications before its buffer is reused.
//!
//! Each sender computes one CRC32 per datagram first (the ICRC's least
//! work) and the receiver, `recvmmsg` with GRO as the driver, checks it.
//! Rounds alternate (this VM drifts); the medians and the ratios to
//! `sendmmsg` are printed. `ROCE_BENCH_SECS` sets each phase (default 1 s).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, types, IoUring};

#[path = "support/raw_rx.rs"]
mod raw_rx;
use raw_rx::{crc_batch, RawRx};
use roce::udp::{TxMsg, UdpIo, BATCH};

const PKT: usize = 12 + 4096 + 4;
const PER: usize = 15;
const SOL_UDP: libc::c_int = 17;
const UDP_SEGMENT: libc::c_int = 103;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Way {
    Sendmmsg,
    Uring,
    UringZc,
}

fn secs() -> f64 {
    std::env::var("ROCE_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0)
}

/// One message's headers for io_uring: address, one iovec, the GSO size.
struct Msg {
    hdr: libc::msghdr,
    name: libc::sockaddr_in,
    iov: libc::iovec,
    ctrl: [u64; 4],
}

impl Msg {
    fn new(dst: SocketAddr, data: &[u8]) -> Box<Msg> {
        let SocketAddr::V4(v4) = dst else { panic!("IPv4 loopback") };
        // SAFETY: all-zero is a valid value for these plain C structs.
        let mut m: Box<Msg> = Box::new(unsafe { std::mem::zeroed() });
        m.name.sin_family = libc::AF_INET as u16;
        m.name.sin_port = v4.port().to_be();
        m.name.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
        m.iov = libc::iovec { iov_base: data.as_ptr() as *mut _, iov_len: data.len() };
        // The box does not move: the header points into it.
        let Msg { hdr, name, iov, ctrl } = &mut *m;
        hdr.msg_name = (name as *mut libc::sockaddr_in).cast();
        hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
        hdr.msg_iov = iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = ctrl.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE of a u16 fits the 32-byte control buffer; the
        // header's control fields describe it.
        unsafe {
            hdr.msg_controllen = libc::CMSG_SPACE(2) as usize;
            let c = libc::CMSG_FIRSTHDR(hdr);
            (*c).cmsg_level = SOL_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), PKT as u16);
        }
        m
    }
}

/// Goodput (Gb/s of 4096-byte payloads) of one sender `way` against a
/// `recvmmsg` + GRO receiver that checks every CRC.
fn run(way: Way) -> f64 {
    let rx = UdpIo::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut tx = UdpIo::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    assert!(tx.gso(), "this evaluation needs UDP GSO");
    let dst = rx.local_addr();
    let receiver = RawRx::spawn(rx, true);
    let mut data = vec![0x5au8; PKT * PER];
    let dur = Duration::from_secs_f64(secs());
    let t0 = Instant::now();
    let start = receiver.bytes();
    match way {
        Way::Sendmmsg => {
            while t0.elapsed() < dur {
                crc_batch(&mut data, PKT, BATCH);
                let msgs =
                    [TxMsg { dst, tos: 0, data: &data, pieces: &[], segment: Some(PKT as u16) }; BATCH];
                let mut sent = 0;
                while sent < msgs.len() {
                    match tx.send(&msgs[sent..]).unwrap() {
                        0 => std::thread::yield_now(),
                        k => sent += k,
                    }
                }
            }
        }
        Way::Uring | Way::UringZc => {
            let fd = types::Fd(tx.raw_fd());
            let mut ring = IoUring::new(4 * BATCH as u32).unwrap();
            // Built once, as sendmmsg's headers are: each keeps a pointer
            // to `data`, which is written in place and never reallocated.
            let msgs: Vec<Box<Msg>> = (0..BATCH).map(|_| Msg::new(dst, &data)).collect();
            let mut left = Vec::with_capacity(BATCH);
            while t0.elapsed() < dur {
                crc_batch(&mut data, PKT, BATCH);
                let mut pending = 0;
                left.extend(0..BATCH);
                while !left.is_empty() || pending > 0 {
                    for &i in &left {
                        let p = &msgs[i].hdr as *const libc::msghdr;
                        let e = match way {
                            Way::Uring => opcode::SendMsg::new(fd, p).build(),
                            _ => opcode::SendMsgZc::new(fd, p).build(),
                        };
                        // SAFETY: the msghdr, its name, iovec, control
                        // buffer and the data outlive the operation, and
                        // the data is not written while it runs: this loop
                        // waits for every completion (and, zero-copy, every
                        // notification) before the next CRC pass and
                        // before they are dropped.
                        unsafe { ring.submission().push(&e.user_data(i as u64)) }.expect("ring has room");
                        pending += 1;
                    }
                    left.clear();
                    ring.submit_and_wait(1).unwrap();
                    for c in ring.completion() {
                        // (zero-copy: a send's result says whether a
                        // notification follows, which frees its buffer)
                        pending -= 1;
                        if cqueue::notif(c.flags()) {
                            continue;
                        }
                        if cqueue::more(c.flags()) {
                            pending += 1;
                        }
                        if c.result() == -libc::EAGAIN {
                            // the socket buffer is full: send it again
                            left.push(c.user_data() as usize);
                        } else {
                            assert!(c.result() > 0, "send failed: {}", c.result());
                        }
                    }
                    if !left.is_empty() {
                        std::thread::yield_now();
                    }
                }
            }
        }
    }
    let el = t0.elapsed().as_secs_f64();
    let b = receiver.bytes() - start;
    receiver.stop();
    b as f64 * 4096.0 / PKT as f64 * 8.0 / el / 1e9
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let ways = [Way::Sendmmsg, Way::Uring, Way::UringZc];
    let rounds = 3;
    let mut got = vec![Vec::new(); ways.len()];
    println!(
        "raw UDP sender, 32 GSO messages of {PER} x {PKT} B per batch, CRC per datagram, {} s per phase:",
        secs()
    );
    for r in 1..=rounds {
        let row: Vec<f64> = ways.iter().map(|&w| run(w)).collect();
        println!(
            "  round {r}: sendmmsg {:.1}, io_uring sendmsg {:.1}, io_uring sendmsg_zc {:.1} Gb/s of payload",
            row[0], row[1], row[2]
        );
        for (g, v) in got.iter_mut().zip(row) {
            g.push(v);
        }
    }
    let median = |v: &Vec<f64>| {
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let base = median(&got[0]);
    println!(
        "  median: sendmmsg {base:.1}; io_uring sendmsg {:.2}x, sendmsg_zc {:.2}x of it",
        median(&got[1]) / base,
        median(&got[2]) / base
    );
}
