//! The user's side of the CM: the calls that send (REQ, REP, RTU, REJ,
//! DREQ, DREP, MRA, SIDR) and the MADs they build (`cm_format_*` of cm.c).

use core::net::IpAddr;

use roce_wire::cm::{
    CmMadRepr, CmMsgRepr, DrepRepr, DreqRepr, MraRepr, PathRepr, RejRepr, RepRepr, ReqRepr, RtuRepr,
    SidrRepRepr, SidrReqRepr,
};
use roce_wire::cma::{self, CmaHdrRepr};
use roce_wire::mad::{DEFAULT_PKEY, MAD_LEN};

use super::conn::{Entry, Remote};
use super::*;

/// Bytes of user private data a REQ holds after the RDMA CM header.
pub const REQ_USER_PRIVATE: usize = 92 - cma::HEADER_LEN;
/// Bytes of user private data a SIDR_REQ holds after the RDMA CM header.
pub const SIDR_REQ_USER_PRIVATE: usize = 216 - cma::HEADER_LEN;

/// The GID of an IP address on RoCEv2 (`rdma_ip2gid`): IPv4-mapped.
pub fn ip_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn check_len(data: &[u8], max: usize) -> Result<(), CmError> {
    if data.len() > max {
        return Err(CmError::PrivateDataTooLong { len: data.len(), max });
    }
    Ok(())
}

fn mad_bytes(tid: u64, msg: CmMsgRepr<'_>) -> [u8; MAD_LEN] {
    let mut b = [0u8; MAD_LEN];
    // The callers checked every private-data length against its field.
    CmMadRepr::new(tid, msg).emit(&mut b).expect("private data lengths checked by the caller");
    b
}

impl Cm {
    fn entry(&self, id: CmId) -> Result<&Entry, CmError> {
        self.ids.get(&id.0).ok_or(CmError::NoSuchId)
    }

    fn cma_header(
        &self,
        dst_ip: IpAddr,
        src_port: u16,
        user: &[u8],
        room: usize,
    ) -> Result<Vec<u8>, CmError> {
        if dst_ip.is_ipv4() != self.cfg.local_ip.is_ipv4() {
            return Err(CmError::AddressFamily(dst_ip));
        }
        check_len(user, room)?;
        let mut pd = vec![0u8; cma::HEADER_LEN + user.len()];
        CmaHdrRepr { src_ip: self.cfg.local_ip, dst_ip, src_port }
            .emit(&mut pd)
            .map_err(|_| CmError::AddressFamily(dst_ip))?;
        pd[cma::HEADER_LEN..].copy_from_slice(user);
        Ok(pd)
    }

    /// Sends a REQ (RC, port space TCP) and returns the new connection's
    /// ID. Fields as `cma_connect_ib` / `cm_format_req` fill them on RoCE.
    pub fn connect(&mut self, now: Instant, p: &ConnectParams) -> Result<CmId, CmError> {
        if p.retry_count > 7 || p.rnr_retry_count > 7 || p.qpn == 0 || p.qpn > 0xff_ffff {
            return Err(CmError::Invalid("retry counts are 3 bits and the QPN 24"));
        }
        let pd = self.cma_header(p.dst_ip, p.src_port, &p.private_data, REQ_USER_PRIVATE)?;
        let local = self.fresh_id();
        let tid = self.form_tid(local);
        let c = &self.cfg;
        let sid = PortSpace::Tcp.service_id(p.dst_port);
        let flow_label = (u32::from(p.src_port) * 31 + u32::from(p.dst_port)) & 0xf_ffff;
        let req = ReqRepr {
            local_comm_id: local,
            service_id: sid,
            local_ca_guid: c.ca_guid,
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            remote_cm_response_timeout: c.cm_response_timeout,
            transport_type: 0,
            starting_psn: p.starting_psn & 0xff_ffff,
            local_cm_response_timeout: c.cm_response_timeout,
            retry_count: p.retry_count,
            pkey: DEFAULT_PKEY,
            path_mtu: c.path_mtu,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: c.max_cm_retries,
            srq: p.srq,
            primary_path: PathRepr {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: ip_gid(c.local_ip),
                remote_gid: ip_gid(p.dst_ip),
                flow_label,
                traffic_class: c.traffic_class,
                hop_limit: c.hop_limit,
                local_ack_timeout: c.local_ack_timeout,
                ..PathRepr::default()
            },
            private_data: &pd,
            ..ReqRepr::default()
        };
        let mad = mad_bytes(tid, CmMsgRepr::Req(req));
        let timeout = cm_timeout(c.packet_life_time)
            + cm_timeout(c.packet_life_time)
            + cm_timeout(c.cm_response_timeout);
        let retries = c.max_cm_retries;
        let mut e = Entry::new(CmState::ReqSent, PortSpace::Tcp, Some(p.dst_ip));
        e.tid = tid;
        e.local_qpn = p.qpn;
        e.ack_timeout = c.local_ack_timeout;
        e.resend = timeout;
        e.max_retries = retries;
        e.service_id = sid;
        self.ids.insert(local, e);
        self.send(now, local, p.dst_ip, mad, Some((timeout, retries)));
        Ok(CmId(local))
    }

