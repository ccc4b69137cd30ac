//! The scenario's flows and their records: each flow is an RC QP pair
//! between its two hosts, posting RDMA WRITEs (or SENDs against posted
//! RECVs) of `chunk` bytes, a window at a time; its completion time (from
//! its start to its last WR's completion) is its FCT record.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use roce_proto::{
    Access, AddressVector, ConnectAttr, CqId, Engine, MemBuf, MrKeys, MrSpec, PathMtu, PdId, QpCap,
    QpInitAttr, QpType, RecvWr, SendOp, SendWr, Sge, VerbsError, WcOpcode, WcStatus,
};

use super::{Ev, FabricError, Sim};
use crate::hooks::LinkHooks;
use crate::report::FctRecord;
use crate::scenario::{host_ip, FlowOp, NodeId};

/// Work requests a flow keeps posted at once: enough that the whole of
/// any usual flow is posted at its start (HPCC's NIC has no window; the
/// engine's send window is `NicConfig::max_unacked_psns`).
const FLOW_WINDOW: u64 = 1 << 13;
/// Scatter-gather elements of a flow's WR: its source is a region of a
/// 1/`SRC_SGES` of `chunk_bytes` (at least 4 KiB), gathered that many
/// times. The payload is the same zeros; 320 hosts' 4 KiB sources stay in
/// cache where 64 KiB ones did not.
const SRC_SGES: usize = 16;

/// The bytes of a host's source region for WRs of `chunk` bytes.
fn src_region(chunk: usize) -> usize {
    chunk.div_ceil(SRC_SGES).max(4096).min(chunk)
}
/// ACK timeout code of the flows' QPs (4.096 us x 2^12 = 16.8 ms).
const ACK_TIMEOUT: u8 = 12;

/// A host's verbs objects for the scenario's flows.
pub(super) struct FlowHost {
    pub(super) pd: PdId,
    pub(super) cq: CqId,
    pub(super) src: MrKeys,
    pub(super) dst: MrKeys,
    /// QPN -> flow.
    pub(super) qp_flow: HashMap<u32, usize>,
    /// Flows sent from here whose UDP source port is not yet known.
    pub(super) sports_unknown: usize,
}

impl FlowHost {
    /// A host's objects for the flows, made in `engine`: a PD, one CQ, a
    /// source region (see [`src_region`]) and a destination of `chunk`
    /// bytes. A failed verb is named with its error.
    pub(super) fn new(engine: &mut Engine, chunk: usize) -> Result<FlowHost, (&'static str, VerbsError)> {
        let pd: PdId = engine.alloc_pd();
        let cq = engine.create_cq(1 << 16).map_err(|e| ("create_cq", e))?;
        let reg = |engine: &mut Engine, len: usize| {
            engine
                .reg_mr(
                    pd,
                    MrSpec { buf: MemBuf::new(len), offset: 0, length: len, iova: None, access: Access::ALL },
                )
                .map_err(|e| ("reg_mr", e))
        };
        let src = reg(engine, src_region(chunk))?;
        let dst = reg(engine, chunk)?;
        Ok(FlowHost { pd, cq, src, dst, qp_flow: HashMap::new(), sports_unknown: 0 })
    }
}

#[derive(Default, Clone)]
pub(super) struct FlowState {
    pub(super) src_qpn: u32,
    pub(super) dst_qpn: u32,
    pub(super) wrs: u64,
    pub(super) posted: u64,
    pub(super) completed: u64,
    pub(super) recvs_posted: u64,
    pub(super) recvs_done: u64,
    pub(super) started: bool,
    pub(super) done: bool,
    pub(super) sport: u16,
}

impl<H: LinkHooks> Sim<H> {
    pub(super) fn make_flows(&mut self) -> Result<(), FabricError> {
        let scn = self.scn.clone();
        let mtu = PathMtu::from_bytes(scn.nic.mtu as usize).expect("validated");
        let chunk = scn.nic.chunk_bytes as u64;
        for (i, f) in scn.flows.iter().enumerate() {
            let mut qpn = [0u32; 2];
            let mut psn = [roce_wire::Psn::ZERO; 2];
            for (side, node) in [f.src, f.dst].into_iter().enumerate() {
                let h = self.hosts[node].as_mut().expect("flow ends are hosts");
                let fl = h.fl.as_mut().expect("a flow host");
                let init = QpInitAttr {
                    qp_type: QpType::Rc,
                    pd: fl.pd,
                    send_cq: fl.cq,
                    recv_cq: fl.cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: FLOW_WINDOW as u32,
                        max_recv_wr: 2 * FLOW_WINDOW as u32,
                        max_send_sge: SRC_SGES as u32,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    sq_sig_all: false,
                };
                qpn[side] = h.engine.create_qp(init).map_err(|source| FabricError::Engine {
                    host: node,
                    verb: "create_qp",
                    source,
                })?;
                psn[side] = h.engine.random_psn();
                let fl = h.fl.as_mut().expect("a flow host");
                fl.qp_flow.insert(qpn[side], i);
                if side == 0 {
                    fl.sports_unknown += 1;
                }
            }
            for (side, node) in [f.src, f.dst].into_iter().enumerate() {
                let peer = [f.dst, f.src][side];
                let mut av = AddressVector::new(IpAddr::V4(Ipv4Addr::from(host_ip(peer))));
                av.traffic_class = f.priority << 5;
                let mut c = ConnectAttr::new(av, qpn[1 - side], psn[1 - side], psn[side]);
                c.mtu = mtu;
                c.timeout = ACK_TIMEOUT;
                let h = self.hosts[node].as_mut().expect("host");
                h.engine.connect_qp(qpn[side], &c).map_err(|source| FabricError::Engine {
                    host: node,
                    verb: "connect_qp",
                    source,
                })?;
            }
            let st = &mut self.flows[i];
            st.src_qpn = qpn[0];
            st.dst_qpn = qpn[1];
            st.wrs = f.size.div_ceil(chunk);
            if f.op == FlowOp::Send {
                self.post_recvs(i);
            }
        }
        let mut order: Vec<usize> = (0..scn.flows.len()).collect();
        order.sort_by_key(|&i| scn.flows[i].start_ps);
        if let Some(&first) = order.first() {
            self.push(scn.flows[first].start_ps, Ev::FlowStart(first as u32));
        }
        self.start_order = order;
        Ok(())
    }

