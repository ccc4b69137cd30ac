//! `--pcap`: what the device sent and received, as Ethernet frames.
//!
//! The socket hands the driver UDP payloads; the frame around each is rebuilt
//! the way the engine's ICRC assumed it: IPv4 with Identification 0 and DF,
//! the TOS byte the packet carried, TTL 64, UDP checksum 0; or IPv6. So a
//! capture passes an ICRC check (`roce-pcap-check`) exactly when the engine's
//! ICRC was right. Received IPv4 packets are shown with ID 0 too: a UDP
//! socket does not report the real one.

use core::net::IpAddr;

use roce_proto::DatagramMeta;
use roce_wire::ethernet::{ethertype, EthernetRepr};
use roce_wire::{Ipv4Repr, Ipv6Repr, UdpRepr};

/// Locally administered MACs derived from the IP, so conversations read well.
fn mac(ip: IpAddr) -> [u8; 6] {
    let b = match ip {
        IpAddr::V4(v) => v.octets(),
        IpAddr::V6(v) => v.octets()[12..16].try_into().unwrap(),
    };
    [0x02, 0x00, b[0], b[1], b[2], b[3]]
}

/// The Ethernet frame carrying `datagram` (a RoCEv2 UDP payload).
pub(crate) fn frame(meta: &DatagramMeta, tos: u8, datagram: &[u8]) -> Option<Vec<u8>> {
    let udp = UdpRepr { src_port: meta.src_port, dst_port: meta.dst_port, checksum: false };
    let (ethertype, ip_len) = match meta.src {
        IpAddr::V4(_) => (ethertype::IPV4, 20),
        IpAddr::V6(_) => (ethertype::IPV6, 40),
    };
    let eth = EthernetRepr { dst: mac(meta.dst), src: mac(meta.src), vlan: None, ethertype };
    let total = 14 + ip_len + 8 + datagram.len();
    let mut f = vec![0u8; total];
    eth.emit(&mut f);
    let udp_len = 8 + datagram.len();
    match (meta.src, meta.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let ip = Ipv4Repr { src, dst, tos, ident: meta.ipv4_id.unwrap_or(0), dont_frag: true, ttl: 64 };
            ip.emit(&mut f[14..], udp_len);
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let ip = Ipv6Repr { src, dst, traffic_class: tos, flow_label: 0, hop_limit: 64 };
            ip.emit(&mut f[14..], udp_len);
        }
        _ => return None,
    }
    udp.emit(&mut f[14 + ip_len..], datagram.len());
    f[14 + ip_len + 8..].copy_from_slice(datagram);
    Some(f)
}
