//! The completer (rxe_comp.c): consumes ACKs, NAKs, READ responses and atomic
//! ACKs; retires WQEs in order and raises their completions; drives
//! retransmission.
//!
//! IBTA vol. 1 §9.7.5.2 (requester side of RC): ACKs are cumulative, so a
//! response with PSN p acknowledges every request before it (§9.7.5.2.1); a
//! READ response or atomic ACK implicitly acknowledges earlier SENDs and
//! WRITEs; an ACK that covers a READ or atomic whose response never came is
//! an implied NAK and restarts it (§9.7.5.2.4). A PSN sequence error NAK
//! restarts transmission at its PSN (go-back-N, §9.7.5.2.5). An RNR NAK waits
//! the RNR timer and retries, `rnr_retry` times (7 = forever, §9.7.5.2.8). The
//! local ACK timeout (4.096 us x 2^timeout, §9.7.6.1.3) retries `retry_cnt`
//! times.
//!
//! A gap in the responses (a READ response, atomic ACK or ACK past a PSN
//! whose answer never came) restarts transmission once per gap: the
//! responses already on their way from before the restart show the same gap
//! and are ignored (as rxe_comp.c does with `started_retry`). Restarting on
//! each of them would re-send the READs every time, and a responder that
//! starts its replay over on every repeated READ (rxe does) would never
//! finish one. There can be at most one such response per PSN that was
//! outstanding past the gap; more responses showing the same gap are
//! answers to the restart whose first one was lost, and restart it again
//! without waiting for the ACK timer. So does one that comes an eighth of
//! the ACK timeout after the restart (a replay takes far less), so that
//! recovering a gap costs no transport retry unless the link stays silent. Exhaustion, remote access/invalid request/operational NAKs and
//! local errors complete the WQE in error and move the QP to ERR, which
//! flushes every other WQE (§10.3.1, §11.6.2).

use roce_wire::{NakCode, OpcodeInfo, Operation, Psn, RocePacketRepr, Syndrome};

use crate::engine::Res;
use crate::qp::{GapRetry, Qp};
use crate::time::{ack_timeout, rnr_timer, Duration, Instant};
use crate::verbs::{AsyncEvent, QpState, SendOp, Wc, WcStatus};

/// Pops finished WQEs off the front of the SQ, raising completions: always
/// for errors, for successes only if signalled (IBTA §10.7.2.1).
pub(crate) fn retire(qp: &mut Qp, res: &mut Res) {
    while let Some(w) = qp.sq.front() {
        let Some(status) = w.done else { break };
        let w = qp.sq.pop_front().unwrap();
        qp.sq_base += 1;
        if status != WcStatus::Success {
            res.counters.send_err += 1;
        }
        if w.signaled || status != WcStatus::Success {
            let mut wc = Wc::new(w.wr.wr_id, status, w.wr.op.wc_opcode(), qp.qpn);
            if status == WcStatus::Success {
                wc.byte_len = w.length as u32;
            }
            res.complete(qp.init.send_cq, wc);
        }
    }
    if qp.req.next < qp.sq_base {
        // The WQE the requester was on was retired under it (its late
        // response came after a rewind): carry on from the oldest
        // unacknowledged PSN.
        let at = qp.comp.psn;
        retry_from(qp, at);
    }
}

/// Moves the QP to ERR: every send WQE not yet completed is flushed (the one
/// that failed keeps its own status), and so is every receive WQE.
pub(crate) fn enter_error(qp: &mut Qp, res: &mut Res) {
    if qp.state != QpState::Err {
        qp.state = QpState::Err;
        res.events.push_back(AsyncEvent::QpFatal(qp.qpn));
    }
    qp.comp.ack_deadline = None;
    qp.comp.rnr_until = None;
    qp.resp.outq.clear();
    if let Some(crate::qp::InMsg::Send { wqe, .. }) = qp.resp.cur.take() {
        let wc = Wc::new(wqe.wr.wr_id, WcStatus::WrFlushErr, crate::verbs::WcOpcode::Recv, qp.qpn);
        res.complete(qp.init.recv_cq, wc);
    }
    flush_send(qp, res);
    flush_recv(qp, res);
}

