//! The responder (rxe_resp.c): validates and executes incoming requests and
//! queues the responses.
//!
//! RC (IBTA vol. 1 §9.7.5.1): a request with the expected PSN is executed; a
//! duplicate (PSN before the expected one, §9.7.5.1.2) is acknowledged again,
//! or, for a READ or atomic, answered from the saved responder resources (an
//! atomic is never executed twice); a PSN ahead of the expected one gets one
//! PSN sequence error NAK (§9.7.5.1.1). SEND consumes a receive WQE (its RQ
//! or SRQ) or is refused with an RNR NAK carrying the QP's min_rnr_timer
//! (§9.7.5.1.6). R_Key, PD, bounds and access rights are checked (§9.7.5.1.3,
//! §10.6.3.3; zero-length READ/WRITE check nothing, C9-88). Failures are
//! NAKed with Invalid Request, Remote Access Error or Remote Operational Error
//! and move the QP to ERR after the NAK is sent (§9.9.3.1). ACKs are
//! cumulative and coalesced: requests handled before the next transmit
//! opportunity share one ACK carrying the latest PSN and the MSN.
//!
//! After a NAK, the request that resumes the expected sequence is ACKed
//! even without AckReq (a responder may acknowledge any request). A
//! requester learns the gap is filled: Linux rxe ignores further sequence
//! NAKs of a retried message until an ACK resets its retry state, and would
//! otherwise answer the next loss in the same message only after its ACK
//! timeout.
//!
//! UC drops what it cannot take (no ACKs, no NAKs; a lost packet drops the
//! rest of its message: the unreliable service has no ACKs or NAKs). UD checks the Q_Key (§10.2.5) and places
//! a 40-byte GRH before the payload (ibverbs convention).

use std::collections::VecDeque;

use roce_wire::opcode::{self, Suffix};
use roce_wire::{
    AethRepr, BthRepr, ExtHeaders, NakCode, OpcodeInfo, Operation, Position, Psn, RethRepr, RocePacketRepr,
    Syndrome, Transport,
};

use crate::datagram::{DatagramMeta, Hole};
use crate::limits::{ACK_CREDITS as CREDITS, PAYLOAD_REF_MIN};
use crate::mr::LocalError;
use crate::qp::QpCore;
use crate::res::Res;
use crate::time::Instant;
use crate::verbs::{
    gid_to_bytes, Access, AsyncEvent, QpType, Wc, WcOpcode, WcStatus, WC_GRH, WC_WITH_IMM, WC_WITH_INV,
};
use crate::wqe::RecvWqe;

/// What the responder is in the middle of.
#[derive(Debug, Clone)]
enum InMsg {
    /// A multi-packet SEND: the receive WQE it consumes and bytes placed.
    Send { wqe: RecvWqe, placed: u64 },
    /// A multi-packet RDMA WRITE: the region and bytes remaining.
    Write { rkey: u32, va: u64, remaining: u64, dma_len: u64 },
}

/// Saved state for replaying a duplicate READ or atomic (IBTA §9.7.5.1.2:
/// "responder resources"; never re-execute an atomic).
#[derive(Debug, Clone, Copy)]
enum RespResource {
    Read { first_psn: Psn, last_psn: Psn },
    Atomic { psn: Psn, orig: u64, msn: u32 },
}

/// A packet the responder owes the requester.
#[derive(Debug, Clone, Copy)]
enum RespItem {
    /// ACK or NAK with this syndrome, for `psn`.
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
    },
    /// READ response packets still to send; `replay` for a duplicate request.
    Read {
        rkey: u32,
        va: u64,
        remaining: u64,
        /// Bytes of this response sent before `va`.
        sent: u64,
        psn: Psn,
        first: bool,
        msn: u32,
        replay: bool,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
        msn: u32,
        replay: bool,
    },
}

