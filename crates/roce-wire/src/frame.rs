//! Whole frames: Ethernet [802.1Q] | IPv4 or IPv6 | UDP | transport packet
//! (RoCEv2, IBTA Annex A17), or Ethernet | GRH | transport packet (RoCEv1,
//! Annex A16).
//!
//! Parsing order follows what a receiving NIC does: decide whether the frame is
//! RoCE at all (EtherType, IP protocol, UDP destination port), validate the
//! network headers (lengths, IPv4 checksum, no fragments, UDP length and
//! checksum), verify the ICRC, then parse the transport packet.

use crate::error::{Header, Result, WireError};
use crate::ethernet::{ethertype, EthernetFrame, EthernetRepr};
use crate::grh::GrhRepr;
use crate::icrc::{self, NetHeader};
use crate::ipv4::{self, Ipv4Packet, Ipv4Repr};
use crate::ipv6::{self, Ipv6Packet, Ipv6Repr};
use crate::packet::{RocePacket, RocePacketRepr};
use crate::udp::{self, UdpPacket, UdpRepr, ROCE_PORT};

/// What the parser checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseOptions {
    /// UDP destination port that marks RoCEv2 traffic.
    pub port: u16,
    /// Verify the ICRC (an `IcrcBad` error when wrong).
    pub verify_icrc: bool,
    /// Apply the responder rules of `RocePacketRepr::check` with this path MTU
    /// (`Some`), or without MTU rules (`None`, still checking the rest).
    pub pmtu: Option<usize>,
    /// Apply `RocePacketRepr::check` at all.
    pub check_rules: bool,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions { port: ROCE_PORT, verify_icrc: true, pmtu: None, check_rules: true }
    }
}

/// Network and UDP headers in front of the transport packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetRepr {
    /// RoCEv2 over IPv4.
    Ipv4(Ipv4Repr, UdpRepr),
    /// RoCEv2 over IPv6.
    Ipv6(Ipv6Repr, UdpRepr),
    /// RoCEv1.
    Grh(GrhRepr),
}

impl NetRepr {
    #[inline]
    pub fn icrc_kind(&self) -> NetHeader {
        match self {
            NetRepr::Ipv4(..) => NetHeader::Ipv4,
            NetRepr::Ipv6(..) => NetHeader::Ipv6,
            NetRepr::Grh(_) => NetHeader::Grh,
        }
    }
    pub(crate) fn ethertype(&self) -> u16 {
        match self {
            NetRepr::Ipv4(..) => ethertype::IPV4,
            NetRepr::Ipv6(..) => ethertype::IPV6,
            NetRepr::Grh(_) => ethertype::ROCE_V1,
        }
    }
    /// Bytes of network + UDP headers.
    #[inline]
    pub fn header_len(&self) -> usize {
        match self {
            NetRepr::Ipv4(..) => ipv4::HEADER_LEN + udp::HEADER_LEN,
            NetRepr::Ipv6(..) => ipv6::HEADER_LEN + udp::HEADER_LEN,
            NetRepr::Grh(_) => ipv6::HEADER_LEN,
        }
    }
    pub fn udp(&self) -> Option<&UdpRepr> {
        match self {
            NetRepr::Ipv4(_, u) | NetRepr::Ipv6(_, u) => Some(u),
            NetRepr::Grh(_) => None,
        }
    }
    /// ECN codepoint of the IP header (0 for RoCEv1).
    pub fn ecn(&self) -> u8 {
        match self {
            NetRepr::Ipv4(ip, _) => ip.ecn(),
            NetRepr::Ipv6(ip, _) => ip.ecn(),
            NetRepr::Grh(g) => g.traffic_class & 3,
        }
    }
    /// Source and destination as text.
    pub fn endpoints(&self) -> (String, String) {
        match self {
            NetRepr::Ipv4(ip, _) => (ip.src.to_string(), ip.dst.to_string()),
            NetRepr::Ipv6(ip, _) => (ip.src.to_string(), ip.dst.to_string()),
            NetRepr::Grh(g) => {
                (core::net::Ipv6Addr::from(g.sgid).to_string(), core::net::Ipv6Addr::from(g.dgid).to_string())
            }
        }
    }
}

