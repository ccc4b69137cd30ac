//! RDMA CM on a device: connect RC QPs by IP address and port, as
//! librdmacm does, with the IB CM protocol on QP 1 (the engine's
//! `roce_proto::cm`), so that the peer can be our own stack or the Linux
//! kernel's (rxe or a RoCE NIC).
//!
//! Two levels:
//! * socket-like: [`Listener::bind`] + [`Listener::accept`] and
//!   [`connect`] give a [`Connection`] that owns a QP in RTS with the
//!   negotiated attributes and the peer's private data;
//! * identifiers and event channels, one call per librdmacm call, for the
//!   C library: [`EventChannel`] (a pollable fd), `Device::cm_listen`,
//!   `cm_connect`, `cm_accept`, `cm_reject`, `cm_establish`, `cm_qp_attr`,
//!   `cm_disconnect`, `cm_destroy`, `cm_migrate`, `cm_sidr_resolve`,
//!   `cm_sidr_reply`. Events are [`CmEvent`]s, each naming its
//!   identifier ([`CmId`]).
//!
//! Addressing (Annex A11 as Linux `cma.c` does it): a listener on port P
//! of port space TCP answers the service ID `0x0106 << 16 | P`; the REQ's
//! private data starts with the 36-byte RDMA CM IP header (so at most 56
//! bytes of user private data); GIDs are the IPv4-mapped addresses. The
//! kernel sends every CM MAD to UDP port 4791 of the address, QP 1: the
//! device that owns `IP:4791` is the one CM of that address (a second
//! program on the same address cannot receive CM traffic; give it its own
//! address). Two devices of ours on one host talk CM when each binds port
//! 4791 of its own address (127.0.0.2, 127.0.0.3, ...), or with
//! `ConnectOpts::peer_udp_port` towards a peer on another port.

use std::net::{IpAddr, SocketAddr};

use roce_proto::cm::{AcceptParams, CmCounters, CmState, ConnectParams};
use roce_proto::{AttrMask, QpAttr, QpState};

use crate::device::Device;
use crate::error::{Error, Result};

mod socket;

pub use crate::cm_events::EventChannel;
pub use roce_proto::cm::{
    reason, sidr_status, CmError, CmEvent, CmId, PortSpace, RepInfo, ReqInfo, SidrReqInfo, REQ_USER_PRIVATE,
};
pub use roce_wire::cma::UDP_QKEY;
pub use roce_wire::udp::ROCE_PORT;
pub use socket::{connect, connect_with, Connection, Listener};

/// The local address the kernel routes `peer` from (a connected UDP
/// socket's own address): the address a device should bind to reach
/// `peer`, since its GID, and so the CM's source, is that address.
pub fn route_to(peer: IpAddr) -> std::io::Result<IpAddr> {
    let any: IpAddr = if peer.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let s = std::net::UdpSocket::bind((any, 0))?;
    s.connect((peer, ROCE_PORT))?;
    Ok(s.local_addr()?.ip())
}

/// What a REQ asks for (`struct rdma_conn_param` on the active side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOpts {
    /// At most 56 bytes (the REQ's 92 minus the RDMA CM header).
    pub private_data: Vec<u8>,
    /// RDMA READs/atomics we accept from the peer at once.
    pub responder_resources: u8,
    /// RDMA READs/atomics we issue at once.
    pub initiator_depth: u8,
    /// Transport retries (≤ 7) and RNR retries (≤ 7; 7 = infinite).
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// Our RDMA CM port (the IP header's source port); 0 picks one in
    /// 32768..61000 as the kernel's `ip_local_port_range` does.
    pub src_port: u16,
    /// The peer device's UDP port when it is not 4791.
    pub peer_udp_port: Option<u16>,
    /// Bring the QP to RTS and send the RTU as soon as the REP comes
    /// (`rdma_connect` with a QP); `false`: the user gets
    /// `ConnectResponse`, moves the QP (`cm_qp_attr`) and calls
    /// `cm_establish` (`rdma_establish`).
    pub auto_establish: bool,
}

impl Default for ConnectOpts {
    fn default() -> Self {
        ConnectOpts {
            private_data: Vec::new(),
            responder_resources: 16,
            initiator_depth: 16,
            retry_count: 7,
            rnr_retry_count: 7,
            src_port: 0,
            peer_udp_port: None,
            auto_establish: true,
        }
    }
}

/// What a REP answers (`struct rdma_conn_param` on the passive side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptOpts {
    /// At most 196 bytes.
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub rnr_retry_count: u8,
}

impl Default for AcceptOpts {
    fn default() -> Self {
        AcceptOpts {
            private_data: Vec::new(),
            responder_resources: 16,
            initiator_depth: 16,
            rnr_retry_count: 7,
        }
    }
}

impl Device {
    /// Listens on `port` of port space `ps` (`rdma_bind_addr` +
    /// `rdma_listen`); connection requests arrive on `ch` as
    /// `CmEvent::ConnectRequest` (TCP) or `CmEvent::SidrRequest` (UDP).
    pub fn cm_listen(&self, ch: &EventChannel, ps: PortSpace, port: u16) -> Result<CmId> {
        self.cm_call(|core, _| {
            let id = core.engine.cm_mut().listen(ps, port)?;
            core.cm_router.set(id, ch);
            Ok(id)
        })
    }

