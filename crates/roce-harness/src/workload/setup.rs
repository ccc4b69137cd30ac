//! Instantiates a plan: one engine per host on the network, its PD, CQs,
//! SRQs, memory and MRs (explicit I/O virtual addresses, so keys and
//! addresses in packets do not depend on where the allocator put buffers),
//! and every QP brought to RTS through the ibv_modify_qp transitions
//! (`Engine::connect_qp`, `Engine::ready_ud`).
//! Also translates planned WRs into verbs WRs with the real keys.

use std::sync::Arc;

use roce_proto::{
    Access, AddressVector, ConnectAttr, CqId, Engine, EngineConfig, MemBuf, MrKeys, MrSpec, PdId, QpInitAttr,
    QpType, RecvWr, SendOp, SendWr, Sge, SrqId, UdDest,
};

use roce_proto::datagram::{datagram_icrc, DatagramMeta};
use roce_wire::{BthRepr, ExtHeaders, Psn, RocePacketRepr};

use super::plan::*;
use crate::net::Network;

/// Depth of every CQ (the application drains them after every step).
const CQ_DEPTH: usize = 1 << 14;

/// A host's verbs objects.
pub struct LiveHost {
    pub pd: PdId,
    pub cqs: Vec<CqId>,
    pub srqs: Vec<SrqId>,
    pub mem: Arc<MemBuf>,
    /// Keys of each region of the plan, same order.
    pub keys: Vec<MrKeys>,
}

/// The instantiated plan.
pub struct Live {
    pub hosts: Vec<LiveHost>,
    /// QP number of each planned QP.
    pub qpns: Vec<u32>,
    /// Initial send PSN of each planned QP.
    pub sq_psns: Vec<u32>,
}

fn err(what: &str, e: impl core::fmt::Display) -> String {
    format!("setup: {what}: {e}")
}

/// Creates everything the plan describes on `net` (which must have no
/// hosts yet).
pub fn setup(plan: &Plan, net: &mut Network) -> Result<Live, String> {
    let mut hosts = Vec::new();
    for (i, hp) in plan.hosts.iter().enumerate() {
        let mut cfg = EngineConfig::new(hp.gids.clone());
        cfg.ack_req_every = hp.device.ack_req_every;
        cfg.max_unacked_psns = hp.device.max_unacked_psns;
        cfg.ecn = hp.device.ecn;
        cfg.tx_budget_bytes = plan.mix.tx_cap(i);
        if let Some(cc) = plan.mix.cc.get(i).and_then(Option::as_ref) {
            cfg.cc = cc.algorithm();
            cfg.line_rate_bps = cc.line_rate_bps;
            cfg.cnp = cc.cnp;
        }
        let id = net.add_host(Engine::new(cfg, hp.engine_seed));
        assert_eq!(id, i, "hosts are added in plan order");
        let e = net.engine_mut(id);
        let pd = e.alloc_pd();
        let cqs = (0..hp.cqs)
            .map(|_| e.create_cq(CQ_DEPTH))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|x| err("CQ", x))?;
        let srqs = hp
            .srqs
            .iter()
            .map(|&(max_wr, max_sge)| e.create_srq(pd, max_wr, max_sge))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|x| err("SRQ", x))?;
        let mem = MemBuf::new(hp.mem_len);
        // SAFETY: the buffer is new and registered nowhere yet: nothing
        // else can access it.
        unsafe { mem.write(0, &hp.init) }.map_err(|x| err("memory", x))?;
        let keys = hp
            .mrs
            .iter()
            .map(|m| {
                let spec = MrSpec {
                    buf: mem.clone(),
                    offset: m.buf_off,
                    length: m.len,
                    iova: Some(m.iova),
                    access: m.kind.access(),
                };
                e.reg_mr(pd, spec)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|x| err("MR", x))?;
        hosts.push(LiveHost { pd, cqs, srqs, mem, keys });
    }
    for &((a, b), params) in &plan.links {
        net.set_link(a, b, params);
    }
    let mut qpns = Vec::new();
    for q in &plan.qps {
        let h = &hosts[q.host];
        let init = QpInitAttr {
            qp_type: q.qp_type,
            pd: h.pd,
            send_cq: h.cqs[q.send_cq],
            recv_cq: h.cqs[q.recv_cq],
            srq: q.srq.map(|s| h.srqs[s]),
            cap: q.cap,
            sq_sig_all: q.sq_sig_all,
        };
        qpns.push(net.engine_mut(q.host).create_qp(init).map_err(|x| err("create_qp", x))?);
    }
    // Keys before the first transition (`set_qp_keys` refuses an RTS QP).
    for (i, keys) in &plan.mix.crypto {
        let q = &plan.qps[*i];
        net.engine_mut(q.host).set_qp_keys(qpns[*i], keys).map_err(|x| err("set_qp_keys", x))?;
    }
    let sq_psns: Vec<u32> = plan
        .qps
        .iter()
        .map(|q| match q.conn.map(|c| c.sq_psn) {
            Some(PsnPick::Engine) => net.engine_mut(q.host).random_psn().value(),
            Some(PsnPick::Fixed(v)) => v,
            None => 0,
        })
        .collect();
    for (i, q) in plan.qps.iter().enumerate() {
        connect(net.engine_mut(q.host), i, q, &qpns, &sq_psns).map_err(|x| err("modify_qp", x))?;
    }
    Ok(Live { hosts, qpns, sq_psns })
}

