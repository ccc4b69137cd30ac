//! UD traffic: a UD QP on most hosts, each sending a few datagrams (0 to
//! 4096 bytes) to UD QPs of other hosts of the same address family. A
//! message's id travels in its immediate data, or in its first 8 bytes.

use std::collections::BTreeMap;
use std::net::IpAddr;

use roce_proto::{Instant, QpType};

use super::gen::{split, Gen, Timing, GRH_LEN};
use super::memory::{alloc, UDOUT};
use super::params::US;
use super::plan::*;

/// Largest UD message (the engine's UD MTU).
const UD_MAX: u32 = 4096;

impl Gen<'_> {
    /// UD QPs on most hosts; each sends a few datagrams to others.
    pub(super) fn ud(&mut self) {
        let mut uds = Vec::new();
        for host in 0..self.plan.hosts.len() {
            if !self.rng.chance(0.75) {
                continue;
            }
            let cqs = self.plan.hosts[host].cqs;
            let mut cap = self.cap();
            cap.max_inline_data = cap.max_inline_data.min(256);
            uds.push(self.plan.qps.len());
            self.plan.qps.push(QpPlan {
                host,
                qp_type: QpType::Ud,
                send_cq: self.rng.usize(0, cqs - 1),
                recv_cq: self.rng.usize(0, cqs - 1),
                srq: None,
                cap,
                sq_sig_all: self.rng.chance(0.1),
                conn: None,
                qkey: self.rng.u32() & 0x7fff_ffff,
            });
        }
        let mut incoming: BTreeMap<QpIdx, Vec<u32>> = BTreeMap::new();
        for &u in &uds {
            let n = self.rng.usize(0, self.p.ud_msgs);
            let mut timing = Timing::new(self.rng);
            let mut ops = Vec::new();
            for _ in 0..n {
                let host = self.plan.qps[u].host;
                let targets: Vec<(QpIdx, IpAddr, IpAddr)> = uds
                    .iter()
                    .filter(|&&v| v != u)
                    .flat_map(|&v| {
                        let (hu, hv) = (&self.plan.hosts[host], &self.plan.hosts[self.plan.qps[v].host]);
                        hu.gids.iter().flat_map(move |&gu| {
                            hv.gids
                                .iter()
                                .filter(move |gv| gv.is_ipv4() == gu.is_ipv4())
                                .map(move |&gv| (v, gu, gv))
                        })
                    })
                    .collect();
                if targets.is_empty() {
                    break;
                }
                let (v, gu, gv) = *self.rng.pick(&targets);
                let at = timing.next(self.rng);
                let op = self.ud_send(u, v, gu, gv, at);
                incoming.entry(v).or_default().push(op.len);
                ops.push(op);
            }
            if !ops.is_empty() {
                self.plan.streams.push(Stream { qp: u, ops, probe: None });
            }
        }
        for &v in &uds {
            let lens = incoming.remove(&v).unwrap_or_default();
            let n = lens.len() + self.rng.usize(0, 2);
            if n == 0 {
                continue;
            }
            let cap = GRH_LEN + lens.iter().copied().max().unwrap_or(16);
            let late = self.rng.chance(0.2);
            let start = Instant(self.rng.below(500 * US));
            let times = self.recv_times(n, start, 50 * US, late);
            let (host, max_sge) = (self.plan.qps[v].host, self.plan.qps[v].cap.max_recv_sge);
            let wqes = times.into_iter().map(|t| self.recv_wqe(host, cap, max_sge, t)).collect();
            self.plan.recvs.push(RecvList { queue: RecvQueue::Qp(v), wqes });
        }
    }

    /// One UD SEND from `u` to `v`. Its id travels in the immediate data,
    /// or (without immediate) in the first 8 payload bytes.
    fn ud_send(&mut self, u: QpIdx, v: QpIdx, gu: IpAddr, gv: IpAddr, post_at: Instant) -> Op {
        let host = self.plan.qps[u].host;
        let cap = self.plan.qps[u].cap;
        let len = match self.rng.below(10) {
            0..=2 => self.rng.range(0, 16),
            3..=6 => self.rng.range(17, 512),
            7 | 8 => self.rng.range(513, 2048),
            _ => self.rng.range(2049, u64::from(UD_MAX)),
        } as u32;
        let id = self.next_ud_id;
        self.next_ud_id += 1;
        let imm = (len < 8 || self.rng.chance(0.5)).then_some(id);
        let data = alloc(&mut self.plan.hosts, MrRef { host, mr: UDOUT }, len, self.rng.range(0, 16), 1);
        if imm.is_none() {
            self.init_writes.push((data.mr, data.off, u64::from(id).to_le_bytes().to_vec()));
        }
        let mut sges = Vec::new();
        let mut off = data.off;
        for part in split(self.rng, len, cap.max_send_sge) {
            sges.push(Seg { mr: data.mr, off, len: part });
            off += u64::from(part);
        }
        let to = UdTarget {
            qp: v,
            sgid_index: self.plan.hosts[host].gid_index_for(gu).expect("own address"),
            dgid: gv,
            traffic_class: (self.rng.below(64) as u8) << 2,
            hop_limit: self.rng.range(1, 255) as u8,
            flow_label: self.rng.below(1 << 20) as u32,
        };
        Op {
            wr_id: self.wr_id(),
            kind: OpKind::UdSend { to, imm, id: u64::from(id) },
            inline: len <= cap.max_inline_data && self.rng.chance(0.3),
            sges,
            len,
            signaled: self.rng.chance(0.75),
            fence: false,
            solicited: self.rng.chance(0.2),
            post_at,
        }
    }
}
