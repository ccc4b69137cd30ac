//! `roce pcap decode`: one line (or one JSON object) per captured frame, then a
//! summary.
//!
//! Each frame is classified the way a receiving NIC would: not RoCE at all
//! (other EtherType, IP protocol or UDP port), a RoCE packet whose network
//! layers are broken, or a RoCE packet whose transport headers are decoded.
//! Fields are shown even when the ICRC is wrong: the packet is parsed with
//! `verify_icrc: false` and the ICRC verdict is computed separately over the
//! network bytes. A packet that breaks a rule (structure, responder rules with
//! `--pmtu`, ICRC) is *malformed*; its error message and kind are printed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use roce_wire::bth::Bth;
use roce_wire::ethernet::{ethertype, EthernetFrame};
use roce_wire::frame::{self, Located};
use roce_wire::ipv4::Ipv4Packet;
use roce_wire::ipv6::Ipv6Packet;
use roce_wire::opcode;
use roce_wire::pcap::{PcapError, PcapReader, Record};
use roce_wire::{icrc, packet, BthRepr, ExtHeaders, ParseOptions, RoceFrameRepr, WireError, ROCE_PORT};
use serde::Serialize;

/// Path MTUs defined by IBTA (vol. 1 §9.7.5.1: 256 .. 4096 bytes).
const PMTUS: [usize; 5] = [256, 512, 1024, 2048, 4096];

/// Arguments of `roce pcap decode`.
#[derive(Debug, clap::Args)]
pub struct DecodeArgs {
    /// Capture file: pcap or pcapng with Ethernet frames.
    pub file: PathBuf,
    /// Print one JSON document (`packets` array and `summary` object) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Path MTU (256, 512, 1024, 2048 or 4096): First/Middle packets must carry
    /// exactly this many payload bytes, Last/Only packets at most this many.
    #[arg(long, value_name = "N", value_parser = parse_pmtu)]
    pub pmtu: Option<usize>,
    /// UDP destination port that marks RoCEv2 traffic.
    #[arg(long, value_name = "P", default_value_t = ROCE_PORT)]
    pub port: u16,
}

fn parse_pmtu(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if PMTUS.contains(&n) => Ok(n),
        _ => Err(format!("'{s}' is not an IBTA path MTU (use 256, 512, 1024, 2048 or 4096)")),
    }
}

/// How a run ended; maps to the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every RoCE packet is well-formed with a good ICRC (exit 0).
    Clean,
    /// Some RoCE packet is malformed or fails its ICRC (exit 1).
    PacketFaults,
    /// The file cannot be read, or ends in the middle of a record (exit 2).
    ReadError,
}

impl Outcome {
    pub fn exit_code(self) -> ExitCode {
        ExitCode::from(match self {
            Outcome::Clean => 0,
            Outcome::PacketFaults => 1,
            Outcome::ReadError => 2,
        })
    }
}

// ------------------------------------------------------------------ reports

/// One captured frame, as decoded.
#[derive(Debug, Serialize)]
pub struct FrameReport {
    /// Frame number, from 1.
    pub frame: u64,
    /// Seconds since the first frame (microsecond precision).
    pub time: f64,
    #[serde(skip)]
    time_text: String,
    /// Bytes captured.
    pub len: usize,
    /// True when the frame is RoCE traffic (EtherType, IP protocol and UDP port).
    pub roce: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<String>,
    /// For other traffic: what it is (`ARP`, `UDP 5353 -> 53`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vlan: Option<Vlan>,
    /// ECN codepoint of the IP header (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecn: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bth: Option<BthInfo>,
    /// The BTH as text (`BthRepr`'s `Display`).
    #[serde(skip)]
    bth_text: Option<String>,
    /// What follows the BTH in `RocePacketRepr`'s `Display` (extension
    /// headers, payload length); absent when only the BTH could be read.
    #[serde(skip)]
    after_bth_text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<Headers>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_len: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pad: Option<usize>,
    /// ICRC verdict; absent when the frame is too broken to locate it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icrc: Option<Icrc>,
    /// Every rule the packet breaks (empty for a good packet).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<Fault>,
}

