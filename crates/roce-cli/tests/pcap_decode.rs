//! `roce pcap decode` run as a process: real Soft-RoCE captures, the oracle's
//! sample with deliberately broken packets, and files that are empty, not
//! pcap, truncated, or hold no RoCE traffic at all.

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use roce_wire::pcap::PcapWriter;
use roce_wire::{
    AethRepr, BthRepr, EthernetRepr, ExtHeaders, Ipv4Repr, NetRepr, Psn, RoceFrameRepr, RocePacketRepr,
    Syndrome, UdpRepr, ROCE_PORT,
};
use serde_json::Value;

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// A scratch file path unique to the test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pcap_decode");
    fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn roce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce")).args(args).output().expect("run roce")
}

fn decode(file: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["pcap", "decode"];
    args.extend_from_slice(extra);
    let f = file.to_str().unwrap();
    args.push(f);
    roce(&args)
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited by a signal")
}

/// Asserts a clean failure: the exit status, nothing panicked, one
/// `roce: error:` line on stderr that contains `needle`.
fn assert_read_error(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(code(o), 2, "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<_> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr, got: {err}");
    assert!(lines[0].starts_with("roce: error: "), "{err}");
    assert!(lines[0].contains(needle), "want {needle:?} in {err}");
}

/// The `summary:` line's numbers: frames, RoCE packets, ok, malformed, not RoCE.
fn summary_numbers(out: &str) -> [u64; 5] {
    let line = out
        .lines()
        .find(|l| l.starts_with("summary: "))
        .unwrap_or_else(|| panic!("no summary line in:\n{out}"));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    nums.try_into().unwrap_or_else(|v| panic!("summary line {line:?}: {v:?}"))
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", stdout(o)))
}

/// Frames and RoCE packets per Soft-RoCE capture, from testdata/softroce/README.md.
const SOFTROCE: [(&str, u64, u64); 10] = [
    ("rc_pingpong.pcap", 55, 40),
    ("rc_pingpong_64B.pcap", 27, 16),
    ("write_bw_4k.pcap", 65, 25),
    ("write_bw_64k_mtu1024.pcap", 363, 325),
    ("read_bw_4k.pcap", 64, 25),
    ("send_bw_4k.pcap", 55, 25),
    ("write_lat_64B.pcap", 45, 20),
    ("send_lat_64B.pcap", 49, 20),
    ("atomic_cmp_swap.pcap", 49, 10),
    ("imm_send_write.pcap", 29, 14),
];

#[test]
fn softroce_captures_decode_cleanly() {
    let dir = testdata().join("softroce");
    let mut on_disk: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".pcap"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<_> = SOFTROCE.iter().map(|(n, _, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "every capture is checked");

    let mut total = 0;
    for (name, frames, roce_packets) in SOFTROCE {
        for extra in [&[][..], &["--pmtu", "1024"][..]] {
            let o = decode(&dir.join(name), extra);
            let out = stdout(&o);
            assert_eq!(code(&o), 0, "{name} {extra:?}: {}\n{out}", stderr(&o));
            assert!(stderr(&o).is_empty(), "{name}: {}", stderr(&o));
            let [f, r, ok, bad, other] = summary_numbers(&out);
            assert_eq!(
                (f, r, ok, bad, other),
                (frames, roce_packets, roce_packets, 0, frames - roce_packets),
                "{name} {extra:?}"
            );
            // one line per frame, numbered from 1
            let frame_lines =
                out.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).count()
                    as u64;
            assert_eq!(frame_lines, frames, "{name}");
            assert_eq!(out.matches(" icrc=ok").count() as u64, roce_packets, "{name}");
            assert_eq!(out.matches("not RoCE: ").count() as u64, frames - r);
            assert!(!out.contains("MALFORMED"), "{name}");
        }
        total += roce_packets;
    }
    assert_eq!(total, 520);
}

