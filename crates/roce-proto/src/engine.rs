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
pub use crate::datagram::{datagram_icrc, DatagramMeta, Hole, IcrcCheck, Transmit, MAX_DATAGRAM};

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

mod gsi;
mod post;
mod qp_entry;
mod receive;
mod transmit;

use qp_entry::{schedule, sync_timer, QpEntry};

/// The most room under the request budget one wake hands a waiting QP, in
/// path MTUs: a batch a driver sends as one GSO message, so that a QP woken
/// at the cap sends a run of packets, not one packet per wake.
const WAKE_GRANT_PKTS: u64 = 16;

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
    /// The connection manager behind QP 1 (`gsi`).
    cm: crate::cm::Cm,
    /// Its events after the engine's own handling.
    cm_events: VecDeque<crate::cm::CmEvent>,
    /// Connections the CM brings up: their QPs.
    cm_links: std::collections::HashMap<crate::cm::CmId, gsi::CmLink>,
    /// Accepted QPs whose first packet stands for the RTU.
    cm_comm_est: FxHashMap<u32, crate::cm::CmId>,
    /// Peer devices not on the RoCE port (two devices on one host).
    cm_peer_ports: std::collections::HashMap<core::net::IpAddr, u16>,
    /// PSN of QP 1's next MAD.
    gsi_psn: u32,
    /// The latest time the CM was handed (for what the engine does on its
    /// events, which come without a time).
    cm_now: Instant,
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

    fn with_rng(cfg: EngineConfig, mut rng: ChaCha20Rng) -> Engine {
        // The CM's CA GUID and comm IDs come from the engine's generator:
        // random per device, stable for its life (the peer keys stale
        // connections on the GUID).
        let local_ip =
            cfg.gids.first().copied().unwrap_or(core::net::IpAddr::V4(core::net::Ipv4Addr::UNSPECIFIED));
        let mut cm_cfg = crate::cm::CmConfig::new(local_ip, rng.next_u64() | 1);
        cm_cfg.path_mtu = cfg.cm_path_mtu as u8;
        let cm = crate::cm::Cm::new(cm_cfg, rng.next_u64());
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
                read_outstanding: 0,
                read_waiters: VecDeque::new(),
                tx_waiters: VecDeque::new(),
                tx_reserved: 0,
                tx_unacked: 0,
                holes: None,
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
            cm,
            cm_events: VecDeque::new(),
            cm_links: std::collections::HashMap::new(),
            cm_comm_est: FxHashMap::default(),
            cm_peer_ports: std::collections::HashMap::new(),
            gsi_psn: 0,
            cm_now: Instant::ZERO,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.res.cfg
    }

    /// Whether messages' bytes are moved or only their lengths travel
    /// (`EngineConfig::payload`). For a simulator between runs: it holds
    /// for what is sent and received from now on, so it is changed while
    /// nothing is in flight, on every engine of the fabric alike (the
    /// ICRC of one mode fails in the other).
    pub fn set_payload(&mut self, payload: crate::config::Payload) {
        self.res.cfg.payload = payload;
    }

    /// READ-response bytes this device asked for and has not received,
    /// across its QPs: held within `EngineConfig::rx_budget_bytes`.
    pub fn read_outstanding(&self) -> u64 {
        self.res.read_outstanding
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
        if users > 0 {
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
        // `max_mr` is the device's (ibv_device_attr), not a PD's: counting
        // every region also keeps registration O(log n), not a scan.
        if self.res.mrs.len() >= self.res.cfg.max_mr {
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
        *self.res.pds.get_mut(&pd.0).expect("checked") += 1;
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
        let mr = self.res.mrs.remove(lkey).ok_or(VerbsError::NotFound(Object::Mr))?;
        if let Some(u) = self.res.pds.get_mut(&mr.pd.0) {
            *u -= 1;
        }
        Ok(())
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
        let mut qp = self.qps.remove(&qpn).ok_or(VerbsError::NotFound(Object::Qp))?;
        qp.release_budgets(&mut self.res);
        self.wake_budget_waiters();
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
            QpState::Reset => {
                qp.release_budgets(&mut self.res);
                qp.reset();
            }
            QpState::Err if from != QpState::Err => qp.enter_error(&mut self.res),
            QpState::Sqd => {
                qp.core.state = QpState::Sqd;
                qp.check_drained(&mut self.res);
            }
            _ => qp.core.state = to,
        }
        self.schedule(qpn);
        self.sync_timer(qpn);
        self.wake_budget_waiters();
        Ok(())
    }

    /// Schedules the QPs whose requests waited for room under the device's
    /// READ or request budget, once there is some (responses arrived, a QP
    /// ended or rewound). Each tries again and waits again if the room is
    /// still too small.
    #[inline]
    pub(crate) fn wake_budget_waiters(&mut self) {
        self.wake_read_waiters();
        self.wake_tx_waiters();
    }

    /// READ waiters all try (their requests differ in size).
    #[inline]
    fn wake_read_waiters(&mut self) {
        if !self.res.read_waiters.is_empty() {
            self.wake_read_waiters_now();
        }
    }

    #[inline(never)]
    fn wake_read_waiters_now(&mut self) {
        if self.res.read_outstanding >= self.res.cfg.rx_budget_bytes {
            return;
        }
        let mut waiters = std::mem::take(&mut self.res.read_waiters);
        for qpn in waiters.drain(..) {
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.req.read_budget_woken();
                schedule(&mut self.ready, qp);
            }
        }
        self.res.read_waiters = waiters;
    }

    /// Request waiters are taken from the front, up to `WAKE_GRANT_PKTS`
    /// path MTUs of room each, so the work is in the QPs that can send.
    /// That room is set aside for them (`Res::tx_reserved`) until they use
    /// it or cannot: a QP that runs first for another reason (the one whose
    /// ACK freed the room) queues behind them instead of taking it, so the
    /// device's room goes first come first served and a woken QP is not
    /// turned away again. Nothing to do, and no work, while no QP waits.
    #[inline]
    pub(crate) fn wake_tx_waiters(&mut self) {
        if !self.res.tx_waiters.is_empty() {
            self.wake_tx_waiters_now();
        }
    }

    #[inline(never)]
    fn wake_tx_waiters_now(&mut self) {
        let r = &self.res;
        let mut room = match r.cfg.tx_budget_bytes {
            Some(cap) => cap.saturating_sub(r.tx_unacked + r.tx_reserved),
            None => u64::MAX,
        };
        while room > 0 {
            let Some(qpn) = self.res.tx_waiters.pop_front() else { break };
            if let Some(qp) = self.qps.get_mut(&qpn) {
                let grant = room.min(WAKE_GRANT_PKTS * qp.core.mtu() as u64);
                qp.req.tx_budget_woken(&mut self.res, grant);
                schedule(&mut self.ready, qp);
                room -= grant;
            }
        }
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
            rtt: self.qps.get(&qpn)?.rtt.smoothed(),
            rtt_samples: self.qps.get(&qpn)?.rtt.samples(),
        })
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
