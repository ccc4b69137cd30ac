//! The encapsulation of a RoCEv2 transport packet: the IPv4 or IPv6 header
//! and the UDP header in front of it, and the Ethernet frame around them.
//!
//! ```text
//! Eth [802.1Q] | IPv4 (20 bytes, DF, no options) or IPv6 (40) | UDP (8) | BTH .. pad | ICRC
//! ```
//!
//! An [`EncapRepr`] holds everything those headers carry. It writes them
//! for a transport packet of a given length ([`EncapRepr::emit_ip_udp`]),
//! computes the ICRC of a transport packet as it travels in them
//! ([`EncapRepr::icrc`], IBTA Annex A17.3.3), and emits a whole frame around
//! a datagram ([`EncapRepr::emit_frame`], [`EncapRepr::frame_to_vec`]).
//!
//! The ICRC covers the IP and UDP headers with the fields that may change in
//! flight masked (TOS, TTL and the header checksum of IPv4; traffic class,
//! flow label and hop limit of IPv6; the UDP checksum: see `icrc`). Those
//! fields of an `EncapRepr` can therefore be anything when it is only used
//! for the ICRC; the IPv4 Identification is covered and must be the one the
//! packet carries.

use core::net::IpAddr;

use crate::error::{Result, WireError};
use crate::ethernet::EthernetRepr;
use crate::frame::NetRepr;
use crate::icrc::{self, NetHeader, ICRC_LEN};
use crate::ipv4::{self, Ipv4Repr};
use crate::ipv6::{self, Ipv6Repr};
use crate::udp::{self, UdpRepr};

/// The longest IP + UDP header: IPv6 (40 bytes) and UDP (8).
pub const MAX_HEADER_LEN: usize = ipv6::HEADER_LEN + udp::HEADER_LEN;

/// The IP and UDP headers of a RoCEv2 datagram. IPv4 headers have DF set
/// and no options (RoCEv2 packets are never fragmented).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EncapRepr {
    /// Source address; the same family as `dst`.
    pub src: IpAddr,
    pub dst: IpAddr,
    /// UDP source port: flow entropy for ECMP (Annex A17.4.2).
    pub src_port: u16,
    /// UDP destination port (`udp::ROCE_PORT` for RoCEv2).
    pub dst_port: u16,
    /// IPv4 Identification (unused over IPv6). The ICRC covers it.
    pub ident: u16,
    /// IPv4 TOS or IPv6 traffic class: DSCP << 2 | ECN. Masked in the ICRC.
    pub tos: u8,
    /// IPv4 TTL or IPv6 hop limit. Masked in the ICRC.
    pub ttl: u8,
    /// IPv6 flow label (20 bits; unused over IPv4). Masked in the ICRC.
    pub flow_label: u32,
    /// Whether a frame carries a computed UDP checksum (`false`: zero, "no
    /// checksum"). Masked in the ICRC.
    pub udp_checksum: bool,
}