#[test]
fn softroce_json_matches_the_capture_readme() {
    let o = decode(&testdata().join("softroce/imm_send_write.pcap"), &["--json", "--pmtu", "1024"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc = json(&o);
    let s = &doc["summary"];
    assert_eq!(s["frames"], 29);
    assert_eq!(s["roce_packets"], 14);
    assert_eq!(s["ok"], 14);
    assert_eq!(s["malformed"], 0);
    assert_eq!(s["non_roce"], 15);
    assert_eq!(s["icrc_ok"], 14);
    assert_eq!(s["icrc_bad"], 0);
    let want = [
        ("RC_ACKNOWLEDGE", 4),
        ("RC_SEND_FIRST", 1),
        ("RC_SEND_LAST_WITH_IMMEDIATE", 1),
        ("RC_SEND_MIDDLE", 2),
        ("RC_SEND_ONLY_WITH_IMMEDIATE", 1),
        ("RC_RDMA_WRITE_FIRST", 1),
        ("RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 1),
        ("RC_RDMA_WRITE_MIDDLE", 2),
        ("RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 1),
    ];
    let by_opcode = s["by_opcode"].as_object().unwrap();
    assert_eq!(by_opcode.len(), want.len(), "{by_opcode:?}");
    for (name, n) in want {
        assert_eq!(by_opcode[name], n, "{name}");
    }
    let packets = doc["packets"].as_array().unwrap();
    assert_eq!(packets.len(), 29);
    for (i, p) in packets.iter().enumerate() {
        assert_eq!(p["frame"], i as u64 + 1);
        if p["roce"] == true {
            assert_eq!(p["icrc"]["ok"], true, "{p}");
            assert!(p.get("errors").is_none(), "{p}");
            assert!(p["bth"]["opcode_name"].is_string(), "{p}");
        } else {
            assert!(p["protocol"].is_string(), "{p}");
        }
    }
    // every immediate-data opcode shows its ImmDt, every WRITE First its RETH
    for p in packets.iter().filter(|p| p["roce"] == true) {
        let name = p["bth"]["opcode_name"].as_str().unwrap();
        assert_eq!(name.contains("IMMEDIATE"), p["headers"]["imm"].is_u64(), "{p}");
        if name == "RC_RDMA_WRITE_FIRST" {
            assert!(p["headers"]["reth"]["dma_len"].as_u64().unwrap() > 1024);
        }
        if name == "RC_ACKNOWLEDGE" {
            assert_eq!(p["headers"]["aeth"]["meaning"], "ACK(credits=31)");
        }
    }
    // times are seconds since the first frame, non-decreasing here
    let times: Vec<f64> = packets.iter().map(|p| p["time"].as_f64().unwrap()).collect();
    assert_eq!(times[0], 0.0);
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
}

/// `(frame, valid, kinds)` from the oracle sample's expected.json.
fn sample_expectations() -> Vec<(u64, bool, Vec<String>)> {
    let text = fs::read_to_string(testdata().join("oracle/roce-sample.expected.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["frame"].as_u64().unwrap(),
                f["valid"].as_bool().unwrap(),
                f["kinds"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_string()).collect(),
            )
        })
        .collect()
}

#[test]
fn oracle_sample_reports_the_23_broken_packets() {
    let sample = testdata().join("oracle/roce-sample.pcap");
    let o = decode(&sample, &["--pmtu", "256"]);
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    assert_eq!(summary_numbers(&out), [83, 83, 60, 23, 0]);
    assert_eq!(out.matches(" MALFORMED: ").count(), 23);
    // a bad ICRC still shows the packet's fields
    let line61 = out.lines().find(|l| l.trim_start().starts_with("61 ")).unwrap();
    assert!(line61.contains("RC_SEND_ONLY qpn=0x000112 psn=256"), "{line61}");
    assert!(line61.contains("icrc=BAD"), "{line61}");
    assert!(line61.contains("[icrc_bad]"), "{line61}");

    let o = decode(&sample, &["--pmtu", "256", "--json"]);
    assert_eq!(code(&o), 1);
    let doc = json(&o);
    let s = &doc["summary"];
    assert_eq!(s["roce_packets"], 83);
    assert_eq!(s["ok"], 60);
    assert_eq!(s["malformed"], 23);
    assert_eq!(s["icrc_bad"], 5);
    let packets = doc["packets"].as_array().unwrap();
    for (frame, valid, kinds) in sample_expectations() {
        let p = &packets[frame as usize - 1];
        assert_eq!(p["frame"], frame);
        let got: Vec<&str> = p["errors"]
            .as_array()
            .map(|a| a.iter().map(|e| e["kind"].as_str().unwrap()).collect())
            .unwrap_or_default();
        if valid {
            assert!(got.is_empty(), "frame {frame}: {got:?}");
        } else {
            assert!(
                got.iter().any(|g| kinds.iter().any(|k| k == g)),
                "frame {frame}: got {got:?}, want one of {kinds:?}"
            );
            for e in p["errors"].as_array().unwrap() {
                assert!(!e["message"].as_str().unwrap().is_empty());
            }
        }
    }
}

#[test]
fn missing_empty_and_non_pcap_files_are_clean_errors() {
    let o = decode(&scratch("does-not-exist.pcap"), &[]);
    assert_read_error(&o, "cannot open");
    assert!(o.stdout.is_empty());

    let empty = scratch("empty.pcap");
    fs::write(&empty, b"").unwrap();
    let o = decode(&empty, &[]);
    assert_read_error(&o, "empty");
    assert!(o.stdout.is_empty());

    let text = scratch("notes.pcap");
    fs::write(&text, b"this is not a capture\n").unwrap();
    for extra in [&[][..], &["--json"][..]] {
        let o = decode(&text, extra);
        assert_read_error(&o, "not a pcap or pcapng file");
        assert!(o.stdout.is_empty());
    }

    // a directory
    let o = decode(&testdata(), &[]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).starts_with("roce: error: "), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
}

/// Whether a classic pcap file header is big-endian.
fn big_endian(bytes: &[u8]) -> bool {
    match bytes[..4] {
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => true,
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => false,
        _ => panic!("not a classic pcap"),
    }
}

fn u32_bytes(v: u32, big: bool) -> [u8; 4] {
    if big {
        v.to_be_bytes()
    } else {
        v.to_le_bytes()
    }
}

/// Byte offsets where each record of a classic pcap starts.
fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let big = big_endian(bytes);
    let mut at = 24;
    let mut out = Vec::new();
    while at < bytes.len() {
        out.push(at);
        let field: [u8; 4] = bytes[at + 8..at + 12].try_into().unwrap();
        let incl = if big { u32::from_be_bytes(field) } else { u32::from_le_bytes(field) } as usize;
        at += 16 + incl;
    }
    assert_eq!(at, bytes.len());
    out
}

#[test]
fn truncated_captures_decode_what_is_there_then_fail() {
    let whole = fs::read(testdata().join("softroce/rc_pingpong.pcap")).unwrap();
    // Rewritten through PcapWriter: the records are cut at known offsets.
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    for rec in roce_wire::pcap::PcapReader::new(&whole[..]).unwrap() {
        let rec = rec.unwrap();
        w.write(rec.timestamp, &rec.data).unwrap();
    }
    let whole = w.finish().unwrap();
    let recs = record_offsets(&whole);
    assert_eq!(recs.len(), 55);
    let last = *recs.last().unwrap();

    // cut in the middle of the file header
    let f = scratch("cut-header.pcap");
    fs::write(&f, &whole[..10]).unwrap();
    let o = decode(&f, &[]);
    assert_read_error(&o, "file ends in the middle of the file header");
    assert!(o.stdout.is_empty());

    // cut in the middle of the last record's data, and of its record header
    for (name, cut) in [("cut-data.pcap", whole.len() - 7), ("cut-rechdr.pcap", last + 8)] {
        let f = scratch(name);
        fs::write(&f, &whole[..cut]).unwrap();
        let o = decode(&f, &[]);
        assert_read_error(&o, "file ends in the middle of a packet record");
        assert!(stderr(&o).contains("decoded 54 complete frames"), "{}", stderr(&o));
        let out = stdout(&o);
        assert_eq!(summary_numbers(&out), [54, 39, 39, 0, 15], "{out}");
        assert!(out.contains("capture incomplete: "), "{out}");

        let o = decode(&f, &["--json"]);
        assert_eq!(code(&o), 2);
        let doc = json(&o);
        assert_eq!(doc["packets"].as_array().unwrap().len(), 54);
        assert_eq!(doc["summary"]["frames"], 54);
        assert!(doc["summary"]["error"].as_str().unwrap().contains("middle of a packet record"));
    }

    // a header and no records is a valid, empty capture
    let f = scratch("no-records.pcap");
    fs::write(&f, &whole[..24]).unwrap();
    let o = decode(&f, &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(summary_numbers(&stdout(&o)), [0, 0, 0, 0, 0]);
}

// ------------------------------------------------------------ hand-made frames

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

fn eth_header(ethertype: u16) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&MAC_B);
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

fn arp_frame() -> Vec<u8> {
    let mut f = eth_header(0x0806);
    // who-has 10.0.0.2 tell 10.0.0.1
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&[10, 0, 0, 1]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&[10, 0, 0, 2]);
    f.resize(60, 0);
    f
}

/// IPv4 + (UDP or TCP) with a correct IPv4 header checksum.
fn ipv4_frame(proto: u8, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let l4_len = if proto == 6 { 20 } else { 8 };
    let total = 20 + l4_len + payload.len();
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&(total as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    let mut sum: u32 = ip.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let mut f = eth_header(0x0800);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    if proto == 6 {
        f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0x10, 0, 0, 0, 0, 0]);
    } else {
        f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
    }
    f.extend_from_slice(payload);
    f
}

