//! The external oracle (`../shared/tools/roce-pcap-check`: a pure-Python
//! reference ICRC, scapy and tshark's InfiniBand dissector, none of which
//! shares code with this crate) judges packets we emit.
//!
//! One packet of every opcode in the table, over IPv4 and IPv6 (and a few
//! 802.1Q-tagged), with payload sizes that give every pad count, every ACK
//! syndrome class and every NAK code, is written to a pcap; each frame must
//! re-parse to the same repr and re-emit to the same bytes, and the oracle
//! must pass every frame and agree with us on opcode, QP, PSN, AckReq, pad
//! count and payload length. The Soft-RoCE captures go through the oracle too.
//!
//! Without the oracle, python3 or scapy the tests print a skip notice, unless
//! the environment variable `CI` is set: then they fail (CI must run them).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use roce_wire::opcode::{self, OpcodeInfo};
use roce_wire::pcap::{PcapReader, PcapWriter};
use roce_wire::{
    AethRepr, AtomicEthRepr, BthRepr, DethRepr, EthernetRepr, ExtHeaders, FethRepr, HeaderSet, Ipv4Repr,
    Ipv6Repr, NakCode, NetRepr, Operation, ParseOptions, Position, Psn, RethRepr, RoceFrameRepr,
    RocePacketRepr, Syndrome, UdpRepr, VlanTag, ROCE_PORT,
};

use roce_test_support::{in_ci, pcap_oracle as oracle, repo_root};

const PMTU: usize = 256;

/// One line of the oracle's table: frame, IP version, opcode name, dest QP,
/// PSN, AckReq, pad, payload length, ICRC verdict, verdict.
#[derive(Debug, PartialEq, Eq)]
struct Row {
    frame: usize,
    ip: String,
    opcode: String,
    dqpn: String,
    psn: String,
    ack_req: String,
    pad: String,
    payload: String,
    icrc: String,
    verdict: String,
}

struct Verdict {
    status: i32,
    stdout: String,
    stderr: String,
    rows: Vec<Row>,
    /// (packets, ok, failed, icrc ok, icrc bad) from the closing line.
    totals: (usize, usize, usize, usize, usize),
}

fn run_oracle(oracle: &Path, pcap: &Path, pmtu: usize) -> Verdict {
    let out = Command::new("python3")
        .arg(oracle)
        .args(["--pmtu", &pmtu.to_string()])
        .arg(pcap)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut rows = Vec::new();
    let mut totals = None;
    for line in stdout.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        if t.len() >= 10 && t[0].parse::<usize>().is_ok() && t[1].starts_with('v') {
            rows.push(Row {
                frame: t[0].parse().unwrap(),
                ip: t[1].to_string(),
                opcode: t[2].to_string(),
                dqpn: t[3].to_string(),
                psn: t[4].to_string(),
                ack_req: t[5].to_string(),
                pad: t[6].to_string(),
                payload: t[7].to_string(),
                icrc: t[8].to_string(),
                verdict: t[9..].join(" "),
            });
        } else if line.contains(" RoCEv2 packets: ") {
            let n: Vec<usize> = line
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap())
                .collect();
            // "N RoCEv2 packets: N ok, N failed; ICRC ok N, bad N" (the "2" of RoCEv2 too)
            assert_eq!(n.len(), 6, "{line}");
            totals = Some((n[0], n[2], n[3], n[4], n[5]));
        }
    }
    let totals =
        totals.unwrap_or_else(|| panic!("no summary line from the oracle:\n{stdout}\nstderr:\n{stderr}"));
    Verdict { status: out.status.code().unwrap_or(-1), stdout, stderr, rows, totals }
}

/// Warnings that mean an oracle did not run. Only tolerated outside CI.
fn check_warnings(v: &Verdict) {
    let warnings: Vec<&str> = v.stderr.lines().filter(|l| l.starts_with("warning:")).collect();
    if warnings.is_empty() {
        return;
    }
    assert!(!in_ci(), "the oracle ran degraded under CI: {warnings:?}");
    let _ = writeln!(std::io::stderr(), "oracle warnings: {warnings:?}");
}

// ------------------------------------------------------------ the packet set

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ip {
    V4,
    V6,
}

/// A frame we emit, with what the oracle must see in it.
struct Case {
    name: String,
    info: &'static OpcodeInfo,
    ip: Ip,
    frame: Vec<u8>,
    dest_qp: u32,
    psn: u32,
    ack_req: bool,
    pad: usize,
    payload_len: usize,
}

