//! Two engines joined in memory: the harness of the directed tests, the
//! benchmarks, the fuzz target and the Soft-RoCE replay.
//!
//! A [`Pair`] holds engine `A` (10.0.0.1) and engine `B` (10.0.0.2), each
//! with one PD and one CQ, and moves the datagrams one engine transmits
//! to the other as a driver would, without sockets: [`Pair::run_with`]
//! until both are quiet (advancing the clock to the next timer when the
//! wire is idle, a filter deciding each packet's fate), or
//! [`Pair::exchange`] for one round of a steady stream. QPs are brought
//! up the way applications do it, through [`Engine::connect_qp`] and
//! [`Engine::ready_ud`]. Everything is deterministic: the engines' seeds
//! and the calls made decide every byte.
//!
//! The fault-injection harness (`roce-harness`) moves packets over modelled links instead;
//! its scenarios take their QP attributes from [`Pair::connect_attr`]'s
//! defaults through the same `connect_qp`.

use core::net::{IpAddr, Ipv4Addr};

use roce_wire::Psn;
use std::sync::Arc;

use crate::connect::ConnectAttr;
use crate::engine::{DatagramMeta, Engine, EngineConfig, MAX_DATAGRAM};
use crate::mem::MemBuf;
use crate::time::Instant;
use crate::verbs::{
    Access, AddressVector, CqId, MrKeys, MrSpec, PathMtu, PdId, QpCap, QpInitAttr, QpType, Sge, VerbsError,
    Wc,
};

/// Index of the first engine of a [`Pair`].
pub const A: usize = 0;
/// Index of the second engine of a [`Pair`].
pub const B: usize = 1;

/// Depth of each engine's CQ.
pub const CQ_DEPTH: usize = 4096;

/// The address of engine `side`.
pub fn ip(side: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1 + side as u8))
}

/// A registered memory region of one engine of a pair.
pub struct Region {
    /// The engine it is registered with (`A` or `B`).
    pub side: usize,
    pub buf: Arc<MemBuf>,
    pub keys: MrKeys,
}

/// A scatter/gather element of `len` bytes at `off` of region `r`.
pub fn sge(r: &Region, off: u64, len: u32) -> Sge {
    Sge { addr: r.keys.addr + off, length: len, lkey: r.keys.lkey }
}

/// A connected QP pair: `qpn[A]` on engine A, `qpn[B]` on engine B.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    pub qpn: [u32; 2],
}

/// Two engines and the in-memory wire between them.
pub struct Pair {
    pub e: [Engine; 2],
    pub now: Instant,
    pub ip: [IpAddr; 2],
    pub pd: [PdId; 2],
    pub cq: [CqId; 2],
    /// Packets [`run_with`](Pair::run_with) moved so far: (sender, bytes).
    pub trace: Vec<(usize, Vec<u8>)>,
    buf: Vec<u8>,
}

impl Pair {
    /// Engines seeded `seed` and `seed + 1`, default configuration.
    pub fn new(seed: u64) -> Pair {
        Pair::with_seeds([seed, seed + 1])
    }

    /// Engines with the given seeds, default configuration.
    pub fn with_seeds(seeds: [u64; 2]) -> Pair {
        Pair::with_configs([EngineConfig::new(vec![ip(A)]), EngineConfig::new(vec![ip(B)])], seeds)
    }

    /// Engines with the given configurations (their first GIDs are the
    /// pair's addresses) and seeds.
    pub fn with_configs(cfg: [EngineConfig; 2], seeds: [u64; 2]) -> Pair {
        let ip = [cfg[0].gids[0], cfg[1].gids[0]];
        let [c0, c1] = cfg;
        let mut e = [Engine::new(c0, seeds[0]), Engine::new(c1, seeds[1])];
        let pd = [e[0].alloc_pd(), e[1].alloc_pd()];
        let cq = [
            e[0].create_cq(CQ_DEPTH).expect("a CQ of the default depth"),
            e[1].create_cq(CQ_DEPTH).expect("a CQ of the default depth"),
        ];
        Pair { e, now: Instant::ZERO, ip, pd, cq, trace: Vec::new(), buf: vec![0; MAX_DATAGRAM] }
    }

    /// Registers a new zeroed buffer of `len` bytes on `side` at I/O
    /// virtual address `iova`.
    pub fn region(&mut self, side: usize, len: usize, iova: u64, access: Access) -> Region {
        self.try_region(side, MemBuf::new(len), iova, access).expect("registration of a fresh buffer")
    }

