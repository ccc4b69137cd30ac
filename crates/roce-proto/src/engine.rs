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
//! Inside, a QP is its shared core (`qp::QpCore`: attributes, queues,
//! timers) and three roles that each own their state, as in Linux rxe: the
//! `requester` turns WQEs into packets, the `responder` executes incoming
//! requests, the `completer` retires WQEs from responses and timers and
//! moves the requester back to retransmit. A role that meets a fatal error
//! raises it on the core; the engine settles it when the role returns, in
//! one place (`QpEntry::enter_error`). Each QP's timers are a table of
//! kinds; the engine keeps every QP's earliest deadline in one ordered set.
//! QPs transmit in round robin, one packet (or one `poll_transmit_batch`
//! run of equal datagrams) per turn. See `datagram` for how the IP/UDP
//! header under the ICRC is rebuilt.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use roce_wire::icrc::{self, Ipv4IdCache};
use roce_wire::{BthRepr, ExtHeaders, Psn, RocePacket, RocePacketRepr, Transport};
use rustc_hash::FxHashMap;

pub use crate::config::{CnpConfig, EngineConfig, MrAddressing};
pub use crate::datagram::{datagram_icrc, DatagramMeta, IcrcCheck, Transmit, MAX_DATAGRAM};

use crate::cc::{Dcqcn, NotificationPoint, Pacer, RttProbe};
use crate::completer::Completer;
use crate::counters::Counters;
use crate::cq::Cq;
use crate::crypto::{OpenError, QpCrypto, QpKeys};
use crate::limits;
use crate::mem::EngineId;
use crate::mr::{sge_total, Mr, MrTable};
use crate::qp::{self, PeerCheck, QpCore};
use crate::requester::Requester;
use crate::res::{Res, Srq};
use crate::responder::Responder;
use crate::time::Instant;
use crate::timers::TimerKind;
use crate::verbs::*;
use crate::wqe::{InlineData, RecvWqe, SendWqe};

/// The NIC.
pub struct Engine {
    res: Res,
    rng: ChaCha20Rng,
    /// Solvers for the IPv4 ID of received packets, by length.
    ipv4_ids: Ipv4IdCache,
    /// By QPN. Every packet looks its QP up: a hash map with a
    /// multiplicative hash (QPNs are the engine's own, drawn at random, so
    /// a keyed hash's defence against chosen keys buys nothing here).
    qps: FxHashMap<u32, QpEntry>,
    ready: VecDeque<u32>,
    timers: BTreeSet<(Instant, u32)>,
    next_pd: u32,
    next_cq: u32,
    next_srq: u32,
    /// A datagram produced for a batch it could not join, handed out next
    /// (allocated once, `MAX_DATAGRAM` bytes).
    stash: Option<Transmit>,
    stash_buf: Vec<u8>,
    /// Where a protected datagram is opened (`MAX_DATAGRAM` bytes).
    plain_buf: Vec<u8>,
    /// Some QP was ever given keys.
    any_protected: bool,
}

/// A QP's send rate under congestion control: the reaction point and the
/// pacer that spaces its requests at the reaction point's rate.
#[derive(Debug)]
struct QpRate {
    dcqcn: Dcqcn,
    pacer: Pacer,
    /// Cuts already added to the device's `cc_rate_cuts`.
    counted_cuts: u64,
    /// Request to ACK times (DCQCN does not use them; they are reported).
    rtt: RttProbe,
}

impl QpRate {
    /// After any event: the cuts it made go to the device's counter (a
    /// periodic reaction cuts on a timer, not on the CNP) and the
    /// controller's next timer to the QP's table.
    fn settle(&mut self, res: &mut Res, timers: &mut crate::timers::Timers) {
        let cuts = self.dcqcn.rate_cuts();
        res.counters.cc_rate_cuts += cuts - self.counted_cuts;
        self.counted_cuts = cuts;
        timers.set(TimerKind::Cc, self.dcqcn.next_timer());
    }
}

/// What congestion control says of one QP (`Engine::qp_rate`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QpRateState {
    /// The rate the QP's requests are paced at, bits/s.
    pub rate_bps: u64,
    /// DCQCN's target rate, bits/s.
    pub target_bps: u64,
    /// DCQCN's alpha (congestion estimate, 0..=1).
    pub alpha: f64,
    /// Rate cuts so far.
    pub cuts: u64,
    /// Smoothed round-trip time of the QP's requests (request packet to
    /// the response that acknowledges it), once measured.
    pub rtt: Option<crate::time::Duration>,
    /// RTT samples taken.
    pub rtt_samples: u64,
}

/// Bits of a random region address: below 2^63, page aligned.
const RANDOM_IOVA_MASK: u64 = 0x7fff_ffff_ffff_f000;

impl Engine {
    /// A device with the given configuration; `seed` drives every
    /// identifier the engine draws (QPNs, keys, PSNs) through ChaCha20.
    /// Deterministic, for tests and the simulator: 64 bits of seed can be
    /// searched by whoever sees enough identifiers. A device facing a
    /// network takes `with_key_seed` and 256 bits from the OS.
    pub fn new(cfg: EngineConfig, seed: u64) -> Engine {
        Engine::with_rng(cfg, ChaCha20Rng::seed_from_u64(seed))
    }

    /// Like `new`, with a full 256-bit ChaCha20 key as the seed.
    pub fn with_key_seed(cfg: EngineConfig, seed: [u8; 32]) -> Engine {
        Engine::with_rng(cfg, ChaCha20Rng::from_seed(seed))
    }

