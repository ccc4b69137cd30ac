//! The verbs vocabulary: access flags, QP types and states, attributes, work
//! requests and completions, with the values ibverbs uses (`enum ibv_wc_status`,
//! `enum ibv_wc_opcode`, `enum ibv_access_flags`, `enum ibv_qp_attr_mask`).

use core::net::IpAddr;
use std::sync::Arc;

use roce_wire::Psn;

use crate::mem::{MemBuf, OnOtherDevice};

/// Memory and QP access rights (`enum ibv_access_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u32);

impl Access {
    pub const LOCAL_WRITE: Access = Access(1);
    pub const REMOTE_WRITE: Access = Access(1 << 1);
    pub const REMOTE_READ: Access = Access(1 << 2);
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);
    /// `IBV_ACCESS_ZERO_BASED`: the region's remote addresses start at 0,
    /// so peers see offsets, not where the memory is (see
    /// `EngineConfig::mr_addressing` for a device-wide choice).
    pub const ZERO_BASED: Access = Access(1 << 5);
    pub const NONE: Access = Access(0);
    /// Every access right (not `ZERO_BASED`, which is not a right).
    pub const ALL: Access = Access(0xf);

    pub const fn union(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
    pub const fn contains(self, o: Access) -> bool {
        self.0 & o.0 == o.0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        self.union(o)
    }
}

/// Transport service of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpType {
    Rc,
    Uc,
    Ud,
}

/// QP states (IBTA vol. 1 §10.3.1, `enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    Reset = 0,
    Init = 1,
    Rtr = 2,
    Rts = 3,
    Sqd = 4,
    Sqe = 5,
    Err = 6,
}

/// Path MTU (`enum ibv_mtu`): 256 to 4096 bytes of payload per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathMtu {
    Mtu256 = 1,
    Mtu512 = 2,
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl PathMtu {
    pub fn bytes(self) -> usize {
        128 << (self as u32)
    }
    /// The MTU for a byte count, if it is one of the five IB MTUs.
    pub fn from_bytes(n: usize) -> Option<PathMtu> {
        Some(match n {
            256 => PathMtu::Mtu256,
            512 => PathMtu::Mtu512,
            1024 => PathMtu::Mtu1024,
            2048 => PathMtu::Mtu2048,
            4096 => PathMtu::Mtu4096,
            _ => return None,
        })
    }

    /// The RoCE MTU of an Ethernet link whose IP MTU is `link_mtu`: the
    /// largest IB MTU whose packet fits once the headers and trailers a
    /// RoCE packet may carry are taken off (Annex A17.5.1: a RoCE port's
    /// active MTU follows its Ethernet MTU). The reserve is the Linux
    /// kernel's (`iboe_get_mtu`: GRH 40 + UDP 8 + BTH 12 + XRCETH 4 +
    /// AtomicETH 28 + ICRC 4 bytes), so a 1500-byte Ethernet gives 1024 as
    /// it does for rxe and the kernel's RDMA CM, a 9000-byte one or the
    /// loopback 4096. `None` below 256 + that reserve.
    pub fn for_link_mtu(link_mtu: u32) -> Option<PathMtu> {
        const RESERVE: u32 = 40 + 8 + 12 + 4 + 28 + 4;
        let room = link_mtu.checked_sub(RESERVE)?;
        [PathMtu::Mtu4096, PathMtu::Mtu2048, PathMtu::Mtu1024, PathMtu::Mtu512, PathMtu::Mtu256]
            .into_iter()
            .find(|m| m.bytes() as u32 <= room)
    }
}

/// A GID as RoCEv2 uses it: an IP address (IPv4 addresses appear as
/// IPv4-mapped IPv6 GIDs, `::ffff:a.b.c.d`).
pub type Gid = IpAddr;

