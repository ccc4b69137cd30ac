//! Queue pairs: their state, work queues and the `modify_qp` state machine
//! (IBTA vol. 1 §10.3 and §11.2.4.2; the required/optional attribute table is
//! that of `ibv_modify_qp(3)`).

use std::collections::VecDeque;

use roce_wire::Psn;

use crate::time::Instant;
use crate::verbs::{
    AddressVector, AttrMask, PathMtu, QpAttr, QpInitAttr, QpState, QpType, RecvWr, SendWr, VerbsError,
    WcStatus,
};

/// Largest max_rd_atomic / max_dest_rd_atomic the device supports.
pub const MAX_RD_ATOMIC: u8 = 16;

/// Inline data copied at post time: small payloads (the latency case) live
/// in the WQE itself, larger ones on the heap.
#[derive(Debug)]
pub(crate) enum InlineData {
    Small { buf: [u8; InlineData::SMALL], len: u8 },
    Large(Vec<u8>),
}

impl InlineData {
    pub const SMALL: usize = 64;

    pub fn zeroed(len: usize) -> InlineData {
        if len <= Self::SMALL {
            InlineData::Small { buf: [0; Self::SMALL], len: len as u8 }
        } else {
            InlineData::Large(vec![0; len])
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            InlineData::Small { buf, len } => &mut buf[..usize::from(*len)],
            InlineData::Large(v) => v,
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            InlineData::Small { buf, len } => &buf[..usize::from(*len)],
            InlineData::Large(v) => v,
        }
    }
}

/// A posted send work request and its progress.
#[derive(Debug)]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    /// The data of an inline send, copied at post time.
    pub inline_data: Option<InlineData>,
    /// Message length in bytes.
    pub length: u64,
    pub signaled: bool,
    /// PSN of the first and last packet (valid once `sent` is set).
    pub first_psn: Psn,
    pub last_psn: Psn,
    /// The requester began sending it: its PSN range is assigned.
    pub started: bool,
    /// READ: bytes of response placed so far.
    pub read_done: u64,
    /// Final status once retired by the completer.
    pub done: Option<WcStatus>,
}

impl SendWqe {
    pub fn npkts(&self, mtu: usize) -> u32 {
        if self.wr.op.is_read_or_atomic() {
            1
        } else {
            self.length.div_ceil(mtu as u64).max(1) as u32
        }
    }
    /// Number of response PSNs a READ consumes.
    pub fn resp_pkts(&self, mtu: usize) -> u32 {
        if matches!(self.wr.op, crate::verbs::SendOp::Read { .. }) {
            self.length.div_ceil(mtu as u64).max(1) as u32
        } else {
            1
        }
    }
}

/// Requester progress (rxe_req.c's `qp->req`).
#[derive(Debug, Default)]
pub(crate) struct ReqState {
    /// Sequence number of the next WQE to send (see `Qp::sq_base`).
    pub next: u64,
    /// Bytes of that WQE already sent.
    pub offset: u64,
    /// Next PSN to assign.
    pub psn: Psn,
    /// One past the highest PSN ever sent (go-back-N moves `psn` back, not this).
    pub psn_hi: Psn,
    /// Packets sent since the last one that asked for an ACK.
    pub noack_pkts: u32,
    /// PSN of the last packet sent with AckReq.
    pub ackreq_psn: Option<Psn>,
    /// READ/atomic WQEs sent and not yet completed.
    pub rd_atomic_outstanding: u32,
    /// UD: the destination of the packet just produced.
    pub last_ud_dest: Option<crate::verbs::UdDest>,
}

/// A restart of transmission that a gap in the responses caused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GapRetry {
    /// Where transmission restarted.
    pub at: Psn,
    /// Responses from before the restart that may still arrive (one per
    /// PSN that was outstanding past `at`).
    pub stale: u32,
    /// When; a repeat is allowed after a fraction of the ACK timeout.
    pub when: Instant,
}

/// Completer progress (rxe_comp.c's `qp->comp`).
#[derive(Debug, Default)]
pub(crate) struct CompState {
    /// Oldest PSN not yet acknowledged.
    pub psn: Psn,
    pub retry_left: u8,
    pub rnr_retry_left: u8,
    /// Local ACK timeout deadline, while packets are outstanding.
    pub ack_deadline: Option<Instant>,
    /// While set, the requester waits (RNR back-off) until this time.
    pub rnr_until: Option<Instant>,
    /// The last restart a response gap caused (see `completer`).
    pub gap_retry: Option<GapRetry>,
}

/// A receive work request waiting for a message.
#[derive(Debug, Clone)]
pub(crate) struct RecvWqe {
    pub wr: RecvWr,
    pub length: u64,
}

/// What the responder is in the middle of.
#[derive(Debug, Clone)]
pub(crate) enum InMsg {
    /// A multi-packet SEND: the receive WQE it consumes and bytes placed.
    Send { wqe: RecvWqe, placed: u64 },
    /// A multi-packet RDMA WRITE: the region and bytes remaining.
    Write { rkey: u32, va: u64, remaining: u64, dma_len: u64 },
}

/// Saved state for replaying a duplicate READ or atomic (IBTA §9.7.5.1.2:
/// "responder resources"; never re-execute an atomic).
#[derive(Debug, Clone, Copy)]
pub(crate) enum RespResource {
    Read { first_psn: Psn, last_psn: Psn },
    Atomic { psn: Psn, orig: u64, msn: u32 },
}