impl EncapRepr {
    /// The headers as the `frame` module describes them, for a transport
    /// packet of `transport_len` bytes (BTH through ICRC). Fails if the
    /// addresses mix IPv4 and IPv6, or the packet is too long for the
    /// 16-bit length field (IPv4's Total Length counts its header, IPv6's
    /// Payload Length does not).
    pub fn net_repr(&self, transport_len: usize) -> Result<NetRepr> {
        let udp = UdpRepr { src_port: self.src_port, dst_port: self.dst_port, checksum: self.udp_checksum };
        let (net, length_field) = match (self.src, self.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let ip =
                    Ipv4Repr { src, dst, tos: self.tos, ident: self.ident, dont_frag: true, ttl: self.ttl };
                (NetRepr::Ipv4(ip, udp), ipv4::HEADER_LEN + udp::HEADER_LEN + transport_len)
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                let ip = Ipv6Repr {
                    src,
                    dst,
                    traffic_class: self.tos,
                    flow_label: self.flow_label,
                    hop_limit: self.ttl,
                };
                (NetRepr::Ipv6(ip, udp), udp::HEADER_LEN + transport_len)
            }
            (src, dst) => return Err(WireError::MixedIpFamilies { src, dst }),
        };
        if length_field > usize::from(u16::MAX) {
            return Err(WireError::PayloadTooLarge(transport_len));
        }
        Ok(net)
    }

    /// Bytes of IP and UDP header: 28 over IPv4, 48 over IPv6. Fails if the
    /// addresses mix IPv4 and IPv6.
    pub fn header_len(&self) -> Result<usize> {
        self.net_repr(0).map(|n| n.header_len())
    }

    /// Writes the IP and UDP headers of a transport packet of
    /// `transport_len` bytes (BTH through ICRC) into the start of `buf`:
    /// lengths derived, the IPv4 header checksum computed, the UDP checksum
    /// zero (it needs the payload: see [`EncapRepr::emit_frame`]). Returns
    /// the header length and the header kind the ICRC needs.
    pub fn emit_ip_udp(&self, buf: &mut [u8], transport_len: usize) -> Result<(usize, NetHeader)> {
        self.emit_headers(buf, transport_len, true)
    }

    /// The ICRC of `transport` (BTH through pad, without the ICRC) carried
    /// in these headers (Annex A17.3.3). The headers are built on the stack
    /// (without the IPv4 checksum, which the ICRC masks, as it masks the
    /// other variant fields: `icrc::compute_split` applies the masks).
    #[inline]
    pub fn icrc(&self, transport: &[u8]) -> Result<u32> {
        let mut h = [0u8; MAX_HEADER_LEN];
        let (n, net) = self.emit_headers(&mut h, transport.len() + ICRC_LEN, false)?;
        Ok(icrc::compute_split(&h[..n], transport, net))
    }

    /// [`EncapRepr::icrc`] of a transport packet of `transport_len` bytes
    /// (BTH through pad) held in pieces: `bth` is its first 12 bytes and
    /// `rest` feeds the others in order (`icrc::compute_split_with`).
    #[inline]
    pub fn icrc_with(
        &self,
        transport_len: usize,
        bth: &[u8],
        rest: impl FnOnce(&mut icrc::IcrcHasher),
    ) -> Result<u32> {
        let mut h = [0u8; MAX_HEADER_LEN];
        let (n, net) = self.emit_headers(&mut h, transport_len + ICRC_LEN, false)?;
        Ok(icrc::compute_split_with(&h[..n], bth, net, rest))
    }

    /// [`EncapRepr::emit_ip_udp`], the IPv4 checksum computed or left zero.
    /// Builds the headers straight from the fields: this runs for every
    /// packet sent and received.
    #[inline(always)]
    fn emit_headers(
        &self,
        buf: &mut [u8],
        transport_len: usize,
        ip_checksum: bool,
    ) -> Result<(usize, NetHeader)> {
        let udp = UdpRepr { src_port: self.src_port, dst_port: self.dst_port, checksum: self.udp_checksum };
        let udp_len = udp::HEADER_LEN + transport_len;
        let (ip_len, net) = match (self.src, self.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                if ipv4::HEADER_LEN + udp_len > usize::from(u16::MAX) {
                    return Err(WireError::PayloadTooLarge(transport_len));
                }
                let need = ipv4::HEADER_LEN + udp::HEADER_LEN;
                if buf.len() < need {
                    return Err(WireError::BufferTooSmall { need, have: buf.len() });
                }
                let ip =
                    Ipv4Repr { src, dst, tos: self.tos, ident: self.ident, dont_frag: true, ttl: self.ttl };
                if ip_checksum {
                    ip.emit(buf, udp_len);
                } else {
                    ip.emit_without_checksum(buf, udp_len);
                }
                (ipv4::HEADER_LEN, NetHeader::Ipv4)
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                if udp_len > usize::from(u16::MAX) {
                    return Err(WireError::PayloadTooLarge(transport_len));
                }
                let need = ipv6::HEADER_LEN + udp::HEADER_LEN;
                if buf.len() < need {
                    return Err(WireError::BufferTooSmall { need, have: buf.len() });
                }
                let ip = Ipv6Repr {
                    src,
                    dst,
                    traffic_class: self.tos,
                    flow_label: self.flow_label,
                    hop_limit: self.ttl,
                };
                ip.emit(buf, udp_len);
                (ipv6::HEADER_LEN, NetHeader::Ipv6)
            }
            (src, dst) => return Err(WireError::MixedIpFamilies { src, dst }),
        };
        udp.emit(&mut buf[ip_len..], transport_len);
        Ok((ip_len + udp::HEADER_LEN, net))
    }

    /// Length of the frame [`EncapRepr::emit_frame`] writes around a
    /// datagram of `datagram_len` bytes.
    pub fn frame_len(&self, eth: &EthernetRepr, datagram_len: usize) -> Result<usize> {
        Ok(eth.header_len() + self.net_repr(datagram_len)?.header_len() + datagram_len)
    }

    /// Writes the Ethernet frame carrying `datagram` (the UDP payload: BTH
    /// through ICRC, copied as it is) into `buf`: `eth` with the EtherType
    /// of the IP version, the IP and UDP headers, and the UDP checksum if
    /// `udp_checksum` asks for it. Returns the frame length; no padding to
    /// the Ethernet minimum and no FCS are added.
    pub fn emit_frame(&self, eth: &EthernetRepr, datagram: &[u8], buf: &mut [u8]) -> Result<usize> {
        let net = self.net_repr(datagram.len())?;
        let (eh, hl) = (eth.header_len(), net.header_len());
        let total = eh + hl + datagram.len();
        if buf.len() < total {
            return Err(WireError::BufferTooSmall { need: total, have: buf.len() });
        }
        EthernetRepr { ethertype: net.ethertype(), ..*eth }.emit(buf);
        let packet = &mut buf[eh..total];
        self.emit_ip_udp(packet, datagram.len())?;
        packet[hl..].copy_from_slice(datagram);
        if self.udp_checksum {
            let (ip_len, addrs) = match net {
                NetRepr::Ipv4(..) => (ipv4::HEADER_LEN, ipv4::field::SRC..ipv4::field::DST + 4),
                _ => (ipv6::HEADER_LEN, ipv6::field::SRC..ipv6::field::DST + 16),
            };
            let (head, dgram) = packet.split_at_mut(ip_len);
            let sum = udp::checksum(&head[addrs], dgram);
            dgram[udp::field::CHECKSUM..udp::field::CHECKSUM + 2].copy_from_slice(&sum.to_be_bytes());
        }
        Ok(total)
    }

    /// [`EncapRepr::emit_frame`] into a new vector.
    pub fn frame_to_vec(&self, eth: &EthernetRepr, datagram: &[u8]) -> Result<Vec<u8>> {
        let mut v = vec![0; self.frame_len(eth, datagram.len())?];
        self.emit_frame(eth, datagram, &mut v)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethernet::{ethertype, VlanTag};
    use crate::frame::{self, ParseOptions, RoceFrameRepr};
    use crate::ipv4::Ipv4Packet;
    use crate::ipv6::Ipv6Packet;
    use crate::udp::{UdpPacket, ROCE_PORT};
    use crate::{BthRepr, ExtHeaders, Psn, RethRepr, RocePacketRepr};
    use core::net::{Ipv4Addr, Ipv6Addr};

    fn v4() -> EncapRepr {
        EncapRepr {
            src: Ipv4Addr::new(10, 0, 0, 1).into(),
            dst: Ipv4Addr::new(10, 0, 0, 2).into(),
            src_port: 0xc0de,
            dst_port: ROCE_PORT,
            ident: 0x1234,
            tos: 0x1a,
            ttl: 63,
            flow_label: 0xabcde,
            udp_checksum: false,
        }
    }

    fn v6() -> EncapRepr {
        EncapRepr {
            src: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1).into(),
            dst: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2).into(),
            ..v4()
        }
    }

    /// An RDMA WRITE Only of `payload` bytes: BTH through ICRC, ICRC zero.
    fn transport(payload: usize) -> Vec<u8> {
        let data: Vec<u8> = (0..payload).map(|i| (i * 7) as u8).collect();
        let p = RocePacketRepr {
            bth: BthRepr {
                opcode: 0x0a, // RC_RDMA_WRITE_ONLY
                solicited: false,
                mig_req: false,
                pkey: 0xffff,
                fecn: true,
                becn: false,
                dest_qp: 0x11,
                ack_req: false,
                psn: Psn::new(0xfffffe),
            },
            ext: ExtHeaders {
                reth: Some(RethRepr { va: 0x1000, rkey: 0x42, dma_len: payload as u32 }),
                ..ExtHeaders::default()
            },
            payload: &data,
        };
        let mut v = vec![0; p.buffer_len().unwrap()];
        p.emit(&mut v).unwrap();
        v
    }

    #[test]
    fn ipv4_headers_parse_back() {
        let e = v4();
        let mut h = [0xaa; MAX_HEADER_LEN];
        assert_eq!(e.emit_ip_udp(&mut h, 1052), Ok((28, NetHeader::Ipv4)));
        assert_eq!(e.header_len(), Ok(28));
        let ip = Ipv4Packet::new_checked(&h[..]).unwrap();
        let (repr, total) = Ipv4Repr::parse(&ip).unwrap();
        assert_eq!(
            repr,
            Ipv4Repr {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                tos: 0x1a,
                ident: 0x1234,
                dont_frag: true,
                ttl: 63,
            }
        );
        assert_eq!(total, 20 + 8 + 1052);
        let u = UdpPacket::new_checked(&h[20..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.len(), u.checksum()), (0xc0de, ROCE_PORT, 8 + 1052, 0));
    }

    #[test]
    fn ipv6_headers_parse_back() {
        let e = v6();
        let mut h = [0xaa; MAX_HEADER_LEN];
        assert_eq!(e.emit_ip_udp(&mut h, 16), Ok((48, NetHeader::Ipv6)));
        assert_eq!(e.header_len(), Ok(48));
        let ip = Ipv6Packet::new_checked(&h[..]).unwrap();
        let (repr, total) = Ipv6Repr::parse(&ip).unwrap();
        assert_eq!(
            repr,
            Ipv6Repr {
                src: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
                dst: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2),
                traffic_class: 0x1a,
                flow_label: 0xabcde,
                hop_limit: 63,
            }
        );
        assert_eq!(total, 40 + 8 + 16);
        let u = UdpPacket::new_checked(&h[40..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.len(), u.checksum()), (0xc0de, ROCE_PORT, 8 + 16, 0));
    }

    /// The ICRC equals `icrc::compute` over the assembled packet, for every
    /// value of the masked fields, and follows the IPv4 Identification.
    #[test]
    fn icrc_matches_the_assembled_packet() {
        for e in [v4(), v6()] {
            for payload in [0, 1, 5, 1024] {
                let t = transport(payload);
                let body = &t[..t.len() - ICRC_LEN];
                let mut packet = vec![0; MAX_HEADER_LEN + t.len()];
                let (n, net) = e.emit_ip_udp(&mut packet, t.len()).unwrap();
                packet.truncate(n + t.len());
                packet[n..].copy_from_slice(&t);
                let want = icrc::compute(&packet[..packet.len() - ICRC_LEN], net);
                assert_eq!(e.icrc(body), Ok(want), "{net:?} payload {payload}");
                let masked = EncapRepr { tos: 3, ttl: 1, flow_label: 7, udp_checksum: true, ..e };
                assert_eq!(masked.icrc(body), Ok(want), "masked fields changed the ICRC");
                let other = EncapRepr { src_port: e.src_port ^ 1, ..e };
                assert_ne!(other.icrc(body), Ok(want), "the UDP port is covered");
            }
        }
        let t = transport(64);
        let body = &t[..t.len() - ICRC_LEN];
        let (a, b) = (EncapRepr { ident: 0, ..v4() }, EncapRepr { ident: 9, ..v4() });
        let delta = icrc::Ipv4IdIcrc::new(t.len() - ICRC_LEN).delta(9);
        assert_eq!(b.icrc(body), a.icrc(body).map(|c| c ^ delta), "the Identification is covered");
        // Over IPv6 there is no Identification.
        assert_eq!(EncapRepr { ident: 9, ..v6() }.icrc(body), v6().icrc(body));
    }

    /// Frames parse back whole; with the UDP checksum asked for it verifies.
    #[test]
    fn frames_parse_back_and_the_udp_checksum_verifies() {
        let vlan = Some(VlanTag { pcp: 3, dei: false, vid: 100 });
        for e in [v4(), v6()] {
            for (udp_checksum, vlan) in [(false, None), (true, None), (true, vlan)] {
                let e = EncapRepr { udp_checksum, ..e };
                let mut t = transport(100);
                let crc = e.icrc(&t[..t.len() - ICRC_LEN]).unwrap();
                let n = t.len();
                t[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
                let eth =
                    EthernetRepr { dst: [2, 0, 0, 0, 0, 1], src: [2, 0, 0, 0, 0, 2], vlan, ethertype: 0 };
                let f = e.frame_to_vec(&eth, &t).unwrap();
                assert_eq!(f.len(), e.frame_len(&eth, t.len()).unwrap());
                let mut buf = vec![0x55; f.len() + 3];
                assert_eq!(e.emit_frame(&eth, &t, &mut buf), Ok(f.len()));
                assert_eq!(&buf[..f.len()], &f[..]);
                assert_eq!(
                    e.emit_frame(&eth, &t, &mut buf[..f.len() - 1]),
                    Err(WireError::BufferTooSmall { need: f.len(), have: f.len() - 1 })
                );

                let loc = frame::locate(&f, ROCE_PORT).unwrap();
                assert_eq!(loc.transport, &t[..]);
                assert_eq!(loc.eth.vlan, vlan);
                let want_type = if e.src.is_ipv4() { ethertype::IPV4 } else { ethertype::IPV6 };
                assert_eq!(loc.eth.ethertype, want_type);
                assert_eq!(loc.net, e.net_repr(t.len()).unwrap());
                let (ip_len, addrs) = match loc.net {
                    NetRepr::Ipv4(..) => (20, 12..20),
                    _ => (40, 8..40),
                };
                let u = UdpPacket::new_checked(&loc.net_bytes[ip_len..]).unwrap();
                assert_eq!(u.checksum() != 0, udp_checksum);
                if udp_checksum {
                    assert!(udp::verify(&loc.net_bytes[addrs], &loc.net_bytes[ip_len..]));
                }
                // ICRC and transport check out too.
                assert!(RoceFrameRepr::parse(&f, &ParseOptions::default()).is_ok());
            }
        }
    }

    #[test]
    fn mixed_families_are_refused() {
        let (a4, a6) = (v4().src, v6().dst);
        for (src, dst) in [(a4, a6), (a6, a4)] {
            let e = EncapRepr { src, dst, ..v4() };
            let want = WireError::MixedIpFamilies { src, dst };
            let mut h = [0; MAX_HEADER_LEN];
            assert_eq!(e.emit_ip_udp(&mut h, 16).unwrap_err(), want);
            assert_eq!(e.header_len().unwrap_err(), want);
            assert_eq!(e.icrc(&[0; 12]).unwrap_err(), want);
            assert_eq!(e.frame_to_vec(&EthernetRepr::default(), &[0; 16]).unwrap_err(), want);
            assert_eq!(want.kind(), "ip_family_mismatch");
        }
    }

    #[test]
    fn lengths_past_the_ip_limits_are_refused() {
        let mut h = [0; MAX_HEADER_LEN];
        let max4 = 65_535 - 28;
        assert!(v4().emit_ip_udp(&mut h, max4).is_ok());
        assert_eq!(v4().emit_ip_udp(&mut h, max4 + 1), Err(WireError::PayloadTooLarge(max4 + 1)));
        let max6 = 65_535 - 8;
        assert!(v6().emit_ip_udp(&mut h, max6).is_ok());
        assert_eq!(v6().emit_ip_udp(&mut h, max6 + 1), Err(WireError::PayloadTooLarge(max6 + 1)));
        assert_eq!(v6().emit_ip_udp(&mut h[..47], 16), Err(WireError::BufferTooSmall { need: 48, have: 47 }));
    }
}