/// Responder progress (rxe_resp.c's `qp->resp`).
#[derive(Debug, Default)]
pub(crate) struct Responder {
    /// Expected PSN.
    epsn: Psn,
    /// Message sequence number: messages completed (24 bits).
    msn: u32,
    /// A NAK (sequence or RNR) was sent for `epsn`: drop further
    /// out-of-sequence packets silently until it arrives.
    nak_sent: bool,
    cur: Option<InMsg>,
    resources: VecDeque<RespResource>,
    outq: VecDeque<RespItem>,
    /// After sending the NAK at the head of `outq`, end the QP.
    error_after_nak: bool,
}

/// The opcode of a response packet, from the opcode table.
fn response_opcode(operation: Operation, position: Position) -> u8 {
    opcode::find(Transport::Rc, operation, position, Suffix::Plain)
        .map(|o| o.code)
        .expect("the table has every RC response")
}

/// Why a request was not executed.
enum Fault {
    /// No receive WQE: RNR NAK.
    Rnr,
    /// NAK with this code; complete the receive WQE in progress with `recv`.
    Nak(NakCode, Option<WcStatus>),
}

impl Responder {
    /// Expects requests from `psn` (`IBV_QP_RQ_PSN`).
    pub fn start_at(&mut self, psn: Psn) {
        self.epsn = psn;
    }

    /// The expected PSN.
    pub fn epsn(&self) -> Psn {
        self.epsn
    }

    /// The QP ended: owed responses are dropped and the receive WQE of a
    /// message in progress is flushed.
    pub fn abort(&mut self, q: &mut QpCore, res: &mut Res) {
        self.outq.clear();
        if let Some(InMsg::Send { wqe, .. }) = self.cur.take() {
            q.flush_one_recv(res, wqe);
        }
    }

    pub fn handle_request(
        &mut self,
        qp: &mut QpCore,
        res: &mut Res,
        _now: Instant,
        meta: &DatagramMeta,
        info: &'static OpcodeInfo,
        pkt: &RocePacketRepr<'_>,
    ) {
        if !qp.can_receive() || self.error_after_nak {
            res.counters.bad_state_dropped += 1;
            return;
        }
        match qp.init.qp_type {
            QpType::Ud => self.ud_receive(qp, res, meta, pkt),
            QpType::Rc => self.rc_request(qp, res, info, pkt),
            QpType::Uc => self.uc_request(qp, res, info, pkt),
        }
    }

    fn rc_request(
        &mut self,
        qp: &mut QpCore,
        res: &mut Res,
        info: &'static OpcodeInfo,
        pkt: &RocePacketRepr<'_>,
    ) {
        let psn = pkt.bth.psn;
        let d = psn.distance(self.epsn);
        if d < 0 {
            res.counters.duplicate_request += 1;
            self.duplicate(qp, res, info, pkt);
            return;
        }
        if d > 0 {
            res.counters.out_of_seq_request += 1;
            if !self.nak_sent {
                self.nak_sent = true;
                let epsn = self.epsn;
                self.push(RespItem::Ack {
                    psn: epsn,
                    syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                    msn: self.msn,
                });
            }
            return;
        }
        match self.execute(qp, res, info, pkt) {
            Ok(()) => {
                let resumed = std::mem::replace(&mut self.nak_sent, false);
                if (pkt.bth.ack_req || resumed)
                    && matches!(info.operation, Operation::Send | Operation::RdmaWrite)
                {
                    self.push_ack();
                }
            }
            Err(Fault::Rnr) => {
                res.counters.send_rnr_err += 1;
                self.nak_sent = true;
                let timer = qp.attr.min_rnr_timer;
                self.push(RespItem::Ack { psn, syndrome: Syndrome::RnrNak { timer }, msn: self.msn });
            }
            Err(Fault::Nak(code, recv)) => self.nak_error(qp, res, psn, code, recv),
        }
    }

