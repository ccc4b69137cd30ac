//! Background traffic sharing the fabric with the collectives: storage or
//! other jobs' flows, as when training shares a network (`[[background]]`
//! in the workload).
//!
//! Each flow is a real RC QP pair on the engines of its two hosts (the
//! hosts' NICs are shared with their ranks, if any: the same engine and
//! wire, QPs and a CQ of their own), at the workload's priority: the
//! QP's traffic class carries DSCP `priority << 3`, whose top three bits
//! the NICs and switches take as the frame's priority (its queue, its PFC
//! class). A flow keeps `depth` RDMA WRITEs of `message` bytes in flight
//! for as long as the collectives run, re-posting each as it completes (a
//! closed loop, as fio or `ib_write_bw` keep their queue full), and counts
//! the bytes that arrived.

use std::collections::HashMap;

use roce_proto::{
    AddressVector, ConnectAttr, CqId, MemBuf, MrSpec, PathMtu, QpCap, QpInitAttr, QpType, SendOp, SendWr,
    Sge, Wc, WcStatus,
};
use roce_wire::Psn;

use super::transport::host_ip;
use crate::hooks::NoHooks;
use crate::mesh::Mesh;
use crate::scenario::{NodeId, Time};

/// One `[[background]]`: every sender writes to `to`.
#[derive(Debug, Clone, PartialEq)]
pub struct BackgroundSpec {
    /// Senders, as indices into the fabric's hosts (not ranks: a
    /// background host need not run a rank).
    pub from: Vec<usize>,
    pub to: usize,
    /// Bytes per WRITE.
    pub message: usize,
    /// Traffic class priority, 0..=7 (the collectives run at 0).
    pub priority: u8,
    /// WRITEs in flight per flow.
    pub depth: usize,
}