    fn with_rng(cfg: EngineConfig, rng: ChaCha20Rng) -> Engine {
        Engine {
            res: Res {
                cfg,
                pds: BTreeMap::new(),
                mrs: MrTable::new(EngineId::fresh()),
                cqs: BTreeMap::new(),
                srqs: BTreeMap::new(),
                counters: Counters::default(),
                events: VecDeque::new(),
                completions_made: 0,
            },
            rng,
            ipv4_ids: Ipv4IdCache::default(),
            qps: FxHashMap::default(),
            ready: VecDeque::new(),
            timers: BTreeSet::new(),
            next_pd: 1,
            next_cq: 1,
            next_srq: 1,
            stash: None,
            stash_buf: vec![0; MAX_DATAGRAM],
            plain_buf: vec![0; MAX_DATAGRAM],
            any_protected: false,
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

    /// How many completions the engine has delivered to its CQs so far
    /// (wrapping): unchanged across a call that produced none.
    pub fn completions_made(&self) -> u64 {
        self.res.completions_made
    }

    /// Whether an asynchronous event is waiting for `poll_event`.
    pub fn has_event(&self) -> bool {
        !self.res.events.is_empty()
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
        let users = *self.res.pds.get(&pd.0).ok_or(VerbsError::NotFound(Object::Pd))?;
        if users > 0 || self.res.mrs.count_in_pd(pd) > 0 {
            return Err(VerbsError::InUse(Object::Pd));
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
    /// require Local Write (IBTA §10.6.3.1, C10-52). The address peers use
    /// is the spec's `iova`, else 0 with `Access::ZERO_BASED`, else what
    /// `EngineConfig::mr_addressing` says (the memory's address, as
    /// ibverbs does, by default). A buffer serves one
    /// engine at a time: registering one that another engine's regions use
    /// fails with [`VerbsError::BufferOnOtherDevice`] (see [`MemBuf`](crate::MemBuf)).
    pub fn reg_mr(&mut self, pd: PdId, spec: MrSpec) -> Result<MrKeys, VerbsError> {
        if !self.res.pds.contains_key(&pd.0) {
            return Err(VerbsError::NotFound(Object::Pd));
        }
        let a = spec.access;
        if (a.contains(Access::REMOTE_WRITE) || a.contains(Access::REMOTE_ATOMIC))
            && !a.contains(Access::LOCAL_WRITE)
        {
            return Err(Invalid::RemoteAccessWithoutLocalWrite.into());
        }
        let known = Access::ALL.union(Access::ZERO_BASED).0;
        if a.0 & !known != 0 {
            return Err(Invalid::UnknownAccessFlags(a.0 & !known).into());
        }
        if a.contains(Access::ZERO_BASED) && spec.iova.is_some_and(|v| v != 0) {
            return Err(Invalid::ZeroBasedWithIova.into());
        }
        match spec.offset.checked_add(spec.length) {
            Some(end) if end <= spec.buf.len() => {}
            _ => {
                return Err(Invalid::RegionOutsideBuffer {
                    offset: spec.offset,
                    length: spec.length,
                    size: spec.buf.len(),
                }
                .into())
            }
        }
        if self.res.mrs.count_in_pd(pd) >= self.res.cfg.max_mr {
            return Err(VerbsError::NoResources(Object::Mr));
        }
        let pointer = spec.buf.addr() + spec.offset as u64;
        let iova = match (spec.iova, a.contains(Access::ZERO_BASED), self.res.cfg.mr_addressing) {
            (Some(v), _, _) => v,
            (None, true, _) | (None, false, MrAddressing::ZeroBased) => 0,
            (None, false, MrAddressing::Pointer) => pointer,
            // 2^51 page-sized slots below 2^63; the page offset of the
            // memory is kept, so alignment (atomics) is the same.
            (None, false, MrAddressing::Random) => {
                (self.rng.next_u64() & RANDOM_IOVA_MASK) | (pointer & 0xfff)
            }
        };
        if iova.checked_add(spec.length as u64).is_none() {
            return Err(Invalid::IovaOverflow { iova, length: spec.length }.into());
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
        self.res.mrs.remove(lkey).map(|_| ()).ok_or(VerbsError::NotFound(Object::Mr))
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
            return Err(Invalid::CqDepth { depth, max: self.res.cfg.max_cqe }.into());
        }
        let id = self.next_cq;
        self.next_cq += 1;
        self.res.cqs.insert(id, Cq::new(depth));
        Ok(CqId(id))
    }

    pub fn destroy_cq(&mut self, cq: CqId) -> Result<(), VerbsError> {
        let c = self.res.cqs.get(&cq.0).ok_or(VerbsError::NotFound(Object::Cq))?;
        if c.users > 0 {
            return Err(VerbsError::InUse(Object::Cq));
        }
        self.res.cqs.remove(&cq.0);
        Ok(())
    }

    /// Takes up to `out.len()` completions (`ibv_poll_cq`). An overflowed CQ
    /// returns `CqOverflow`.
    pub fn poll_cq(&mut self, cq: CqId, out: &mut [Wc]) -> Result<usize, VerbsError> {
        let c = self.res.cqs.get_mut(&cq.0).ok_or(VerbsError::NotFound(Object::Cq))?;
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
            return Err(VerbsError::NotFound(Object::Pd));
        }
        if max_wr == 0 || max_wr > self.res.cfg.max_qp_wr || max_sge > self.res.cfg.max_sge {
            return Err(Invalid::SrqSize {
                max_wr,
                max_sge,
                max_qp_wr: self.res.cfg.max_qp_wr,
                max_sge_limit: self.res.cfg.max_sge,
            }
            .into());
        }
        let id = self.next_srq;
        self.next_srq += 1;
        *self.res.pds.get_mut(&pd.0).unwrap() += 1;
        self.res.srqs.insert(id, Srq { pd, max_wr, max_sge, wqes: VecDeque::new(), limit: 0, users: 0 });
        Ok(SrqId(id))
    }

    /// Arms the SRQ limit event (`ibv_modify_srq` with IBV_SRQ_LIMIT).
    pub fn arm_srq_limit(&mut self, srq: SrqId, limit: u32) -> Result<(), VerbsError> {
        let s = self.res.srqs.get_mut(&srq.0).ok_or(VerbsError::NotFound(Object::Srq))?;
        if limit > s.max_wr {
            return Err(Invalid::SrqLimit { limit, max_wr: s.max_wr }.into());
        }
        s.limit = limit;
        Ok(())
    }

    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<(), VerbsError> {
        let s = self.res.srqs.get(&srq.0).ok_or(VerbsError::NotFound(Object::Srq))?;
        if s.users > 0 {
            return Err(VerbsError::InUse(Object::Srq));
        }
        let pd = s.pd;
        self.res.srqs.remove(&srq.0);
        if let Some(u) = self.res.pds.get_mut(&pd.0) {
            *u -= 1;
        }
        Ok(())
    }

    pub fn post_srq_recv(&mut self, srq: SrqId, wr: RecvWr) -> Result<(), VerbsError> {
        let s = self.res.srqs.get_mut(&srq.0).ok_or(VerbsError::NotFound(Object::Srq))?;
        if wr.sg_list.len() > s.max_sge as usize {
            return Err(Invalid::TooManySges {
                given: wr.sg_list.len(),
                max: s.max_sge,
                queue: WorkQueue::Srq,
            }
            .into());
        }
        if s.wqes.len() >= s.max_wr as usize {
            return Err(VerbsError::QueueFull(WorkQueue::Srq));
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
            return Err(VerbsError::NotFound(Object::Pd));
        }
        if !r.cqs.contains_key(&init.send_cq.0) || !r.cqs.contains_key(&init.recv_cq.0) {
            return Err(VerbsError::NotFound(Object::Cq));
        }
        if let Some(s) = init.srq {
            let srq = r.srqs.get(&s.0).ok_or(VerbsError::NotFound(Object::Srq))?;
            if srq.pd != init.pd {
                return Err(Invalid::SrqInOtherPd.into());
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
            return Err(Invalid::QpCaps(*c).into());
        }
        if self.qps.len() >= r.cfg.max_qp {
            return Err(VerbsError::NoResources(Object::Qp));
        }
        let qpn = loop {
            let n = self.rng.next_u32() & limits::QPN_MASK;
            if n > 1 && !self.qps.contains_key(&n) {
                break n;
            }
        };
        // Flow entropy in the dynamic port range, as rxe derives it from the QPN.
        let sport = limits::UDP_SPORT_BASE | (self.rng.next_u32() as u16 & limits::UDP_SPORT_MASK);
        *self.res.pds.get_mut(&init.pd.0).expect("checked") += 1;
        self.res.cqs.get_mut(&init.send_cq.0).expect("checked").users += 1;
        self.res.cqs.get_mut(&init.recv_cq.0).expect("checked").users += 1;
        if let Some(s) = init.srq {
            self.res.srqs.get_mut(&s.0).expect("checked").users += 1;
        }
        self.qps.insert(qpn, QpEntry::new(QpCore::new(qpn, init, sport)));
        Ok(qpn)
    }

    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        let qp = self.qps.remove(&qpn).ok_or(VerbsError::NotFound(Object::Qp))?;
        if let Some(t) = qp.timer_key {
            self.timers.remove(&(t, qpn));
        }
        self.ready.retain(|&q| q != qpn);
        let i = qp.core.init;
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
        let qp = self.qps.get(&qpn).ok_or(VerbsError::NotFound(Object::Qp))?;
        let mut a = qp.core.attr;
        a.qp_state = qp.core.state;
        a.cur_qp_state = qp.core.state;
        a.sq_psn = qp.req.psn();
        a.rq_psn = qp.resp.epsn();
        Ok(a)
    }

    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.qps.get(&qpn).map(|q| q.core.state)
    }

    pub fn qp_type(&self, qpn: u32) -> Option<QpType> {
        self.qps.get(&qpn).map(|q| q.core.init.qp_type)
    }

    /// Checks an address vector against the GID table: the source GID
    /// exists and is of the destination's IP family (what `modify_qp` and
    /// a UD `post_send` check; drivers check address handles with it).
    pub fn check_av(&self, av: &AddressVector) -> Result<(), VerbsError> {
        let sgid = self
            .res
            .cfg
            .gids
            .get(usize::from(av.sgid_index))
            .ok_or(VerbsError::Invalid(Invalid::SgidIndex(av.sgid_index)))?;
        if sgid.is_ipv4() != av.dgid.is_ipv4() {
            return Err(Invalid::MixedIpFamilies.into());
        }
        Ok(())
    }

    /// `ibv_modify_qp`: checks the transition and the attribute mask against
    /// the table of ibv_modify_qp(3), validates values, applies them.
    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr, mask: AttrMask) -> Result<(), VerbsError> {
        let qp = self.qps.get(&qpn).ok_or(VerbsError::NotFound(Object::Qp))?;
        let to = qp::check_modify(&qp.core, attr, mask)?;
        if mask.contains(AttrMask::AV) {
            self.check_av(&attr.av)?;
        }
        let qp = self.qps.get_mut(&qpn).expect("looked up above");
        let from = qp.core.state;
        qp::apply_attrs(&mut qp.core, attr, mask);
        if mask.contains(AttrMask::AV) {
            qp.core.forget_peer_port();
        }
        if mask.contains(AttrMask::SQ_PSN) {
            qp.req.start_at(attr.sq_psn);
            qp.comp.start_at(attr.sq_psn);
        }
        if mask.contains(AttrMask::RQ_PSN) {
            qp.resp.start_at(attr.rq_psn);
        }
        if mask.contains(AttrMask::RETRY_CNT) {
            qp.comp.set_retry_cnt(attr.retry_cnt);
        }
        if mask.contains(AttrMask::RNR_RETRY) {
            qp.comp.set_rnr_retry(attr.rnr_retry);
        }
        match to {
            QpState::Reset => qp.reset(),
            QpState::Err if from != QpState::Err => qp.enter_error(&mut self.res),
            QpState::Sqd => {
                qp.core.state = QpState::Sqd;
                qp.check_drained(&mut self.res);
            }
            _ => qp.core.state = to,
        }
        self.schedule(qpn);
        self.sync_timer(qpn);
        Ok(())
    }

    /// Posts a send work request (`ibv_post_send`). A QP in ERR (or SQE)
    /// completes it at once with WR_FLUSH_ERR.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        self.post_send_with(qpn, wr, None)
    }