    /// Answers a connection request with a REP (the QP must be ready to
    /// receive: RTR). Re-sent on the REQ's schedule until RTU or the first
    /// packet.
    pub fn accept(&mut self, now: Instant, id: CmId, p: &AcceptParams) -> Result<(), CmError> {
        let e = self.entry(id)?;
        if !matches!(e.state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(CmError::WrongState(e.state));
        }
        check_len(&p.private_data, private_len_rep())?;
        if p.rnr_retry_count > 7 || p.qpn == 0 || p.qpn > 0xff_ffff {
            return Err(CmError::Invalid("RNR retry count is 3 bits and the QPN 24"));
        }
        let (remote, dst, tid) =
            (e.remote.expect("a received REQ has a remote"), e.peer_ip.expect("peer"), e.tid);
        let rep = RepRepr {
            local_comm_id: id.0,
            remote_comm_id: remote.comm_id,
            local_qpn: p.qpn,
            starting_psn: p.starting_psn & 0xff_ffff,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: self.cfg.target_ack_delay,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: self.cfg.ca_guid,
            private_data: &p.private_data,
            ..RepRepr::default()
        };
        let mad = mad_bytes(tid, CmMsgRepr::Rep(rep));
        let e = self.ids.get_mut(&id.0).expect("looked up above");
        e.state = CmState::RepSent;
        e.local_qpn = p.qpn;
        let retry = Some((e.resend, e.max_retries));
        self.send(now, id.0, dst, mad, retry);
        Ok(())
    }

    /// Sends the RTU after a REP (the user has brought its QP to RTS):
    /// established.
    pub fn establish(&mut self, id: CmId) -> Result<(), CmError> {
        let e = self.entry(id)?;
        if !matches!(e.state, CmState::RepRcvd | CmState::MraRepSent) {
            return Err(CmError::WrongState(e.state));
        }
        self.send_rtu(id.0);
        self.ids.get_mut(&id.0).expect("looked up above").state = CmState::Established;
        self.push_event(CmEvent::Established { id });
        Ok(())
    }

    /// The passive side saw the first valid packet on its QP before the
    /// RTU (IB_EVENT_COMM_EST → `ib_cm_notify`): established.
    pub fn notify_established(&mut self, id: CmId) -> Result<(), CmError> {
        let e = self.ids.get_mut(&id.0).ok_or(CmError::NoSuchId)?;
        if !matches!(e.state, CmState::RepSent | CmState::MraRepRcvd) {
            return Err(CmError::WrongState(e.state));
        }
        e.state = CmState::Established;
        e.timer = None;
        self.push_event(CmEvent::Established { id });
        Ok(())
    }

    /// Rejects a connection request (REJ 28, "consumer defined", as
    /// `rdma_reject`) or, on the active side, a REP.
    pub fn reject(&mut self, now: Instant, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        let e = self.entry(id)?;
        check_len(private_data, 148)?;
        match e.state {
            CmState::ReqRcvd | CmState::MraReqSent => {
                self.send_rej(id.0, reason::CONSUMER_DEFINED, 0, &[], private_data);
                self.reset_to_idle(id.0);
            }
            CmState::RepRcvd | CmState::MraRepSent => {
                self.send_rej(id.0, reason::CONSUMER_DEFINED, 1, &[], private_data);
                self.enter_timewait(now, id.0);
            }
            CmState::SidrReqRcvd => {
                self.send_sidr_rep(id.0, sidr_status::REJECT, 0, 0, private_data);
                self.reset_to_idle(id.0);
            }
            s => return Err(CmError::WrongState(s)),
        }
        Ok(())
    }