    pub(super) fn reap(&mut self, node: NodeId) {
        loop {
            let h = self.hosts[node].as_mut().expect("host");
            // A client's host: the client polls.
            let Some(fl) = &h.fl else { return };
            let n = h.engine.poll_cq(fl.cq, &mut self.wc).unwrap_or_default();
            if n == 0 {
                return;
            }
            for i in 0..n {
                let wc = self.wc[i];
                let flow = wc.wr_id as usize;
                if flow >= self.flows.len() || self.flows[flow].done {
                    continue;
                }
                if wc.status != WcStatus::Success {
                    self.flows[flow].done = true;
                    self.flows_done += 1;
                    self.report.counters.flows_failed += 1;
                    continue;
                }
                if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                    self.flows[flow].recvs_done += 1;
                    self.post_recvs(flow);
                    continue;
                }
                let st = &mut self.flows[flow];
                st.completed += 1;
                if st.completed == st.wrs {
                    st.done = true;
                    self.flows_done += 1;
                    let spec = &self.scn.flows[flow];
                    self.report.fct.push(FctRecord {
                        flow,
                        src: spec.src,
                        dst: spec.dst,
                        sport: st.sport,
                        dport: roce_wire::ROCE_PORT,
                        size: spec.size,
                        start_ps: spec.start_ps,
                        fct_ps: self.now - spec.start_ps,
                    });
                } else {
                    self.post_sends(flow);
                }
            }
        }
    }

    pub(super) fn flow_start(&mut self, i: usize) {
        self.next_start += 1;
        if let Some(&next) = self.start_order.get(self.next_start) {
            self.push(self.scn.flows[next].start_ps, Ev::FlowStart(next as u32));
        }
        self.flows[i].started = true;
        self.post_sends(i);
        let src = self.scn.flows[i].src;
        self.host_after_input(src);
    }

    pub(super) fn post_sends(&mut self, i: usize) {
        let spec = &self.scn.flows[i];
        let chunk = self.scn.nic.chunk_bytes as u64;
        let (src_qpn, dst) = (self.flows[i].src_qpn, spec.dst);
        let remote = {
            let d = self.hosts[dst].as_ref().expect("host");
            d.fl.as_ref().expect("a flow host").dst
        };
        let h = self.hosts[spec.src].as_mut().expect("host");
        let src = h.fl.as_ref().expect("a flow host").src;
        let st = &mut self.flows[i];
        while st.posted < st.wrs && st.posted - st.completed < FLOW_WINDOW {
            let len = if st.posted + 1 == st.wrs { spec.size - chunk * (st.wrs - 1) } else { chunk };
            let region = src_region(chunk as usize) as u64;
            let sges = (0..len.div_ceil(region))
                .map(|k| Sge {
                    addr: src.addr,
                    length: (len - k * region).min(region) as u32,
                    lkey: src.lkey,
                })
                .collect();
            let op = match spec.op {
                FlowOp::Write => SendOp::Write { remote_addr: remote.addr, rkey: remote.rkey },
                FlowOp::Send => SendOp::Send,
            };
            let mut wr = SendWr::new(i as u64, op, sges);
            wr.signaled = true;
            if h.engine.post_send(src_qpn, wr).is_err() {
                // The QP failed; its completions say so.
                return;
            }
            st.posted += 1;
        }
    }

    pub(super) fn post_recvs(&mut self, i: usize) {
        let spec = &self.scn.flows[i];
        let h = self.hosts[spec.dst].as_mut().expect("host");
        let dst = h.fl.as_ref().expect("a flow host").dst;
        let st = &mut self.flows[i];
        let chunk = self.scn.nic.chunk_bytes;
        while st.recvs_posted < st.wrs && st.recvs_posted - st.recvs_done < 2 * FLOW_WINDOW {
            let wr = RecvWr {
                wr_id: i as u64,
                sg_list: vec![Sge { addr: dst.addr, length: chunk, lkey: dst.lkey }],
            };
            if h.engine.post_recv(st.dst_qpn, wr).is_err() {
                return;
            }
            st.recvs_posted += 1;
        }
    }
}
