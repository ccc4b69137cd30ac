//! The packet trace: one record per copy a link carried (or dropped), in the
//! order the copies were put on the wire, with the bytes as they arrived (a
//! corrupted copy holds its flipped bit). A run's trace is summarised by a
//! 64-bit fingerprint; the same seed must give the same fingerprint.

use roce_proto::{DatagramMeta, Instant, Transmit};

use super::HostId;

/// How much of the trace a run keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceMode {
    /// Nothing (fastest).
    #[default]
    Off,
    /// Only the fingerprint.
    Hash,
    /// The fingerprint and every record (for pcap files).
    Full,
}

/// What the link did with a copy (the fabric's).
pub use roce_fabric::hooks::Fate;

/// One copy of a datagram on a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRecord {
    /// Position in the trace.
    pub index: u64,
    /// When the sender handed the datagram to the link.
    pub sent: Instant,
    /// When the copy arrived (`None` if lost or unroutable).
    pub arrive: Option<Instant>,
    pub from: HostId,
    pub to: Option<HostId>,
    /// 0 for the original, 1 for a duplicate made by the link.
    pub copy: u8,
    pub fate: Fate,
    /// Addresses, ports and ECN as the engine produced them.
    pub meta: DatagramMeta,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
    /// The UDP payload (BTH through ICRC) as delivered.
    pub bytes: Vec<u8>,
}

/// One line for a record: times, hosts, fate and the transport packet as
/// `roce pcap decode` prints it (`RocePacketRepr`'s `Display`).
pub fn describe(r: &TraceRecord) -> String {
    let fate = match r.fate {
        Fate::Delivered => String::new(),
        Fate::Lost => "LOST ".into(),
        Fate::Corrupted { bit } => format!("CORRUPT(bit {bit}) "),
        Fate::Unroutable => "UNROUTABLE ".into(),
    };
    let arrive = r.arrive.map_or("-".to_string(), |t| t.0.to_string());
    let what = match roce_wire::RocePacketRepr::parse(&r.bytes) {
        Ok(p) => p.to_string(),
        Err(e) => {
            let clear = without_protection(&r.bytes);
            match clear.as_deref().map(roce_wire::RocePacketRepr::parse) {
                Some(Ok(p)) => format!("PROTECTED {p}"),
                _ => format!("({e})"),
            }
        }
    };
    format!(
        "#{} {}ns->{arrive}ns h{}->h{} {fate}{what}",
        r.index,
        r.sent.0,
        r.from,
        r.to.map_or(-1, |h| h as i64)
    )
}

/// The clear headers of a packet of an encrypted QP (`roce_proto::crypto`:
/// BTH and extension headers in clear, then SEQ, ciphertext and TAG) as a
/// packet of their own: the headers and the ICRC, with the protected part
/// dropped where the opcode carries no payload and kept as the payload
/// where it does. `None` if the opcode is unknown or the packet shorter
/// than its headers.
pub fn without_protection(bytes: &[u8]) -> Option<Vec<u8>> {
    let info = roce_wire::opcode::lookup(*bytes.first()?)?;
    let hdr = info.header_len();
    let icrc = roce_wire::icrc::ICRC_LEN;
    if bytes.len() < hdr + icrc {
        return None;
    }
    if info.payload {
        return Some(bytes.to_vec());
    }
    let mut v = bytes[..hdr].to_vec();
    v.extend_from_slice(&bytes[bytes.len() - icrc..]);
    Some(v)
}

/// A non-cryptographic 64-bit fingerprint, fed in 8-byte words (cheap even
/// in debug builds). Only equality between runs matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint(u64);

impl Default for Fingerprint {
    fn default() -> Self {
        Fingerprint(0x243f_6a88_85a3_08d3)
    }
}

impl Fingerprint {
    pub fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }

    pub fn bytes(&mut self, b: &[u8]) {
        self.word(b.len() as u64);
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        self.word(u64::from_le_bytes(last));
    }

    pub fn value(&self) -> u64 {
        self.0
    }
}

/// The trace of a run.
#[derive(Debug, Default)]
pub struct Trace {
    mode: TraceMode,
    count: u64,
    fp: Fingerprint,
    records: Vec<TraceRecord>,
}

impl Trace {
    pub fn new(mode: TraceMode) -> Trace {
        Trace { mode, ..Trace::default() }
    }

