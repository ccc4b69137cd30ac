//! The requester (rxe_req.c): turns send WQEs into request packets.
//!
//! Segmentation by path MTU (IBTA vol. 1 §9.4: First/Middle carry exactly one
//! PMTU, Last/Only the rest), one PSN per packet and, for an RDMA READ, one
//! PSN per expected response packet (§9.4.4); AckReq on the last packet of a
//! message and every `ack_req_every` packets; at most `max_rd_atomic` READs
//! and atomics outstanding (§9.5, C9-xx initiator depth); the fence waits for
//! earlier READs and atomics; at most `max_unacked_psns` PSNs in flight.

use roce_wire::{AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, RethRepr, RocePacketRepr};

use crate::completer;
use crate::engine::Res;
use crate::qp::Qp;
use crate::time::{ack_timeout, Instant};
use crate::verbs::{AsyncEvent, QpState, QpType, SendOp, WcStatus};

/// Opcode for a packet of `op` at this position, on transport `t`
/// (`OpCode[7:5]` = 000 RC, 001 UC, 011 UD).
fn opcode(t: QpType, op: &SendOp, first: bool, last: bool) -> u8 {
    let base = match t {
        QpType::Rc => 0x00,
        QpType::Uc => 0x20,
        QpType::Ud => 0x60,
    };
    let low = match (op, first, last) {
        (SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. }, true, false) => 0x00,
        (SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. }, false, false) => 0x01,
        (SendOp::Send, false, true) => 0x02,
        (SendOp::SendWithImm { .. }, false, true) => 0x03,
        (SendOp::Send, true, true) => 0x04,
        (SendOp::SendWithImm { .. }, true, true) => 0x05,
        (SendOp::SendWithInv { .. }, false, true) => 0x16,
        (SendOp::SendWithInv { .. }, true, true) => 0x17,
        (SendOp::Write { .. } | SendOp::WriteWithImm { .. }, true, false) => 0x06,
        (SendOp::Write { .. } | SendOp::WriteWithImm { .. }, false, false) => 0x07,
        (SendOp::Write { .. }, false, true) => 0x08,
        (SendOp::WriteWithImm { .. }, false, true) => 0x09,
        (SendOp::Write { .. }, true, true) => 0x0a,
        (SendOp::WriteWithImm { .. }, true, true) => 0x0b,
        (SendOp::Read { .. }, _, _) => 0x0c,
        (SendOp::CompareSwap { .. }, _, _) => 0x13,
        (SendOp::FetchAdd { .. }, _, _) => 0x14,
    };
    base | low
}

