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
//! times. Exhaustion, remote access/invalid request/operational NAKs and
//! local errors complete the WQE in error and end the QP, which flushes every
//! other WQE (§10.3.1, §11.6.2).
//!
//! A gap in the responses (a READ response, atomic ACK or ACK past a PSN
//! whose answer never came) restarts transmission once per gap: the
//! responses already on their way from before the restart show the same gap
//! and are ignored (as rxe_comp.c does with `started_retry`). Restarting on
//! each of them would re-send the READs every time, and a responder that
//! starts its replay over on every repeated READ (rxe does) would never
//! finish one. There can be at most one such response per PSN that was
//! outstanding past the gap. Those that continue the stream the responder
//! was sending name a PSN above every response seen before them, and are
//! stale however late they come. One behind the highest seen is stale soon
//! after the restart (an eighth of the ACK timeout: a replay takes far
//! less), and later too while it goes on above the last such response (a
//! stream continuing past a loss of its own). One that steps back after
//! that, or once more such responses come than can exist, starts a stream
//! answering the restart whose first packet was lost, and restarts it again
//! without waiting for the ACK timer, so that recovering a gap costs no
//! transport retry unless the link stays silent. While the old stream
//! drains (a READ of megabytes from a slow responder drains for a long time
//! before the responder turns to the repeated request) the responder is
//! plainly answering, so its responses keep the ACK timer from expiring,
//! without counting as progress; once the responses in order pass the
//! highest stale one, the gap is closed and the next gap is a new loss.
//!
//! READ responses are recovered selectively (`place_past_gap`): one past a
//! gap inside a run of READ WQEs is placed where its PSN says and only the
//! gap is asked for again, so the restart above is left to gaps that a
//! SEND, WRITE or atomic stands in, and to the ACK timeout.
//!
//! A duplicate READ response (before the oldest unacknowledged PSN) is a
//! replay of requests that an ACK timeout repeated: the responder serves
//! a repeated request after everything queued before it (rxe does), so a
//! pause of its longer than the ACK timeout is followed by the rest of
//! its streams and then by replays that can outlast the timeout again.
//! Those responses re-arm the ACK and tail timers (the responder is
//! answering) and count as no progress; a timeout during them would repeat
//! the requests sent since, which would be replayed in turn, timeout after
//! timeout, until the retries ran out.
//!
//! A READ whose responses stop before its end (the last one came, more
//! were asked for, and nothing follows for `READ_TAIL_RTTS` smoothed round
//! trips, at least `read_tail_floor`) has its missing tail asked for again
//! at once, as the ACK timeout would much later (a tail loss shows no gap
//! to any later response): the `ReadTail` timer, re-armed by every response
//! placed, asks for the rest of the request from the first missing PSN (once
//! per gap unless bytes past it show the answer lost), at most
//! `READ_TAIL_REREQUESTS` times, each waiting twice as long, before the ACK
//! timeout decides (`read_tail_rerequests` counts them). A request that
//! repeats part of a READ is what IBTA vol. 1 §9.7.5.2.4 prescribes for a
//! gap; the requester keeps it inside the request it repeats.
//!
//! The completer owns the oldest unacknowledged PSN, the retry counters and
//! the gap state; it moves the requester's cursor only through
//! `Requester::rewind`.

use roce_wire::{NakCode, OpcodeInfo, Operation, Psn, RocePacketRepr, Syndrome};

use crate::limits::{
    read_request_end, GAP_RETRY_TIMEOUT_DIVISOR, READ_TAIL_GAPS, READ_TAIL_REREQUESTS, READ_TAIL_RTTS,
    SMALL_GAP_PACKETS,
};
use crate::qp::QpCore;
use crate::requester::{GapRequest, Requester};
use crate::res::Res;
use crate::time::{ack_timeout, rnr_timer, Duration, Instant};
use crate::timers::TimerKind;
use crate::verbs::{QpState, SendOp, WcStatus};

/// A restart of transmission that a gap in the responses caused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GapRetry {
    /// Where transmission restarted.
    at: Psn,
    /// Responses from before the restart that may still arrive (one per
    /// PSN that was outstanding past `at`).
    stale: u32,
    /// The highest response PSN seen, before the restart or since: the
    /// stream from before it continues above.
    hi: Psn,
    /// The last response behind `hi` since the restart: a response below
    /// it starts another stream.
    last: Psn,
    /// When; a repeat is allowed after a fraction of the ACK timeout.
    when: Instant,
}

