//! The connection manager on QP 1: the IB CM protocol (IBTA vol. 1 ch. 12)
//! with RDMA CM's IP addressing (Annex A11), sans-IO, following the rules
//! of Linux `drivers/infiniband/core/cm.c` and `cma.c` (the peer we must
//! interoperate with).
//!
//! [`Cm`] knows no QPs and no sockets: the caller gives it MADs that
//! arrived at QP 1 ([`Cm::handle_mad`]), takes the MADs it wants sent
//! ([`Cm::poll_transmit`], each to QP 1 of an IP address), runs its timers
//! ([`Cm::poll_timeout`], [`Cm::handle_timeout`]) and reads its events
//! ([`Cm::poll_event`]). Requests come in as calls: [`Cm::listen`],
//! [`Cm::connect`] (REQ), [`Cm::accept`] (REP), [`Cm::establish`] (RTU),
//! [`Cm::reject`] (REJ), [`Cm::disconnect`] (DREQ/DREP),
//! [`Cm::sidr_request`] / [`Cm::sidr_reply`] (UD services), [`Cm::destroy`].
//! The engine wraps it so that QPs follow (`Engine::cm_*`).
//!
//! Rules implemented (kernel 6.1 behaviour, `cm.c` unless said):
//! * Timers: `cm_convert_to_ms(t) = 1 << max(t - 8, 0)` ms. An active REQ
//!   is re-sent every `2·conv(packet_life_time) + conv(remote CM response
//!   timeout)` up to `max_cm_retries` times; a REP every `conv(REQ's local
//!   CM response timeout)` up to the REQ's max CM retries; a DREQ on the
//!   connection's timeout. Exhausted: the REQ/REP sender reports a timeout
//!   and forgets the connection, the DREQ sender enters timewait.
//! * MRA: a REQ answered by the user later is "MRA'd" with the delay flag
//!   (`IB_CM_MRA_FLAG_DELAY | 24`, as `cma.c` does): no MRA leaves until a
//!   duplicate REQ arrives, which is answered with an MRA (service timeout
//!   24); likewise a duplicate REP before the RTU. A received MRA stretches
//!   the REQ/REP timer to `conv(service timeout) + conv(ack timeout)`.
//! * Duplicates: a REQ is a duplicate when (remote CA GUID, remote comm ID)
//!   is known: answered with MRA while unanswered, REJ "stale connection"
//!   in timewait, ignored otherwise (the REP timer re-sends). A duplicate
//!   REP gets the RTU again once established. A DREQ in timewait gets the
//!   DREP again.
//! * Stale connections: a REQ reusing (remote CA GUID, remote QPN) of a
//!   connection alive or in timewait gets REJ 10 and the old connection a
//!   DREQ (`cm_match_req`).
//! * No listener on the service ID: REJ 8; a REQ whose RDMA CM IP header
//!   is invalid or not addressed to this CM's IP: REJ 28 without private
//!   data (`cma_ib_req_handler` failing after the CM matched).
//! * DREQ crossing DREQ: each side takes the other's DREQ as the answer,
//!   sends the DREP and enters timewait; timewait lasts
//!   `conv(QP ack timeout)` and then the comm ID and remote QPN are free.

use core::net::IpAddr;
use std::collections::{HashMap, VecDeque};

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use roce_wire::mad::MAD_LEN;

use crate::time::{Duration, Instant};

mod conn;
mod handle;
mod send;

pub use conn::CmState;
use conn::{Entry, Listener, Retransmit};
pub use send::{ip_gid, REQ_USER_PRIVATE, SIDR_REQ_USER_PRIVATE};

/// Reasons of a REJ (Linux `enum ib_cm_rej_reason`, IBTA table 105).
pub mod reason {
    pub const NO_QP: u16 = 1;
    pub const NO_RESOURCES: u16 = 3;
    pub const TIMEOUT: u16 = 4;
    pub const UNSUPPORTED: u16 = 5;
    pub const INVALID_COMM_ID: u16 = 6;
    pub const INVALID_SERVICE_ID: u16 = 8;
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    pub const STALE_CONN: u16 = 10;
    pub const INVALID_GID: u16 = 12;
    pub const INVALID_MTU: u16 = 26;
    pub const CONSUMER_DEFINED: u16 = 28;
}