/// Completes every outstanding send WQE with WR_FLUSH_ERR (or its own error).
pub(crate) fn flush_send(qp: &mut Qp, res: &mut Res) {
    for w in qp.sq.iter_mut() {
        if w.done.is_none() {
            w.done = Some(WcStatus::WrFlushErr);
        }
    }
    retire(qp, res);
    qp.req.rd_atomic_outstanding = 0;
}

/// Completes every receive WQE of the QP's own RQ with WR_FLUSH_ERR (an SRQ
/// is shared and keeps its WQEs).
pub(crate) fn flush_recv(qp: &mut Qp, res: &mut Res) {
    while let Some(w) = qp.rq.pop_front() {
        let wc = Wc::new(w.wr.wr_id, WcStatus::WrFlushErr, crate::verbs::WcOpcode::Recv, qp.qpn);
        res.complete(qp.init.recv_cq, wc);
    }
}

/// Completes the WQE at the front in error and moves the QP to ERR.
fn fail_front(qp: &mut Qp, res: &mut Res, status: WcStatus) {
    if let Some(w) = qp.sq.iter_mut().find(|w| w.done.is_none()) {
        w.done = Some(status);
    }
    enter_error(qp, res);
}

/// True while some sent request still waits for its acknowledgement.
/// Every sent request consumes PSNs, so something is outstanding exactly
/// when the oldest unacknowledged PSN is not one past the highest sent.
fn outstanding(qp: &Qp) -> bool {
    qp.comp.psn != qp.req.psn_hi
}

/// Re-arms (or disarms) the local ACK timer after progress. During an RNR
/// back-off nothing is in flight, so the ACK timer does not run (a late
/// sequence NAK must not start it and burn a transport retry).
fn rearm(qp: &mut Qp, now: Instant) {
    qp.comp.ack_deadline = if outstanding(qp) && qp.comp.rnr_until.is_none() {
        ack_timeout(qp.attr.timeout).map(|d| now + d)
    } else {
        None
    };
}

/// A response showed that the answer to `at` was lost: restart there, unless
/// that restart was already made (see the module docs).
fn gap_retry(qp: &mut Qp, res: &mut Res, now: Instant, at: Psn) {
    let patience = ack_timeout(qp.attr.timeout).map(|d| Duration(d.0 / 8));
    if let Some(g) = &mut qp.comp.gap_retry {
        let recent = patience.is_none_or(|p| now < g.when + p);
        if g.at == at && g.stale > 0 && recent {
            g.stale -= 1;
            res.counters.out_of_seq_response += 1;
            return;
        }
    }
    restarted_at(qp, now, at);
    retry_from(qp, at);
    rearm(qp, now);
}

/// Records a restart of transmission at `at` caused by a response gap.
fn restarted_at(qp: &mut Qp, now: Instant, at: Psn) {
    let stale = qp.req.psn_hi.distance(at).max(0) as u32;
    qp.comp.gap_retry = Some(GapRetry { at, stale, when: now });
}

/// Forward progress resets the retry counters (IBTA §9.7.6.1.3/.4).
fn progress(qp: &mut Qp, now: Instant) {
    qp.comp.retry_left = qp.attr.retry_cnt;
    qp.comp.rnr_retry_left = qp.attr.rnr_retry;
    rearm(qp, now);
}

/// Result of acknowledging everything before a PSN.
enum Implied {
    /// Fine; `advanced` tells whether anything new was acknowledged.
    Ok { advanced: bool },
    /// A READ or atomic before the PSN has no response: restart there.
    Retry(Psn),
}