/// Payload sizes for an opcode at PMTU 256: First/Middle exactly one PMTU,
/// Last 1..=256, Only 0..=256, ATOMIC WRITE 8; chosen so Last and Only
/// packets show every pad count 0..3.
fn payload_sizes(info: &OpcodeInfo) -> Vec<usize> {
    if !info.payload {
        return vec![0];
    }
    if info.operation == Operation::AtomicWrite {
        return vec![8];
    }
    match info.position {
        Position::First | Position::Middle => vec![PMTU],
        Position::Last => vec![1, 2, 3, 4, 255, PMTU],
        Position::Only => vec![0, 1, 2, 3, 4, 255, PMTU],
    }
}

/// AETH values: every syndrome class and NAK code on ACKs, an ACK syndrome
/// (as required) on READ responses and atomic ACKs.
fn aeth_values(info: &OpcodeInfo) -> Vec<Option<AethRepr>> {
    if !info.headers.contains(HeaderSet::AETH) {
        return vec![None];
    }
    let ack = |credits| Syndrome::Ack { credits };
    let syndromes = if info.operation == Operation::Acknowledge {
        vec![
            ack(31),
            ack(0),
            ack(12),
            Syndrome::RnrNak { timer: 0 },
            Syndrome::RnrNak { timer: 14 },
            Syndrome::RnrNak { timer: 31 },
            Syndrome::Nak(NakCode::PsnSequenceError),
            Syndrome::Nak(NakCode::InvalidRequest),
            Syndrome::Nak(NakCode::RemoteAccessError),
            Syndrome::Nak(NakCode::RemoteOperationalError),
            Syndrome::Nak(NakCode::InvalidRdRequest),
        ]
    } else {
        vec![ack(31), ack(3)]
    };
    syndromes
        .into_iter()
        .enumerate()
        .map(|(i, syndrome)| Some(AethRepr { syndrome, msn: 0x00ab_cd00 + i as u32 }))
        .collect()
}

/// Extension headers for `info`, consistent with a payload of `len` bytes.
fn ext_headers(info: &OpcodeInfo, len: usize, aeth: Option<AethRepr>, k: u32) -> ExtHeaders {
    let h = info.headers;
    let reth_len = match (info.operation, info.position) {
        (Operation::RdmaWrite, Position::Only) => len as u32,
        // a WRITE First's DMA length exceeds one PMTU
        (Operation::RdmaWrite, _) => (3 * PMTU + 100) as u32,
        (Operation::AtomicWrite, _) => 8,
        _ => 4096,
    };
    ExtHeaders {
        deth: h
            .contains(HeaderSet::DETH)
            .then_some(DethRepr { qkey: 0x8001_0000 | k, src_qp: 0x00_0123 + k }),
        feth: h
            .contains(HeaderSet::FETH)
            .then_some(FethRepr { selectivity: (k % 2) as u8, placement: 1 + (k % 3) as u8 }),
        reth: h.contains(HeaderSet::RETH).then_some(RethRepr {
            va: 0x7f3a_0000_1000 + 64 * u64::from(k),
            rkey: 0x0004_2200 + k,
            dma_len: reth_len,
        }),
        atomic_eth: h.contains(HeaderSet::ATOMIC_ETH).then_some(AtomicEthRepr {
            va: 0x5000 + 8 * u64::from(k),
            rkey: 0x0000_0dc4,
            swap_add: 0x1122_3344_5566_7788 ^ u64::from(k),
            compare: if info.operation == Operation::CompareSwap { 0x0102_0304_0506_0708 } else { 0 },
        }),
        aeth,
        atomic_ack: h.contains(HeaderSet::ATOMIC_ACK_ETH).then_some(0x6eee_25a9_682a_62b2 ^ u64::from(k)),
        imm: h.contains(HeaderSet::IMM_DT).then_some(0xdead_0000 | k),
        ieth: h.contains(HeaderSet::IETH).then_some(0x0000_4300 + k),
    }
}

fn net(ip: Ip, k: u32, ecn: u8) -> NetRepr {
    // UDP source port: flow entropy (IBTA A17.4.2), from the RoCEv2 range
    let udp = UdpRepr {
        src_port: 0xc000 | (k as u16 & 0x3fff),
        dst_port: ROCE_PORT,
        // zero checksums (what NICs send) and computed ones, both legal
        checksum: k % 3 != 0,
    };
    match ip {
        Ip::V4 => NetRepr::Ipv4(
            Ipv4Repr {
                src: Ipv4Addr::new(192, 0, 2, 1),
                dst: Ipv4Addr::new(198, 51, 100, 2),
                tos: (26 << 2) | ecn,
                ident: k as u16,
                dont_frag: true,
                ttl: 64,
            },
            udp,
        ),
        Ip::V6 => NetRepr::Ipv6(
            Ipv6Repr {
                src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
                dst: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
                traffic_class: (26 << 2) | ecn,
                flow_label: 0x1_2345 ^ k,
                hop_limit: 64,
            },
            udp,
        ),
    }
}

