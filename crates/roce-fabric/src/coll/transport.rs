//! The collectives' [`Transport`] on the simulator's hosts: rank `r` is a
//! client host of a [`Mesh`] running the real `roce-proto` engine, and
//! each of its QPs to a peer is a real RC QP of that engine.
//!
//! Per pair of ranks that talk, per channel (`qps_per_peer`), two RC QPs,
//! one for data and one for credits (the trait's rule: a credit never
//! waits behind data), each with its own UDP source port, drawn by the
//! engine (the ECMP entropy, IBTA Annex A17.4.2), and per pair one receive
//! region and one staging region of `channels x slots x slot_bytes`,
//! registered on the engines. A data message is an RDMA WRITE WITH
//! IMMEDIATE (IBTA vol. 1 §9.4.3) from the staging region into the peer's
//! receive region, a credit a zero-length one on the credit QP; every one
//! consumes a receive WQE, which the transport re-posts when it reaps its
//! completion, so each QP keeps `slots` posted (the trait's bound) and a
//! few more.
//!
//! **Connections are made when first used** (the first write or notify
//! between two ranks creates both sides' QPs and regions, connected at
//! once, outside simulated time), as the real library connects every
//! pair at creation before any timed call: a ring on 1,024 ranks then
//! holds 2 peers per rank, not 1,023.
//!
//! **Host copies.** The algorithms see plain slices; a staging slot is
//! copied into the registered region when it is written, a receive slot
//! out of it when its data arrives (the slot named by the immediate,
//! [`roce_coll::data_slot`]). (The `roce` driver's transport lends the
//! registered bytes in place instead; here the copies cost host CPU only,
//! never simulated time.)
//!
//! **Timing-only runs** ([`Hosts::payload`] off, when results are not
//! checked): only each message's header (the first
//! [`roce_coll::HEADER_BYTES`]) is copied between the host slices and the
//! registered regions; the rest of a write carries the region's zeros.
//! The wire, the engines and the algorithms do the same work (the same
//! packets, lengths, immediates and headers), the host skips two copies
//! of every byte, the algorithms (told by `carries_data`) neither stage
//! data nor reduce or copy what arrives, and the fabric stores a payload
//! of one repeated byte compactly. The simulated time does not depend on
//! the values (`coll::tests::a_timing_only_run_takes_the_time_of_a_checked_one`).
//!
//! **Time.** `now_ns` is the simulated time. Host-side work (staging,
//! reductions, copies) takes no simulated time: the model is a NIC whose
//! host (a GPU) reduces far faster than the link.

use rustc_hash::FxHashMap;
use std::net::{IpAddr, Ipv4Addr};

use roce_coll::{data_slot, Completion, Layout, Transport, TransportError, HEADER_BYTES};
use roce_proto::{
    AddressVector, ConnectAttr, CqId, Engine, MemBuf, MrKeys, MrSpec, PathMtu, PdId, QpCap, QpInitAttr,
    QpType, RecvWr, SendOp, SendWr, Sge, VerbsError, Wc, WcOpcode, WcStatus,
};
use roce_wire::Psn;

use crate::hooks::NoHooks;
use crate::mesh::Mesh;
use crate::scenario::{NodeId, PS_PER_NS};

/// `wr_id` of a credit write (its completion is not reported).
const NOTIFY: u64 = u64::MAX;
/// Depth of each host's CQ.
const CQ_DEPTH: usize = 1 << 18;

/// The address of the host on node `node` (the fabric's own numbering,
/// [`crate::scenario::host_ip`]).
pub(crate) fn host_ip(node: NodeId) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(crate::scenario::host_ip(node)))
}

/// One side of a connected pair.
struct Peer {
    /// Per channel: the data QP and the credit QP.
    qpn: Vec<[u32; 2]>,
    recv_mr: MrKeys,
    recv: Vec<u8>,
    stage_mr: MrKeys,
    staging: Vec<u8>,
    /// The peer's receive region for us.
    remote_addr: u64,
    remote_rkey: u32,
}

/// One rank's verbs objects on its host.
pub(crate) struct RankNet {
    pub node: NodeId,
    pd: PdId,
    cq: CqId,
    peers: Vec<Option<Box<Peer>>>,
    /// Local QPN (data or credit) -> (peer, channel).
    qp_of: FxHashMap<u32, (usize, usize)>,
    /// Credits `(peer, channel, imm)` whose QP's send queue was full,
    /// posted when its completions make room.
    credit_backlog: Vec<(usize, usize, u32)>,
}

