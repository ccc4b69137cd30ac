//! The requester (rxe_req.c): turns send WQEs into request packets.
//!
//! Segmentation by path MTU (IBTA vol. 1 §9.4: First/Middle carry exactly one
//! PMTU, Last/Only the rest), one PSN per packet and, for an RDMA READ, one
//! PSN per expected response packet (§9.4.4); AckReq where a completion is
//! waited for and every `ack_req_every` packets (§9.2.6 leaves it to the
//! requester); at most `max_rd_atomic` READs and atomics outstanding (§9.5,
//! the initiator depth); the fence waits for earlier READs and atomics; at
//! most `max_unacked_psns` PSNs in flight. Opcodes come from the wire
//! layer's table, named by operation, position and suffix.
//!
//! A READ WQE is asked for in several READ requests, each for at most
//! `limits::read_chunk` bytes starting on a multiple of it (each its own
//! packet with its own RETH, its PSN the first of the k response PSNs it
//! consumes, so the PSNs of a WQE's requests are those one request for it
//! would have), and only while the device's READ-response bytes asked for
//! and not received stay within `EngineConfig::rx_budget_bytes`: what the
//! receive path can absorb. A QP over the budget waits on
//! `Res::read_waiters` until responses free room. Each request counts
//! against `max_rd_atomic` until its last response arrives. IBTA vol. 1
//! §9.7.5.2.4 lets a requester ask for any part of a READ's range again;
//! splitting is the same move made up front, so any responder serves it.
//!
//! The requester owns its cursor (which WQE, which byte, which PSN). The
//! completer moves it back for a retransmission (`rewind`); nothing else
//! writes it.

use roce_wire::opcode::{self, Suffix};
use roce_wire::{
    AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, Operation, Position, Psn, RethRepr, RocePacketRepr,
    Transport,
};

use crate::config::Payload;
use crate::datagram::Hole;
use crate::limits::PAYLOAD_REF_MIN;
use crate::qp::QpCore;
use crate::res::Res;
use crate::time::{ack_timeout, Instant};
use crate::timers::TimerKind;
use crate::verbs::{AsyncEvent, QpState, QpType, SendOp, UdDest, WcStatus};

/// Requester progress (rxe_req.c's `qp->req`).
#[derive(Debug, Default)]
pub(crate) struct Requester {
    /// Sequence number of the next WQE to send (see `QpCore::sq_base`).
    next: u64,
    /// Bytes of that WQE already sent.
    offset: u64,
    /// Next PSN to assign.
    psn: Psn,
    /// One past the highest PSN ever sent (a rewind moves `psn` back, not this).
    psn_hi: Psn,
    /// Packets sent since the last one that asked for an ACK.
    noack_pkts: u32,
    /// PSN of the last packet sent with AckReq.
    ackreq_psn: Option<Psn>,
    /// READ/atomic WQEs sent and not yet completed.
    rd_atomic_outstanding: u32,
    /// UD: the destination of the packet just produced.
    last_ud_dest: Option<UdDest>,
    /// On `Res::read_waiters`, waiting for room under the READ budget.
    read_wait: bool,
    /// On `Res::tx_waiters`, waiting for room under the request budget.
    tx_wait: bool,
    /// Room under the request budget the engine set aside for this QP when
    /// it woke it (`Res::tx_reserved`), until its next turn.
    tx_ticket: u64,
    /// A READ request for one gap in a READ's responses, to go before
    /// anything else (the completer's selective recovery).
    gap_request: Option<GapRequest>,
}

/// A READ request that asks again for part of a READ already asked for
/// (IBTA vol. 1 §9.7.5.2.4: the requester may ask for any part of a READ's
/// range again): PSN `psn`, the WQE's bytes `[offset, offset + len)`. It
/// leaves the requester's cursor where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GapRequest {
    /// The READ WQE's sequence number (see `QpCore::sq_base`).
    pub seq: u64,
    pub psn: Psn,
    pub offset: u64,
    pub len: u64,
}

/// What the requester could not do with a WQE it had to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendFault {
    /// The gather from local memory failed (IBTA §10.8.3.1: local
    /// protection error).
    Protection,
    /// The packet could not be built (no opcode for it, or the buffer the
    /// driver gave is too small): a local QP operation error.
    Emit,
}

impl Requester {
    /// Starts sending at `psn` (`ibv_modify_qp` with `IBV_QP_SQ_PSN`).
    pub fn start_at(&mut self, psn: Psn) {
        self.psn = psn;
        self.psn_hi = psn;
    }

