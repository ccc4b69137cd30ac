//! IPv6 header (RFC 8200, 40 bytes). RoCEv2 over IPv6 has no extension
//! headers; traffic class (DSCP+ECN), flow label and hop limit are masked out
//! of the ICRC. The RoCEv1 GRH has the same layout (see `grh`).

use core::net::Ipv6Addr;

use crate::error::{Header, Result, WireError};
use crate::field::*;
use crate::view::header_view;

pub const HEADER_LEN: usize = 40;

pub mod field {
    pub const VER_TC_FLOW: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
}

header_view!(
    /// Zero-copy view of an IPv6 header (or a GRH).
    Ipv6Packet,
    HEADER_LEN,
    Header::Ipv6
);

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }
    pub fn traffic_class(&self) -> u8 {
        ((get_u16(self.buffer.as_ref(), field::VER_TC_FLOW) >> 4) & 0xff) as u8
    }
    pub fn flow_label(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::VER_TC_FLOW) & 0x000f_ffff
    }
    pub fn payload_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    pub fn src_bytes(&self) -> [u8; 16] {
        self.buffer.as_ref()[field::SRC..field::SRC + 16].try_into().unwrap()
    }
    pub fn dst_bytes(&self) -> [u8; 16] {
        self.buffer.as_ref()[field::DST..field::DST + 16].try_into().unwrap()
    }
}

/// The first word of the header: version 6, traffic class, flow label.
pub(crate) fn first_word(traffic_class: u8, flow_label: u32) -> u32 {
    (6 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff)
}

/// Writes the first word, payload length, next header, hop limit and the two
/// 16-byte addresses (shared by IPv6 and GRH).
pub(crate) fn emit_fixed(
    buf: &mut [u8],
    first: u32,
    payload_len: usize,
    next_header: u8,
    hop_limit: u8,
    src: &[u8; 16],
    dst: &[u8; 16],
) {
    let h = &mut buf[..HEADER_LEN];
    set_u32(h, field::VER_TC_FLOW, first);
    set_u16(h, field::PAYLOAD_LEN, payload_len as u16);
    h[field::NEXT_HEADER] = next_header;
    h[field::HOP_LIMIT] = hop_limit;
    h[field::SRC..field::SRC + 16].copy_from_slice(src);
    h[field::DST..field::DST + 16].copy_from_slice(dst);
}

/// IPv6 extension headers a RoCEv2 parser may meet (hop-by-hop, routing,
/// fragment, destination options, ...). RoCEv2 forbids them.
fn is_extension_header(nh: u8) -> bool {
    matches!(nh, 0 | 43 | 44 | 50 | 51 | 60 | 135 | 139 | 140 | 253 | 254)
}

/// Parsed IPv6 header. The payload length is derived on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// Parses the header, requiring version 6 and next header UDP. Returns the
    /// repr and the total IP length (40 + payload length).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<(Ipv6Repr, usize)> {
        if p.version() != 6 {
            return Err(WireError::IpVersion(p.version()));
        }
        let nh = p.next_header();
        if is_extension_header(nh) {
            return Err(WireError::Ipv6ExtHeaders(nh));
        }
        if nh != crate::ipv4::PROTO_UDP {
            return Err(WireError::NotUdp(nh));
        }
        Ok((
            Ipv6Repr {
                src: Ipv6Addr::from(p.src_bytes()),
                dst: Ipv6Addr::from(p.dst_bytes()),
                traffic_class: p.traffic_class(),
                flow_label: p.flow_label(),
                hop_limit: p.hop_limit(),
            },
            HEADER_LEN + usize::from(p.payload_len()),
        ))
    }

    pub fn emit(&self, buf: &mut [u8], payload_len: usize) {
        emit_fixed(
            buf,
            first_word(self.traffic_class, self.flow_label),
            payload_len,
            crate::ipv4::PROTO_UDP,
            self.hop_limit,
            &self.src.octets(),
            &self.dst.octets(),
        );
    }

    pub fn ecn(&self) -> u8 {
        self.traffic_class & 3
    }
}
