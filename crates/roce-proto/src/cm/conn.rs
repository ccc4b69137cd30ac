//! One CM identifier's record: its state (the `enum ib_cm_state` of
//! Linux' cm.c), the peer it talks to, the timer of its last MAD.

use core::net::IpAddr;

use roce_wire::mad::MAD_LEN;

use super::PortSpace;
use crate::time::{Duration, Instant};

/// The state of a CM identifier (IBTA vol. 1 §12.9.5 figures 149–152,
/// Linux `enum ib_cm_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmState {
    Idle,
    Listen,
    /// Active: REQ sent, waiting for REP.
    ReqSent,
    /// Active: the peer sent MRA for our REQ.
    MraReqRcvd,
    /// Passive: REQ received, the user has not answered.
    ReqRcvd,
    /// Passive: as `ReqRcvd`, an MRA owed on a duplicate REQ (the delayed
    /// MRA of `cma.c`).
    MraReqSent,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Passive: the peer sent MRA for our REP.
    MraRepRcvd,
    /// Active: REP received, the user has not sent the RTU.
    RepRcvd,
    /// Active: as `RepRcvd`, an MRA owed on a duplicate REP.
    MraRepSent,
    Established,
    DreqSent,
    DreqRcvd,
    Timewait,
    SidrReqSent,
    SidrReqRcvd,
}

/// The peer of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Remote {
    pub ca_guid: u64,
    pub comm_id: u32,
    pub qpn: u32,
}

/// A MAD kept for re-sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Retransmit {
    pub dst: IpAddr,
    pub mad: Box<[u8; MAD_LEN]>,
}

/// The one timer of an identifier: a retransmission, or timewait's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Timer {
    pub deadline: Instant,
    pub timeout: Duration,
    pub retries_left: u8,
    pub retransmit: Option<Retransmit>,
}

/// A listener on a service ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Listener {
    pub id: u32,
    pub port: u16,
}

/// Everything the CM keeps of one identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub state: CmState,
    pub ps: PortSpace,
    /// The user destroyed it: no more events; it goes once done.
    pub orphan: bool,
    pub timer: Option<Timer>,
    pub remote: Option<Remote>,
    /// Where its MADs go (QP 1 of this address).
    pub peer_ip: Option<IpAddr>,
    /// Transaction ID of the exchange in progress.
    pub tid: u64,
    pub local_qpn: u32,
    /// The QP ACK timeout of the connection (timewait's length).
    pub ack_timeout: u8,
    /// Re-send interval and count of its REP and DREQ (`timeout_ms`,
    /// `max_cm_retries` of the kernel's `cm_id_private`).
    pub resend: Duration,
    pub max_retries: u8,
    /// A SIDR request being answered: (source IP, request ID).
    pub sidr_key: Option<(IpAddr, u32)>,
    pub service_id: u64,
}

impl Entry {
    pub fn new(state: CmState, ps: PortSpace, peer_ip: Option<IpAddr>) -> Entry {
        Entry {
            state,
            ps,
            orphan: false,
            timer: None,
            remote: None,
            peer_ip,
            tid: 0,
            local_qpn: 0,
            ack_timeout: 0,
            resend: Duration::ZERO,
            max_retries: 0,
            sidr_key: None,
            service_id: 0,
        }
    }
}