/// Every rank's host, on one fabric.
pub(crate) struct Hosts {
    pub mesh: Mesh<NoHooks>,
    pub layout: Layout,
    pub mtu: PathMtu,
    pub ranks: Vec<RankNet>,
    /// Per node: the rank on it (`usize::MAX`: none).
    pub rank_of_node: Vec<usize>,
    /// What `slot` shows for a peer that never wrote (never read by the
    /// algorithms, which read a slot only after its arrival).
    wc: Vec<Wc>,
    /// QPs created so far (both sides, data and credit).
    pub qps: usize,
    /// Copy whole messages (results checked) or headers only (timing).
    pub payload: bool,
    /// Every QP's traffic class (DSCP << 2: the top three bits are the
    /// frames' priority).
    pub traffic_class: u8,
}

impl Hosts {
    /// Rank `r` on `nodes[r]` of `mesh` (each a client host with an engine
    /// at [`host_ip`]).
    pub fn new(mut mesh: Mesh<NoHooks>, nodes: &[NodeId], layout: Layout, mtu: PathMtu) -> Hosts {
        let n = nodes.len();
        let ranks = nodes
            .iter()
            .map(|&node| {
                let e = mesh.engine_mut(node);
                let pd = e.alloc_pd();
                let cq = e.create_cq(CQ_DEPTH).expect("a CQ within the engine's limit");
                RankNet {
                    node,
                    pd,
                    cq,
                    peers: (0..n).map(|_| None).collect(),
                    qp_of: FxHashMap::default(),
                    credit_backlog: Vec::new(),
                }
            })
            .collect();
        let mut rank_of_node = vec![usize::MAX; nodes.iter().max().map_or(0, |&m| m + 1)];
        for (r, &node) in nodes.iter().enumerate() {
            rank_of_node[node] = r;
        }
        Hosts {
            mesh,
            layout,
            mtu,
            ranks,
            rank_of_node,
            wc: vec![Wc::EMPTY; 256],
            qps: 0,
            payload: true,
            traffic_class: 0,
        }
    }

    fn region_len(&self) -> usize {
        self.layout.channels * self.layout.slots * self.layout.slot_bytes
    }

    fn offset(&self, ch: usize, slot: usize) -> usize {
        (ch * self.layout.slots + slot) * self.layout.slot_bytes
    }