    /// The next PSN to be assigned.
    pub fn psn(&self) -> Psn {
        self.psn
    }

    /// One past the highest PSN ever sent.
    pub fn psn_hi(&self) -> Psn {
        self.psn_hi
    }

    /// PSN of the last packet that asked for an ACK.
    pub fn ackreq_psn(&self) -> Option<Psn> {
        self.ackreq_psn
    }

    /// No message is half sent.
    pub fn at_message_boundary(&self) -> bool {
        self.offset == 0
    }

    /// The destination of the UD packet just produced.
    pub fn last_ud_dest(&self) -> Option<UdDest> {
        self.last_ud_dest
    }

    /// Puts this QP on `Res::read_waiters` (once); true if it was not
    /// there yet.
    pub fn wait_for_read_budget(&mut self, res: &mut Res, qpn: u32) -> bool {
        enlist(&mut self.read_wait, &mut res.read_waiters, qpn)
    }

    /// Puts this QP at the back of `Res::tx_waiters` (once); true if it
    /// was not there yet.
    pub fn wait_for_tx_budget(&mut self, res: &mut Res, qpn: u32) -> bool {
        enlist(&mut self.tx_wait, &mut res.tx_waiters, qpn)
    }

    /// Asks for part of a READ again before anything else is sent
    /// (replacing a request for another gap not sent yet).
    pub fn request_gap(&mut self, r: GapRequest) {
        self.gap_request = Some(r);
    }

    /// Whether a gap request waits to be sent: a resend, which no budget
    /// holds back.
    pub fn gap_request_pending(&self) -> bool {
        self.gap_request.is_some()
    }

    /// The engine took this QP off `Res::read_waiters` to try again.
    pub fn read_budget_woken(&mut self) {
        self.read_wait = false;
    }

    /// The engine took this QP off `Res::tx_waiters` to try again, with
    /// `room` bytes set aside for it in `Res::tx_reserved`.
    pub fn tx_budget_woken(&mut self, res: &mut Res, room: u64) {
        self.tx_wait = false;
        self.tx_ticket += room;
        res.tx_reserved += room;
    }

    /// Whether room under the request budget is set aside for this QP.
    pub fn has_tx_ticket(&self) -> bool {
        self.tx_ticket > 0
    }

    /// Spends `bytes` of the room set aside for this QP (a new request
    /// packet went).
    pub fn spend_tx_ticket(&mut self, res: &mut Res, bytes: u64) {
        let t = self.tx_ticket.min(bytes);
        self.tx_ticket -= t;
        res.tx_reserved = res.tx_reserved.saturating_sub(t);
    }

    /// Gives back the room set aside for this QP when it was woken (it
    /// could not use it, or it went away).
    pub fn take_tx_ticket(&mut self, res: &mut Res) {
        let t = std::mem::take(&mut self.tx_ticket);
        res.tx_reserved = res.tx_reserved.saturating_sub(t);
    }

    /// Whether a posted WQE has not been sent in full yet (new request
    /// packets to come, budgets and limits allowing).
    pub fn has_unsent(&self, q: &QpCore) -> bool {
        self.next < q.sq_base + q.sq.len() as u64
    }

    /// A READ request's last response or an atomic's ACK arrived: room
    /// for another.
    pub fn read_or_atomic_done(&mut self) {
        self.rd_atomic_outstanding = self.rd_atomic_outstanding.saturating_sub(1);
    }

    /// The QP ended (or its send queue was flushed): nothing is outstanding
    /// and nothing is left to send.
    pub fn abort(&mut self, q: &QpCore) {
        self.rd_atomic_outstanding = 0;
        self.gap_request = None;
        self.next = q.sq_base + q.sq.len() as u64;
        self.offset = 0;
    }

    /// Whether the completer retired the WQE the cursor is on (its late
    /// response came after a rewind).
    pub fn behind(&self, q: &QpCore) -> bool {
        self.next < q.sq_base
    }