/// RESET -> INIT -> RTR -> RTS with the attributes ibv_modify_qp(3) requires:
/// `Engine::connect_qp` (RC, UC) or `Engine::ready_ud` (UD).
fn connect(
    e: &mut Engine,
    i: QpIdx,
    q: &QpPlan,
    qpns: &[u32],
    psns: &[u32],
) -> Result<(), roce_proto::VerbsError> {
    let qpn = qpns[i];
    let Some(c) = q.conn else {
        debug_assert_eq!(q.qp_type, QpType::Ud);
        return e.ready_ud(qpn, q.qkey, Psn::new(0));
    };
    let av = AddressVector {
        sgid_index: c.sgid_index,
        traffic_class: c.traffic_class,
        hop_limit: c.hop_limit,
        flow_label: c.flow_label,
        ..AddressVector::new(c.dgid)
    };
    let attr = ConnectAttr {
        access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
        mtu: c.mtu,
        max_dest_rd_atomic: c.max_dest_rd_atomic,
        min_rnr_timer: c.min_rnr_timer,
        timeout: c.timeout,
        retry_cnt: c.retry_cnt,
        rnr_retry: c.rnr_retry,
        max_rd_atomic: c.max_rd_atomic,
        ..ConnectAttr::new(av, qpns[c.peer], Psn::new(psns[c.peer]), Psn::new(psns[i]))
    };
    e.connect_qp(qpn, &attr)
}

impl Live {
    pub fn keys(&self, r: MrRef) -> MrKeys {
        self.hosts[r.host].keys[r.mr]
    }

    /// The I/O virtual address of a segment.
    pub fn addr(&self, s: &Seg) -> u64 {
        self.keys(s.mr).addr + s.off
    }

    pub fn sge(&self, s: &Seg) -> Sge {
        Sge { addr: self.addr(s), length: s.len, lkey: self.keys(s.mr).lkey }
    }

    /// The verbs WR of a planned send.
    pub fn send_wr(&self, plan: &Plan, op: &Op) -> SendWr {
        let mut ud = None;
        let sop = match op.kind {
            OpKind::Send => SendOp::Send,
            OpKind::SendImm { imm } => SendOp::SendWithImm { imm },
            OpKind::SendInv { target } => SendOp::SendWithInv { rkey: self.keys(target).rkey },
            OpKind::Write { dst } => {
                SendOp::Write { remote_addr: self.addr(&dst), rkey: self.keys(dst.mr).rkey }
            }
            OpKind::WriteImm { dst, imm } => {
                SendOp::WriteWithImm { remote_addr: self.addr(&dst), rkey: self.keys(dst.mr).rkey, imm }
            }
            OpKind::Read { src } => {
                SendOp::Read { remote_addr: self.addr(&src), rkey: self.keys(src.mr).rkey }
            }
            OpKind::CmpSwap { word, compare, swap } => SendOp::CompareSwap {
                remote_addr: self.addr(&word),
                rkey: self.keys(word.mr).rkey,
                compare,
                swap,
            },
            OpKind::FetchAdd { word, add, .. } => {
                SendOp::FetchAdd { remote_addr: self.addr(&word), rkey: self.keys(word.mr).rkey, add }
            }
            OpKind::UdSend { to, imm, .. } => {
                ud = Some(UdDest {
                    av: AddressVector {
                        sgid_index: to.sgid_index,
                        traffic_class: to.traffic_class,
                        hop_limit: to.hop_limit,
                        flow_label: to.flow_label,
                        ..AddressVector::new(to.dgid)
                    },
                    remote_qpn: self.qpns[to.qp],
                    remote_qkey: plan.qps[to.qp].qkey,
                });
                imm.map_or(SendOp::Send, |imm| SendOp::SendWithImm { imm })
            }
        };
        SendWr {
            wr_id: op.wr_id,
            op: sop,
            sg_list: op.sges.iter().map(|s| self.sge(s)).collect(),
            signaled: op.signaled,
            fence: op.fence,
            solicited: op.solicited,
            inline: op.inline,
            ud,
        }
    }

    /// A CNP to RC QP `qp` from its peer (Annex A17.9.3: BTH opcode 0x81
    /// naming the marked QP, BECN set, PSN 0, 16 reserved bytes, ICRC) and
    /// the addresses it travels with: what the peer's notification point
    /// sends when the QP's packets meet a congested switch.
    pub fn cnp(&self, plan: &Plan, qp: QpIdx) -> (DatagramMeta, Vec<u8>) {
        let q = &plan.qps[qp];
        let c = q.conn.expect("a CNP names an RC QP");
        let meta = DatagramMeta {
            src: c.dgid,
            dst: plan.hosts[q.host].gids[usize::from(c.sgid_index)],
            src_port: 0xc000 | (qp as u16 & 0x3fff),
            dst_port: roce_wire::ROCE_PORT,
            ecn: 0,
            ipv4_id: Some(0),
        };
        let repr = RocePacketRepr {
            bth: BthRepr {
                opcode: roce_wire::opcode::CNP,
                solicited: false,
                mig_req: false,
                pkey: roce_wire::bth::DEFAULT_PKEY,
                fecn: false,
                becn: true,
                dest_qp: self.qpns[qp],
                ack_req: false,
                psn: Psn::new(0),
            },
            ext: ExtHeaders::default(),
            payload: &[],
        };
        let mut bytes = vec![0; repr.buffer_len().expect("a CNP has a length")];
        repr.emit(&mut bytes).expect("sized above");
        let n = bytes.len() - roce_wire::icrc::ICRC_LEN;
        let crc = datagram_icrc(&meta, &bytes[..n]).expect("one address family");
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
        (meta, bytes)
    }

    pub fn recv_wr(&self, w: &RecvWqe) -> RecvWr {
        RecvWr { wr_id: w.wr_id, sg_list: w.sges.iter().map(|s| self.sge(s)).collect() }
    }
}