fn build_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut k: u32 = 0;
    // The payload lives in a buffer that outlives each repr.
    let data: Vec<u8> = (0..PMTU).map(|i| (i * 7 + 3) as u8).collect();
    for info in opcode::all() {
        for aeth in aeth_values(info) {
            for len in payload_sizes(info) {
                for ip in [Ip::V4, Ip::V6] {
                    // a few frames carry an 802.1Q tag (priority 3, as for PFC)
                    let vlan =
                        (k % 7 == 3).then_some(VlanTag { pcp: 3, dei: false, vid: 100 + (k % 4) as u16 });
                    k += 1;
                    cases.push(make_case(info, ip, vlan, aeth, &data[..len], k));
                }
            }
        }
    }
    // and an explicitly tagged packet of each IP version, whatever k gave
    let write_only = opcode::lookup(0x0a).unwrap();
    for ip in [Ip::V4, Ip::V6] {
        k += 1;
        let vlan = Some(VlanTag { pcp: 5, dei: true, vid: 4094 });
        cases.push(make_case(write_only, ip, vlan, None, &data[..77], k));
    }
    cases
}

fn make_case(
    info: &'static OpcodeInfo,
    ip: Ip,
    vlan: Option<VlanTag>,
    aeth: Option<AethRepr>,
    payload: &[u8],
    k: u32,
) -> Case {
    let cnp = info.operation == Operation::Cnp;
    let ends = info.position.ends_message();
    let bth = BthRepr {
        opcode: info.code,
        solicited: info.request && ends && info.payload && k % 2 == 0,
        mig_req: k % 5 == 0,
        pkey: if k % 4 == 0 { 0x8123 } else { 0xffff },
        // FECN/BECN are masked out of the ICRC: set some to prove it
        fecn: !cnp && k % 6 == 1,
        becn: cnp || k % 6 == 2,
        dest_qp: if info.transport == roce_wire::Transport::Ud { 0x00_0200 + k } else { 0x00_0112 },
        ack_req: info.request && ends && !cnp,
        psn: Psn::new(if cnp { 0 } else { 0x00ff_fff0 + k }),
    };
    let ecn = [2, 1, 3, 0][k as usize % 4];
    let repr = RoceFrameRepr {
        eth: EthernetRepr {
            dst: [0x52, 0x54, 0x00, 0x47, 0x00, 0x02],
            src: [0x52, 0x54, 0x00, 0x47, 0x00, 0x01],
            vlan,
            ethertype: match ip {
                Ip::V4 => 0x0800,
                Ip::V6 => 0x86dd,
            },
        },
        net: net(ip, k, ecn),
        packet: RocePacketRepr { bth, ext: ext_headers(info, payload.len(), aeth, k), payload },
        padding: 0,
    };
    let frame = repr.to_vec().unwrap_or_else(|e| panic!("{} emit: {e}", info.name));

    // Re-parse with every check, ICRC included: same repr, same bytes.
    let opts = ParseOptions { pmtu: Some(PMTU), ..ParseOptions::default() };
    let parsed = RoceFrameRepr::parse(&frame, &opts)
        .unwrap_or_else(|e| panic!("{} over {ip:?}: parse: {e} [{}]", info.name, e.kind()));
    assert_eq!(parsed, repr, "{} over {ip:?}: parse differs", info.name);
    assert_eq!(parsed.to_vec().unwrap(), frame, "{} over {ip:?}: re-emit differs", info.name);
    let name = format!(
        "{} {ip:?}{} payload {}",
        info.name,
        if vlan.is_some() { " vlan" } else { "" },
        payload.len()
    );
    Case {
        name,
        info,
        ip,
        frame,
        dest_qp: bth.dest_qp,
        psn: bth.psn.value(),
        ack_req: bth.ack_req,
        pad: roce_wire::packet::pad_for(payload.len()),
        payload_len: payload.len(),
    }
}