/// Converts a GID's 16 bytes to the address it denotes.
pub fn gid_from_bytes(b: [u8; 16]) -> Gid {
    let v6 = core::net::Ipv6Addr::from(b);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The 16-byte GID of an address (IPv4-mapped for IPv4).
pub fn gid_to_bytes(g: Gid) -> [u8; 16] {
    match g {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Address vector: where a QP's packets go (`struct ibv_ah_attr` with a GRH).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressVector {
    /// Destination GID (IP address).
    pub dgid: Gid,
    /// Index of the source GID in the device's GID table.
    pub sgid_index: u8,
    /// Traffic class: DSCP (6 bits) << 2; the ECN bits are set by the engine.
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
    /// UDP destination port of the peer device; `None` is RoCEv2's 4791
    /// (the engine's configured port). Lets several devices share a host.
    pub udp_port: Option<u16>,
}

impl AddressVector {
    pub fn new(dgid: Gid) -> AddressVector {
        AddressVector { dgid, sgid_index: 0, traffic_class: 0, hop_limit: 64, flow_label: 0, udp_port: None }
    }
}

/// Attribute mask bits (`enum ibv_qp_attr_mask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AttrMask(pub u32);

impl AttrMask {
    pub const STATE: AttrMask = AttrMask(1 << 0);
    pub const CUR_STATE: AttrMask = AttrMask(1 << 1);
    pub const EN_SQD_ASYNC_NOTIFY: AttrMask = AttrMask(1 << 2);
    pub const ACCESS_FLAGS: AttrMask = AttrMask(1 << 3);
    pub const PKEY_INDEX: AttrMask = AttrMask(1 << 4);
    pub const PORT: AttrMask = AttrMask(1 << 5);
    pub const QKEY: AttrMask = AttrMask(1 << 6);
    pub const AV: AttrMask = AttrMask(1 << 7);
    pub const PATH_MTU: AttrMask = AttrMask(1 << 8);
    pub const TIMEOUT: AttrMask = AttrMask(1 << 9);
    pub const RETRY_CNT: AttrMask = AttrMask(1 << 10);
    pub const RNR_RETRY: AttrMask = AttrMask(1 << 11);
    pub const RQ_PSN: AttrMask = AttrMask(1 << 12);
    pub const MAX_QP_RD_ATOMIC: AttrMask = AttrMask(1 << 13);
    pub const ALT_PATH: AttrMask = AttrMask(1 << 14);
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(1 << 15);
    pub const SQ_PSN: AttrMask = AttrMask(1 << 16);
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(1 << 17);
    pub const PATH_MIG_STATE: AttrMask = AttrMask(1 << 18);
    pub const CAP: AttrMask = AttrMask(1 << 19);
    pub const DEST_QPN: AttrMask = AttrMask(1 << 20);

    pub const fn union(self, o: AttrMask) -> AttrMask {
        AttrMask(self.0 | o.0)
    }
    pub const fn contains(self, o: AttrMask) -> bool {
        self.0 & o.0 == o.0
    }
    pub const fn minus(self, o: AttrMask) -> AttrMask {
        AttrMask(self.0 & !o.0)
    }
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl core::ops::BitOr for AttrMask {
    type Output = AttrMask;
    fn bitor(self, o: AttrMask) -> AttrMask {
        self.union(o)
    }
}

/// QP attributes for `modify_qp` (`struct ibv_qp_attr`); only the fields named
/// in the mask are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    pub qp_state: QpState,
    pub cur_qp_state: QpState,
    pub path_mtu: PathMtu,
    pub qkey: u32,
    pub rq_psn: Psn,
    pub sq_psn: Psn,
    pub dest_qp_num: u32,
    pub qp_access_flags: Access,
    pub av: AddressVector,
    pub pkey_index: u16,
    pub port_num: u8,
    /// Responder: number of outstanding RDMA READ/atomic requests accepted.
    pub max_dest_rd_atomic: u8,
    /// Requester: number of outstanding RDMA READ/atomic requests issued.
    pub max_rd_atomic: u8,
    /// RNR NAK timer code the responder advertises (Table 45).
    pub min_rnr_timer: u8,
    /// Local ACK timeout code (4.096 us x 2^timeout, 0 = infinite).
    pub timeout: u8,
    pub retry_cnt: u8,
    /// RNR retries; 7 means infinite.
    pub rnr_retry: u8,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: PathMtu::Mtu1024,
            qkey: 0,
            rq_psn: Psn::ZERO,
            sq_psn: Psn::ZERO,
            dest_qp_num: 0,
            qp_access_flags: Access::NONE,
            av: AddressVector::new(IpAddr::V4(core::net::Ipv4Addr::UNSPECIFIED)),
            pkey_index: 0,
            port_num: 1,
            max_dest_rd_atomic: 0,
            max_rd_atomic: 0,
            min_rnr_timer: 0,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
        }
    }
}