/// Where the parts of a RoCE frame are, after the network layers were checked
/// and before the ICRC and transport packet are looked at.
#[derive(Debug, Clone, Copy)]
pub struct Located<'a> {
    pub eth: EthernetRepr,
    pub net: NetRepr,
    /// The network packet: IP header (or GRH) through ICRC.
    pub net_bytes: &'a [u8],
    /// The transport packet: BTH through ICRC.
    pub transport: &'a [u8],
    /// Bytes after the network packet (Ethernet padding, FCS).
    pub trailer: &'a [u8],
}

/// Finds and validates the network layers of a frame. Errors for which
/// `WireError::is_not_roce` holds mean the frame is other traffic.
#[inline]
pub fn locate(frame: &[u8], port: u16) -> Result<Located<'_>> {
    let eth_view = EthernetFrame::new_checked(frame)?;
    let eth = EthernetRepr::parse(&eth_view)?;
    let l3 = &frame[eth_view.header_len()..];
    match eth.ethertype {
        ethertype::IPV4 => locate_ipv4(eth, l3, port),
        ethertype::IPV6 => locate_ipv6(eth, l3, port),
        ethertype::ROCE_V1 => locate_grh(eth, l3),
        other => Err(WireError::NotIp(other)),
    }
}

#[inline]
fn locate_ipv4(eth: EthernetRepr, l3: &[u8], port: u16) -> Result<Located<'_>> {
    let ip = Ipv4Packet::new_checked(l3)?;
    if ip.version() != 4 {
        return Err(WireError::IpVersion(ip.version()));
    }
    if ip.protocol() != ipv4::PROTO_UDP {
        return Err(WireError::NotUdp(ip.protocol()));
    }
    let hl = ip.header_len();
    if hl < ipv4::HEADER_LEN {
        return Err(WireError::Ipv4HeaderLen(hl));
    }
    let udp_view = UdpPacket::new_checked(l3.get(hl..).unwrap_or(&[]))?;
    if udp_view.dst_port() != port {
        return Err(WireError::WrongPort(udp_view.dst_port()));
    }
    let total = usize::from(ip.total_len());
    if total > l3.len() || total < hl + udp::HEADER_LEN {
        return Err(WireError::IpLength { ip_len: total, avail: l3.len() });
    }
    let (repr, _) = Ipv4Repr::parse(&ip)?;
    let net_bytes = &l3[..total];
    let udp_repr = check_udp(net_bytes, hl, &net_bytes[ipv4::field::SRC..ipv4::field::DST + 4])?;
    Ok(Located {
        eth,
        net: NetRepr::Ipv4(repr, udp_repr),
        net_bytes,
        transport: &net_bytes[hl + udp::HEADER_LEN..],
        trailer: &l3[total..],
    })
}

#[inline]
fn locate_ipv6(eth: EthernetRepr, l3: &[u8], port: u16) -> Result<Located<'_>> {
    let ip = Ipv6Packet::new_checked(l3)?;
    let hl = ipv6::HEADER_LEN;
    // Classify first: other traffic (ICMPv6, MLD behind a hop-by-hop header,
    // other UDP ports) is not RoCE; UDP to the port behind extension headers is
    // RoCE that breaks Annex A17's rules.
    let (proto, udp_at) = skip_ipv6_extensions(l3, ip.next_header());
    if proto != ipv4::PROTO_UDP {
        return Err(WireError::NotUdp(proto));
    }
    let udp_view = UdpPacket::new_checked(l3.get(udp_at..).unwrap_or(&[]))?;
    if udp_view.dst_port() != port {
        return Err(WireError::WrongPort(udp_view.dst_port()));
    }
    let (repr, total) = Ipv6Repr::parse(&ip)?;
    if total > l3.len() || total < hl + udp::HEADER_LEN {
        return Err(WireError::IpLength { ip_len: total, avail: l3.len() });
    }
    let net_bytes = &l3[..total];
    let udp_repr = check_udp(net_bytes, hl, &net_bytes[ipv6::field::SRC..ipv6::field::DST + 16])?;
    Ok(Located {
        eth,
        net: NetRepr::Ipv6(repr, udp_repr),
        net_bytes,
        transport: &net_bytes[hl + udp::HEADER_LEN..],
        trailer: &l3[total..],
    })
}