/// Acknowledges every request PSN before `psn` (exclusive): retires the
/// SEND/WRITE WQEs that end before it and moves the oldest unacknowledged PSN
/// forward, also inside a message still being sent (a long WRITE is
/// acknowledged packet by packet as AckReq asks, which opens the window).
fn ack_before(qp: &mut Qp, res: &mut Res, psn: Psn) -> Implied {
    let mut advanced = false;
    let mut result = None;
    for w in qp.sq.iter_mut() {
        if w.done.is_some() {
            continue;
        }
        if !w.started {
            break;
        }
        if w.started && w.last_psn.is_before(psn) {
            if w.wr.op.is_read_or_atomic() {
                result = Some(Implied::Retry(qp.comp.psn));
                break;
            }
            w.done = Some(WcStatus::Success);
            qp.comp.psn = w.last_psn.next();
            advanced = true;
            continue;
        }
        if !w.wr.op.is_read_or_atomic() && psn.is_after(qp.comp.psn) {
            qp.comp.psn = psn;
            advanced = true;
        }
        break;
    }
    retire(qp, res);
    result.unwrap_or(Implied::Ok { advanced })
}

/// Restarts transmission at `psn` (go-back-N): the requester resumes with
/// the WQE holding that PSN, from that packet on.
pub(crate) fn retry_from(qp: &mut Qp, psn: Psn) {
    let mtu = qp.mtu() as u64;
    let mut resume = None;
    for (i, w) in qp.sq.iter().enumerate() {
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
    let base = qp.sq_base;
    let Some((i, k, at, fresh)) = resume else {
        // Nothing outstanding: continue with whatever is unsent, from the
        // oldest unacknowledged PSN.
        qp.req.next = base + qp.sq.iter().position(|w| w.done.is_none()).unwrap_or(qp.sq.len()) as u64;
        qp.req.offset = 0;
        qp.req.psn = qp.comp.psn;
        return;
    };
    qp.req.next = base + i as u64;
    qp.req.psn = if fresh { qp.comp.psn } else { at };
    let w = &mut qp.sq[i];
    match w.wr.op {
        SendOp::Read { .. } => {
            qp.req.offset = 0;
            w.read_done = (k * mtu).min(w.length);
        }
        SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => qp.req.offset = 0,
        _ => qp.req.offset = (k * mtu).min(w.length),
    }
    qp.req.rd_atomic_outstanding =
        qp.sq.iter().take(i).filter(|w| w.done.is_none() && w.wr.op.is_read_or_atomic()).count() as u32;
    qp.req.noack_pkts = 0;
}

/// Handles a response packet for an RC QP.
pub(crate) fn handle_response(
    qp: &mut Qp,
    res: &mut Res,
    now: Instant,
    info: &'static OpcodeInfo,
    pkt: &RocePacketRepr<'_>,
) {
    if !matches!(qp.state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
        res.counters.bad_state_dropped += 1;
        return;
    }
    let psn = pkt.bth.psn;
    // Responses name PSNs in [comp.psn, psn_hi), where psn_hi is one past the
    // highest PSN ever sent (a go-back-N rewind moves req.psn back, but what
    // was sent before it may still be answered). A plain ACK of comp.psn - 1
    // is a harmless repeat; a NAK before comp.psn is stale: acting on it
    // would rewind a READ already being answered.
    let repeat_ack = info.operation == Operation::Acknowledge
        && matches!(pkt.ext.aeth.map(|a| a.syndrome), Some(Syndrome::Ack { .. }))
        && psn == qp.comp.psn.sub(1);
    if psn.is_before(qp.comp.psn) && !repeat_ack {
        res.counters.duplicate_response += 1;
        return;
    }
    if !psn.is_before(qp.req.psn_hi) {
        res.counters.unexpected_response_dropped += 1;
        return;
    }
    let Some(aeth) = pkt.ext.aeth.or(match info.operation {
        Operation::RdmaReadResponse => {
            Some(roce_wire::AethRepr { syndrome: Syndrome::Ack { credits: 31 }, msn: 0 })
        }
        _ => None,
    }) else {
        return;
    };
    match info.operation {
        Operation::Acknowledge => match aeth.syndrome {
            Syndrome::Ack { .. } => on_ack(qp, res, now, psn),
            Syndrome::RnrNak { timer } => on_rnr_nak(qp, res, now, psn, timer),
            Syndrome::Nak(NakCode::PsnSequenceError) => on_seq_nak(qp, res, now, psn),
            Syndrome::Nak(code) => {
                let _ = ack_before(qp, res, psn);
                let status = match code {
                    NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                    NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                    NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                    NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
                    NakCode::PsnSequenceError => unreachable!(),
                };
                fail_front(qp, res, status);
            }
        },
        Operation::RdmaReadResponse => on_read_response(qp, res, now, info, pkt),
        Operation::AtomicAcknowledge => on_atomic_ack(qp, res, now, psn, pkt.ext.atomic_ack.unwrap_or(0)),
        _ => res.counters.unexpected_response_dropped += 1,
    }
    // Responses to what was sent before a rewind may acknowledge past the
    // point the requester went back to: continue from there.
    if qp.state != QpState::Err && qp.req.psn.is_before(qp.comp.psn) {
        retry_from(qp, qp.comp.psn);
    }
    crate::requester::check_drained(qp, res);
}

fn on_ack(qp: &mut Qp, res: &mut Res, now: Instant, psn: Psn) {
    match ack_before(qp, res, psn.next()) {
        Implied::Retry(at) => gap_retry(qp, res, now, at),
        Implied::Ok { advanced } => {
            // An ACK at or past the request PSN of a READ/atomic whose response
            // has not come means that response was lost (implied NAK).
            let front = qp.sq.iter().find(|w| w.done.is_none());
            if let Some(w) = front {
                if w.started && w.wr.op.is_read_or_atomic() && !psn.is_before(w.first_psn) {
                    gap_retry(qp, res, now, qp.comp.psn);
                    return;
                }
            }
            if advanced {
                progress(qp, now);
            }
        }
    }
}

fn on_seq_nak(qp: &mut Qp, res: &mut Res, now: Instant, psn: Psn) {
    res.counters.rcvd_seq_err += 1;
    let at = match ack_before(qp, res, psn) {
        Implied::Retry(at) => at,
        Implied::Ok { advanced } => {
            if advanced {
                progress(qp, now);
            }
            psn
        }
    };
    // The responder NAKs a gap once; what it drops after it shows no gap
    // of its own to us.
    restarted_at(qp, now, at);
    retry_from(qp, at);
    rearm(qp, now);
}

fn on_rnr_nak(qp: &mut Qp, res: &mut Res, now: Instant, psn: Psn, timer: u8) {
    res.counters.rcvd_rnr_err += 1;
    let at = match ack_before(qp, res, psn) {
        Implied::Retry(at) => at,
        Implied::Ok { .. } => psn,
    };
    if qp.attr.rnr_retry != 7 {
        if qp.comp.rnr_retry_left == 0 {
            res.counters.retry_rnr_exceeded_err += 1;
            fail_front(qp, res, WcStatus::RnrRetryExcErr);
            return;
        }
        qp.comp.rnr_retry_left -= 1;
    }
    retry_from(qp, at);
    // The responder answered: the transport retry count measures timeouts
    // without any response, so it starts over (RNR retries count apart).
    qp.comp.retry_left = qp.attr.retry_cnt;
    qp.comp.rnr_until = Some(now + rnr_timer(timer));
    qp.comp.ack_deadline = None;
}

fn on_read_response(
    qp: &mut Qp,
    res: &mut Res,
    now: Instant,
    info: &'static OpcodeInfo,
    pkt: &RocePacketRepr<'_>,
) {
    let psn = pkt.bth.psn;
    if let Implied::Retry(at) = ack_before(qp, res, psn) {
        gap_retry(qp, res, now, at);
        return;
    }
    let mtu = qp.mtu() as u64;
    let pd = qp.init.pd;
    let Some(idx) = qp.sq.iter().position(|w| w.done.is_none()) else {
        res.counters.unexpected_response_dropped += 1;
        return;
    };
    let w = &qp.sq[idx];
    let in_range = w.started && psn.in_window(w.first_psn, w.last_psn.distance(w.first_psn) as u32 + 1);
    if !matches!(w.wr.op, SendOp::Read { .. }) || !in_range {
        res.counters.unexpected_response_dropped += 1;
        return;
    }
    if psn != qp.comp.psn {
        // A response packet was lost: ask again from the first missing one.
        gap_retry(qp, res, now, qp.comp.psn);
        return;
    }
    let offset = psn.distance(w.first_psn) as u64 * mtu;
    let n = pkt.payload.len() as u64;
    let remaining = w.length - offset.min(w.length);
    let ends = info.position.ends_message();
    let size_ok = if ends { n == remaining } else { n == mtu && n < remaining };
    if !size_ok || offset != w.read_done {
        fail_front(qp, res, WcStatus::BadRespErr);
        return;
    }
    if n > 0 {
        if let Err(e) = res.mrs.scatter(&w.wr.sg_list, pd, offset, pkt.payload) {
            let status = match e {
                crate::mr::LocalError::Protection => WcStatus::LocProtErr,
                crate::mr::LocalError::Length => WcStatus::LocLenErr,
            };
            fail_front(qp, res, status);
            return;
        }
    }
    let w = &mut qp.sq[idx];
    w.read_done = offset + n;
    qp.comp.psn = psn.next();
    if ends {
        w.done = Some(WcStatus::Success);
        qp.req.rd_atomic_outstanding = qp.req.rd_atomic_outstanding.saturating_sub(1);
        retire(qp, res);
    }
    progress(qp, now);
}

fn on_atomic_ack(qp: &mut Qp, res: &mut Res, now: Instant, psn: Psn, orig: u64) {
    if let Implied::Retry(at) = ack_before(qp, res, psn) {
        gap_retry(qp, res, now, at);
        return;
    }
    let pd = qp.init.pd;
    let Some(idx) = qp.sq.iter().position(|w| w.done.is_none()) else {
        res.counters.unexpected_response_dropped += 1;
        return;
    };
    let w = &qp.sq[idx];
    if !w.started || !w.wr.op.is_atomic() || w.first_psn != psn {
        res.counters.unexpected_response_dropped += 1;
        return;
    }
    // The original value lands in the local buffer in host order, as an
    // RDMA NIC writes it to host memory.
    if res.mrs.scatter(&w.wr.sg_list, pd, 0, &orig.to_ne_bytes()).is_err() {
        fail_front(qp, res, WcStatus::LocProtErr);
        return;
    }
    qp.sq[idx].done = Some(WcStatus::Success);
    qp.req.rd_atomic_outstanding = qp.req.rd_atomic_outstanding.saturating_sub(1);
    qp.comp.psn = psn.next();
    retire(qp, res);
    progress(qp, now);
}

/// A timer of the QP fired at `now`.
pub(crate) fn handle_timer(qp: &mut Qp, res: &mut Res, now: Instant) {
    if qp.comp.rnr_until.is_some_and(|t| t <= now) {
        qp.comp.rnr_until = None;
        rearm(qp, now);
    }
    if qp.comp.ack_deadline.is_some_and(|t| t <= now) {
        qp.comp.ack_deadline = None;
        if !outstanding(qp) || qp.state == QpState::Err {
            return;
        }
        // Unsignalled messages do not ask for an ACK (see the requester): if
        // nothing sent since the last acknowledgement asked for one, the
        // silence is not a loss. Resend, which asks, without spending a retry.
        let asked = qp.req.ackreq_psn.is_some_and(|p| !p.is_before(qp.comp.psn));
        if !asked {
            retry_from(qp, qp.comp.psn);
            rearm(qp, now);
            return;
        }
        if qp.comp.retry_left == 0 {
            res.counters.retry_exceeded_err += 1;
            fail_front(qp, res, WcStatus::RetryExcErr);
            return;
        }
        qp.comp.retry_left -= 1;
        res.counters.completer_retry_err += 1;
        retry_from(qp, qp.comp.psn);
        rearm(qp, now);
    }
}
