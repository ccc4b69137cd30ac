//! `roce perf -R`: the QPs connected through RDMA CM (REQ/REP/RTU on QP 1)
//! instead of with the QPN and PSN of the TCP exchange. The exchange still
//! carries the buffer keys and the results (perftest's `-R` carries them
//! over the CM-connected QP instead: a stock perftest `-R` is not a peer).
//!
//! The server listens on the RDMA CM port `-p` from the moment its device
//! opens, so no REQ can come before it; it accepts each request with the
//! QP whose peer QPN the request names. The client connects its QPs one by
//! one, each REQ to the server's device (its UDP port from the exchange).

use std::net::SocketAddr;
use std::time::Instant;

use roce::cm::{AcceptOpts, CmEvent, CmId, ConnectOpts, EventChannel, PortSpace};

use super::RdmaSide;
use crate::oob::{gid_ip, Error, Result, DEFAULT_PORT};
use crate::perf::exchange::{KeyMsg, Role};

/// A side's CM state: its event channel, the server's listener, and the
/// connections made (destroyed, with a DREQ, when the side goes).
pub(super) struct PerfCm {
    ch: EventChannel,
    listen: Option<CmId>,
    ids: Vec<CmId>,
}

impl PerfCm {
    /// The server listens at once: a client's REQ never finds nobody.
    pub(super) fn open(dev: &roce::Device, role: Role, port: Option<u16>) -> Result<PerfCm> {
        let ch = EventChannel::new()?;
        let listen = match role {
            Role::Server => Some(dev.cm_listen(&ch, PortSpace::Tcp, port.unwrap_or(DEFAULT_PORT))?),
            Role::Client => None,
        };
        Ok(PerfCm { ch, listen, ids: Vec::new() })
    }

    pub(super) fn close(&mut self, dev: &roce::Device) {
        for id in self.ids.drain(..).chain(self.listen.take()) {
            let _ = dev.cm_destroy(id);
        }
    }
}

impl RdmaSide {
    /// Connects every QP through the CM (see the module docs).
    pub(super) fn cm_connect(&mut self, remote: &[KeyMsg], peer_is_roce: bool) -> Result<()> {
        let deadline = Instant::now() + self.conf.timeout;
        let port = self.conf.tcp_port.unwrap_or(DEFAULT_PORT);
        let reads = self.conf.out_reads;
        let mut cm = self.cm.take().ok_or_else(|| Error::Protocol("no CM on this side".into()))?;
        let r = (|| {
            let qps: Vec<u32> = self.res().qps.iter().map(|q| q.qpn()).collect();
            match self.role {
                Role::Client => {
                    for (qpn, r) in qps.iter().zip(remote) {
                        let opts = ConnectOpts {
                            responder_resources: reads,
                            initiator_depth: reads,
                            peer_udp_port: Some(r.udp_port(peer_is_roce)),
                            ..ConnectOpts::default()
                        };
                        let id =
                            self.dev.cm_connect(&cm.ch, *qpn, SocketAddr::new(gid_ip(r.gid), port), &opts)?;
                        cm.ids.push(id);
                        wait_established(&cm.ch, id, deadline)?;
                    }
                }
                Role::Server => {
                    for _ in 0..qps.len() {
                        let (id, req) = loop {
                            match next(&cm.ch, deadline)? {
                                CmEvent::ConnectRequest { id, req, .. } => break (id, req),
                                _ => continue,
                            }
                        };
                        let Some(i) = remote.iter().position(|k| k.qpn == req.remote_qpn) else {
                            let _ = self.dev.cm_reject(id, &[]);
                            return Err(Error::Protocol(format!(
                                "a connection request from QP {:#x}, which the exchange did not name",
                                req.remote_qpn
                            )));
                        };
                        let opts = AcceptOpts {
                            responder_resources: reads,
                            initiator_depth: reads,
                            ..AcceptOpts::default()
                        };
                        self.dev.cm_accept(id, qps[i], &req, &opts)?;
                        cm.ids.push(id);
                        wait_established(&cm.ch, id, deadline)?;
                    }
                }
            }
            Ok(())
        })();
        self.cm = Some(cm);
        r
    }
}

fn next(ch: &EventChannel, deadline: Instant) -> Result<CmEvent> {
    ch.next(Some(deadline.saturating_duration_since(Instant::now()))).ok_or_else(|| Error::Timeout {
        what: "connecting through RDMA CM: no answer within --timeout".into(),
    })
}

fn wait_established(ch: &EventChannel, id: CmId, deadline: Instant) -> Result<()> {
    loop {
        match next(ch, deadline)? {
            CmEvent::Established { id: e } if e == id => return Ok(()),
            CmEvent::Rejected { id: e, reason, private_data } if e == id => {
                return Err(Error::Device(roce::Error::Rejected { reason, private_data }))
            }
            CmEvent::Unreachable { id: e } if e == id => {
                return Err(Error::Protocol("the peer stopped answering the connection exchange".into()))
            }
            _ => {}
        }
    }
}