/// Queue sizes requested at QP creation (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap { max_send_wr: 128, max_recv_wr: 128, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 256 }
    }
}

/// Handles the engine hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(pub u32);
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqId(pub u32);
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqId(pub u32);

/// QP creation attributes (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    pub qp_type: QpType,
    pub pd: PdId,
    pub send_cq: CqId,
    pub recv_cq: CqId,
    pub srq: Option<SrqId>,
    pub cap: QpCap,
    /// Every send WR generates a completion, whatever its `signaled` flag.
    pub sq_sig_all: bool,
}

/// A registered region as the application sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrKeys {
    pub lkey: u32,
    pub rkey: u32,
    /// The I/O virtual address of the first byte.
    pub addr: u64,
    pub length: u64,
}

/// Memory registration request.
#[derive(Debug, Clone)]
pub struct MrSpec {
    pub buf: Arc<MemBuf>,
    /// Byte offset of the region inside `buf`.
    pub offset: usize,
    pub length: usize,
    /// I/O virtual address of the region's first byte; `None` uses the real
    /// address (as ibverbs' `ibv_reg_mr`).
    pub iova: Option<u64>,
    pub access: Access,
}

/// A scatter/gather element (`struct ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// Where a UD send goes (`ibv_ah` + `wr.ud`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    pub av: AddressVector,
    pub remote_qpn: u32,
    /// Q_Key; if the high bit is set the QP's own Q_Key is used (IBTA §10.2.5).
    pub remote_qkey: u32,
}

/// The operation of a send work request (`enum ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SendOp {
    Send,
    SendWithImm { imm: u32 },
    SendWithInv { rkey: u32 },
    Write { remote_addr: u64, rkey: u32 },
    WriteWithImm { remote_addr: u64, rkey: u32, imm: u32 },
    Read { remote_addr: u64, rkey: u32 },
    CompareSwap { remote_addr: u64, rkey: u32, compare: u64, swap: u64 },
    FetchAdd { remote_addr: u64, rkey: u32, add: u64 },
}

impl SendOp {
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(self, SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
    pub fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
    /// The completion opcode the requester reports.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => WcOpcode::Send,
            SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::Read { .. } => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }
}

/// A send work request (`struct ibv_send_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub op: SendOp,
    pub sg_list: Vec<Sge>,
    /// `IBV_SEND_SIGNALED`.
    pub signaled: bool,
    /// `IBV_SEND_FENCE`: wait for earlier READs and atomics to complete.
    pub fence: bool,
    /// `IBV_SEND_SOLICITED`: set the SE bit on the last packet.
    pub solicited: bool,
    /// `IBV_SEND_INLINE`: the data is copied at post time.
    pub inline: bool,
    /// Destination for UD QPs.
    pub ud: Option<UdDest>,
}

impl SendWr {
    pub fn new(wr_id: u64, op: SendOp, sg_list: Vec<Sge>) -> SendWr {
        SendWr { wr_id, op, sg_list, signaled: true, fence: false, solicited: false, inline: false, ud: None }
    }
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sg_list: Vec<Sge>,
}

/// Completion status (`enum ibv_wc_status`, same numeric values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
}

/// Completion opcode (`enum ibv_wc_opcode`, same numeric values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcOpcode {
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    BindMw = 5,
    LocalInv = 6,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

/// `IBV_WC_WITH_IMM`.
pub const WC_WITH_IMM: u32 = 1 << 1;
/// `IBV_WC_GRH`: the first 40 bytes of a UD receive buffer hold the GRH.
pub const WC_GRH: u32 = 1 << 0;
/// `IBV_WC_WITH_INV`.
pub const WC_WITH_INV: u32 = 1 << 3;

/// A work completion (`struct ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Wc {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    /// Bytes transferred (receive side: bytes placed, GRH included for UD).
    pub byte_len: u32,
    /// Immediate data (host order) or the invalidated R_Key, per `wc_flags`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    /// Vendor syndrome: on error, the AETH syndrome or internal reason.
    pub vendor_err: u32,
}

