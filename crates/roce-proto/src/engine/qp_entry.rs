//! A QP as the engine holds it: the shared core, the three roles, its
//! place in the ready list and the timer set, its keys and its rate.

use super::*;

/// A QP's send rate under congestion control: the reaction point and the
/// pacer that spaces its requests at the reaction point's rate.
#[derive(Debug)]
pub(super) struct QpRate {
    pub(super) dcqcn: Dcqcn,
    pub(super) pacer: Pacer,
    /// Cuts already added to the device's `cc_rate_cuts`.
    pub(super) counted_cuts: u64,
}

impl QpRate {
    /// After any event: the cuts it made go to the device's counter (a
    /// periodic reaction cuts on a timer, not on the CNP) and the
    /// controller's next timer to the QP's table.
    pub(super) fn settle(&mut self, res: &mut Res, timers: &mut crate::timers::Timers) {
        let cuts = self.dcqcn.rate_cuts();
        res.counters.cc_rate_cuts += cuts - self.counted_cuts;
        self.counted_cuts = cuts;
        timers.set(TimerKind::Cc, self.dcqcn.next_timer());
    }
}

/// A QP: its shared core and its three roles, each owning its own state.
pub(super) struct QpEntry {
    pub(super) core: QpCore,
    pub(super) req: Requester,
    pub(super) comp: Completer,
    pub(super) resp: Responder,
    /// Present in the engine's ready list.
    pub(super) scheduled: bool,
    /// Whose turn it is to transmit: the responder's (true) or the requester's.
    pub(super) resp_turn: bool,
    /// Deadline registered in the engine's timer set.
    pub(super) timer_key: Option<Instant>,
    /// Keys of a protected QP (`Engine::set_qp_keys`).
    pub(super) crypto: Option<Box<QpCrypto>>,
    /// Congestion control of the requests (DCQCN and its pacer), made
    /// when the QP first sends under an engine with `cc` set.
    pub(super) rate: Option<Box<QpRate>>,
    /// A CE mark asked for a CNP that has not left yet.
    pub(super) cnp_due: bool,
    /// The notification point's spacing of CNPs, made at the first CE mark.
    pub(super) np: Option<NotificationPoint>,
    /// Request to response times: how long the completer waits for a
    /// stalled READ's tail (DCQCN does not use them; `qp_rate` reports
    /// them).
    pub(super) rtt: RttProbe,
    /// This QP's share of the device's `Res::tx_unacked`.
    pub(super) tx_charged: u64,
}

impl QpEntry {
    pub(super) fn new(core: QpCore) -> QpEntry {
        QpEntry {
            core,
            req: Requester::default(),
            comp: Completer::default(),
            resp: Responder::default(),
            scheduled: false,
            resp_turn: false,
            timer_key: None,
            crypto: None,
            rate: None,
            cnp_due: false,
            np: None,
            rtt: RttProbe::new(),
            tx_charged: 0,
        }
    }

    /// A CNP from the peer: the reaction point cuts the rate.
    pub(super) fn on_cnp(&mut self, res: &mut Res, now: Instant) {
        if let Some(r) = &mut self.rate {
            r.dcqcn.on_cnp(now);
            r.settle(res, &mut self.core.timers);
        }
    }

    /// The congestion controller's timers at `now`.
    pub(super) fn on_cc_timer(&mut self, res: &mut Res, now: Instant) {
        if let Some(r) = &mut self.rate {
            r.dcqcn.on_timer(now);
            r.settle(res, &mut self.core.timers);
        }
    }

    /// A CE-marked packet of this QP arrived: queue a CNP to the peer's QP
    /// unless one was queued within `min_interval`. UD QPs have no single
    /// peer and are not answered.
    pub(super) fn mark_congested(&mut self, cfg: &EngineConfig, now: Instant) {
        if !matches!(self.core.init.qp_type, QpType::Rc | QpType::Uc) || self.core.state == QpState::Err {
            return;
        }
        if self.cnp_due {
            return;
        }
        let np = self.np.get_or_insert_with(|| NotificationPoint::new(cfg.cnp.min_interval));
        self.cnp_due = np.should_send_cnp(now);
    }

    /// The CNP (Annex A17.9.3): BTH opcode 0x81 to the peer's QP, BECN
    /// set, PSN 0, then 16 reserved bytes and the ICRC.
    pub(super) fn emit_cnp(&mut self, res: &mut Res, buf: &mut [u8]) -> Option<usize> {
        self.cnp_due = false;
        let repr = RocePacketRepr {
            bth: BthRepr {
                opcode: roce_wire::opcode::CNP,
                solicited: false,
                mig_req: false,
                pkey: res.cfg.pkey,
                fecn: false,
                becn: true,
                dest_qp: self.core.attr.dest_qp_num,
                ack_req: false,
                psn: Psn::new(0),
            },
            ext: ExtHeaders::default(),
            payload: &[],
        };
        let n = repr.buffer_len().ok()?;
        repr.emit(buf.get_mut(..n)?).ok()?;
        res.counters.cnp_sent += 1;
        Some(n)
    }