    /// Disconnects: DREQ from an established connection, DREP to a DREQ
    /// received. A passive side still waiting for the RTU counts as
    /// established (its QP is usable).
    pub fn disconnect(&mut self, now: Instant, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        let e = self.entry(id)?;
        check_len(private_data, 220)?;
        match e.state {
            CmState::Established | CmState::RepSent | CmState::MraRepRcvd => {
                self.start_dreq(now, id.0, private_data)
            }
            CmState::DreqRcvd => {
                self.send_drep(id.0, private_data);
                self.enter_timewait(now, id.0);
            }
            s => return Err(CmError::WrongState(s)),
        }
        Ok(())
    }

    /// Asks `dst_ip`'s UD service on `dst_port` for its QPN and Q_Key
    /// (SIDR_REQ, port space UDP), re-sent every `conv(CM response
    /// timeout)` up to max CM retries (`cma_resolve_ib_udp`).
    pub fn sidr_request(
        &mut self,
        now: Instant,
        dst_ip: IpAddr,
        dst_port: u16,
        src_port: u16,
        private_data: &[u8],
    ) -> Result<CmId, CmError> {
        let pd = self.cma_header(dst_ip, src_port, private_data, SIDR_REQ_USER_PRIVATE)?;
        let local = self.fresh_id();
        let tid = self.form_tid(local);
        let sid = PortSpace::Udp.service_id(dst_port);
        let msg = SidrReqRepr { request_id: local, pkey: DEFAULT_PKEY, service_id: sid, private_data: &pd };
        let mad = mad_bytes(tid, CmMsgRepr::SidrReq(msg));
        let mut e = Entry::new(CmState::SidrReqSent, PortSpace::Udp, Some(dst_ip));
        e.tid = tid;
        e.service_id = sid;
        self.ids.insert(local, e);
        let retry = (cm_timeout(self.cfg.cm_response_timeout), self.cfg.max_cm_retries);
        self.send(now, local, dst_ip, mad, Some(retry));
        Ok(CmId(local))
    }

    /// Answers a SIDR request: `status` 0 with our UD QP and Q_Key.
    pub fn sidr_reply(
        &mut self,
        id: CmId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let e = self.entry(id)?;
        if e.state != CmState::SidrReqRcvd {
            return Err(CmError::WrongState(e.state));
        }
        check_len(private_data, 136)?;
        self.send_sidr_rep(id.0, status, qpn, qkey, private_data);
        self.reset_to_idle(id.0);
        Ok(())
    }

    // ------------------------------------------------------------ builders

    pub(super) fn send_rtu(&mut self, local: u32) {
        let Some(e) = self.ids.get(&local) else { return };
        let (Some(r), Some(dst)) = (e.remote, e.peer_ip) else { return };
        let msg = RtuRepr { local_comm_id: local, remote_comm_id: r.comm_id, private_data: &[] };
        let mad = mad_bytes(e.tid, CmMsgRepr::Rtu(msg));
        self.tx.push_back(CmTransmit { dst, mad });
    }

    pub(super) fn send_mra(&mut self, local: u32, mraed: u8) {
        let Some(e) = self.ids.get(&local) else { return };
        let (Some(r), Some(dst)) = (e.remote, e.peer_ip) else { return };
        let msg = MraRepr {
            local_comm_id: local,
            remote_comm_id: r.comm_id,
            message_mraed: mraed,
            service_timeout: self.cfg.mra_service_timeout,
            private_data: &[],
        };
        let mad = mad_bytes(e.tid, CmMsgRepr::Mra(msg));
        self.tx.push_back(CmTransmit { dst, mad });
    }

