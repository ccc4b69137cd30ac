//! From the network: a datagram's ICRC, its opening (a protected QP), its
//! dispatch to the QP and role it is for.

use super::*;

impl Engine {
    // ---------------------------------------------------------------- network

    /// Handles one received datagram (the UDP payload: BTH through ICRC).
    /// Returns what the ICRC check found; everything after it (drops by
    /// reason, the roles' work) shows in the counters and completions.
    pub fn handle_datagram(&mut self, now: Instant, meta: &DatagramMeta, bytes: &[u8]) -> IcrcCheck {
        let check = self.check_icrc(meta, bytes);
        if matches!(check, IcrcCheck::Verified | IcrcCheck::Ipv4IdInferred(_)) {
            self.handle_verified(now, meta, bytes);
        }
        check
    }

    /// Opens the datagram first if its QP is protected (`crypto`).
    pub(super) fn handle_verified(&mut self, now: Instant, meta: &DatagramMeta, bytes: &[u8]) {
        // Nothing more per packet on a device that never protected a QP.
        if !self.any_protected {
            return self.handle_checked(now, meta, bytes);
        }
        // Too short for a BTH: the plain path counts it as malformed.
        let Ok(bth) = roce_wire::bth::Bth::new_checked(bytes) else {
            return self.handle_checked(now, meta, bytes);
        };
        let qpn = bth.dest_qp();
        let info = roce_wire::opcode::lookup(bth.opcode());
        let protected = info.is_some_and(|i| i.transport != Transport::Cnp)
            && self.qps.get(&qpn).is_some_and(|q| q.crypto.is_some());
        let (Some(info), true) = (info, protected) else {
            return self.handle_checked(now, meta, bytes);
        };
        let hdr_len = info.header_len();
        let mut plain = std::mem::take(&mut self.plain_buf);
        let c = self.qps.get_mut(&qpn).and_then(|q| q.crypto.as_mut()).expect("checked above");
        match c.open(bytes, hdr_len, &mut plain) {
            Ok(n) => self.handle_checked(now, meta, &plain[..n]),
            Err(OpenError::Malformed) => self.res.counters.malformed_dropped += 1,
            Err(OpenError::Replay) => self.res.counters.crypto_replay_dropped += 1,
            Err(OpenError::Auth) => self.res.counters.crypto_auth_failed += 1,
        }
        self.plain_buf = plain;
    }

    /// Counts the datagram and checks its ICRC (see `datagram`).
    pub(super) fn check_icrc(&mut self, meta: &DatagramMeta, bytes: &[u8]) -> IcrcCheck {
        let c = &mut self.res.counters;
        c.rcvd_pkts += 1;
        if bytes.len() < roce_wire::packet::MIN_LEN {
            c.malformed_dropped += 1;
            return IcrcCheck::Malformed;
        }
        let (body, crc) = bytes.split_at(bytes.len() - icrc::ICRC_LEN);
        let covered = crate::datagram::icrc_body(self.res.cfg.payload, body);
        let Some((want, covered)) = covered.and_then(|b| Some((datagram_icrc(meta, b)?, b.len()))) else {
            c.malformed_dropped += 1;
            return IcrcCheck::Malformed;
        };
        let got = u32::from_le_bytes(crc.try_into().expect("ICRC_LEN bytes"));
        let inferred = meta.src.is_ipv4() && meta.ipv4_id.is_none();
        let check = if !inferred {
            if got == want {
                IcrcCheck::Verified
            } else {
                IcrcCheck::Failed
            }
        } else if got == want {
            // `datagram_icrc` computed it for ID 0.
            IcrcCheck::Ipv4IdInferred(0)
        } else {
            match self.ipv4_ids.get(covered).solve(want, got) {
                Some(id) => IcrcCheck::Ipv4IdInferred(id),
                None => IcrcCheck::Failed,
            }
        };
        match check {
            IcrcCheck::Failed => c.icrc_errors += 1,
            IcrcCheck::Ipv4IdInferred(_) => c.icrc_ipv4_id_inferred += 1,
            _ => {}
        }
        check
    }

    /// Handles a datagram whose ICRC is right.
    pub(super) fn handle_checked(&mut self, now: Instant, meta: &DatagramMeta, bytes: &[u8]) {
        let c = &mut self.res.counters;
        let (info, pkt) = match RocePacket::new_checked(bytes)
            .and_then(|v| RocePacketRepr::parse_view(&v).map(|p| (v.opcode_info(), p)))
        {
            Ok(x) => x,
            Err(_) => {
                c.malformed_dropped += 1;
                return;
            }
        };
        if meta.ecn == 3 {
            c.ecn_ce_rcvd += 1;
        }
        let pin_port = self.res.cfg.pin_peer_port;
        if info.transport == Transport::Cnp {
            // Annex A17.9.3: a CNP names the QP whose packets were marked;
            // only that QP's peer may slow it down.
            match self.qps.get_mut(&pkt.bth.dest_qp) {
                None => c.cnp_dropped += 1,
                Some(qp) => match qp.core.peer_check(meta, pin_port) {
                    PeerCheck::Pass => {
                        c.cnp_rcvd += 1;
                        qp.on_cnp(&mut self.res, now);
                        sync_timer(&mut self.timers, qp);
                    }
                    PeerCheck::WrongAddress | PeerCheck::WrongPort => c.cnp_dropped += 1,
                },
            }
            return;
        }
        if pkt.bth.dest_qp == roce_wire::mad::GSI_QPN {
            return self.handle_gsi(now, meta, &pkt);
        }
        if pkt.bth.pkey & 0x7fff != self.res.cfg.pkey & 0x7fff {
            c.pkey_violation_dropped += 1;
            return;
        }
        let qpn = pkt.bth.dest_qp;
        let Some(qp) = self.qps.get_mut(&qpn) else {
            c.unknown_qp_dropped += 1;
            return;
        };
        let matches = matches!(
            (info.transport, qp.core.init.qp_type),
            (Transport::Rc, QpType::Rc) | (Transport::Uc, QpType::Uc) | (Transport::Ud, QpType::Ud)
        );
        if !matches {
            c.transport_mismatch_dropped += 1;
            return;
        }
        match qp.core.peer_check(meta, pin_port) {
            PeerCheck::Pass => {}
            PeerCheck::WrongAddress if info.request => {
                c.addr_mismatch_dropped += 1;
                return;
            }
            PeerCheck::WrongAddress => {
                c.response_addr_mismatch_dropped += 1;
                return;
            }
            PeerCheck::WrongPort => {
                c.port_mismatch_dropped += 1;
                return;
            }
        }
        if meta.ecn == 3 && self.res.cfg.cnp.enabled {
            qp.mark_congested(&self.res.cfg, now);
        }
        let qp = if self.cm_comm_est.is_empty() {
            qp
        } else {
            self.cm_packet_on(qpn);
            // That let go of the QP: take it again.
            let Some(qp) = self.qps.get_mut(&qpn) else { return };
            qp
        };
        let res = &mut self.res;
        if info.request {
            qp.resp.handle_request(&mut qp.core, res, now, meta, info, &pkt);
        } else {
            let srtt = qp.rtt.smoothed();
            qp.comp.handle_response(&mut qp.req, &mut qp.core, res, now, srtt, info, &pkt);
            qp.rtt.on_acked(qp.comp.psn(), now);
            qp.recharge_tx(res);
            qp.settle(res);
            qp.check_drained(res);
        }
        qp.settle(res);
        schedule(&mut self.ready, qp);
        sync_timer(&mut self.timers, qp);
        self.wake_budget_waiters();
    }
}