    /// Creates one side's regions and QPs towards `peer` (not connected).
    fn half(&mut self, r: usize, peer: usize) -> Result<Box<Peer>, TransportError> {
        let len = self.region_len();
        let l = self.layout;
        let (node, pd, cq) = (self.ranks[r].node, self.ranks[r].pd, self.ranks[r].cq);
        let e = self.mesh.engine_mut(node);
        let err =
            |what: &str, x: roce_proto::VerbsError| TransportError::new(Some(peer), format!("{what}: {x}"));
        let reg = |e: &mut Engine| {
            let spec = MrSpec {
                buf: MemBuf::new(len),
                offset: 0,
                length: len,
                iova: None,
                access: roce_proto::Access::ALL,
            };
            e.reg_mr(pd, spec)
        };
        let recv_mr = reg(e).map_err(|x| err("registering a receive region", x))?;
        let stage_mr = reg(e).map_err(|x| err("registering a staging region", x))?;
        let depth = l.slots as u32 + 4;
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap { max_send_wr: depth, max_recv_wr: depth, ..QpCap::default() },
            sq_sig_all: false,
        };
        let mut qpn = Vec::with_capacity(l.channels);
        for _ in 0..l.channels {
            let data = e.create_qp(init).map_err(|x| err("creating a QP", x))?;
            let credit = e.create_qp(init).map_err(|x| err("creating a QP", x))?;
            qpn.push([data, credit]);
        }
        Ok(Box::new(Peer {
            qpn,
            recv_mr,
            recv: vec![0; len],
            stage_mr,
            staging: vec![0; len],
            remote_addr: 0,
            remote_rkey: 0,
        }))
    }

    /// Connects ranks `a` and `b` (both directions), if not yet.
    fn connect(&mut self, a: usize, b: usize) -> Result<(), TransportError> {
        if self.ranks[a].peers[b].is_some() {
            return Ok(());
        }
        let mut pa = self.half(a, b)?;
        let mut pb = self.half(b, a)?;
        (pa.remote_addr, pa.remote_rkey) = (pb.recv_mr.addr, pb.recv_mr.rkey);
        (pb.remote_addr, pb.remote_rkey) = (pa.recv_mr.addr, pa.recv_mr.rkey);
        let ips = [host_ip(self.ranks[a].node), host_ip(self.ranks[b].node)];
        let mtu = self.mtu;
        for (ch, kind) in (0..self.layout.channels).flat_map(|ch| [(ch, 0), (ch, 1)]) {
            let qpn = [pa.qpn[ch][kind], pb.qpn[ch][kind]];
            // Deterministic first PSNs, different per pair, channel and QP.
            let psn =
                [a, b].map(|x| ((x * 7919 + (a ^ b) * 104_729 + ch * 31 + kind * 17) & 0xff_ffff) as u32);
            for (s, (rank, peer)) in [(a, b), (b, a)].into_iter().enumerate() {
                let o = 1 - s;
                let mut av = AddressVector::new(ips[o]);
                av.traffic_class = self.traffic_class;
                let attr =
                    ConnectAttr { mtu, ..ConnectAttr::new(av, qpn[o], Psn::new(psn[o]), Psn::new(psn[s])) };
                let node = self.ranks[rank].node;
                let e = self.mesh.engine_mut(node);
                e.connect_qp(qpn[s], &attr)
                    .map_err(|x| TransportError::new(Some(peer), format!("connecting a QP: {x}")))?;
                for _ in 0..self.layout.slots + 2 {
                    e.post_recv(qpn[s], RecvWr { wr_id: 0, sg_list: Vec::new() })
                        .map_err(|x| TransportError::new(Some(peer), format!("posting a receive: {x}")))?;
                }
                self.ranks[rank].qp_of.insert(qpn[s], (peer, ch));
            }
            self.qps += 2;
        }
        self.ranks[a].peers[b] = Some(pa);
        self.ranks[b].peers[a] = Some(pb);
        Ok(())
    }

    /// Posts a WRITE WITH IMMEDIATE of `len` bytes of rank `r`'s staging
    /// slot to `peer` (`len` 0: a credit, with no local memory).
    #[allow(clippy::too_many_arguments)] // one WR's fields, as the trait's `write` has them
    fn post(
        &mut self,
        r: usize,
        peer: usize,
        ch: usize,
        slot: usize,
        len: usize,
        imm: u32,
        wr_id: u64,
    ) -> Result<(), TransportError> {
        self.connect(r, peer)?;
        let off = self.offset(ch, slot);
        let node = self.ranks[r].node;
        let p = self.ranks[r].peers[peer].as_ref().expect("connected");
        let e = self.mesh.engine_mut(node);
        let mut sg = Vec::new();
        if len > 0 {
            let copy = if self.payload { len } else { len.min(HEADER_BYTES) };
            e.mr_write(p.stage_mr.lkey, off, &p.staging[off..off + copy])
                .map_err(|x| TransportError::new(Some(peer), format!("staging: {x}")))?;
            sg.push(Sge { addr: p.stage_mr.addr + off as u64, length: len as u32, lkey: p.stage_mr.lkey });
        }
        let op = SendOp::WriteWithImm { remote_addr: p.remote_addr + off as u64, rkey: p.remote_rkey, imm };
        let mut wr = SendWr::new(wr_id, op, sg);
        wr.signaled = true;
        let qp = p.qpn[ch][usize::from(wr_id == NOTIFY)];
        match e.post_send(qp, wr) {
            Ok(()) => {}
            // A credit QP's queue can fill: its ACKs may come back later
            // than the data the credits let through (another ECMP path).
            // Held, and posted when completions make room (`reap`).
            Err(VerbsError::QueueFull(_)) if wr_id == NOTIFY => {
                self.ranks[r].credit_backlog.push((peer, ch, imm));
                return Ok(());
            }
            Err(x) => return Err(TransportError::new(Some(peer), format!("posting a write: {x}"))),
        }
        self.mesh.kick_host(node);
        Ok(())
    }

    /// Whether rank `r`'s completion queue holds anything: the only news
    /// its host's engine has for the algorithm (arrivals, sends done,
    /// errors). A host touched by ACKs or the middle of a message has none.
    pub fn has_completions(&self, r: usize) -> bool {
        let rank = &self.ranks[r];
        self.mesh.engine(rank.node).cq_len(rank.cq) > 0
    }

    /// Reaps rank `r`'s completion queue into `out`.
    fn reap(&mut self, r: usize, out: &mut Vec<Completion>) -> Result<(), TransportError> {
        let node = self.ranks[r].node;
        loop {
            let cq = self.ranks[r].cq;
            let n = self
                .mesh
                .engine_mut(node)
                .poll_cq(cq, &mut self.wc)
                .map_err(|x| TransportError::new(None, format!("polling the CQ: {x}")))?;
            for i in 0..n {
                let wc = self.wc[i];
                let Some(&(peer, ch)) = self.ranks[r].qp_of.get(&wc.qp_num) else {
                    return Err(TransportError::new(
                        None,
                        format!("a completion of unknown QP {}", wc.qp_num),
                    ));
                };
                if wc.status != WcStatus::Success {
                    return Err(TransportError::new(
                        Some(peer),
                        format!("work request failed: {:?} (vendor error {})", wc.status, wc.vendor_err),
                    ));
                }
                match wc.opcode {
                    WcOpcode::RecvRdmaWithImm => {
                        let len = wc.byte_len as usize;
                        let rank = &mut self.ranks[r];
                        let p = rank.peers[peer].as_mut().expect("connected");
                        let e = self.mesh.engine_mut(node);
                        e.post_recv(wc.qp_num, RecvWr { wr_id: 0, sg_list: Vec::new() }).map_err(|x| {
                            TransportError::new(Some(peer), format!("re-posting a receive: {x}"))
                        })?;
                        if len > 0 {
                            let slot = data_slot(wc.imm_data)
                                .filter(|&s| s < self.layout.slots && len <= self.layout.slot_bytes);
                            let Some(slot) = slot else {
                                return Err(TransportError::new(
                                    Some(peer),
                                    "a write of a bad slot or length",
                                ));
                            };
                            let off = (ch * self.layout.slots + slot) * self.layout.slot_bytes;
                            let copy = if self.payload { len } else { len.min(HEADER_BYTES) };
                            e.mr_read(p.recv_mr.lkey, off, &mut p.recv[off..off + copy]).map_err(|x| {
                                TransportError::new(Some(peer), format!("reading a slot: {x}"))
                            })?;
                        }
                        out.push(Completion::Arrived { peer, channel: ch, imm: wc.imm_data });
                    }
                    WcOpcode::RdmaWrite if wc.wr_id == NOTIFY => {}
                    WcOpcode::RdmaWrite => out.push(Completion::Sent { peer, channel: ch, token: wc.wr_id }),
                    other => {
                        return Err(TransportError::new(
                            Some(peer),
                            format!("an unexpected completion {other:?}"),
                        ))
                    }
                }
            }
            if n < self.wc.len() {
                break;
            }
        }
        // credits held for a full queue: the completions just reaped made room
        for (peer, ch, imm) in std::mem::take(&mut self.ranks[r].credit_backlog) {
            self.post(r, peer, ch, 0, 0, imm, NOTIFY)?;
        }
        Ok(())
    }

    /// Rank `r`'s transport.
    pub fn view(&mut self, r: usize) -> RankView<'_> {
        RankView { h: self, rank: r }
    }
}

