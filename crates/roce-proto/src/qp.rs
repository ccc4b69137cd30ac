//! What a queue pair's roles share (IBTA vol. 1 §10.3, §11.2.4.2): its
//! identity, state and attributes, the send and receive queues, its timers;
//! the error state with its flushes; and the `modify_qp` state machine (the
//! required/optional attribute table is that of `ibv_modify_qp(3)`).
//!
//! The requester, completer and responder keep their own progress in their
//! own modules and reach the QP through `QpCore`.

use std::collections::VecDeque;

use crate::datagram::DatagramMeta;
use crate::limits::{self, MAX_RD_ATOMIC};
use crate::res::Res;
use crate::timers::Timers;
use crate::verbs::{
    AddressVector, AsyncEvent, AttrMask, Invalid, QpAttr, QpInitAttr, QpState, QpType, VerbsError, Wc,
    WcOpcode, WcStatus,
};
use crate::wqe::{RecvWqe, SendWqe};

/// The shared part of a QP.
/// What `QpCore::peer_check` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerCheck {
    Pass,
    WrongAddress,
    WrongPort,
}

pub(crate) struct QpCore {
    pub qpn: u32,
    pub init: QpInitAttr,
    pub state: QpState,
    pub attr: QpAttr,
    /// Send queue, oldest first; `sq_base` is the sequence number of its front.
    pub sq: VecDeque<SendWqe>,
    pub sq_base: u64,
    pub rq: VecDeque<RecvWqe>,
    pub timers: Timers,
    /// UDP source port: flow entropy (Annex A17.4.2).
    pub udp_sport: u16,
    /// The UDP source port the connected peer sends from, learnt from its
    /// first packet (see `peer_check`).
    peer_sport: Option<u16>,
    /// A role met an error that ends the QP: the engine moves it to ERR as
    /// soon as the role returns (`Engine::settle`), in one place.
    error_pending: bool,
    /// The event the pending error raises, if a completion cannot report it.
    error_event: Option<AsyncEvent>,
}

impl QpCore {
    pub fn new(qpn: u32, init: QpInitAttr, udp_sport: u16) -> QpCore {
        QpCore {
            qpn,
            init,
            state: QpState::Reset,
            attr: QpAttr::default(),
            sq: VecDeque::new(),
            sq_base: 0,
            rq: VecDeque::new(),
            timers: Timers::default(),
            udp_sport,
            peer_sport: None,
            error_pending: false,
            error_event: None,
        }
    }

    /// Whether a packet may come from this QP's peer. A connected (RC or
    /// UC) QP, once past INIT, takes requests, responses and CNPs only from
    /// the address its address vector names (IBTA vol. 1 §9.6.1.1: a
    /// connected QP is bound to one remote QP; RoCEv2 names it by IP). With
    /// `pin_port` it also holds the peer to the UDP source port of its first
    /// packet: Annex A17.4.2 has a QP's flow keep one source port, and rxe
    /// and this engine do, but nothing in the connection tells the port, so
    /// it is learnt. UD QPs and QPs not yet connected pass (their roles
    /// decide).
    pub fn peer_check(&mut self, meta: &DatagramMeta, pin_port: bool) -> PeerCheck {
        let connected = matches!(self.init.qp_type, QpType::Rc | QpType::Uc)
            && !matches!(self.state, QpState::Reset | QpState::Init);
        if !connected {
            return PeerCheck::Pass;
        }
        if meta.src != self.attr.av.dgid {
            return PeerCheck::WrongAddress;
        }
        if pin_port {
            match self.peer_sport {
                None => self.peer_sport = Some(meta.src_port),
                Some(p) if p != meta.src_port => return PeerCheck::WrongPort,
                Some(_) => {}
            }
        }
        PeerCheck::Pass
    }

    /// Forgets the peer's source port (a new address vector: a new peer).
    pub fn forget_peer_port(&mut self) {
        self.peer_sport = None;
    }

    pub fn mtu(&self) -> usize {
        match self.init.qp_type {
            QpType::Ud => limits::UD_MTU,
            _ => self.attr.path_mtu.bytes(),
        }
    }

    pub fn av(&self) -> &AddressVector {
        &self.attr.av
    }

