//! `roce ping -R`: the QPs connected through RDMA CM instead of the TCP
//! exchange, as rping and perftest's `-R` do. `-p` is then the RDMA CM
//! port (service ID `0x0106 << 16 | port`), and each device must own UDP
//! 4791 (`--udp-port`) of its address: the CM peer sends its MADs there.
//!
//! The client sends the REQ, the server accepts with its QP in RTS, the
//! ping-pong runs as without `-R`, then the client disconnects (DREQ) and
//! the server answers (DREP). With `--burst -s 100 -n 10` either end
//! talks to a stock `ucmatose` (its server sends its 10 SENDs of 100 bytes
//! first, its client answers with as many).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use roce::cm::{AcceptOpts, CmEvent, CmId, ConnectOpts, EventChannel, PortSpace};
use roce::{Access, AttrMask, QpAttr, QpState};

use super::args::PingArgs;
use super::end::End;
use crate::oob::{Error, Result};

/// The next event of `ch` within `deadline`, or a timeout naming `what`.
fn next_event(ch: &EventChannel, deadline: Instant, what: &str) -> Result<CmEvent> {
    ch.next(Some(deadline.saturating_duration_since(Instant::now())))
        .ok_or_else(|| Error::Timeout { what: format!("{what}: nothing from the peer within --timeout") })
}

/// Waits for `Established` of `id`, turning a REJ or silence into errors.
fn established(ch: &EventChannel, deadline: Instant) -> Result<()> {
    loop {
        match next_event(ch, deadline, "connecting")? {
            CmEvent::Established { .. } => return Ok(()),
            CmEvent::Rejected { reason, .. } => {
                return Err(Error::Device(roce::Error::Rejected { reason, private_data: Vec::new() }))
            }
            CmEvent::Unreachable { .. } => {
                return Err(Error::Protocol("the peer stopped answering the connection exchange".into()))
            }
            _ => {}
        }
    }
}

impl End {
    /// INIT and the receives posted, before the CM can bring the QP up:
    /// the peer may send as soon as it is connected.
    pub(super) fn cm_prepare(&self) -> Result<()> {
        let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::NONE, ..QpAttr::default() };
        self.qp().modify(
            &init,
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
        )?;
        self.post_recvs()
    }
}

/// The local address that routes to `peer`.
pub(crate) fn route_to(peer: IpAddr) -> Result<IpAddr> {
    roce::cm::route_to(peer).map_err(|e| Error::Protocol(format!("no route to {peer}: {e}")))
}

/// The client: REQ to `server:port`, the ping-pong, DREQ.
pub(super) fn client(
    a: &PingArgs,
    server: IpAddr,
    bind: Option<IpAddr>,
    peer_udp_port: u16,
) -> Result<String> {
    let ip = match bind {
        Some(ip) => ip,
        None => route_to(server)?,
    };
    let end = End::open(a, SocketAddr::new(ip, a.udp_port), a.pcap.clone())?;
    end.cm_prepare()?;
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    let ch = EventChannel::new().map_err(Error::Device)?;
    let opts = ConnectOpts {
        responder_resources: 1,
        initiator_depth: 1,
        peer_udp_port: (peer_udp_port != roce::cm::ROCE_PORT).then_some(peer_udp_port),
        ..ConnectOpts::default()
    };
    let id = end.dev.cm_connect(&ch, end.qp().qpn(), SocketAddr::new(server, a.port), &opts)?;
    established(&ch, deadline)?;
    let out = end.local_line() + &format!("\n  remote address: {server} port {} (RDMA CM)", a.port);
    let t = if a.burst {
        end.run_burst(a.iters, false, Duration::from_secs(a.timeout))
    } else {
        end.run(a.iters, true, Duration::from_secs(a.timeout))
    };
    let r = end.finish(a, out, t);
    disconnect(&end, &ch, id, Some(deadline + Duration::from_secs(a.timeout)));
    r
}

/// Sends the DREQ (or the DREP to the peer's DREQ) and, with a deadline,
/// waits for the DREP; a peer that has gone already is no error.
fn disconnect(end: &End, ch: &EventChannel, id: CmId, wait: Option<Instant>) {
    if let (Ok(()), Some(deadline)) = (end.dev.cm_disconnect(id, &[]), wait) {
        let deadline = deadline.min(Instant::now() + Duration::from_secs(5));
        while let Ok(ev) = next_event(ch, deadline, "disconnecting") {
            if matches!(ev, CmEvent::Disconnected { .. }) {
                break;
            }
        }
    }
    let _ = end.dev.cm_destroy(id);
}

/// The server: one connection request on `a.port`, accepted; the
/// ping-pong; the client's DREQ answered.
pub(super) fn server(a: &PingArgs, ip: IpAddr, udp_port: u16, quiet: bool) -> Result<String> {
    let end = End::open(a, SocketAddr::new(ip, udp_port), a.pcap.clone().filter(|_| !quiet))?;
    let ch = EventChannel::new().map_err(Error::Device)?;
    let listen = end.dev.cm_listen(&ch, PortSpace::Tcp, a.port)?;
    server_on(a, &end, &ch, listen)
}

/// [`server`] on a device and listener already made (`--loopback` opens
/// the server's before the client starts).
pub(super) fn server_on(a: &PingArgs, end: &End, ch: &EventChannel, listen: CmId) -> Result<String> {
    end.cm_prepare()?;
    let (id, req) = loop {
        // No deadline for the first request: a server waits for clients.
        match ch.next(None) {
            Some(CmEvent::ConnectRequest { id, req, .. }) => break (id, req),
            _ => continue,
        }
    };
    let _ = end.dev.cm_destroy(listen);
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    let opts = AcceptOpts { responder_resources: 1, initiator_depth: 1, ..AcceptOpts::default() };
    end.dev.cm_accept(id, end.qp().qpn(), &req, &opts)?;
    established(ch, deadline)?;
    let out =
        end.local_line() + &format!("\n  remote address: {} port {} (RDMA CM)", req.src_ip, req.src_port);
    let t = if a.burst {
        end.run_burst(a.iters, true, Duration::from_secs(a.timeout))
    } else {
        end.run(a.iters, false, Duration::from_secs(a.timeout))
    };
    let r = end.finish(a, out, t);
    // The client disconnects: answer its DREQ with the DREP; if it does
    // not within --timeout, send ours.
    let until = Instant::now() + Duration::from_secs(a.timeout);
    let mut theirs = false;
    while let Ok(ev) = next_event(ch, until, "waiting for the client to disconnect") {
        if matches!(ev, CmEvent::Disconnected { .. }) {
            theirs = true;
            break;
        }
    }
    disconnect(end, ch, id, (!theirs).then_some(until + Duration::from_secs(5)));
    r
}