/// Produces the next request packet of `qp` into `buf` (BTH through ICRC,
/// the ICRC left for the engine). Returns its length.
pub(crate) fn poll_transmit(qp: &mut Qp, res: &mut Res, now: Instant, buf: &mut [u8]) -> Option<usize> {
    if !qp.can_send() && qp.state != QpState::Sqd {
        return None;
    }
    if qp.comp.rnr_until.is_some() {
        return None;
    }
    let seq = qp.req.next;
    let mtu = qp.mtu();
    let t = qp.init.qp_type;
    let wqe = qp.wqe(seq)?;
    if wqe.done.is_some() {
        return None;
    }
    // SQD: stop at a message boundary.
    if qp.state == QpState::Sqd && qp.req.offset == 0 && !wqe.started {
        return None;
    }
    if t == QpType::Rc {
        let in_flight = qp.req.psn.distance(qp.comp.psn).max(0) as u32;
        if in_flight >= res.cfg.max_unacked_psns {
            return None;
        }
        if wqe.wr.op.is_read_or_atomic() && qp.req.rd_atomic_outstanding >= u32::from(qp.attr.max_rd_atomic) {
            return None;
        }
        if wqe.wr.fence && qp.req.rd_atomic_outstanding > 0 {
            return None;
        }
    }

    let op = wqe.wr.op;
    let psn = qp.req.psn;
    let (first, last, payload_len) = if op.is_read_or_atomic() {
        (true, true, 0)
    } else {
        let remaining = wqe.length - qp.req.offset;
        let n = remaining.min(mtu as u64) as usize;
        (qp.req.offset == 0, qp.req.offset + n as u64 == wqe.length, n)
    };
    let mut ext = ExtHeaders::default();
    match op {
        SendOp::Write { remote_addr, rkey } | SendOp::WriteWithImm { remote_addr, rkey, .. } if first => {
            ext.reth = Some(RethRepr { va: remote_addr, rkey, dma_len: wqe.length as u32 });
        }
        SendOp::Read { remote_addr, rkey } => {
            let done = wqe.read_done;
            ext.reth = Some(RethRepr { va: remote_addr + done, rkey, dma_len: (wqe.length - done) as u32 });
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
    if t == QpType::Ud {
        let d = ud.expect("checked at post");
        let qkey = if d.remote_qkey & 0x8000_0000 != 0 { qp.attr.qkey } else { d.remote_qkey };
        ext.deth = Some(DethRepr { qkey, src_qp: qp.qpn });
        qp.req.last_ud_dest = Some(d);
    }
    // AckReq (IBTA 9.2.6: the requester's choice) on the last packet of a
    // message whose completion someone waits for (signalled, READ/atomic),
    // of a retransmission, or once the send queue is half full; and at
    // least every `ack_req_every` packets. An unsignalled message needs no
    // ACK of its own: a later one acknowledges it cumulatively, which saves
    // a datagram per message on a ping-pong.
    let retransmission = psn.is_before(qp.req.psn_hi);
    let sq_half_full = qp.sq.len() * 2 >= qp.init.cap.max_send_wr as usize;
    let wanted = signaled || op.is_read_or_atomic() || retransmission || sq_half_full;
    let ack_req = t == QpType::Rc && ((last && wanted) || qp.req.noack_pkts + 1 >= res.cfg.ack_req_every);
    let dest_qp = match t {
        QpType::Ud => qp.req.last_ud_dest.map_or(0, |d| d.remote_qpn),
        _ => qp.attr.dest_qp_num,
    };
    let bth = BthRepr {
        opcode: opcode(t, &op, first, last),
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
    let hdr = repr.emit_header(buf, payload_len).ok()?;
    // Payload straight from the application's memory into the packet.
    let wqe = qp.wqe(seq).expect("present");
    let dst = &mut buf[hdr..hdr + payload_len];
    let gathered = match &wqe.inline_data {
        Some(data) => {
            let o = qp.req.offset as usize;
            dst.copy_from_slice(&data.as_slice()[o..o + payload_len]);
            Ok(())
        }
        None if payload_len > 0 => res.mrs.gather(&wqe.wr.sg_list, qp.init.pd, qp.req.offset, dst),
        None => Ok(()),
    };
    if gathered.is_err() {
        // Local protection error: the WR completes in error and the QP
        // moves to ERR (IBTA §10.8.3.1, class C error).
        let w = qp.wqe_mut(seq).unwrap();
        w.done = Some(WcStatus::LocProtErr);
        res.events.push_back(AsyncEvent::QpReqErr(qp.qpn));
        completer::enter_error(qp, res);
        return None;
    }
    let len = hdr + payload_len + roce_wire::packet::pad_for(payload_len) + roce_wire::icrc::ICRC_LEN;

    // Bookkeeping.
    let npsn = if let SendOp::Read { .. } = op {
        ((wqe.length - wqe.read_done).div_ceil(mtu as u64)).max(1) as u32
    } else {
        1
    };
    let read_fresh = matches!(op, SendOp::Read { .. }) && wqe.read_done == 0;
    let w = qp.wqe_mut(seq).unwrap();
    if (first && !op.is_read_or_atomic()) || read_fresh || op.is_atomic() {
        w.first_psn = psn;
        w.last_psn = psn.add(w.npkts(mtu).max(w.resp_pkts(mtu)) - 1);
    }
    w.started = true;
    qp.req.psn = psn.add(npsn);
    if qp.req.psn_hi.is_before(qp.req.psn) {
        qp.req.psn_hi = qp.req.psn;
    }
    qp.req.noack_pkts = if ack_req { 0 } else { qp.req.noack_pkts + 1 };
    if ack_req {
        qp.req.ackreq_psn = Some(psn);
    }
    if last {
        qp.req.next = seq + 1;
        qp.req.offset = 0;
        if op.is_read_or_atomic() {
            qp.req.rd_atomic_outstanding += 1;
        }
        if matches!(op, SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. }) {
            res.counters.rdma_sends += 1;
        }
        if t != QpType::Rc {
            // UC and UD have no acknowledgements: done once sent.
            qp.wqe_mut(seq).unwrap().done = Some(WcStatus::Success);
            qp.comp.psn = qp.req.psn;
            completer::retire(qp, res);
        }
    } else {
        qp.req.offset += payload_len as u64;
    }
    if t == QpType::Rc && qp.comp.ack_deadline.is_none() {
        qp.comp.ack_deadline = ack_timeout(qp.attr.timeout).map(|d| now + d);
    }
    Some(len)
}

/// In SQD, raise `SqDrained` once nothing is outstanding.
pub(crate) fn check_drained(qp: &mut Qp, res: &mut Res) {
    if qp.state == QpState::Sqd && qp.comp.psn == qp.req.psn && qp.req.offset == 0 {
        res.events.push_back(AsyncEvent::SqDrained(qp.qpn));
    }
}