    fn uc_request(
        &mut self,
        qp: &mut QpCore,
        res: &mut Res,
        info: &'static OpcodeInfo,
        pkt: &RocePacketRepr<'_>,
    ) {
        let psn = pkt.bth.psn;
        if psn != self.epsn {
            // Lost packets: abandon the message in progress and resynchronise on
            // the next First or Only packet.
            res.counters.out_of_seq_request += 1;
            self.abandon(qp, res);
            if !info.position.starts_message() {
                self.epsn = psn.next();
                return;
            }
            self.epsn = psn;
        }
        match self.execute(qp, res, info, pkt) {
            Ok(()) => {}
            Err(_) => {
                self.abandon(qp, res);
                self.epsn = psn.next();
                res.counters.no_recv_wqe_dropped += 1;
            }
        }
    }

    /// Drops the message in progress (UC), returning its receive WQE.
    fn abandon(&mut self, qp: &mut QpCore, res: &mut Res) {
        if let Some(InMsg::Send { wqe, .. }) = self.cur.take() {
            qp.untake_recv(res, wqe);
        }
    }

    /// Validates and executes the request with the expected PSN.
    fn execute(
        &mut self,
        qp: &mut QpCore,
        res: &mut Res,
        info: &'static OpcodeInfo,
        pkt: &RocePacketRepr<'_>,
    ) -> Result<(), Fault> {
        let op = info.operation;
        let pos = info.position;
        let invalid = Fault::Nak(NakCode::InvalidRequest, None);
        // Opcode sequence (§9.7.5.1.4): Middle/Last continue the message in
        // progress, of the same kind; anything else starts a new one.
        let seq_ok = match (&self.cur, op) {
            (None, Operation::Send | Operation::RdmaWrite) => pos.starts_message(),
            (None, Operation::RdmaReadRequest | Operation::CompareSwap | Operation::FetchAdd) => true,
            (Some(InMsg::Send { .. }), Operation::Send) => !pos.starts_message(),
            (Some(InMsg::Write { .. }), Operation::RdmaWrite) => !pos.starts_message(),
            _ => false,
        };
        if !seq_ok {
            let recv = matches!(self.cur, Some(InMsg::Send { .. })).then_some(WcStatus::RemInvReqErr);
            return Err(Fault::Nak(NakCode::InvalidRequest, recv));
        }
        // The QP must allow the operation (rxe: unsupported opcode -> invalid request).
        let need = match op {
            Operation::RdmaWrite => Some(Access::REMOTE_WRITE),
            Operation::RdmaReadRequest => Some(Access::REMOTE_READ),
            Operation::CompareSwap | Operation::FetchAdd => Some(Access::REMOTE_ATOMIC),
            _ => None,
        };
        if need.is_some_and(|a| !qp.attr.qp_access_flags.contains(a)) {
            return Err(invalid);
        }
        // Payload sizes against the path MTU, RETH length, atomic alignment.
        if pkt.check(Some(qp.mtu())).is_err() {
            let recv = matches!(self.cur, Some(InMsg::Send { .. })).then_some(WcStatus::RemInvReqErr);
            return Err(Fault::Nak(NakCode::InvalidRequest, recv));
        }
        match op {
            Operation::Send => self.exec_send(qp, res, info, pkt),
            Operation::RdmaWrite => self.exec_write(qp, res, info, pkt),
            Operation::RdmaReadRequest => self.exec_read(qp, res, pkt),
            Operation::CompareSwap | Operation::FetchAdd => self.exec_atomic(qp, res, op, pkt),
            _ => Err(invalid),
        }
    }

