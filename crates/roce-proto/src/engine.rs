//! The engine: one RDMA device as a sans-IO state machine (quinn-proto style).
//!
//! ```text
//! engine.post_send(qpn, wr) / post_recv(qpn, wr)        from the application
//! engine.handle_datagram(now, &meta, bytes)            from the network
//! engine.poll_transmit(now, &mut buf) -> Option<Transmit>   to the network
//! engine.poll_timeout() -> Option<Instant>; handle_timeout(now)
//! engine.poll_cq(cq, &mut [Wc])                         completions
//! ```
//!
//! A datagram is the UDP payload of a RoCEv2 packet (BTH through ICRC); the
//! driver tells the engine the addresses, ports and ECN bits it came with.
//! Since the ICRC covers the IP and UDP headers, the engine rebuilds them from
//! that metadata: IPv4 with DF set, no options, and the Identification the
//! driver reports.
//!
//! * Sending, the engine computes the ICRC for ID 0, the ID an unconnected
//!   Linux UDP socket with DF set writes (`ip_select_ident`); a driver whose
//!   packets leave with another ID (the segments of a GSO send) fixes the
//!   ICRC with [`roce_wire::icrc::Ipv4IdIcrc::delta`].
//! * Receiving, a driver on a UDP socket cannot see the ID (`ipv4_id:
//!   None`). The engine then checks the ICRC for *some* ID and learns which
//!   one ([`IcrcCheck::Ipv4IdInferred`]): a check 16 bits weaker than the
//!   full ICRC (see `roce_wire::icrc::Ipv4IdIcrc`). A driver that sees the
//!   real header passes the ID and gets the full check.

use core::net::IpAddr;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use roce_wire::icrc::{self, Ipv4IdCache, NetHeader};
use roce_wire::{Psn, RocePacket, RocePacketRepr, Transport};

use crate::counters::Counters;
use crate::cq::Cq;
use crate::mem::EngineId;
use crate::mr::{sge_total, Mr, MrTable};
use crate::qp::{self, InlineData, Qp, RecvWqe, SendWqe};
use crate::time::Instant;
use crate::verbs::*;
use crate::{completer, requester, responder};

/// Device-wide settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The GID table: the IP addresses of this device (index = sgid_index).
    pub gids: Vec<Gid>,
    /// UDP destination port of RoCEv2 (4791), used when an address vector
    /// names no port.
    pub udp_port: u16,
    /// UDP source port of every packet. A driver on one kernel socket must
    /// set it to the socket's port (the ICRC covers it); `None` gives each QP
    /// its own port for ECMP entropy (Annex A17.4.2), as a NIC does.
    pub fixed_src_port: Option<u16>,
    /// The P_Key of the single partition (default full membership 0xFFFF).
    pub pkey: u16,
    /// Largest number of unacknowledged request PSNs per QP (send window).
    pub max_unacked_psns: u32,
    /// Ask for an ACK at least every this many packets of a long message.
    pub ack_req_every: u32,
    /// Mark outgoing packets ECN-capable (ECT(0)).
    pub ecn: bool,
    /// Device limits.
    pub max_qp: usize,
    pub max_cqe: usize,
    pub max_mr: usize,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_inline: u32,
    pub max_msg_size: u64,
}

impl EngineConfig {
    pub fn new(gids: Vec<Gid>) -> EngineConfig {
        EngineConfig {
            gids,
            udp_port: roce_wire::ROCE_PORT,
            fixed_src_port: None,
            pkey: roce_wire::bth::DEFAULT_PKEY,
            max_unacked_psns: 256,
            ack_req_every: 64,
            ecn: true,
            max_qp: 1 << 16,
            max_cqe: 1 << 20,
            max_mr: 1 << 20,
            max_qp_wr: 1 << 14,
            max_sge: 32,
            max_inline: 512,
            max_msg_size: 1 << 31,
        }
    }
}

/// Where a datagram came from / goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DatagramMeta {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    /// ECN codepoint of the IP header (0..=3; 3 is CE).
    pub ecn: u8,
    /// IPv4 Identification, if the driver knows it (see module docs).
    pub ipv4_id: Option<u16>,
}

/// What the ICRC check of a received datagram found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcrcCheck {
    /// The ICRC matches the headers as the driver described them (IPv6, or
    /// IPv4 with the Identification given).
    Verified,
    /// IPv4 whose Identification the driver could not see: the ICRC is
    /// right for this ID and for no other (16 of its 32 bits spent on
    /// finding the ID).
    Ipv4IdInferred(u16),
    /// The ICRC does not match: dropped and counted in `icrc_errors`.
    Failed,
    /// Too short to hold a BTH and ICRC, or the addresses mix IPv4 and IPv6:
    /// dropped and counted in `malformed_dropped`.
    Malformed,
}

