//! UDP header (RFC 768, 8 bytes). RoCEv2 uses destination port 4791; the
//! source port carries flow entropy for ECMP (IBTA Annex A17.4.2). The UDP
//! checksum is masked out of the ICRC and may be zero over IPv4 (and, per
//! RFC 6935/6936, is zero over IPv6 in practice for RoCE).

use crate::error::{Header, Result};
use crate::field::*;
use crate::view::header_view;

pub const HEADER_LEN: usize = 8;
/// The IANA port for RoCEv2.
pub const ROCE_PORT: u16 = 4791;

pub mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

header_view!(
    /// Zero-copy view of a UDP header.
    UdpPacket,
    HEADER_LEN,
    Header::Udp
);

impl<T: AsRef<[u8]>> UdpPacket<T> {
    pub fn src_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::SRC_PORT)
    }
    pub fn dst_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::DST_PORT)
    }
    pub fn len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH)
    }
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= HEADER_LEN
    }
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }
}

/// Parsed UDP header. Length is derived on emit; `checksum` says whether a
/// checksum is sent (computed over the pseudo-header) or left zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    pub checksum: bool,
}

impl UdpRepr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> Result<UdpRepr> {
        Ok(UdpRepr { src_port: p.src_port(), dst_port: p.dst_port(), checksum: p.checksum() != 0 })
    }

    /// Writes ports and length; the checksum field is written as zero (the
    /// frame layer fills it once the payload is in place).
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) {
        set_u16(buf, field::SRC_PORT, self.src_port);
        set_u16(buf, field::DST_PORT, self.dst_port);
        set_u16(buf, field::LENGTH, (HEADER_LEN + payload_len) as u16);
        set_u16(buf, field::CHECKSUM, 0);
    }
}

/// One's-complement sum of the pseudo-header: the source and destination
/// addresses (`addrs`, 8 bytes for IPv4 or 32 for IPv6), protocol and length
/// (RFC 768; RFC 8200 §8.1). The 32-bit length form of IPv6 sums the same as
/// IPv4's 16-bit one.
fn pseudo_header_sum(addrs: &[u8], len: usize) -> u32 {
    let acc = ones_complement_sum(0, addrs);
    let l = (len as u32).to_be_bytes();
    ones_complement_sum(acc, &[l[0], l[1], l[2], l[3], 0, 0, 0, crate::ipv4::PROTO_UDP])
}

/// The checksum of `datagram` (UDP header with a zero checksum field +
/// payload). A computed 0 is sent as 0xffff (RFC 768).
pub fn checksum(addrs: &[u8], datagram: &[u8]) -> u16 {
    let sum = !(ones_complement_sum(pseudo_header_sum(addrs, datagram.len()), datagram) as u16);
    if sum == 0 {
        0xffff
    } else {
        sum
    }
}

/// True when the checksum stored in `datagram` is right.
pub fn verify(addrs: &[u8], datagram: &[u8]) -> bool {
    ones_complement_sum(pseudo_header_sum(addrs, datagram.len()), datagram) == 0xffff
}