    fn exec_send(
        &mut self,
        qp: &mut QpCore,
        res: &mut Res,
        info: &'static OpcodeInfo,
        pkt: &RocePacketRepr<'_>,
    ) -> Result<(), Fault> {
        if info.position.starts_message() {
            let wqe = qp.take_recv(res).ok_or(Fault::Rnr)?;
            self.cur = Some(InMsg::Send { wqe, placed: 0 });
        }
        let pd = qp.init.pd;
        let Some(InMsg::Send { wqe, placed, .. }) = &mut self.cur else { unreachable!("sequence checked") };
        let n = pkt.payload.len() as u64;
        if *placed + n > wqe.length {
            // Message longer than the receive buffer: an Invalid Request
            // NAK, and the receive WQE completes with a local length error
            // (as rxe does).
            return Err(Fault::Nak(NakCode::InvalidRequest, Some(WcStatus::LocLenErr)));
        }
        if n > 0 {
            match res.mrs.scatter_payload(res.cfg.payload, &wqe.wr.sg_list, pd, *placed, pkt.payload) {
                Ok(()) => {}
                Err(LocalError::Protection) => {
                    return Err(Fault::Nak(NakCode::RemoteOperationalError, Some(WcStatus::LocProtErr)))
                }
                Err(LocalError::Length) => {
                    return Err(Fault::Nak(NakCode::InvalidRequest, Some(WcStatus::LocLenErr)))
                }
            }
        }
        *placed += n;
        let placed = *placed;
        if info.position.ends_message() {
            let mut flags = 0;
            let mut imm = 0;
            if let Some(i) = pkt.ext.imm {
                flags |= WC_WITH_IMM;
                imm = i;
            }
            if let Some(rkey) = pkt.ext.ieth {
                if !res.mrs.invalidate(rkey, pd) {
                    return Err(Fault::Nak(NakCode::InvalidRequest, Some(WcStatus::RemInvReqErr)));
                }
                flags |= WC_WITH_INV;
                imm = rkey;
            }
            let Some(InMsg::Send { wqe, .. }) = self.cur.take() else { unreachable!() };
            let mut wc = Wc::new(wqe.wr.wr_id, WcStatus::Success, WcOpcode::Recv, qp.qpn);
            wc.byte_len = placed as u32;
            wc.imm_data = imm;
            wc.wc_flags = flags;
            wc.src_qp = qp.attr.dest_qp_num;
            res.complete(qp.init.recv_cq, wc);
            res.counters.rdma_recvs += 1;
            self.msn = (self.msn + 1) & 0x00ff_ffff;
        }
        self.epsn = self.epsn.next();
        Ok(())
    }

    fn exec_write(
        &mut self,
        qp: &mut QpCore,
        res: &mut Res,
        info: &'static OpcodeInfo,
        pkt: &RocePacketRepr<'_>,
    ) -> Result<(), Fault> {
        let pd = qp.init.pd;
        let access = Fault::Nak(NakCode::RemoteAccessError, None);
        // WRITE with immediate consumes a receive WQE on its last packet: check
        // for one before touching memory, so an RNR NAK leaves no trace.
        let wants_recv = pkt.ext.imm.is_some();
        if wants_recv && !qp.has_recv(res) {
            return Err(Fault::Rnr);
        }
        if info.position.starts_message() {
            let reth = pkt.ext.reth.expect("opcode table: First/Only WRITE has a RETH");
            let len = u64::from(reth.dma_len);
            if len > 0 && res.mrs.remote(reth.rkey, pd, reth.va, len, Access::REMOTE_WRITE).is_none() {
                return Err(access);
            }
            self.cur = Some(InMsg::Write { rkey: reth.rkey, va: reth.va, remaining: len, dma_len: len });
        }
        let Some(InMsg::Write { rkey, va, remaining, dma_len }) = &mut self.cur else { unreachable!() };
        let n = pkt.payload.len() as u64;
        if n > *remaining || (info.position.ends_message() && n != *remaining) {
            return Err(Fault::Nak(NakCode::InvalidRequest, None));
        }
        if n > 0 {
            let (buf, off) = res.mrs.remote(*rkey, pd, *va, n, Access::REMOTE_WRITE).ok_or(access)?;
            // (an engine that elides payload places each message's first
            // bytes only; the whole range was checked)
            let carried = res.cfg.payload.carried(*dma_len - *remaining, pkt.payload.len());
            buf.nic_write(off, &pkt.payload[..carried])
                .map_err(|_| Fault::Nak(NakCode::RemoteAccessError, None))?;
        }
        *va += n;
        *remaining -= n;
        let dma_len = *dma_len;
        if info.position.ends_message() {
            self.cur = None;
            if let Some(imm) = pkt.ext.imm {
                let wqe = qp.take_recv(res).expect("checked above");
                let mut wc = Wc::new(wqe.wr.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm, qp.qpn);
                wc.byte_len = dma_len as u32;
                wc.imm_data = imm;
                wc.wc_flags = WC_WITH_IMM;
                wc.src_qp = qp.attr.dest_qp_num;
                res.complete(qp.init.recv_cq, wc);
            }
            self.msn = (self.msn + 1) & 0x00ff_ffff;
        }
        self.epsn = self.epsn.next();
        Ok(())
    }

