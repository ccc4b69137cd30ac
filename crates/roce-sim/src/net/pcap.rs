//! Trace records as Ethernet frames in a pcap file. Each datagram is wrapped
//! in exactly the headers the engine assumed when it computed the ICRC:
//! IPv4 with Identification 0 (the engine's `ipv4_id`), DF set, TTL = hop
//! limit, TOS = the transmit's traffic class; or IPv6 with that traffic
//! class, flow label and hop limit; UDP with checksum 0. The datagram bytes
//! are copied verbatim, so a corrupted copy shows up with its bad ICRC.

use std::io::Write;
use std::net::IpAddr;

use roce_wire::ethernet::{self, ethertype, EthernetRepr, Mac};
use roce_wire::pcap::{PcapError, PcapWriter};
use roce_wire::{ipv4, ipv6, udp, Ipv4Repr, Ipv6Repr, UdpRepr};

use super::trace::TraceRecord;
use super::HostId;

/// The MAC address of a simulated host (locally administered).
pub fn host_mac(h: HostId) -> Mac {
    let b = (h as u32).to_be_bytes();
    [0x02, 0x52, b[0], b[1], b[2], b[3]]
}

/// The Ethernet frame of a trace record.
pub fn frame(rec: &TraceRecord) -> Vec<u8> {
    let m = &rec.meta;
    let v4 = match (m.src, m.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Some((s, d)),
        _ => None,
    };
    let ip_len = if v4.is_some() { ipv4::HEADER_LEN } else { ipv6::HEADER_LEN };
    let udp_len = udp::HEADER_LEN + rec.bytes.len();
    let eth = EthernetRepr {
        dst: rec.to.map_or([0xff; 6], host_mac),
        src: host_mac(rec.from),
        vlan: None,
        ethertype: if v4.is_some() { ethertype::IPV4 } else { ethertype::IPV6 },
    };
    let eh = eth.header_len();
    let mut f = vec![0u8; eh + ip_len + udp_len];
    eth.emit(&mut f);
    match v4 {
        Some((src, dst)) => Ipv4Repr {
            src,
            dst,
            tos: rec.traffic_class,
            ident: m.ipv4_id.unwrap_or(0),
            dont_frag: true,
            ttl: rec.hop_limit,
        }
        .emit(&mut f[eh..], udp_len),
        None => Ipv6Repr {
            src: to_v6(m.src),
            dst: to_v6(m.dst),
            traffic_class: rec.traffic_class,
            flow_label: rec.flow_label,
            hop_limit: rec.hop_limit,
        }
        .emit(&mut f[eh..], udp_len),
    }
    let u = eh + ip_len;
    UdpRepr { src_port: m.src_port, dst_port: m.dst_port, checksum: false }
        .emit(&mut f[u..], rec.bytes.len());
    f[u + udp::HEADER_LEN..].copy_from_slice(&rec.bytes);
    debug_assert_eq!(ethernet::HEADER_LEN, eh);
    f
}

fn to_v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Writes `records` as a pcap (nanosecond timestamps = the time each copy
/// was sent) and returns the writer.
pub fn write_pcap<'a, W: Write>(
    records: impl IntoIterator<Item = &'a TraceRecord>,
    out: W,
) -> Result<W, PcapError> {
    let mut w = PcapWriter::new(out)?;
    for r in records {
        w.write(std::time::Duration::from_nanos(r.sent.0), &frame(r))?;
    }
    w.finish()
}
