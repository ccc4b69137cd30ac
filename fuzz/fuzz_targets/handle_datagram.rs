//! Fuzz target for `Engine::handle_datagram` and the state machines behind it.
//!
//! Every input starts from the same world: two engines (A = 10.0.0.1,
//! B = 10.0.0.2) with a connected RC QP pair (path MTU 256, so messages of a
//! few hundred bytes are multi-packet), a UD QP each, three MRs each (full
//! access; remote read only; one kept for SEND with Invalidate), receives
//! posted, and a mix of WRs posted (WRITE, SEND, READ, atomics, WRITE with
//! immediate, UD SEND) of which some packets are already on the wire or
//! delivered, so the requesters, responders and completers are mid-flight.
//!
//! The input is then a sequence of operations (decoded with `Unstructured`):
//!
//! * transmit: `poll_transmit` on one side; the packets join that side's
//!   wire queue and a pool of real packets;
//! * deliver: the head of a wire queue to its destination, or drop,
//!   duplicate or reorder it;
//! * raw datagram: arbitrary bytes to either engine, with a plausible
//!   `DatagramMeta`, the last four bytes optionally replaced by the right
//!   ICRC;
//! * mutated real packet: a pool packet with bytes XORed, truncated or
//!   extended, its ICRC recomputed for the meta it is delivered with (to its
//!   destination or reflected back to its sender), so the mutations get past
//!   the ICRC check into the transport logic;
//! * time: advance the clock and run due timers;
//! * post send (every opcode, valid or deliberately bad keys/bounds), post
//!   receive, poll CQs, and QP transitions (RTS -> SQD -> RTS, -> ERR).
//!
//! Invariants, whatever arrives:
//!
//! * no panic (any panic in the engine is a finding);
//! * every `poll_transmit` output parses with `RocePacketRepr::parse`, passes
//!   `check` with the QP's path MTU, carries a valid ICRC for its `meta`, goes
//!   from this engine's address to the peer's, from a known QP to the peer QP
//!   it is connected to (UD: the peer UD QP), with an opcode of the QP's
//!   transport;
//! * completions: every WC names a WR that was posted and not yet completed,
//!   on the QP it was posted to, in posting order per queue; a successful
//!   send WC has the WR's opcode and length, a successful receive WC a
//!   receive opcode and (for SEND) at most the posted length, UD receives
//!   the GRH flag; once a send queue reports an error, the QP is in ERR and
//!   nothing on that send queue completes successfully any more; a CQ never
//!   overflows (its depth exceeds every WR that can be outstanding);
//! * QP states: RC and UD QPs are only ever RTS, SQD (only when asked for) or
//!   ERR; ERR is final here;
//! * liveness: at the end, the wire is run clean (no loss, no injection)
//!   with timers, and every send WR on every QP must complete (success or
//!   error) within a bounded number of packets and timer firings.
#![no_main]

use std::collections::VecDeque;
use std::sync::Arc;