    /// Posts an inline send whose bytes the caller hands over: `data` is
    /// what the SGEs name, concatenated, read by the caller at post time.
    /// ibverbs' `IBV_SEND_INLINE` lets those SGEs name memory no region
    /// covers (their L_Keys are not checked), which only the caller, a C
    /// library reading the program's memory, can read.
    pub fn post_send_inline(&mut self, qpn: u32, mut wr: SendWr, data: &[u8]) -> Result<(), VerbsError> {
        wr.inline = true;
        self.post_send_with(qpn, wr, Some(data))
    }

    fn post_send_with(&mut self, qpn: u32, wr: SendWr, given: Option<&[u8]>) -> Result<(), VerbsError> {
        if let Some(d) = &wr.ud {
            self.check_av(&d.av)?;
        }
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound(Object::Qp))?;
        let q = &mut qp.core;
        let cfg = &self.res.cfg;
        match q.state {
            QpState::Rts | QpState::Sqd | QpState::Err | QpState::Sqe => {}
            s => return Err(VerbsError::BadState(s)),
        }
        if q.sq.len() >= q.init.cap.max_send_wr as usize {
            return Err(VerbsError::QueueFull(WorkQueue::Send));
        }
        if wr.sg_list.len() > q.init.cap.max_send_sge as usize {
            return Err(Invalid::TooManySges {
                given: wr.sg_list.len(),
                max: q.init.cap.max_send_sge,
                queue: WorkQueue::Send,
            }
            .into());
        }
        let t = q.init.qp_type;
        match (&wr.op, t) {
            (SendOp::Send | SendOp::SendWithImm { .. }, _) => {}
            (SendOp::SendWithInv { .. }, QpType::Rc | QpType::Uc) => {}
            (SendOp::Write { .. } | SendOp::WriteWithImm { .. }, QpType::Rc | QpType::Uc) => {}
            (SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }, QpType::Rc) => {}
            _ => return Err(Invalid::OpNotSupported { op: wr.op, qp_type: t }.into()),
        }
        let length = sge_total(&wr.sg_list);
        if length > cfg.max_msg_size {
            return Err(Invalid::MessageTooLong { length, max: cfg.max_msg_size }.into());
        }
        if t == QpType::Ud {
            if wr.ud.is_none() {
                return Err(Invalid::UdWithoutDestination.into());
            }
            if length > q.mtu() as u64 {
                return Err(Invalid::MessageTooLong { length, max: q.mtu() as u64 }.into());
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
            return Err(Invalid::RemoteRangeOverflow.into());
        }
        if wr.op.is_atomic() {
            if length != 8 || wr.sg_list.len() != 1 {
                return Err(Invalid::AtomicSge.into());
            }
            let addr = match wr.op {
                SendOp::CompareSwap { remote_addr, .. } | SendOp::FetchAdd { remote_addr, .. } => remote_addr,
                _ => 0,
            };
            if addr % 8 != 0 {
                return Err(Invalid::AtomicAlignment(addr).into());
            }
        }
        if wr.op.is_read_or_atomic() && q.attr.max_rd_atomic == 0 {
            return Err(Invalid::NoReadAtomicInitiator.into());
        }
        let inline_data = if wr.inline {
            if wr.op.is_read_or_atomic() {
                return Err(Invalid::InlineReadAtomic.into());
            }
            if length > u64::from(q.init.cap.max_inline_data) {
                return Err(Invalid::InlineTooLong { length, max: q.init.cap.max_inline_data }.into());
            }
            let mut data = InlineData::zeroed(length as usize);
            match given {
                Some(d) if d.len() as u64 == length => data.as_mut_slice().copy_from_slice(d),
                Some(d) => return Err(Invalid::InlineDataLength { given: d.len(), length }.into()),
                None => self
                    .res
                    .mrs
                    .gather(&wr.sg_list, q.init.pd, 0, data.as_mut_slice())
                    .map_err(|_| VerbsError::LocalProtection)?,
            }
            Some(data)
        } else {
            None
        };
        let signaled = wr.signaled || q.init.sq_sig_all;
        q.sq.push_back(SendWqe {
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
        if matches!(q.state, QpState::Err | QpState::Sqe) {
            q.flush_send(&mut self.res);
            qp.req.abort(&qp.core);
        }
        self.schedule(qpn);
        Ok(())
    }

    /// Posts a receive work request (`ibv_post_recv`).
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let q = &mut self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound(Object::Qp))?.core;
        if q.init.srq.is_some() {
            return Err(Invalid::QpUsesSrq.into());
        }
        if q.state == QpState::Reset {
            return Err(VerbsError::BadState(QpState::Reset));
        }
        if q.rq.len() >= q.init.cap.max_recv_wr as usize {
            return Err(VerbsError::QueueFull(WorkQueue::Recv));
        }
        if wr.sg_list.len() > q.init.cap.max_recv_sge as usize {
            return Err(Invalid::TooManySges {
                given: wr.sg_list.len(),
                max: q.init.cap.max_recv_sge,
                queue: WorkQueue::Recv,
            }
            .into());
        }
        let length = sge_total(&wr.sg_list);
        q.rq.push_back(RecvWqe { wr, length });
        if q.state == QpState::Err {
            q.flush_recv(&mut self.res);
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
            self.handle_verified(now, meta, bytes);
        }
        check
    }

    /// Opens the datagram first if its QP is protected (`crypto`).
    fn handle_verified(&mut self, now: Instant, meta: &DatagramMeta, bytes: &[u8]) {
        // Nothing more per packet on a device that never protected a QP.
        if !self.any_protected {
            return self.handle_checked(now, meta, bytes);
        }
        let qpn = u32::from_be_bytes([0, bytes[5], bytes[6], bytes[7]]);
        let info = roce_wire::opcode::lookup(bytes[0]);
        let protected = info.is_some_and(|i| i.transport != Transport::Cnp)
            && self.qps.get(&qpn).is_some_and(|q| q.crypto.is_some());
        let (Some(info), true) = (info, protected) else {
            return self.handle_checked(now, meta, bytes);
        };
        let hdr_len = roce_wire::bth::HEADER_LEN + info.headers.len_bytes();
        let mut plain = std::mem::take(&mut self.plain_buf);
        let c = self.qps.get_mut(&qpn).and_then(|q| q.crypto.as_mut()).expect("checked above");
        match c.open(bytes, hdr_len, &mut plain) {
            Ok(n) => self.handle_checked(now, meta, &plain[..n]),
            Err(OpenError::Malformed) => self.res.counters.malformed_dropped += 1,
            Err(OpenError::Replay) => self.res.counters.crypto_replay_dropped += 1,
            Err(OpenError::Auth) => self.res.counters.crypto_auth_failed += 1,
        }
        self.plain_buf = plain;
    }

    /// Protects a connected QP's packets with AES-128-GCM from now on (see
    /// `crate::crypto` for the wire format). Both ends must set matching
    /// keys before either sends: only an RC or UC QP that has not reached
    /// RTS (RESET, INIT or RTR) takes them.
    pub fn set_qp_keys(&mut self, qpn: u32, keys: &QpKeys) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound(Object::Qp))?;
        if !matches!(qp.core.init.qp_type, QpType::Rc | QpType::Uc) {
            return Err(Invalid::CryptoNeedsConnectedQp.into());
        }
        if !matches!(qp.core.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(VerbsError::BadState(qp.core.state));
        }
        qp.crypto = Some(Box::new(QpCrypto::new(keys)));
        self.any_protected = true;
        Ok(())
    }

    /// The congestion-control state of a QP, once it has sent under an
    /// engine with `cc` set.
    pub fn qp_rate(&self, qpn: u32) -> Option<QpRateState> {
        let r = self.qps.get(&qpn)?.rate.as_ref()?;
        Some(QpRateState {
            rate_bps: r.dcqcn.rate_bps(),
            target_bps: r.dcqcn.target_rate_bps(),
            alpha: r.dcqcn.alpha(),
            cuts: r.dcqcn.rate_cuts(),
            rtt: r.rtt.smoothed(),
            rtt_samples: r.rtt.samples(),
        })
    }

    /// Counts the datagram and checks its ICRC (see `datagram`).
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
        let (info, pkt) = match RocePacket::new_checked(bytes)
            .and_then(|v| RocePacketRepr::parse_view(&v).map(|p| (v.opcode_info(), p)))
        {
            Ok(x) => x,
            Err(_) => {
                c.malformed_dropped += 1;
                return;
            }
        };
        if meta.ecn == 3 {
            c.ecn_ce_rcvd += 1;
        }
        let pin_port = self.res.cfg.pin_peer_port;
        if info.transport == Transport::Cnp {
            // Annex A17.9.3: a CNP names the QP whose packets were marked;
            // only that QP's peer may slow it down.
            match self.qps.get_mut(&pkt.bth.dest_qp) {
                None => c.cnp_dropped += 1,
                Some(qp) => match qp.core.peer_check(meta, pin_port) {
                    PeerCheck::Pass => {
                        c.cnp_rcvd += 1;
                        qp.on_cnp(&mut self.res, now);
                        sync_timer(&mut self.timers, qp);
                    }
                    PeerCheck::WrongAddress | PeerCheck::WrongPort => c.cnp_dropped += 1,
                },
            }
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
            (info.transport, qp.core.init.qp_type),
            (Transport::Rc, QpType::Rc) | (Transport::Uc, QpType::Uc) | (Transport::Ud, QpType::Ud)
        );
        if !matches {
            c.transport_mismatch_dropped += 1;
            return;
        }
        match qp.core.peer_check(meta, pin_port) {
            PeerCheck::Pass => {}
            PeerCheck::WrongAddress if info.request => {
                c.addr_mismatch_dropped += 1;
                return;
            }
            PeerCheck::WrongAddress => {
                c.response_addr_mismatch_dropped += 1;
                return;
            }
            PeerCheck::WrongPort => {
                c.port_mismatch_dropped += 1;
                return;
            }
        }
        if meta.ecn == 3 && self.res.cfg.cnp.enabled {
            qp.mark_congested(&self.res.cfg, now);
        }
        let res = &mut self.res;
        if info.request {
            qp.resp.handle_request(&mut qp.core, res, now, meta, info, &pkt);
        } else {
            qp.comp.handle_response(&mut qp.req, &mut qp.core, res, now, info, &pkt);
            if let Some(rate) = &mut qp.rate {
                rate.rtt.on_acked(qp.comp.psn(), now);
            }
            qp.settle(res);
            qp.check_drained(res);
        }
        qp.settle(res);
        schedule(&mut self.ready, qp);
        sync_timer(&mut self.timers, qp);
    }

    /// Produces the next datagram to send, if any: one packet per QP in
    /// turn, each QP alternating between its requests and its responses.
    /// `buf` must hold `MAX_DATAGRAM` bytes.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some(tx) = self.stash.take() {
            buf[..tx.len].copy_from_slice(&self.stash_buf[..tx.len]);
            return Some(tx);
        }
        self.produce_one(now, buf)
    }

    /// Like `poll_transmit`, but hands out up to `max_segments` datagrams
    /// of one QP at once when they have the same length and addresses (the
    /// last may be shorter), laid end to end in `buf`: what a driver sends
    /// as one UDP GSO message. The QP's turn in the round robin covers the
    /// whole batch. `buf` must hold `MAX_DATAGRAM` bytes; a batch grows
    /// while another datagram fits.
    pub fn poll_transmit_batch(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        max_segments: usize,
    ) -> Option<Transmit> {
        let mut tx = self.poll_transmit(now, buf)?;
        let (qpn, seg) = (tx.qpn, tx.len);
        while tx.segments() < max_segments && buf.len() - tx.len >= MAX_DATAGRAM {
            let Some(qp) = self.qps.get_mut(&qpn) else { break };
            let at = tx.len;
            let Some(len) = qp.produce(&mut self.res, now, &mut buf[at..]) else { break };
            let Some(next) = finish(&self.res.cfg, qp, &mut buf[at..at + MAX_DATAGRAM], len) else {
                self.res.counters.emit_errors += 1;
                continue;
            };
            self.res.counters.sent_pkts += 1;
            let same = next.meta == tx.meta && next.traffic_class == tx.traffic_class && next.len <= seg;
            if !same {
                // Not of this batch: it leaves on its own, next.
                self.stash_buf[..next.len].copy_from_slice(&buf[at..at + next.len]);
                self.stash = Some(next);
                break;
            }
            tx.len += next.len;
            if next.len < seg {
                break;
            }
        }
        if let Some(qp) = self.qps.get_mut(&qpn) {
            if !qp.paced_out(now) {
                schedule(&mut self.ready, qp);
            }
            sync_timer(&mut self.timers, qp);
        }
        tx.segment_size = seg;
        Some(tx)
    }

    /// The next packet of the next ready QP.
    fn produce_one(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(qpn) = self.ready.pop_front() {
            let Some(qp) = self.qps.get_mut(&qpn) else { continue };
            qp.scheduled = false;
            let len = qp.produce(&mut self.res, now, buf);
            let Some(len) = len else {
                sync_timer(&mut self.timers, qp);
                continue;
            };
            let tx = finish(&self.res.cfg, qp, buf, len);
            if !qp.paced_out(now) {
                schedule(&mut self.ready, qp);
            }
            sync_timer(&mut self.timers, qp);
            match tx {
                Some(tx) => {
                    self.res.counters.sent_pkts += 1;
                    return Some(tx);
                }
                None => self.res.counters.emit_errors += 1,
            }
        }
        None
    }

    /// True when some QP may have a packet to send (`poll_transmit` may
    /// still find it has none): lets a driver skip an idle flush.
    pub fn has_transmit(&self) -> bool {
        self.stash.is_some() || !self.ready.is_empty()
    }

    /// The earliest time `handle_timeout` wants to be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// Runs the timers due at `now`, each by the role that armed it.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(t, qpn)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.remove(&(t, qpn));
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.timer_key = None;
                while let Some(kind) = qp.core.timers.take_next_due(now) {
                    match kind {
                        TimerKind::Ack | TimerKind::Rnr => {
                            qp.comp.on_timer(kind, &mut qp.req, &mut qp.core, &mut self.res, now)
                        }
                        // The QP is scheduled below: its next packet may go.
                        TimerKind::Pace => {}
                        TimerKind::Cc => qp.on_cc_timer(&mut self.res, now),
                    }
                    qp.settle(&mut self.res);
                }
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
        let mut v: Vec<u32> = self.qps.keys().copied().collect();
        v.sort_unstable();
        v.into_iter()
    }

    /// Send WRs posted and not yet completed on a QP.
    pub fn sq_outstanding(&self, qpn: u32) -> usize {
        self.qps.get(&qpn).map_or(0, |q| q.core.sq.len())
    }
}