    /// Saves a responder resource, evicting the oldest beyond max_dest_rd_atomic.
    fn save_resource(&mut self, qp: &QpCore, r: RespResource) {
        self.resources.push_back(r);
        while self.resources.len() > usize::from(qp.attr.max_dest_rd_atomic) {
            self.resources.pop_front();
        }
    }

    /// READ responses and atomic ACKs still waiting to be sent, for new
    /// requests (`replays: false`) or for duplicates (`true`).
    fn pending_rd_atomic(&self, replays: bool) -> usize {
        self.outq
        .iter()
        .filter(|i| {
            matches!(i, RespItem::Read { replay, .. } | RespItem::AtomicAck { replay, .. } if *replay == replays)
        })
        .count()
    }

    /// The responder takes at most max_dest_rd_atomic READs and atomics at a
    /// time (IBTA §9.5, the responder resources); a requester that exceeds it
    /// gets an Invalid Request NAK. Also bounds what a hostile peer can queue.
    fn check_rd_atomic_room(&self, qp: &QpCore) -> Result<(), Fault> {
        if self.pending_rd_atomic(false) >= usize::from(qp.attr.max_dest_rd_atomic) {
            return Err(Fault::Nak(NakCode::InvalidRequest, None));
        }
        Ok(())
    }

    fn exec_read(&mut self, qp: &mut QpCore, res: &mut Res, pkt: &RocePacketRepr<'_>) -> Result<(), Fault> {
        self.check_rd_atomic_room(qp)?;
        let reth = pkt.ext.reth.expect("opcode table: READ request has a RETH");
        if !read_allowed(qp, res, &reth) {
            return Err(Fault::Nak(NakCode::RemoteAccessError, None));
        }
        let psn = pkt.bth.psn;
        let npkts = u64::from(reth.dma_len).div_ceil(qp.mtu() as u64).max(1) as u32;
        self.save_resource(qp, RespResource::Read { first_psn: psn, last_psn: psn.add(npkts - 1) });
        self.msn = (self.msn + 1) & 0x00ff_ffff;
        self.push_read(&reth, psn, false);
        self.epsn = psn.add(npkts);
        Ok(())
    }

    fn exec_atomic(
        &mut self,
        qp: &mut QpCore,
        res: &mut Res,
        op: Operation,
        pkt: &RocePacketRepr<'_>,
    ) -> Result<(), Fault> {
        self.check_rd_atomic_room(qp)?;
        let a = pkt.ext.atomic_eth.expect("opcode table: atomics have an AtomicETH");
        let (buf, off) = res
            .mrs
            .remote(a.rkey, qp.init.pd, a.va, 8, Access::REMOTE_ATOMIC)
            .ok_or(Fault::Nak(NakCode::RemoteAccessError, None))?;
        let orig = match op {
            Operation::CompareSwap => buf.nic_compare_swap(off, a.compare, a.swap_add),
            _ => buf.nic_fetch_add(off, a.swap_add),
        }
        .map_err(|_| Fault::Nak(NakCode::InvalidRequest, None))?;
        let psn = pkt.bth.psn;
        self.msn = (self.msn + 1) & 0x00ff_ffff;
        let msn = self.msn;
        self.save_resource(qp, RespResource::Atomic { psn, orig, msn });
        self.push(RespItem::AtomicAck { psn, orig, msn, replay: false });
        self.epsn = psn.next();
        Ok(())
    }

