//! A steady-state message stream over a `roce_proto::testkit::Pair` (two
//! engines joined in memory), shared by the `engine` benchmark and the
//! `no_alloc` test.
//!
//! Engine A has one RC QP connected to one on engine B. A keeps `depth` send
//! WRs outstanding: RDMA WRITEs of `len` bytes into one region of B, or SENDs
//! of `len` bytes that B receives into posted receive WRs (B keeps `depth`
//! receives posted). Each `round` moves up to `batch` packets A -> B, then
//! every packet B has (ACKs, coalesced by B's responder) back to A, as a
//! driver with batched socket I/O would, runs due timers, reaps A's send
//! completions and B's receive completions and reposts as many WRs. Every WR
//! is signalled and all of them use the same 64 KiB-aligned source and
//! destination bytes, so the working set is two `len`-byte buffers.
//!
//! Time is virtual by default (100 ns per round); [`Stream::with_config`]
//! can run it on the wall clock instead, as a driver does, for engines
//! whose pacing must see real time pass.
//!
//! WRs come either freshly built (a `Vec<Sge>` per WR, as an application
//! would) or from a pool filled beforehand (`fill_pools`), so that allocation
//! counts can tell the engine's allocations from the caller's.
#![allow(dead_code)]

use std::sync::Arc;

use roce_proto::testkit::{self, Pair, Region, A, B};
use roce_proto::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Write,
    Send,
    /// SEND with `IBV_SEND_INLINE` (the engine copies the data at post time).
    SendInline,
}

pub struct Stream {
    pub p: Pair,
    pub qpn: [u32; 2],
    pub kind: Kind,
    pub len: u32,
    pub depth: usize,
    pub batch: usize,
    src: Region,
    dst: Region,
    wcs: Vec<Wc>,
    /// Send WRs posted and not yet completed.
    pub outstanding: usize,
    /// Receive WRs posted on B and not yet completed.
    pub recv_posted: usize,
    /// Send WRs completed (successfully: anything else panics).
    pub completed: u64,
    /// Send and receive WRs posted.
    pub posted_sends: u64,
    pub posted_recvs: u64,
    next_wr_id: u64,
    send_pool: Vec<SendWr>,
    recv_pool: Vec<RecvWr>,
    pub use_pools: bool,
    /// Wall-clock time: the engines' `now` is the pair's start plus the
    /// real time since this instant.
    wall: Option<(std::time::Instant, Instant)>,
}

impl Stream {
    pub fn new(kind: Kind, len: u32, mtu: PathMtu, depth: usize, batch: usize) -> Stream {
        Stream::with_config(kind, len, mtu, depth, batch, |_| {}, false)
    }

    /// Both engines' default configurations changed by `configure`; on the
    /// wall clock when `wall_clock`.
    pub fn with_config(
        kind: Kind,
        len: u32,
        mtu: PathMtu,
        depth: usize,
        batch: usize,
        configure: impl Fn(&mut EngineConfig),
        wall_clock: bool,
    ) -> Stream {
        let cfg = [A, B].map(|side| {
            let mut c = EngineConfig::new(vec![testkit::ip(side)]);
            configure(&mut c);
            c
        });
        let mut p = Pair::with_configs(cfg, [1, 2]);
        let cap = QpCap {
            max_send_wr: depth.max(1) as u32,
            max_recv_wr: depth.max(1) as u32,
            max_inline_data: 512,
            ..QpCap::default()
        };
        // ACK timeout 14 (~67 ms): the stream never waits for it.
        let conn = p.connect_with(QpType::Rc, |a| a.cap = cap, mtu, [7, 1007], |_, c| c.timeout = 14);
        let p_now = p.now;
        let src = p.region(A, len as usize, 0x1000_0000, Access::ALL);
        let dst = p.region(B, len as usize, 0x2000_0000, Access::ALL);
        let pattern: Vec<u8> =
            (0..len as usize).map(|i| (i as u8).wrapping_mul(13).wrapping_add(1)).collect();
        p.put(&src, 0, &pattern);
        Stream {
            p,
            qpn: conn.qpn,
            kind,
            len,
            depth,
            batch,
            src,
            dst,
            wcs: vec![Wc::EMPTY; 256],
            outstanding: 0,
            recv_posted: 0,
            completed: 0,
            posted_sends: 0,
            posted_recvs: 0,
            next_wr_id: 1,
            send_pool: Vec::new(),
            recv_pool: Vec::new(),
            use_pools: false,
            wall: wall_clock.then(|| (std::time::Instant::now(), p_now)),
        }
    }