/// A QP: its shared core and its three roles, each owning its own state.
struct QpEntry {
    core: QpCore,
    req: Requester,
    comp: Completer,
    resp: Responder,
    /// Present in the engine's ready list.
    scheduled: bool,
    /// Whose turn it is to transmit: the responder's (true) or the requester's.
    resp_turn: bool,
    /// Deadline registered in the engine's timer set.
    timer_key: Option<Instant>,
    /// Keys of a protected QP (`Engine::set_qp_keys`).
    crypto: Option<Box<QpCrypto>>,
    /// Congestion control of the requests (DCQCN and its pacer), made
    /// when the QP first sends under an engine with `cc` set.
    rate: Option<Box<QpRate>>,
    /// A CE mark asked for a CNP that has not left yet.
    cnp_due: bool,
    /// The notification point's spacing of CNPs, made at the first CE mark.
    np: Option<NotificationPoint>,
}

impl QpEntry {
    fn new(core: QpCore) -> QpEntry {
        QpEntry {
            core,
            req: Requester::default(),
            comp: Completer::default(),
            resp: Responder::default(),
            scheduled: false,
            resp_turn: false,
            timer_key: None,
            crypto: None,
            rate: None,
            cnp_due: false,
            np: None,
        }
    }

    /// A CNP from the peer: the reaction point cuts the rate.
    fn on_cnp(&mut self, res: &mut Res, now: Instant) {
        if let Some(r) = &mut self.rate {
            r.dcqcn.on_cnp(now);
            r.settle(res, &mut self.core.timers);
        }
    }

