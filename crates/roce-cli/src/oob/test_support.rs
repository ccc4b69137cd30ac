//! What the tests of both tools share: the TCP payloads of a capture in
//! `testdata/softroce`, to replay a stock tool's side of an exchange.

use std::path::Path;

/// One TCP payload of a capture.
#[derive(Debug, Clone)]
pub struct Segment {
    pub from_client: bool,
    pub data: Vec<u8>,
}

/// The payloads of the TCP connection to `server_port`, in capture order.
pub fn tcp_stream(pcap: &Path, server_port: u16) -> Vec<Segment> {
    let mut r = roce_wire::pcap::PcapReader::open(pcap).expect("capture opens");
    let mut out = Vec::new();
    while let Some(rec) = r.next_record() {
        let f = rec.expect("capture reads").data;
        if f.len() < 14 + 20 || f[12..14] != [0x08, 0x00] {
            continue;
        }
        let ip = &f[14..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        if ip[9] != 6 || total > ip.len() {
            continue;
        }
        let tcp = &ip[ihl..total];
        let (sport, dport) = (u16::from_be_bytes([tcp[0], tcp[1]]), u16::from_be_bytes([tcp[2], tcp[3]]));
        let off = usize::from(tcp[12] >> 4) * 4;
        if tcp.len() > off && (sport == server_port || dport == server_port) {
            out.push(Segment { from_client: dport == server_port, data: tcp[off..].to_vec() });
        }
    }
    out
}