impl Wc {
    /// A placeholder to fill `poll_cq` buffers with before a poll
    /// overwrites them. It reads as no completion: its status is
    /// `GeneralErr` and its `wr_id` `u64::MAX`, so an entry a poll did not
    /// fill can never pass for a success.
    pub const EMPTY: Wc = Wc {
        wr_id: u64::MAX,
        status: WcStatus::GeneralErr,
        opcode: WcOpcode::Send,
        byte_len: 0,
        imm_data: 0,
        qp_num: 0,
        src_qp: 0,
        wc_flags: 0,
        vendor_err: 0,
    };

    pub(crate) fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: u32) -> Wc {
        Wc { wr_id, status, opcode, qp_num, ..Wc::EMPTY }
    }
}

/// Asynchronous events (`enum ibv_event_type`, the ones this NIC raises).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AsyncEvent {
    CqErr(CqId),
    QpFatal(u32),
    QpReqErr(u32),
    QpAccessErr(u32),
    SqDrained(u32),
    SrqLimitReached(SrqId),
}

/// A kind of verbs object.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Object {
    Pd,
    Mr,
    Cq,
    Qp,
    Srq,
}

impl core::fmt::Display for Object {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Object::Pd => "PD",
            Object::Mr => "MR",
            Object::Cq => "CQ",
            Object::Qp => "QP",
            Object::Srq => "SRQ",
        })
    }
}

/// A work queue.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkQueue {
    Send,
    Recv,
    Srq,
}

impl core::fmt::Display for WorkQueue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            WorkQueue::Send => "send queue",
            WorkQueue::Recv => "receive queue",
            WorkQueue::Srq => "shared receive queue",
        })
    }
}

/// What was wrong with an argument of a verbs call.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("remote write or atomic access needs local write (IBTA C10-52)")]
    RemoteAccessWithoutLocalWrite,
    #[error("unknown access flags 0x{0:x}")]
    UnknownAccessFlags(u32),
    #[error("the region [{offset}, +{length}) lies outside the {size}-byte buffer")]
    RegionOutsideBuffer { offset: usize, length: usize, size: usize },
    #[error("iova 0x{iova:x} + length {length} overflows 64 bits")]
    IovaOverflow { iova: u64, length: usize },
    #[error("a zero-based region cannot also name an iova")]
    ZeroBasedWithIova,
    #[error("CQ depth {depth} is not in 1..={max}")]
    CqDepth { depth: usize, max: usize },
    #[error("SRQ size {max_wr} WRs x {max_sge} SGEs is outside 1..={max_qp_wr} x 0..={max_sge_limit}")]
    SrqSize { max_wr: u32, max_sge: u32, max_qp_wr: u32, max_sge_limit: u32 },
    #[error("SRQ limit {limit} exceeds its {max_wr} WRs")]
    SrqLimit { limit: u32, max_wr: u32 },
    #[error("the SRQ belongs to another PD")]
    SrqInOtherPd,
    #[error("QP capabilities {0:?} exceed the device limits (or ask for no send WR)")]
    QpCaps(QpCap),
    #[error("GID index {0} does not exist")]
    SgidIndex(u8),
    #[error("source and destination GIDs are of different IP families")]
    MixedIpFamilies,
    #[error("{given} SGEs for a {queue} that takes {max}")]
    TooManySges { given: usize, max: u32, queue: WorkQueue },
    #[error("{op:?} is not an operation of {qp_type:?} QPs")]
    OpNotSupported { op: SendOp, qp_type: QpType },
    #[error("message of {length} bytes exceeds {max}")]
    MessageTooLong { length: u64, max: u64 },
    #[error("a UD send needs a destination (wr.ud)")]
    UdWithoutDestination,
    #[error("UD QPs are not connected (they are made ready with a Q_Key)")]
    UdNotConnected,
    #[error("only a connected (RC or UC) QP can be protected")]
    CryptoNeedsConnectedQp,
    #[error("a remote address plus length overflows 64 bits")]
    RemoteRangeOverflow,
    #[error("atomics take one 8-byte SGE")]
    AtomicSge,
    #[error("atomic remote address 0x{0:x} is not 8-byte aligned")]
    AtomicAlignment(u64),
    #[error("max_rd_atomic is 0: this QP issues no RDMA READ or atomic")]
    NoReadAtomicInitiator,
    #[error("RDMA READ and atomics cannot be inline")]
    InlineReadAtomic,
    #[error("{length} bytes of inline data exceed max_inline_data {max}")]
    InlineTooLong { length: u64, max: u32 },
    #[error("{given} bytes of inline data for SGEs of {length} bytes")]
    InlineDataLength { given: usize, length: u64 },
    #[error("the QP takes receives from an SRQ")]
    QpUsesSrq,
    #[error("cur_qp_state {given:?} is not the QP's state {actual:?}")]
    CurState { given: QpState, actual: QpState },
    #[error("max_rd_atomic {0} exceeds the device limit")]
    MaxRdAtomic(u8),
    #[error("max_dest_rd_atomic {0} exceeds the device limit")]
    MaxDestRdAtomic(u8),
    #[error("retry_cnt {0} is not a 3-bit value")]
    RetryCnt(u8),
    #[error("rnr_retry {0} is not a 3-bit value")]
    RnrRetry(u8),
    #[error("timeout {0} is not a 5-bit value")]
    Timeout(u8),
    #[error("min_rnr_timer {0} is not a 5-bit value")]
    MinRnrTimer(u8),
    #[error("dest_qp_num 0x{0:x} is not a 24-bit QPN")]
    DestQpn(u32),
    #[error("port {0} does not exist (the device has port 1)")]
    Port(u8),
    #[error("P_Key index {0} does not exist (the table has index 0)")]
    PkeyIndex(u16),
}