    /// The congestion controller's timers at `now`.
    fn on_cc_timer(&mut self, res: &mut Res, now: Instant) {
        if let Some(r) = &mut self.rate {
            r.dcqcn.on_timer(now);
            r.settle(res, &mut self.core.timers);
        }
    }

    /// A CE-marked packet of this QP arrived: queue a CNP to the peer's QP
    /// unless one was queued within `min_interval`. UD QPs have no single
    /// peer and are not answered.
    fn mark_congested(&mut self, cfg: &EngineConfig, now: Instant) {
        if !matches!(self.core.init.qp_type, QpType::Rc | QpType::Uc) || self.core.state == QpState::Err {
            return;
        }
        if self.cnp_due {
            return;
        }
        let np = self.np.get_or_insert_with(|| NotificationPoint::new(cfg.cnp.min_interval));
        self.cnp_due = np.should_send_cnp(now);
    }

    /// The CNP (Annex A17.9.3): BTH opcode 0x81 to the peer's QP, BECN
    /// set, PSN 0, then 16 reserved bytes and the ICRC.
    fn emit_cnp(&mut self, res: &mut Res, buf: &mut [u8]) -> Option<usize> {
        self.cnp_due = false;
        let repr = RocePacketRepr {
            bth: BthRepr {
                opcode: roce_wire::opcode::CNP,
                solicited: false,
                mig_req: false,
                pkey: res.cfg.pkey,
                fecn: false,
                becn: true,
                dest_qp: self.core.attr.dest_qp_num,
                ack_req: false,
                psn: Psn::new(0),
            },
            ext: ExtHeaders::default(),
            payload: &[],
        };
        let n = repr.buffer_len().ok()?;
        repr.emit(buf.get_mut(..n)?).ok()?;
        res.counters.cnp_sent += 1;
        Some(n)
    }