/// Why the background could not run.
#[derive(Debug, thiserror::Error)]
pub enum BackgroundError {
    #[error("background: host {host} is not one of the fabric's {hosts} hosts")]
    NoHost { host: usize, hosts: usize },
    #[error("background flow {from} -> {to}: {what}: {source}")]
    Verbs { from: NodeId, to: NodeId, what: &'static str, source: roce_proto::VerbsError },
    #[error("background flow {from} -> {to}: a WRITE failed: {status:?}")]
    Failed { from: NodeId, to: NodeId, status: WcStatus },
}

struct Flow {
    src: NodeId,
    dst: NodeId,
    qpn: u32,
    wr: SendWr,
    done_bytes: u64,
}

/// The background flows of a run.
pub struct Background {
    flows: Vec<Flow>,
    /// Per sending node: its CQ, and its QPs' flows.
    senders: HashMap<NodeId, (CqId, HashMap<u32, usize>)>,
    wc: Vec<Wc>,
    /// When the flows started (their first post).
    pub started: Option<Time>,
}

impl Background {
    /// The nodes whose engines the flows of `specs` need, given the
    /// fabric's host nodes.
    pub fn nodes(specs: &[BackgroundSpec], hosts: &[NodeId]) -> Result<Vec<NodeId>, BackgroundError> {
        let mut out = Vec::new();
        for s in specs {
            for &h in s.from.iter().chain([&s.to]) {
                out.push(*hosts.get(h).ok_or(BackgroundError::NoHost { host: h, hosts: hosts.len() })?);
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Creates and connects every flow's QPs (outside simulated time, as
    /// the collectives' connections are).
    pub fn new(
        mesh: &mut Mesh<NoHooks>,
        specs: &[BackgroundSpec],
        hosts: &[NodeId],
        mtu: PathMtu,
    ) -> Result<Background, BackgroundError> {
        let mut bg =
            Background { flows: Vec::new(), senders: HashMap::new(), wc: vec![Wc::EMPTY; 64], started: None };
        let mut cqs: HashMap<NodeId, (roce_proto::PdId, CqId)> = HashMap::new();
        for s in specs {
            let dst = hosts[s.to];
            for &f in &s.from {
                let src = hosts[f];
                let err = |what, source| BackgroundError::Verbs { from: src, to: dst, what, source };
                let mut ends = Vec::new();
                for node in [src, dst] {
                    let e = mesh.engine_mut(node);
                    let (pd, cq) = match cqs.get(&node) {
                        Some(&x) => x,
                        None => {
                            let pd = e.alloc_pd();
                            let cq = e.create_cq(1 << 12).map_err(|x| err("creating a CQ", x))?;
                            cqs.insert(node, (pd, cq));
                            (pd, cq)
                        }
                    };
                    let spec = MrSpec {
                        buf: MemBuf::new(s.message),
                        offset: 0,
                        length: s.message,
                        iova: None,
                        access: roce_proto::Access::ALL,
                    };
                    let mr = e.reg_mr(pd, spec).map_err(|x| err("registering memory", x))?;
                    let depth = s.depth as u32 + 1;
                    let init = QpInitAttr {
                        qp_type: QpType::Rc,
                        pd,
                        send_cq: cq,
                        recv_cq: cq,
                        srq: None,
                        cap: QpCap { max_send_wr: depth, max_recv_wr: 1, ..QpCap::default() },
                        sq_sig_all: false,
                    };
                    let qpn = e.create_qp(init).map_err(|x| err("creating a QP", x))?;
                    ends.push((node, qpn, mr, cq));
                }
                let k = bg.flows.len();
                let psn = |i: usize| Psn::new(((k * 7919 + i * 104_729) & 0xff_ffff) as u32);
                for i in 0..2 {
                    let (node, qpn, _, _) = ends[i];
                    let (peer, peer_qpn, _, _) = ends[1 - i];
                    let mut av = AddressVector::new(host_ip(peer));
                    av.traffic_class = s.priority << 5;
                    let attr = ConnectAttr { mtu, ..ConnectAttr::new(av, peer_qpn, psn(i), psn(1 - i)) };
                    mesh.engine_mut(node).connect_qp(qpn, &attr).map_err(|x| err("connecting a QP", x))?;
                }
                let (_, qpn, mr, cq) = ends[0];
                let remote = ends[1].2;
                let mut wr = SendWr::new(
                    k as u64,
                    SendOp::Write { remote_addr: remote.addr, rkey: remote.rkey },
                    vec![Sge { addr: mr.addr, length: s.message as u32, lkey: mr.lkey }],
                );
                wr.signaled = true;
                bg.senders.entry(src).or_insert_with(|| (cq, HashMap::new())).1.insert(qpn, k);
                for _ in 0..s.depth {
                    mesh.engine_mut(src).post_send(qpn, wr.clone()).map_err(|x| err("posting a WRITE", x))?;
                }
                bg.flows.push(Flow { src, dst, qpn, wr, done_bytes: 0 });
            }
        }
        Ok(bg)
    }

    /// Lets the senders' NICs take their first WRITEs (at the first
    /// collective's start).
    pub fn start(&mut self, mesh: &mut Mesh<NoHooks>) {
        if self.started.is_none() && !self.flows.is_empty() {
            self.started = Some(mesh.now());
            let mut nodes: Vec<NodeId> = self.senders.keys().copied().collect();
            nodes.sort_unstable();
            for n in nodes {
                mesh.kick_host(n);
            }
        }
    }

    /// Whether `node` sends background traffic.
    pub fn sends(&self, node: NodeId) -> bool {
        self.senders.contains_key(&node)
    }

    /// Reaps `node`'s completions and re-posts each finished WRITE.
    pub fn progress(&mut self, mesh: &mut Mesh<NoHooks>, node: NodeId) -> Result<(), BackgroundError> {
        let Some((cq, qps)) = self.senders.get(&node) else {
            return Ok(());
        };
        let mut reposted = false;
        loop {
            let n = mesh.engine_mut(node).poll_cq(*cq, &mut self.wc).expect("a CQ of this engine");
            reposted |= n > 0;
            for wc in &self.wc[..n] {
                let f = &mut self.flows[qps[&wc.qp_num]];
                if wc.status != WcStatus::Success {
                    return Err(BackgroundError::Failed { from: f.src, to: f.dst, status: wc.status });
                }
                f.done_bytes += f.wr.sg_list[0].length as u64;
                let e = mesh.engine_mut(node);
                e.post_send(f.qpn, f.wr.clone()).map_err(|x| BackgroundError::Verbs {
                    from: f.src,
                    to: f.dst,
                    what: "re-posting a WRITE",
                    source: x,
                })?;
            }
            if n < self.wc.len() {
                break;
            }
        }
        if reposted {
            mesh.kick_host(node);
        }
        Ok(())
    }

    /// Bytes every flow delivered (acknowledged WRITEs).
    pub fn delivered(&self) -> u64 {
        self.flows.iter().map(|f| f.done_bytes).sum()
    }

    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }
}