/// Errors returned by verbs calls.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    #[error("no such {0}")]
    NotFound(Object),
    #[error("invalid argument: {0}")]
    Invalid(#[from] Invalid),
    #[error("{0} full")]
    QueueFull(WorkQueue),
    /// The object is still used: a PD by MRs, QPs or SRQs, a CQ or SRQ by QPs.
    #[error("{0} in use")]
    InUse(Object),
    #[error("QP state {0:?} does not allow this")]
    BadState(QpState),
    /// Attributes the transition requires and the mask does not name.
    #[error("attribute mask lacks 0x{:x}, required for this transition", .0 .0)]
    MissingAttrs(AttrMask),
    /// Attributes the mask names and the transition does not take.
    #[error("attribute mask names 0x{:x}, not valid for this transition", .0 .0)]
    UnexpectedAttrs(AttrMask),
    /// An SGE of inline data names memory the QP may not read.
    #[error("inline data SGE not readable (local protection)")]
    LocalProtection,
    #[error("completion queue overflowed")]
    CqOverflow,
    #[error("no more {0}s: the device limit is reached")]
    NoResources(Object),
    /// The buffer is registered with another engine (device): a buffer
    /// serves one device at a time, which keeps the NICs' accesses to it
    /// sequential.
    #[error("the buffer is registered with another device")]
    BufferOnOtherDevice,
    /// Bytes `[offset, offset + len)` of a `size`-byte region do not exist.
    #[error("bytes [{offset}, +{len}) lie outside the {size}-byte region")]
    OutsideRegion { offset: usize, len: usize, size: usize },
}

impl From<OnOtherDevice> for VerbsError {
    fn from(_: OnOtherDevice) -> VerbsError {
        VerbsError::BufferOnOtherDevice
    }
}

#[cfg(test)]
mod tests {
    use super::PathMtu;

    /// The kernel's `iboe_get_mtu` table: 96 bytes of headers and trailers
    /// come off the link's MTU first.
    #[test]
    fn a_link_mtu_gives_the_largest_ib_mtu_that_fits() {
        let cases = [
            (65536, Some(PathMtu::Mtu4096)), // the loopback
            (9000, Some(PathMtu::Mtu4096)),
            (4192, Some(PathMtu::Mtu4096)),
            (4191, Some(PathMtu::Mtu2048)),
            (1500, Some(PathMtu::Mtu1024)), // Ethernet: what rxe and the kernel's CM use
            (1120, Some(PathMtu::Mtu1024)),
            (1119, Some(PathMtu::Mtu512)),
            (352, Some(PathMtu::Mtu256)),
            (351, None),
            (68, None),
            (0, None),
        ];
        for (link, want) in cases {
            assert_eq!(PathMtu::for_link_mtu(link), want, "link MTU {link}");
        }
    }
}
