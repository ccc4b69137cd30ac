//! Receive WRs: one per message the responder will execute, big enough for
//! it; posted at time 0, or in an RNR storm late and in bursts (multiples
//! of the responder's RNR timer after the sender starts), so that senders
//! meet RNR NAKs. SRQs get the demand of all their QPs.

use roce_proto::time::rnr_timer;
use roce_proto::Instant;

use super::gen::{split, Gen};
use super::memory::{alloc, RECV};
use super::plan::*;
use crate::net::HostId;

impl Gen<'_> {
    /// Plans the receive WRs that `stream`'s messages consume at `resp`: one
    /// per message the responder executes, big enough for it (too small for
    /// a `RecvTooSmall` probe's SEND).
    pub(super) fn receives_for(&mut self, stream: &Stream, resp: QpIdx, probe: bool) {
        let executed = match stream.probe {
            Some(p) if p.kind == ProbeKind::RecvTooSmall => p.bad_op + 1,
            Some(p) => p.bad_op,
            None => stream.ops.len(),
        };
        let too_small = stream.probe.filter(|p| p.kind == ProbeKind::RecvTooSmall).map(|p| p.bad_op);
        // (data length, buffer must be shorter)
        let msgs: Vec<(u32, bool)> = stream.ops[..executed]
            .iter()
            .enumerate()
            .filter(|(_, o)| o.kind.consumes_recv())
            .map(|(i, o)| (if o.kind.carries_recv_data() { o.len } else { 0 }, too_small == Some(i)))
            .collect();
        let start = stream.ops.first().map_or(Instant::ZERO, |o| o.post_at);
        let qp = &self.plan.qps[resp];
        let rnr = rnr_timer(qp.conn.expect("RC").min_rnr_timer).0;
        if let Some(srq) = qp.srq {
            let d = self.srq_demand.entry((qp.host, srq)).or_default();
            d.msgs.extend(msgs.iter().map(|m| m.0));
            d.start = Some(d.start.map_or(start, |s| s.min(start)));
            d.rnr = if d.rnr == 0 { rnr } else { d.rnr.min(rnr) };
            return;
        }
        if msgs.is_empty() {
            return;
        }
        let (host, max_sge) = (qp.host, qp.cap.max_recv_sge);
        let extra = if probe { 0 } else { self.rng.usize(0, 1) };
        let storm = !probe && self.p.rnr_storms && self.rng.chance(0.4);
        let times = self.recv_times(msgs.len() + extra, start, rnr, storm);
        let wqes = (0..msgs.len() + extra)
            .map(|i| {
                let (data, short) = msgs.get(i).copied().unwrap_or((0, false));
                let cap = if short {
                    self.rng.range(0, u64::from(data) - 1) as u32
                } else {
                    data + if self.rng.chance(0.5) { 0 } else { self.rng.range(1, 64) as u32 }
                };
                self.recv_wqe(host, cap, max_sge, times[i])
            })
            .collect();
        self.plan.recvs.push(RecvList { queue: RecvQueue::Qp(resp), wqes });
    }

    /// When `n` receive WRs are posted: all at time 0, or (an RNR storm) in
    /// bursts of 1 to 4 starting up to 8 RNR timers after the sender starts.
    pub(super) fn recv_times(&mut self, n: usize, start: Instant, rnr: u64, storm: bool) -> Vec<Instant> {
        if !storm {
            return vec![Instant::ZERO; n];
        }
        let mut t = start.0 + self.rng.below(8) * rnr;
        let mut left = 0;
        (0..n)
            .map(|_| {
                if left == 0 {
                    left = self.rng.range(1, 4);
                    t += self.rng.range(1, 4) * rnr;
                }
                left -= 1;
                Instant(t)
            })
            .collect()
    }

    /// A receive WR with `cap` bytes of buffers in 1..=max_sge pieces.
    pub(super) fn recv_wqe(&mut self, host: HostId, cap: u32, max_sge: u32, post_at: Instant) -> RecvWqe {
        let parts = split(self.rng, cap, max_sge);
        let recv = MrRef { host, mr: RECV };
        let sges = parts
            .into_iter()
            .map(|len| {
                let gap = self.rng.range(0, 16);
                alloc(&mut self.plan.hosts, recv, len, gap, 1)
            })
            .collect();
        RecvWqe { wr_id: self.wr_id(), sges, post_at }
    }

    pub(super) fn srq_recvs(&mut self) {
        let demand = std::mem::take(&mut self.srq_demand);
        for ((host, srq), d) in demand {
            if d.msgs.is_empty() {
                continue;
            }
            let n = d.msgs.len() + self.rng.usize(0, 2);
            let cap = d.msgs.iter().copied().max().unwrap_or(0) + self.rng.range(0, 32) as u32;
            let storm = self.p.rnr_storms && self.rng.chance(0.4);
            let times = self.recv_times(n, d.start.unwrap_or(Instant::ZERO), d.rnr, storm);
            let max_sge = self.plan.hosts[host].srqs[srq].1;
            let wqes = times.into_iter().map(|t| self.recv_wqe(host, cap, max_sge, t)).collect();
            self.plan.recvs.push(RecvList { queue: RecvQueue::Srq { host, srq }, wqes });
        }
    }
}
