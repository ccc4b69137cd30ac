//! The generator: hosts, links, QPs and receive queues from the seed. The
//! send WRs of each stream come from [`stream`].
//!
//! Rules the plans obey so that the shadow model can predict every byte:
//! * each RC stream writes only its own window of the peer's target region
//!   (overlaps inside a stream are fine: the responder executes in PSN order);
//! * READs read the peer's constant source region and land in fresh local
//!   ranges; atomics return into fresh 8-byte local ranges;
//! * CMP_SWAP/FETCH_ADD words belong to one stream, except shared counters,
//!   which only see FETCH_ADDs of distinct amounts;
//! * a region is remotely invalidated once, by the stream that may have
//!   written it before, and nobody uses its R_Key afterwards (except an
//!   `InvalidatedRkey` probe's WRITE, which must fail);
//! * every SEND has a receive WR big enough for it (except a `RecvTooSmall`
//!   probe's), posted at some time; RNR storms post them late, in bursts
//!   (see `recv`);
//! * a probe's QP pair carries one stream that ends in one remote error.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use roce_proto::{Duration, Instant, PathMtu, QpCap, QpType};

use super::memory;
use super::params::{Params, US};
use super::plan::*;
use crate::net::{HostId, LinkParams};
use crate::rng::SimRng;
use stream::StreamGen;

mod stream;
/// Bytes of the GRH in front of a UD receive.
pub const GRH_LEN: u32 = 40;

/// Builds the plan for one run.
pub fn generate(rng: &mut SimRng, p: &Params) -> Plan {
    let mut g = Gen {
        rng,
        p,
        plan: Plan {
            hosts: Vec::new(),
            links: Vec::new(),
            qps: Vec::new(),
            streams: Vec::new(),
            recvs: Vec::new(),
            counters: Vec::new(),
            mix: Default::default(),
        },
        next_wr: 1,
        next_ud_id: 1,
        srq_demand: BTreeMap::new(),
        init_writes: Vec::new(),
        counter_adds: Vec::new(),
        host_counters: Vec::new(),
        timeout_min: 1,
        timeout_tight: 1,
    };
    g.hosts();
    g.links();
    for _ in 0..g.rng.usize(p.rc_pairs.0, p.rc_pairs.1) {
        g.rc_pair(false);
    }
    if p.probe && g.rng.chance(0.3) {
        g.rc_pair(true);
    }
    if p.ud_msgs > 0 {
        g.ud();
    }
    g.srq_recvs();
    g.finish()
}

/// Receive demand of one SRQ.
#[derive(Default)]
pub(super) struct SrqDemand {
    /// Data lengths of the messages that consume its receive WRs.
    pub msgs: Vec<u32>,
    /// When its first sender starts.
    pub start: Option<Instant>,
    /// The shortest RNR timer of its QPs.
    pub rnr: u64,
}

pub(super) struct Gen<'a> {
    pub rng: &'a mut SimRng,
    pub p: &'a Params,
    pub plan: Plan,
    next_wr: u64,
    pub next_ud_id: u32,
    pub srq_demand: BTreeMap<(HostId, usize), SrqDemand>,
    /// Initial-image writes (region, offset, bytes) applied after layout.
    pub init_writes: Vec<(MrRef, u64, Vec<u8>)>,
    /// Amounts already added to each shared counter (kept distinct).
    pub counter_adds: Vec<BTreeSet<u64>>,
    /// Shared counters living on each host.
    pub host_counters: Vec<Vec<usize>>,
    /// Smallest ACK timeout code safe for the links' round trips.
    timeout_min: u8,
    /// A timeout code just above the worst round trip without queueing:
    /// spurious retransmissions when packets are reordered or queued.
    timeout_tight: u8,
}

