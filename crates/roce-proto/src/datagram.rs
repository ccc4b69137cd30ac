//! Datagrams between the engine and its driver: where one came from or goes
//! to, and the IP/UDP encapsulation its ICRC covers.
//!
//! A datagram is the UDP payload of a RoCEv2 packet (BTH through ICRC); the
//! driver tells the engine the addresses, ports and ECN bits it came with.
//! Since the ICRC covers the IP and UDP headers, the engine rebuilds them from
//! that metadata: IPv4 with DF set, no options, and the Identification the
//! driver reports.
//!
//! * Sending, the engine computes the ICRC for ID 0, the ID an unconnected
//!   Linux UDP socket with DF set writes (`ip_select_ident`); a driver whose
//!   packets leave with another ID (the segments of a GSO send) fixes the
//!   ICRC with [`roce_wire::icrc::Ipv4IdIcrc::delta`].
//! * Receiving, a driver on a UDP socket cannot see the ID (`ipv4_id:
//!   None`). The engine then checks the ICRC for *some* ID and learns which
//!   one ([`IcrcCheck::Ipv4IdInferred`]): a check 16 bits weaker than the
//!   full ICRC (see `roce_wire::icrc::Ipv4IdIcrc`). A driver that sees the
//!   real header passes the ID and gets the full check.

use core::net::IpAddr;

use roce_wire::icrc::{self, NetHeader};

/// Where a datagram came from / goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DatagramMeta {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    /// ECN codepoint of the IP header (0..=3; 3 is CE).
    pub ecn: u8,
    /// IPv4 Identification, if the driver knows it (see module docs).
    pub ipv4_id: Option<u16>,
}

/// What the ICRC check of a received datagram found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcrcCheck {
    /// The ICRC matches the headers as the driver described them (IPv6, or
    /// IPv4 with the Identification given).
    Verified,
    /// IPv4 whose Identification the driver could not see: the ICRC is
    /// right for this ID and for no other (16 of its 32 bits spent on
    /// finding the ID).
    Ipv4IdInferred(u16),
    /// The ICRC does not match: dropped and counted in `icrc_errors`.
    Failed,
    /// Too short to hold a BTH and ICRC, or the addresses mix IPv4 and IPv6:
    /// dropped and counted in `malformed_dropped`.
    Malformed,
}

/// The largest datagram the engine produces (BTH, the longest extension
/// headers, a 4096-byte payload, pad and ICRC), with room to spare: every
/// buffer given to `poll_transmit` must hold one.
pub const MAX_DATAGRAM: usize = 4096 + 128;

/// Datagrams the engine wants sent: `len` bytes at the start of the buffer
/// given to `poll_transmit`. One datagram, or (from
/// `poll_transmit_batch`) several of `segment_size` bytes laid end to end,
/// the last possibly shorter, all with the same addresses: a UDP GSO send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transmit {
    pub meta: DatagramMeta,
    /// DSCP << 2 | ECN, for IP_TOS / IPV6_TCLASS.
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
    /// Bytes in the buffer: the datagram, or all of the batch.
    pub len: usize,
    /// Bytes of each datagram (of each but the last, in a batch).
    pub segment_size: usize,
    /// The source QP (for drivers that shard or trace by QP).
    pub qpn: u32,
}

impl Transmit {
    /// Number of datagrams in the buffer.
    pub fn segments(&self) -> usize {
        self.len.div_ceil(self.segment_size.max(1))
    }
}

/// The ICRC of a RoCEv2 datagram with this metadata: over the IP and UDP
/// headers it travels in, rebuilt from `meta` (see the module docs), and
/// `body` (BTH through pad). `None` if the addresses mix IPv4 and IPv6 or
/// the datagram is too long for IP.
pub fn datagram_icrc(meta: &DatagramMeta, body: &[u8]) -> Option<u32> {
    let (hdr, hlen, net) = ip_udp_header(meta, body.len() + icrc::ICRC_LEN)?;
    Some(icrc::compute_split(&hdr[..hlen], body, net))
}

/// The IP and UDP headers a datagram travels in, as the ICRC sees them.
/// Returns the bytes, their length and the header kind.
pub(crate) fn ip_udp_header(
    meta: &DatagramMeta,
    transport_len: usize,
) -> Option<([u8; 48], usize, NetHeader)> {
    let mut h = [0u8; 48];
    let udp_len = 8 + transport_len;
    let (ip_len, net) = match (meta.src, meta.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = u16::try_from(20 + udp_len).ok()?;
            h[0] = 0x45;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[4..6].copy_from_slice(&meta.ipv4_id.unwrap_or(0).to_be_bytes());
            h[6] = 0x40; // DF
            h[9] = 17;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            (20, NetHeader::Ipv4)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let plen = u16::try_from(udp_len).ok()?;
            h[0] = 0x60;
            h[4..6].copy_from_slice(&plen.to_be_bytes());
            h[6] = 17;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
            (40, NetHeader::Ipv6)
        }
        _ => return None,
    };
    let u = &mut h[ip_len..ip_len + 8];
    u[0..2].copy_from_slice(&meta.src_port.to_be_bytes());
    u[2..4].copy_from_slice(&meta.dst_port.to_be_bytes());
    u[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    Some((h, ip_len + 8, net))
}
