//! Device-wide settings of an engine.

use crate::limits;
use crate::verbs::{Gid, PathMtu};

/// The remote address (I/O virtual address) of a registered region, when
/// its registration does not name one. RDMA peers address memory by it, so
/// it is seen by every peer the rkey is given to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MrAddressing {
    /// The memory's own address, as ibverbs advertises it: tells peers
    /// where the process's heap is (defeats ASLR for them).
    Pointer,
    /// 0 at the region's start (`IBV_ACCESS_ZERO_BASED` for every region):
    /// peers see offsets.
    ZeroBased,
    /// A random page-aligned address below 2^63 drawn per region: peers
    /// see offsets from an address they must be told, and a guesser gains
    /// 51 more bits to find.
    Random,
}

/// Device-wide settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The GID table: the IP addresses of this device (index = sgid_index).
    pub gids: Vec<Gid>,
    /// UDP destination port of RoCEv2 (4791), used when an address vector
    /// names no port.
    pub udp_port: u16,
    /// UDP source port of every packet. A driver on one kernel socket must
    /// set it to the socket's port (the ICRC covers it); `None` gives each QP
    /// its own port for ECMP entropy (Annex A17.4.2), as a NIC does.
    pub fixed_src_port: Option<u16>,
    /// The P_Key of the single partition (default full membership 0xFFFF).
    pub pkey: u16,
    /// Largest number of unacknowledged request PSNs per QP (send window).
    pub max_unacked_psns: u32,
    /// Ask for an ACK at least every this many packets of a long message.
    pub ack_req_every: u32,
    /// READ-response bytes this device may have solicited and not yet
    /// received, across all its QPs: what its receive path can absorb in
    /// one burst. A large READ is asked for in several READ requests of
    /// at most a quarter of this each (see `requester`), the next as the
    /// earlier ones' responses arrive. A driver on a kernel socket sets it
    /// from the receive buffer the kernel granted: a quarter of what
    /// `getsockopt(SO_RCVBUF)` reports (the kernel charges each datagram's
    /// whole buffer, up to twice its payload, against that figure, and the
    /// socket also takes requests, ACKs and replays).
    pub rx_budget_bytes: u64,
    /// How long a READ whose responses stopped coming is waited for
    /// before its missing tail is asked for again, at the least (the
    /// completer waits `READ_TAIL_RTTS` round trips, never less than this).
    /// The default, 5 ms, suits a driver on a kernel socket (its timers
    /// fire on epoll's millisecond, its host may be busy).
    pub read_tail_floor: crate::time::Duration,
    /// Request bytes this device's RC QPs may have sent and not seen
    /// acknowledged, across its QPs (counted as unacknowledged PSNs times
    /// the path MTU): bounds the burst a device with many QPs dumps into
    /// its peers, which a sender cannot otherwise size (it does not know
    /// their receive buffers). A QP with nothing unacknowledged may always
    /// send, so each QP makes progress. `None` (the default): only each
    /// QP's own window (`max_unacked_psns`) bounds it, as on a NIC whose
    /// lossless fabric pushes back. A driver on a kernel socket whose peers
    /// are on its host sets it like `rx_budget_bytes`, from its own granted
    /// receive buffer.
    pub tx_budget_bytes: Option<u64>,
    /// Hold each connected QP's peer to the UDP source port of its first
    /// packet (see `QpCore::peer_check`). Off by default: nothing in the
    /// IBTA forbids a peer from changing it (a NIC may re-hash a flow).
    pub pin_peer_port: bool,
    /// Congestion control of connected QPs' requests (`None`: line rate).
    pub cc: crate::cc::CcAlgorithm,
    /// The rate a QP starts at and never exceeds under congestion control,
    /// in bits/s (the NIC's line rate).
    pub line_rate_bps: u64,
    /// How late pacing may catch up: a request whose turn passed while
    /// the driver slept sends from `now - pacing_slack` at the latest, so
    /// a driver whose timers fire late (epoll's millisecond) still keeps
    /// the rate on average. Zero (the default) paces exactly, packet by
    /// packet, as the simulator does.
    pub pacing_slack: crate::time::Duration,
    /// How CE-marked packets are answered with CNPs.
    pub cnp: CnpConfig,
    /// The address a region advertises when its registration names none.
    pub mr_addressing: MrAddressing,
    /// Mark outgoing packets ECN-capable (ECT(0)).
    pub ecn: bool,
    /// Device limits.
    pub max_qp: usize,
    pub max_cqe: usize,
    pub max_mr: usize,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_inline: u32,
    pub max_msg_size: u64,
    /// The path MTU the connection manager proposes in a REQ and takes at
    /// most from a peer's (the REQ's Path MTU, IBTA vol. 1 §12.6.5; on
    /// RoCE the kernel's RDMA CM takes `iboe_get_mtu` of the interface's
    /// MTU, see `PathMtu::for_link_mtu`). A driver sets it from the link
    /// it sends on; 1024, what a 1500-byte Ethernet gives, by default.
    pub cm_path_mtu: PathMtu,
    /// What the engine does with the bytes of messages: every byte, as a
    /// device must; or, for a simulator's hosts whose results nobody reads,
    /// only each message's first bytes (see [`Payload`]).
    pub payload: Payload,
}