    /// The WQE with sequence number `seq`.
    pub fn wqe(&self, seq: u64) -> Option<&SendWqe> {
        seq.checked_sub(self.sq_base).and_then(|i| self.sq.get(i as usize))
    }

    pub fn wqe_mut(&mut self, seq: u64) -> Option<&mut SendWqe> {
        seq.checked_sub(self.sq_base).and_then(|i| self.sq.get_mut(i as usize))
    }

    /// True when the QP may transmit requests.
    pub fn can_send(&self) -> bool {
        self.state == QpState::Rts
    }

    /// True when the QP accepts incoming requests.
    pub fn can_receive(&self) -> bool {
        matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe)
    }

    /// Takes the next receive WQE (from the QP's SRQ if it has one).
    pub fn take_recv(&mut self, res: &mut Res) -> Option<RecvWqe> {
        match self.init.srq {
            None => self.rq.pop_front(),
            Some(id) => {
                let srq = res.srqs.get_mut(&id.0)?;
                let w = srq.wqes.pop_front();
                if srq.limit > 0 && (srq.wqes.len() as u32) < srq.limit {
                    srq.limit = 0;
                    res.events.push_back(AsyncEvent::SrqLimitReached(id));
                }
                w
            }
        }
    }

    /// Puts back a receive WQE taken for a message that was abandoned.
    pub fn untake_recv(&mut self, res: &mut Res, w: RecvWqe) {
        match self.init.srq {
            None => self.rq.push_front(w),
            Some(id) => {
                if let Some(srq) = res.srqs.get_mut(&id.0) {
                    srq.wqes.push_front(w)
                }
            }
        }
    }

    /// Whether a receive WQE is waiting (in the RQ or the SRQ).
    pub fn has_recv(&self, res: &Res) -> bool {
        match self.init.srq {
            None => !self.rq.is_empty(),
            Some(s) => res.srqs.get(&s.0).is_some_and(|s| !s.wqes.is_empty()),
        }
    }

    /// Pops finished WQEs off the front of the SQ, raising completions:
    /// always for errors, for successes only if signalled (IBTA §10.7.2.1).
    pub fn retire(&mut self, res: &mut Res) {
        while let Some(w) = self.sq.front() {
            let Some(status) = w.done else { break };
            let mut w = self.sq.pop_front().expect("front exists");
            w.release(&mut res.read_outstanding);
            self.sq_base += 1;
            if status != WcStatus::Success {
                res.counters.send_err += 1;
            }
            if w.signaled || status != WcStatus::Success {
                let mut wc = Wc::new(w.wr.wr_id, status, w.wr.op.wc_opcode(), self.qpn);
                if status == WcStatus::Success {
                    wc.byte_len = w.length as u32;
                }
                res.complete(self.init.send_cq, wc);
            }
        }
    }

    /// Gives back the device's outstanding READ bytes of every send WQE
    /// (before the send queue is dropped without retiring: a reset or a
    /// destroyed QP).
    pub fn release_reads(&mut self, res: &mut Res) {
        for w in self.sq.iter_mut() {
            w.release(&mut res.read_outstanding);
        }
    }

    /// A role met an error that ends the QP (retry exhaustion, a fatal NAK,
    /// a local protection error) and that a completion reports (the failed
    /// WQE's status, the rest flushed): no async event (IBTA vol. 1
    /// 10.10.2.3, errors are reported through completions where they can
    /// be). The engine moves the QP to ERR when the role returns.
    pub fn raise_error(&mut self) {
        self.error_pending = true;
    }

    /// An error that ends the QP and that no completion can report (a
    /// responder's invalid or protection-violating request: no receive WQE
    /// carries it), so the affiliated asynchronous event `event` reports
    /// it (IBTA vol. 1 11.6.3.1).
    pub fn raise_error_event(&mut self, event: AsyncEvent) {
        self.error_pending = true;
        self.error_event.get_or_insert(event);
    }

    /// Completes the oldest unfinished send WQE with `status` and ends the
    /// QP (`raise_error`).
    pub fn fail_front(&mut self, status: WcStatus) {
        if let Some(w) = self.sq.iter_mut().find(|w| w.done.is_none()) {
            w.done = Some(status);
        }
        self.raise_error();
    }

    /// Takes the pending error, if a role raised one.
    pub fn take_error(&mut self) -> bool {
        std::mem::take(&mut self.error_pending)
    }

    /// Moves to ERR and stops the timers; the engine then has the roles
    /// drop their work and flushes the queues. The asynchronous event a
    /// role raised with the error (`raise_error_event`) goes out once; an
    /// error a completion reports, or the consumer's own move to ERR (a
    /// flush, as UCX does at every teardown), raises none: "local work
    /// queue catastrophic error" (`QpFatal`) is for what cannot be
    /// reported otherwise.
    pub fn set_error_state(&mut self, res: &mut Res) {
        if self.state != QpState::Err {
            self.state = QpState::Err;
            if let Some(ev) = self.error_event.take() {
                res.events.push_back(ev);
            }
        }
        self.error_event = None;
        self.timers.clear_all();
    }

    /// Completes every unfinished send WQE with WR_FLUSH_ERR (a WQE that
    /// failed keeps its own status) and retires them.
    pub fn flush_send(&mut self, res: &mut Res) {
        for w in self.sq.iter_mut() {
            if w.done.is_none() {
                w.done = Some(WcStatus::WrFlushErr);
            }
        }
        self.retire(res);
    }

    /// Completes every receive WQE of the QP's own RQ with WR_FLUSH_ERR (an
    /// SRQ is shared and keeps its WQEs).
    pub fn flush_recv(&mut self, res: &mut Res) {
        while let Some(w) = self.rq.pop_front() {
            self.flush_one_recv(res, w);
        }
    }

    /// Completes one receive WQE with WR_FLUSH_ERR.
    pub fn flush_one_recv(&mut self, res: &mut Res, w: RecvWqe) {
        let wc = Wc::new(w.wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, self.qpn);
        res.complete(self.init.recv_cq, wc);
    }
}

