//! QP 1, the GSI, and the connection manager behind it: CM MADs in and out
//! as UD SEND_ONLY packets (P_Key 0xFFFF, Q_Key 0x80010000, source QP 1,
//! IBTA vol. 1 §13.5.1), and the QPs the CM brings up.
//!
//! The [`Cm`] is the protocol alone; here the engine adds what librdmacm
//! and the kernel's `cma.c` do with QPs around it:
//! * `cm_connect` with `auto_establish`: on the REP the QP goes to RTR and
//!   RTS with the negotiated attributes and the RTU leaves (librdmacm's
//!   `ucma_process_conn_resp`); the user sees `ConnectResponse` (the REP's
//!   private data and resources, the QP already moved) then `Established`.
//! * `cm_accept`: the QP goes to RTR and RTS before the REP (as
//!   `rdma_accept` does), and its first valid packet counts as the RTU
//!   (IB_EVENT_COMM_EST), so a peer that sends at once is not lost.

use core::net::IpAddr;

use roce_wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};
use roce_wire::DethRepr;

use super::*;
use crate::cm::{AcceptParams, Cm, CmError, CmEvent, CmId, CmTransmit, ConnectParams, RepInfo, ReqInfo};

/// UD SEND_ONLY, the opcode of every MAD.
const UD_SEND_ONLY: u8 = 0x64;

/// What the engine remembers of a connection the CM is bringing up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CmLink {
    pub qpn: u32,
    /// The PSN we announced (REQ or REP "Starting PSN"): the first one we
    /// expect to receive; the peer sends from it (cm.c: a CM message's
    /// Starting PSN becomes its receiver's `sq_psn`).
    pub own_psn: u32,
    pub peer: IpAddr,
    pub peer_port: Option<u16>,
    pub retry_count: u8,
    pub auto_establish: bool,
    /// RTR/RTS attributes once negotiated.
    pub attrs: Option<RtsAttrs>,
}

impl Engine {
    /// The connection manager (for calls that touch no QP).
    pub fn cm(&self) -> &Cm {
        &self.cm
    }

    /// The connection manager, mutable.
    pub fn cm_mut(&mut self) -> &mut Cm {
        &mut self.cm
    }

    /// The next CM event for the user (after the engine's own handling:
    /// a REP of an `auto_establish` connection shows as `Established`).
    pub fn poll_cm_event(&mut self) -> Option<CmEvent> {
        self.cm_process_events();
        self.cm_events.pop_front()
    }

    pub fn has_cm_event(&self) -> bool {
        !self.cm_events.is_empty() || self.cm.has_event()
    }

    /// Sends a REQ for `qpn` (an RC QP in RESET or INIT). `p.qpn` and
    /// `p.starting_psn` are filled in here (a random first PSN: the one we
    /// expect to receive, which the peer sends from). With
    /// `auto_establish` the QP is brought to RTS and the RTU sent when the
    /// REP comes; otherwise the user gets `ConnectResponse` and calls
    /// `cm_establish` itself. `peer_port` is the UDP port of the peer
    /// device when not 4791 (two devices on one host).
    pub fn cm_connect(
        &mut self,
        now: Instant,
        qpn: u32,
        mut p: ConnectParams,
        peer_port: Option<u16>,
        auto_establish: bool,
    ) -> Result<CmId, CmError> {
        match self.qp_type(qpn) {
            Some(QpType::Rc) => {}
            Some(_) => return Err(CmError::Invalid("RDMA CM connects RC QPs")),
            None => return Err(CmError::Invalid("no such QP")),
        }
        let psn = self.random_psn().value();
        p.qpn = qpn;
        p.starting_psn = psn;
        let (peer, retry_count) = (p.dst_ip, p.retry_count);
        self.cm_peer_ports_set(peer, peer_port);
        let id = self.cm.connect(now, &p)?;
        self.cm_links.insert(
            id,
            CmLink { qpn, own_psn: psn, peer, peer_port, retry_count, auto_establish, attrs: None },
        );
        Ok(id)
    }

