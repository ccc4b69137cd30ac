//! A path in a REQ (IBTA vol. 1 table 99, the "Primary" and "Alternate"
//! groups, 44 bytes each: primary at REQ byte 52, alternate at 96).
//!
//! ```text
//!  0 Local Port LID(16) Remote Port LID(16)
//!  4 Local Port GID(128)
//! 20 Remote Port GID(128)
//! 36 Flow Label(20) Reserved(6) Packet Rate(6)
//! 40 Traffic Class(8) Hop Limit(8) SL(4) Subnet Local(1) Reserved(3)
//!    Local ACK Timeout(5) Reserved(3)
//! ```

use crate::error::{Header, Result};
use crate::field::accessors;
use crate::field::*;
use crate::view::header_view;

/// Bytes of one path.
pub const PATH_LEN: usize = 44;

mod field {
    pub const LOCAL_LID: usize = 0;
    pub const REMOTE_LID: usize = 2;
    pub const LOCAL_GID: usize = 4;
    pub const REMOTE_GID: usize = 20;
    pub const FLOW_RATE: usize = 36;
    pub const TRAFFIC_CLASS: usize = 40;
    pub const HOP_LIMIT: usize = 41;
    pub const SL_SUBNET: usize = 42;
    pub const ACK_TIMEOUT: usize = 43;
}

header_view!(
    /// Zero-copy view of one REQ path.
    CmPath,
    PATH_LEN,
    Header::CmMessage
);

accessors!(CmPath {
    local_lid, set_local_lid: u16(field::LOCAL_LID);
    remote_lid, set_remote_lid: u16(field::REMOTE_LID);
    local_gid, set_local_gid: gid(field::LOCAL_GID);
    remote_gid, set_remote_gid: gid(field::REMOTE_GID);
    traffic_class, set_traffic_class: u8(field::TRAFFIC_CLASS);
    hop_limit, set_hop_limit: u8(field::HOP_LIMIT);
    sl, set_sl: bits(field::SL_SUBNET, 0, 4);
    subnet_local, set_subnet_local: flag(field::SL_SUBNET, 4);
    /// 4.096 µs · 2^value: the peer's QP timeout follows it (IBTA §12.7.34).
    local_ack_timeout, set_local_ack_timeout: bits(field::ACK_TIMEOUT, 0, 5);
});

impl<T: AsRef<[u8]>> CmPath<T> {
    /// The 20-bit flow label.
    pub fn flow_label(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::FLOW_RATE) >> 12
    }
    /// The 6-bit packet rate (IBTA encoding; 0 = unspecified).
    pub fn packet_rate(&self) -> u8 {
        (get_u32(self.buffer.as_ref(), field::FLOW_RATE) & 0x3f) as u8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmPath<T> {
    /// Sets the flow label and packet rate (the reserved bits between them 0).
    pub fn set_flow_label_rate(&mut self, flow_label: u32, rate: u8) {
        let v = (flow_label & 0xf_ffff) << 12 | u32::from(rate & 0x3f);
        set_u32(self.buffer.as_mut(), field::FLOW_RATE, v);
    }
}

/// Parsed path. On RoCE (Linux `cma_resolve_iboe_route`): GIDs are the
/// IPv4-mapped addresses, LIDs 0xFFFF (permissive), hop limit 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PathRepr {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    pub flow_label: u32,
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub sl: u8,
    pub subnet_local: bool,
    pub local_ack_timeout: u8,
}

impl PathRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &CmPath<T>) -> Result<PathRepr> {
        Ok(PathRepr {
            local_lid: p.local_lid(),
            remote_lid: p.remote_lid(),
            local_gid: p.local_gid(),
            remote_gid: p.remote_gid(),
            flow_label: p.flow_label(),
            packet_rate: p.packet_rate(),
            traffic_class: p.traffic_class(),
            hop_limit: p.hop_limit(),
            sl: p.sl(),
            subnet_local: p.subnet_local(),
            local_ack_timeout: p.local_ack_timeout(),
        })
    }

    /// Writes every field (reserved bits 0), except the byte-43 bits after
    /// the ACK timeout, which the alternate path uses for "SAP supported".
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut CmPath<T>) {
        p.set_local_lid(self.local_lid);
        p.set_remote_lid(self.remote_lid);
        p.set_local_gid(self.local_gid);
        p.set_remote_gid(self.remote_gid);
        p.set_flow_label_rate(self.flow_label, self.packet_rate);
        p.set_traffic_class(self.traffic_class);
        p.set_hop_limit(self.hop_limit);
        p.as_bytes_mut()[field::SL_SUBNET] = 0;
        p.set_sl(self.sl);
        p.set_subnet_local(self.subnet_local);
        p.set_local_ack_timeout(self.local_ack_timeout);
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmPath<T> {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
}
