//! To the network: the round robin of ready QPs, batches of equal datagrams,
//! the timers, and the ICRC and metadata of each packet that leaves.

use super::*;
use crate::config::Payload;
use crate::datagram::{datagram_icrc_holes, icrc_body, Hole};

impl Engine {
    /// Produces the next datagram to send, if any: one packet per QP in
    /// turn, each QP alternating between its requests and its responses.
    /// `buf` must hold `MAX_DATAGRAM` bytes.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some(tx) = self.stash.take() {
            buf[..tx.len].copy_from_slice(&self.stash_buf[..tx.len]);
            return Some(tx);
        }
        self.produce_one(now, buf)
    }

    /// Like `poll_transmit`, but hands out up to `max_segments` datagrams
    /// of one QP at once when they have the same length and addresses (the
    /// last may be shorter), laid end to end in `buf`: what a driver sends
    /// as one UDP GSO message. The QP's turn in the round robin covers the
    /// whole batch. `buf` must hold `MAX_DATAGRAM` bytes; a batch grows
    /// while another datagram fits.
    pub fn poll_transmit_batch(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        max_segments: usize,
    ) -> Option<Transmit> {
        self.batch(now, buf, max_segments)
    }

    /// [`Engine::poll_transmit_batch`] that leaves the payload of WRITE,
    /// SEND and READ-response packets in registered memory: for each such
    /// piece a [`Hole`] is appended to `holes`, its `at` counted from the
    /// start of `buf`, and those bytes of `buf` are left unwritten. The
    /// ICRC in `buf` covers the bytes where the holes say they are, read
    /// once, in place. A driver sends each datagram as `buf`'s bytes with
    /// the holes' memory in their places (`sendmsg` iovecs), before it
    /// calls the engine again: the bytes belong to work requests in
    /// progress, which are not complete until the peer has them (see
    /// [`crate::PayloadRef`]). Payloads under
    /// [`crate::limits::PAYLOAD_REF_MIN`] bytes, packets of QPs that
    /// encrypt, and whatever an engine that elides payload sends are
    /// whole, as are the packets that wait for the next batch.
    pub fn poll_transmit_batch_refs(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        max_segments: usize,
        holes: &mut Vec<Hole>,
    ) -> Option<Transmit> {
        self.res.holes = Some(std::mem::take(holes));
        let tx = self.batch(now, buf, max_segments);
        *holes = self.res.holes.take().unwrap_or_default();
        tx
    }

    /// Copies the memory of `holes` (from [`Engine::poll_transmit_batch_refs`])
    /// into `buf` where they stand, making its datagrams whole: for a
    /// driver that needs the bytes themselves (a capture, a send that
    /// cannot gather). Fails, with the holes before the failing one
    /// filled, if a hole's memory no longer belongs to a region of this
    /// engine (deregistered since: `NotFound(Mr)`): its bytes can no
    /// longer be read.
    pub fn fill_holes(&mut self, buf: &mut [u8], holes: &[Hole]) -> Result<(), VerbsError> {
        let engine = self.res.mrs.engine();
        let size = buf.len();
        for h in holes {
            let outside = VerbsError::OutsideRegion { offset: h.at, len: h.src.len(), size };
            let dst = buf.get_mut(h.at..h.end()).ok_or(outside)?;
            if !h.src.nic_copy_bound(engine, dst) {
                return Err(VerbsError::NotFound(Object::Mr));
            }
        }
        Ok(())
    }

    fn batch(&mut self, now: Instant, buf: &mut [u8], max_segments: usize) -> Option<Transmit> {
        let mut tx = self.poll_transmit(now, buf)?;
        let (qpn, seg) = (tx.qpn, tx.len);
        // One lookup for the whole batch (a GSI datagram has no entry).
        if let Some(qp) = self.qps.get_mut(&qpn) {
            while tx.segments() < max_segments && buf.len() - tx.len >= MAX_DATAGRAM {
                let at = tx.len;
                let mark = self.res.holes.as_ref().map_or(0, Vec::len);
                let Some(len) = qp.produce(&mut self.res, now, &mut buf[at..]) else {
                    truncate(&mut self.res.holes, mark);
                    break;
                };
                let dgram = &mut buf[at..at + MAX_DATAGRAM];
                let Some(next) = finish(&self.res.cfg, qp, dgram, len, &mut self.res.holes, mark) else {
                    truncate(&mut self.res.holes, mark);
                    self.res.counters.emit_errors += 1;
                    continue;
                };
                self.res.counters.sent_pkts += 1;
                let same = next.meta == tx.meta && next.traffic_class == tx.traffic_class && next.len <= seg;
                if !same {
                    // Not of this batch: it leaves on its own, next, whole.
                    make_whole(dgram, &mut self.res.holes, mark);
                    self.stash_buf[..next.len].copy_from_slice(&dgram[..next.len]);
                    self.stash = Some(next);
                    break;
                }
                if let Some(holes) = &mut self.res.holes {
                    holes[mark..].iter_mut().for_each(|h| h.at += at);
                }
                tx.len += next.len;
                if next.len < seg {
                    break;
                }
            }
            if !qp.paced_out(now) {
                schedule(&mut self.ready, qp);
            }
            sync_timer(&mut self.timers, qp);
        }
        self.wake_tx_waiters();
        tx.segment_size = seg;
        Some(tx)
    }

    /// The next packet of the next ready QP.
    pub(super) fn produce_one(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if self.cm.has_transmit() {
            if let Some(tx) = self.produce_gsi(buf) {
                return Some(tx);
            }
        }
        while let Some(qpn) = self.ready.pop_front() {
            let Some(qp) = self.qps.get_mut(&qpn) else { continue };
            qp.scheduled = false;
            let mark = self.res.holes.as_ref().map_or(0, Vec::len);
            let len = qp.produce(&mut self.res, now, buf);
            let Some(len) = len else {
                truncate(&mut self.res.holes, mark);
                sync_timer(&mut self.timers, qp);
                // Room set aside for this QP under the request budget that
                // it could not use (paced, at its own window, nothing left
                // to send) goes to the next waiter.
                self.wake_tx_waiters();
                continue;
            };
            let tx = finish(&self.res.cfg, qp, buf, len, &mut self.res.holes, mark);
            if !qp.paced_out(now) {
                schedule(&mut self.ready, qp);
            }
            sync_timer(&mut self.timers, qp);
            self.wake_tx_waiters();
            match tx {
                Some(tx) => {
                    self.res.counters.sent_pkts += 1;
                    return Some(tx);
                }
                None => {
                    truncate(&mut self.res.holes, mark);
                    self.res.counters.emit_errors += 1;
                }
            }
        }
        None
    }

    /// True when some QP may have a packet to send (`poll_transmit` may
    /// still find it has none): lets a driver skip an idle flush.
    pub fn has_transmit(&self) -> bool {
        self.stash.is_some() || !self.ready.is_empty() || self.cm.has_transmit()
    }

    /// The earliest time `handle_timeout` wants to be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let qp = self.timers.first().map(|&(t, _)| t);
        match (qp, self.cm.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs the timers due at `now`, each by the role that armed it.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.cm.poll_timeout().is_some_and(|t| t <= now) {
            self.cm_now = now;
            self.cm.handle_timeout(now);
        }
        while let Some(&(t, qpn)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.remove(&(t, qpn));
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.timer_key = None;
                while let Some(kind) = qp.core.timers.take_next_due(now) {
                    match kind {
                        TimerKind::Ack | TimerKind::Rnr | TimerKind::ReadTail => {
                            qp.comp.on_timer(kind, &mut qp.req, &mut qp.core, &mut self.res, now);
                            qp.recharge_tx(&mut self.res);
                        }
                        // The QP is scheduled below: its next packet may go.
                        TimerKind::Pace => {}
                        TimerKind::Cc => qp.on_cc_timer(&mut self.res, now),
                    }
                    qp.settle(&mut self.res);
                }
                schedule(&mut self.ready, qp);
                sync_timer(&mut self.timers, qp);
            }
        }
        self.wake_budget_waiters();
    }

    pub(super) fn schedule(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            schedule(&mut self.ready, qp);
        }
    }

    pub(super) fn sync_timer(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            sync_timer(&mut self.timers, qp);
        }
    }
}

