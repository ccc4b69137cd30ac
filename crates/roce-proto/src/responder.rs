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
//! rest of its message, §9.7.5.1.x). UD checks the Q_Key (§10.2.5) and places
//! a 40-byte GRH before the payload (ibverbs convention).

use roce_wire::{
    AethRepr, BthRepr, ExtHeaders, NakCode, OpcodeInfo, Operation, Psn, RocePacketRepr, Syndrome,
};

use crate::completer;
use crate::engine::{DatagramMeta, Res};
use crate::mr::LocalError;
use crate::qp::{InMsg, Qp, RespItem, RespResource};
use crate::time::Instant;
use crate::verbs::{gid_to_bytes, Access, QpType, Wc, WcOpcode, WcStatus, WC_GRH, WC_WITH_IMM, WC_WITH_INV};

/// ACK credit count field: "invalid" (no end-to-end credits), as rxe sends.
const CREDITS: u8 = roce_wire::aeth::CREDITS_INVALID;

/// Why a request was not executed.
enum Fault {
    /// No receive WQE: RNR NAK.
    Rnr,
    /// NAK with this code; complete the receive WQE in progress with `recv`.
    Nak(NakCode, Option<WcStatus>),
}

pub(crate) fn handle_request(
    qp: &mut Qp,
    res: &mut Res,
    _now: Instant,
    meta: &DatagramMeta,
    info: &'static OpcodeInfo,
    pkt: &RocePacketRepr<'_>,
) {
    if !qp.can_receive() || qp.resp.error_after_nak {
        res.counters.bad_state_dropped += 1;
        return;
    }
    // A connected QP takes requests from its peer only.
    if qp.init.qp_type != QpType::Ud && meta.src != qp.attr.av.dgid {
        res.counters.addr_mismatch_dropped += 1;
        return;
    }
    match qp.init.qp_type {
        QpType::Ud => ud_receive(qp, res, meta, pkt),
        QpType::Rc => rc_request(qp, res, info, pkt),
        QpType::Uc => uc_request(qp, res, info, pkt),
    }
}

fn rc_request(qp: &mut Qp, res: &mut Res, info: &'static OpcodeInfo, pkt: &RocePacketRepr<'_>) {
    let psn = pkt.bth.psn;
    let d = psn.distance(qp.resp.epsn);
    if d < 0 {
        res.counters.duplicate_request += 1;
        duplicate(qp, res, info, pkt);
        return;
    }
    if d > 0 {
        res.counters.out_of_seq_request += 1;
        if !qp.resp.nak_sent {
            qp.resp.nak_sent = true;
            let epsn = qp.resp.epsn;
            push(
                qp,
                RespItem::Ack {
                    psn: epsn,
                    syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                    msn: qp.resp.msn,
                },
            );
        }
        return;
    }
    match execute(qp, res, info, pkt) {
        Ok(()) => {
            let resumed = std::mem::replace(&mut qp.resp.nak_sent, false);
            if (pkt.bth.ack_req || resumed)
                && matches!(info.operation, Operation::Send | Operation::RdmaWrite)
            {
                push_ack(qp);
            }
        }
        Err(Fault::Rnr) => {
            res.counters.send_rnr_err += 1;
            qp.resp.nak_sent = true;
            let timer = qp.attr.min_rnr_timer;
            push(qp, RespItem::Ack { psn, syndrome: Syndrome::RnrNak { timer }, msn: qp.resp.msn });
        }
        Err(Fault::Nak(code, recv)) => nak_error(qp, res, psn, code, recv),
    }
}

fn uc_request(qp: &mut Qp, res: &mut Res, info: &'static OpcodeInfo, pkt: &RocePacketRepr<'_>) {
    let psn = pkt.bth.psn;
    if psn != qp.resp.epsn {
        // Lost packets: abandon the message in progress and resynchronise on
        // the next First or Only packet.
        res.counters.out_of_seq_request += 1;
        abandon(qp, res);
        if !info.position.starts_message() {
            qp.resp.epsn = psn.next();
            return;
        }
        qp.resp.epsn = psn;
    }
    match execute(qp, res, info, pkt) {
        Ok(()) => {}
        Err(_) => {
            abandon(qp, res);
            qp.resp.epsn = psn.next();
            res.counters.no_recv_wqe_dropped += 1;
        }
    }
}