#[inline]
fn locate_grh(eth: EthernetRepr, l3: &[u8]) -> Result<Located<'_>> {
    let grh = Ipv6Packet::new_checked(l3).map_err(|e| match e {
        WireError::Truncated { need, have, .. } => WireError::Truncated { header: Header::Grh, need, have },
        e => e,
    })?;
    let (repr, total) = GrhRepr::parse(&grh)?;
    if total > l3.len() {
        return Err(WireError::IpLength { ip_len: total, avail: l3.len() });
    }
    let net_bytes = &l3[..total];
    Ok(Located {
        eth,
        net: NetRepr::Grh(repr),
        net_bytes,
        transport: &net_bytes[ipv6::HEADER_LEN..],
        trailer: &l3[total..],
    })
}

/// Follows IPv6 extension headers (hop-by-hop, routing, fragment, destination
/// options) to the upper-layer protocol. Returns it and its offset.
#[inline]
fn skip_ipv6_extensions(l3: &[u8], mut nh: u8) -> (u8, usize) {
    let mut at = ipv6::HEADER_LEN;
    while matches!(nh, 0 | 43 | 44 | 60) {
        let Some(h) = l3.get(at..at + 2) else {
            return (nh, at);
        };
        let len = if nh == 44 { 8 } else { (usize::from(h[1]) + 1) * 8 };
        nh = h[0];
        at += len;
    }
    (nh, at)
}

/// UDP length must match the IP payload; a non-zero checksum must verify.
#[inline]
fn check_udp(net_bytes: &[u8], hl: usize, addrs: &[u8]) -> Result<UdpRepr> {
    let dgram = &net_bytes[hl..];
    let u = UdpPacket::new_unchecked(dgram);
    if usize::from(u.len()) != dgram.len() {
        return Err(WireError::UdpLength { udp_len: usize::from(u.len()), ip_payload: dgram.len() });
    }
    if u.checksum() != 0 && !udp::verify(addrs, dgram) {
        return Err(WireError::UdpChecksum(u.checksum()));
    }
    UdpRepr::parse(&u)
}

/// A whole RoCE frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceFrameRepr<'a> {
    /// Ethernet header; its EtherType is derived from `net` on emit.
    pub eth: EthernetRepr,
    pub net: NetRepr,
    pub packet: RocePacketRepr<'a>,
    /// Zero bytes after the network packet (Ethernet minimum-size padding).
    pub padding: usize,
}

impl<'a> RoceFrameRepr<'a> {
    /// Parses a frame: network layers, ICRC (if asked), transport packet, and
    /// the responder rules (if asked).
    pub fn parse(frame: &'a [u8], opts: &ParseOptions) -> Result<RoceFrameRepr<'a>> {
        let loc = locate(frame, opts.port)?;
        if loc.transport.len() < crate::packet::MIN_LEN {
            return Err(WireError::TruncatedBth { have: loc.transport.len() });
        }
        if opts.verify_icrc {
            icrc::verify(loc.net_bytes, loc.net.icrc_kind())
                .map_err(|(got, want)| WireError::IcrcBad { got, want })?;
        }
        let view = RocePacket::new_checked(loc.transport)?;
        let packet = RocePacketRepr::parse_view(&view)?;
        if opts.check_rules {
            packet.check(opts.pmtu)?;
        }
        let padding = if loc.trailer.iter().all(|&b| b == 0) { loc.trailer.len() } else { 0 };
        Ok(RoceFrameRepr { eth: loc.eth, net: loc.net, packet, padding })
    }

    /// Frame length on the wire.
    pub fn buffer_len(&self) -> Result<usize> {
        Ok(self.eth.header_len() + self.net.header_len() + self.packet.buffer_len()? + self.padding)
    }

    /// Writes the frame into `buf`: headers with derived lengths and checksums,
    /// the transport packet, its ICRC, then the padding. Returns the length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = self.buffer_len()?;
        if buf.len() < total {
            return Err(WireError::BufferTooSmall { need: total, have: buf.len() });
        }
        let roce_len = self.packet.buffer_len()?;
        let ip_total = self.net.header_len() + roce_len;
        // The 16-bit length field: IPv4's Total Length counts its header, the
        // Payload Length of IPv6 and the GRH's PayLen do not.
        let length_field = match self.net {
            NetRepr::Ipv4(..) => ip_total,
            NetRepr::Ipv6(..) | NetRepr::Grh(_) => ip_total - ipv6::HEADER_LEN,
        };
        if length_field > usize::from(u16::MAX) {
            return Err(WireError::PayloadTooLarge(self.packet.payload.len()));
        }
        let mut eth = self.eth;
        eth.ethertype = self.net.ethertype();
        let eh = eth.header_len();
        eth.emit(buf);
        let net = &mut buf[eh..eh + ip_total];
        let (hl, addrs) = match &self.net {
            NetRepr::Ipv4(ip, u) => {
                ip.emit(net, ip_total - ipv4::HEADER_LEN);
                u.emit(&mut net[ipv4::HEADER_LEN..], roce_len);
                (ipv4::HEADER_LEN, ipv4::field::SRC..ipv4::field::DST + 4)
            }
            NetRepr::Ipv6(ip, u) => {
                ip.emit(net, ip_total - ipv6::HEADER_LEN);
                u.emit(&mut net[ipv6::HEADER_LEN..], roce_len);
                (ipv6::HEADER_LEN, ipv6::field::SRC..ipv6::field::DST + 16)
            }
            NetRepr::Grh(g) => {
                g.emit(net, ip_total - ipv6::HEADER_LEN);
                (ipv6::HEADER_LEN, 0..0)
            }
        };
        let start = self.net.header_len();
        self.packet.emit(&mut net[start..])?;
        icrc::fill(net, self.net.icrc_kind());
        if self.net.udp().is_some_and(|u| u.checksum) {
            let (head, dgram) = net.split_at_mut(hl);
            let sum = udp::checksum(&head[addrs], dgram);
            dgram[udp::field::CHECKSUM..udp::field::CHECKSUM + 2].copy_from_slice(&sum.to_be_bytes());
        }
        buf[eh + ip_total..total].fill(0);
        Ok(total)
    }