/// Whether a message's bytes are moved, or only its length travels.
///
/// A simulated fabric that times a workload and does not check its results
/// gains nothing from moving every byte: the time a packet takes depends on
/// its length alone. With [`Payload::Elided`], packets keep their lengths and
/// the protocol its every rule (PSNs, ACKs, windows, the checks on headers,
/// lengths, keys and bounds), but past each message's first `keep` bytes the
/// payload is neither gathered from memory on send (zeros go in its place)
/// nor placed in memory on receive, and the ICRC covers only the transport
/// headers (BTH and extension headers), not the payload. Two engines talk
/// only if both use the same mode: an ICRC over the whole datagram fails
/// here and the reverse. Never for a device on a network: a payload byte
/// corrupted in flight would go unseen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Payload {
    /// Every byte gathered, carried, placed and covered by the ICRC.
    #[default]
    Carried,
    /// Only the first `keep` bytes of each message (at its start: a
    /// header the application reads) are carried and placed.
    Elided { keep: u32 },
}

impl Payload {
    /// The mode for a QP of `qp_type`: a UD message (one packet; the
    /// connection manager's among them) is always carried whole.
    #[inline]
    pub fn for_qp(self, qp_type: crate::verbs::QpType) -> Payload {
        if qp_type == crate::verbs::QpType::Ud {
            Payload::Carried
        } else {
            self
        }
    }

    /// Of `len` payload bytes at `offset` in their message, how many
    /// (from the first) are carried.
    #[inline]
    pub fn carried(self, offset: u64, len: usize) -> usize {
        match self {
            Payload::Carried => len,
            Payload::Elided { keep } => (u64::from(keep).saturating_sub(offset)).min(len as u64) as usize,
        }
    }
}

impl EngineConfig {
    pub fn new(gids: Vec<Gid>) -> EngineConfig {
        EngineConfig {
            gids,
            udp_port: roce_wire::ROCE_PORT,
            fixed_src_port: None,
            pkey: roce_wire::bth::DEFAULT_PKEY,
            max_unacked_psns: limits::MAX_UNACKED_PSNS,
            ack_req_every: limits::ACK_REQ_EVERY,
            rx_budget_bytes: limits::RX_BUDGET_BYTES,
            read_tail_floor: limits::READ_TAIL_FLOOR,
            tx_budget_bytes: None,
            pin_peer_port: false,
            mr_addressing: MrAddressing::Pointer,
            cnp: CnpConfig::default(),
            cc: crate::cc::CcAlgorithm::None,
            line_rate_bps: limits::LINE_RATE_BPS,
            pacing_slack: crate::time::Duration::ZERO,
            ecn: true,
            max_qp: limits::MAX_QP,
            max_cqe: limits::MAX_CQE,
            max_mr: limits::MAX_MR,
            max_qp_wr: limits::MAX_QP_WR,
            max_sge: limits::MAX_SGE,
            max_inline: limits::MAX_INLINE,
            max_msg_size: limits::MAX_MSG_SIZE,
            cm_path_mtu: PathMtu::Mtu1024,
            payload: Payload::Carried,
        }
    }
}

/// The notification point of DCQCN (Annex A17.9.3, Zhu et al. §3): how a
/// device answers CE-marked packets with CNPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CnpConfig {
    /// Answer CE marks with CNPs (ConnectX NICs do by default).
    pub enabled: bool,
    /// At most one CNP per QP in this interval (`min_time_between_cnps`).
    pub min_interval: crate::time::Duration,
    /// DSCP of CNPs (they often go out at a higher priority than data);
    /// `None` keeps the QP's.
    pub dscp: Option<u8>,
}

impl Default for CnpConfig {
    fn default() -> Self {
        CnpConfig { enabled: true, min_interval: crate::time::Duration::from_micros(4), dscp: None }
    }
}