/// SIDR_REP status values (IBTA table 117).
pub mod sidr_status {
    pub const SUCCESS: u8 = 0;
    pub const UNSUPPORTED: u8 = 1;
    pub const REJECT: u8 = 2;
    pub const NO_QP: u8 = 3;
}

/// `cm_convert_to_ms`: 4.096 µs · 2^t, rounded the kernel's way.
pub fn cm_timeout(t: u8) -> Duration {
    Duration::from_millis(1u64 << t.saturating_sub(8).min(31))
}

/// `cm_ack_timeout` (cm.c): the QP ACK timeout the active side derives
/// from the peer's Target ACK Delay and the path's packet life time.
pub fn cm_ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let mut t = packet_life_time + 1;
    if t >= ca_ack_delay {
        t += u8::from(ca_ack_delay >= t - 1);
    } else {
        t = ca_ack_delay + u8::from(t >= ca_ack_delay.saturating_sub(1));
    }
    t.min(31)
}

/// How this CM fills the fields the peer copies into its QP and timers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmConfig {
    /// The device's IP address: the GIDs (IPv4-mapped) and the RDMA CM
    /// header's address; REQs for another address are refused.
    pub local_ip: IpAddr,
    /// Local CA GUID: stable and unique per device (the peer keys stale
    /// connections on it).
    pub ca_guid: u64,
    /// IBTA MTU enum of the path (3 = 1024, what a 1500-byte Ethernet gives:
    /// `iboe_get_mtu`; an engine takes `EngineConfig::cm_path_mtu`). The
    /// peer applies it verbatim.
    pub path_mtu: u8,
    /// PacketLifeTime of the path (`CMA_IBOE_PACKET_LIFETIME`: 18 in 6.1).
    pub packet_life_time: u8,
    /// The REQ's Local ACK Timeout: the peer's QP timeout (14..=19 work
    /// with rxe; 19 is what the kernel itself sends).
    pub local_ack_timeout: u8,
    /// Local / remote CM response timeouts put in a REQ (`CMA_CM_RESPONSE_TIMEOUT` 20).
    pub cm_response_timeout: u8,
    /// Max CM retries put in a REQ (`CMA_MAX_CM_RETRIES` 15).
    pub max_cm_retries: u8,
    /// Target ACK delay put in a REP (inflates the peer's QP timeout; rxe says 15).
    pub target_ack_delay: u8,
    /// Service timeout of the MRAs sent (24, ≈ 68.7 s: `CMA_CM_MRA_SETTING`).
    pub mra_service_timeout: u8,
    /// Hop limit of the path (64 on RoCE).
    pub hop_limit: u8,
    /// Traffic class of the path (the ToS; 0 by default).
    pub traffic_class: u8,
}

impl CmConfig {
    /// The kernel's values (6.1) for a device at `local_ip`, except the
    /// ACK timeout: 17 (≈ 0.5 s), quicker than the kernel's 19 at
    /// recovering a loss and still far above a TCG VM's stalls.
    pub fn new(local_ip: IpAddr, ca_guid: u64) -> CmConfig {
        CmConfig {
            local_ip,
            ca_guid,
            path_mtu: 3,
            packet_life_time: 18,
            local_ack_timeout: 17,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            target_ack_delay: 15,
            mra_service_timeout: 24,
            hop_limit: 64,
            traffic_class: 0,
        }
    }
}

/// A CM identifier: a listener or one connection (its local comm ID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmId(pub u32);

/// The RDMA CM port space of a listener or connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// `RDMA_PS_TCP`: RC (or UC) connections, REQ/REP/RTU.
    Tcp,
    /// `RDMA_PS_UDP`: UD services resolved with SIDR_REQ/SIDR_REP.
    Udp,
}

impl PortSpace {
    pub fn code(self) -> u16 {
        match self {
            PortSpace::Tcp => roce_wire::cma::PS_TCP,
            PortSpace::Udp => roce_wire::cma::PS_UDP,
        }
    }
    /// The service ID of `port` in this space.
    pub fn service_id(self, port: u16) -> u64 {
        roce_wire::cma::service_id(self.code(), port)
    }
}