/// Completer progress (rxe_comp.c's `qp->comp`).
#[derive(Debug, Default)]
pub(crate) struct Completer {
    /// Oldest PSN not yet acknowledged.
    psn: Psn,
    retry_left: u8,
    rnr_retry_left: u8,
    /// The last restart a response gap caused.
    gap_retry: Option<GapRetry>,
    /// Tail re-requests left before the ACK timeout decides, and the wait
    /// before the next one (see the module docs).
    tail_left: u8,
    tail_wait: Duration,
    /// The highest response PSN received (not a duplicate), once any was.
    last_rsp: Option<Psn>,
    /// When the last READ response was placed, and the longest pause
    /// between two responses of one READ request lately (see
    /// `read_progress`).
    last_read_at: Option<Instant>,
    read_gap: Duration,
    /// The oldest unacknowledged PSN when the requester last asked for a
    /// gap in a READ's responses (`ask_gap`), and how many bytes it asked
    /// for: that gap is asked for.
    gap_asked: Option<(Psn, u64)>,
}

/// Result of acknowledging everything before a PSN.
enum Implied {
    /// Fine; `advanced` tells whether anything new was acknowledged.
    Ok { advanced: bool },
    /// A READ or atomic before the PSN has no response: restart there.
    Retry(Psn),
}

/// What a completer call works on: its own state, the requester it may
/// rewind, the QP and the device.
struct Ctx<'a> {
    req: &'a mut Requester,
    q: &'a mut QpCore,
    res: &'a mut Res,
    now: Instant,
    /// The QP's smoothed round-trip time, once measured.
    srtt: Option<Duration>,
    /// The PSN of the response being handled (none for a timer).
    rsp_psn: Option<Psn>,
}

impl Completer {
    /// Starts expecting responses from `psn` (`IBV_QP_SQ_PSN`).
    pub fn start_at(&mut self, psn: Psn) {
        self.psn = psn;
    }

    /// The oldest unacknowledged PSN.
    pub fn psn(&self) -> Psn {
        self.psn
    }

    /// `IBV_QP_RETRY_CNT` / `IBV_QP_RNR_RETRY`.
    pub fn set_retry_cnt(&mut self, n: u8) {
        self.retry_left = n;
    }
    pub fn set_rnr_retry(&mut self, n: u8) {
        self.rnr_retry_left = n;
    }

    /// UC and UD are never acknowledged: what the requester sent is done.
    pub fn unreliable_sent(&mut self, req: &Requester) {
        self.psn = req.psn();
    }

