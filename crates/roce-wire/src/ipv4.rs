//! IPv4 header (RFC 791), as RoCEv2 uses it: no options, never fragmented,
//! protocol UDP. The TOS byte carries DSCP and ECN (RFC 3168), which DCQCN
//! relies on; TOS, TTL and the header checksum are masked out of the ICRC.

use core::net::Ipv4Addr;

use crate::error::{Header, Result, WireError};
use crate::field::*;
use crate::view::header_view;

pub const HEADER_LEN: usize = 20;
pub const PROTO_UDP: u8 = 17;

pub mod field {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const TOTAL_LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

header_view!(
    /// Zero-copy view of an IPv4 header.
    Ipv4Packet,
    HEADER_LEN,
    Header::Ipv4
);

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL x 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0xf) * 4
    }
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }
    pub fn total_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::TOTAL_LEN)
    }
    pub fn ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::IDENT)
    }
    /// Flags (3 bits) and fragment offset (13 bits).
    pub fn flags_frag(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::FLAGS_FRAG)
    }
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::from(get_u32(self.buffer.as_ref(), field::SRC))
    }
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::from(get_u32(self.buffer.as_ref(), field::DST))
    }
    /// True when the one's-complement sum over the header is correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        let hl = self.header_len().min(self.buffer.as_ref().len());
        ones_complement_sum(0, &self.buffer.as_ref()[..hl]) == 0xffff
    }
}

/// Parsed IPv4 header. Total length and checksum are derived on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// DSCP (6 bits) and ECN (2 bits).
    pub tos: u8,
    pub ident: u16,
    pub dont_frag: bool,
    pub ttl: u8,
}

impl Ipv4Repr {
    /// Parses the header and validates it for RoCEv2: version 4, IHL 5, the
    /// checksum, no fragmentation, protocol UDP. Returns the repr and the total
    /// length field (checked against the bytes present by the caller).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<(Ipv4Repr, usize)> {
        if p.version() != 4 {
            return Err(WireError::IpVersion(p.version()));
        }
        if p.header_len() != HEADER_LEN {
            return Err(WireError::Ipv4HeaderLen(p.header_len()));
        }
        if !p.verify_checksum() {
            return Err(WireError::Ipv4Checksum(p.checksum()));
        }
        if p.flags_frag() & 0x3fff != 0 {
            return Err(WireError::IpFragment);
        }
        if p.flags_frag() & 0x8000 != 0 {
            return Err(WireError::ReservedNonZero("IPv4 reserved flag"));
        }
        if p.protocol() != PROTO_UDP {
            return Err(WireError::NotUdp(p.protocol()));
        }
        Ok((
            Ipv4Repr {
                src: p.src(),
                dst: p.dst(),
                tos: p.tos(),
                ident: p.ident(),
                dont_frag: p.flags_frag() & 0x4000 != 0,
                ttl: p.ttl(),
            },
            usize::from(p.total_len()),
        ))
    }

    /// Writes a 20-byte header for a payload of `payload_len` bytes, with its checksum.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) {
        self.emit_without_checksum(buf, payload_len);
        let h = &mut buf[..HEADER_LEN];
        let sum = !(ones_complement_sum(0, h) as u16);
        set_u16(h, field::CHECKSUM, sum);
    }

    /// [`Ipv4Repr::emit`] with the header checksum left zero: for headers
    /// only the ICRC sees, which masks the checksum (IBTA Annex A17.3.3).
    #[inline]
    pub fn emit_without_checksum(&self, buf: &mut [u8], payload_len: usize) {
        let h = &mut buf[..HEADER_LEN];
        h[field::VER_IHL] = 0x45;
        h[field::TOS] = self.tos;
        set_u16(h, field::TOTAL_LEN, (HEADER_LEN + payload_len) as u16);
        set_u16(h, field::IDENT, self.ident);
        set_u16(h, field::FLAGS_FRAG, if self.dont_frag { 0x4000 } else { 0 });
        h[field::TTL] = self.ttl;
        h[field::PROTOCOL] = PROTO_UDP;
        set_u16(h, field::CHECKSUM, 0);
        h[field::SRC..field::SRC + 4].copy_from_slice(&self.src.octets());
        h[field::DST..field::DST + 4].copy_from_slice(&self.dst.octets());
    }

    /// ECN codepoint (RFC 3168): 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub fn ecn(&self) -> u8 {
        self.tos & 3
    }
    pub fn dscp(&self) -> u8 {
        self.tos >> 2
    }
}