    /// Registers all of `buf` on `side` at `iova`.
    pub fn try_region(
        &mut self,
        side: usize,
        buf: Arc<MemBuf>,
        iova: u64,
        access: Access,
    ) -> Result<Region, VerbsError> {
        let length = buf.len();
        let spec = MrSpec { buf: buf.clone(), offset: 0, length, iova: Some(iova), access };
        let keys = self.e[side].reg_mr(self.pd[side], spec)?;
        Ok(Region { side, buf, keys })
    }

    /// Writes `data` at `off` of a region, through its engine.
    pub fn put(&mut self, r: &Region, off: usize, data: &[u8]) {
        self.e[r.side].mr_write(r.keys.lkey, off, data).expect("bytes inside the region");
    }

    /// Bytes `[off, off + len)` of a region, through its engine.
    pub fn get(&mut self, r: &Region, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.e[r.side].mr_read(r.keys.lkey, off, &mut v).expect("bytes inside the region");
        v
    }

    /// All of a region.
    pub fn mem(&mut self, r: &Region) -> Vec<u8> {
        self.get(r, 0, r.keys.length as usize)
    }

    /// The 64-bit word at `off` of a region, in host order (as atomics
    /// leave it).
    pub fn word(&mut self, r: &Region, off: usize) -> u64 {
        let b = self.get(r, off, 8);
        u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }

    /// The attributes of a QP of type `t` on `side`: the side's PD and CQ
    /// for both queues, default capabilities, selective signalling.
    pub fn qp_init(&self, side: usize, t: QpType) -> QpInitAttr {
        QpInitAttr {
            qp_type: t,
            pd: self.pd[side],
            send_cq: self.cq[side],
            recv_cq: self.cq[side],
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }

    /// What `side`'s QP `qpn[side]` needs to reach RTS towards
    /// `qpn[1 - side]`: path MTU `mtu`, first PSNs `psn[A]` and `psn[B]`,
    /// 4 outstanding READs/atomics each way, RNR timer 1 (0.01 ms) and
    /// ACK timeout 10 (~4 ms) so that tests reach their timers quickly;
    /// otherwise [`ConnectAttr::new`]'s defaults.
    pub fn connect_attr(&self, side: usize, qpn: [u32; 2], mtu: PathMtu, psn: [u32; 2]) -> ConnectAttr {
        let o = 1 - side;
        ConnectAttr {
            mtu,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            timeout: 10,
            max_rd_atomic: 4,
            ..ConnectAttr::new(AddressVector::new(self.ip[o]), qpn[o], Psn::new(psn[o]), Psn::new(psn[side]))
        }
    }

    /// Connects the existing QPs `qpn[A]` and `qpn[B]` (RC or UC, in
    /// RESET) through [`Engine::connect_qp`], `tune` adjusting each side's
    /// [`connect_attr`](Pair::connect_attr).
    pub fn connect_qps(
        &mut self,
        qpn: [u32; 2],
        mtu: PathMtu,
        psn: [u32; 2],
        tune: impl Fn(usize, &mut ConnectAttr),
    ) -> Result<Conn, VerbsError> {
        for s in [A, B] {
            let mut c = self.connect_attr(s, qpn, mtu, psn);
            tune(s, &mut c);
            self.e[s].connect_qp(qpn[s], &c)?;
        }
        Ok(Conn { qpn })
    }

    /// Creates an RC QP on each side ([`qp_init`](Pair::qp_init)) and
    /// connects them, `tune` adjusting both sides' attributes.
    pub fn connect(&mut self, mtu: PathMtu, psn: [u32; 2], tune: impl Fn(&mut ConnectAttr)) -> Conn {
        self.connect_with(QpType::Rc, |_| {}, mtu, psn, |_, c| tune(c))
    }

    /// Creates a QP of type `t` (RC or UC) on each side, `init` adjusting
    /// its creation attributes, and connects them.
    pub fn connect_with(
        &mut self,
        t: QpType,
        init: impl Fn(&mut QpInitAttr),
        mtu: PathMtu,
        psn: [u32; 2],
        tune: impl Fn(usize, &mut ConnectAttr),
    ) -> Conn {
        let qpn = [A, B].map(|s| {
            let mut a = self.qp_init(s, t);
            init(&mut a);
            self.e[s].create_qp(a).expect("QP creation")
        });
        self.connect_qps(qpn, mtu, psn, tune).expect("QP connection")
    }

    /// Creates a UD QP on `side` and makes it ready with `qkey`, sending
    /// from `sq_psn`.
    pub fn ud_qp(&mut self, side: usize, init: impl Fn(&mut QpInitAttr), qkey: u32, sq_psn: u32) -> u32 {
        let mut a = self.qp_init(side, QpType::Ud);
        init(&mut a);
        let qpn = self.e[side].create_qp(a).expect("UD QP creation");
        self.e[side].ready_ud(qpn, qkey, Psn::new(sq_psn)).expect("UD QP ready");
        qpn
    }

    /// Moves packets until both engines are quiet, letting `filter` decide
    /// (by sender and bytes) whether each packet is delivered; every packet
    /// joins [`trace`](Pair::trace). Advances time to fire timers when the
    /// wire is idle. Stops after `max_steps` packets or when nothing is
    /// left to do.
    pub fn run_with(&mut self, mut filter: impl FnMut(usize, &[u8]) -> bool, max_steps: usize) {
        self.run_timed(|_, s, b| filter(s, b), max_steps);
    }

    /// Like [`run_with`](Pair::run_with), the filter also seeing the clock
    /// (a model of a receive buffer drains as time passes).
    pub fn run_timed(&mut self, mut filter: impl FnMut(Instant, usize, &[u8]) -> bool, max_steps: usize) {
        let mut steps = 0;
        loop {
            let mut moved = false;
            for s in [A, B] {
                while let Some(tx) = self.e[s].poll_transmit(self.now, &mut self.buf) {
                    let bytes = self.buf[..tx.len].to_vec();
                    steps += 1;
                    moved = true;
                    if filter(self.now, s, &bytes) {
                        self.e[1 - s].handle_datagram(self.now, &tx.meta, &bytes);
                    }
                    self.trace.push((s, bytes));
                    if steps >= max_steps {
                        return;
                    }
                }
            }
            if !moved && !self.advance() {
                return;
            }
        }
    }

    /// Delivers everything, fires every timer, until both engines are quiet.
    pub fn run(&mut self) {
        self.run_with(|_, _| true, 1_000_000);
    }

    /// Moves the clock to the earlier engine's next timer and fires due
    /// timers on both; false when neither has a timer.
    pub fn advance(&mut self) -> bool {
        let next = [self.e[A].poll_timeout(), self.e[B].poll_timeout()].into_iter().flatten().min();
        match next {
            Some(t) => {
                self.now = self.now.max(t);
                self.e[A].handle_timeout(self.now);
                self.e[B].handle_timeout(self.now);
                true
            }
            None => false,
        }
    }

    /// One round of a steady stream from A to B, as a driver with batched
    /// socket I/O would run it: up to `batch` packets A -> B, then every
    /// packet B has (its ACKs and responses) back to A, then the timers
    /// due now on both sides. Records nothing and allocates nothing.
    /// Returns the number of packets moved.
    pub fn exchange(&mut self, batch: usize) -> usize {
        let now = self.now;
        let [a, b] = &mut self.e;
        let mut moved = 0;
        for _ in 0..batch {
            let Some(tx) = a.poll_transmit(now, &mut self.buf) else { break };
            b.handle_datagram(now, &tx.meta, &self.buf[..tx.len]);
            moved += 1;
        }
        while let Some(tx) = b.poll_transmit(now, &mut self.buf) {
            a.handle_datagram(now, &tx.meta, &self.buf[..tx.len]);
            moved += 1;
        }
        for e in [&mut *a, &mut *b] {
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
        }
        moved
    }

    /// Every datagram `side` has to send now, with where it goes, taken
    /// out of the engine and not delivered (for tests that craft, reorder
    /// or mark packets themselves).
    pub fn take(&mut self, side: usize) -> Vec<(DatagramMeta, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(tx) = self.e[side].poll_transmit(self.now, &mut self.buf) {
            out.push((tx.meta, self.buf[..tx.len].to_vec()));
        }
        out
    }

    /// Hands `bytes` to engine `to` as if it arrived with `meta`.
    pub fn deliver(&mut self, to: usize, meta: &DatagramMeta, bytes: &[u8]) {
        self.e[to].handle_datagram(self.now, meta, bytes);
    }

    /// Every completion waiting on `side`'s CQ (up to 256 at a time).
    pub fn poll(&mut self, side: usize) -> Vec<Wc> {
        let mut out = vec![Wc::EMPTY; 256];
        let n = self.e[side].poll_cq(self.cq[side], &mut out).expect("the pair's CQ");
        out.truncate(n);
        out
    }
}