use AttrMask as M;

/// Required and optional attributes of a transition (ibv_modify_qp(3)).
fn transition_masks(t: QpType, from: QpState, to: QpState) -> Option<(AttrMask, AttrMask)> {
    use QpState::*;
    let none = AttrMask(0);
    let s = M::STATE;
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (s, none),
        (Reset, Init) => match t {
            QpType::Ud => (s | M::PKEY_INDEX | M::PORT | M::QKEY, none),
            _ => (s | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, none),
        },
        (Init, Init) => match t {
            QpType::Ud => (none, M::PKEY_INDEX | M::PORT | M::QKEY),
            _ => (none, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
        },
        (Init, Rtr) => match t {
            QpType::Ud => (s, M::PKEY_INDEX | M::QKEY),
            QpType::Uc => (
                s | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
                M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
            ),
            QpType::Rc => (
                s | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER,
                M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
            ),
        },
        (Rtr, Rts) => match t {
            QpType::Ud => (s | M::SQ_PSN, M::CUR_STATE | M::QKEY),
            QpType::Uc => (s | M::SQ_PSN, M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE),
            QpType::Rc => (
                s | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
                M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::PATH_MIG_STATE,
            ),
        },
        (Rts, Rts) | (Sqd, Rts) => match t {
            QpType::Ud => (none, M::CUR_STATE | M::QKEY),
            QpType::Uc => (none, M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE),
            QpType::Rc => {
                (none, M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE | M::MIN_RNR_TIMER)
            }
        },
        (Rts, Sqd) => (s, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => match t {
            QpType::Ud => (none, M::PKEY_INDEX | M::QKEY),
            _ => (
                none,
                M::AV
                    | M::PATH_MTU
                    | M::TIMEOUT
                    | M::RETRY_CNT
                    | M::RNR_RETRY
                    | M::MAX_QP_RD_ATOMIC
                    | M::MAX_DEST_RD_ATOMIC
                    | M::ALT_PATH
                    | M::ACCESS_FLAGS
                    | M::PKEY_INDEX
                    | M::MIN_RNR_TIMER
                    | M::PATH_MIG_STATE,
            ),
        },
        (Sqe, Rts) if t != QpType::Rc => (s, M::CUR_STATE | M::QKEY),
        _ => return None,
    })
}