    /// Restarts transmission at `psn` (go-back-N): the cursor moves to the
    /// WQE holding that PSN, at that packet. `oldest` is the oldest
    /// unacknowledged PSN, where a WQE not yet started resumes. A READ
    /// resumes at the first missing response (a new request for the rest,
    /// IBTA §9.7.5.2.4).
    pub fn rewind(&mut self, q: &mut QpCore, res: &mut Res, oldest: Psn, psn: Psn) {
        let mtu = q.mtu() as u64;
        // Everything from `psn` is asked for again, gaps included.
        self.gap_request = None;
        let mut resume = None;
        for (i, w) in q.sq.iter().enumerate() {
            if w.done.is_some() {
                continue;
            }
            if !w.started {
                resume.get_or_insert((i, 0u64, w.first_psn, true));
                break;
            }
            let within = psn.in_window(w.first_psn, w.last_psn.distance(w.first_psn) as u32 + 1);
            if within || psn.is_before(w.first_psn) {
                let k = if within { psn.distance(w.first_psn) as u64 } else { 0 };
                resume = Some((i, k, w.first_psn.add(k as u32), false));
                break;
            }
        }
        let base = q.sq_base;
        let Some((i, k, at, fresh)) = resume else {
            // Nothing outstanding: continue with whatever is unsent, from the
            // oldest unacknowledged PSN.
            self.next = base + q.sq.iter().position(|w| w.done.is_none()).unwrap_or(q.sq.len()) as u64;
            self.offset = 0;
            self.psn = oldest;
            return;
        };
        self.next = base + i as u64;
        self.psn = if fresh { oldest } else { at };
        // What was asked for from here on is asked for again: its share
        // of the READ budget is given back until then.
        for w in q.sq.iter_mut().skip(i) {
            if !w.started {
                break;
            }
            w.read_sent = w.read_done;
            w.recharge(&mut res.read_outstanding);
        }
        let w = &mut q.sq[i];
        match w.wr.op {
            SendOp::Read { .. } => {
                w.read_done = (k * mtu).min(w.length);
                w.read_sent = w.read_done;
                w.recharge(&mut res.read_outstanding);
                self.offset = w.read_done;
            }
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => self.offset = 0,
            _ => self.offset = (k * mtu).min(w.length),
        }
        self.rd_atomic_outstanding =
            q.sq.iter().take(i).filter(|w| w.done.is_none() && w.wr.op.is_read_or_atomic()).count() as u32;
        self.noack_pkts = 0;
    }