/// A packet the responder owes the requester.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RespItem {
    /// ACK or NAK with this syndrome, for `psn`.
    Ack {
        psn: Psn,
        syndrome: roce_wire::Syndrome,
        msn: u32,
    },
    /// READ response packets still to send; `replay` for a duplicate request.
    Read {
        rkey: u32,
        va: u64,
        remaining: u64,
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
pub(crate) struct RespState {
    /// Expected PSN.
    pub epsn: Psn,
    /// Message sequence number: messages completed (24 bits).
    pub msn: u32,
    /// A NAK (sequence or RNR) was sent for `epsn`: drop further
    /// out-of-sequence packets silently until it arrives.
    pub nak_sent: bool,
    pub cur: Option<InMsg>,
    pub resources: VecDeque<RespResource>,
    pub outq: VecDeque<RespItem>,
    /// After sending the NAK at the head of `outq`, move the QP to ERR.
    pub error_after_nak: bool,
}

pub(crate) struct Qp {
    pub qpn: u32,
    pub init: QpInitAttr,
    pub state: QpState,
    pub attr: QpAttr,
    /// Send queue, oldest first; `sq_base` is the sequence number of its front.
    pub sq: VecDeque<SendWqe>,
    pub sq_base: u64,
    pub rq: VecDeque<RecvWqe>,
    pub req: ReqState,
    pub comp: CompState,
    pub resp: RespState,
    /// Present in the engine's ready list.
    pub scheduled: bool,
    /// Whose turn it is to transmit: the responder's (true) or the requester's.
    pub resp_turn: bool,
    /// Deadline registered in the engine's timer set.
    pub timer_key: Option<Instant>,
    /// UDP source port: flow entropy (Annex A17.4.2).
    pub udp_sport: u16,
}

impl Qp {
    pub fn new(qpn: u32, init: QpInitAttr, udp_sport: u16) -> Qp {
        Qp {
            qpn,
            init,
            state: QpState::Reset,
            attr: QpAttr::default(),
            sq: VecDeque::new(),
            sq_base: 0,
            rq: VecDeque::new(),
            req: ReqState::default(),
            comp: CompState::default(),
            resp: RespState::default(),
            scheduled: false,
            resp_turn: false,
            timer_key: None,
            udp_sport,
        }
    }

    pub fn mtu(&self) -> usize {
        match self.init.qp_type {
            QpType::Ud => PathMtu::Mtu4096.bytes(),
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
pub(crate) fn check_modify(qp: &Qp, attr: &QpAttr, mask: AttrMask) -> Result<QpState, VerbsError> {
    let cur = if mask.contains(M::CUR_STATE) { attr.cur_qp_state } else { qp.state };
    if cur != qp.state {
        return Err(VerbsError::Invalid("cur_qp_state does not match the QP's state"));
    }
    let to = if mask.contains(M::STATE) { attr.qp_state } else { qp.state };
    let (req, opt) = transition_masks(qp.init.qp_type, qp.state, to).ok_or(VerbsError::BadState(qp.state))?;
    let given = mask.minus(M::CUR_STATE);
    if !given.contains(req) {
        return Err(VerbsError::BadMask(req.minus(given).0));
    }
    // STATE may always be named: it is what selects the transition (also
    // SQD -> RTS and same-state modifies such as RTS -> RTS).
    let extra = given.minus(req).minus(opt).minus(M::STATE);
    if !extra.is_empty() {
        return Err(VerbsError::BadMask(extra.0));
    }
    if given.contains(M::MAX_QP_RD_ATOMIC) && attr.max_rd_atomic > MAX_RD_ATOMIC {
        return Err(VerbsError::Invalid("max_rd_atomic exceeds the device limit"));
    }
    if given.contains(M::MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic > MAX_RD_ATOMIC {
        return Err(VerbsError::Invalid("max_dest_rd_atomic exceeds the device limit"));
    }
    if given.contains(M::RETRY_CNT) && attr.retry_cnt > 7 {
        return Err(VerbsError::Invalid("retry_cnt is 3 bits"));
    }
    if given.contains(M::RNR_RETRY) && attr.rnr_retry > 7 {
        return Err(VerbsError::Invalid("rnr_retry is 3 bits"));
    }
    if given.contains(M::TIMEOUT) && attr.timeout > 31 {
        return Err(VerbsError::Invalid("timeout is 5 bits"));
    }
    if given.contains(M::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
        return Err(VerbsError::Invalid("min_rnr_timer is 5 bits"));
    }
    if given.contains(M::DEST_QPN) && attr.dest_qp_num > 0x00ff_ffff {
        return Err(VerbsError::Invalid("dest_qp_num is 24 bits"));
    }
    if given.contains(M::PORT) && attr.port_num != 1 {
        return Err(VerbsError::Invalid("the device has one port (1)"));
    }
    if given.contains(M::PKEY_INDEX) && attr.pkey_index != 0 {
        return Err(VerbsError::Invalid("the P_Key table has one entry (index 0)"));
    }
    Ok(to)
}

/// Copies the attributes named in `mask` into the QP.
pub(crate) fn apply_attrs(qp: &mut Qp, attr: &QpAttr, mask: AttrMask) {
    let a = &mut qp.attr;
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
        qp.resp.epsn = attr.rq_psn;
    }
    if mask.contains(M::SQ_PSN) {
        a.sq_psn = attr.sq_psn;
        qp.req.psn = attr.sq_psn;
        qp.req.psn_hi = attr.sq_psn;
        qp.comp.psn = attr.sq_psn;
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
        qp.comp.retry_left = attr.retry_cnt;
    }
    if mask.contains(M::RNR_RETRY) {
        a.rnr_retry = attr.rnr_retry;
        qp.comp.rnr_retry_left = attr.rnr_retry;
    }
    if mask.contains(M::PKEY_INDEX) {
        a.pkey_index = attr.pkey_index;
    }
    if mask.contains(M::PORT) {
        a.port_num = attr.port_num;
    }
}
