//! MADs from the network: one handler per message, each following its
//! namesake in Linux' cm.c (`cm_req_handler`, `cm_rep_handler`, ...).

use core::net::IpAddr;

use roce_wire::cm::{
    CmMadRepr, CmMsgRepr, DrepRepr, DreqRepr, MraRepr, RejRepr, RepRepr, ReqRepr, RtuRepr, SidrRepRepr,
    SidrReqRepr,
};
use roce_wire::cma::{self, CmaHdrRepr};

use super::conn::{Entry, Remote};
use super::*;

impl Cm {
    /// Handles one MAD that arrived at QP 1 from `src` (its 256 bytes).
    /// Malformed MADs and MADs for no known identifier are counted and
    /// dropped (or answered, where cm.c answers: REJ, DREP).
    pub fn handle_mad(&mut self, now: Instant, src: IpAddr, bytes: &[u8]) {
        self.counters.mads_received += 1;
        let mad = match CmMadRepr::parse(bytes) {
            Ok(m) => m,
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        let tid = mad.mad.transaction_id;
        match mad.msg {
            CmMsgRepr::Req(m) => self.on_req(now, src, tid, &m),
            CmMsgRepr::Mra(m) => self.on_mra(now, &m),
            CmMsgRepr::Rej(m) => self.on_rej(now, &m),
            CmMsgRepr::Rep(m) => self.on_rep(src, tid, &m),
            CmMsgRepr::Rtu(m) => self.on_rtu(&m),
            CmMsgRepr::Dreq(m) => self.on_dreq(now, src, tid, &m),
            CmMsgRepr::Drep(m) => self.on_drep(now, &m),
            CmMsgRepr::SidrReq(m) => self.on_sidr_req(src, tid, &m),
            CmMsgRepr::SidrRep(m) => self.on_sidr_rep(&m),
        }
    }

    /// The local ID a message names as its remote comm ID, if that ID
    /// exists and its peer is `their` (when known).
    fn lookup(&self, ours: u32, their: Option<u32>) -> Option<u32> {
        let e = self.ids.get(&ours)?;
        match (their, e.remote) {
            (Some(t), Some(r)) if r.comm_id != t => None,
            _ => Some(ours),
        }
    }

    fn on_req(&mut self, now: Instant, src: IpAddr, tid: u64, m: &ReqRepr<'_>) {
        // Duplicate: (remote CA GUID, remote comm ID) known (`cm_dup_req_handler`).
        if let Some(&local) = self.by_remote_id.get(&(m.local_ca_guid, m.local_comm_id)) {
            self.counters.duplicates += 1;
            match self.ids.get(&local).map(|e| e.state) {
                Some(CmState::ReqRcvd | CmState::MraReqSent) => {
                    if let Some(e) = self.ids.get_mut(&local) {
                        e.state = CmState::MraReqSent;
                    }
                    self.send_mra(local, 0);
                }
                Some(CmState::Timewait) => self.send_rej(local, reason::STALE_CONN, 0, &[], &[]),
                _ => {}
            }
            return;
        }
        // Stale: (remote CA GUID, remote QPN) of a live or timewait connection.
        if let Some(&old) = self.by_remote_qpn.get(&(m.local_ca_guid, m.local_qpn)) {
            self.counters.stale += 1;
            self.issue_rej(src, tid, m.local_comm_id, reason::STALE_CONN, 0);
            if self.ids.get(&old).is_some_and(|e| e.state == CmState::Established) {
                self.start_dreq(now, old, &[]);
            }
            return;
        }
        let Some(listener) = self.listeners.get(&m.service_id).copied() else {
            self.issue_rej(src, tid, m.local_comm_id, reason::INVALID_SERVICE_ID, 0);
            return;
        };
        if m.transport_type > 1 {
            self.issue_rej(src, tid, m.local_comm_id, reason::INVALID_TRANSPORT_TYPE, 0);
            return;
        }
        // RDMA CM's checks after the CM matched (`cma_ib_req_handler`):
        // a valid IP header addressed to us; failing them is REJ 28.
        let hdr = match CmaHdrRepr::parse(m.private_data) {
            Ok(h) if h.dst_ip == self.cfg.local_ip && h.src_ip.is_ipv4() == self.cfg.local_ip.is_ipv4() => h,
            _ => {
                self.issue_rej(src, tid, m.local_comm_id, reason::CONSUMER_DEFINED, 0);
                return;
            }
        };
        let local = self.fresh_id();
        let mut e = Entry::new(CmState::MraReqSent, PortSpace::Tcp, Some(src));
        e.tid = tid;
        e.service_id = m.service_id;
        // Passive timers (`cm_req_handler`): REP re-sent every
        // conv(REQ local CM response timeout), REQ's max CM retries; the
        // QP timeout (and timewait) from the REQ's Local ACK Timeout.
        e.resend = cm_timeout(m.local_cm_response_timeout);
        e.max_retries = m.max_cm_retries;
        e.ack_timeout = m.primary_path.local_ack_timeout;
        self.ids.insert(local, e);
        let remote = Remote { ca_guid: m.local_ca_guid, comm_id: m.local_comm_id, qpn: m.local_qpn };
        self.set_remote(local, remote);
        let req = ReqInfo {
            service_id: m.service_id,
            remote_ca_guid: m.local_ca_guid,
            remote_comm_id: m.local_comm_id,
            remote_qpn: m.local_qpn,
            starting_psn: m.starting_psn,
            responder_resources: m.responder_resources,
            initiator_depth: m.initiator_depth,
            retry_count: m.retry_count,
            rnr_retry_count: m.rnr_retry_count,
            path_mtu: m.path_mtu,
            local_ack_timeout: m.primary_path.local_ack_timeout,
            srq: m.srq,
            transport_type: m.transport_type,
            src_ip: hdr.src_ip,
            src_port: hdr.src_port,
            dst_ip: hdr.dst_ip,
            dst_port: listener.port,
            private_data: m.private_data[cma::HEADER_LEN..].to_vec(),
        };
        self.push_event(CmEvent::ConnectRequest { listener: CmId(listener.id), id: CmId(local), req });
    }

    fn on_mra(&mut self, now: Instant, m: &MraRepr<'_>) {
        let Some(local) = self.lookup(m.remote_comm_id, None) else {
            self.counters.unknown_id += 1;
            return;
        };
        let e = self.ids.get_mut(&local).expect("looked up");
        let next = match (e.state, m.message_mraed) {
            (CmState::ReqSent, 0) => CmState::MraReqRcvd,
            (CmState::RepSent, 1) => CmState::MraRepRcvd,
            _ => {
                self.counters.duplicates += 1;
                return;
            }
        };
        e.state = next;
        // `cm_mra_handler`: the MAD's timeout becomes the service timeout
        // plus the path's packet life time, its retries stay.
        let stretch = cm_timeout(m.service_timeout) + cm_timeout(e.ack_timeout);
        if let Some(t) = e.timer.as_mut() {
            t.timeout = stretch;
            t.deadline = now + stretch;
        }
    }

    fn on_rej(&mut self, now: Instant, m: &RejRepr<'_>) {
        // A REJ of our REQ names only our ID; others name both.
        let their = (m.message_rejected != 0).then_some(m.local_comm_id);
        // A REJ "timeout" names the sender's CA GUID in its ARI, and the
        // REQ it abandons by the sender's comm ID (`cm_acquire_rejected_id`).
        let by_ari = (m.reason == reason::TIMEOUT && m.ari.len() >= 8)
            .then(|| u64::from_be_bytes(m.ari[..8].try_into().expect("8 bytes")))
            .and_then(|guid| self.by_remote_id.get(&(guid, m.local_comm_id)).copied());
        let Some(local) = by_ari.or_else(|| self.lookup(m.remote_comm_id, their)) else {
            self.counters.unknown_id += 1;
            return;
        };
        let state = self.ids[&local].state;
        let id = CmId(local);
        let ev = CmEvent::Rejected { id, reason: m.reason, private_data: m.private_data.to_vec() };
        match state {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent => {
                self.push_event(ev);
                if m.reason == reason::STALE_CONN {
                    self.enter_timewait(now, local);
                } else {
                    self.reset_to_idle(local);
                }
            }
            CmState::DreqSent | CmState::RepRcvd | CmState::MraRepSent | CmState::Established => {
                self.push_event(ev);
                self.enter_timewait(now, local);
            }
            _ => self.counters.duplicates += 1,
        }
    }

    fn on_rep(&mut self, src: IpAddr, tid: u64, m: &RepRepr<'_>) {
        let Some(local) = self.lookup(m.remote_comm_id, None) else {
            self.counters.unknown_id += 1;
            return;
        };
        let state = self.ids[&local].state;
        match state {
            CmState::ReqSent | CmState::MraReqRcvd => {}
            // `cm_dup_rep_handler`: RTU again once established, MRA while
            // the user has not sent it; nothing otherwise.
            CmState::Established if self.ids[&local].remote.is_some_and(|r| r.comm_id == m.local_comm_id) => {
                self.counters.duplicates += 1;
                self.send_rtu(local);
                return;
            }
            CmState::RepRcvd | CmState::MraRepSent => {
                self.counters.duplicates += 1;
                self.ids.get_mut(&local).expect("looked up").state = CmState::MraRepSent;
                self.send_mra(local, 1);
                return;
            }
            _ => {
                self.counters.duplicates += 1;
                return;
            }
        }
        // Stale rules on the REP (`cm_rep_handler`): the peer's IDs or QPN
        // already in use by another connection.
        let stale = self.by_remote_id.get(&(m.local_ca_guid, m.local_comm_id)).is_some_and(|&l| l != local)
            || self.by_remote_qpn.get(&(m.local_ca_guid, m.local_qpn)).is_some_and(|&l| l != local);
        if stale {
            self.counters.stale += 1;
            self.issue_rej(src, tid, m.local_comm_id, reason::STALE_CONN, 1);
            return;
        }
        let plt = self.cfg.packet_life_time;
        let e = self.ids.get_mut(&local).expect("looked up");
        e.timer = None;
        e.state = CmState::MraRepSent;
        let ack_timeout = cm_ack_timeout(m.target_ack_delay, plt);
        e.ack_timeout = ack_timeout;
        let remote = Remote { ca_guid: m.local_ca_guid, comm_id: m.local_comm_id, qpn: m.local_qpn };
        self.set_remote(local, remote);
        let rep = RepInfo {
            remote_comm_id: m.local_comm_id,
            remote_qpn: m.local_qpn,
            starting_psn: m.starting_psn,
            responder_resources: m.responder_resources,
            initiator_depth: m.initiator_depth,
            target_ack_delay: m.target_ack_delay,
            rnr_retry_count: m.rnr_retry_count,
            srq: m.srq,
            ack_timeout,
            private_data: m.private_data.to_vec(),
        };
        self.push_event(CmEvent::ConnectResponse { id: CmId(local), rep });
    }

    fn on_rtu(&mut self, m: &RtuRepr<'_>) {
        let Some(local) = self.lookup(m.remote_comm_id, Some(m.local_comm_id)) else {
            self.counters.unknown_id += 1;
            return;
        };
        let e = self.ids.get_mut(&local).expect("looked up");
        if !matches!(e.state, CmState::RepSent | CmState::MraRepRcvd) {
            self.counters.duplicates += 1;
            return;
        }
        e.state = CmState::Established;
        e.timer = None;
        self.push_event(CmEvent::Established { id: CmId(local) });
    }

    fn on_dreq(&mut self, now: Instant, src: IpAddr, tid: u64, m: &DreqRepr<'_>) {
        let found = self.lookup(m.remote_comm_id, Some(m.local_comm_id));
        let Some(local) = found.filter(|l| self.ids[l].local_qpn == m.remote_qpn) else {
            // `cm_dreq_handler`: no such connection, DREP anyway.
            self.counters.unknown_id += 1;
            self.issue_drep(src, tid, m.local_comm_id, m.remote_comm_id);
            return;
        };
        let id = CmId(local);
        let e = self.ids.get_mut(&local).expect("looked up");
        match e.state {
            CmState::RepSent | CmState::MraRepRcvd | CmState::Established => {
                e.timer = None;
                e.tid = tid;
                e.state = CmState::DreqRcvd;
                let orphan = e.orphan;
                self.push_event(CmEvent::Disconnected { id, private_data: m.private_data.to_vec() });
                if orphan {
                    // Nobody to answer: as `cm_destroy_id` in DREQ_RCVD.
                    self.send_drep(local, &[]);
                    self.enter_timewait(now, local);
                }
            }
            CmState::DreqSent => {
                // DREQ crossing DREQ: the peer's DREQ answers ours.
                e.timer = None;
                e.tid = tid;
                self.push_event(CmEvent::Disconnected { id, private_data: m.private_data.to_vec() });
                self.send_drep(local, &[]);
                self.enter_timewait(now, local);
            }
            CmState::Timewait => {
                e.tid = tid;
                self.counters.duplicates += 1;
                self.send_drep(local, &[]);
            }
            _ => self.counters.duplicates += 1,
        }
    }

    fn on_drep(&mut self, now: Instant, m: &DrepRepr<'_>) {
        let Some(local) = self.lookup(m.remote_comm_id, Some(m.local_comm_id)) else {
            self.counters.unknown_id += 1;
            return;
        };
        match self.ids[&local].state {
            CmState::DreqSent => {
                self.push_event(CmEvent::Disconnected {
                    id: CmId(local),
                    private_data: m.private_data.to_vec(),
                });
                self.enter_timewait(now, local);
            }
            CmState::DreqRcvd => self.enter_timewait(now, local),
            _ => self.counters.duplicates += 1,
        }
    }

    fn on_sidr_req(&mut self, src: IpAddr, tid: u64, m: &SidrReqRepr<'_>) {
        if self.by_sidr.contains_key(&(src, m.request_id)) {
            self.counters.duplicates += 1;
            return;
        }
        let hdr = CmaHdrRepr::parse(m.private_data).ok().filter(|h| h.dst_ip == self.cfg.local_ip);
        let listener = self.listeners.get(&m.service_id).copied();
        let local = self.fresh_id();
        let mut e = Entry::new(CmState::SidrReqRcvd, PortSpace::Udp, Some(src));
        e.tid = tid;
        e.service_id = m.service_id;
        e.remote = Some(Remote { ca_guid: 0, comm_id: m.request_id, qpn: 0 });
        e.sidr_key = Some((src, m.request_id));
        self.ids.insert(local, e);
        let (Some(listener), Some(hdr)) = (listener, hdr) else {
            // `cm_sidr_req_handler`: no listener → "service ID not supported".
            let status = if listener.is_none() { sidr_status::UNSUPPORTED } else { sidr_status::REJECT };
            self.send_sidr_rep(local, status, 0, 0, &[]);
            self.forget(local);
            return;
        };
        self.by_sidr.insert((src, m.request_id), local);
        let req = SidrReqInfo {
            service_id: m.service_id,
            src_ip: hdr.src_ip,
            src_port: hdr.src_port,
            dst_port: listener.port,
            private_data: m.private_data[cma::HEADER_LEN..].to_vec(),
        };
        self.push_event(CmEvent::SidrRequest { listener: CmId(listener.id), id: CmId(local), req });
    }

    fn on_sidr_rep(&mut self, m: &SidrRepRepr<'_>) {
        let Some(local) =
            self.lookup(m.request_id, None).filter(|l| self.ids[l].state == CmState::SidrReqSent)
        else {
            self.counters.unknown_id += 1;
            return;
        };
        let id = CmId(local);
        self.push_event(CmEvent::SidrReply {
            id,
            status: m.status,
            qpn: m.qpn,
            qkey: m.qkey,
            private_data: m.private_data.to_vec(),
        });
        self.reset_to_idle(local);
    }
}