    /// Back to RESET: queues emptied without completions, every role's
    /// state cleared.
    fn reset(&mut self) {
        let (qpn, init, sport) = (self.core.qpn, self.core.init, self.core.udp_sport);
        let (scheduled, timer_key) = (self.scheduled, self.timer_key);
        *self = QpEntry::new(QpCore::new(qpn, init, sport));
        self.scheduled = scheduled;
        self.timer_key = timer_key;
    }

    /// The one way into the error state (IBTA vol. 1 §10.3.1: every
    /// outstanding WQE completes with WR_FLUSH_ERR, the one that failed with
    /// its own status): the state and the `QpFatal` event, the timers
    /// stopped, the roles' work dropped, both queues flushed.
    fn enter_error(&mut self, res: &mut Res) {
        self.core.set_error_state(res);
        self.resp.abort(&mut self.core, res);
        self.core.flush_send(res);
        self.core.flush_recv(res);
        self.req.abort(&self.core);
    }

    /// After a role ran: if it raised an error, end the QP now.
    fn settle(&mut self, res: &mut Res) {
        if self.core.take_error() {
            self.enter_error(res);
        }
    }

    /// In SQD, raise `SqDrained` once nothing is outstanding.
    fn check_drained(&mut self, res: &mut Res) {
        if self.core.state == QpState::Sqd
            && self.comp.psn() == self.req.psn()
            && self.req.at_message_boundary()
        {
            res.events.push_back(AsyncEvent::SqDrained(self.core.qpn));
        }
    }