/// A datagram the engine wants sent: `len` bytes at the start of the buffer
/// given to `poll_transmit` form the UDP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transmit {
    pub meta: DatagramMeta,
    /// DSCP << 2 | ECN, for IP_TOS / IPV6_TCLASS.
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
    pub len: usize,
    /// The source QP (for drivers that shard or trace by QP).
    pub qpn: u32,
}

/// A shared receive queue.
#[derive(Debug)]
pub(crate) struct Srq {
    pub pd: PdId,
    pub max_wr: u32,
    pub max_sge: u32,
    pub wqes: VecDeque<RecvWqe>,
    /// Raise `SrqLimitReached` when the queue drops below this (0 = disarmed).
    pub limit: u32,
    pub users: usize,
}

/// Everything a QP's roles share: memory, completion queues, counters.
pub(crate) struct Res {
    pub cfg: EngineConfig,
    pub pds: BTreeMap<u32, usize>,
    pub mrs: MrTable,
    pub cqs: BTreeMap<u32, Cq>,
    pub srqs: BTreeMap<u32, Srq>,
    pub counters: Counters,
    pub events: VecDeque<AsyncEvent>,
}

impl Res {
    /// Delivers a completion; a full CQ overflows (and raises CQ_ERR once).
    pub fn complete(&mut self, cq: CqId, wc: Wc) {
        if let Some(c) = self.cqs.get_mut(&cq.0) {
            let was = c.overflowed;
            if !c.push(wc) && !was {
                self.events.push_back(AsyncEvent::CqErr(cq));
            }
        }
    }

    /// Takes the next receive WQE of a QP (its SRQ if it has one).
    pub fn take_recv(&mut self, qp: &mut Qp) -> Option<RecvWqe> {
        match qp.init.srq {
            None => qp.rq.pop_front(),
            Some(id) => {
                let srq = self.srqs.get_mut(&id.0)?;
                let w = srq.wqes.pop_front();
                if srq.limit > 0 && (srq.wqes.len() as u32) < srq.limit {
                    srq.limit = 0;
                    self.events.push_back(AsyncEvent::SrqLimitReached(id));
                }
                w
            }
        }
    }

    /// Puts back a receive WQE taken for a message that was abandoned.
    pub fn untake_recv(&mut self, qp: &mut Qp, w: RecvWqe) {
        match qp.init.srq {
            None => qp.rq.push_front(w),
            Some(id) => {
                if let Some(srq) = self.srqs.get_mut(&id.0) {
                    srq.wqes.push_front(w)
                }
            }
        }
    }
}

/// The NIC.
pub struct Engine {
    res: Res,
    rng: ChaCha20Rng,
    /// Solvers for the IPv4 ID of received packets, by length.
    ipv4_ids: Ipv4IdCache,
    qps: BTreeMap<u32, Qp>,
    ready: VecDeque<u32>,
    timers: BTreeSet<(Instant, u32)>,
    next_pd: u32,
    next_cq: u32,
    next_srq: u32,
}

impl Engine {
    /// A device with the given configuration; `seed` drives every
    /// identifier the engine draws (QPNs, keys, PSNs) through ChaCha20.
    pub fn new(cfg: EngineConfig, seed: u64) -> Engine {
        Engine {
            res: Res {
                cfg,
                pds: BTreeMap::new(),
                mrs: MrTable::new(EngineId::fresh()),
                cqs: BTreeMap::new(),
                srqs: BTreeMap::new(),
                counters: Counters::default(),
                events: VecDeque::new(),
            },
            rng: ChaCha20Rng::seed_from_u64(seed),
            ipv4_ids: Ipv4IdCache::default(),
            qps: BTreeMap::new(),
            ready: VecDeque::new(),
            timers: BTreeSet::new(),
            next_pd: 1,
            next_cq: 1,
            next_srq: 1,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.res.cfg
    }

    pub fn counters(&self) -> &Counters {
        &self.res.counters
    }

    /// Next asynchronous event, if any.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.res.events.pop_front()
    }

    /// A random initial PSN (IBTA leaves the choice to the consumer; a
    /// predictable one eases spoofing).
    pub fn random_psn(&mut self) -> Psn {
        Psn::new(self.rng.next_u32())
    }

    // ----------------------------------------------------------------- PD / MR

    pub fn alloc_pd(&mut self) -> PdId {
        let id = self.next_pd;
        self.next_pd += 1;
        self.res.pds.insert(id, 0);
        PdId(id)
    }