impl FrameReport {
    /// A RoCE packet that breaks some rule (ICRC included).
    pub fn malformed(&self) -> bool {
        self.roce && !self.errors.is_empty()
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Vlan {
    pub pcp: u8,
    pub dei: bool,
    pub vid: u16,
}

#[derive(Debug, Clone, Serialize)]
pub struct BthInfo {
    pub opcode: u8,
    pub opcode_name: String,
    pub dest_qp: u32,
    pub psn: u32,
    pub ack_req: bool,
    pub solicited: bool,
    pub mig_req: bool,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Headers {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deth: Option<Deth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feth: Option<Feth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reth: Option<Reth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub atomic_eth: Option<AtomicEth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aeth: Option<Aeth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub atomic_ack: Option<AtomicAck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imm: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ieth: Option<Ieth>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Deth {
    pub qkey: u32,
    pub src_qp: u32,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Feth {
    pub selectivity: u8,
    pub placement: u8,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct AtomicEth {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Aeth {
    /// The raw syndrome byte.
    pub syndrome: u8,
    /// `ACK(credits=31)`, `RNR_NAK(timer=12)`, `NAK(PSN_SEQ_ERR)`.
    pub meaning: String,
    pub msn: u32,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct AtomicAck {
    pub orig: u64,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Ieth {
    pub rkey: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Icrc {
    pub ok: bool,
    /// The ICRC on the wire (as a CRC value; sent least significant byte first).
    pub wire: String,
    /// The ICRC computed over the packet.
    pub computed: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    /// Stable short name (`WireError::kind`, as `roce-pcap-check` names faults).
    pub kind: String,
    pub message: String,
}

impl From<&WireError> for Fault {
    fn from(e: &WireError) -> Fault {
        Fault { kind: e.kind().to_string(), message: e.to_string() }
    }
}

/// Counts over the whole capture.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    pub frames: u64,
    pub roce_packets: u64,
    /// RoCE packets that break no rule.
    pub ok: u64,
    /// RoCE packets that break some rule (ICRC included).
    pub malformed: u64,
    pub non_roce: u64,
    pub icrc_ok: u64,
    pub icrc_bad: u64,
    /// RoCE packets too broken for their ICRC to be located.
    pub icrc_unchecked: u64,
    /// RoCE packets by opcode name (`UNDECODED` when the BTH cannot be read).
    pub by_opcode: BTreeMap<String, u64>,
    /// Faults by kind, over all malformed packets.
    pub faults_by_kind: BTreeMap<String, u64>,
    /// Why reading stopped early (the file is truncated or corrupt).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Opcode names in opcode order, for the text summary.
    #[serde(skip)]
    opcode_order: BTreeMap<u16, String>,
}

impl Summary {
    fn add(&mut self, r: &FrameReport) {
        self.frames += 1;
        if !r.roce {
            self.non_roce += 1;
            return;
        }
        self.roce_packets += 1;
        if r.malformed() {
            self.malformed += 1;
            for f in &r.errors {
                *self.faults_by_kind.entry(f.kind.clone()).or_default() += 1;
            }
        } else {
            self.ok += 1;
        }
        match &r.icrc {
            Some(i) if i.ok => self.icrc_ok += 1,
            Some(_) => self.icrc_bad += 1,
            None => self.icrc_unchecked += 1,
        }
        let (key, name) = match &r.bth {
            Some(b) => (u16::from(b.opcode), b.opcode_name.clone()),
            None => (0x100, "UNDECODED".to_string()),
        };
        self.opcode_order.entry(key).or_insert_with(|| name.clone());
        *self.by_opcode.entry(name).or_default() += 1;
    }
}

// ------------------------------------------------------------------ decoding

/// Decodes frames one by one, keeping the first timestamp and the counts.
pub struct Decoder {
    opts: ParseOptions,
    first: Option<Duration>,
    frame: u64,
    pub summary: Summary,
}

impl Decoder {
    pub fn new(port: u16, pmtu: Option<usize>) -> Decoder {
        Decoder {
            opts: ParseOptions { port, verify_icrc: false, pmtu, check_rules: true },
            first: None,
            frame: 0,
            summary: Summary::default(),
        }
    }

    /// Decodes the next record of the capture.
    pub fn decode(&mut self, rec: &Record) -> FrameReport {
        self.frame += 1;
        let first = *self.first.get_or_insert(rec.timestamp);
        let (time, time_text) = relative_time(rec.timestamp, first);
        let data = &rec.data[..];
        let mut r = FrameReport {
            frame: self.frame,
            time,
            time_text,
            len: data.len(),
            roce: true,
            src: None,
            dst: None,
            protocol: None,
            vlan: None,
            ecn: None,
            bth: None,
            bth_text: None,
            after_bth_text: None,
            headers: None,
            payload_len: None,
            pad: None,
            icrc: None,
            errors: Vec::new(),
        };
        match frame::locate(data, self.opts.port) {
            Err(e) if e.is_not_roce() => {
                r.roce = false;
                let (src, dst, what) = describe_other(data);
                r.src = src;
                r.dst = dst;
                r.protocol = Some(what);
            }
            Err(e) => {
                // RoCE traffic (or a frame too short to tell) whose network
                // layers are broken: show what can be read.
                let (src, dst, _) = describe_other(data);
                r.src = src;
                r.dst = dst;
                let mut fault = Fault::from(&e);
                if (rec.orig_len as usize) > data.len() {
                    fault.kind = "capture_truncated".to_string();
                    fault.message = format!(
                        "frame cut by the capture's snap length ({} of {} bytes captured): {}",
                        data.len(),
                        rec.orig_len,
                        fault.message
                    );
                }
                r.errors.push(fault);
            }
            Ok(loc) => self.decode_roce(data, &loc, &mut r),
        }
        self.summary.add(&r);
        r
    }

    fn decode_roce(&self, data: &[u8], loc: &Located<'_>, r: &mut FrameReport) {
        let (src, dst) = loc.net.endpoints();
        r.src = Some(src);
        r.dst = Some(dst);
        r.vlan = loc.eth.vlan.map(|v| Vlan { pcp: v.pcp, dei: v.dei, vid: v.vid });
        r.ecn = Some(loc.net.ecn());
        let icrc_err = (loc.transport.len() >= packet::MIN_LEN).then(|| {
            let (ok, wire, computed) = match icrc::verify(loc.net_bytes, loc.net.icrc_kind()) {
                Ok(v) => (true, v, v),
                Err((got, want)) => (false, got, want),
            };
            r.icrc = Some(Icrc { ok, wire: format!("0x{wire:08x}"), computed: format!("0x{computed:08x}") });
            (!ok).then_some(WireError::IcrcBad { got: wire, want: computed })
        });

        // Strict parse first; on failure show the fault, and the fields from
        // the most lenient parse that works.
        let strict = RoceFrameRepr::parse(data, &self.opts);
        let shown = match strict {
            Ok(repr) => Some(repr),
            Err(e) => {
                r.errors.push(Fault::from(&e));
                let lenient = ParseOptions { check_rules: false, ..self.opts };
                RoceFrameRepr::parse(data, &lenient).ok()
            }
        };
        match shown {
            Some(repr) => {
                let p = &repr.packet;
                r.bth = Some(bth_info(&p.bth));
                r.bth_text = Some(p.bth.to_string());
                r.after_bth_text = Some(p.display_after_bth().to_string());
                r.headers = Some(headers(&p.ext));
                r.payload_len = Some(p.payload.len());
                r.pad = Some(packet::pad_for(p.payload.len()));
            }
            None => {
                if let Some(b) = raw_bth(loc.transport) {
                    r.bth = Some(bth_info(&b));
                    r.bth_text = Some(b.to_string());
                }
            }
        }
        if let Some(Some(e)) = icrc_err {
            r.errors.push(Fault::from(&e));
        }
    }
}

/// BTH fields read straight from the bytes, unchecked, for a packet that
/// does not parse.
fn raw_bth(transport: &[u8]) -> Option<BthRepr> {
    let b = Bth::new_checked(transport.get(..roce_wire::bth::HEADER_LEN)?).ok()?;
    Some(BthRepr {
        opcode: b.opcode(),
        solicited: b.solicited(),
        mig_req: b.mig_req(),
        pkey: b.pkey(),
        fecn: b.fecn(),
        becn: b.becn(),
        dest_qp: b.dest_qp(),
        ack_req: b.ack_req(),
        psn: b.psn(),
    })
}

fn bth_info(b: &BthRepr) -> BthInfo {
    let code = b.opcode;
    BthInfo {
        opcode: code,
        opcode_name: opcode::lookup(code)
            .map_or_else(|| format!("UNKNOWN_0x{code:02x}"), |i| i.name.to_string()),
        dest_qp: b.dest_qp,
        psn: b.psn.value(),
        ack_req: b.ack_req,
        solicited: b.solicited,
        mig_req: b.mig_req,
        pkey: b.pkey,
        fecn: b.fecn,
        becn: b.becn,
    }
}

fn headers(ext: &ExtHeaders) -> Headers {
    Headers {
        deth: ext.deth.map(|d| Deth { qkey: d.qkey, src_qp: d.src_qp }),
        feth: ext.feth.map(|f| Feth { selectivity: f.selectivity, placement: f.placement }),
        reth: ext.reth.map(|h| Reth { va: h.va, rkey: h.rkey, dma_len: h.dma_len }),
        atomic_eth: ext.atomic_eth.map(|a| AtomicEth {
            va: a.va,
            rkey: a.rkey,
            swap_add: a.swap_add,
            compare: a.compare,
        }),
        aeth: ext.aeth.map(|a| Aeth {
            syndrome: a.syndrome.to_u8(),
            meaning: a.syndrome.to_string(),
            msn: a.msn,
        }),
        atomic_ack: ext.atomic_ack.map(|orig| AtomicAck { orig }),
        imm: ext.imm,
        ieth: ext.ieth.map(|rkey| Ieth { rkey }),
    }
}

/// Seconds from `first` to `ts` (negative if the capture goes back in time),
/// as a number rounded to microseconds and as text with six decimals.
fn relative_time(ts: Duration, first: Duration) -> (f64, String) {
    let ns = ts.as_nanos() as i128 - first.as_nanos() as i128;
    let us = ns / 1000;
    let sign = if us < 0 { "-" } else { "" };
    let a = us.unsigned_abs();
    (us as f64 / 1e6, format!("{sign}{}.{:06}", a / 1_000_000, a % 1_000_000))
}

/// Source, destination and a short description of a frame that is not RoCE
/// (or whose RoCE layers are broken).
fn describe_other(data: &[u8]) -> (Option<String>, Option<String>, String) {
    let Ok(eth) = EthernetFrame::new_checked(data) else {
        return (None, None, format!("runt frame ({} bytes)", data.len()));
    };
    let l3 = eth.payload();
    match eth.ethertype() {
        ethertype::ARP => (None, None, "ARP".to_string()),
        ethertype::IPV4 => match Ipv4Packet::new_checked(l3) {
            Ok(ip) => {
                let l4 = l3.get(ip.header_len()..).unwrap_or(&[]);
                (Some(ip.src().to_string()), Some(ip.dst().to_string()), ip_protocol(ip.protocol(), l4))
            }
            Err(_) => (None, None, "IPv4 (truncated header)".to_string()),
        },
        ethertype::IPV6 => match Ipv6Packet::new_checked(l3) {
            Ok(ip) => {
                let l4 = l3.get(roce_wire::ipv6::HEADER_LEN..).unwrap_or(&[]);
                (
                    Some(std::net::Ipv6Addr::from(ip.src_bytes()).to_string()),
                    Some(std::net::Ipv6Addr::from(ip.dst_bytes()).to_string()),
                    ip_protocol(ip.next_header(), l4),
                )
            }
            Err(_) => (None, None, "IPv6 (truncated header)".to_string()),
        },
        0x88cc => (None, None, "LLDP".to_string()),
        0x8808 => (None, None, "MAC control (PAUSE/PFC)".to_string()),
        ethertype::ROCE_V1 => (None, None, "RoCEv1 (GRH)".to_string()),
        other => (None, None, format!("EtherType 0x{other:04x}")),
    }
}

fn ip_protocol(proto: u8, l4: &[u8]) -> String {
    let ports = || l4.get(..4).map(|p| (u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]])));
    match proto {
        1 => "ICMP".to_string(),
        2 => "IGMP".to_string(),
        58 => "ICMPv6".to_string(),
        6 | 17 => {
            let name = if proto == 6 { "TCP" } else { "UDP" };
            match ports() {
                Some((s, d)) => format!("{name} {s} -> {d}"),
                None => name.to_string(),
            }
        }
        0 => "IPv6 hop-by-hop options".to_string(),
        p => format!("IP protocol {p}"),
    }
}

// ------------------------------------------------------------------ text output

const ECN_NAMES: [&str; 4] = ["Not-ECT", "ECT(1)", "ECT(0)", "CE"];

/// One line for a frame.
pub fn format_line(r: &FrameReport) -> String {
    let mut s = format!("{:>6} {:>11} ", r.frame, r.time_text);
    if let (Some(src), Some(dst)) = (&r.src, &r.dst) {
        let _ = write!(s, "{src} -> {dst} ");
    }
    if !r.roce {
        let _ = write!(s, "not RoCE: {}", r.protocol.as_deref().unwrap_or("?"));
        return s;
    }
    // The transport packet as roce-wire prints it, with ECN and VLAN right
    // after the BTH.
    s.push_str(r.bth_text.as_deref().unwrap_or("RoCE (transport headers not decoded)"));
    if let Some(e) = r.ecn.filter(|&e| e != 0) {
        let _ = write!(s, " ECN={}", ECN_NAMES[usize::from(e & 3)]);
    }
    if let Some(v) = r.vlan {
        let _ = write!(s, " vlan={} pcp={}", v.vid, v.pcp);
    }
    s.push_str(r.after_bth_text.as_deref().unwrap_or(""));
    match &r.icrc {
        Some(i) if i.ok => s.push_str(" icrc=ok"),
        Some(_) => s.push_str(" icrc=BAD"),
        None => s.push_str(" icrc=-"),
    }
    for f in &r.errors {
        let _ = write!(s, " MALFORMED: {} [{}]", f.message, f.kind);
    }
    s
}

/// The summary block printed after the frames.
pub fn format_summary(sum: &Summary, port: u16) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "summary: {} frames, {} RoCE packets ({} ok, {} malformed), {} not RoCE",
        sum.frames, sum.roce_packets, sum.ok, sum.malformed, sum.non_roce
    );
    let _ = writeln!(s, "ICRC: {} ok, {} bad, {} not checked", sum.icrc_ok, sum.icrc_bad, sum.icrc_unchecked);
    if sum.roce_packets == 0 {
        let _ = writeln!(s, "no RoCE packets (UDP port {port}) in this capture");
    }
    for name in sum.opcode_order.values() {
        let n = sum.by_opcode.get(name).copied().unwrap_or(0);
        let _ = writeln!(s, "  opcode  {name:<36} {n}");
    }
    for (kind, n) in &sum.faults_by_kind {
        let _ = writeln!(s, "  fault   {kind:<36} {n}");
    }
    if let Some(e) = &sum.error {
        let _ = writeln!(s, "capture incomplete: {e}");
    }
    s
}

// ------------------------------------------------------------------ the command

#[derive(Serialize)]
struct JsonDoc<'a> {
    file: String,
    port: u16,
    pmtu: Option<usize>,
    packets: &'a [FrameReport],
    summary: &'a Summary,
}

fn read_error_message(path: &Path, e: &PcapError) -> String {
    match e {
        // already names the file
        PcapError::Open { .. } => e.to_string(),
        _ => format!("{}: {e}", path.display()),
    }
}

/// Runs `roce pcap decode`.
pub fn run(args: &DecodeArgs) -> Outcome {
    let mut reader = match PcapReader::open(&args.file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("roce: error: {}", read_error_message(&args.file, &e));
            return Outcome::ReadError;
        }
    };
    let mut dec = Decoder::new(args.port, args.pmtu);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut packets = Vec::new();
    let mut read_error = None;
    let mut write_result = Ok(());
    loop {
        match reader.next_record() {
            None => break,
            Some(Ok(rec)) => {
                let r = dec.decode(&rec);
                if args.json {
                    packets.push(r);
                } else if write_result.is_ok() {
                    write_result = writeln!(out, "{}", format_line(&r));
                }
            }
            Some(Err(e)) => {
                read_error = Some(e);
                break;
            }
        }
    }
    if let Some(e) = &read_error {
        dec.summary.error = Some(format!("{e} (after {} complete frames)", dec.summary.frames));
    }
    if write_result.is_ok() {
        write_result = if args.json {
            let doc = JsonDoc {
                file: args.file.display().to_string(),
                port: args.port,
                pmtu: args.pmtu,
                packets: &packets,
                summary: &dec.summary,
            };
            serde_json::to_writer_pretty(&mut out, &doc).map_err(io::Error::from).and_then(|()| writeln!(out))
        } else {
            write!(out, "\n{}", format_summary(&dec.summary, args.port))
        };
    }
    if write_result.is_ok() {
        write_result = out.flush();
    }
    if let Err(e) = write_result {
        if e.kind() != io::ErrorKind::BrokenPipe {
            eprintln!("roce: error: writing output: {e}");
            return Outcome::ReadError;
        }
    }
    if let Some(e) = &read_error {
        eprintln!(
            "roce: error: {} (decoded {} complete frames before it)",
            read_error_message(&args.file, e),
            dec.summary.frames
        );
        return Outcome::ReadError;
    }
    if dec.summary.malformed > 0 {
        Outcome::PacketFaults
    } else {
        Outcome::Clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_time_has_microsecond_text() {
        let t0 = Duration::new(100, 999_999_000);
        assert_eq!(relative_time(t0, t0).1, "0.000000");
        let (v, s) = relative_time(Duration::new(102, 1_500), t0);
        assert_eq!(s, "1.000002");
        assert!((v - 1.000002).abs() < 1e-9);
        assert_eq!(relative_time(Duration::new(100, 0), t0).1, "-0.999999");
    }

    #[test]
    fn pmtu_must_be_an_ibta_mtu() {
        assert_eq!(parse_pmtu("1024"), Ok(1024));
        assert!(parse_pmtu("1500").is_err());
        assert!(parse_pmtu("abc").is_err());
    }

    #[test]
    fn other_traffic_is_described() {
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
        assert_eq!(describe_other(&arp).2, "ARP");
        assert_eq!(describe_other(&[0; 5]).2, "runt frame (5 bytes)");
        let mut lldp = vec![0u8; 60];
        lldp[12..14].copy_from_slice(&0x88ccu16.to_be_bytes());
        assert_eq!(describe_other(&lldp).2, "LLDP");
        assert_eq!(ip_protocol(17, &[0, 53, 0x14, 0xe9]), "UDP 53 -> 5353");
        assert_eq!(ip_protocol(6, &[0, 1]), "TCP");
        assert_eq!(ip_protocol(99, &[]), "IP protocol 99");
    }
}