    /// The next packet of this QP, alternating between a request and a
    /// response so that neither direction starves the other; a request goes
    /// first so that a reply the application just posted leaves before the
    /// ACK of the message it answers.
    /// After a packet: true when the QP's next turn could send nothing
    /// before its pacer allows (no CNP and no response waiting; every
    /// request is paced). Its pacing timer is then armed, and brings it
    /// back to the ready list, instead of a turn that finds it paced: a
    /// driver's `has_transmit` then means a packet can go now.
    fn paced_out(&mut self, now: Instant) -> bool {
        !self.cnp_due && !self.resp.has_output() && self.pacer_holds(now)
    }

    /// Whether the QP's pacer holds its next request at `now`; if so, the
    /// pacing timer is armed for its turn and brings the QP back.
    fn pacer_holds(&mut self, now: Instant) -> bool {
        match &self.rate {
            Some(rate) if !rate.pacer.ready(now) => {
                self.core.timers.set(TimerKind::Pace, Some(rate.pacer.next_send()));
                true
            }
            _ => false,
        }
    }

    fn produce(&mut self, res: &mut Res, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if self.cnp_due {
            if let Some(n) = self.emit_cnp(res, buf) {
                return Some(n);
            }
        }
        let len = if self.resp_turn {
            self.respond(res, buf).or_else(|| self.request(res, now, buf))
        } else {
            self.request(res, now, buf).or_else(|| self.respond(res, buf))
        };
        self.resp_turn = !self.resp_turn;
        len
    }