    /// A request with a PSN already seen (§9.7.5.1.2).
    fn duplicate(
        &mut self,
        qp: &mut QpCore,
        res: &mut Res,
        info: &'static OpcodeInfo,
        pkt: &RocePacketRepr<'_>,
    ) {
        let psn = pkt.bth.psn;
        // Replays are bounded too (a flood of duplicates must not grow the queue),
        // separately from the resources new requests hold.
        let room = self.pending_rd_atomic(true) < usize::from(qp.attr.max_dest_rd_atomic).max(1);
        match info.operation {
            Operation::Send | Operation::RdmaWrite => self.push_ack(),
            Operation::RdmaReadRequest | Operation::CompareSwap | Operation::FetchAdd if !room => {
                // Responses already queued will answer it.
                res.counters.dup_no_resource_dropped += 1;
            }
            Operation::RdmaReadRequest => {
                let found = self.resources.iter().any(|r| match *r {
                    RespResource::Read { first_psn, last_psn } => {
                        psn.in_window(first_psn, last_psn.distance(first_psn) as u32 + 1)
                    }
                    _ => false,
                });
                let reth = pkt.ext.reth.expect("READ request has a RETH");
                if found && read_allowed(qp, res, &reth) {
                    self.push_read(&reth, psn, true);
                } else {
                    res.counters.dup_no_resource_dropped += 1;
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let saved = self.resources.iter().find_map(|r| match *r {
                    RespResource::Atomic { psn: p, orig, msn } if p == psn => Some((orig, msn)),
                    _ => None,
                });
                match saved {
                    Some((orig, msn)) => self.push(RespItem::AtomicAck { psn, orig, msn, replay: true }),
                    None => res.counters.dup_no_resource_dropped += 1,
                }
            }
            _ => {}
        }
    }

    /// Queues the responses to a READ (generated packet by packet as the
    /// transmit side asks), under the current MSN.
    fn push_read(&mut self, reth: &RethRepr, psn: Psn, replay: bool) {
        let msn = self.msn;
        let remaining = u64::from(reth.dma_len);
        self.push(RespItem::Read {
            rkey: reth.rkey,
            va: reth.va,
            remaining,
            sent: 0,
            psn,
            first: true,
            msn,
            replay,
        });
    }

    fn push(&mut self, item: RespItem) {
        self.outq.push_back(item);
    }

    /// Queues a cumulative ACK for everything before the expected PSN, merging
    /// with an ACK already waiting at the tail (coalescing).
    fn push_ack(&mut self) {
        let psn = self.epsn.sub(1);
        let msn = self.msn;
        if let Some(RespItem::Ack { psn: p, syndrome: Syndrome::Ack { .. }, msn: m }) = self.outq.back_mut() {
            *p = psn;
            *m = msn;
            return;
        }
        self.push(RespItem::Ack { psn, syndrome: Syndrome::Ack { credits: CREDITS }, msn });
    }

    /// NAKs a fatal request error; the QP enters ERR once the NAK is sent.
    fn nak_error(&mut self, qp: &mut QpCore, res: &mut Res, psn: Psn, code: NakCode, recv: Option<WcStatus>) {
        res.counters.send_nak_err += 1;
        if let Some(InMsg::Send { wqe, .. }) = self.cur.take() {
            let wc = Wc::new(wqe.wr.wr_id, recv.unwrap_or(WcStatus::RemInvReqErr), WcOpcode::Recv, qp.qpn);
            res.complete(qp.init.recv_cq, wc);
        }
        // Responses to earlier requests still go out first, then the NAK.
        self.push(RespItem::Ack { psn, syndrome: Syndrome::Nak(code), msn: self.msn });
        self.error_after_nak = true;
    }

    fn ud_receive(&mut self, qp: &mut QpCore, res: &mut Res, meta: &DatagramMeta, pkt: &RocePacketRepr<'_>) {
        let Some(deth) = pkt.ext.deth else { return };
        if deth.qkey != qp.attr.qkey {
            res.counters.qkey_violation_dropped += 1;
            return;
        }
        let Some(wqe) = qp.take_recv(res) else {
            res.counters.no_recv_wqe_dropped += 1;
            return;
        };
        let pd = qp.init.pd;
        let grh = ud_grh(meta, pkt);
        let total = (grh.len() + pkt.payload.len()) as u64;
        let mut wc = Wc::new(wqe.wr.wr_id, WcStatus::Success, WcOpcode::Recv, qp.qpn);
        wc.src_qp = deth.src_qp;
        if total > wqe.length {
            wc.status = WcStatus::LocLenErr;
        } else if res.mrs.scatter(&wqe.wr.sg_list, pd, 0, &grh).is_err()
            || res.mrs.scatter(&wqe.wr.sg_list, pd, grh.len() as u64, pkt.payload).is_err()
        {
            wc.status = WcStatus::LocProtErr;
        } else {
            wc.byte_len = total as u32;
            wc.wc_flags = WC_GRH;
            if let Some(i) = pkt.ext.imm {
                wc.wc_flags |= WC_WITH_IMM;
                wc.imm_data = i;
            }
            res.counters.rdma_recvs += 1;
        }
        res.complete(qp.init.recv_cq, wc);
    }

    /// Produces the next response packet of `qp` into `buf`.
    /// Whether a response waits to be sent.
    pub fn has_output(&self) -> bool {
        !self.outq.is_empty()
    }

    pub fn poll_transmit(&mut self, qp: &mut QpCore, res: &mut Res, buf: &mut [u8]) -> Option<usize> {
        let mtu = qp.mtu();
        let item = *self.outq.front()?;
        let bth = |opcode: u8, psn: Psn| BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pkey: res.cfg.pkey,
            fecn: false,
            becn: false,
            dest_qp: qp.attr.dest_qp_num,
            ack_req: false,
            psn,
        };
        let ack = |msn: u32| Some(AethRepr { syndrome: Syndrome::Ack { credits: CREDITS }, msn });
        let (repr, payload_from): (RocePacketRepr<'_>, Option<(u32, u64, usize, u64)>) = match item {
            RespItem::Ack { psn, syndrome, msn } => {
                self.outq.pop_front();
                let ext = ExtHeaders { aeth: Some(AethRepr { syndrome, msn }), ..ExtHeaders::default() };
                (
                    RocePacketRepr {
                        bth: bth(response_opcode(Operation::Acknowledge, Position::Only), psn),
                        ext,
                        payload: &[],
                    },
                    None,
                )
            }
            RespItem::AtomicAck { psn, orig, msn, .. } => {
                self.outq.pop_front();
                let ext = ExtHeaders { aeth: ack(msn), atomic_ack: Some(orig), ..ExtHeaders::default() };
                (
                    RocePacketRepr {
                        bth: bth(response_opcode(Operation::AtomicAcknowledge, Position::Only), psn),
                        ext,
                        payload: &[],
                    },
                    None,
                )
            }
            RespItem::Read { rkey, va, remaining, sent, psn, first, msn, .. } => {
                let n = remaining.min(mtu as u64);
                let last = n == remaining;
                let position = match (first, last) {
                    (true, true) => Position::Only,
                    (true, false) => Position::First,
                    (false, false) => Position::Middle,
                    (false, true) => Position::Last,
                };
                let opcode = response_opcode(Operation::RdmaReadResponse, position);
                let aeth = if first || last { ack(msn) } else { None };
                let ext = ExtHeaders { aeth, ..ExtHeaders::default() };
                if last {
                    self.outq.pop_front();
                } else if let Some(RespItem::Read { va, remaining, sent, psn, first, .. }) =
                    self.outq.front_mut()
                {
                    *va += n;
                    *remaining -= n;
                    *sent += n;
                    *psn = psn.next();
                    *first = false;
                }
                (
                    RocePacketRepr { bth: bth(opcode, psn), ext, payload: &[] },
                    Some((rkey, va, n as usize, sent)),
                )
            }
        };
        let n = payload_from.map_or(0, |p| p.2);
        let hdr = repr.emit_header(buf, n).ok()?;
        if let Some((rkey, va, n, sent)) = payload_from {
            if n > 0 {
                let src = res.mrs.remote(rkey, qp.init.pd, va, n as u64, Access::REMOTE_READ);
                // (an engine that elides payload reads each response's
                // first bytes only: zeros stand for the rest)
                let carried = res.cfg.payload.carried(sent, n);
                let copied = match (&mut res.holes, src) {
                    // Left in memory for the driver to send from.
                    (Some(holes), Some((b, off))) if carried == n && n >= PAYLOAD_REF_MIN => {
                        b.nic_ref(off, n).map(|src| holes.push(Hole { at: hdr, src })).is_ok()
                    }
                    (_, src) => {
                        buf[hdr + carried..hdr + n].fill(0);
                        src.is_some_and(|(b, off)| b.nic_read(off, &mut buf[hdr..hdr + carried]).is_ok())
                    }
                };
                if !copied {
                    // The region went away between request and response.
                    let psn = repr.bth.psn;
                    self.nak_error(qp, res, psn, NakCode::RemoteAccessError, None);
                    return self.poll_transmit(qp, res, buf);
                }
            }
        }
        if let RespItem::Ack { syndrome: Syndrome::Nak(c), .. } = item {
            if c != NakCode::PsnSequenceError && self.error_after_nak {
                // The responder's error reaches its consumer as the
                // affiliated event of its kind (IBTA vol. 1 11.6.3.1):
                // an invalid request, an access violation, or, for a
                // remote operational error, a catastrophic one.
                let qpn = qp.qpn;
                qp.raise_error_event(match c {
                    NakCode::InvalidRequest => AsyncEvent::QpReqErr(qpn),
                    NakCode::RemoteAccessError => AsyncEvent::QpAccessErr(qpn),
                    _ => AsyncEvent::QpFatal(qpn),
                });
            }
        }
        Some(hdr + n + roce_wire::packet::pad_for(n) + roce_wire::icrc::ICRC_LEN)
    }
}