    /// Emits into a new vector.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v = vec![0; self.buffer_len()?];
        self.emit(&mut v)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BthRepr, ExtHeaders, Psn};
    use core::net::{Ipv4Addr, Ipv6Addr};

    fn send_only(net: NetRepr, payload: &[u8]) -> RoceFrameRepr<'_> {
        RoceFrameRepr {
            eth: EthernetRepr {
                dst: [2, 0, 0, 0, 0, 1],
                src: [2, 0, 0, 0, 0, 2],
                vlan: None,
                ethertype: net.ethertype(),
            },
            net,
            packet: RocePacketRepr {
                bth: BthRepr {
                    opcode: 0x04, // RC_SEND_ONLY
                    solicited: false,
                    mig_req: false,
                    pkey: 0xffff,
                    fecn: false,
                    becn: false,
                    dest_qp: 0x11,
                    ack_req: true,
                    psn: Psn::new(7),
                },
                ext: ExtHeaders::default(),
                payload,
            },
            padding: 0,
        }
    }

    /// Regression: emit capped every network packet at 65535 bytes, but the
    /// IPv6 Payload Length and the GRH PayLen leave out the 40-byte header, so
    /// such packets may be up to 65575 bytes. The parser accepted those frames
    /// and `to_vec` then failed on them with `PayloadTooLarge`.
    #[test]
    fn ipv6_and_grh_packets_past_64k_round_trip() {
        let udp = UdpRepr { src_port: 0xc000, dst_port: ROCE_PORT, checksum: false };
        let v6 = NetRepr::Ipv6(
            Ipv6Repr {
                src: Ipv6Addr::LOCALHOST,
                dst: Ipv6Addr::LOCALHOST,
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
            },
            udp,
        );
        let grh = NetRepr::Grh(GrhRepr {
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 1,
            sgid: [1; 16],
            dgid: [2; 16],
        });
        let v4 = NetRepr::Ipv4(
            Ipv4Repr {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                tos: 0,
                ident: 0,
                dont_frag: true,
                ttl: 64,
            },
            udp,
        );
        // BTH + ICRC
        let roce = |payload: usize| 12 + payload + 4;
        let big = vec![0x5a; 65_600];
        // (network, largest payload whose 16-bit length field fits)
        for (net, max) in [(v6, 65_535 - 8 - roce(0)), (grh, 65_535 - roce(0)), (v4, 65_535 - 28 - roce(0))] {
            let max = max & !3;
            let frame = send_only(net, &big[..max]);
            let bytes = frame.to_vec().unwrap_or_else(|e| panic!("{net:?}: {e}"));
            assert_eq!(RoceFrameRepr::parse(&bytes, &ParseOptions::default()), Ok(frame));
            assert!(matches!(
                send_only(net, &big[..max + 4]).to_vec(),
                Err(WireError::PayloadTooLarge(n)) if n == max + 4
            ));
        }
    }
}
