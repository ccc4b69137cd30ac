//! `--pcap`: what the device sent and received, as Ethernet frames in a
//! pcapng file.
//!
//! The socket hands the driver UDP payloads, so the frame around each is
//! rebuilt. Everything the ICRC covers is what crossed the wire: sent
//! packets are recorded only once the kernel took them, with the IPv4
//! Identification the kernel writes (0, or the segment's index in a GSO
//! send); received IPv4 packets with the Identification their ICRC names
//! (see `IcrcCheck::Ipv4IdInferred`). What the driver cannot know is said in
//! the file's comment, and on a packet where it matters (a received packet
//! whose ICRC failed has no known Identification).

use core::net::{IpAddr, SocketAddr};
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::{Duration as StdDuration, SystemTime};

use roce_proto::{DatagramMeta, IcrcCheck, Instant};
use roce_wire::pcap::{Direction, PcapError, PcapNgWriter};
use roce_wire::{EncapRepr, EthernetRepr};

use crate::udp::TTL;

/// The IP fields of a packet that the datagram and its `DatagramMeta` do
/// not hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IpFields {
    /// TOS / traffic class byte.
    pub tos: u8,
    /// TTL / hop limit.
    pub ttl: u8,
    pub flow_label: u32,
}

impl IpFields {
    /// A packet this device sends (the socket fixes TTL and flow label).
    pub fn sent(tos: u8) -> IpFields {
        IpFields { tos, ttl: TTL, flow_label: 0 }
    }
}

/// An open `--pcap` file.
pub(crate) struct Capture {
    writer: PcapNgWriter<BufWriter<File>>,
    origin_wall: SystemTime,
}

fn comment(local: SocketAddr) -> String {
    format!(
        "Written by roce --pcap: the packets of the RoCEv2 device on UDP {local}, rebuilt around the \
         UDP payloads its socket sent and received. Sent: recorded once the kernel took them; IP \
         header as the kernel writes it (IPv4 DF, Identification 0 or the segment's index in a UDP \
         GSO send; TTL/hop limit {TTL}; IPv6 flow label 0), UDP checksum as the kernel computes it. \
         Received: addresses, ports, TOS/traffic class, TTL/hop limit and IPv6 flow label as the \
         socket reported them; IPv4 Identification as the ICRC check inferred it (a UDP socket does \
         not show it; packets whose ICRC failed say so and show 0); UDP checksum recomputed (the \
         sender may have sent 0). Ethernet addresses are made up from the IP addresses."
    )
}

impl Capture {
    pub fn create(path: &Path, local: SocketAddr) -> Result<Capture, PcapError> {
        Ok(Capture { writer: PcapNgWriter::create(path, &comment(local))?, origin_wall: SystemTime::now() })
    }

    fn timestamp(&self, now: Instant) -> StdDuration {
        self.origin_wall.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default()
            + StdDuration::from_nanos(now.as_nanos())
    }

    /// A datagram the kernel took; `meta.ipv4_id` is the ID it carries.
    pub fn sent(&mut self, now: Instant, meta: &DatagramMeta, ip: IpFields, datagram: &[u8]) {
        if let Some(f) = frame(meta, ip, datagram) {
            let ts = self.timestamp(now);
            let _ = self.writer.write(ts, &f, Direction::Outbound, None);
        }
    }

    /// A datagram received, with what its ICRC check found.
    pub fn received(
        &mut self,
        now: Instant,
        meta: &DatagramMeta,
        ip: IpFields,
        check: IcrcCheck,
        datagram: &[u8],
    ) {
        let v4 = meta.src.is_ipv4();
        let (id, note) = match check {
            IcrcCheck::Ipv4IdInferred(id) => (Some(id), None),
            IcrcCheck::Verified => (meta.ipv4_id, None),
            IcrcCheck::Failed if v4 => {
                (None, Some("ICRC failed: the IPv4 Identification is not known and is shown as 0"))
            }
            IcrcCheck::Failed => (None, Some("ICRC failed")),
            IcrcCheck::Malformed => (None, Some("not a RoCEv2 packet the device could check")),
            _ => (meta.ipv4_id, None),
        };
        let meta = DatagramMeta { ipv4_id: id, ..*meta };
        if let Some(f) = frame(&meta, ip, datagram) {
            let ts = self.timestamp(now);
            let _ = self.writer.write(ts, &f, Direction::Inbound, note);
        }
    }

    pub fn finish(self) -> Result<(), PcapError> {
        self.writer.finish().map(|_| ())
    }
}

/// Locally administered MACs derived from the IP, so conversations read well.
fn mac(ip: IpAddr) -> [u8; 6] {
    let b = match ip {
        IpAddr::V4(v) => v.octets(),
        IpAddr::V6(v) => v.octets()[12..16].try_into().expect("4 bytes"),
    };
    [0x02, 0x00, b[0], b[1], b[2], b[3]]
}

/// The Ethernet frame carrying `datagram` (a RoCEv2 UDP payload), with a
/// UDP checksum. `None` if the addresses mix IPv4 and IPv6.
pub(crate) fn frame(meta: &DatagramMeta, ip: IpFields, datagram: &[u8]) -> Option<Vec<u8>> {
    let encap =
        EncapRepr { tos: ip.tos, ttl: ip.ttl, flow_label: ip.flow_label, udp_checksum: true, ..meta.encap() };
    let eth = EthernetRepr { dst: mac(meta.dst), src: mac(meta.src), ..EthernetRepr::default() };
    encap.frame_to_vec(&eth, datagram).ok()
}