    /// Brings `qpn` to RTS towards the REQ's sender and answers with a REP
    /// (`p.qpn`/`p.starting_psn` are filled in here).
    pub fn cm_accept(
        &mut self,
        now: Instant,
        id: CmId,
        qpn: u32,
        req: &ReqInfo,
        mut p: AcceptParams,
    ) -> Result<(), CmError> {
        let psn = self.random_psn().value();
        p.qpn = qpn;
        p.starting_psn = psn;
        let peer_port = self.cm_peer_ports.get(&req.src_ip).copied();
        let mut av = AddressVector::new(req.src_ip);
        av.udp_port = peer_port;
        let mtu = self.cm_path_mtu(req.path_mtu);
        let attrs = RtsAttrs {
            av,
            mtu,
            dest_qpn: req.remote_qpn,
            // We receive from the PSN our REP announces and send from the
            // REQ's (as the kernel's passive side does).
            rq_psn: psn,
            sq_psn: req.starting_psn,
            max_dest_rd_atomic: p.responder_resources,
            max_rd_atomic: p.initiator_depth,
            timeout: req.local_ack_timeout,
            retry_cnt: req.retry_count,
            rnr_retry: req.rnr_retry_count,
        };
        self.cm_bring_up(qpn, &attrs).map_err(|_| CmError::Invalid("the QP cannot be brought to RTS"))?;
        self.cm.accept(now, id, &p)?;
        self.cm_comm_est.insert(qpn, id);
        self.cm_links.insert(
            id,
            CmLink {
                qpn,
                own_psn: psn,
                peer: req.src_ip,
                peer_port,
                retry_count: req.retry_count,
                auto_establish: false,
                attrs: Some(attrs),
            },
        );
        Ok(())
    }