    /// Frees a PD; refused while MRs, QPs or SRQs use it.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), VerbsError> {
        let users = *self.res.pds.get(&pd.0).ok_or(VerbsError::NotFound("PD"))?;
        if users > 0 || self.res.mrs.count_in_pd(pd) > 0 {
            return Err(VerbsError::Busy("PD has MRs, QPs or SRQs"));
        }
        self.res.pds.remove(&pd.0);
        Ok(())
    }

    /// A fresh 32-bit key, unique among all L_Keys and R_Keys, never 0.
    fn fresh_key(&mut self) -> u32 {
        loop {
            let k = self.rng.next_u32();
            if k != 0 && !self.res.mrs.contains_key(k) {
                return k;
            }
        }
    }

    /// Registers memory (`ibv_reg_mr`). Remote Write or Remote Atomic
    /// require Local Write (IBTA §10.6.3.1, C10-52). A buffer serves one
    /// engine at a time: registering one that another engine's regions use
    /// fails with [`VerbsError::BufferOnOtherDevice`] (see [`MemBuf`](crate::MemBuf)).
    pub fn reg_mr(&mut self, pd: PdId, spec: MrSpec) -> Result<MrKeys, VerbsError> {
        if !self.res.pds.contains_key(&pd.0) {
            return Err(VerbsError::NotFound("PD"));
        }
        let a = spec.access;
        if (a.contains(Access::REMOTE_WRITE) || a.contains(Access::REMOTE_ATOMIC))
            && !a.contains(Access::LOCAL_WRITE)
        {
            return Err(VerbsError::Invalid("remote write/atomic access requires local write"));
        }
        if a.0 & !Access::ALL.0 != 0 {
            return Err(VerbsError::Invalid("unknown access flags"));
        }
        match spec.offset.checked_add(spec.length) {
            Some(end) if end <= spec.buf.len() => {}
            _ => return Err(VerbsError::Invalid("region lies outside the buffer")),
        }
        if self.res.mrs.count_in_pd(pd) >= self.res.cfg.max_mr {
            return Err(VerbsError::NoResources("MRs"));
        }
        let iova = spec.iova.unwrap_or(spec.buf.addr() + spec.offset as u64);
        if iova.checked_add(spec.length as u64).is_none() {
            return Err(VerbsError::Invalid("iova + length overflows"));
        }
        // Bound before the keys are drawn: a refusal leaves no trace.
        let buf = self.res.mrs.bind(spec.buf)?;
        let lkey = self.fresh_key();
        let rkey = loop {
            let k = self.fresh_key();
            if k != lkey {
                break k;
            }
        };
        self.res.mrs.insert(Mr {
            pd,
            buf,
            offset: spec.offset,
            length: spec.length,
            iova,
            access: a,
            lkey,
            rkey,
            valid: true,
        });
        Ok(MrKeys { lkey, rkey, addr: iova, length: spec.length as u64 })
    }

    pub fn dereg_mr(&mut self, lkey: u32) -> Result<(), VerbsError> {
        self.res.mrs.remove(lkey).map(|_| ()).ok_or(VerbsError::NotFound("MR"))
    }

    /// Copies bytes `[offset, offset + dst.len())` of the region `lkey`
    /// names (offsets into the region) into `dst`: the application's safe
    /// access to registered memory. Sound while the NIC works on the same
    /// memory: `&mut self` keeps this engine from executing anything
    /// meanwhile, and the buffer is bound to this engine alone (see
    /// [`MemBuf`](crate::MemBuf)). Access flags and remote invalidation do
    /// not apply: they guard the memory against the network, not against
    /// its owner. The verbs contract still says when the bytes mean
    /// something (a WRITE in progress may have placed half its data).
    pub fn mr_read(&mut self, lkey: u32, offset: usize, dst: &mut [u8]) -> Result<(), VerbsError> {
        self.res.mrs.app_read(lkey, offset, dst)
    }

    /// Copies `src` into the region `lkey` names at `offset`; see
    /// [`Engine::mr_read`].
    pub fn mr_write(&mut self, lkey: u32, offset: usize, src: &[u8]) -> Result<(), VerbsError> {
        self.res.mrs.app_write(lkey, offset, src)
    }

    /// Sets bytes `[offset, offset + n)` of the region `lkey` names to
    /// `byte`; see [`Engine::mr_read`].
    pub fn mr_fill(&mut self, lkey: u32, offset: usize, n: usize, byte: u8) -> Result<(), VerbsError> {
        self.res.mrs.app_fill(lkey, offset, n, byte)
    }

    // --------------------------------------------------------------------- CQ

    pub fn create_cq(&mut self, depth: usize) -> Result<CqId, VerbsError> {
        if depth == 0 || depth > self.res.cfg.max_cqe {
            return Err(VerbsError::Invalid("CQ depth out of range"));
        }
        let id = self.next_cq;
        self.next_cq += 1;
        self.res.cqs.insert(id, Cq::new(depth));
        Ok(CqId(id))
    }

    pub fn destroy_cq(&mut self, cq: CqId) -> Result<(), VerbsError> {
        let c = self.res.cqs.get(&cq.0).ok_or(VerbsError::NotFound("CQ"))?;
        if c.users > 0 {
            return Err(VerbsError::Busy("CQ is used by QPs"));
        }
        self.res.cqs.remove(&cq.0);
        Ok(())
    }

    /// Takes up to `out.len()` completions (`ibv_poll_cq`). An overflowed CQ
    /// returns `CqOverflow`.
    pub fn poll_cq(&mut self, cq: CqId, out: &mut [Wc]) -> Result<usize, VerbsError> {
        let c = self.res.cqs.get_mut(&cq.0).ok_or(VerbsError::NotFound("CQ"))?;
        if c.overflowed {
            return Err(VerbsError::CqOverflow);
        }
        let n = out.len().min(c.entries.len());
        for (slot, wc) in out.iter_mut().zip(c.entries.drain(..n)) {
            *slot = wc;
        }
        Ok(n)
    }

    /// Completions waiting in a CQ.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.res.cqs.get(&cq.0).map_or(0, |c| c.entries.len())
    }

    // -------------------------------------------------------------------- SRQ

    pub fn create_srq(&mut self, pd: PdId, max_wr: u32, max_sge: u32) -> Result<SrqId, VerbsError> {
        if !self.res.pds.contains_key(&pd.0) {
            return Err(VerbsError::NotFound("PD"));
        }
        if max_wr == 0 || max_wr > self.res.cfg.max_qp_wr || max_sge > self.res.cfg.max_sge {
            return Err(VerbsError::Invalid("SRQ size out of range"));
        }
        let id = self.next_srq;
        self.next_srq += 1;
        *self.res.pds.get_mut(&pd.0).unwrap() += 1;
        self.res.srqs.insert(id, Srq { pd, max_wr, max_sge, wqes: VecDeque::new(), limit: 0, users: 0 });
        Ok(SrqId(id))
    }

    /// Arms the SRQ limit event (`ibv_modify_srq` with IBV_SRQ_LIMIT).
    pub fn arm_srq_limit(&mut self, srq: SrqId, limit: u32) -> Result<(), VerbsError> {
        let s = self.res.srqs.get_mut(&srq.0).ok_or(VerbsError::NotFound("SRQ"))?;
        if limit > s.max_wr {
            return Err(VerbsError::Invalid("limit exceeds SRQ size"));
        }
        s.limit = limit;
        Ok(())
    }

    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<(), VerbsError> {
        let s = self.res.srqs.get(&srq.0).ok_or(VerbsError::NotFound("SRQ"))?;
        if s.users > 0 {
            return Err(VerbsError::Busy("SRQ is used by QPs"));
        }
        let pd = s.pd;
        self.res.srqs.remove(&srq.0);
        if let Some(u) = self.res.pds.get_mut(&pd.0) {
            *u -= 1;
        }
        Ok(())
    }

    pub fn post_srq_recv(&mut self, srq: SrqId, wr: RecvWr) -> Result<(), VerbsError> {
        let s = self.res.srqs.get_mut(&srq.0).ok_or(VerbsError::NotFound("SRQ"))?;
        if wr.sg_list.len() > s.max_sge as usize {
            return Err(VerbsError::Invalid("too many SGEs"));
        }
        if s.wqes.len() >= s.max_wr as usize {
            return Err(VerbsError::QueueFull("SRQ"));
        }
        let length = sge_total(&wr.sg_list);
        s.wqes.push_back(RecvWqe { wr, length });
        Ok(())
    }

    // --------------------------------------------------------------------- QP

    /// Creates a QP in RESET with a random, unique 24-bit QPN (never 0 or 1,
    /// the special QPs).
    pub fn create_qp(&mut self, init: QpInitAttr) -> Result<u32, VerbsError> {
        let r = &self.res;
        if !r.pds.contains_key(&init.pd.0) {
            return Err(VerbsError::NotFound("PD"));
        }
        if !r.cqs.contains_key(&init.send_cq.0) || !r.cqs.contains_key(&init.recv_cq.0) {
            return Err(VerbsError::NotFound("CQ"));
        }
        if let Some(s) = init.srq {
            let srq = r.srqs.get(&s.0).ok_or(VerbsError::NotFound("SRQ"))?;
            if srq.pd != init.pd {
                return Err(VerbsError::Invalid("SRQ belongs to another PD"));
            }
        }
        let c = &init.cap;
        if c.max_send_wr == 0
            || c.max_send_wr > r.cfg.max_qp_wr
            || c.max_recv_wr > r.cfg.max_qp_wr
            || c.max_send_sge > r.cfg.max_sge
            || c.max_recv_sge > r.cfg.max_sge
            || c.max_inline_data > r.cfg.max_inline
        {
            return Err(VerbsError::Invalid("QP capabilities exceed the device limits"));
        }
        if self.qps.len() >= r.cfg.max_qp {
            return Err(VerbsError::NoResources("QPs"));
        }
        let qpn = loop {
            let n = self.rng.next_u32() & 0x00ff_ffff;
            if n > 1 && !self.qps.contains_key(&n) {
                break n;
            }
        };
        // Flow entropy in the dynamic port range, as rxe derives it from the QPN.
        let sport = 0xc000 | (self.rng.next_u32() as u16 & 0x3fff);
        *self.res.pds.get_mut(&init.pd.0).unwrap() += 1;
        self.res.cqs.get_mut(&init.send_cq.0).unwrap().users += 1;
        self.res.cqs.get_mut(&init.recv_cq.0).unwrap().users += 1;
        if let Some(s) = init.srq {
            self.res.srqs.get_mut(&s.0).unwrap().users += 1;
        }
        self.qps.insert(qpn, Qp::new(qpn, init, sport));
        Ok(qpn)
    }

    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        let qp = self.qps.remove(&qpn).ok_or(VerbsError::NotFound("QP"))?;
        if let Some(t) = qp.timer_key {
            self.timers.remove(&(t, qpn));
        }
        self.ready.retain(|&q| q != qpn);
        let i = qp.init;
        for cq in [i.send_cq, i.recv_cq] {
            if let Some(c) = self.res.cqs.get_mut(&cq.0) {
                c.users -= 1;
            }
        }
        if let Some(s) = i.srq.and_then(|s| self.res.srqs.get_mut(&s.0)) {
            s.users -= 1;
        }
        if let Some(u) = self.res.pds.get_mut(&i.pd.0) {
            *u -= 1;
        }
        Ok(())
    }

    /// Current state and attributes of a QP (`ibv_query_qp`).
    pub fn query_qp(&self, qpn: u32) -> Result<QpAttr, VerbsError> {
        let qp = self.qps.get(&qpn).ok_or(VerbsError::NotFound("QP"))?;
        let mut a = qp.attr;
        a.qp_state = qp.state;
        a.cur_qp_state = qp.state;
        a.sq_psn = qp.req.psn;
        a.rq_psn = qp.resp.epsn;
        Ok(a)
    }

    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.qps.get(&qpn).map(|q| q.state)
    }

    pub fn qp_type(&self, qpn: u32) -> Option<QpType> {
        self.qps.get(&qpn).map(|q| q.init.qp_type)
    }

    /// `ibv_modify_qp`: checks the transition and the attribute mask against
    /// the table of ibv_modify_qp(3), validates values, applies them.
    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr, mask: AttrMask) -> Result<(), VerbsError> {
        let qp = self.qps.get(&qpn).ok_or(VerbsError::NotFound("QP"))?;
        let to = qp::check_modify(qp, attr, mask)?;
        if mask.contains(AttrMask::AV) {
            let sgid = self
                .res
                .cfg
                .gids
                .get(usize::from(attr.av.sgid_index))
                .ok_or(VerbsError::Invalid("sgid_index"))?;
            if sgid.is_ipv4() != attr.av.dgid.is_ipv4() {
                return Err(VerbsError::Invalid("source and destination GIDs are of different IP families"));
            }
        }
        let qp = self.qps.get_mut(&qpn).unwrap();
        let from = qp.state;
        qp::apply_attrs(qp, attr, mask);
        match to {
            QpState::Reset => reset_qp(qp),
            QpState::Err if from != QpState::Err => completer::enter_error(qp, &mut self.res),
            QpState::Sqd => {
                qp.state = QpState::Sqd;
                requester::check_drained(qp, &mut self.res);
            }
            _ => qp.state = to,
        }
        self.schedule(qpn);
        self.sync_timer(qpn);
        Ok(())
    }

    /// Posts a send work request (`ibv_post_send`). A QP in ERR (or SQE)
    /// completes it at once with WR_FLUSH_ERR.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound("QP"))?;
        let cfg = &self.res.cfg;
        match qp.state {
            QpState::Rts | QpState::Sqd | QpState::Err | QpState::Sqe => {}
            s => return Err(VerbsError::BadState(s)),
        }
        if qp.sq.len() >= qp.init.cap.max_send_wr as usize {
            return Err(VerbsError::QueueFull("send queue"));
        }
        if wr.sg_list.len() > qp.init.cap.max_send_sge as usize {
            return Err(VerbsError::Invalid("more SGEs than max_send_sge"));
        }
        let t = qp.init.qp_type;
        match (&wr.op, t) {
            (SendOp::Send | SendOp::SendWithImm { .. }, _) => {}
            (SendOp::SendWithInv { .. }, QpType::Rc | QpType::Uc) => {}
            (SendOp::Write { .. } | SendOp::WriteWithImm { .. }, QpType::Rc | QpType::Uc) => {}
            (SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }, QpType::Rc) => {}
            _ => return Err(VerbsError::Invalid("operation not supported on this QP type")),
        }
        let length = sge_total(&wr.sg_list);
        if length > cfg.max_msg_size {
            return Err(VerbsError::Invalid("message larger than max_msg_size"));
        }
        if t == QpType::Ud {
            if wr.ud.is_none() {
                return Err(VerbsError::Invalid("UD send needs a destination"));
            }
            if length > qp.mtu() as u64 {
                return Err(VerbsError::Invalid("UD message larger than the MTU"));
            }
        }
        let remote = match wr.op {
            SendOp::Write { remote_addr, .. }
            | SendOp::WriteWithImm { remote_addr, .. }
            | SendOp::Read { remote_addr, .. }
            | SendOp::CompareSwap { remote_addr, .. }
            | SendOp::FetchAdd { remote_addr, .. } => Some(remote_addr),
            _ => None,
        };
        if remote.is_some_and(|a| a.checked_add(length.max(8)).is_none()) {
            return Err(VerbsError::Invalid("remote address + length overflows 64 bits"));
        }
        if wr.op.is_atomic() {
            if length != 8 || wr.sg_list.len() != 1 {
                return Err(VerbsError::Invalid("atomics take one 8-byte SGE"));
            }
            let addr = match wr.op {
                SendOp::CompareSwap { remote_addr, .. } | SendOp::FetchAdd { remote_addr, .. } => remote_addr,
                _ => 0,
            };
            if addr % 8 != 0 {
                return Err(VerbsError::Invalid("atomic remote address not 8-byte aligned"));
            }
        }
        if wr.op.is_read_or_atomic() && qp.attr.max_rd_atomic == 0 {
            return Err(VerbsError::Invalid("max_rd_atomic is 0: no RDMA READ or atomics on this QP"));
        }
        let inline_data = if wr.inline {
            if wr.op.is_read_or_atomic() {
                return Err(VerbsError::Invalid("inline READ or atomic"));
            }
            if length > u64::from(qp.init.cap.max_inline_data) {
                return Err(VerbsError::Invalid("inline data larger than max_inline_data"));
            }
            let mut data = InlineData::zeroed(length as usize);
            self.res
                .mrs
                .gather(&wr.sg_list, qp.init.pd, 0, data.as_mut_slice())
                .map_err(|_| VerbsError::Access("inline data SGE not readable"))?;
            Some(data)
        } else {
            None
        };
        let signaled = wr.signaled || qp.init.sq_sig_all;
        qp.sq.push_back(SendWqe {
            wr,
            inline_data,
            length,
            signaled,
            first_psn: Psn::ZERO,
            last_psn: Psn::ZERO,
            started: false,
            read_done: 0,
            done: None,
        });
        if matches!(qp.state, QpState::Err | QpState::Sqe) {
            completer::flush_send(qp, &mut self.res);
        }
        self.schedule(qpn);
        Ok(())
    }

    /// Posts a receive work request (`ibv_post_recv`).
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound("QP"))?;
        if qp.init.srq.is_some() {
            return Err(VerbsError::Invalid("QP uses an SRQ"));
        }
        if qp.state == QpState::Reset {
            return Err(VerbsError::BadState(QpState::Reset));
        }
        if qp.rq.len() >= qp.init.cap.max_recv_wr as usize {
            return Err(VerbsError::QueueFull("receive queue"));
        }
        if wr.sg_list.len() > qp.init.cap.max_recv_sge as usize {
            return Err(VerbsError::Invalid("more SGEs than max_recv_sge"));
        }
        let length = sge_total(&wr.sg_list);
        qp.rq.push_back(RecvWqe { wr, length });
        if qp.state == QpState::Err {
            completer::flush_recv(qp, &mut self.res);
        }
        Ok(())
    }

    // ---------------------------------------------------------------- network

    /// Handles one received datagram (the UDP payload: BTH through ICRC).
    /// Returns what the ICRC check found; everything after it (drops by
    /// reason, the roles' work) shows in the counters and completions.
    pub fn handle_datagram(&mut self, now: Instant, meta: &DatagramMeta, bytes: &[u8]) -> IcrcCheck {
        let check = self.check_icrc(meta, bytes);
        if matches!(check, IcrcCheck::Verified | IcrcCheck::Ipv4IdInferred(_)) {
            self.handle_checked(now, meta, bytes);
        }
        check
    }

    /// Counts the datagram and checks its ICRC (see the module docs).
    fn check_icrc(&mut self, meta: &DatagramMeta, bytes: &[u8]) -> IcrcCheck {
        let c = &mut self.res.counters;
        c.rcvd_pkts += 1;
        if bytes.len() < roce_wire::packet::MIN_LEN {
            c.malformed_dropped += 1;
            return IcrcCheck::Malformed;
        }
        let (body, crc) = bytes.split_at(bytes.len() - icrc::ICRC_LEN);
        let Some(want) = datagram_icrc(meta, body) else {
            c.malformed_dropped += 1;
            return IcrcCheck::Malformed;
        };
        let got = u32::from_le_bytes(crc.try_into().expect("ICRC_LEN bytes"));
        let inferred = meta.src.is_ipv4() && meta.ipv4_id.is_none();
        let check = if !inferred {
            if got == want {
                IcrcCheck::Verified
            } else {
                IcrcCheck::Failed
            }
        } else if got == want {
            // `datagram_icrc` computed it for ID 0.
            IcrcCheck::Ipv4IdInferred(0)
        } else {
            match self.ipv4_ids.get(body.len()).solve(want, got) {
                Some(id) => IcrcCheck::Ipv4IdInferred(id),
                None => IcrcCheck::Failed,
            }
        };
        match check {
            IcrcCheck::Failed => c.icrc_errors += 1,
            IcrcCheck::Ipv4IdInferred(_) => c.icrc_ipv4_id_inferred += 1,
            _ => {}
        }
        check
    }

    /// Handles a datagram whose ICRC is right.
    fn handle_checked(&mut self, now: Instant, meta: &DatagramMeta, bytes: &[u8]) {
        let c = &mut self.res.counters;
        let pkt = match RocePacket::new_checked(bytes)
            .and_then(|v| RocePacketRepr::parse_view(&v).map(|p| (v, p)))
        {
            Ok((v, p)) => (v.opcode_info(), p),
            Err(_) => {
                c.malformed_dropped += 1;
                return;
            }
        };
        let (info, pkt) = pkt;
        if meta.ecn == 3 {
            c.ecn_ce_rcvd += 1;
        }
        if info.transport == Transport::Cnp {
            c.cnp_rcvd += 1;
            return;
        }
        if pkt.bth.pkey & 0x7fff != self.res.cfg.pkey & 0x7fff {
            c.pkey_violation_dropped += 1;
            return;
        }
        let qpn = pkt.bth.dest_qp;
        let Some(qp) = self.qps.get_mut(&qpn) else {
            c.unknown_qp_dropped += 1;
            return;
        };
        let matches = matches!(
            (info.transport, qp.init.qp_type),
            (Transport::Rc, QpType::Rc) | (Transport::Uc, QpType::Uc) | (Transport::Ud, QpType::Ud)
        );
        if !matches {
            c.transport_mismatch_dropped += 1;
            return;
        }
        if info.request {
            responder::handle_request(qp, &mut self.res, now, meta, info, &pkt);
        } else {
            completer::handle_response(qp, &mut self.res, now, info, &pkt);
        }
        schedule(&mut self.ready, qp);
        sync_timer(&mut self.timers, qp);
    }

    /// Produces the next datagram to send, if any: one packet per QP in
    /// turn, each QP alternating between its requests and its responses.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(qpn) = self.ready.pop_front() {
            let Some(qp) = self.qps.get_mut(&qpn) else { continue };
            qp.scheduled = false;
            // A QP alternates: a request, then a response, so neither
            // direction starves the other; a request goes first so that a
            // reply the application just posted leaves before the ACK of the
            // message it answers.
            let len = if qp.resp_turn {
                responder::poll_transmit(qp, &mut self.res, buf)
                    .or_else(|| requester::poll_transmit(qp, &mut self.res, now, buf))
            } else {
                requester::poll_transmit(qp, &mut self.res, now, buf)
                    .or_else(|| responder::poll_transmit(qp, &mut self.res, buf))
            };
            qp.resp_turn = !qp.resp_turn;
            let Some(len) = len else {
                sync_timer(&mut self.timers, qp);
                continue;
            };
            let tx = finish(&self.res.cfg, qp, buf, len);
            self.res.counters.sent_pkts += 1;
            schedule(&mut self.ready, qp);
            sync_timer(&mut self.timers, qp);
            return Some(tx);
        }
        None
    }

    /// True when some QP may have a packet to send (`poll_transmit` may
    /// still find it has none): lets a driver skip an idle flush.
    pub fn has_transmit(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The earliest time `handle_timeout` wants to be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// Runs the timers due at `now` (ACK timeouts, RNR back-off).
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(t, qpn)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.remove(&(t, qpn));
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.timer_key = None;
                completer::handle_timer(qp, &mut self.res, now);
                schedule(&mut self.ready, qp);
                sync_timer(&mut self.timers, qp);
            }
        }
    }

    fn schedule(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            schedule(&mut self.ready, qp);
        }
    }

    fn sync_timer(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            sync_timer(&mut self.timers, qp);
        }
    }

    /// QPNs in ascending order.
    pub fn qpns(&self) -> impl Iterator<Item = u32> + '_ {
        self.qps.keys().copied()
    }

    /// Send WRs posted and not yet completed on a QP.
    pub fn sq_outstanding(&self, qpn: u32) -> usize {
        self.qps.get(&qpn).map_or(0, |q| q.sq.len())
    }
}