/// What the active side asks for (the REQ's fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// The peer's IP and RDMA CM port.
    pub dst_ip: IpAddr,
    pub dst_port: u16,
    /// Our RDMA CM port (the IP header's source port).
    pub src_port: u16,
    /// Our QP, and the first PSN it expects to receive: a CM message's
    /// Starting PSN is where its receiver starts sending (cm.c sets the
    /// receiver's `sq_psn` from it, as the kernel's QPs show on the wire).
    pub qpn: u32,
    pub starting_psn: u32,
    /// Responder resources (READs/atomics we accept) and initiator depth.
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// Transport retries and RNR retries (≤ 7; 7 RNR = infinite).
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// At most 56 bytes (92 minus the RDMA CM header).
    pub private_data: Vec<u8>,
}

/// What the passive side answers (the REP's fields).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AcceptParams {
    pub qpn: u32,
    /// The first PSN our QP expects to receive (the requester sends from it).
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// At most 196 bytes.
    pub private_data: Vec<u8>,
}

/// A connection request as the passive side sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqInfo {
    pub service_id: u64,
    pub remote_ca_guid: u64,
    pub remote_comm_id: u32,
    pub remote_qpn: u32,
    /// The PSN the requester expects first: our QP sends from it.
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// IBTA MTU enum.
    pub path_mtu: u8,
    /// The peer's QP timeout for us (the REQ's primary Local ACK Timeout).
    pub local_ack_timeout: u8,
    pub srq: bool,
    /// 0 RC, 1 UC.
    pub transport_type: u8,
    pub src_ip: IpAddr,
    pub src_port: u16,
    pub dst_ip: IpAddr,
    pub dst_port: u16,
    /// The user's private data (after the 36-byte RDMA CM header): 56 bytes.
    pub private_data: Vec<u8>,
}

/// A REP as the active side sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepInfo {
    pub remote_comm_id: u32,
    pub remote_qpn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// The QP ACK timeout to use (`cm_ack_timeout(target ack delay, PLT)`).
    pub ack_timeout: u8,
    /// 196 bytes.
    pub private_data: Vec<u8>,
}

/// A SIDR request as the passive (UD service) side sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReqInfo {
    pub service_id: u64,
    pub src_ip: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    /// After the RDMA CM header: 180 bytes.
    pub private_data: Vec<u8>,
}

/// What the CM tells its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a listener: `id` is the new connection (answer with
    /// `accept` or `reject`). RDMA_CM_EVENT_CONNECT_REQUEST.
    ConnectRequest { listener: CmId, id: CmId, req: ReqInfo },
    /// The peer accepted: bring the QP to RTS and call `establish`
    /// (RTU). RDMA_CM_EVENT_CONNECT_RESPONSE.
    ConnectResponse { id: CmId, rep: RepInfo },
    /// RTU received, or the first packet on the passive QP (the engine
    /// calls `notify_established`), or our RTU sent. RDMA_CM_EVENT_ESTABLISHED.
    Established { id: CmId },
    /// The peer rejected (`reason`, Linux `ib_cm_rej_reason`). RDMA_CM_EVENT_REJECTED.
    Rejected { id: CmId, reason: u16, private_data: Vec<u8> },
    /// REQ (active) or REP (passive) retries exhausted; `id` is gone.
    /// RDMA_CM_EVENT_UNREACHABLE / CONNECT_ERROR with -ETIMEDOUT.
    Unreachable { id: CmId },
    /// DREQ received (answer with `disconnect`), DREP received, or our DREQ
    /// unanswered. RDMA_CM_EVENT_DISCONNECTED.
    Disconnected { id: CmId, private_data: Vec<u8> },
    /// Timewait over: the connection's IDs are free. RDMA_CM_EVENT_TIMEWAIT_EXIT.
    TimewaitExit { id: CmId },
    /// A SIDR_REQ for a UDP-space listener; answer with `sidr_reply`.
    SidrRequest { listener: CmId, id: CmId, req: SidrReqInfo },
    /// The answer to our SIDR_REQ (`status` 0 = success); `id` is done.
    SidrReply { id: CmId, status: u8, qpn: u32, qkey: u32, private_data: Vec<u8> },
    /// Our SIDR_REQ was never answered.
    SidrTimeout { id: CmId },
}