/// A valid RC ACK over IPv4 to UDP port `dport`.
fn roce_ack(dport: u16) -> Vec<u8> {
    RoceFrameRepr {
        eth: EthernetRepr { dst: MAC_B, src: MAC_A, vlan: None, ethertype: 0x0800 },
        net: NetRepr::Ipv4(
            Ipv4Repr {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                tos: 0x02,
                ident: 7,
                dont_frag: true,
                ttl: 64,
            },
            UdpRepr { src_port: 49152, dst_port: dport, checksum: false },
        ),
        packet: RocePacketRepr {
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
        },
        padding: 0,
    }
    .to_vec()
    .unwrap()
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = PcapWriter::create(path).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write(Duration::new(1_700_000_000, 0) + Duration::from_micros(250 * i as u64), f).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn capture_without_roce_traffic() {
    let f = scratch("no-roce.pcap");
    write_pcap(
        &f,
        &[
            arp_frame(),
            ipv4_frame(17, 40000, 53, b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"),
            ipv4_frame(6, 18515, 40144, &[]),
            roce_ack(4792), // RoCE-shaped, but not to the RoCE port
        ],
    );
    let o = decode(&f, &[]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    assert_eq!(summary_numbers(&out), [4, 0, 0, 0, 4]);
    assert!(out.contains("     1    0.000000 not RoCE: ARP"), "{out}");
    assert!(out.contains("     2    0.000250 10.0.0.1 -> 10.0.0.2 not RoCE: UDP 40000 -> 53"), "{out}");
    assert!(out.contains("not RoCE: TCP 18515 -> 40144"), "{out}");
    assert!(out.contains("not RoCE: UDP 49152 -> 4792"), "{out}");
    assert!(out.contains("no RoCE packets (UDP port 4791)"), "{out}");

    let o = decode(&f, &["--json"]);
    assert_eq!(code(&o), 0);
    let doc = json(&o);
    assert_eq!(doc["summary"]["non_roce"], 4);
    assert_eq!(doc["summary"]["roce_packets"], 0);
    assert_eq!(doc["packets"].as_array().unwrap().len(), 4);
    assert_eq!(doc["packets"][0]["protocol"], "ARP");
    assert_eq!(doc["packets"][1]["roce"], false);
}

#[test]
fn port_option_selects_the_roce_port() {
    let f = scratch("port-4792.pcap");
    write_pcap(&f, &[roce_ack(4792), roce_ack(4791)]);
    let o = decode(&f, &[]);
    assert_eq!(code(&o), 0);
    assert_eq!(summary_numbers(&stdout(&o)), [2, 1, 1, 0, 1]);

    let o = decode(&f, &["--port", "4792"]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(summary_numbers(&out), [2, 1, 1, 0, 1]);
    assert!(
        out.contains("RC_ACKNOWLEDGE qpn=0x000012 psn=77 A=0 ECN=ECT(0) AETH(ACK(credits=31) msn=3) icrc=ok"),
        "{out}"
    );
    assert!(out.contains("not RoCE: UDP 49152 -> 4791"), "{out}");
}

#[test]
fn corrupt_and_cut_roce_frames_are_malformed_not_fatal() {
    let good = roce_ack(4791);
    let mut bad_icrc = good.clone();
    *bad_icrc.last_mut().unwrap() ^= 0x01;
    let mut bad_tver = good.clone();
    bad_tver[14 + 20 + 8 + 1] = 0x01; // BTH TVer 1; ICRC left as is
    let f = scratch("corrupt.pcap");
    write_pcap(&f, &[good.clone(), bad_icrc, bad_tver, good[..30].to_vec()]);
    let o = decode(&f, &[]);
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert_eq!(summary_numbers(&out), [4, 4, 1, 3, 0], "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[1].contains("RC_ACKNOWLEDGE"), "{}", lines[1]);
    assert!(lines[1].contains("icrc=BAD MALFORMED: ICRC"), "{}", lines[1]);
    assert!(lines[2].contains("[bth_tver]"), "{}", lines[2]);
    assert!(lines[2].contains("[icrc_bad]"), "{}", lines[2]);
    assert!(lines[3].contains("[truncated_frame]"), "{}", lines[3]);

    // a RoCE frame cut by the capture's snap length (incl_len < orig_len)
    let mut bytes = PcapWriter::new(Vec::new()).unwrap().finish().unwrap();
    let big = big_endian(&bytes);
    let cut = &good[..50];
    bytes.extend_from_slice(&u32_bytes(0, big));
    bytes.extend_from_slice(&u32_bytes(0, big));
    bytes.extend_from_slice(&u32_bytes(cut.len() as u32, big));
    bytes.extend_from_slice(&u32_bytes(good.len() as u32, big));
    bytes.extend_from_slice(cut);
    let f = scratch("snaplen.pcap");
    fs::write(&f, bytes).unwrap();
    let o = decode(&f, &["--json"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let doc = json(&o);
    assert_eq!(doc["packets"][0]["errors"][0]["kind"], "capture_truncated");
    assert!(doc["packets"][0]["errors"][0]["message"].as_str().unwrap().contains("50 of 62 bytes captured"));
}

#[test]
fn bad_arguments_are_usage_errors() {
    let sample = testdata().join("oracle/roce-sample.pcap");
    let s = sample.to_str().unwrap();
    for args in [
        &["pcap", "decode", "--pmtu", "1500", s][..],
        &["pcap", "decode", "--port", "70000", s][..],
        &["pcap", "decode"][..],
        &["frobnicate"][..],
    ] {
        let o = roce(args);
        assert_eq!(code(&o), 2, "{args:?}");
        assert!(!stderr(&o).contains("panicked"), "{args:?}");
        assert!(stderr(&o).starts_with("error: "), "{args:?}: {}", stderr(&o));
    }
    // a command group without its subcommand: usage on stderr
    let o = roce(&["pcap"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("Usage: roce pcap <COMMAND>"), "{}", stderr(&o));
    let o = roce(&["pcap", "decode", "--help"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("--pmtu"));
}

/// One valid packet of `info` over IPv4 at PMTU 256.
fn packet_of(info: &roce_wire::OpcodeInfo, k: u32, payload: &[u8]) -> Vec<u8> {
    use roce_wire::{AtomicEthRepr, DethRepr, FethRepr, HeaderSet as H, Operation, Position, RethRepr};
    let h = info.headers;
    let n = payload.len();
    let dma_len = match (info.operation, info.position) {
        (Operation::RdmaWrite, Position::Only) => n as u32,
        (Operation::AtomicWrite, _) => 8,
        _ => 4096,
    };
    let ext = ExtHeaders {
        deth: h.contains(H::DETH).then_some(DethRepr { qkey: 0x1111_0000 + k, src_qp: 0x77 }),
        feth: h.contains(H::FETH).then_some(FethRepr { selectivity: 0, placement: 1 }),
        reth: h.contains(H::RETH).then_some(RethRepr { va: 0x1000, rkey: 0x42, dma_len }),
        atomic_eth: h.contains(H::ATOMIC_ETH).then_some(AtomicEthRepr {
            va: 0x4000,
            rkey: 0x45,
            swap_add: 2,
            compare: 1,
        }),
        aeth: h.contains(H::AETH).then_some(AethRepr { syndrome: Syndrome::Ack { credits: 31 }, msn: k }),
        atomic_ack: h.contains(H::ATOMIC_ACK_ETH).then_some(0x0123_4567_89ab_cdef),
        imm: h.contains(H::IMM_DT).then_some(0xdead_beef),
        ieth: h.contains(H::IETH).then_some(0x1234),
    };
    // the ACK's Ethernet and IP headers, with this opcode's transport packet
    let ack = roce_ack(ROCE_PORT);
    let base = RoceFrameRepr::parse(&ack, &roce_wire::ParseOptions::default()).unwrap();
    RoceFrameRepr {
        packet: RocePacketRepr {
            bth: BthRepr { opcode: info.code, psn: Psn::new(k), ..base.packet.bth },
            ext,
            payload,
        },
        ..base
    }
    .to_vec()
    .unwrap()
}

#[test]
fn every_opcode_decodes_with_its_headers() {
    use roce_wire::{HeaderSet as H, Operation, Position};
    let data = [0x5au8; 256];
    let infos: Vec<_> = roce_wire::opcode::all().collect();
    let frames: Vec<Vec<u8>> = infos
        .iter()
        .enumerate()
        .map(|(k, info)| {
            let n = match (info.payload, info.operation, info.position) {
                (false, _, _) => 0,
                (true, Operation::AtomicWrite, _) => 8,
                (true, _, Position::First | Position::Middle) => 256,
                (true, _, Position::Last) => 1,
                (true, _, Position::Only) => 3,
            };
            packet_of(info, k as u32, &data[..n])
        })
        .collect();
    let f = scratch("every-opcode.pcap");
    write_pcap(&f, &frames);
    let o = decode(&f, &["--json", "--pmtu", "256"]);
    assert_eq!(code(&o), 0, "{}\n{}", stderr(&o), stdout(&o));
    let doc = json(&o);
    assert_eq!(doc["summary"]["roce_packets"], infos.len() as u64);
    assert_eq!(doc["summary"]["malformed"], 0);
    let by_opcode = doc["summary"]["by_opcode"].as_object().unwrap();
    assert_eq!(by_opcode.len(), infos.len());
    for (p, info) in doc["packets"].as_array().unwrap().iter().zip(&infos) {
        assert_eq!(p["bth"]["opcode_name"], info.name);
        assert_eq!(by_opcode[info.name], 1);
        let hs = p["headers"].as_object().unwrap();
        for (bit, key) in [
            (H::DETH, "deth"),
            (H::FETH, "feth"),
            (H::RETH, "reth"),
            (H::ATOMIC_ETH, "atomic_eth"),
            (H::AETH, "aeth"),
            (H::ATOMIC_ACK_ETH, "atomic_ack"),
            (H::IMM_DT, "imm"),
            (H::IETH, "ieth"),
        ] {
            assert_eq!(hs.contains_key(key), info.headers.contains(bit), "{} {key}", info.name);
        }
    }
    // the text form names every opcode too
    let o = decode(&f, &["--pmtu", "256"]);
    assert_eq!(code(&o), 0);
    let out = stdout(&o);
    for info in &infos {
        assert!(out.contains(&format!(" {} qpn=", info.name)), "{}", info.name);
    }
    assert!(out.contains("FETH(sel=0 placement=1) RETH(va=0x1000 rkey=0x00000042 len=4096)"));
    assert!(out.contains("AtomicAckETH(orig=0x123456789abcdef)"));
    assert!(out.contains("DETH(qkey="));
    assert!(out.contains("IETH(rkey=0x00001234)"));
}

/// A device on `127.a.b.c:4791` (random a, b, c): a CM peer must own port
/// 4791 of its address, as the kernel sends every CM MAD there.
fn cm_device(pcap: Option<PathBuf>) -> roce::Device {
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    for i in 0..64u64 {
        let x = (seed.wrapping_mul(6364136223846793005).wrapping_add(i * 1442695040888963407)) >> 33;
        let ip = Ipv4Addr::new(127, 100 + (x % 100) as u8, (x >> 8) as u8, 2 + ((x >> 16) % 250) as u8);
        let mut cfg = roce::DeviceConfig::new(std::net::SocketAddr::new(ip.into(), 4791));
        cfg.pcap = pcap.clone();
        if let Ok(d) = roce::Device::open(cfg) {
            return d;
        }
    }
    panic!("no free 127.x.y.z:4791");
}

/// A connection made and ended through the CM, captured by the active
/// side: every CM message is named with its fields.
#[test]
fn cm_messages_are_named_with_their_fields() {
    let file = scratch("cm.pcap");
    let t = Some(Duration::from_secs(10));
    let a = cm_device(Some(file.clone()));
    let b = cm_device(None);
    let listener = roce::cm::Listener::bind(&b, 7174).unwrap();
    let addr = std::net::SocketAddr::new(b.cm_address(), 7174);
    let server = std::thread::spawn(move || {
        let cq = b.create_cq(4).unwrap();
        let qp = b.alloc_pd().unwrap().create_qp(roce::QpBuilder::rc(&cq)).unwrap();
        let mut c = listener.accept(qp, t).unwrap();
        c.wait_disconnected(t).unwrap();
    });
    let cq = a.create_cq(4).unwrap();
    let qp = a.alloc_pd().unwrap().create_qp(roce::QpBuilder::rc(&cq)).unwrap();
    let (src, dst) = (a.cm_address(), addr.ip());
    let mut c = roce::cm::connect(&a, addr, qp, b"hello", t).unwrap();
    c.disconnect().unwrap();
    // The DREP: received (and captured) before its event comes.
    c.wait_disconnected(t).unwrap();
    server.join().unwrap();
    drop(c);
    drop(cq);
    drop(a);
    let o = decode(&file, &[]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}{}", stderr(&o));
    for name in ["CM REQ", "CM REP", "CM RTU", "CM DREQ", "CM DREP"] {
        assert!(out.contains(name), "{name} missing:\n{out}");
    }
    let req = out.lines().find(|l| l.contains("CM REQ")).unwrap();
    for field in [
        "local_comm_id=0x",
        "service_id=0x0000000001061c06",
        "qpn=0x",
        "psn=0x",
        &format!("ip={src}:"),
        &format!("->{dst}:7174"),
    ] {
        assert!(req.contains(field), "{field} missing: {req}");
    }
    let rep = out.lines().find(|l| l.contains("CM REP")).unwrap();
    assert!(rep.contains("remote_comm_id=0x") && rep.contains("qpn=0x"), "{rep}");
}
