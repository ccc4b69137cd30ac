//! Invariant CRC (IBTA vol. 1 §7.8.1; RoCEv2: Annex A17.3.3; RoCEv1: Annex
//! A16.4.2).
//!
//! The ICRC is the Ethernet CRC-32 (reflected polynomial 0xEDB88320, initial
//! value and final XOR 0xFFFFFFFF) over
//!
//! ```text
//! 8 bytes of 0xFF (the absent LRH) | IP header or GRH | UDP header | BTH | ext headers | payload | pad
//! ```
//!
//! with the fields that may change in flight replaced by ones: IPv4 TOS, TTL
//! and header checksum; IPv6/GRH traffic class, flow label and hop limit; the
//! UDP checksum; the BTH `resv8a` byte (FECN, BECN and reserved bits). It is
//! sent least significant byte first, like an Ethernet FCS.

use crate::{bth, ipv4, ipv6, udp};

mod ipv4_id;
pub use ipv4_id::{Ipv4IdCache, Ipv4IdIcrc};

pub const ICRC_LEN: usize = 4;

/// The network header in front of the BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetHeader {
    /// RoCEv2 over IPv4: IPv4 (IHL from the header) + UDP.
    Ipv4,
    /// RoCEv2 over IPv6: IPv6 + UDP.
    Ipv6,
    /// RoCEv1: GRH, no UDP.
    Grh,
}

/// Length of the masked prefix (network headers + BTH) for `net`.
fn masked_len(bytes: &[u8], net: NetHeader) -> (usize, usize) {
    let ip_len = match net {
        NetHeader::Ipv4 => bytes.first().map_or(ipv4::HEADER_LEN, |b| usize::from(b & 0xf) * 4),
        NetHeader::Ipv6 | NetHeader::Grh => ipv6::HEADER_LEN,
    };
    let udp_len = if net == NetHeader::Grh { 0 } else { udp::HEADER_LEN };
    (ip_len, ip_len + udp_len)
}

/// Computes the ICRC of `bytes`: the packet from the start of the IP header
/// (or GRH) up to, not including, the ICRC field.
pub fn compute(bytes: &[u8], net: NetHeader) -> u32 {
    let (_, bth_at) = masked_len(bytes, net);
    let split = bth_at.min(bytes.len());
    compute_split(&bytes[..split], &bytes[split..], net)
}

/// Computes the ICRC of a packet held in two pieces: `headers` (IP header or
/// GRH, and UDP header) and `transport` (BTH through pad, without ICRC). A
/// sender that keeps the transport packet apart from the IP header the kernel
/// will write uses this to avoid copying the payload.
pub fn compute_split(headers: &[u8], transport: &[u8], net: NetHeader) -> u32 {
    let bth_len = transport.len().min(bth::HEADER_LEN);
    compute_split_with(headers, &transport[..bth_len], net, |h| h.update(&transport[bth_len..]))
}

/// A running ICRC over the bytes of a transport packet after its BTH, fed
/// piece by piece ([`compute_split_with`]).
pub struct IcrcHasher(crc32fast::Hasher);