impl CmEvent {
    /// The connection (or SIDR request) the event is about.
    pub fn id(&self) -> CmId {
        match self {
            CmEvent::ConnectRequest { id, .. }
            | CmEvent::ConnectResponse { id, .. }
            | CmEvent::Established { id }
            | CmEvent::Rejected { id, .. }
            | CmEvent::Unreachable { id }
            | CmEvent::Disconnected { id, .. }
            | CmEvent::TimewaitExit { id }
            | CmEvent::SidrRequest { id, .. }
            | CmEvent::SidrReply { id, .. }
            | CmEvent::SidrTimeout { id } => *id,
        }
    }
}

/// A MAD to send: 256 bytes to QP 1 at `dst` (UDP 4791).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmTransmit {
    pub dst: IpAddr,
    pub mad: [u8; MAD_LEN],
}

/// Why a CM call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    #[error("no such CM id")]
    NoSuchId,
    #[error("the CM id is in state {0:?}, where this is not allowed")]
    WrongState(CmState),
    #[error("port {0} already has a listener in this port space")]
    AddressInUse(u16),
    #[error("private data of {len} bytes: at most {max} fit")]
    PrivateDataTooLong { len: usize, max: usize },
    #[error("destination {0} is not of the CM's address family")]
    AddressFamily(IpAddr),
    #[error("invalid parameter: {0}")]
    Invalid(&'static str),
}

/// Counters of what the CM dropped or answered by rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmCounters {
    pub mads_received: u64,
    pub mads_sent: u64,
    pub malformed: u64,
    pub unknown_id: u64,
    pub duplicates: u64,
    pub retransmits: u64,
    pub rejects_sent: u64,
    pub stale: u64,
}

/// The connection manager of one device. See the module docs.
pub struct Cm {
    cfg: CmConfig,
    rng: ChaCha20Rng,
    hi_tid: u32,
    ids: HashMap<u32, Entry>,
    listeners: HashMap<u64, Listener>,
    /// (remote CA GUID, remote comm ID) → local ID: duplicate REQs/REPs.
    by_remote_id: HashMap<(u64, u32), u32>,
    /// (remote CA GUID, remote QPN) → local ID: stale connections.
    by_remote_qpn: HashMap<(u64, u32), u32>,
    /// (source IP, request ID) → local ID of SIDR requests being answered.
    by_sidr: HashMap<(IpAddr, u32), u32>,
    tx: VecDeque<CmTransmit>,
    events: VecDeque<CmEvent>,
    counters: CmCounters,
}

impl Cm {
    /// A CM for the device `cfg` describes; `seed` draws its comm IDs.
    pub fn new(cfg: CmConfig, seed: u64) -> Cm {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let hi_tid = rng.next_u32() & 0x7fff_ffff;
        Cm {
            cfg,
            rng,
            hi_tid,
            ids: HashMap::new(),
            listeners: HashMap::new(),
            by_remote_id: HashMap::new(),
            by_remote_qpn: HashMap::new(),
            by_sidr: HashMap::new(),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
        }
    }

    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    pub fn counters(&self) -> CmCounters {
        self.counters
    }

    /// The state of `id`, if it exists.
    pub fn state(&self, id: CmId) -> Option<CmState> {
        self.ids.get(&id.0).map(|e| e.state)
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<CmTransmit> {
        let t = self.tx.pop_front()?;
        self.counters.mads_sent += 1;
        Some(t)
    }

    pub fn has_transmit(&self) -> bool {
        !self.tx.is_empty()
    }

    /// The next event for the user.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    pub fn has_event(&self) -> bool {
        !self.events.is_empty()
    }