    /// Handles a response packet for an RC QP; `srtt` is the QP's
    /// smoothed round-trip time, once measured.
    #[allow(clippy::too_many_arguments)]
    pub fn handle_response(
        &mut self,
        req: &mut Requester,
        q: &mut QpCore,
        res: &mut Res,
        now: Instant,
        srtt: Option<Duration>,
        info: &'static OpcodeInfo,
        pkt: &RocePacketRepr<'_>,
    ) {
        if !matches!(q.state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
            res.counters.bad_state_dropped += 1;
            return;
        }
        let psn = pkt.bth.psn;
        // Responses name PSNs in [psn, psn_hi), where psn_hi is one past the
        // highest PSN ever sent (a go-back-N rewind moves the requester back,
        // but what was sent before it may still be answered). A plain ACK of
        // psn - 1 is a harmless repeat; a NAK before psn is stale: acting on
        // it would rewind a READ already being answered.
        let repeat_ack = info.operation == Operation::Acknowledge
            && matches!(pkt.ext.aeth.map(|a| a.syndrome), Some(Syndrome::Ack { .. }))
            && psn == self.psn.sub(1);
        if psn.is_before(self.psn) && !repeat_ack {
            res.counters.duplicate_response += 1;
            if info.operation == Operation::RdmaReadResponse && q.state != QpState::Err {
                // A replay of READ responses we already have: a repeated
                // READ request (ours, after a timeout) that the responder
                // answers only once it has finished what it was sending
                // (rxe does so). It is answering, so the timers wait, as
                // for a draining stale stream; no progress is counted.
                self.answering(&mut Ctx { req, q, res, now, srtt, rsp_psn: Some(psn) });
            }
            return;
        }
        if !psn.is_before(req.psn_hi()) {
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
        let mut c = Ctx { req, q, res, now, srtt, rsp_psn: Some(psn) };
        match info.operation {
            Operation::Acknowledge => match aeth.syndrome {
                Syndrome::Ack { .. } => self.on_ack(&mut c, psn),
                Syndrome::RnrNak { timer } => self.on_rnr_nak(&mut c, psn, timer),
                Syndrome::Nak(NakCode::PsnSequenceError) => self.on_seq_nak(&mut c, psn),
                Syndrome::Nak(code) => {
                    let _ = self.ack_before(&mut c, psn);
                    let status = match code {
                        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                        NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
                        NakCode::PsnSequenceError => unreachable!("matched above"),
                    };
                    c.q.fail_front(status);
                }
            },
            Operation::RdmaReadResponse => self.on_read_response(&mut c, info, pkt),
            Operation::AtomicAcknowledge => self.on_atomic_ack(&mut c, psn, pkt.ext.atomic_ack.unwrap_or(0)),
            _ => c.res.counters.unexpected_response_dropped += 1,
        }
        if self.last_rsp.is_none_or(|l| psn.is_after(l)) {
            self.last_rsp = Some(psn);
        }
        // Responses to what was sent before a rewind may acknowledge past the
        // point the requester went back to: continue from there.
        if c.q.state != QpState::Err && c.req.psn().is_before(self.psn) {
            c.req.rewind(c.q, c.res, self.psn, self.psn);
        }
    }

    /// A timer of the completer's fell due.
    pub fn on_timer(
        &mut self,
        kind: TimerKind,
        req: &mut Requester,
        q: &mut QpCore,
        res: &mut Res,
        now: Instant,
    ) {
        let mut c = Ctx { req, q, res, now, srtt: None, rsp_psn: None };
        match kind {
            TimerKind::Rnr => self.rearm(&mut c),
            TimerKind::Ack => self.on_ack_timeout(&mut c),
            TimerKind::ReadTail => self.on_read_tail(&mut c),
            // The engine's, never handed here.
            TimerKind::Pace | TimerKind::Cc => {}
        }
    }

    /// Whether READ responses are still expected: the oldest unfinished
    /// WQE is a READ with bytes asked for and not received.
    fn read_expected(q: &QpCore) -> bool {
        q.sq.iter()
            .find(|w| w.done.is_none())
            .is_some_and(|w| w.started && matches!(w.wr.op, SendOp::Read { .. }) && w.read_sent > w.read_done)
    }

    /// A READ response was placed: the tail timer starts over with a full
    /// set of re-requests, if more responses are expected. A responder
    /// may pause inside one READ's stream (a busy or emulated host): the
    /// wait is also `READ_TAIL_GAPS` times the longest pause seen lately
    /// between two responses of one request (`continues`: this response is
    /// not a request's first), which halves at every request's first
    /// response, so a pause of that kind is not taken for a lost tail.
    fn read_progress(&mut self, c: &mut Ctx<'_>, continues: bool) {
        if let Some(prev) = self.last_read_at.filter(|_| continues) {
            self.read_gap = self.read_gap.max(c.now.saturating_duration_since(prev));
        } else if !continues {
            self.read_gap = Duration(self.read_gap.0 / 2);
        }
        self.last_read_at = Some(c.now);
        let floor = c.res.cfg.read_tail_floor;
        let rtts = c.srtt.map_or(Duration::ZERO, |r| Duration(r.0.saturating_mul(READ_TAIL_RTTS)));
        let gaps = Duration(self.read_gap.0.saturating_mul(READ_TAIL_GAPS));
        self.tail_wait = floor.max(rtts).max(gaps);
        self.tail_left = READ_TAIL_REREQUESTS;
        self.arm_read_tail(c);
    }

    /// Arms the tail timer `tail_wait` from now while READ responses are
    /// expected and re-requests are left, unless that is no sooner than the
    /// ACK timeout (which then decides alone); disarms it otherwise.
    fn arm_read_tail(&self, c: &mut Ctx<'_>) {
        let ack = ack_timeout(c.q.attr.timeout);
        let useful = self.tail_left > 0 && ack.is_none_or(|a| self.tail_wait < a);
        let at = (useful && Self::read_expected(c.q)).then(|| c.now + self.tail_wait);
        c.q.timers.set(TimerKind::ReadTail, at);
    }

    /// The responses of a READ stopped before its end and nothing came for
    /// `tail_wait`: ask again from the first missing one (module docs).
    fn on_read_tail(&mut self, c: &mut Ctx<'_>) {
        if c.q.state == QpState::Err || c.q.timers.is_set(TimerKind::Rnr) || !Self::read_expected(c.q) {
            return;
        }
        if self.tail_left == 0 {
            return;
        }
        // Only the missing part of the READ request the tail is in: the
        // requests after it were answered or are still being answered
        // (their own tail timer comes when the oldest missing byte is
        // theirs). A long tail already asked for again waits for the ACK
        // timeout: the responder answers a repeated request after what it
        // was sending, and asking twice would have the rest of the request
        // served twice. A gap with bytes past it, or a short tail
        // (`SMALL_GAP_PACKETS`), is asked for again: its answer was lost,
        // or is cheap to have twice.
        let front = c.q.sq.iter().position(|w| w.done.is_none());
        let placed_past = front.is_some_and(|i| !c.q.sq[i].read_above.is_empty());
        let asked_long = self
            .gap_asked
            .is_some_and(|(p, len)| p == self.psn && len > SMALL_GAP_PACKETS * c.q.mtu() as u64);
        if asked_long && !placed_past {
            return;
        }
        self.tail_left -= 1;
        c.res.counters.read_tail_rerequests += 1;
        if front.is_some_and(|i| self.request_gap(c, i)) {
            self.last_read_at = None;
            self.rearm(c);
        } else {
            let at = self.psn;
            self.restarted_at(c, at);
            self.restart(c, at);
        }
        self.tail_wait = Duration(self.tail_wait.0.saturating_mul(2));
        self.arm_read_tail(c);
    }

    fn on_ack_timeout(&mut self, c: &mut Ctx<'_>) {
        if !self.outstanding(c.req) || c.q.state == QpState::Err {
            return;
        }
        // Unsignalled messages do not ask for an ACK (see the requester): if
        // nothing sent since the last acknowledgement asked for one, the
        // silence is not a loss. Resend, which asks, without spending a retry.
        let asked = c.req.ackreq_psn().is_some_and(|p| !p.is_before(self.psn));
        self.gap_asked = None;
        if !asked {
            c.req.rewind(c.q, c.res, self.psn, self.psn);
            self.rearm(c);
            return;
        }
        if self.retry_left == 0 {
            c.res.counters.retry_exceeded_err += 1;
            c.q.fail_front(WcStatus::RetryExcErr);
            return;
        }
        self.retry_left -= 1;
        c.res.counters.completer_retry_err += 1;
        self.last_read_at = None;
        // A READ partly answered asks again for the part of its request
        // from the oldest missing byte (a retransmission from the oldest
        // unacknowledged PSN, §9.7.6.1.3, of that request only): the
        // responder serves a repeated request after what it was sending,
        // and going back N would have it send the whole window again. A
        // later request that never arrived is asked for in turn, once the
        // oldest missing byte is its.
        let front = c.q.sq.iter().position(|w| w.done.is_none());
        let answered = front.is_some_and(|i| c.q.sq[i].read_done > 0 || !c.q.sq[i].read_above.is_empty());
        if answered && front.is_some_and(|i| self.request_gap(c, i)) {
            self.rearm(c);
            return;
        }
        c.req.rewind(c.q, c.res, self.psn, self.psn);
        self.rearm(c);
    }

    /// True while some sent request still waits for its acknowledgement.
    /// Every sent request consumes PSNs, so something is outstanding exactly
    /// when the oldest unacknowledged PSN is not one past the highest sent.
    fn outstanding(&self, req: &Requester) -> bool {
        self.psn != req.psn_hi()
    }

    /// Re-arms (or disarms) the local ACK timer after progress. During an
    /// RNR back-off nothing is in flight, so the ACK timer does not run (a
    /// late sequence NAK must not start it and burn a transport retry).
    fn rearm(&self, c: &mut Ctx<'_>) {
        let at = if self.outstanding(c.req) && !c.q.timers.is_set(TimerKind::Rnr) {
            ack_timeout(c.q.attr.timeout).map(|d| c.now + d)
        } else {
            None
        };
        c.q.timers.set(TimerKind::Ack, at);
    }

    /// A response that is no progress (a stale stream draining, a replay)
    /// shows the responder answering: the ACK and tail timers start over,
    /// the retry counters stay as they are.
    fn answering(&self, c: &mut Ctx<'_>) {
        self.rearm(c);
        if self.tail_left > 0 {
            self.arm_read_tail(c);
        }
    }

    /// Forward progress resets the retry counters (IBTA §9.7.6.1.3/.4).
    fn progress(&mut self, c: &mut Ctx<'_>) {
        self.retry_left = c.q.attr.retry_cnt;
        self.rnr_retry_left = c.q.attr.rnr_retry;
        self.close_gap();
        self.rearm(c);
    }

    /// Retires finished WQEs; if that retired the WQE the requester was on
    /// (its late response came after a rewind), the requester carries on
    /// from the oldest unacknowledged PSN.
    fn retire(&self, c: &mut Ctx<'_>) {
        c.q.retire(c.res);
        if c.req.behind(c.q) {
            c.req.rewind(c.q, c.res, self.psn, self.psn);
        }
    }

    /// Restarts transmission at `at`: the requester goes back, the ACK
    /// timer starts over. The pause until the answer is recovery, not the
    /// responder's own (`read_progress` does not measure it).
    fn restart(&mut self, c: &mut Ctx<'_>, at: Psn) {
        self.last_read_at = None;
        self.gap_asked = None;
        c.req.rewind(c.q, c.res, self.psn, at);
        self.rearm(c);
    }

    /// A response showed that the answer to `at` was lost: restart there,
    /// unless that restart was already made (see the module docs).
    fn gap_retry(&mut self, c: &mut Ctx<'_>, at: Psn) {
        let patience = ack_timeout(c.q.attr.timeout).map(|d| Duration(d.0 / GAP_RETRY_TIMEOUT_DIVISOR));
        if let (Some(g), Some(p)) = (&mut self.gap_retry, c.rsp_psn) {
            if g.stale > 0 && !at.is_before(g.at) && p.is_after(g.hi) {
                // The stream from before the restart, still draining: it
                // names PSNs above every response seen, at or past the gap
                // (the restart's answers may have moved the gap on since).
                g.stale -= 1;
                g.hi = p;
                c.res.counters.out_of_seq_response += 1;
                self.answering(c);
                return;
            }
            let recent = patience.is_none_or(|d| c.now < g.when + d);
            let new_stream = !p.is_after(g.last);
            if g.stale > 0 && g.at == at && (recent || !new_stream) {
                // Behind the highest one seen: soon after the restart, a
                // response of an earlier stream still on its way; later, a
                // stream that goes on past a loss of its own (it repeats
                // nothing it sent), which the restart already covers.
                // Either way the responder is answering: the timers start
                // over.
                g.stale -= 1;
                g.last = p;
                c.res.counters.out_of_seq_response += 1;
                self.answering(c);
                return;
            }
        }
        self.restarted_at(c, at);
        self.restart(c, at);
    }

    /// Records a restart of transmission at `at` caused by a response gap.
    fn restarted_at(&mut self, c: &Ctx<'_>, at: Psn) {
        let stale = c.req.psn_hi().distance(at).max(0) as u32;
        let seen =
            [self.last_rsp, c.rsp_psn].into_iter().flatten().reduce(|a, b| if b.is_after(a) { b } else { a });
        let hi = seen.filter(|s| !s.is_before(at)).unwrap_or(at.sub(1));
        self.gap_retry = Some(GapRetry { at, stale, hi, last: at, when: c.now });
    }

    /// Responses in order have passed every stale one: the gap is closed,
    /// and a later gap is a new loss.
    fn close_gap(&mut self) {
        if self.gap_retry.is_some_and(|g| self.psn.is_after(g.hi)) {
            self.gap_retry = None;
        }
    }

    /// Acknowledges every request PSN before `psn` (exclusive): retires the
    /// SEND/WRITE WQEs that end before it and moves the oldest
    /// unacknowledged PSN forward, also inside a message still being sent (a
    /// long WRITE is acknowledged packet by packet as AckReq asks, which
    /// opens the window).
    fn ack_before(&mut self, c: &mut Ctx<'_>, psn: Psn) -> Implied {
        let mut advanced = false;
        let mut result = None;
        for w in c.q.sq.iter_mut() {
            if w.done.is_some() {
                continue;
            }
            if !w.started {
                break;
            }
            if w.last_psn.is_before(psn) {
                if w.wr.op.is_read_or_atomic() {
                    result = Some(Implied::Retry(self.psn));
                    break;
                }
                w.done = Some(WcStatus::Success);
                self.psn = w.last_psn.next();
                advanced = true;
                continue;
            }
            if !w.wr.op.is_read_or_atomic() && psn.is_after(self.psn) {
                self.psn = psn;
                advanced = true;
            }
            break;
        }
        self.retire(c);
        result.unwrap_or(Implied::Ok { advanced })
    }

    fn on_ack(&mut self, c: &mut Ctx<'_>, psn: Psn) {
        match self.ack_before(c, psn.next()) {
            Implied::Retry(at) => self.gap_retry(c, at),
            Implied::Ok { advanced } => {
                // An ACK at or past the request PSN of a READ/atomic whose
                // response has not come means that response was lost (implied
                // NAK).
                let front = c.q.sq.iter().find(|w| w.done.is_none());
                if front
                    .is_some_and(|w| w.started && w.wr.op.is_read_or_atomic() && !psn.is_before(w.first_psn))
                {
                    self.gap_retry(c, self.psn);
                    return;
                }
                if advanced {
                    self.progress(c);
                }
            }
        }
    }

    fn on_seq_nak(&mut self, c: &mut Ctx<'_>, psn: Psn) {
        c.res.counters.rcvd_seq_err += 1;
        let at = match self.ack_before(c, psn) {
            Implied::Retry(at) => at,
            Implied::Ok { advanced } => {
                if advanced {
                    self.progress(c);
                }
                psn
            }
        };
        // The responder NAKs a gap once; what it drops after it shows no gap
        // of its own to us.
        self.restarted_at(c, at);
        self.restart(c, at);
    }

    fn on_rnr_nak(&mut self, c: &mut Ctx<'_>, psn: Psn, timer: u8) {
        c.res.counters.rcvd_rnr_err += 1;
        let at = match self.ack_before(c, psn) {
            Implied::Retry(at) => at,
            Implied::Ok { .. } => psn,
        };
        if c.q.attr.rnr_retry != 7 {
            if self.rnr_retry_left == 0 {
                c.res.counters.retry_rnr_exceeded_err += 1;
                c.q.fail_front(WcStatus::RnrRetryExcErr);
                return;
            }
            self.rnr_retry_left -= 1;
        }
        c.req.rewind(c.q, c.res, self.psn, at);
        // The responder answered: the transport retry count measures timeouts
        // without any response, so it starts over (RNR retries count apart).
        self.retry_left = c.q.attr.retry_cnt;
        c.q.timers.set(TimerKind::Rnr, Some(c.now + rnr_timer(timer)));
        c.q.timers.set(TimerKind::Ack, None);
    }

    fn on_read_response(&mut self, c: &mut Ctx<'_>, info: &'static OpcodeInfo, pkt: &RocePacketRepr<'_>) {
        let psn = pkt.bth.psn;
        if psn != self.psn && self.place_past_gap(c, info, pkt) {
            return;
        }
        if let Implied::Retry(at) = self.ack_before(c, psn) {
            self.gap_retry(c, at);
            return;
        }
        let mtu = c.q.mtu() as u64;
        let Some(idx) = c.q.sq.iter().position(|w| w.done.is_none()) else {
            c.res.counters.unexpected_response_dropped += 1;
            return;
        };
        let w = &c.q.sq[idx];
        let in_range = w.started && psn.in_window(w.first_psn, w.last_psn.distance(w.first_psn) as u32 + 1);
        if !matches!(w.wr.op, SendOp::Read { .. }) || !in_range {
            c.res.counters.unexpected_response_dropped += 1;
            return;
        }
        if psn != self.psn {
            // A response packet was lost: ask again from the first missing one.
            self.gap_retry(c, self.psn);
            return;
        }
        let offset = psn.distance(w.first_psn) as u64 * mtu;
        let n = pkt.payload.len() as u64;
        if offset != w.read_done || !Self::size_ok(c, idx, offset, n, info.position.ends_message()) {
            c.q.fail_front(WcStatus::BadRespErr);
            return;
        }
        if n > 0 && !Self::place(c, idx, offset, pkt.payload) {
            return;
        }
        self.take_in_order(c, idx, offset + n);
        self.progress(c);
        self.read_progress(c, !info.position.starts_message());
        // Bytes placed past a gap came in a response above the oldest
        // unacknowledged PSN: without one, no gap (and no scan per packet).
        if self.last_rsp.is_some_and(|l| !l.is_before(self.psn)) {
            self.ask_gap(c);
        }
    }

    /// Whether a READ response of `n` bytes at `offset` of WQE `idx` has
    /// the size its place calls for. Each READ request ends on a multiple
    /// of the chunk or at the WQE's end (see `requester`), and a response
    /// message ends there; or, answering a request for a gap (see
    /// `ask_gap`), where the bytes placed past the gap begin, after a full
    /// packet.
    fn size_ok(c: &Ctx<'_>, idx: usize, offset: u64, n: u64, ends: bool) -> bool {
        let w = &c.q.sq[idx];
        let mtu = c.q.mtu() as u64;
        let request_end = read_request_end(c.res.cfg.rx_budget_bytes, mtu as usize, offset, w.length);
        let remaining = request_end.saturating_sub(offset);
        if ends {
            n == remaining || (n == mtu && n < remaining && w.read_above.starts_at(offset + n))
        } else {
            n == mtu && n < remaining
        }
    }

    /// Writes a READ response's payload into WQE `idx`'s local buffers at
    /// `offset`; a local fault ends the WQE (and the QP) in error.
    fn place(c: &mut Ctx<'_>, idx: usize, offset: u64, payload: &[u8]) -> bool {
        let w = &c.q.sq[idx];
        match c.res.mrs.scatter_payload(c.res.cfg.payload, &w.wr.sg_list, c.q.init.pd, offset, payload) {
            Ok(()) => true,
            Err(e) => {
                c.q.fail_front(match e {
                    crate::mr::LocalError::Protection => WcStatus::LocProtErr,
                    crate::mr::LocalError::Length => WcStatus::LocLenErr,
                });
                false
            }
        }
    }

    /// The responses of READ WQE `idx` are in order up to `to`: take in
    /// what was placed past it before, move the oldest unacknowledged PSN,
    /// count the READ requests answered in full (room for another under
    /// `max_rd_atomic`), and complete the WQE once all of it is there,
    /// carrying on into the next WQE if its first bytes were placed past a
    /// gap too.
    fn take_in_order(&mut self, c: &mut Ctx<'_>, mut idx: usize, to: u64) {
        let mtu = c.q.mtu() as u64;
        let chunk = crate::limits::read_chunk(c.res.cfg.rx_budget_bytes, mtu as usize);
        let mut to = to;
        loop {
            let w = &mut c.q.sq[idx];
            let from = w.read_done;
            let done = w.read_above.absorb(to).min(w.length);
            w.read_done = done;
            w.read_sent = w.read_sent.max(done);
            w.recharge(&mut c.res.read_outstanding);
            // Requests of this WQE answered in full by byte `x`.
            // (A READ of no bytes is one request, answered by its one
            // response.)
            let answered = |x: u64| if x >= w.length { w.length.div_ceil(chunk).max(1) } else { x / chunk };
            let ended = if w.length == 0 { 1 } else { answered(done) - answered(from) };
            for _ in 0..ended {
                c.req.read_or_atomic_done();
            }
            if done < w.length {
                self.psn = w.first_psn.add((done / mtu) as u32);
                break;
            }
            self.psn = w.last_psn.next();
            w.read_above.clear();
            w.done = Some(WcStatus::Success);
            let next = c.q.sq.get(idx + 1).filter(|n| {
                n.done.is_none()
                    && n.started
                    && matches!(n.wr.op, SendOp::Read { .. })
                    && n.read_above.starts_at(0)
            });
            if next.is_none() {
                break;
            }
            idx += 1;
            to = 0;
        }
        self.retire(c);
    }

    /// Selective recovery of READ responses. A READ response past a gap
    /// (a PSN after the oldest unacknowledged one, inside a READ WQE
    /// reached over READ WQEs only) is placed where its PSN says, and only
    /// the gap is asked for again (`ask_gap`), not everything after it: a
    /// responder answers a repeated request after what it was sending
    /// (rxe does), so going back N would cost the whole window per lost
    /// packet, and a lossy link would spend its time on replays. IBTA
    /// vol. 1 §9.7.5.2.4 leaves the requester free to ask for any part of
    /// a READ again; where the response's data goes follows from its PSN
    /// (§9.4.4: one PSN per response packet, each a full PMTU but the
    /// last). Returns false where this does not apply (the old rule then
    /// decides: a SEND, WRITE or atomic stands between, or the response
    /// carries no data).
    fn place_past_gap(
        &mut self,
        c: &mut Ctx<'_>,
        info: &'static OpcodeInfo,
        pkt: &RocePacketRepr<'_>,
    ) -> bool {
        let psn = pkt.bth.psn;
        let n = pkt.payload.len() as u64;
        if n == 0 {
            return false;
        }
        let mut found = None;
        for (i, w) in c.q.sq.iter().enumerate() {
            if w.done.is_some() {
                continue;
            }
            if !w.started || !matches!(w.wr.op, SendOp::Read { .. }) {
                return false;
            }
            if psn.in_window(w.first_psn, w.last_psn.distance(w.first_psn) as u32 + 1) {
                found = Some(i);
                break;
            }
        }
        let Some(idx) = found else { return false };
        let w = &c.q.sq[idx];
        let offset = psn.distance(w.first_psn) as u64 * c.q.mtu() as u64;
        if offset < w.read_done {
            return false;
        }
        if w.read_above.contains(offset) {
            c.res.counters.duplicate_response += 1;
            self.answering(c);
            return true;
        }
        if !Self::size_ok(c, idx, offset, n, info.position.ends_message()) {
            c.q.fail_front(WcStatus::BadRespErr);
            return true;
        }
        if !Self::place(c, idx, offset, pkt.payload) {
            return true;
        }
        c.q.sq[idx].read_above.insert(offset, offset + n);
        c.res.counters.read_placed_past_gap += 1;
        // New bytes: the responder is answering, and the retry count
        // measures timeouts without progress.
        self.retry_left = c.q.attr.retry_cnt;
        self.rearm(c);
        self.read_progress(c, !info.position.starts_message());
        self.ask_gap(c);
        true
    }

    /// Asks again for the gap at the oldest unacknowledged PSN, once, if
    /// bytes past it were placed (a response was lost): from there to the
    /// first byte placed past it, within the READ request the gap is in
    /// (a responder finds the request to repeat by PSN and serves a part
    /// of it, IBTA vol. 1 §9.7.5.1.2). Gaps are asked for one at a time,
    /// the lowest first, so no request asks for bytes before an earlier
    /// one of the same READ request: rxe serves a repeated request only if
    /// it starts at or after the last one it served for that request.
    fn ask_gap(&mut self, c: &mut Ctx<'_>) {
        if self.gap_asked.is_some_and(|(p, _)| p == self.psn) {
            return;
        }
        let Some(idx) = c.q.sq.iter().position(|w| w.done.is_none()) else { return };
        if c.q.sq.iter().skip(idx).all(|w| w.read_above.is_empty()) {
            return;
        }
        self.request_gap(c, idx);
    }

    /// Has the requester ask for the bytes of front WQE `idx` from its
    /// oldest missing one to the first placed past it (at most to the end
    /// of that READ request, and of what was asked for).
    fn request_gap(&mut self, c: &mut Ctx<'_>, idx: usize) -> bool {
        let w = &c.q.sq[idx];
        if !w.started || !matches!(w.wr.op, SendOp::Read { .. }) {
            return false;
        }
        let from = w.read_done;
        let request_end =
            read_request_end(c.res.cfg.rx_budget_bytes, c.q.mtu(), from, w.length).min(w.read_sent);
        let to = w.read_above.next_start(from).map_or(request_end, |u| u.min(request_end));
        if to <= from {
            return false;
        }
        let seq = c.q.sq_base + idx as u64;
        c.req.request_gap(GapRequest { seq, psn: self.psn, offset: from, len: to - from });
        self.gap_asked = Some((self.psn, to - from));
        true
    }

    fn on_atomic_ack(&mut self, c: &mut Ctx<'_>, psn: Psn, orig: u64) {
        if let Implied::Retry(at) = self.ack_before(c, psn) {
            self.gap_retry(c, at);
            return;
        }
        let pd = c.q.init.pd;
        let Some(idx) = c.q.sq.iter().position(|w| w.done.is_none()) else {
            c.res.counters.unexpected_response_dropped += 1;
            return;
        };
        let w = &c.q.sq[idx];
        if !w.started || !w.wr.op.is_atomic() || w.first_psn != psn {
            c.res.counters.unexpected_response_dropped += 1;
            return;
        }
        // The original value lands in the local buffer in host order, as an
        // RDMA NIC writes it to host memory.
        if c.res.mrs.scatter(&w.wr.sg_list, pd, 0, &orig.to_ne_bytes()).is_err() {
            c.q.fail_front(WcStatus::LocProtErr);
            return;
        }
        c.q.sq[idx].done = Some(WcStatus::Success);
        c.req.read_or_atomic_done();
        self.psn = psn.next();
        self.retire(c);
        self.progress(c);
    }
}