/// Drops the holes from `mark` on (a packet that is not sent).
fn truncate(holes: &mut Option<Vec<Hole>>, mark: usize) {
    if let Some(h) = holes {
        h.truncate(mark);
    }
}

/// Copies the memory of the holes from `mark` on into `dgram` (where they
/// stand, counted from its start) and drops them: the datagram is whole.
fn make_whole(dgram: &mut [u8], holes: &mut Option<Vec<Hole>>, mark: usize) {
    if let Some(h) = holes {
        for hole in h.drain(mark..) {
            hole.src.nic_copy(&mut dgram[hole.at..hole.end()]);
        }
    }
}

/// Fills in the ICRC and the transmit metadata for a packet of `len`
/// bytes (BTH through ICRC) that a role wrote into `buf`, with the holes
/// from `mark` on in its payload (`Res::holes`, counted from `buf`'s
/// start). `None` if the ICRC cannot be computed (the addresses mix IPv4
/// and IPv6, which post and modify refuse): such a packet must not leave
/// with stale ICRC bytes.
fn finish(
    cfg: &EngineConfig,
    qp: &mut QpEntry,
    buf: &mut [u8],
    len: usize,
    holes: &mut Option<Vec<Hole>>,
    mark: usize,
) -> Option<Transmit> {
    let q = &qp.core;
    let ud_dest = if q.init.qp_type == QpType::Ud { qp.req.last_ud_dest() } else { None };
    let av = ud_dest.as_ref().map_or(q.av(), |d| &d.av);
    let (dst, tclass, hop, flow) = (av.dgid, av.traffic_class, av.hop_limit, av.flow_label);
    let src = *cfg.gids.get(usize::from(av.sgid_index))?;
    let ecn = if cfg.ecn { 2 } else { 0 };
    let meta = DatagramMeta {
        src,
        dst,
        src_port: cfg.fixed_src_port.unwrap_or(q.udp_sport),
        dst_port: av.udp_port.unwrap_or(cfg.udp_port),
        ecn,
        ipv4_id: Some(0),
    };
    let opcode = roce_wire::bth::Bth::new_checked(&buf[..len]).ok()?.opcode();
    let cnp = opcode == roce_wire::opcode::CNP;
    let tclass = match cfg.cnp.dscp {
        Some(d) if cnp => d << 2,
        _ => tclass,
    };
    let len = match &mut qp.crypto {
        Some(c) if !cnp => {
            // Sealed in place: the payload must be in the packet.
            make_whole(buf, holes, mark);
            let info = roce_wire::opcode::lookup(opcode)?;
            c.seal(buf, len, info.header_len())?
        }
        _ => len,
    };
    let body = len - icrc::ICRC_LEN;
    let crc = match holes.as_deref().map_or(&[][..], |h| &h[mark..]) {
        [] => datagram_icrc(&meta, icrc_body(cfg.payload, &buf[..body])?)?,
        mine => datagram_icrc_holes(&meta, buf, body, mine)?,
    };
    buf[len - icrc::ICRC_LEN..len].copy_from_slice(&crc.to_le_bytes());
    let carried = carried(cfg.payload.for_qp(q.init.qp_type), opcode, len);
    Some(Transmit {
        meta,
        traffic_class: (tclass & !3) | ecn,
        hop_limit: hop,
        flow_label: flow,
        len,
        segment_size: len,
        qpn: q.qpn,
        carried,
    })
}

/// `Transmit::carried` of a connected QP's datagram of `len` bytes: its
/// headers and what `payload` carries of a message's first packet. A
/// packet that does not start its message is at least a path MTU into it
/// (256 bytes or more: the smallest path MTU), so it carries nothing of a
/// `keep` that small; with a larger `keep` it claims nothing.
fn carried(payload: Payload, opcode: u8, len: usize) -> usize {
    let Payload::Elided { keep } = payload else { return len };
    let Some(info) = roce_wire::opcode::lookup(opcode) else { return len };
    let hdr = info.header_len();
    let end = len - icrc::ICRC_LEN;
    if keep as usize > PathMtu::Mtu256.bytes() || hdr > end {
        return len;
    }
    if info.position.starts_message() {
        (hdr + keep as usize).min(end)
    } else {
        hdr
    }
}