/// Rank `rank`'s [`Transport`].
pub(crate) struct RankView<'a> {
    h: &'a mut Hosts,
    rank: usize,
}

impl RankView<'_> {
    fn check(&self, peer: usize, ch: usize, slot: usize) -> Result<(), TransportError> {
        let l = self.h.layout;
        if peer >= self.h.ranks.len() || peer == self.rank || ch >= l.channels || slot >= l.slots {
            return Err(TransportError::new(Some(peer), format!("no slot ({peer}, {ch}, {slot})")));
        }
        Ok(())
    }
}

impl Transport for RankView<'_> {
    fn now_ns(&self) -> u64 {
        self.h.mesh.now() / PS_PER_NS
    }

    fn carries_data(&self) -> bool {
        self.h.payload
    }

    fn stage(
        &mut self,
        peer: usize,
        channel: usize,
        slot: usize,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), TransportError> {
        self.check(peer, channel, slot)?;
        let r = self.rank;
        self.h.connect(r, peer)?;
        let off = self.h.offset(channel, slot);
        let sb = self.h.layout.slot_bytes;
        match self.h.ranks[r].peers[peer].as_mut() {
            Some(p) => {
                f(&mut p.staging[off..off + sb]);
                Ok(())
            }
            None => Err(TransportError::new(Some(peer), format!("rank {r} is not connected to {peer}"))),
        }
    }

    fn read_slot(
        &self,
        peer: usize,
        channel: usize,
        slot: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TransportError> {
        self.check(peer, channel, slot)?;
        let off = self.h.offset(channel, slot);
        match self.h.ranks[self.rank].peers.get(peer).and_then(|p| p.as_ref()) {
            Some(p) => {
                f(&p.recv[off..off + self.h.layout.slot_bytes]);
                Ok(())
            }
            None => {
                Err(TransportError::new(Some(peer), format!("rank {} is not connected to {peer}", self.rank)))
            }
        }
    }

    fn write(
        &mut self,
        peer: usize,
        channel: usize,
        slot: usize,
        len: usize,
        imm: u32,
        token: u64,
    ) -> Result<(), TransportError> {
        self.check(peer, channel, slot)?;
        if len == 0 || len > self.h.layout.slot_bytes || token == NOTIFY {
            return Err(TransportError::new(Some(peer), format!("bad write of {len} bytes")));
        }
        self.h.post(self.rank, peer, channel, slot, len, imm, token)
    }

    fn notify(&mut self, peer: usize, channel: usize, imm: u32) -> Result<(), TransportError> {
        self.check(peer, channel, 0)?;
        self.h.post(self.rank, peer, channel, 0, 0, imm, NOTIFY)
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<(), TransportError> {
        self.h.reap(self.rank, out)
    }
}
