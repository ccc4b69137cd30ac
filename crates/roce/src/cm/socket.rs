//! The socket-like face of RDMA CM: bind a listener to a port and accept
//! connections, or connect to `IP:port`, and get a QP in RTS.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use roce_proto::cm::{CmEvent, CmId, PortSpace, ReqInfo};
use roce_proto::{AttrMask, QpAttr, QpState};

use super::{AcceptOpts, ConnectOpts, EventChannel};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::qp::Qp;

/// A listening RDMA CM port (port space TCP) on a device.
pub struct Listener {
    dev: Device,
    ch: EventChannel,
    id: CmId,
    port: u16,
}

impl Listener {
    /// Listens on `port` of the device's address (`rdma_listen`).
    pub fn bind(dev: &Device, port: u16) -> Result<Listener> {
        let ch = EventChannel::new()?;
        let id = dev.cm_listen(&ch, PortSpace::Tcp, port)?;
        Ok(Listener { dev: dev.clone(), ch, id, port })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The next connection request, waiting up to `timeout`: its
    /// identifier and what the peer asked for (its private data in
    /// `req.private_data`). Answer with [`Listener::accept_request`] or
    /// `Device::cm_reject`.
    pub fn next_request(&self, timeout: Option<Duration>) -> Result<(CmId, ReqInfo)> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match self.ch.next(left) {
                Some(CmEvent::ConnectRequest { id, req, .. }) => return Ok((id, req)),
                // Events of connections accepted earlier and dropped since.
                Some(_) => continue,
                None => return Err(Error::Timeout("no connection request")),
            }
        }
    }

    /// Accepts request `id` with `qp` (an RC QP in RESET or INIT): the QP
    /// goes to RTS, the REP leaves, and this waits up to `timeout` for the
    /// RTU (or the peer's first packet).
    pub fn accept_request(
        &self,
        id: CmId,
        req: ReqInfo,
        qp: Qp,
        opts: &AcceptOpts,
        timeout: Option<Duration>,
    ) -> Result<Connection> {
        let ch = EventChannel::new()?;
        self.dev.cm_migrate(id, &ch)?;
        let conn = Connection {
            dev: self.dev.clone(),
            ch,
            id,
            qp,
            peer: SocketAddr::new(req.src_ip, req.src_port),
            peer_private_data: req.private_data.clone(),
            disconnected: false,
        };
        if let Err(e) = self.dev.cm_accept(id, conn.qp.qpn(), &req, opts) {
            let _ = self.dev.cm_reject(id, &[]);
            return Err(e);
        }
        conn.qp.note_state();
        conn.wait_established(timeout)?;
        Ok(conn)
    }

    /// Waits for a connection request and accepts it with `qp` and empty
    /// private data: `accept()` of a socket.
    pub fn accept(&self, qp: Qp, timeout: Option<Duration>) -> Result<Connection> {
        let (id, req) = self.next_request(timeout)?;
        self.accept_request(id, req, qp, &AcceptOpts::default(), timeout)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.dev.cm_destroy(self.id);
    }
}

/// An RC connection made through the CM: the QP (in RTS), the peer's
/// address and private data, and its events (disconnection).
pub struct Connection {
    dev: Device,
    ch: EventChannel,
    id: CmId,
    qp: Qp,
    peer: SocketAddr,
    peer_private_data: Vec<u8>,
    disconnected: bool,
}

/// Connects `qp` (an RC QP in RESET or INIT) to the listener at `peer`
/// (IP and RDMA CM port) with `private_data` (≤ 56 bytes), waiting up to
/// `timeout`: `connect()` of a socket. A REJ is [`Error::Rejected`]; no
/// answer after the CM's retries (6 s × 15 towards a silent peer) is
/// [`Error::Unreachable`].
pub fn connect(
    dev: &Device,
    peer: SocketAddr,
    qp: Qp,
    private_data: &[u8],
    timeout: Option<Duration>,
) -> Result<Connection> {
    let opts = ConnectOpts { private_data: private_data.to_vec(), ..ConnectOpts::default() };
    connect_with(dev, peer, qp, &opts, timeout)
}

/// [`connect`] with every REQ field chosen (`opts.auto_establish` is
/// taken as true).
pub fn connect_with(
    dev: &Device,
    peer: SocketAddr,
    qp: Qp,
    opts: &ConnectOpts,
    timeout: Option<Duration>,
) -> Result<Connection> {
    let ch = EventChannel::new()?;
    let opts = ConnectOpts { auto_establish: true, ..opts.clone() };
    let id = dev.cm_connect(&ch, qp.qpn(), peer, &opts)?;
    let mut conn =
        Connection { dev: dev.clone(), ch, id, qp, peer, peer_private_data: Vec::new(), disconnected: false };
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        match conn.ch.next(left) {
            Some(CmEvent::Established { .. }) => break,
            Some(CmEvent::ConnectResponse { rep, .. }) => conn.peer_private_data = rep.private_data,
            Some(CmEvent::Rejected { reason, private_data, .. }) => {
                return Err(Error::Rejected { reason, private_data });
            }
            Some(CmEvent::Unreachable { .. }) => return Err(Error::Unreachable(peer)),
            Some(_) => continue,
            None => return Err(Error::Timeout("no answer to the connection request")),
        }
    }
    conn.qp.note_state();
    Ok(conn)
}

impl Connection {
    fn wait_established(&self, timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match self.ch.next(left) {
                Some(CmEvent::Established { .. }) => return Ok(()),
                Some(CmEvent::Rejected { reason, private_data, .. }) => {
                    return Err(Error::Rejected { reason, private_data })
                }
                Some(CmEvent::Unreachable { .. }) => return Err(Error::Unreachable(self.peer)),
                Some(_) => continue,
                None => return Err(Error::Timeout("no RTU from the peer")),
            }
        }
    }

    /// The connected QP (RTS).
    pub fn qp(&self) -> &Qp {
        &self.qp
    }

    /// The peer's IP address and RDMA CM port.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The private data the peer sent: its REQ's on the passive side (56
    /// bytes, zero-padded, as the kernel reports it), its REP's on the
    /// active side (196 bytes).
    pub fn peer_private_data(&self) -> &[u8] {
        &self.peer_private_data
    }

    /// The CM identifier (for `Device::cm_*` calls).
    pub fn id(&self) -> CmId {
        self.id
    }

    /// Disconnects (DREQ, or DREP to the peer's DREQ) and moves the QP to
    /// ERR, which flushes its outstanding work.
    pub fn disconnect(&mut self) -> Result<()> {
        if self.disconnected {
            return Ok(());
        }
        self.disconnected = true;
        let r = self.dev.cm_disconnect(self.id, &[]);
        let err = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
        let _ = self.qp.modify(&err, AttrMask::STATE);
        r
    }

    /// Waits up to `timeout` for the peer to disconnect (its DREQ), then
    /// answers it (DREP) and moves the QP to ERR.
    pub fn wait_disconnected(&mut self, timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match self.ch.next(left) {
                Some(CmEvent::Disconnected { .. }) => return self.disconnect(),
                Some(_) => continue,
                None => return Err(Error::Timeout("the peer did not disconnect")),
            }
        }
    }

    /// The next CM event of this connection, if one waits.
    pub fn try_event(&self) -> Option<CmEvent> {
        self.ch.try_next()
    }
}

impl Drop for Connection {
    /// Destroys the identifier: a live connection sends its DREQ (and
    /// finishes the exchange and timewait in the background).
    fn drop(&mut self) {
        let _ = self.dev.cm_destroy(self.id);
    }
}