    /// A REJ from `local` (`message_rejected` 0 REQ, 1 REP, 2 other).
    pub(super) fn send_rej(
        &mut self,
        local: u32,
        reason: u16,
        rejected: u8,
        ari: &[u8],
        private_data: &[u8],
    ) {
        let Some(e) = self.ids.get(&local) else { return };
        let Some(dst) = e.peer_ip else { return };
        let remote = e.remote.map_or(0, |r| r.comm_id);
        let msg = RejRepr {
            local_comm_id: local,
            remote_comm_id: remote,
            message_rejected: rejected,
            reject_info_len: ari.len() as u8,
            reason,
            ari,
            private_data,
        };
        let mad = mad_bytes(e.tid, CmMsgRepr::Rej(msg));
        self.counters.rejects_sent += 1;
        self.tx.push_back(CmTransmit { dst, mad });
    }

    /// A REJ to a message that has no identifier here (`cm_issue_rej`):
    /// local comm ID 0, remote = the sender's.
    pub(super) fn issue_rej(&mut self, dst: IpAddr, tid: u64, their_id: u32, reason: u16, rejected: u8) {
        let msg = RejRepr {
            local_comm_id: 0,
            remote_comm_id: their_id,
            message_rejected: rejected,
            reason,
            ..RejRepr::default()
        };
        self.counters.rejects_sent += 1;
        self.tx.push_back(CmTransmit { dst, mad: mad_bytes(tid, CmMsgRepr::Rej(msg)) });
    }

    pub(super) fn start_dreq(&mut self, now: Instant, local: u32, private_data: &[u8]) {
        let tid = self.form_tid(local);
        let Some(e) = self.ids.get_mut(&local) else { return };
        let (Some(r), Some(dst)) = (e.remote, e.peer_ip) else { return };
        e.tid = tid;
        e.state = CmState::DreqSent;
        let retry = Some((e.resend, e.max_retries));
        let msg =
            DreqRepr { local_comm_id: local, remote_comm_id: r.comm_id, remote_qpn: r.qpn, private_data };
        let mad = mad_bytes(tid, CmMsgRepr::Dreq(msg));
        self.send(now, local, dst, mad, retry);
    }

    pub(super) fn send_drep(&mut self, local: u32, private_data: &[u8]) {
        let Some(e) = self.ids.get(&local) else { return };
        let (Some(r), Some(dst)) = (e.remote, e.peer_ip) else { return };
        let msg = DrepRepr { local_comm_id: local, remote_comm_id: r.comm_id, private_data };
        let mad = mad_bytes(e.tid, CmMsgRepr::Drep(msg));
        self.tx.push_back(CmTransmit { dst, mad });
    }

    /// A DREP to a DREQ for no known connection (`cm_issue_drep`).
    pub(super) fn issue_drep(&mut self, dst: IpAddr, tid: u64, dreq_local: u32, dreq_remote: u32) {
        let msg = DrepRepr { local_comm_id: dreq_remote, remote_comm_id: dreq_local, private_data: &[] };
        self.tx.push_back(CmTransmit { dst, mad: mad_bytes(tid, CmMsgRepr::Drep(msg)) });
    }

    pub(super) fn send_sidr_rep(&mut self, local: u32, status: u8, qpn: u32, qkey: u32, private_data: &[u8]) {
        let Some(e) = self.ids.get(&local) else { return };
        let (Some(r), Some(dst)) = (e.remote, e.peer_ip) else { return };
        let msg = SidrRepRepr {
            request_id: r.comm_id,
            status,
            qpn,
            service_id: e.service_id,
            qkey,
            add_info: &[],
            private_data,
        };
        let mad = mad_bytes(e.tid, CmMsgRepr::SidrRep(msg));
        self.tx.push_back(CmTransmit { dst, mad });
    }

    /// Records the peer of `local` and indexes it for the duplicate and
    /// stale-connection rules.
    pub(super) fn set_remote(&mut self, local: u32, r: Remote) {
        if let Some(e) = self.ids.get_mut(&local) {
            e.remote = Some(r);
        }
        self.by_remote_id.insert((r.ca_guid, r.comm_id), local);
        if r.qpn != 0 {
            self.by_remote_qpn.insert((r.ca_guid, r.qpn), local);
        }
    }
}

fn private_len_rep() -> usize {
    roce_wire::cm::private_len::REP
}