    /// The attributes `qpn` of `id` takes in `state` (INIT, RTR or RTS)
    /// and their mask, once the REP (active) or REQ (passive) is known:
    /// what `rdma_init_qp_attr` reports, for a user that moves the QP
    /// itself (then `cm_establish`). `None` before that or for another state.
    pub fn cm_qp_attr(&self, id: CmId, state: QpState) -> Option<(QpAttr, AttrMask)> {
        use AttrMask as M;
        let a = self.cm_links.get(&id)?.attrs?;
        Some(match state {
            QpState::Init => (
                QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() },
                M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
            ),
            QpState::Rtr => (a.rtr(), a.rtr_mask()),
            QpState::Rts => (a.rts(), a.rts_mask()),
            _ => return None,
        })
    }

    /// The RTU after the user brought its QP to RTS (`rdma_establish`).
    pub fn cm_establish(&mut self, id: CmId) -> Result<(), CmError> {
        self.cm.establish(id)
    }

    /// Forgets `id` (see `Cm::destroy`) and the engine's notes on it.
    pub fn cm_destroy(&mut self, now: Instant, id: CmId) -> Result<(), CmError> {
        if let Some(l) = self.cm_links.remove(&id) {
            self.cm_comm_est.remove(&l.qpn);
        }
        self.cm_events.retain(|e| e.id() != id);
        self.cm.destroy(now, id)
    }

    /// Remembers the UDP port of a peer device that is not on 4791.
    fn cm_peer_ports_set(&mut self, peer: IpAddr, port: Option<u16>) {
        match port {
            Some(p) if p != self.res.cfg.udp_port => {
                self.cm_peer_ports.insert(peer, p);
            }
            _ => {
                self.cm_peer_ports.remove(&peer);
            }
        }
    }

    fn cm_path_mtu(&self, wire: u8) -> PathMtu {
        let ours = self.cm.config().path_mtu;
        match wire.min(ours) {
            1 => PathMtu::Mtu256,
            2 => PathMtu::Mtu512,
            4 => PathMtu::Mtu2048,
            5 => PathMtu::Mtu4096,
            _ => PathMtu::Mtu1024,
        }
    }

    /// INIT (unless there already), RTR, RTS.
    fn cm_bring_up(&mut self, qpn: u32, a: &RtsAttrs) -> Result<(), VerbsError> {
        use AttrMask as M;
        if self.qp_state(qpn) == Some(QpState::Reset) {
            let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
            self.modify_qp(qpn, &init, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)?;
        }
        self.modify_qp(qpn, &a.rtr(), a.rtr_mask())?;
        self.modify_qp(qpn, &a.rts(), a.rts_mask())
    }

    /// The RTR/RTS attributes of an active connection from its REP
    /// (`cm_rep_handler` + `ib_cm_init_qp_attr`): READs we may issue = the
    /// peer's responder resources, READs we take = its initiator depth,
    /// the ACK timeout from its Target ACK Delay, its RNR retry count.
    fn cm_rep_attrs(&self, link: &CmLink, rep: &RepInfo) -> RtsAttrs {
        let mut av = AddressVector::new(link.peer);
        av.udp_port = link.peer_port;
        RtsAttrs {
            av,
            mtu: self.cm_path_mtu(self.cm.config().path_mtu),
            dest_qpn: rep.remote_qpn,
            // We receive from the PSN our REQ announced, send from the REP's.
            rq_psn: link.own_psn,
            sq_psn: rep.starting_psn,
            max_dest_rd_atomic: rep.initiator_depth,
            max_rd_atomic: rep.responder_resources,
            timeout: rep.ack_timeout,
            retry_cnt: link.retry_count,
            rnr_retry: rep.rnr_retry_count,
        }
    }

    /// Takes the CM's events, acting on those the engine handles itself.
    fn cm_process_events(&mut self) {
        while let Some(ev) = self.cm.poll_event() {
            match ev {
                CmEvent::ConnectResponse { id, rep } if self.cm_links.contains_key(&id) => {
                    let link = self.cm_links[&id];
                    let attrs = self.cm_rep_attrs(&link, &rep);
                    self.cm_links.get_mut(&id).expect("checked").attrs = Some(attrs);
                    // Reported in both modes: with `auto_establish` it
                    // comes just before `Established`, for the REP's
                    // private data and resources (what librdmacm puts in
                    // the active side's ESTABLISHED event).
                    self.cm_events.push_back(CmEvent::ConnectResponse { id, rep });
                    if !link.auto_establish {
                        continue;
                    }
                    if self.cm_bring_up(link.qpn, &attrs).is_ok() {
                        // `establish` queues the RTU and `Established`.
                        let _ = self.cm.establish(id);
                    } else {
                        // The QP cannot take the peer's values: REJ, and
                        // the user hears of it as a rejection.
                        let _ = self.cm.reject(self.cm_now, id, &[]);
                        self.cm_events.push_back(CmEvent::Rejected {
                            id,
                            reason: crate::cm::reason::CONSUMER_DEFINED,
                            private_data: Vec::new(),
                        });
                    }
                }
                CmEvent::Established { id } => {
                    if let Some(l) = self.cm_links.get(&id) {
                        self.cm_comm_est.remove(&l.qpn);
                    }
                    self.cm_events.push_back(ev);
                }
                ev => self.cm_events.push_back(ev),
            }
        }
    }

    /// A valid packet arrived on `qpn`: the RTU's stand-in if the CM
    /// waits for one there.
    pub(super) fn cm_packet_on(&mut self, qpn: u32) {
        if let Some(id) = self.cm_comm_est.remove(&qpn) {
            let _ = self.cm.notify_established(id);
        }
    }

    /// A packet for QP 1: a MAD if it is a UD SEND_ONLY with the GSI's
    /// P_Key and Q_Key (rxe's `check_keys`); dropped otherwise.
    pub(super) fn handle_gsi(&mut self, now: Instant, meta: &DatagramMeta, pkt: &RocePacketRepr<'_>) {
        let ok = pkt.bth.opcode == UD_SEND_ONLY
            && pkt.bth.pkey & 0x7fff == 0x7fff
            && pkt.ext.deth.is_some_and(|d: DethRepr| d.qkey == GSI_QKEY)
            && pkt.payload.len() >= MAD_LEN;
        if !ok {
            self.res.counters.gsi_dropped += 1;
            return;
        }
        self.res.counters.gsi_rcvd += 1;
        self.cm_now = now;
        self.cm.handle_mad(now, meta.src, &pkt.payload[..MAD_LEN]);
        self.cm_process_events();
    }

    /// The next MAD as a datagram in `buf`, if the CM has one.
    pub(super) fn produce_gsi(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let CmTransmit { dst, mad } = self.cm.poll_transmit()?;
        let src = *self.res.cfg.gids.first()?;
        let bth = BthRepr {
            opcode: UD_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pkey: roce_wire::mad::DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp: GSI_QPN,
            ack_req: true,
            psn: Psn::new(self.gsi_psn),
        };
        self.gsi_psn = (self.gsi_psn + 1) & 0xff_ffff;
        bth.emit(&mut roce_wire::bth::Bth::new_unchecked(&mut buf[..12]), 0);
        DethRepr { qkey: GSI_QKEY, src_qp: GSI_QPN }
            .emit(&mut roce_wire::deth::Deth::new_unchecked(&mut buf[12..20]));
        buf[20..20 + MAD_LEN].copy_from_slice(&mad);
        let body = 20 + MAD_LEN;
        let meta = DatagramMeta {
            src,
            dst,
            src_port: self.res.cfg.fixed_src_port.unwrap_or(0xc000 | 0x0abc),
            dst_port: self.cm_peer_ports.get(&dst).copied().unwrap_or(self.res.cfg.udp_port),
            ecn: 0,
            ipv4_id: Some(0),
        };
        let crc = datagram_icrc(&meta, &buf[..body])?;
        buf[body..body + icrc::ICRC_LEN].copy_from_slice(&crc.to_le_bytes());
        self.res.counters.sent_pkts += 1;
        self.res.counters.gsi_sent += 1;
        let len = body + icrc::ICRC_LEN;
        Some(Transmit {
            meta,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            len,
            segment_size: len,
            qpn: GSI_QPN,
            carried: len,
        })
    }
}

