//! Hand-built scenarios for directed tests: two hosts joined by ideal links,
//! one connected RC QP pair, one registered buffer per side (every access
//! right, filled with a per-side pattern). Faults are added as
//! [`crate::net::Rule`]s, so a test can drop or delay exactly the packet it
//! is about.

use std::sync::Arc;

use roce_proto::testkit::{Pair, A, B};
use roce_proto::{Access, CqId, Duration, Engine, MemBuf, MrKeys, PathMtu, QpCap, QpType, Wc};

use crate::net::{App, HostId, Limits, LinkParams, Network, RunEnd, TraceMode};
use crate::rng::SimRng;

/// Settings of an [`RcPair`].
#[derive(Debug, Clone, Copy)]
pub struct PairOptions {
    pub mtu: PathMtu,
    /// Initial send PSN of side A and of side B.
    pub psn: [u32; 2],
    /// One-way delay of both links.
    pub delay: Duration,
    pub mem_len: usize,
    /// ACK timeout code.
    pub timeout: u8,
    pub min_rnr_timer: u8,
    /// Initiator depth and responder resources of both QPs.
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
}

impl Default for PairOptions {
    fn default() -> Self {
        PairOptions {
            mtu: PathMtu::Mtu1024,
            psn: [0x100, 0x200],
            delay: Duration::from_micros(10),
            mem_len: 64 * 1024,
            timeout: 10,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
        }
    }
}

/// One side of the pair.
pub struct Side {
    pub host: HostId,
    pub qpn: u32,
    pub cq: CqId,
    pub mem: Arc<MemBuf>,
    /// The whole buffer, registered with iova 0x1000_0000 + side * 0x100_0000.
    pub mr: MrKeys,
}

/// Two hosts with a connected RC QP pair.
pub struct RcPair {
    pub net: Network,
    pub sides: [Side; 2],
}

struct Quiet;

impl App for Quiet {
    fn on_step(&mut self, _: &mut Network, _: &[u64]) {}
}

impl RcPair {
    /// The two engines, their memory and their QPs come from
    /// `roce_proto::testkit::Pair` (the in-memory harness of the engine's
    /// own tests, QPs connected through `connect_qp`); the engines are then
    /// handed to the simulated network, which carries their packets.
    pub fn new(o: &PairOptions) -> RcPair {
        let mut p = Pair::with_seeds([1, 2]);
        let regions = [A, B].map(|i| {
            let r = p.region(i, o.mem_len, 0x1000_0000 + i as u64 * 0x100_0000, Access::ALL);
            let pattern: Vec<u8> =
                (0..o.mem_len).map(|k| (k as u8).wrapping_mul(7).wrapping_add(i as u8 * 101)).collect();
            p.put(&r, 0, &pattern);
            r
        });
        let cap = QpCap { max_send_wr: 256, max_recv_wr: 256, ..QpCap::default() };
        let conn = p.connect_with(
            QpType::Rc,
            |a| a.cap = cap,
            o.mtu,
            o.psn,
            |_, c| {
                c.access = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
                c.max_dest_rd_atomic = o.max_dest_rd_atomic;
                c.min_rnr_timer = o.min_rnr_timer;
                c.timeout = o.timeout;
                c.max_rd_atomic = o.max_rd_atomic;
            },
        );
        let (cq, [ea, eb]) = (p.cq, p.e);
        let mut net = Network::new(SimRng::new(0), LinkParams::ideal(o.delay), TraceMode::Full);
        let hosts = [net.add_host(ea), net.add_host(eb)];
        let [a, b] = regions.map(|r| {
            let i = r.side;
            Side { host: hosts[i], qpn: conn.qpn[i], cq: cq[i], mem: r.buf, mr: r.keys }
        });
        RcPair { net, sides: [a, b] }
    }

    pub fn engine(&mut self, side: usize) -> &mut Engine {
        let h = self.sides[side].host;
        self.net.engine_mut(h)
    }

    /// Runs the network for at most `d` more simulated time.
    pub fn run_for(&mut self, d: Duration) -> RunEnd {
        let limits = Limits { until: self.net.now() + d, max_events: u64::MAX };
        self.net.run(&mut Quiet, limits)
    }

    /// Every completion waiting on a side's CQ.
    pub fn poll(&mut self, side: usize) -> Vec<Wc> {
        let cq = self.sides[side].cq;
        let mut buf = [crate::application::blank_wc(); 64];
        let mut out = Vec::new();
        loop {
            let n = self.engine(side).poll_cq(cq, &mut buf).expect("CQ ok");
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    /// The packet trace so far, one line per copy (for failing tests).
    pub fn trace_text(&self) -> String {
        self.net.trace().records().iter().map(crate::net::trace::describe).collect::<Vec<_>>().join("\n")
    }
}