impl IcrcHasher {
    /// Adds the next bytes of the packet.
    #[inline]
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// [`compute_split`] of a transport packet held in more pieces than one:
/// `bth` is its first 12 bytes (the BTH, whose variant bits the ICRC
/// masks; fewer only if the packet is shorter), and `rest` feeds the bytes
/// after it, through pad, in order. A sender that leaves the payload in
/// registered memory computes the ICRC over that memory this way, once.
pub fn compute_split_with(
    headers: &[u8],
    bth: &[u8],
    net: NetHeader,
    rest: impl FnOnce(&mut IcrcHasher),
) -> u32 {
    const MAX_PREFIX: usize = 60 + 8 + bth::HEADER_LEN; // IPv4 with options + UDP + BTH
    let (ip_len, _) = masked_len(headers, net);
    let hdr_len = headers.len().min(MAX_PREFIX - bth::HEADER_LEN);
    let bth_len = bth.len().min(bth::HEADER_LEN);
    let mut prefix = [0u8; MAX_PREFIX];
    prefix[..hdr_len].copy_from_slice(&headers[..hdr_len]);
    prefix[hdr_len..hdr_len + bth_len].copy_from_slice(&bth[..bth_len]);
    let p = &mut prefix[..hdr_len + bth_len];
    let mut mask = |i: usize, v: u8| {
        if let Some(b) = p.get_mut(i) {
            *b |= v;
        }
    };
    match net {
        NetHeader::Ipv4 => {
            mask(ipv4::field::TOS, 0xff);
            mask(ipv4::field::TTL, 0xff);
            mask(ipv4::field::CHECKSUM, 0xff);
            mask(ipv4::field::CHECKSUM + 1, 0xff);
        }
        NetHeader::Ipv6 | NetHeader::Grh => {
            // version nibble stays; traffic class and flow label become ones
            mask(0, 0x0f);
            mask(1, 0xff);
            mask(2, 0xff);
            mask(3, 0xff);
            mask(ipv6::field::HOP_LIMIT, 0xff);
        }
    }
    if net != NetHeader::Grh {
        mask(ip_len + udp::field::CHECKSUM, 0xff);
        mask(ip_len + udp::field::CHECKSUM + 1, 0xff);
    }
    // BTH resv8a (FECN, BECN, reserved)
    mask(hdr_len + 4, 0xff);

    let mut h = IcrcHasher(crc32fast::Hasher::new());
    h.update(&[0xff; 8]);
    h.update(p);
    h.update(&headers[hdr_len..]);
    h.update(&bth[bth_len..]);
    rest(&mut h);
    h.0.finalize()
}

/// Reads the ICRC stored at the end of `packet` (little-endian on the wire).
pub fn read(packet: &[u8]) -> Option<u32> {
    let n = packet.len();
    (n >= ICRC_LEN).then(|| u32::from_le_bytes(packet[n - 4..].try_into().unwrap()))
}

/// Computes the ICRC over `packet[..len-4]` and stores it in the last 4 bytes.
pub fn fill(packet: &mut [u8], net: NetHeader) {
    let n = packet.len();
    let crc = compute(&packet[..n - ICRC_LEN], net);
    packet[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
}

/// Checks the ICRC at the end of `packet` (IP header .. ICRC). Returns the
/// value on the wire and the value computed.
pub fn verify(packet: &[u8], net: NetHeader) -> Result<u32, (u32, u32)> {
    let n = packet.len();
    let got = read(packet).ok_or((0, 0))?;
    let want = compute(&packet[..n - ICRC_LEN], net);
    if got == want {
        Ok(got)
    } else {
        Err((got, want))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_fields_do_not_change_icrc() {
        // IPv4 + UDP + BTH(ACK) + AETH
        let mut p = vec![0u8; 20 + 8 + 12 + 4];
        p[0] = 0x45;
        p[9] = 17;
        p[20 + 2..20 + 4].copy_from_slice(&4791u16.to_be_bytes());
        p[28] = 0x11;
        p[30] = 0xff;
        p[31] = 0xff;
        let a = compute(&p, NetHeader::Ipv4);
        p[1] = 0x03; // ECN CE
        p[8] = 17; // TTL
        p[10] = 0x12; // checksum
        p[20 + 6] = 0x99; // UDP checksum
        p[28 + 4] = 0x80; // FECN
        assert_eq!(compute(&p, NetHeader::Ipv4), a);
        p[4] = 1; // IP identification is covered
        assert_ne!(compute(&p, NetHeader::Ipv4), a);
    }

    #[test]
    fn shortcut_constant_matches_prefix() {
        // Linux rxe seeds its CRC with the state after the eight 0xFF bytes.
        let mut h = crc32fast::Hasher::new_with_initial(!0xdebb_20e3u32);
        h.update(b"roce");
        let mut g = crc32fast::Hasher::new();
        g.update(&[0xff; 8]);
        g.update(b"roce");
        assert_eq!(h.finalize(), g.finalize());
    }
}