impl Gen<'_> {
    pub fn wr_id(&mut self) -> u64 {
        self.next_wr += 1;
        self.next_wr
    }

    fn hosts(&mut self) {
        let n = self.rng.usize(self.p.hosts.0.max(2), self.p.hosts.1.max(2));
        let mut fams: Vec<(bool, bool)> = (0..n)
            .map(|_| match (self.p.ipv6, self.rng.below(4)) {
                (false, _) => (true, false),
                (true, 0 | 1) => (true, true),
                (true, 2) => (true, false),
                _ => (false, true),
            })
            .collect();
        let compatible = |f: &[(bool, bool)]| {
            (0..n).any(|a| (0..n).any(|b| a != b && ((f[a].0 && f[b].0) || (f[a].1 && f[b].1))))
        };
        if !compatible(&fams) {
            fams.iter_mut().for_each(|f| *f = (true, true));
        }
        let src_len = (self.p.max_msg_mtus.max(1) as usize) * 4096 + 256;
        for (h, &(v4, v6)) in fams.iter().enumerate() {
            let mut gids = Vec::new();
            if v4 {
                gids.push(IpAddr::V4(Ipv4Addr::new(10, 77, (h >> 8) as u8, (h & 0xff) as u8 + 1)));
            }
            if v6 {
                gids.push(IpAddr::V6(Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, h as u16 + 1)));
            }
            let device = DeviceTweaks {
                ack_req_every: *self.rng.pick(&[1, 4, 16, 64]),
                max_unacked_psns: *self.rng.pick(&[8, 32, 256]),
                ecn: self.rng.chance(0.5),
            };
            let srqs = if self.p.srq && self.rng.chance(0.5) { vec![(1, 4)] } else { Vec::new() };
            self.plan.hosts.push(HostPlan {
                gids,
                engine_seed: self.rng.u64(),
                device,
                mrs: memory::standard_mrs(src_len),
                mem_len: 0,
                init: Vec::new(),
                cqs: self.rng.usize(1, 3),
                srqs,
            });
            self.host_counters.push(Vec::new());
        }
    }

    fn links(&mut self) {
        let n = self.plan.hosts.len();
        let f = self.p.faults;
        let clean = self.rng.chance(f.clean_runs);
        let mut worst = Duration::ZERO;
        let mut rated = false;
        for a in 0..n {
            for b in 0..n {
                if a == b {
                    continue;
                }
                let r = &mut *self.rng;
                let mut l = LinkParams::ideal(Duration(r.range(US, 20 * US)));
                l.jitter = Duration(r.range(0, 2 * US));
                l.reorder_delay = Duration(r.range(US, 50 * US));
                l.rate_bps = match r.below(2) {
                    0 => None,
                    _ => Some(*r.pick(&[10, 25, 40, 100]) * 1_000_000_000),
                };
                if !clean {
                    l.loss = r.upto(f.max_loss);
                    l.reorder = r.upto(f.max_reorder);
                    l.duplicate = r.upto(f.max_duplicate);
                    l.corrupt = r.upto(f.max_corrupt);
                }
                worst = worst.max(l.max_one_way());
                rated |= l.rate_bps.is_some();
                self.plan.links.push(((a, b), l));
            }
        }
        // The ACK timeout must cover a round trip with reordering delays and
        // the serialisation of a full send window.
        self.timeout_min = safe_timeout(worst, if rated { 1_000 * US } else { 0 });
        let tight = 2 * worst.0 + 20 * US;
        self.timeout_tight = if rated { self.timeout_min } else { timeout_code(tight) };
    }

    /// Two distinct hosts sharing an address family, and that family's
    /// addresses on each.
    fn host_pair(&mut self) -> (HostId, HostId, IpAddr, IpAddr) {
        let n = self.plan.hosts.len();
        loop {
            let a = self.rng.usize(0, n - 1);
            let b = self.rng.usize(0, n - 1);
            if a == b {
                continue;
            }
            let common: Vec<(IpAddr, IpAddr)> = self.plan.hosts[a]
                .gids
                .iter()
                .flat_map(|&ga| self.plan.hosts[b].gids.iter().map(move |&gb| (ga, gb)))
                .filter(|(ga, gb)| ga.is_ipv4() == gb.is_ipv4())
                .collect();
            if !common.is_empty() {
                let (ga, gb) = *self.rng.pick(&common);
                return (a, b, ga, gb);
            }
        }
    }

    fn psn_pick(&mut self) -> PsnPick {
        match self.rng.below(4) {
            0 => PsnPick::Engine,
            1 => PsnPick::Fixed(0x00ff_ffff - self.rng.below(48) as u32),
            2 => PsnPick::Fixed(self.rng.u32() & 0x00ff_ffff),
            _ => PsnPick::Fixed(0),
        }
    }

    pub(super) fn cap(&mut self) -> QpCap {
        QpCap {
            max_send_wr: 1,
            max_recv_wr: 0,
            max_send_sge: self.rng.range(1, 4) as u32,
            max_recv_sge: self.rng.range(1, 4) as u32,
            max_inline_data: *self.rng.pick(&[0, 64, 256, 512]),
        }
    }

    fn rc_pair(&mut self, probe: bool) {
        let (a, b, ga, gb) = self.host_pair();
        let mtu = *self.rng.pick(&[
            PathMtu::Mtu256,
            PathMtu::Mtu512,
            PathMtu::Mtu1024,
            PathMtu::Mtu2048,
            PathMtu::Mtu4096,
        ]);
        let (qa, qb) = (self.plan.qps.len(), self.plan.qps.len() + 1);
        let dest = [self.rng.range(1, 16) as u8, self.rng.range(1, 16) as u8];
        for (i, (host, peer, dgid)) in [(a, qb, gb), (b, qa, ga)].into_iter().enumerate() {
            let conn = RcConn {
                peer,
                sgid_index: self.plan.hosts[host].gid_index_for(dgid).expect("common family"),
                dgid,
                mtu,
                sq_psn: self.psn_pick(),
                timeout: if self.p.tight_timeouts && self.rng.chance(0.25) {
                    self.timeout_tight
                } else {
                    self.timeout_min + self.rng.range(0, 2) as u8
                },
                retry_cnt: 7,
                rnr_retry: 7,
                min_rnr_timer: self.rng.range(1, 12) as u8,
                // The initiator depth never exceeds the peer's responder resources.
                max_rd_atomic: self.rng.range(1, u64::from(dest[1 - i])) as u8,
                max_dest_rd_atomic: dest[i],
                traffic_class: (self.rng.below(64) as u8) << 2,
                hop_limit: self.rng.range(1, 255) as u8,
                flow_label: self.rng.below(1 << 20) as u32,
            };
            let h = &self.plan.hosts[host];
            let cqs = h.cqs;
            let srq = (!probe && !h.srqs.is_empty() && self.rng.chance(0.5)).then_some(0);
            let qp = QpPlan {
                host,
                qp_type: QpType::Rc,
                send_cq: self.rng.usize(0, cqs - 1),
                recv_cq: self.rng.usize(0, cqs - 1),
                srq,
                cap: self.cap(),
                sq_sig_all: !probe && self.rng.chance(0.1),
                conn: Some(conn),
                qkey: 0,
            };
            self.plan.qps.push(qp);
        }
        let (lo, hi) = self.p.ops_per_stream;
        let mut counts = [self.rng.usize(lo, hi), self.rng.usize(lo, hi)];
        if probe {
            counts[1] = 0;
        } else if self.rng.chance(0.2) {
            counts[self.rng.usize(0, 1)] = 0;
        }
        for (dir, (req, resp, n)) in [(qa, qb, counts[0]), (qb, qa, counts[1])].into_iter().enumerate() {
            let stream = if probe {
                if dir == 1 {
                    continue;
                }
                StreamGen::new(self, req, resp).probe(self, n.min(3))
            } else {
                StreamGen::new(self, req, resp).normal(self, n)
            };
            if stream.ops.is_empty() {
                continue;
            }
            self.receives_for(&stream, resp, probe);
            self.plan.streams.push(stream);
        }
    }

    /// Lays out memory, writes initial values, sizes the queues.
    fn finish(mut self) -> Plan {
        for h in &mut self.plan.hosts {
            memory::layout(self.rng, h);
        }
        for (r, off, bytes) in std::mem::take(&mut self.init_writes) {
            let o = self.plan.mr(r).buf_off + off as usize;
            self.plan.hosts[r.host].init[o..o + bytes.len()].copy_from_slice(&bytes);
        }
        // Room for every WR, or (small queues) for 1 to 4; never small on a
        // probe's QPs, whose receive WRs must all be posted before the error.
        let probes: Vec<QpIdx> = (self.plan.streams.iter())
            .filter(|s| s.probe.is_some())
            .flat_map(|s| [s.qp, self.plan.qps[s.qp].conn.expect("RC").peer])
            .collect();
        let small = self.p.small_queues;
        for s in &self.plan.streams {
            let tiny = small && !probes.contains(&s.qp) && self.rng.chance(0.3);
            let n = if tiny { self.rng.range(1, 4) as u32 } else { s.ops.len() as u32 + 1 };
            self.plan.qps[s.qp].cap.max_send_wr = n;
        }
        for r in &self.plan.recvs {
            let tiny =
                small && !matches!(r.queue, RecvQueue::Qp(q) if probes.contains(&q)) && self.rng.chance(0.3);
            let n = if tiny { self.rng.range(1, 4) as u32 } else { r.wqes.len() as u32 + 1 };
            match r.queue {
                RecvQueue::Qp(q) => self.plan.qps[q].cap.max_recv_wr = n,
                RecvQueue::Srq { host, srq } => self.plan.hosts[host].srqs[srq].0 = n,
            }
        }
        self.plan
    }
}