/// The 40 bytes a UD receive buffer starts with: the GRH (IPv6 header) of the
/// packet, or for IPv4 20 zero bytes followed by the IPv4 header, as Linux
/// RoCE devices lay it out.
fn ud_grh(meta: &DatagramMeta, pkt: &RocePacketRepr<'_>) -> [u8; 40] {
    let mut g = [0u8; 40];
    let n = pkt.payload.len();
    let transport_len = roce_wire::bth::HEADER_LEN
        + pkt.ext.set().len_bytes()
        + n
        + roce_wire::packet::pad_for(n)
        + roce_wire::icrc::ICRC_LEN;
    let mut hdr = [0u8; roce_wire::encap::MAX_HEADER_LEN];
    match meta.encap().emit_ip_udp(&mut hdr, transport_len) {
        Ok((_, roce_wire::NetHeader::Ipv4)) => {
            g[20..40].copy_from_slice(&hdr[..20]);
            // TOS and TTL are not known here (left 0), so this is not the
            // header the packet came with: no checksum vouches for it.
            g[20 + roce_wire::ipv4::field::CHECKSUM..][..2].fill(0);
        }
        Ok(_) => g.copy_from_slice(&hdr[..40]),
        Err(_) => {
            g[8..24].copy_from_slice(&gid_to_bytes(meta.src));
            g[24..40].copy_from_slice(&gid_to_bytes(meta.dst));
        }
    }
    g
}

/// A READ may name `[va, va + len)` of a region whose R_Key allows remote
/// reads and whose PD is the QP's (IBTA §9.7.5.1.3, §10.6.3.3); a
/// zero-length READ names no memory and needs no key (C9-88).
fn read_allowed(qp: &QpCore, res: &Res, reth: &RethRepr) -> bool {
    let len = u64::from(reth.dma_len);
    len == 0 || res.mrs.remote(reth.rkey, qp.init.pd, reth.va, len, Access::REMOTE_READ).is_some()
}