/// The attributes of RTR and RTS the CM negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RtsAttrs {
    av: AddressVector,
    mtu: PathMtu,
    dest_qpn: u32,
    rq_psn: u32,
    sq_psn: u32,
    max_dest_rd_atomic: u8,
    max_rd_atomic: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
}

impl RtsAttrs {
    /// RTR: the kernel gives `min_rnr_timer` 0 (655 ms); ours is 12
    /// (0.64 ms), the RNR NAK delay our receiver asks of the peer. At
    /// least one READ/atomic is accepted.
    fn rtr(&self) -> QpAttr {
        QpAttr {
            qp_state: QpState::Rtr,
            av: self.av,
            path_mtu: self.mtu,
            dest_qp_num: self.dest_qpn,
            rq_psn: Psn::new(self.rq_psn),
            max_dest_rd_atomic: self.max_dest_rd_atomic.max(1),
            min_rnr_timer: 12,
            ..QpAttr::default()
        }
    }
    fn rtr_mask(&self) -> AttrMask {
        use AttrMask as M;
        M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER
    }
    fn rts(&self) -> QpAttr {
        QpAttr {
            qp_state: QpState::Rts,
            sq_psn: Psn::new(self.sq_psn),
            timeout: self.timeout,
            retry_cnt: self.retry_cnt.min(7),
            rnr_retry: self.rnr_retry.min(7),
            max_rd_atomic: self.max_rd_atomic.max(1),
            ..self.rtr()
        }
    }
    fn rts_mask(&self) -> AttrMask {
        use AttrMask as M;
        M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
    }
}