    pub fn mode(&self) -> TraceMode {
        self.mode
    }

    /// Number of copies recorded (counted in every mode).
    pub fn len(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The fingerprint of everything recorded (`None` in `Off` mode).
    pub fn fingerprint(&self) -> Option<u64> {
        (self.mode != TraceMode::Off).then_some(self.fp.value())
    }

    /// The records (empty unless the mode is `Full`).
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// Records a copy; `bytes` are the delivered bytes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        &mut self,
        sent: Instant,
        arrive: Option<Instant>,
        from: HostId,
        to: Option<HostId>,
        copy: u8,
        fate: Fate,
        tx: &Transmit,
        bytes: &[u8],
    ) {
        let index = self.count;
        self.count += 1;
        if self.mode == TraceMode::Off {
            return;
        }
        let f = &mut self.fp;
        f.word(index);
        f.word(sent.0);
        f.word(arrive.map_or(u64::MAX, |t| t.0));
        f.word(from as u64);
        f.word(to.map_or(u64::MAX, |h| h as u64));
        f.word(u64::from(copy));
        f.word(match fate {
            Fate::Delivered => 1,
            Fate::Lost => 2,
            Fate::Corrupted { bit } => 3 | u64::from(bit) << 8,
            Fate::Unroutable => 4,
        });
        let m = &tx.meta;
        f.bytes(&roce_proto::gid_to_bytes(m.src));
        f.bytes(&roce_proto::gid_to_bytes(m.dst));
        f.word(u64::from(m.src_port) | u64::from(m.dst_port) << 16 | u64::from(m.ecn) << 32);
        f.word(u64::from(tx.traffic_class) | u64::from(tx.hop_limit) << 8 | u64::from(tx.flow_label) << 16);
        f.bytes(bytes);
        if self.mode == TraceMode::Full {
            self.records.push(TraceRecord {
                index,
                sent,
                arrive,
                from,
                to,
                copy,
                fate,
                meta: tx.meta,
                traffic_class: tx.traffic_class,
                hop_limit: tx.hop_limit,
                flow_label: tx.flow_label,
                bytes: bytes.to_vec(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_wire::{AethRepr, BthRepr, ExtHeaders, Psn, RocePacketRepr, Syndrome};

    #[test]
    fn describe_prints_the_packet_as_pcap_decode_does() {
        let ack = RocePacketRepr {
            bth: BthRepr {
                opcode: 0x11,
                solicited: false,
                mig_req: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: 0x12,
                ack_req: false,
                psn: Psn::new(77),
            },
            ext: ExtHeaders {
                aeth: Some(AethRepr { syndrome: Syndrome::Ack { credits: 31 }, msn: 3 }),
                ..ExtHeaders::default()
            },
            payload: &[],
        };
        let mut bytes = vec![0; ack.buffer_len().unwrap()];
        ack.emit(&mut bytes).unwrap();
        let ip = "10.0.0.1".parse().unwrap();
        let mut r = TraceRecord {
            index: 4,
            sent: Instant(1000),
            arrive: None,
            from: 1,
            to: Some(0),
            copy: 0,
            fate: Fate::Lost,
            meta: DatagramMeta {
                src: ip,
                dst: ip,
                src_port: 0xc000,
                dst_port: 4791,
                ecn: 0,
                ipv4_id: Some(0),
            },
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            bytes,
        };
        assert_eq!(
            describe(&r),
            "#4 1000ns->-ns h1->h0 LOST RC_ACKNOWLEDGE qpn=0x000012 psn=77 A=0 AETH(ACK(credits=31) msn=3)"
        );
        r.bytes.truncate(8);
        assert!(describe(&r).starts_with("#4 1000ns->-ns h1->h0 LOST (BTH truncated"), "{}", describe(&r));
    }

    #[test]
    fn fingerprint_sees_every_byte_and_the_length() {
        let fp = |b: &[u8]| {
            let mut f = Fingerprint::default();
            f.bytes(b);
            f.value()
        };
        assert_eq!(fp(b"abcdefghij"), fp(b"abcdefghij"));
        assert_ne!(fp(b"abcdefghij"), fp(b"abcdefghik"));
        assert_ne!(fp(b"abc"), fp(b"abc\0"));
        assert_ne!(fp(b""), fp(b"\0"));
    }
}
