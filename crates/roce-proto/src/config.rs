//! Device-wide settings of an engine.

use crate::limits;
use crate::verbs::Gid;

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
    /// Hold each connected QP's peer to the UDP source port of its first
    /// packet (see `QpCore::peer_check`). Off by default: nothing in the
    /// IBTA forbids a peer from changing it (a NIC may re-hash a flow).
    pub pin_peer_port: bool,
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
            pin_peer_port: false,
            ecn: true,
            max_qp: limits::MAX_QP,
            max_cqe: limits::MAX_CQE,
            max_mr: limits::MAX_MR,
            max_qp_wr: limits::MAX_QP_WR,
            max_sge: limits::MAX_SGE,
            max_inline: limits::MAX_INLINE,
            max_msg_size: limits::MAX_MSG_SIZE,
        }
    }
}