/// Drops the message in progress (UC), returning its receive WQE.
fn abandon(qp: &mut Qp, res: &mut Res) {
    if let Some(InMsg::Send { wqe, .. }) = qp.resp.cur.take() {
        res.untake_recv(qp, wqe);
    }
}

/// Validates and executes the request with the expected PSN.
fn execute(
    qp: &mut Qp,
    res: &mut Res,
    info: &'static OpcodeInfo,
    pkt: &RocePacketRepr<'_>,
) -> Result<(), Fault> {
    let op = info.operation;
    let pos = info.position;
    let invalid = Fault::Nak(NakCode::InvalidRequest, None);
    // Opcode sequence (§9.7.5.1.4): Middle/Last continue the message in
    // progress, of the same kind; anything else starts a new one.
    let seq_ok = match (&qp.resp.cur, op) {
        (None, Operation::Send | Operation::RdmaWrite) => pos.starts_message(),
        (None, Operation::RdmaReadRequest | Operation::CompareSwap | Operation::FetchAdd) => true,
        (Some(InMsg::Send { .. }), Operation::Send) => !pos.starts_message(),
        (Some(InMsg::Write { .. }), Operation::RdmaWrite) => !pos.starts_message(),
        _ => false,
    };
    if !seq_ok {
        let recv = matches!(qp.resp.cur, Some(InMsg::Send { .. })).then_some(WcStatus::RemInvReqErr);
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
        let recv = matches!(qp.resp.cur, Some(InMsg::Send { .. })).then_some(WcStatus::RemInvReqErr);
        return Err(Fault::Nak(NakCode::InvalidRequest, recv));
    }
    match op {
        Operation::Send => exec_send(qp, res, info, pkt),
        Operation::RdmaWrite => exec_write(qp, res, info, pkt),
        Operation::RdmaReadRequest => exec_read(qp, res, pkt),
        Operation::CompareSwap | Operation::FetchAdd => exec_atomic(qp, res, op, pkt),
        _ => Err(invalid),
    }
}