    /// Produces the next request packet into `buf` (BTH through ICRC, the
    /// ICRC left for the engine) and returns its length; `Ok(None)` when
    /// there is nothing to send now. `oldest` is the completer's oldest
    /// unacknowledged PSN (the send window's start). A WQE that cannot be
    /// sent fails and the QP ends (`Err`, already recorded on the QP).
    pub fn poll_transmit(
        &mut self,
        q: &mut QpCore,
        res: &mut Res,
        now: Instant,
        oldest: Psn,
        buf: &mut [u8],
    ) -> Result<Option<usize>, SendFault> {
        if (!q.can_send() && q.state != QpState::Sqd) || q.timers.is_set(TimerKind::Rnr) {
            return Ok(None);
        }
        if let Some(r) = self.gap_request.take() {
            if let Some(len) = self.emit_gap_request(q, res, now, r, buf) {
                return Ok(Some(len));
            }
        }
        let seq = self.next;
        let mtu = q.mtu();
        let t = q.init.qp_type;
        let Some(wqe) = q.wqe(seq) else { return Ok(None) };
        if wqe.done.is_some() {
            return Ok(None);
        }
        // SQD: stop at a message boundary.
        if q.state == QpState::Sqd && self.offset == 0 && !wqe.started {
            return Ok(None);
        }
        if t == QpType::Rc {
            let in_flight = self.psn.distance(oldest).max(0) as u32;
            if in_flight >= res.cfg.max_unacked_psns {
                return Ok(None);
            }
            if wqe.wr.op.is_read_or_atomic() && self.rd_atomic_outstanding >= u32::from(q.attr.max_rd_atomic)
            {
                return Ok(None);
            }
            if wqe.wr.fence && self.rd_atomic_outstanding > 0 {
                return Ok(None);
            }
        }

        let op = wqe.wr.op;
        let psn = self.psn;
        // A READ request asks for `read_len` bytes from `offset`: up to
        // the next multiple of the chunk, if the budget has room.
        let mut read_len = 0u64;
        if let SendOp::Read { .. } = op {
            read_len = crate::limits::read_request_end(res.cfg.rx_budget_bytes, mtu, self.offset, wqe.length)
                - self.offset.min(wqe.length);
            let out = res.read_outstanding;
            if out > 0 && out + read_len > res.cfg.rx_budget_bytes {
                if self.wait_for_read_budget(res, q.qpn) {
                    res.counters.read_budget_waits += 1;
                }
                return Ok(None);
            }
        }
        let (first, last, payload_len) = if op.is_read_or_atomic() {
            (true, true, 0)
        } else {
            let remaining = wqe.length - self.offset;
            let n = remaining.min(mtu as u64) as usize;
            (self.offset == 0, self.offset + n as u64 == wqe.length, n)
        };
        let mut ext = ExtHeaders::default();
        match op {
            SendOp::Write { remote_addr, rkey } | SendOp::WriteWithImm { remote_addr, rkey, .. } if first => {
                ext.reth = Some(RethRepr { va: remote_addr, rkey, dma_len: wqe.length as u32 });
            }
            SendOp::Read { remote_addr, rkey } => {
                let va = remote_addr.wrapping_add(self.offset);
                ext.reth = Some(RethRepr { va, rkey, dma_len: read_len as u32 });
            }
            SendOp::CompareSwap { remote_addr, rkey, compare, swap } => {
                ext.atomic_eth = Some(AtomicEthRepr { va: remote_addr, rkey, swap_add: swap, compare });
            }
            SendOp::FetchAdd { remote_addr, rkey, add } => {
                ext.atomic_eth = Some(AtomicEthRepr { va: remote_addr, rkey, swap_add: add, compare: 0 });
            }
            _ => {}
        }
        if last {
            match op {
                SendOp::SendWithImm { imm } | SendOp::WriteWithImm { imm, .. } => ext.imm = Some(imm),
                SendOp::SendWithInv { rkey } => ext.ieth = Some(rkey),
                _ => {}
            }
        }
        let (solicited, ud, signaled) = (wqe.wr.solicited, wqe.wr.ud, wqe.signaled);
        let mut dest_qp = q.attr.dest_qp_num;
        if t == QpType::Ud {
            let Some(d) = ud else { return self.fail(q, res, seq, SendFault::Emit) };
            let qkey = if d.remote_qkey & 0x8000_0000 != 0 { q.attr.qkey } else { d.remote_qkey };
            ext.deth = Some(DethRepr { qkey, src_qp: q.qpn });
            dest_qp = d.remote_qpn;
            self.last_ud_dest = Some(d);
        }
        // AckReq (IBTA 9.2.6: the requester's choice) on the last packet of a
        // message whose completion someone waits for (signalled, READ/atomic),
        // of a retransmission, or once the send queue is half full; and at
        // least every `ack_req_every` packets. An unsignalled message needs no
        // ACK of its own: a later one acknowledges it cumulatively, which saves
        // a datagram per message on a ping-pong.
        let retransmission = psn.is_before(self.psn_hi);
        let sq_half_full = q.sq.len() * 2 >= q.init.cap.max_send_wr as usize;
        let wanted = signaled || op.is_read_or_atomic() || retransmission || sq_half_full;
        // A packet that brings the device to its cap on unacknowledged
        // request bytes asks too: QPs then wait for an ACK, which must come.
        // So does the last packet the room a wake gave this QP pays for:
        // the QP then queues behind every other waiter, maybe for longer
        // than its ACK timeout, and what it sent must not wait for a
        // timeout to be acknowledged.
        let at_cap = res.cfg.tx_budget_bytes.is_some_and(|cap| res.tx_unacked + mtu as u64 >= cap)
            || (self.tx_ticket > 0 && self.tx_ticket <= mtu as u64);
        let ack_req =
            t == QpType::Rc && ((last && wanted) || at_cap || self.noack_pkts + 1 >= res.cfg.ack_req_every);
        let Some(code) = opcode_for(t, &op, first, last) else {
            return self.fail(q, res, seq, SendFault::Emit);
        };
        let bth = BthRepr {
            opcode: code,
            solicited: last && solicited,
            mig_req: false,
            pkey: res.cfg.pkey,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req,
            psn,
        };
        let repr = RocePacketRepr { bth, ext, payload: &[] };
        let Ok(hdr) = repr.emit_header(buf, payload_len) else {
            return self.fail(q, res, seq, SendFault::Emit);
        };
        // Payload straight from the application's memory into the packet.
        let wqe = q.wqe(seq).expect("present");
        let dst = &mut buf[hdr..hdr + payload_len];
        let gathered = match &wqe.inline_data {
            Some(data) => {
                let o = self.offset as usize;
                dst.copy_from_slice(&data.as_slice()[o..o + payload_len]);
                Ok(())
            }
            // (an engine that elides payload gathers each message's first
            // bytes only)
            None if payload_len > 0 => {
                let payload = res.cfg.payload.for_qp(q.init.qp_type);
                match &mut res.holes {
                    // Left in memory for the driver to send from: the
                    // same checks, no copy.
                    Some(holes) if payload == Payload::Carried && payload_len >= PAYLOAD_REF_MIN => {
                        let mark = holes.len();
                        let r =
                            res.mrs.refs(&wqe.wr.sg_list, q.init.pd, self.offset, payload_len, |src, r| {
                                holes.push(Hole { at: hdr + r.start, src })
                            });
                        if r.is_err() {
                            holes.truncate(mark);
                        }
                        r
                    }
                    _ => res.mrs.gather_payload(payload, &wqe.wr.sg_list, q.init.pd, self.offset, dst),
                }
            }
            None => Ok(()),
        };
        if gathered.is_err() {
            return self.fail(q, res, seq, SendFault::Protection);
        }
        let len = hdr + payload_len + roce_wire::packet::pad_for(payload_len) + roce_wire::icrc::ICRC_LEN;

        // Bookkeeping.
        let is_read = matches!(op, SendOp::Read { .. });
        let npsn = if is_read { read_len.div_ceil(mtu as u64).max(1) as u32 } else { 1 };
        let read_fresh = is_read && self.offset == 0;
        let w = q.wqe_mut(seq).expect("present");
        if (first && !op.is_read_or_atomic()) || read_fresh || op.is_atomic() {
            w.first_psn = psn;
            w.last_psn = psn.add(w.npkts(mtu).max(w.resp_pkts(mtu)) - 1);
        }
        w.started = true;
        // The WQE's last packet: for a READ, its last request.
        let last = if is_read {
            w.read_sent = self.offset + read_len;
            w.recharge(&mut res.read_outstanding);
            w.read_sent >= w.length
        } else {
            last
        };
        self.psn = psn.add(npsn);
        if self.psn_hi.is_before(self.psn) {
            self.psn_hi = self.psn;
        }
        self.noack_pkts = if ack_req { 0 } else { self.noack_pkts + 1 };
        if ack_req {
            self.ackreq_psn = Some(psn);
        }
        if op.is_read_or_atomic() {
            self.rd_atomic_outstanding += 1;
        }
        if last {
            self.next = seq + 1;
            self.offset = 0;
            if matches!(op, SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. }) {
                res.counters.rdma_sends += 1;
            }
            if t != QpType::Rc {
                // UC and UD have no acknowledgements: done once sent.
                q.wqe_mut(seq).expect("present").done = Some(WcStatus::Success);
                q.retire(res);
            }
        } else {
            self.offset += if is_read { read_len } else { payload_len as u64 };
        }
        if t == QpType::Rc && !q.timers.is_set(TimerKind::Ack) {
            q.timers.set(TimerKind::Ack, ack_timeout(q.attr.timeout).map(|d| now + d));
        }
        Ok(Some(len))
    }

    /// Builds the READ request of a gap request (`None` if its WQE is gone
    /// or the packet cannot be built: the gap is then left to the timers).
    /// It asks for an ACK (a READ always does) and consumes nothing: its
    /// PSNs and its share of the READ budget and of `max_rd_atomic` are
    /// those of the request it repeats part of.
    fn emit_gap_request(
        &mut self,
        q: &mut QpCore,
        res: &mut Res,
        now: Instant,
        r: GapRequest,
        buf: &mut [u8],
    ) -> Option<usize> {
        let w = q.wqe(r.seq).filter(|w| w.done.is_none() && w.started)?;
        let SendOp::Read { remote_addr, rkey } = w.wr.op else { return None };
        let ext = ExtHeaders {
            reth: Some(RethRepr { va: remote_addr.wrapping_add(r.offset), rkey, dma_len: r.len as u32 }),
            ..ExtHeaders::default()
        };
        let bth = BthRepr {
            opcode: opcode_for(QpType::Rc, &w.wr.op, true, true)?,
            solicited: false,
            mig_req: false,
            pkey: res.cfg.pkey,
            fecn: false,
            becn: false,
            dest_qp: q.attr.dest_qp_num,
            ack_req: true,
            psn: r.psn,
        };
        let hdr = RocePacketRepr { bth, ext, payload: &[] }.emit_header(buf, 0).ok()?;
        if self.ackreq_psn.is_none_or(|p| p.is_before(r.psn)) {
            self.ackreq_psn = Some(r.psn);
        }
        res.counters.read_gap_rerequests += 1;
        if !q.timers.is_set(TimerKind::Ack) {
            q.timers.set(TimerKind::Ack, ack_timeout(q.attr.timeout).map(|d| now + d));
        }
        Some(hdr + roce_wire::icrc::ICRC_LEN)
    }

    /// The WQE at `seq` cannot be sent: it completes in error and the QP
    /// ends (IBTA §10.8.3.1: a local error of the requester is a class C
    /// error, QP to ERR).
    fn fail(
        &mut self,
        q: &mut QpCore,
        res: &mut Res,
        seq: u64,
        fault: SendFault,
    ) -> Result<Option<usize>, SendFault> {
        let status = match fault {
            SendFault::Protection => WcStatus::LocProtErr,
            SendFault::Emit => {
                res.counters.emit_errors += 1;
                WcStatus::LocQpOpErr
            }
        };
        if let Some(w) = q.wqe_mut(seq) {
            w.done = Some(status);
        }
        q.raise_error_event(AsyncEvent::QpReqErr(q.qpn));
        Err(fault)
    }
}