/// Puts a QP on the ready list (once).
fn schedule(ready: &mut VecDeque<u32>, qp: &mut Qp) {
    if !qp.scheduled {
        qp.scheduled = true;
        ready.push_back(qp.qpn);
    }
}

/// Keeps the timer set in step with the QP's deadlines.
fn sync_timer(timers: &mut BTreeSet<(Instant, u32)>, qp: &mut Qp) {
    let want = match (qp.comp.ack_deadline, qp.comp.rnr_until) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if want != qp.timer_key {
        if let Some(old) = qp.timer_key {
            timers.remove(&(old, qp.qpn));
        }
        if let Some(new) = want {
            timers.insert((new, qp.qpn));
        }
        qp.timer_key = want;
    }
}

/// Fills in the ICRC and the transmit metadata for a packet of `len`
/// bytes (BTH through ICRC) that a role wrote into `buf`.
fn finish(cfg: &EngineConfig, qp: &Qp, buf: &mut [u8], len: usize) -> Transmit {
    let av = qp.av();
    let ud_dest = buf_dest_override(qp);
    let av = ud_dest.as_ref().map_or(av, |d| &d.av);
    let (dst, tclass, hop, flow) = (av.dgid, av.traffic_class, av.hop_limit, av.flow_label);
    let src = cfg.gids.get(usize::from(av.sgid_index)).copied().unwrap_or(dst);
    let ecn = if cfg.ecn { 2 } else { 0 };
    let meta = DatagramMeta {
        src,
        dst,
        src_port: cfg.fixed_src_port.unwrap_or(qp.udp_sport),
        dst_port: av.udp_port.unwrap_or(cfg.udp_port),
        ecn,
        ipv4_id: Some(0),
    };
    if let Some(crc) = datagram_icrc(&meta, &buf[..len - icrc::ICRC_LEN]) {
        buf[len - icrc::ICRC_LEN..len].copy_from_slice(&crc.to_le_bytes());
    }
    Transmit { meta, traffic_class: (tclass & !3) | ecn, hop_limit: hop, flow_label: flow, len, qpn: qp.qpn }
}