    fn request(&mut self, res: &mut Res, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if let (Some(p), QpType::Rc | QpType::Uc) = (res.cfg.cc.dcqcn(), self.core.init.qp_type) {
            self.rate.get_or_insert_with(|| {
                Box::new(QpRate {
                    dcqcn: Dcqcn::new(p.clone(), res.cfg.line_rate_bps, now),
                    pacer: Pacer::new(),
                    counted_cuts: 0,
                    rtt: RttProbe::new(),
                })
            });
            if self.pacer_holds(now) {
                return None;
            }
        }
        let r = self.req.poll_transmit(&mut self.core, res, now, self.comp.psn(), buf);
        if r.is_err() {
            self.settle(res);
            return None;
        }
        let len = r.ok().flatten()?;
        if let Some(rate) = &mut self.rate {
            // What the packet will cost on the wire, sealed if the QP is
            // protected (`finish` seals it after this).
            let seal = if self.crypto.is_some() { crate::crypto::OVERHEAD } else { 0 };
            let wire = (len + seal) as u64 + limits::wire_overhead(self.core.av().dgid);
            // A turn missed by at most `pacing_slack` is caught up (the
            // pacer was ready, so its turn is not after `now`).
            let floor = Instant(now.as_nanos().saturating_sub(res.cfg.pacing_slack.as_nanos()));
            rate.pacer.on_send(floor, wire, rate.dcqcn.rate_bps());
            rate.dcqcn.on_bytes_sent(wire, now);
            rate.settle(res, &mut self.core.timers);
            let bth = roce_wire::bth::Bth::new_unchecked(&buf[..len]);
            rate.rtt.on_sent(bth.psn(), bth.ack_req(), now);
        }
        if self.core.init.qp_type != QpType::Rc {
            self.comp.unreliable_sent(&self.req);
        }
        Some(len)
    }

    fn respond(&mut self, res: &mut Res, buf: &mut [u8]) -> Option<usize> {
        let len = self.resp.poll_transmit(&mut self.core, res, buf);
        self.settle(res);
        len
    }
}

/// Puts a QP on the ready list (once).
fn schedule(ready: &mut VecDeque<u32>, qp: &mut QpEntry) {
    if !qp.scheduled {
        qp.scheduled = true;
        ready.push_back(qp.core.qpn);
    }
}

/// Keeps the engine's timer set in step with the QP's earliest deadline.
fn sync_timer(timers: &mut BTreeSet<(Instant, u32)>, qp: &mut QpEntry) {
    let want = qp.core.timers.earliest();
    if want != qp.timer_key {
        if let Some(old) = qp.timer_key {
            timers.remove(&(old, qp.core.qpn));
        }
        if let Some(new) = want {
            timers.insert((new, qp.core.qpn));
        }
        qp.timer_key = want;
    }
}

/// Fills in the ICRC and the transmit metadata for a packet of `len`
/// bytes (BTH through ICRC) that a role wrote into `buf`. `None` if the ICRC
/// cannot be computed (the addresses mix IPv4 and IPv6, which post and
/// modify refuse): such a packet must not leave with stale ICRC bytes.
fn finish(cfg: &EngineConfig, qp: &mut QpEntry, buf: &mut [u8], len: usize) -> Option<Transmit> {
    let q = &qp.core;
    let ud_dest = if q.init.qp_type == QpType::Ud { qp.req.last_ud_dest() } else { None };
    let av = ud_dest.as_ref().map_or(q.av(), |d| &d.av);
    let (dst, tclass, hop, flow) = (av.dgid, av.traffic_class, av.hop_limit, av.flow_label);
    let src = *cfg.gids.get(usize::from(av.sgid_index))?;
    let ecn = if cfg.ecn { 2 } else { 0 };
    let meta = DatagramMeta {
        src,
        dst,
        src_port: cfg.fixed_src_port.unwrap_or(q.udp_sport),
        dst_port: av.udp_port.unwrap_or(cfg.udp_port),
        ecn,
        ipv4_id: Some(0),
    };
    let cnp = buf[0] == roce_wire::opcode::CNP;
    let tclass = match cfg.cnp.dscp {
        Some(d) if cnp => d << 2,
        _ => tclass,
    };
    let len = match &mut qp.crypto {
        Some(c) if !cnp => {
            let info = roce_wire::opcode::lookup(buf[0])?;
            c.seal(buf, len, roce_wire::bth::HEADER_LEN + info.headers.len_bytes())?
        }
        _ => len,
    };
    let crc = datagram_icrc(&meta, &buf[..len - icrc::ICRC_LEN])?;
    buf[len - icrc::ICRC_LEN..len].copy_from_slice(&crc.to_le_bytes());
    Some(Transmit {
        meta,
        traffic_class: (tclass & !3) | ecn,
        hop_limit: hop,
        flow_label: flow,
        len,
        segment_size: len,
        qpn: q.qpn,
    })
}