fn exec_send(
    qp: &mut Qp,
    res: &mut Res,
    info: &'static OpcodeInfo,
    pkt: &RocePacketRepr<'_>,
) -> Result<(), Fault> {
    if info.position.starts_message() {
        let wqe = res.take_recv(qp).ok_or(Fault::Rnr)?;
        qp.resp.cur = Some(InMsg::Send { wqe, placed: 0 });
    }
    let pd = qp.init.pd;
    let Some(InMsg::Send { wqe, placed, .. }) = &mut qp.resp.cur else { unreachable!("sequence checked") };
    let n = pkt.payload.len() as u64;
    if *placed + n > wqe.length {
        // Message longer than the receive buffer (§9.7.5.1.x, C9-xx).
        return Err(Fault::Nak(NakCode::InvalidRequest, Some(WcStatus::LocLenErr)));
    }
    if n > 0 {
        match res.mrs.scatter(&wqe.wr.sg_list, pd, *placed, pkt.payload) {
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
        let Some(InMsg::Send { wqe, .. }) = qp.resp.cur.take() else { unreachable!() };
        let mut wc = Wc::new(wqe.wr.wr_id, WcStatus::Success, WcOpcode::Recv, qp.qpn);
        wc.byte_len = placed as u32;
        wc.imm_data = imm;
        wc.wc_flags = flags;
        wc.src_qp = qp.attr.dest_qp_num;
        res.complete(qp.init.recv_cq, wc);
        res.counters.rdma_recvs += 1;
        qp.resp.msn = (qp.resp.msn + 1) & 0x00ff_ffff;
    }
    qp.resp.epsn = qp.resp.epsn.next();
    Ok(())
}

fn exec_write(
    qp: &mut Qp,
    res: &mut Res,
    info: &'static OpcodeInfo,
    pkt: &RocePacketRepr<'_>,
) -> Result<(), Fault> {
    let pd = qp.init.pd;
    let access = Fault::Nak(NakCode::RemoteAccessError, None);
    // WRITE with immediate consumes a receive WQE on its last packet: check
    // for one before touching memory, so an RNR NAK leaves no trace.
    let wants_recv = pkt.ext.imm.is_some();
    if wants_recv && !has_recv(qp, res) {
        return Err(Fault::Rnr);
    }
    if info.position.starts_message() {
        let reth = pkt.ext.reth.expect("opcode table: First/Only WRITE has a RETH");
        let len = u64::from(reth.dma_len);
        if len > 0 && res.mrs.remote(reth.rkey, pd, reth.va, len, Access::REMOTE_WRITE).is_none() {
            return Err(access);
        }
        qp.resp.cur = Some(InMsg::Write { rkey: reth.rkey, va: reth.va, remaining: len, dma_len: len });
    }
    let Some(InMsg::Write { rkey, va, remaining, dma_len }) = &mut qp.resp.cur else { unreachable!() };
    let n = pkt.payload.len() as u64;
    if n > *remaining || (info.position.ends_message() && n != *remaining) {
        return Err(Fault::Nak(NakCode::InvalidRequest, None));
    }
    if n > 0 {
        let (buf, off) = res.mrs.remote(*rkey, pd, *va, n, Access::REMOTE_WRITE).ok_or(access)?;
        buf.nic_write(off, pkt.payload).map_err(|_| Fault::Nak(NakCode::RemoteAccessError, None))?;
    }
    *va += n;
    *remaining -= n;
    let dma_len = *dma_len;
    if info.position.ends_message() {
        qp.resp.cur = None;
        if let Some(imm) = pkt.ext.imm {
            let wqe = res.take_recv(qp).expect("checked above");
            let mut wc = Wc::new(wqe.wr.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm, qp.qpn);
            wc.byte_len = dma_len as u32;
            wc.imm_data = imm;
            wc.wc_flags = WC_WITH_IMM;
            wc.src_qp = qp.attr.dest_qp_num;
            res.complete(qp.init.recv_cq, wc);
        }
        qp.resp.msn = (qp.resp.msn + 1) & 0x00ff_ffff;
    }
    qp.resp.epsn = qp.resp.epsn.next();
    Ok(())
}

fn has_recv(qp: &Qp, res: &Res) -> bool {
    match qp.init.srq {
        None => !qp.rq.is_empty(),
        Some(s) => res.srqs.get(&s.0).is_some_and(|s| !s.wqes.is_empty()),
    }
}

/// Saves a responder resource, evicting the oldest beyond max_dest_rd_atomic.
fn save_resource(qp: &mut Qp, r: RespResource) {
    qp.resp.resources.push_back(r);
    while qp.resp.resources.len() > usize::from(qp.attr.max_dest_rd_atomic) {
        qp.resp.resources.pop_front();
    }
}

/// READ responses and atomic ACKs still waiting to be sent, for new
/// requests (`replays: false`) or for duplicates (`true`).
fn pending_rd_atomic(qp: &Qp, replays: bool) -> usize {
    qp.resp
        .outq
        .iter()
        .filter(|i| {
            matches!(i, RespItem::Read { replay, .. } | RespItem::AtomicAck { replay, .. } if *replay == replays)
        })
        .count()
}

/// The responder takes at most max_dest_rd_atomic READs and atomics at a
/// time (IBTA §9.5, the responder resources); a requester that exceeds it
/// gets an Invalid Request NAK. Also bounds what a hostile peer can queue.
fn check_rd_atomic_room(qp: &Qp) -> Result<(), Fault> {
    if pending_rd_atomic(qp, false) >= usize::from(qp.attr.max_dest_rd_atomic) {
        return Err(Fault::Nak(NakCode::InvalidRequest, None));
    }
    Ok(())
}

fn exec_read(qp: &mut Qp, res: &mut Res, pkt: &RocePacketRepr<'_>) -> Result<(), Fault> {
    check_rd_atomic_room(qp)?;
    let reth = pkt.ext.reth.expect("opcode table: READ request has a RETH");
    let len = u64::from(reth.dma_len);
    if len > 0 && res.mrs.remote(reth.rkey, qp.init.pd, reth.va, len, Access::REMOTE_READ).is_none() {
        return Err(Fault::Nak(NakCode::RemoteAccessError, None));
    }
    let psn = pkt.bth.psn;
    let npkts = len.div_ceil(qp.mtu() as u64).max(1) as u32;
    save_resource(qp, RespResource::Read { first_psn: psn, last_psn: psn.add(npkts - 1) });
    qp.resp.msn = (qp.resp.msn + 1) & 0x00ff_ffff;
    let msn = qp.resp.msn;
    push(
        qp,
        RespItem::Read { rkey: reth.rkey, va: reth.va, remaining: len, psn, first: true, msn, replay: false },
    );
    qp.resp.epsn = psn.add(npkts);
    Ok(())
}

fn exec_atomic(qp: &mut Qp, res: &mut Res, op: Operation, pkt: &RocePacketRepr<'_>) -> Result<(), Fault> {
    check_rd_atomic_room(qp)?;
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
    qp.resp.msn = (qp.resp.msn + 1) & 0x00ff_ffff;
    let msn = qp.resp.msn;
    save_resource(qp, RespResource::Atomic { psn, orig, msn });
    push(qp, RespItem::AtomicAck { psn, orig, msn, replay: false });
    qp.resp.epsn = psn.next();
    Ok(())
}

/// A request with a PSN already seen (§9.7.5.1.2).
fn duplicate(qp: &mut Qp, res: &mut Res, info: &'static OpcodeInfo, pkt: &RocePacketRepr<'_>) {
    let psn = pkt.bth.psn;
    // Replays are bounded too (a flood of duplicates must not grow the queue),
    // separately from the resources new requests hold.
    let room = pending_rd_atomic(qp, true) < usize::from(qp.attr.max_dest_rd_atomic).max(1);
    match info.operation {
        Operation::Send | Operation::RdmaWrite => push_ack(qp),
        Operation::RdmaReadRequest | Operation::CompareSwap | Operation::FetchAdd if !room => {
            // Responses already queued will answer it.
            res.counters.dup_no_resource_dropped += 1;
        }
        Operation::RdmaReadRequest => {
            let found = qp.resp.resources.iter().any(|r| match *r {
                RespResource::Read { first_psn, last_psn } => {
                    psn.in_window(first_psn, last_psn.distance(first_psn) as u32 + 1)
                }
                _ => false,
            });
            let reth = pkt.ext.reth.expect("READ request has a RETH");
            let len = u64::from(reth.dma_len);
            let ok = len == 0
                || res.mrs.remote(reth.rkey, qp.init.pd, reth.va, len, Access::REMOTE_READ).is_some();
            if found && ok {
                let msn = qp.resp.msn;
                push(
                    qp,
                    RespItem::Read {
                        rkey: reth.rkey,
                        va: reth.va,
                        remaining: len,
                        psn,
                        first: true,
                        msn,
                        replay: true,
                    },
                );
            } else {
                res.counters.dup_no_resource_dropped += 1;
            }
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            let saved = qp.resp.resources.iter().find_map(|r| match *r {
                RespResource::Atomic { psn: p, orig, msn } if p == psn => Some((orig, msn)),
                _ => None,
            });
            match saved {
                Some((orig, msn)) => push(qp, RespItem::AtomicAck { psn, orig, msn, replay: true }),
                None => res.counters.dup_no_resource_dropped += 1,
            }
        }
        _ => {}
    }
}

fn push(qp: &mut Qp, item: RespItem) {
    qp.resp.outq.push_back(item);
}

/// Queues a cumulative ACK for everything before the expected PSN, merging
/// with an ACK already waiting at the tail (coalescing).
fn push_ack(qp: &mut Qp) {
    let psn = qp.resp.epsn.sub(1);
    let msn = qp.resp.msn;
    if let Some(RespItem::Ack { psn: p, syndrome: Syndrome::Ack { .. }, msn: m }) = qp.resp.outq.back_mut() {
        *p = psn;
        *m = msn;
        return;
    }
    push(qp, RespItem::Ack { psn, syndrome: Syndrome::Ack { credits: CREDITS }, msn });
}

/// NAKs a fatal request error; the QP enters ERR once the NAK is sent.
fn nak_error(qp: &mut Qp, res: &mut Res, psn: Psn, code: NakCode, recv: Option<WcStatus>) {
    res.counters.send_nak_err += 1;
    if let Some(InMsg::Send { wqe, .. }) = qp.resp.cur.take() {
        let wc = Wc::new(wqe.wr.wr_id, recv.unwrap_or(WcStatus::RemInvReqErr), WcOpcode::Recv, qp.qpn);
        res.complete(qp.init.recv_cq, wc);
    }
    // Responses to earlier requests still go out first, then the NAK.
    push(qp, RespItem::Ack { psn, syndrome: Syndrome::Nak(code), msn: qp.resp.msn });
    qp.resp.error_after_nak = true;
}

fn ud_receive(qp: &mut Qp, res: &mut Res, meta: &DatagramMeta, pkt: &RocePacketRepr<'_>) {
    let Some(deth) = pkt.ext.deth else { return };
    if deth.qkey != qp.attr.qkey {
        res.counters.qkey_violation_dropped += 1;
        return;
    }
    let Some(wqe) = res.take_recv(qp) else {
        res.counters.no_recv_wqe_dropped += 1;
        return;
    };
    let pd = qp.init.pd;
    let grh = ud_grh(meta, pkt.payload.len());
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

/// The 40 bytes a UD receive buffer starts with: the GRH (IPv6 header) of the
/// packet, or for IPv4 20 zero bytes followed by the IPv4 header, as Linux
/// RoCE devices lay it out.
fn ud_grh(meta: &DatagramMeta, payload_len: usize) -> [u8; 40] {
    let mut g = [0u8; 40];
    let transport_len = 12 + 8 + payload_len + roce_wire::packet::pad_for(payload_len) + 4;
    if let Some((hdr, _, net)) = crate::engine::ip_udp_header(meta, transport_len) {
        match net {
            roce_wire::NetHeader::Ipv4 => g[20..40].copy_from_slice(&hdr[..20]),
            _ => g.copy_from_slice(&hdr[..40]),
        }
    } else {
        g[8..24].copy_from_slice(&gid_to_bytes(meta.src));
        g[24..40].copy_from_slice(&gid_to_bytes(meta.dst));
    }
    g
}

/// Produces the next response packet of `qp` into `buf`.
pub(crate) fn poll_transmit(qp: &mut Qp, res: &mut Res, buf: &mut [u8]) -> Option<usize> {
    let mtu = qp.mtu();
    let item = *qp.resp.outq.front()?;
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
    let (repr, payload_from): (RocePacketRepr<'_>, Option<(u32, u64, usize)>) = match item {
        RespItem::Ack { psn, syndrome, msn } => {
            qp.resp.outq.pop_front();
            let ext = ExtHeaders { aeth: Some(AethRepr { syndrome, msn }), ..ExtHeaders::default() };
            (RocePacketRepr { bth: bth(0x11, psn), ext, payload: &[] }, None)
        }
        RespItem::AtomicAck { psn, orig, msn, .. } => {
            qp.resp.outq.pop_front();
            let ext = ExtHeaders { aeth: ack(msn), atomic_ack: Some(orig), ..ExtHeaders::default() };
            (RocePacketRepr { bth: bth(0x12, psn), ext, payload: &[] }, None)
        }
        RespItem::Read { rkey, va, remaining, psn, first, msn, .. } => {
            let n = remaining.min(mtu as u64);
            let last = n == remaining;
            let opcode = match (first, last) {
                (true, true) => 0x10,
                (true, false) => 0x0d,
                (false, false) => 0x0e,
                (false, true) => 0x0f,
            };
            let aeth = if first || last { ack(msn) } else { None };
            let ext = ExtHeaders { aeth, ..ExtHeaders::default() };
            if last {
                qp.resp.outq.pop_front();
            } else if let Some(RespItem::Read { va, remaining, psn, first, .. }) = qp.resp.outq.front_mut() {
                *va += n;
                *remaining -= n;
                *psn = psn.next();
                *first = false;
            }
            (RocePacketRepr { bth: bth(opcode, psn), ext, payload: &[] }, Some((rkey, va, n as usize)))
        }
    };
    let n = payload_from.map_or(0, |p| p.2);
    let hdr = repr.emit_header(buf, n).ok()?;
    if let Some((rkey, va, n)) = payload_from {
        if n > 0 {
            let src = res.mrs.remote(rkey, qp.init.pd, va, n as u64, Access::REMOTE_READ);
            let copied = src.is_some_and(|(b, off)| b.nic_read(off, &mut buf[hdr..hdr + n]).is_ok());
            if !copied {
                // The region went away between request and response.
                let psn = repr.bth.psn;
                nak_error(qp, res, psn, NakCode::RemoteAccessError, None);
                return poll_transmit(qp, res, buf);
            }
        }
    }
    let is_fatal_nak =
        matches!(item, RespItem::Ack { syndrome: Syndrome::Nak(c), .. } if c != NakCode::PsnSequenceError);
    if is_fatal_nak && qp.resp.error_after_nak {
        completer::enter_error(qp, res);
    }
    Some(hdr + n + roce_wire::packet::pad_for(n) + roce_wire::icrc::ICRC_LEN)
}