/// For UD the destination comes from the WR being sent; the requester records
/// it on the QP before returning the packet.
fn buf_dest_override(qp: &Qp) -> Option<UdDest> {
    if qp.init.qp_type == QpType::Ud {
        qp.req.last_ud_dest
    } else {
        None
    }
}

/// Back to RESET: queues emptied without completions, state cleared.
fn reset_qp(qp: &mut Qp) {
    let (qpn, init, sport) = (qp.qpn, qp.init, qp.udp_sport);
    let (scheduled, timer_key) = (qp.scheduled, qp.timer_key);
    *qp = Qp::new(qpn, init, sport);
    qp.scheduled = scheduled;
    qp.timer_key = timer_key;
}

/// The ICRC of a RoCEv2 datagram with this metadata: over the IP and UDP
/// headers it travels in, rebuilt from `meta` (see the module docs), and
/// `body` (BTH through pad). `None` if the addresses mix IPv4 and IPv6 or
/// the datagram is too long for IP.
pub fn datagram_icrc(meta: &DatagramMeta, body: &[u8]) -> Option<u32> {
    let (hdr, hlen, net) = ip_udp_header(meta, body.len() + icrc::ICRC_LEN)?;
    Some(icrc::compute_split(&hdr[..hlen], body, net))
}

/// The IP and UDP headers a datagram travels in, as the ICRC sees them.
/// Returns the bytes, their length and the header kind.
pub(crate) fn ip_udp_header(
    meta: &DatagramMeta,
    transport_len: usize,
) -> Option<([u8; 48], usize, NetHeader)> {
    let mut h = [0u8; 48];
    let udp_len = 8 + transport_len;
    let (ip_len, net) = match (meta.src, meta.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = u16::try_from(20 + udp_len).ok()?;
            h[0] = 0x45;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[4..6].copy_from_slice(&meta.ipv4_id.unwrap_or(0).to_be_bytes());
            h[6] = 0x40; // DF
            h[9] = 17;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            (20, NetHeader::Ipv4)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let plen = u16::try_from(udp_len).ok()?;
            h[0] = 0x60;
            h[4..6].copy_from_slice(&plen.to_be_bytes());
            h[6] = 17;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
            (40, NetHeader::Ipv6)
        }
        _ => return None,
    };
    let u = &mut h[ip_len..ip_len + 8];
    u[0..2].copy_from_slice(&meta.src_port.to_be_bytes());
    u[2..4].copy_from_slice(&meta.dst_port.to_be_bytes());
    u[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    Some((h, ip_len + 8, net))
}
