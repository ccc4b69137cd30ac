//! Trace records as Ethernet frames in a pcap file. Each datagram is wrapped
//! in exactly the headers the engine assumed when it computed the ICRC:
//! IPv4 with Identification 0 (the engine's `ipv4_id`), DF set, TTL = hop
//! limit, TOS = the transmit's traffic class; or IPv6 with that traffic
//! class, flow label and hop limit; UDP with checksum 0. The datagram bytes
//! are copied verbatim, so a corrupted copy shows up with its bad ICRC.

use std::io::Write;
use std::net::IpAddr;

use roce_wire::ethernet::{EthernetRepr, Mac};
use roce_wire::pcap::{PcapError, PcapWriter};
use roce_wire::EncapRepr;

use super::trace::TraceRecord;
use super::HostId;

/// The MAC address of a simulated host (locally administered).
pub fn host_mac(h: HostId) -> Mac {
    let b = (h as u32).to_be_bytes();
    [0x02, 0x52, b[0], b[1], b[2], b[3]]
}

/// The Ethernet frame of a trace record. Addresses of two families (which
/// no simulated host has) are both written as IPv6.
pub fn frame(rec: &TraceRecord) -> Option<Vec<u8>> {
    let m = &rec.meta;
    let (src, dst) = match (m.src, m.dst) {
        (s @ IpAddr::V4(_), d @ IpAddr::V4(_)) => (s, d),
        (s, d) => (to_v6(s).into(), to_v6(d).into()),
    };
    let encap = EncapRepr {
        src,
        dst,
        tos: rec.traffic_class,
        ttl: rec.hop_limit,
        flow_label: rec.flow_label,
        ..m.encap()
    };
    let eth = EthernetRepr {
        dst: rec.to.map_or([0xff; 6], host_mac),
        src: host_mac(rec.from),
        ..EthernetRepr::default()
    };
    // `None` only for a datagram too long for IP, which no path MTU gives.
    encap.frame_to_vec(&eth, &rec.bytes).ok()
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
        if let Some(f) = frame(r) {
            w.write(std::time::Duration::from_nanos(r.sent.0), &f)?;
        }
    }
    w.finish()
}
