//! Global Route Header (IBTA vol. 1 §8.3, 40 bytes), as carried by RoCEv1
//! frames (EtherType 0x8915): IPVer (6), TClass, FlowLabel, PayLen, NxtHdr
//! (0x1B = IBA transport), HopLmt, SGID, DGID. Its layout is the IPv6 header's,
//! so it is read through the `Ipv6Packet` view.

use crate::error::{Result, WireError};
use crate::ipv6::{emit_fixed, first_word, Ipv6Packet, HEADER_LEN};

/// NxtHdr value meaning "an IBA transport header (BTH) follows".
pub const NEXT_HEADER_IBA: u8 = 0x1b;

/// Parsed GRH. PayLen is derived on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrhRepr {
    pub traffic_class: u8,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
}

impl GrhRepr {
    /// Parses a GRH. Returns the repr and the total length (40 + PayLen).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<(GrhRepr, usize)> {
        if p.version() != 6 {
            return Err(WireError::IpVersion(p.version()));
        }
        if p.next_header() != NEXT_HEADER_IBA {
            return Err(WireError::NotUdp(p.next_header()));
        }
        Ok((
            GrhRepr {
                traffic_class: p.traffic_class(),
                flow_label: p.flow_label(),
                hop_limit: p.hop_limit(),
                sgid: p.src_bytes(),
                dgid: p.dst_bytes(),
            },
            HEADER_LEN + usize::from(p.payload_len()),
        ))
    }

    pub fn emit(&self, buf: &mut [u8], payload_len: usize) {
        emit_fixed(
            buf,
            first_word(self.traffic_class, self.flow_label),
            payload_len,
            NEXT_HEADER_IBA,
            self.hop_limit,
            &self.sgid,
            &self.dgid,
        );
    }
}