    /// Back to RESET: queues emptied without completions, every role's
    /// state cleared.
    pub(super) fn reset(&mut self) {
        let (qpn, init, sport) = (self.core.qpn, self.core.init, self.core.udp_sport);
        let (scheduled, timer_key) = (self.scheduled, self.timer_key);
        *self = QpEntry::new(QpCore::new(qpn, init, sport));
        self.scheduled = scheduled;
        self.timer_key = timer_key;
    }

    /// The one way into the error state (IBTA vol. 1 §10.3.1: every
    /// outstanding WQE completes with WR_FLUSH_ERR, the one that failed with
    /// its own status): the state and the event a role raised with the
    /// error, if any (`QpCore::set_error_state`), the timers
    /// stopped, the roles' work dropped, both queues flushed.
    pub(super) fn enter_error(&mut self, res: &mut Res) {
        self.core.set_error_state(res);
        self.resp.abort(&mut self.core, res);
        self.core.flush_send(res);
        self.core.flush_recv(res);
        self.req.abort(&self.core);
        self.recharge_tx(res);
    }

    /// Brings this QP's share of the device's unacknowledged request
    /// bytes (`Res::tx_unacked`) up to date: its unacknowledged PSNs times
    /// the path MTU while it is a live RC QP, else nothing. Only kept
    /// under `EngineConfig::tx_budget_bytes`.
    pub(super) fn recharge_tx(&mut self, res: &mut Res) {
        if res.cfg.tx_budget_bytes.is_none() {
            return;
        }
        let live = self.core.init.qp_type == QpType::Rc && self.core.state != QpState::Err;
        let now = if live {
            self.req.psn_hi().distance(self.comp.psn()).max(0) as u64 * self.core.mtu() as u64
        } else {
            0
        };
        res.tx_unacked = res.tx_unacked.saturating_sub(self.tx_charged) + now;
        self.tx_charged = now;
    }

    /// Gives back this QP's shares of the device's budgets (a reset or a
    /// destroyed QP).
    pub(super) fn release_budgets(&mut self, res: &mut Res) {
        self.core.release_reads(res);
        self.req.take_tx_ticket(res);
        res.tx_unacked = res.tx_unacked.saturating_sub(self.tx_charged);
        self.tx_charged = 0;
    }

    /// After a role ran: if it raised an error, end the QP now.
    pub(super) fn settle(&mut self, res: &mut Res) {
        if self.core.take_error() {
            self.enter_error(res);
        }
    }

    /// In SQD, raise `SqDrained` once nothing is outstanding.
    pub(super) fn check_drained(&mut self, res: &mut Res) {
        if self.core.state == QpState::Sqd
            && self.comp.psn() == self.req.psn()
            && self.req.at_message_boundary()
        {
            res.events.push_back(AsyncEvent::SqDrained(self.core.qpn));
        }
    }

    /// The next packet of this QP, alternating between a request and a
    /// response so that neither direction starves the other; a request goes
    /// first so that a reply the application just posted leaves before the
    /// ACK of the message it answers.
    /// After a packet: true when the QP's next turn could send nothing
    /// before its pacer allows (no CNP and no response waiting; every
    /// request is paced). Its pacing timer is then armed, and brings it
    /// back to the ready list, instead of a turn that finds it paced: a
    /// driver's `has_transmit` then means a packet can go now.
    pub(super) fn paced_out(&mut self, now: Instant) -> bool {
        !self.cnp_due && !self.resp.has_output() && self.pacer_holds(now)
    }

    /// Whether the QP's pacer holds its next request at `now`; if so, the
    /// pacing timer is armed for its turn and brings the QP back.
    pub(super) fn pacer_holds(&mut self, now: Instant) -> bool {
        match &self.rate {
            Some(rate) if !rate.pacer.ready(now) => {
                self.core.timers.set(TimerKind::Pace, Some(rate.pacer.next_send()));
                true
            }
            _ => false,
        }
    }

    pub(super) fn produce(&mut self, res: &mut Res, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if self.cnp_due {
            if let Some(n) = self.emit_cnp(res, buf) {
                return Some(n);
            }
        }
        let len = if self.resp_turn {
            self.respond(res, buf).or_else(|| self.request(res, now, buf))
        } else {
            self.request(res, now, buf).or_else(|| self.respond(res, buf))
        };
        self.resp_turn = !self.resp_turn;
        len
    }