    /// The earliest timer (retransmission, timewait).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.ids.values().filter_map(|e| e.timer.as_ref().map(|t| t.deadline)).min()
    }

    /// A fresh local comm ID: random, non-zero, unused.
    fn fresh_id(&mut self) -> u32 {
        loop {
            let id = self.rng.next_u32();
            if id != 0 && !self.ids.contains_key(&id) {
                return id;
            }
        }
    }

    /// The transaction ID of a MAD this side starts (REQ, DREQ, SIDR_REQ):
    /// `hi_tid << 32 | local ID` with the ID's bytes as Linux lays them
    /// (`cm_form_tid` on a little-endian host).
    fn form_tid(&self, local: u32) -> u64 {
        u64::from(self.hi_tid) << 32 | u64::from(local.swap_bytes())
    }

    /// Starts listening on `port` of `ps` (the service ID `ps << 16 | port`).
    pub fn listen(&mut self, ps: PortSpace, port: u16) -> Result<CmId, CmError> {
        let sid = ps.service_id(port);
        if self.listeners.contains_key(&sid) {
            return Err(CmError::AddressInUse(port));
        }
        let id = self.fresh_id();
        self.ids.insert(id, Entry::new(CmState::Listen, ps, None));
        self.listeners.insert(sid, Listener { id, port });
        Ok(CmId(id))
    }

    /// Forgets `id`. A connection says goodbye first, as `cm_destroy_id`
    /// does: REJ (timeout) for a REQ in flight, REJ (consumer) for a request
    /// not answered, DREQ for an established one (then it lives on, without
    /// events, through DREQ and timewait), DREP for a DREQ received.
    pub fn destroy(&mut self, now: Instant, id: CmId) -> Result<(), CmError> {
        let e = self.ids.get_mut(&id.0).ok_or(CmError::NoSuchId)?;
        e.orphan = true;
        match e.state {
            CmState::Listen => {
                self.listeners.retain(|_, l| l.id != id.0);
                self.forget(id.0);
            }
            CmState::ReqSent | CmState::MraReqRcvd => {
                let guid = self.cfg.ca_guid.to_be_bytes();
                self.send_rej(id.0, reason::TIMEOUT, 0, &guid, &[]);
                self.forget(id.0);
            }
            CmState::ReqRcvd | CmState::MraReqSent | CmState::RepSent | CmState::MraRepRcvd => {
                self.send_rej(id.0, reason::CONSUMER_DEFINED, 0, &[], &[]);
                self.forget(id.0);
            }
            CmState::RepRcvd | CmState::MraRepSent => {
                self.send_rej(id.0, reason::CONSUMER_DEFINED, 1, &[], &[]);
                self.enter_timewait(now, id.0);
            }
            CmState::Established => self.start_dreq(now, id.0, &[]),
            CmState::DreqRcvd => {
                self.send_drep(id.0, &[]);
                self.enter_timewait(now, id.0);
            }
            CmState::SidrReqRcvd => {
                self.send_sidr_rep(id.0, sidr_status::REJECT, 0, 0, &[]);
                self.forget(id.0);
            }
            CmState::DreqSent | CmState::Timewait => {}
            CmState::Idle | CmState::SidrReqSent => self.forget(id.0),
        }
        self.events.retain(|ev| ev.id() != id);
        Ok(())
    }

    /// Removes every trace of `local`.
    fn forget(&mut self, local: u32) {
        if let Some(e) = self.ids.remove(&local) {
            if let Some(r) = e.remote {
                if self.by_remote_id.get(&(r.ca_guid, r.comm_id)) == Some(&local) {
                    self.by_remote_id.remove(&(r.ca_guid, r.comm_id));
                }
                if self.by_remote_qpn.get(&(r.ca_guid, r.qpn)) == Some(&local) {
                    self.by_remote_qpn.remove(&(r.ca_guid, r.qpn));
                }
            }
            if let Some(key) = e.sidr_key {
                self.by_sidr.remove(&key);
            }
        }
    }

    fn push_event(&mut self, ev: CmEvent) {
        if self.ids.get(&ev.id().0).is_some_and(|e| !e.orphan) {
            self.events.push_back(ev);
        }
    }

    /// Runs the timers due at `now`: retransmissions, their exhaustion, the
    /// end of timewait.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<u32> = self
            .ids
            .iter()
            .filter(|(_, e)| e.timer.as_ref().is_some_and(|t| t.deadline <= now))
            .map(|(k, _)| *k)
            .collect();
        for local in due {
            self.timer_fired(now, local);
        }
    }

    fn timer_fired(&mut self, now: Instant, local: u32) {
        let Some(e) = self.ids.get_mut(&local) else { return };
        let Some(t) = e.timer.take() else { return };
        if e.state == CmState::Timewait {
            let id = CmId(local);
            let orphan = e.orphan;
            if orphan {
                self.forget(local);
            } else {
                // The ID stays for the user to destroy; its remote keys go.
                e.state = CmState::Idle;
                let r = e.remote;
                if let Some(r) = r {
                    self.by_remote_id.remove(&(r.ca_guid, r.comm_id));
                    self.by_remote_qpn.remove(&(r.ca_guid, r.qpn));
                }
                self.push_event(CmEvent::TimewaitExit { id });
            }
            return;
        }
        let Some(rt) = t.retransmit else { return };
        if t.retries_left > 0 {
            self.counters.retransmits += 1;
            self.tx.push_back(CmTransmit { dst: rt.dst, mad: *rt.mad });
            e.timer = Some(conn::Timer {
                deadline: now + t.timeout,
                timeout: t.timeout,
                retries_left: t.retries_left - 1,
                retransmit: Some(rt),
            });
            return;
        }
        // Retries exhausted (`cm_process_send_error`).
        let id = CmId(local);
        match e.state {
            CmState::ReqSent | CmState::MraReqRcvd | CmState::RepSent | CmState::MraRepRcvd => {
                self.push_event(CmEvent::Unreachable { id });
                self.reset_to_idle(local);
            }
            CmState::DreqSent => {
                self.push_event(CmEvent::Disconnected { id, private_data: Vec::new() });
                self.enter_timewait(now, local);
            }
            CmState::SidrReqSent => {
                self.push_event(CmEvent::SidrTimeout { id });
                self.reset_to_idle(local);
            }
            _ => {}
        }
    }

    /// Back to idle (`cm_reset_to_idle`): the ID stays for the user, its
    /// remote keys go; an orphan goes entirely.
    fn reset_to_idle(&mut self, local: u32) {
        let Some(e) = self.ids.get_mut(&local) else { return };
        if e.orphan {
            self.forget(local);
            return;
        }
        e.state = CmState::Idle;
        e.timer = None;
        if let Some(r) = e.remote.take() {
            if self.by_remote_id.get(&(r.ca_guid, r.comm_id)) == Some(&local) {
                self.by_remote_id.remove(&(r.ca_guid, r.comm_id));
            }
            if self.by_remote_qpn.get(&(r.ca_guid, r.qpn)) == Some(&local) {
                self.by_remote_qpn.remove(&(r.ca_guid, r.qpn));
            }
        }
    }

    /// Timewait (`cm_enter_timewait`): `conv(QP ack timeout)`; the remote
    /// QPN stays taken (stale-connection rule) until it ends.
    fn enter_timewait(&mut self, now: Instant, local: u32) {
        let Some(e) = self.ids.get_mut(&local) else { return };
        e.state = CmState::Timewait;
        let wait = cm_timeout(e.ack_timeout);
        e.timer =
            Some(conn::Timer { deadline: now + wait, timeout: wait, retries_left: 0, retransmit: None });
    }

    /// Queues `mad` for `dst` and, with `retries`, keeps it for re-sending
    /// every `timeout`.
    fn send(
        &mut self,
        now: Instant,
        local: u32,
        dst: IpAddr,
        mad: [u8; MAD_LEN],
        retry: Option<(Duration, u8)>,
    ) {
        self.tx.push_back(CmTransmit { dst, mad });
        if let (Some((timeout, retries)), Some(e)) = (retry, self.ids.get_mut(&local)) {
            e.timer = Some(conn::Timer {
                deadline: now + timeout,
                timeout,
                retries_left: retries,
                retransmit: Some(Retransmit { dst, mad: Box::new(mad) }),
            });
        }
    }
}

#[cfg(test)]
mod tests;
