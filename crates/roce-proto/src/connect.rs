//! The usual way a connected QP is brought up: RESET -> INIT -> RTR -> RTS
//! with exactly the attributes ibv_modify_qp(3) requires at each step (what
//! every ibverbs application and rdma_cm do by hand).

use roce_wire::Psn;

use crate::engine::Engine;
use crate::verbs::{
    Access, AddressVector, AttrMask as M, Invalid, Object, PathMtu, QpAttr, QpState, QpType, VerbsError,
};

/// What an RC or UC QP needs to reach RTS towards a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectAttr {
    pub access: Access,
    pub av: AddressVector,
    pub mtu: PathMtu,
    pub dest_qpn: u32,
    /// The peer's first send PSN (our expected receive PSN).
    pub rq_psn: Psn,
    /// Our first send PSN.
    pub sq_psn: Psn,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub max_rd_atomic: u8,
}

impl ConnectAttr {
    /// Defaults of a typical RC application (rc_pingpong's and perftest's):
    /// full access, MTU 1024, timeout 14 (~67 ms), 7 retries, infinite RNR
    /// retries, min RNR timer 12 (0.64 ms), 16 outstanding READs/atomics.
    pub fn new(av: AddressVector, dest_qpn: u32, rq_psn: Psn, sq_psn: Psn) -> ConnectAttr {
        ConnectAttr {
            access: Access::ALL,
            av,
            mtu: PathMtu::Mtu1024,
            dest_qpn,
            rq_psn,
            sq_psn,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
        }
    }
}

impl Engine {
    /// Moves a QP in RESET to RTS towards its peer, three `modify_qp` calls.
    /// UC QPs take only the attributes UC has.
    pub fn connect_qp(&mut self, qpn: u32, c: &ConnectAttr) -> Result<(), VerbsError> {
        let rc = match self.qp_type(qpn).ok_or(VerbsError::NotFound(Object::Qp))? {
            QpType::Rc => true,
            QpType::Uc => false,
            QpType::Ud => return Err(Invalid::UdNotConnected.into()),
        };
        let mut a = QpAttr { qp_state: QpState::Init, qp_access_flags: c.access, ..QpAttr::default() };
        self.modify_qp(qpn, &a, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)?;
        a.qp_state = QpState::Rtr;
        a.av = c.av;
        a.path_mtu = c.mtu;
        a.dest_qp_num = c.dest_qpn;
        a.rq_psn = c.rq_psn;
        a.max_dest_rd_atomic = c.max_dest_rd_atomic;
        a.min_rnr_timer = c.min_rnr_timer;
        let mut m = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
        if rc {
            m = m | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
        }
        self.modify_qp(qpn, &a, m)?;
        a.qp_state = QpState::Rts;
        a.sq_psn = c.sq_psn;
        a.timeout = c.timeout;
        a.retry_cnt = c.retry_cnt;
        a.rnr_retry = c.rnr_retry;
        a.max_rd_atomic = c.max_rd_atomic;
        let mut m = M::STATE | M::SQ_PSN;
        if rc {
            m = m | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
        }
        self.modify_qp(qpn, &a, m)
    }

    /// Moves a UD QP in RESET to RTS, three `modify_qp` calls: INIT with
    /// its Q_Key (and P_Key index 0, port 1), RTR, RTS sending from
    /// `sq_psn`. UD QPs have no peer: each send names its destination.
    /// An RC or UC QP is refused at the first step (Q_Key is not one of
    /// its attributes): `VerbsError::UnexpectedAttrs`.
    pub fn ready_ud(&mut self, qpn: u32, qkey: u32, sq_psn: Psn) -> Result<(), VerbsError> {
        let mut a = QpAttr { qp_state: QpState::Init, qkey, ..QpAttr::default() };
        self.modify_qp(qpn, &a, M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY)?;
        a.qp_state = QpState::Rtr;
        self.modify_qp(qpn, &a, M::STATE)?;
        a.qp_state = QpState::Rts;
        a.sq_psn = sq_psn;
        self.modify_qp(qpn, &a, M::STATE | M::SQ_PSN)
    }
}