    pub(super) fn request(&mut self, res: &mut Res, now: Instant, buf: &mut [u8]) -> Option<usize> {
        // Room set aside for this QP when it was woken: it sends with it,
        // or gives back what it cannot use (the engine then wakes the next
        // waiter).
        let ticket = self.req.has_tx_ticket();
        if let (Some(p), QpType::Rc | QpType::Uc) = (res.cfg.cc.dcqcn(), self.core.init.qp_type) {
            self.rate.get_or_insert_with(|| {
                Box::new(QpRate {
                    dcqcn: Dcqcn::new(p.clone(), res.cfg.line_rate_bps, now),
                    pacer: Pacer::new(),
                    counted_cuts: 0,
                })
            });
            if self.pacer_holds(now) {
                self.req.take_tx_ticket(res);
                return None;
            }
        }
        if let Some(cap) = res.cfg.tx_budget_bytes {
            // The cap bounds new PSNs. A retransmission (after a timeout or
            // a sequence NAK rewound the requester) resends PSNs already
            // charged, and must go: held back, the QP would spend its
            // retries without sending and fail with RETRY_EXC_ERR while
            // every QP waits for ACKs that only the resends can bring.
            //
            // The cap holds for every QP, also one with nothing
            // unacknowledged: with thousands of QPs, one packet each is
            // already more than a receive buffer holds, and a queue that
            // long outlasts the ACK timeout. Every wait ends: the packet
            // that brought the device to the cap asked for an ACK
            // (`Requester::poll_transmit`), and its ACK frees room.
            //
            // First come first served: room set aside for woken QPs is not
            // this QP's, and while QPs wait, one that was not woken queues
            // behind them (if it has something new to send: a QP that
            // waits for nothing would only pass its room on).
            let resending = self.req.psn().is_before(self.req.psn_hi()) || self.req.gap_request_pending();
            let full = res.tx_unacked + res.tx_reserved >= cap;
            if !resending && !ticket && (full || !res.tx_waiters.is_empty()) {
                if self.req.has_unsent(&self.core) && self.req.wait_for_tx_budget(res, self.core.qpn) {
                    res.counters.tx_budget_waits += 1;
                }
                return None;
            }
        }
        let psn_hi = self.req.psn_hi();
        let r = self.req.poll_transmit(&mut self.core, res, now, self.comp.psn(), buf);
        self.recharge_tx(res);
        let sent = matches!(r, Ok(Some(_)));
        if ticket {
            if !sent {
                self.req.take_tx_ticket(res);
            } else if self.req.psn_hi() != psn_hi {
                // New PSNs (not a resend): charged to the ticket.
                let new = self.req.psn_hi().distance(psn_hi).max(0) as u64;
                self.req.spend_tx_ticket(res, new * self.core.mtu() as u64);
            }
        }
        if r.is_err() {
            self.settle(res);
            return None;
        }
        let len = r.ok().flatten()?;
        if let Some(rate) = &mut self.rate {
            // What the packet will cost on the wire, sealed if the QP is
            // protected (`finish` seals it after this).
            let seal = if self.crypto.is_some() { crate::crypto::OVERHEAD } else { 0 };
            let wire = (len + seal) as u64 + limits::wire_overhead(self.core.av().dgid);
            // A turn missed by at most `pacing_slack` is caught up (the
            // pacer was ready, so its turn is not after `now`).
            let floor = Instant(now.as_nanos().saturating_sub(res.cfg.pacing_slack.as_nanos()));
            rate.pacer.on_send(floor, wire, rate.dcqcn.rate_bps());
            rate.dcqcn.on_bytes_sent(wire, now);
            rate.settle(res, &mut self.core.timers);
        }
        if self.core.init.qp_type == QpType::Rc {
            let bth = roce_wire::bth::Bth::new_unchecked(&buf[..len]);
            self.rtt.on_sent(bth.psn(), bth.ack_req(), now);
        }
        if self.core.init.qp_type != QpType::Rc {
            self.comp.unreliable_sent(&self.req);
        }
        Some(len)
    }

    pub(super) fn respond(&mut self, res: &mut Res, buf: &mut [u8]) -> Option<usize> {
        let len = self.resp.poll_transmit(&mut self.core, res, buf);
        self.settle(res);
        len
    }
}

/// Puts a QP on the ready list (once).
#[inline]
pub(super) fn schedule(ready: &mut VecDeque<u32>, qp: &mut QpEntry) {
    if !qp.scheduled {
        qp.scheduled = true;
        ready.push_back(qp.core.qpn);
    }
}

/// Keeps the engine's timer set in step with the QP's earliest deadline.
#[inline]
pub(super) fn sync_timer(timers: &mut BTreeSet<(Instant, u32)>, qp: &mut QpEntry) {
    let want = qp.core.timers.earliest();
    if want != qp.timer_key {
        if let Some(old) = qp.timer_key {
            timers.remove(&(old, qp.core.qpn));
        }
        if let Some(new) = want {
            timers.insert((new, qp.core.qpn));
        }
        qp.timer_key = want;
    }
}