fn write_pcap(path: &Path, frames: impl IntoIterator<Item = impl AsRef<[u8]>>) {
    let mut w = PcapWriter::create(path).unwrap();
    for (i, f) in frames.into_iter().enumerate() {
        w.write(Duration::from_micros(1_000 * i as u64), f.as_ref()).unwrap();
    }
    w.finish().unwrap();
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("oracle");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn packet_set_covers_every_opcode_pad_and_syndrome() {
    let cases = build_cases();
    for ip in [Ip::V4, Ip::V6] {
        let here: Vec<&Case> = cases.iter().filter(|c| c.ip == ip).collect();
        let codes: BTreeSet<u8> = here.iter().map(|c| c.info.code).collect();
        let all: BTreeSet<u8> = opcode::all().map(|i| i.code).collect();
        assert_eq!(codes, all, "{ip:?}: every opcode");
        let pads: BTreeSet<usize> = here.iter().map(|c| c.pad).collect();
        assert_eq!(pads, BTreeSet::from([0, 1, 2, 3]), "{ip:?}");
        // every Last/Only opcode with a free-sized payload shows every pad
        for info in opcode::all()
            .filter(|i| i.payload && i.position.ends_message() && i.operation != Operation::AtomicWrite)
        {
            let pads: BTreeSet<usize> =
                here.iter().filter(|c| c.info.code == info.code).map(|c| c.pad).collect();
            assert_eq!(pads, BTreeSet::from([0, 1, 2, 3]), "{ip:?} {}", info.name);
        }
        assert!(here.iter().any(|c| c.frame[12..14] == [0x81, 0x00]), "{ip:?}: VLAN");
    }
    // ACKs carry ACK, RNR NAK and every NAK code
    let ack_syndromes: BTreeSet<u8> = cases
        .iter()
        .filter(|c| c.info.code == 0x11)
        .map(|c| {
            let l3 = if c.frame[12..14] == [0x81, 0x00] { 18 } else { 14 };
            let at = l3 + if c.ip == Ip::V4 { 20 } else { 40 } + 8 + 12;
            c.frame[at] >> 5
        })
        .collect();
    assert_eq!(ack_syndromes, BTreeSet::from([0, 1, 3]));
}

#[test]
fn oracle_accepts_one_packet_of_every_opcode() {
    let cases = build_cases();
    let pcap = scratch("every-opcode.pcap");
    write_pcap(&pcap, cases.iter().map(|c| &c.frame));

    // the file reads back frame for frame
    let back: Vec<_> = PcapReader::open(&pcap).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(back.len(), cases.len());
    for (r, c) in back.iter().zip(&cases) {
        assert_eq!(r.data, c.frame, "{}", c.name);
    }

    let Some(oracle) = oracle() else { return };
    let v = run_oracle(&oracle, &pcap, PMTU);
    check_warnings(&v);
    let n = cases.len();
    assert_eq!(
        (v.status, v.totals),
        (0, (n, n, 0, n, 0)),
        "oracle verdict on {}:\n{}\nstderr:\n{}",
        pcap.display(),
        v.stdout,
        v.stderr
    );
    assert_eq!(v.rows.len(), n, "{}", v.stdout);
    for (row, (i, c)) in v.rows.iter().zip(cases.iter().enumerate()) {
        let want = Row {
            frame: i + 1,
            ip: match c.ip {
                Ip::V4 => "v4",
                Ip::V6 => "v6",
            }
            .to_string(),
            opcode: c.info.name.to_string(),
            dqpn: format!("0x{:06x}", c.dest_qp),
            psn: c.psn.to_string(),
            ack_req: u8::from(c.ack_req).to_string(),
            pad: c.pad.to_string(),
            payload: c.payload_len.to_string(),
            icrc: "ok".to_string(),
            verdict: "OK".to_string(),
        };
        assert_eq!(row, &want, "frame {} ({})", i + 1, c.name);
    }
    let _ = writeln!(
        std::io::stderr(),
        "oracle: {n} packets ({} opcodes, IPv4 + IPv6), {} ok, {} failed; ICRC ok {}, bad {}",
        opcode::all().count(),
        v.totals.1,
        v.totals.2,
        v.totals.3,
        v.totals.4
    );
}

#[test]
fn oracle_accepts_the_softroce_captures() {
    let Some(oracle) = oracle() else { return };
    let dir = repo_root().join("testdata/softroce");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 10);
    let mut total = 0;
    for f in &files {
        // our own count of RoCE frames and their opcodes
        let mut ours: BTreeMap<usize, &'static str> = BTreeMap::new();
        for (i, rec) in PcapReader::open(f).unwrap().enumerate() {
            let rec = rec.unwrap();
            let opts = ParseOptions { pmtu: Some(1024), ..ParseOptions::default() };
            match RoceFrameRepr::parse(&rec.data, &opts) {
                Ok(r) => {
                    ours.insert(i + 1, r.packet.info().unwrap().name);
                }
                Err(e) if e.is_not_roce() => {}
                Err(e) => panic!("{} frame {}: {e}", f.display(), i + 1),
            }
        }
        let v = run_oracle(&oracle, f, 1024);
        check_warnings(&v);
        let n = ours.len();
        assert_eq!(
            (v.status, v.totals),
            (0, (n, n, 0, n, 0)),
            "{}:\n{}\n{}",
            f.display(),
            v.stdout,
            v.stderr
        );
        let theirs: BTreeMap<usize, &str> = v.rows.iter().map(|r| (r.frame, r.opcode.as_str())).collect();
        assert_eq!(theirs, ours, "{}: frames and opcodes", f.display());
        total += n;
    }
    assert_eq!(total, 520);
}