use libfuzzer_sys::arbitrary::{Result as UResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use roce_proto::testkit::{ip, Pair, A, B};
use roce_proto::*;
use roce_wire::icrc::{self, ICRC_LEN};
use roce_wire::{RocePacketRepr, Transport};

const RC: usize = 0;
const UD: usize = 1;
const QKEY: u32 = 0x1111_2222;
const RC_MTU: PathMtu = PathMtu::Mtu256;
const MR_LEN: usize = 16 << 10;
const SMALL_MR_LEN: usize = 4 << 10;
const MAX_OPS: usize = 600;
/// Exercise RTS -> SQD -> RTS (the engine once refused SQD -> RTS; see
/// regressions/handle_datagram.md).
const SQD_ENABLED: bool = true;
/// Sometimes post READs/WRITEs with a remote address near 2^64 (a retried
/// READ once overflowed `remote_addr + done`; post_send now refuses ranges
/// that wrap; see regressions/handle_datagram.md).
const WILD_REMOTE_ADDR: bool = true;
const POOL: usize = 64;
/// wr_id bit marking receive WRs.
const RECV_BIT: u64 = 1 << 63;

fn icrc_for(meta: &DatagramMeta, bytes: &[u8]) -> Option<u32> {
    if bytes.len() < ICRC_LEN {
        return None;
    }
    roce_proto::engine::datagram_icrc(meta, &bytes[..bytes.len() - ICRC_LEN])
}

/// Overwrites the last four bytes with the ICRC the engine expects.
fn fix_icrc(meta: &DatagramMeta, bytes: &mut [u8]) {
    if let Some(c) = icrc_for(meta, bytes) {
        let n = bytes.len();
        bytes[n - ICRC_LEN..].copy_from_slice(&c.to_le_bytes());
    }
}

#[derive(Clone, Copy)]
struct Region {
    buf_len: usize,
    keys: MrKeys,
}

/// A WR we expect a completion for.
#[derive(Debug, Clone, Copy)]
struct Expect {
    wr_id: u64,
    opcode: WcOpcode,
    len: u32,
}

struct Side {
    /// [RC, UD] QPNs.
    qpn: [u32; 2],
    mr_all: Region,
    mr_ro: Region,
    mr_inv: Region,
    /// Expected completions per QP, in posting order.
    sq: [VecDeque<Expect>; 2],
    rq: [VecDeque<Expect>; 2],
    /// The send queue reported an error (the QP must be in ERR from then on).
    sq_failed: [bool; 2],
    /// We moved the QP to SQD and not back.
    in_sqd: [bool; 2],
    /// Kept alive for the MRs (the engine holds them too).
    _bufs: Vec<Arc<MemBuf>>,
}

struct World {
    /// The two engines, their PDs and CQs, the clock.
    p: Pair,
    s: [Side; 2],
    /// Packets sent by side i, not yet delivered to side 1 - i.
    wire: [VecDeque<(DatagramMeta, Vec<u8>)>; 2],
    /// Recent real packets sent by side i (for mutation).
    pool: [VecDeque<(DatagramMeta, Vec<u8>)>; 2],
    buf: Vec<u8>,
    wcs: Vec<Wc>,
    next_id: u64,
}

impl World {
    fn new() -> World {
        let mut p = Pair::with_seeds([11, 22]);
        let reg =
            |p: &mut Pair, bufs: &mut Vec<Arc<MemBuf>>, s: usize, len: usize, iova: u64, access: Access| {
                let r = p.region(s, len, iova, access);
                let init: Vec<u8> =
                    (0..len).step_by(8).flat_map(|i| (i as u64 ^ iova).to_le_bytes()).collect();
                p.put(&r, 0, &init[..len]);
                bufs.push(r.buf);
                Region { buf_len: len, keys: r.keys }
            };
        let caps = |a: &mut QpInitAttr| {
            a.cap = QpCap {
                max_send_wr: 32,
                max_recv_wr: 32,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 128,
            };
            a.sq_sig_all = true;
        };
        let mut sides: Vec<Side> = Vec::new();
        for s in 0..2 {
            let mut bufs = Vec::new();
            let base = 0x1000_0000u64 * (s as u64 + 1);
            let mr_all = reg(&mut p, &mut bufs, s, MR_LEN, base, Access::ALL);
            let mr_ro = reg(&mut p, &mut bufs, s, SMALL_MR_LEN, base + 0x10_0000, Access::REMOTE_READ);
            let mr_inv = reg(&mut p, &mut bufs, s, SMALL_MR_LEN, base + 0x20_0000, Access::ALL);
            let mut init = p.qp_init(s, QpType::Rc);
            caps(&mut init);
            let rc = p.e[s].create_qp(init).unwrap();
            let ud = p.ud_qp(s, caps, QKEY, 5);
            sides.push(Side {
                qpn: [rc, ud],
                mr_all,
                mr_ro,
                mr_inv,
                sq: [VecDeque::new(), VecDeque::new()],
                rq: [VecDeque::new(), VecDeque::new()],
                sq_failed: [false; 2],
                in_sqd: [false; 2],
                _bufs: bufs,
            });
        }
        let s: [Side; 2] = sides.try_into().ok().unwrap();
        // A sends from PSN 0xfffff0 (its PSNs wrap early), B from 100.
        p.connect_qps([s[A].qpn[RC], s[B].qpn[RC]], RC_MTU, [0xfffff0, 100], |_, c| {
            c.timeout = 8;
            c.retry_cnt = 3;
            c.rnr_retry = 3;
        })
        .unwrap();
        p.now = Instant::from_nanos(1_000_000);
        let mut w = World {
            p,
            s,
            wire: [VecDeque::new(), VecDeque::new()],
            pool: [VecDeque::new(), VecDeque::new()],
            buf: vec![0u8; 9000],
            wcs: vec![Wc::EMPTY; 64],
            next_id: 1,
        };
        w.prime();
        w
    }

    /// Receives posted, WRs of every kind posted, some packets exchanged.
    fn prime(&mut self) {
        for x in 0..2 {
            for i in 0..6 {
                self.post_recv(x, RC, 1024 + 256 * i);
            }
            for i in 0..3 {
                self.post_recv(x, UD, 40 + 300 * i);
            }
        }
        let ops = [
            (A, 0u8, 700u32, 0u32),
            (A, 1, 600, 16),
            (A, 2, 900, 64),
            (A, 3, 8, 128),
            (A, 4, 8, 128),
            (A, 5, 300, 2048),
            (A, 8, 200, 0),
            (B, 1, 500, 0),
            (B, 0, 256, 4096),
            (B, 2, 520, 100),
            (B, 8, 100, 0),
            (A, 0, 1000, 8192),
        ];
        for &(x, kind, len, off) in &ops {
            let _ = self.post_send(x, kind, len, off, off, 0);
        }
        // Some of A's requests reach B; B's first responses are queued on the
        // wire; B's requests are produced but held.
        self.transmit(A, 14);
        self.deliver(A, 10, 0);
        self.transmit(B, 8);
        self.deliver(B, 2, 0);
        self.transmit(A, 4);
    }

    fn post_recv(&mut self, x: usize, q: usize, len: u32) {
        let id = RECV_BIT | self.next_id;
        self.next_id += 1;
        let r = self.s[x].mr_all.keys;
        let len = len.min(r.length as u32);
        let wr = RecvWr {
            wr_id: id,
            sg_list: vec![Sge {
                addr: r.addr + (MR_LEN as u64 / 2),
                length: len.min(MR_LEN as u32 / 2),
                lkey: r.lkey,
            }],
        };
        if self.p.e[x].post_recv(self.s[x].qpn[q], wr).is_ok() {
            let opcode = WcOpcode::Recv;
            self.s[x].rq[q].push_back(Expect { wr_id: id, opcode, len: len.min(MR_LEN as u32 / 2) });
        }
    }

    /// Posts a send WR of `kind` (0..=9) with local offset `loff`, remote
    /// offset `roff`; `bad` selects deliberately wrong keys or bounds.
    fn post_send(&mut self, x: usize, kind: u8, len: u32, loff: u32, roff: u32, bad: u8) -> bool {
        let o = 1 - x;
        let id = self.next_id;
        self.next_id += 1;
        let local = self.s[x].mr_all.keys;
        let mut remote = self.s[o].mr_all.keys;
        match bad % 8 {
            1 => remote = self.s[o].mr_ro.keys,
            2 => remote.rkey ^= 0x40,
            _ => {}
        }
        let loff = u64::from(loff) % local.length;
        let roff = u64::from(roff) % remote.length;
        let len = len % 4096;
        let mut sge =
            Sge { addr: local.addr + loff, length: len.min((local.length - loff) as u32), lkey: local.lkey };
        match bad % 8 {
            3 => sge.lkey ^= 1,
            4 => sge.length = len, // may run past the MR
            _ => {}
        }
        let raddr = if WILD_REMOTE_ADDR && bad % 8 == 7 { u64::MAX - roff } else { remote.addr + roff };
        let (op, q) = match kind % 10 {
            0 => (SendOp::Write { remote_addr: raddr, rkey: remote.rkey }, RC),
            1 => (SendOp::Send, RC),
            2 => (SendOp::Read { remote_addr: raddr, rkey: remote.rkey }, RC),
            3 => {
                sge.length = 8;
                sge.addr &= !7;
                (SendOp::FetchAdd { remote_addr: raddr & !7, rkey: remote.rkey, add: u64::from(len) }, RC)
            }
            4 => {
                sge.length = 8;
                sge.addr &= !7;
                (
                    SendOp::CompareSwap {
                        remote_addr: raddr & !7,
                        rkey: remote.rkey,
                        compare: 0,
                        swap: u64::from(len),
                    },
                    RC,
                )
            }
            5 => (SendOp::WriteWithImm { remote_addr: raddr, rkey: remote.rkey, imm: len }, RC),
            6 => (SendOp::SendWithImm { imm: len ^ 0xabcd }, RC),
            7 => (SendOp::SendWithInv { rkey: self.s[o].mr_inv.keys.rkey }, RC),
            _ => {
                sge.length = sge.length.min(600);
                (SendOp::SendWithImm { imm: len }, UD)
            }
        };
        let mut wr = SendWr::new(id, op, vec![sge]);
        if q == UD {
            wr.ud = Some(UdDest {
                av: AddressVector::new(ip(o)),
                remote_qpn: self.s[o].qpn[UD],
                remote_qkey: if bad % 8 == 5 { QKEY ^ 1 } else { QKEY },
            });
        }
        wr.inline = bad % 8 == 6 && !op.is_read_or_atomic() && sge.length <= 128;
        wr.solicited = bad & 8 != 0;
        wr.fence = bad & 16 != 0;
        let len = sge.length;
        let ok = self.p.e[x].post_send(self.s[x].qpn[q], wr).is_ok();
        if ok {
            let (opcode, len) = (op.wc_opcode(), len);
            self.s[x].sq[q].push_back(Expect { wr_id: id, opcode, len });
        }
        ok
    }

    /// Which of side x's QPs has this QPN.
    fn qp_index(&self, x: usize, qpn: u32) -> Option<usize> {
        self.s[x].qpn.iter().position(|&q| q == qpn)
    }

    /// poll_transmit on side x up to n times; checks every packet.
    fn transmit(&mut self, x: usize, n: usize) -> usize {
        let mut sent = 0;
        for _ in 0..n {
            let Some(tx) = self.p.e[x].poll_transmit(self.p.now, &mut self.buf) else { break };
            assert!(tx.len <= self.buf.len());
            let bytes = self.buf[..tx.len].to_vec();
            self.check_tx(x, &tx, &bytes);
            self.wire[x].push_back((tx.meta, bytes.clone()));
            if self.pool[x].len() >= POOL {
                self.pool[x].pop_front();
            }
            self.pool[x].push_back((tx.meta, bytes));
            sent += 1;
        }
        self.check_states();
        sent
    }

    fn check_tx(&self, x: usize, tx: &Transmit, bytes: &[u8]) {
        let o = 1 - x;
        assert_eq!(tx.meta.src, ip(x), "{tx:?}");
        assert_eq!(tx.meta.dst, ip(o), "{tx:?}");
        assert_eq!(tx.meta.dst_port, roce_wire::ROCE_PORT);
        let q = self.qp_index(x, tx.qpn).unwrap_or_else(|| panic!("transmit from unknown QP {tx:?}"));
        let pkt = RocePacketRepr::parse(bytes)
            .unwrap_or_else(|e| panic!("engine sent unparsable packet: {e} {bytes:02x?}"));
        let info = pkt.info().unwrap();
        let mtu = if q == RC { RC_MTU.bytes() } else { 4096 };
        if let Err(e) = pkt.check(Some(mtu)) {
            panic!("engine sent a packet that breaks the rules: {e}: {pkt:?}");
        }
        let want = icrc_for(&tx.meta, bytes).unwrap();
        assert_eq!(icrc::read(bytes), Some(want), "bad ICRC on a transmitted packet");
        assert_eq!(pkt.bth.dest_qp, self.s[o].qpn[q], "packet to the wrong QP: {pkt:?}");
        let t = if q == RC { Transport::Rc } else { Transport::Ud };
        assert_eq!(info.transport, t, "opcode of the wrong transport: {pkt:?}");
        assert_eq!(pkt.bth.pkey, 0xffff);
        if q == UD {
            let d = pkt.ext.deth.expect("UD packet without DETH");
            assert_eq!(d.src_qp, self.s[x].qpn[UD]);
        }
    }

    /// Delivers up to n packets of side x's wire; `mode` bits: drop,
    /// duplicate, reorder.
    fn deliver(&mut self, x: usize, n: usize, mode: u8) {
        for i in 0..n {
            let Some((meta, bytes)) = self.wire[x].pop_front() else { break };
            let m = mode.rotate_left(i as u32);
            if m & 1 != 0 && mode & 0x80 != 0 {
                continue; // dropped
            }
            if m & 2 != 0 && mode & 0x40 != 0 {
                // reorder: behind the next one
                self.wire[x].insert(self.wire[x].len().min(1), (meta, bytes));
                continue;
            }
            self.p.e[1 - x].handle_datagram(self.p.now, &meta, &bytes);
            if m & 4 != 0 && mode & 0x20 != 0 {
                self.p.e[1 - x].handle_datagram(self.p.now, &meta, &bytes);
            }
        }
        self.check_states();
    }

    fn advance(&mut self, ns: u64) {
        self.p.now = self.p.now + Duration::from_nanos(ns);
        for e in &mut self.p.e {
            e.handle_timeout(self.p.now);
        }
        self.check_states();
    }

    fn check_states(&self) {
        for x in 0..2 {
            for q in 0..2 {
                let st = self.p.e[x].qp_state(self.s[x].qpn[q]).expect("QP vanished");
                let sd = &self.s[x];
                match st {
                    QpState::Rts => {
                        assert!(!sd.in_sqd[q] && !sd.sq_failed[q], "side {x} qp {q} RTS after error/SQD")
                    }
                    QpState::Sqd => assert!(sd.in_sqd[q], "side {x} qp {q} in SQD unasked"),
                    QpState::Err => {}
                    s => panic!("side {x} qp {q}: illegal state {s:?}"),
                }
            }
        }
    }

    /// Polls both CQs and checks every completion.
    fn poll(&mut self) {
        for x in 0..2 {
            loop {
                let n = match self.p.e[x].poll_cq(self.p.cq[x], &mut self.wcs) {
                    Ok(n) => n,
                    Err(e) => panic!("poll_cq on side {x}: {e}"),
                };
                for i in 0..n {
                    let wc = self.wcs[i];
                    self.check_wc(x, &wc);
                }
                if n < self.wcs.len() {
                    break;
                }
            }
        }
        self.check_states();
    }

    fn check_wc(&mut self, x: usize, wc: &Wc) {
        let q = self.qp_index(x, wc.qp_num).unwrap_or_else(|| panic!("WC for unknown QP: {wc:?}"));
        let st = self.p.e[x].qp_state(self.s[x].qpn[q]).unwrap();
        let sd = &mut self.s[x];
        if wc.wr_id & RECV_BIT != 0 {
            let exp =
                sd.rq[q].pop_front().unwrap_or_else(|| panic!("receive WC with nothing posted: {wc:?}"));
            assert_eq!(exp.wr_id, wc.wr_id, "receive completions out of order: {wc:?}");
            if wc.status == WcStatus::Success {
                match wc.opcode {
                    WcOpcode::Recv => {
                        assert!(wc.byte_len <= exp.len, "received more than posted: {wc:?} {exp:?}")
                    }
                    WcOpcode::RecvRdmaWithImm => assert_eq!(q, RC),
                    _ => panic!("receive WC with a send opcode: {wc:?}"),
                }
                if q == UD {
                    assert!(wc.wc_flags & WC_GRH != 0 && wc.byte_len >= 40, "{wc:?}");
                } else {
                    assert_eq!(wc.src_qp, self.s[1 - x].qpn[RC], "{wc:?}");
                }
            }
        } else {
            let exp = sd.sq[q].pop_front().unwrap_or_else(|| panic!("send WC with nothing posted: {wc:?}"));
            assert_eq!(exp.wr_id, wc.wr_id, "send completions out of order: {wc:?} want {exp:?}");
            if wc.status == WcStatus::Success {
                assert!(!sd.sq_failed[q], "successful send WC after a send error: {wc:?}");
                assert_eq!(wc.opcode, exp.opcode, "{wc:?}");
                assert_eq!(wc.byte_len, exp.len, "{wc:?}");
            } else {
                sd.sq_failed[q] = true;
                assert_eq!(st, QpState::Err, "send error WC but QP is {st:?}: {wc:?}");
            }
        }
    }

    /// Injects `bytes` into side x, as if sent by the peer.
    fn inject(&mut self, x: usize, bytes: &mut [u8], fix: bool, ecn: u8, sport: u16) {
        let meta = DatagramMeta {
            src: ip(1 - x),
            dst: ip(x),
            src_port: sport,
            dst_port: roce_wire::ROCE_PORT,
            ecn: ecn & 3,
            ipv4_id: if ecn & 4 != 0 { None } else { Some(0) },
        };
        if fix {
            fix_icrc(&meta, bytes);
        }
        self.p.e[x].handle_datagram(self.p.now, &meta, bytes);
        self.check_states();
    }

    fn mutate_and_inject(&mut self, u: &mut Unstructured) -> UResult<()> {
        let from = usize::from(u.arbitrary::<bool>()?);
        if self.pool[from].is_empty() {
            return Ok(());
        }
        let i = u.choose_index(self.pool[from].len())?;
        let (mut meta, mut bytes) = self.pool[from][i].clone();
        let nmut = u.int_in_range(0..=4u8)?;
        for _ in 0..nmut {
            match u.int_in_range(0..=5u8)? {
                // header bytes (BTH + extension headers) most of the time
                0..=2 => {
                    let p = u.int_in_range(0..=47usize)?;
                    let v: u8 = u.arbitrary()?;
                    if let Some(b) = bytes.get_mut(p) {
                        *b ^= v;
                    }
                }
                3 => {
                    if !bytes.is_empty() {
                        let p = u.choose_index(bytes.len())?;
                        bytes[p] ^= u.arbitrary::<u8>()?;
                    }
                }
                4 => {
                    let n = u.int_in_range(0..=bytes.len())?;
                    bytes.truncate(n);
                }
                _ => {
                    let n = u.int_in_range(0..=64usize)?;
                    for _ in 0..n {
                        bytes.push(u.arbitrary()?);
                    }
                }
            }
        }
        // Delivered to its destination, or reflected to its sender.
        let to = if u.arbitrary::<u8>()? & 7 == 0 {
            std::mem::swap(&mut meta.src, &mut meta.dst);
            std::mem::swap(&mut meta.src_port, &mut meta.dst_port);
            meta.dst_port = roce_wire::ROCE_PORT;
            from
        } else {
            1 - from
        };
        meta.ecn = u.int_in_range(0..=3u8)?;
        if u.arbitrary::<u8>()? != 0 {
            fix_icrc(&meta, &mut bytes);
        }
        self.p.e[to].handle_datagram(self.p.now, &meta, &bytes);
        self.check_states();
        Ok(())
    }

    fn modify(&mut self, x: usize, q: usize, what: u8) {
        let qpn = self.s[x].qpn[q];
        let st = self.p.e[x].qp_state(qpn).unwrap();
        match (what % 8, st) {
            (0, QpState::Rts) if SQD_ENABLED => {
                let a = QpAttr { qp_state: QpState::Sqd, ..QpAttr::default() };
                if self.p.e[x].modify_qp(qpn, &a, AttrMask::STATE).is_ok() {
                    self.s[x].in_sqd[q] = true;
                }
            }
            (1..=3, QpState::Sqd) => self.resume(x, q),
            (7, _) if what & 0xf0 == 0xf0 => {
                let a = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
                self.p.e[x].modify_qp(qpn, &a, AttrMask::STATE).unwrap();
            }
            _ => {}
        }
        self.check_states();
    }

    /// SQD -> RTS.
    fn resume(&mut self, x: usize, q: usize) {
        let qpn = self.s[x].qpn[q];
        if self.p.e[x].qp_state(qpn) == Some(QpState::Sqd) {
            let a = QpAttr { qp_state: QpState::Rts, ..QpAttr::default() };
            self.p.e[x].modify_qp(qpn, &a, AttrMask::STATE).unwrap();
        }
        self.s[x].in_sqd[q] = false;
    }

    fn step(&mut self, u: &mut Unstructured) -> UResult<()> {
        let op = u.int_in_range(0..=11u8)?;
        let x = usize::from(u.arbitrary::<bool>()?);
        match op {
            0 | 1 => {
                let n = u.int_in_range(1..=16usize)?;
                self.transmit(x, n);
            }
            2 | 3 => {
                let n = u.int_in_range(1..=16usize)?;
                let mode = u.arbitrary()?;
                self.deliver(x, n, mode);
            }
            4 => {
                let fix = u.arbitrary()?;
                let ecn = u.arbitrary()?;
                let sport = u.arbitrary()?;
                let len = u.int_in_range(0..=600usize)?;
                let mut bytes = u.bytes(len.min(u.len()))?.to_vec();
                self.inject(x, &mut bytes, fix, ecn, sport);
            }
            5 | 6 => self.mutate_and_inject(u)?,
            7 => {
                let ns = match u.int_in_range(0..=3u8)? {
                    0 => u.int_in_range(0..=10_000u64)?,
                    1 => u.int_in_range(0..=2_000_000u64)?,
                    2 => u.int_in_range(0..=50_000_000u64)?,
                    _ => self
                        .p
                        .e
                        .iter()
                        .filter_map(|e| e.poll_timeout())
                        .min()
                        .map_or(0, |t| t.as_nanos().saturating_sub(self.p.now.as_nanos())),
                };
                self.advance(ns);
            }
            8 => {
                let kind = u.arbitrary()?;
                let len = u.int_in_range(0..=2000u32)?;
                let (loff, roff, bad) = (u.arbitrary()?, u.arbitrary()?, u.arbitrary()?);
                let bad = if u.arbitrary::<u8>()? < 200 { 0 } else { bad };
                self.post_send(x, kind, len, loff, roff, bad);
            }
            9 => {
                let q = usize::from(u.arbitrary::<bool>()?);
                let len = u.int_in_range(0..=2048u32)?;
                self.post_recv(x, q, len);
            }
            10 => self.poll(),
            _ => {
                let q = usize::from(u.arbitrary::<bool>()?);
                let what = u.arbitrary()?;
                self.modify(x, q, what);
            }
        }
        // Keep CQs far from their depth (an overflow must never happen).
        if self.p.e[A].cq_len(self.p.cq[A]) > 512 || self.p.e[B].cq_len(self.p.cq[B]) > 512 {
            self.poll();
        }
        Ok(())
    }

    /// The network turns clean: deliver everything, run timers; every send
    /// WR must complete within bounds.
    fn settle(&mut self) {
        for x in 0..2 {
            for q in 0..2 {
                self.resume(x, q);
            }
        }
        let mut packets = 0usize;
        let mut timer_runs = 0usize;
        loop {
            let mut moved = false;
            for x in 0..2 {
                loop {
                    let n = self.wire[x].len();
                    if n > 0 {
                        self.deliver(x, n, 0);
                        moved = true;
                    }
                    let sent = self.transmit(x, 64);
                    packets += sent;
                    if sent == 0 && self.wire[x].is_empty() {
                        break;
                    }
                    assert!(
                        packets < 50_000,
                        "packet storm after the input ended: {:?} / {:?}",
                        self.p.e[0].counters(),
                        self.p.e[1].counters()
                    );
                }
            }
            self.poll();
            let pending: usize = self.s.iter().map(|s| s.sq[RC].len() + s.sq[UD].len()).sum();
            if pending == 0 {
                return;
            }
            if moved {
                continue;
            }
            let next = self.p.e.iter().filter_map(|e| e.poll_timeout()).min();
            let Some(t) = next else {
                panic!(
                    "hung: {pending} send WRs outstanding, nothing to send, no timer armed; \
                     A sq {:?} state {:?} / B sq {:?} state {:?}\nA {:?}\nB {:?}",
                    self.s[A].sq[RC],
                    self.p.e[A].query_qp(self.s[A].qpn[RC]).map(|a| (a.qp_state, a.sq_psn)),
                    self.s[B].sq[RC],
                    self.p.e[B].query_qp(self.s[B].qpn[RC]).map(|a| (a.qp_state, a.sq_psn)),
                    self.p.e[A].counters(),
                    self.p.e[B].counters(),
                );
            };
            timer_runs += 1;
            assert!(timer_runs < 2_000, "send WRs still outstanding after 2000 timer runs: {pending}");
            self.p.now = self.p.now.max(t);
            for e in &mut self.p.e {
                e.handle_timeout(self.p.now);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut w = World::new();
    let mut u = Unstructured::new(data);
    for _ in 0..MAX_OPS {
        if u.is_empty() || w.step(&mut u).is_err() {
            break;
        }
    }
    w.poll();
    w.settle();
    let _ = (w.s[B].mr_all.buf_len, w.s[B].mr_inv.buf_len);
});