    /// Sends a REQ for RC QP `qpn` (RESET or INIT) to `peer` (IP and
    /// RDMA CM port); its events go to `ch`. With `opts.auto_establish`
    /// the QP is in RTS when `Established` arrives.
    pub fn cm_connect(
        &self,
        ch: &EventChannel,
        qpn: u32,
        peer: SocketAddr,
        opts: &ConnectOpts,
    ) -> Result<CmId> {
        self.cm_call(|core, now| {
            let src_port = match opts.src_port {
                0 => 32768 + (core.engine.random_psn().value() % (61000 - 32768)) as u16,
                p => p,
            };
            let p = ConnectParams {
                dst_ip: peer.ip(),
                dst_port: peer.port(),
                src_port,
                qpn,
                starting_psn: 0,
                responder_resources: opts.responder_resources,
                initiator_depth: opts.initiator_depth,
                retry_count: opts.retry_count,
                rnr_retry_count: opts.rnr_retry_count,
                srq: false,
                private_data: opts.private_data.clone(),
            };
            let id = core.engine.cm_connect(now, qpn, p, opts.peer_udp_port, opts.auto_establish)?;
            core.cm_router.set(id, ch);
            Ok(id)
        })
    }

    /// Accepts connection request `id` (from a `ConnectRequest` event,
    /// whose `req` this is) with RC QP `qpn`: the QP goes to RTS, then the
    /// REP leaves (`rdma_accept`). `Established` follows on the RTU or
    /// the first packet.
    pub fn cm_accept(&self, id: CmId, qpn: u32, req: &ReqInfo, opts: &AcceptOpts) -> Result<()> {
        self.cm_call(|core, now| {
            let p = AcceptParams {
                qpn,
                starting_psn: 0,
                responder_resources: opts.responder_resources.min(req.initiator_depth.max(1)),
                initiator_depth: opts.initiator_depth.min(req.responder_resources.max(1)),
                rnr_retry_count: opts.rnr_retry_count,
                srq: false,
                private_data: opts.private_data.clone(),
            };
            Ok(core.engine.cm_accept(now, id, qpn, req, p)?)
        })
    }

    /// Rejects a connection request (REJ 28 with `private_data`, ≤ 148
    /// bytes), or a SIDR request (status "rejected").
    pub fn cm_reject(&self, id: CmId, private_data: &[u8]) -> Result<()> {
        self.cm_call(|core, now| Ok(core.engine.cm_mut().reject(now, id, private_data)?))
    }

    /// Sends the RTU after `ConnectResponse` once the user has brought the
    /// QP to RTS itself (`rdma_establish`).
    pub fn cm_establish(&self, id: CmId) -> Result<()> {
        self.cm_call(|core, _| Ok(core.engine.cm_establish(id)?))
    }

    /// The attributes and mask the connection's QP takes in `state` (INIT,
    /// RTR, RTS), once the REQ (passive) or REP (active) is known
    /// (`rdma_init_qp_attr`).
    pub fn cm_qp_attr(&self, id: CmId, state: QpState) -> Result<(QpAttr, AttrMask)> {
        let sh = self.shared();
        let core = sh.lock()?;
        core.engine.cm_qp_attr(id, state).ok_or(Error::Cm(CmError::NoSuchId))
    }

    /// Disconnects (`rdma_disconnect`): DREQ, or DREP to a DREQ received.
    /// The QP is not touched: move it to ERR to flush it.
    pub fn cm_disconnect(&self, id: CmId, private_data: &[u8]) -> Result<()> {
        self.cm_call(|core, now| Ok(core.engine.cm_mut().disconnect(now, id, private_data)?))
    }

    /// Destroys the identifier (`rdma_destroy_id`): a connection says
    /// goodbye as the kernel's `cm_destroy_id` does (REJ, DREQ or DREP)
    /// and lives on, silently, through timewait.
    pub fn cm_destroy(&self, id: CmId) -> Result<()> {
        self.cm_call(|core, now| {
            core.cm_router.remove(id);
            Ok(core.engine.cm_destroy(now, id)?)
        })
    }

    /// Moves `id`'s future events to `ch` (`rdma_migrate_id`); events
    /// already queued stay where they are.
    pub fn cm_migrate(&self, id: CmId, ch: &EventChannel) -> Result<()> {
        self.cm_call(|core, _| {
            core.engine.cm().state(id).ok_or(CmError::NoSuchId)?;
            core.cm_router.set(id, ch);
            Ok(())
        })
    }

    /// Asks `peer`'s UD service (port space UDP) for its QPN and Q_Key
    /// with SIDR_REQ (`rdma_resolve_route` + `rdma_connect` on a UDP id);
    /// the answer is `CmEvent::SidrReply` on `ch`.
    pub fn cm_sidr_resolve(&self, ch: &EventChannel, peer: SocketAddr, private_data: &[u8]) -> Result<CmId> {
        self.cm_call(|core, now| {
            let src_port = 32768 + (core.engine.random_psn().value() % (61000 - 32768)) as u16;
            let id =
                core.engine.cm_mut().sidr_request(now, peer.ip(), peer.port(), src_port, private_data)?;
            core.cm_router.set(id, ch);
            Ok(id)
        })
    }

    /// Answers a SIDR request with our UD QP and Q_Key (`rdma_accept` on a
    /// UDP id; librdmacm's Q_Key is [`UDP_QKEY`]).
    pub fn cm_sidr_reply(&self, id: CmId, qpn: u32, qkey: u32, private_data: &[u8]) -> Result<()> {
        self.cm_call(|core, _| {
            Ok(core.engine.cm_mut().sidr_reply(id, sidr_status::SUCCESS, qpn, qkey, private_data)?)
        })
    }

    /// The CM state of `id`, if it exists.
    pub fn cm_state(&self, id: CmId) -> Option<CmState> {
        self.shared().lock().ok()?.engine.cm().state(id)
    }

    /// What the CM counted (MADs, duplicates, retransmissions, rejects).
    pub fn cm_counters(&self) -> CmCounters {
        self.shared().lock_any().engine.cm().counters()
    }

    /// The IP address CM peers reach this device at.
    pub fn cm_address(&self) -> IpAddr {
        self.local_addr().ip()
    }
}