/// Validates a modify request against the transition table and value ranges.
/// Returns the target state.
pub(crate) fn check_modify(qp: &QpCore, attr: &QpAttr, mask: AttrMask) -> Result<QpState, VerbsError> {
    let cur = if mask.contains(M::CUR_STATE) { attr.cur_qp_state } else { qp.state };
    if cur != qp.state {
        return Err(Invalid::CurState { given: cur, actual: qp.state }.into());
    }
    let to = if mask.contains(M::STATE) { attr.qp_state } else { qp.state };
    let (req, opt) = transition_masks(qp.init.qp_type, qp.state, to).ok_or(VerbsError::BadState(qp.state))?;
    let given = mask.minus(M::CUR_STATE);
    if !given.contains(req) {
        return Err(VerbsError::MissingAttrs(req.minus(given)));
    }
    // STATE may always be named: it is what selects the transition (also
    // SQD -> RTS and same-state modifies such as RTS -> RTS).
    let extra = given.minus(req).minus(opt).minus(M::STATE);
    if !extra.is_empty() {
        return Err(VerbsError::UnexpectedAttrs(extra));
    }
    if given.contains(M::MAX_QP_RD_ATOMIC) && attr.max_rd_atomic > MAX_RD_ATOMIC {
        return Err(Invalid::MaxRdAtomic(attr.max_rd_atomic).into());
    }
    if given.contains(M::MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic > MAX_RD_ATOMIC {
        return Err(Invalid::MaxDestRdAtomic(attr.max_dest_rd_atomic).into());
    }
    if given.contains(M::RETRY_CNT) && attr.retry_cnt > 7 {
        return Err(Invalid::RetryCnt(attr.retry_cnt).into());
    }
    if given.contains(M::RNR_RETRY) && attr.rnr_retry > 7 {
        return Err(Invalid::RnrRetry(attr.rnr_retry).into());
    }
    if given.contains(M::TIMEOUT) && attr.timeout > 31 {
        return Err(Invalid::Timeout(attr.timeout).into());
    }
    if given.contains(M::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
        return Err(Invalid::MinRnrTimer(attr.min_rnr_timer).into());
    }
    if given.contains(M::DEST_QPN) && attr.dest_qp_num > 0x00ff_ffff {
        return Err(Invalid::DestQpn(attr.dest_qp_num).into());
    }
    if given.contains(M::PORT) && attr.port_num != 1 {
        return Err(Invalid::Port(attr.port_num).into());
    }
    if given.contains(M::PKEY_INDEX) && attr.pkey_index != 0 {
        return Err(Invalid::PkeyIndex(attr.pkey_index).into());
    }
    Ok(to)
}

/// Copies the attributes named in `mask` into the QP's attributes. What the
/// roles derive from them (starting PSNs, retry counts) the engine hands to
/// each role.
pub(crate) fn apply_attrs(q: &mut QpCore, attr: &QpAttr, mask: AttrMask) {
    let a = &mut q.attr;
    if mask.contains(M::ACCESS_FLAGS) {
        a.qp_access_flags = attr.qp_access_flags;
    }
    if mask.contains(M::QKEY) {
        a.qkey = attr.qkey;
    }
    if mask.contains(M::AV) {
        a.av = attr.av;
    }
    if mask.contains(M::PATH_MTU) {
        a.path_mtu = attr.path_mtu;
    }
    if mask.contains(M::DEST_QPN) {
        a.dest_qp_num = attr.dest_qp_num;
    }
    if mask.contains(M::RQ_PSN) {
        a.rq_psn = attr.rq_psn;
    }
    if mask.contains(M::SQ_PSN) {
        a.sq_psn = attr.sq_psn;
    }
    if mask.contains(M::MAX_DEST_RD_ATOMIC) {
        a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
    }
    if mask.contains(M::MAX_QP_RD_ATOMIC) {
        a.max_rd_atomic = attr.max_rd_atomic;
    }
    if mask.contains(M::MIN_RNR_TIMER) {
        a.min_rnr_timer = attr.min_rnr_timer;
    }
    if mask.contains(M::TIMEOUT) {
        a.timeout = attr.timeout;
    }
    if mask.contains(M::RETRY_CNT) {
        a.retry_cnt = attr.retry_cnt;
    }
    if mask.contains(M::RNR_RETRY) {
        a.rnr_retry = attr.rnr_retry;
    }
    if mask.contains(M::PKEY_INDEX) {
        a.pkey_index = attr.pkey_index;
    }
    if mask.contains(M::PORT) {
        a.port_num = attr.port_num;
    }
}