/// The opcode of a request packet of `op` at this position on transport
/// `t`, from the opcode table.
fn opcode_for(t: QpType, op: &SendOp, first: bool, last: bool) -> Option<u8> {
    let transport = match t {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
    };
    let operation = match op {
        SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => Operation::Send,
        SendOp::Write { .. } | SendOp::WriteWithImm { .. } => Operation::RdmaWrite,
        SendOp::Read { .. } => Operation::RdmaReadRequest,
        SendOp::CompareSwap { .. } => Operation::CompareSwap,
        SendOp::FetchAdd { .. } => Operation::FetchAdd,
    };
    let position = match (first, last) {
        (true, true) => Position::Only,
        (true, false) => Position::First,
        (false, false) => Position::Middle,
        (false, true) => Position::Last,
    };
    let suffix = match op {
        SendOp::SendWithImm { .. } | SendOp::WriteWithImm { .. } if last => Suffix::Immediate,
        SendOp::SendWithInv { .. } if last => Suffix::Invalidate,
        _ => Suffix::Plain,
    };
    opcode::find(transport, operation, position, suffix).map(|o| o.code)
}

/// Appends `qpn` to a list of waiters unless `on` says it is there already.
fn enlist(on: &mut bool, list: &mut std::collections::VecDeque<u32>, qpn: u32) -> bool {
    let fresh = !*on;
    if fresh {
        *on = true;
        list.push_back(qpn);
    }
    fresh
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table gives what IBTA Table 38 lists for every operation.
    #[test]
    fn opcodes_come_from_the_table() {
        let w = SendOp::Write { remote_addr: 0, rkey: 0 };
        let wi = SendOp::WriteWithImm { remote_addr: 0, rkey: 0, imm: 0 };
        let cases: [(QpType, SendOp, bool, bool, u8); 12] = [
            (QpType::Rc, SendOp::Send, true, false, 0x00),
            (QpType::Rc, SendOp::Send, false, false, 0x01),
            (QpType::Rc, SendOp::SendWithImm { imm: 1 }, false, true, 0x03),
            (QpType::Rc, SendOp::SendWithInv { rkey: 1 }, true, true, 0x17),
            (QpType::Rc, w, true, false, 0x06),
            (QpType::Rc, wi, true, true, 0x0b),
            (QpType::Rc, SendOp::Read { remote_addr: 0, rkey: 0 }, true, true, 0x0c),
            (
                QpType::Rc,
                SendOp::CompareSwap { remote_addr: 0, rkey: 0, compare: 0, swap: 0 },
                true,
                true,
                0x13,
            ),
            (QpType::Rc, SendOp::FetchAdd { remote_addr: 0, rkey: 0, add: 0 }, true, true, 0x14),
            (QpType::Uc, wi, false, true, 0x29),
            (QpType::Ud, SendOp::Send, true, true, 0x64),
            (QpType::Ud, SendOp::SendWithImm { imm: 1 }, true, true, 0x65),
        ];
        for (t, op, first, last, code) in cases {
            assert_eq!(opcode_for(t, &op, first, last), Some(code), "{t:?} {op:?} {first} {last}");
        }
        assert_eq!(opcode_for(QpType::Ud, &SendOp::Send, true, false), None, "UD has one packet per message");
    }
}