/// Posting times of a stream: bursts of 1 to 6 WRs, up to 200 us apart,
/// starting in the first 300 us.
pub(super) struct Timing {
    t: u64,
    left: u64,
}

impl Timing {
    pub fn new(rng: &mut SimRng) -> Timing {
        Timing { t: rng.below(300 * US), left: 0 }
    }

    pub fn next(&mut self, rng: &mut SimRng) -> Instant {
        if self.left == 0 {
            self.left = rng.range(1, 6);
            self.t += rng.below(200 * US);
        }
        self.left -= 1;
        Instant(self.t)
    }
}

/// Splits `len` bytes into 1..=max_parts pieces (some may be empty); a
/// zero length gives no piece or one empty piece.
/// The smallest ACK timeout code whose timeout (4.096 us x 2^code, IBTA
/// vol. 1 §9.7.6.1.3) lasts `ns` at least.
pub(super) fn timeout_code(ns: u64) -> u8 {
    (1..=20u8).find(|&c| 4096u64 << c >= ns).unwrap_or(20)
}

/// The ACK timeout code safe for links whose worst one-way time (delay,
/// jitter, reordering delay) is `worst`: eight such round trips, plus
/// `serialise` ns for a full send window to leave the slowest link (0 on
/// links without a rate), plus 100 us.
pub(super) fn safe_timeout(worst: Duration, serialise: u64) -> u8 {
    timeout_code(8 * worst.0 + serialise + 100 * US)
}

pub(super) fn split(rng: &mut SimRng, len: u32, max_parts: u32) -> Vec<u32> {
    if len == 0 {
        return if rng.chance(0.5) { Vec::new() } else { vec![0] };
    }
    let k = rng.range(1, u64::from(max_parts.clamp(1, 4))) as usize;
    let mut cuts: Vec<u32> = (1..k).map(|_| rng.range(0, u64::from(len)) as u32).collect();
    cuts.push(0);
    cuts.push(len);
    cuts.sort_unstable();
    cuts.windows(2).map(|w| w[1] - w[0]).collect()
}