    pub fn source(&self) -> &Arc<MemBuf> {
        &self.src.buf
    }

    pub fn dest(&self) -> &Arc<MemBuf> {
        &self.dst.buf
    }

    fn make_send(&mut self) -> SendWr {
        let id = self.next_wr_id;
        self.next_wr_id += 1;
        let sge = Sge { addr: self.src.keys.addr, length: self.len, lkey: self.src.keys.lkey };
        let op = match self.kind {
            Kind::Write => SendOp::Write { remote_addr: self.dst.keys.addr, rkey: self.dst.keys.rkey },
            Kind::Send | Kind::SendInline => SendOp::Send,
        };
        let mut wr = SendWr::new(id, op, vec![sge]);
        wr.inline = self.kind == Kind::SendInline;
        wr
    }

    fn make_recv(&mut self) -> RecvWr {
        let id = self.next_wr_id;
        self.next_wr_id += 1;
        RecvWr {
            wr_id: id,
            sg_list: vec![Sge { addr: self.dst.keys.addr, length: self.len, lkey: self.dst.keys.lkey }],
        }
    }

    fn is_send(&self) -> bool {
        matches!(self.kind, Kind::Send | Kind::SendInline)
    }

    /// Builds `sends` send WRs and `recvs` receive WRs now (allocating), to be
    /// posted later without allocating; turns pool use on.
    pub fn fill_pools(&mut self, sends: usize, recvs: usize) {
        self.send_pool = (0..sends).map(|_| self.make_send()).collect();
        self.recv_pool = (0..recvs).map(|_| self.make_recv()).collect();
        self.use_pools = true;
    }

    fn post(&mut self) {
        while self.is_send() && self.recv_posted < self.depth {
            let wr = if self.use_pools {
                self.recv_pool.pop().expect("recv pool empty")
            } else {
                self.make_recv()
            };
            self.p.e[1].post_recv(self.qpn[1], wr).unwrap();
            self.recv_posted += 1;
            self.posted_recvs += 1;
        }
        while self.outstanding < self.depth {
            let wr = if self.use_pools {
                self.send_pool.pop().expect("send pool empty")
            } else {
                self.make_send()
            };
            self.p.e[0].post_send(self.qpn[0], wr).unwrap();
            self.outstanding += 1;
            self.posted_sends += 1;
        }
    }

    /// One round: post, move packets both ways, run timers, reap.
    pub fn round(&mut self) {
        self.post();
        self.p.exchange(self.batch);
        self.p.now = match self.wall {
            Some((t0, at)) => at + Duration::from_nanos(t0.elapsed().as_nanos() as u64),
            None => self.p.now + Duration::from_nanos(100),
        };
        // Reap.
        loop {
            let n = self.p.e[0].poll_cq(self.p.cq[0], &mut self.wcs).unwrap();
            for wc in &self.wcs[..n] {
                assert_eq!(wc.status, WcStatus::Success, "send completion {wc:?}");
                assert_eq!(wc.byte_len, self.len);
            }
            self.outstanding -= n;
            self.completed += n as u64;
            if self.is_send() {
                let m = self.p.e[1].poll_cq(self.p.cq[1], &mut self.wcs).unwrap();
                for wc in &self.wcs[..m] {
                    assert_eq!(wc.status, WcStatus::Success, "receive completion {wc:?}");
                    assert_eq!(wc.byte_len, self.len);
                }
                self.recv_posted -= m;
            }
            if n < self.wcs.len() {
                break;
            }
        }
    }

    /// Runs rounds until `n` more send WRs have completed.
    pub fn run_messages(&mut self, n: u64) {
        let goal = self.completed + n;
        let mut idle = 0;
        while self.completed < goal {
            let before = (self.completed, self.packets());
            self.round();
            if (self.completed, self.packets()) == before {
                idle += 1;
                assert!(idle < 1000, "stream stalled: {:?}", self.p.e[0].counters());
            } else {
                idle = 0;
            }
        }
    }

    /// Packets sent by both engines so far (data and ACKs).
    pub fn packets(&self) -> u64 {
        self.p.e[0].counters().sent_pkts + self.p.e[1].counters().sent_pkts
    }

    /// Packets sent by A (the data direction).
    pub fn data_packets(&self) -> u64 {
        self.p.e[0].counters().sent_pkts
    }

    /// Checks the destination holds the source's bytes.
    pub fn check_data(&mut self) {
        let src = self.p.mem(&self.src);
        let dst = self.p.mem(&self.dst);
        assert_eq!(src, dst);
    }
}
