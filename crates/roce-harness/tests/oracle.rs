//! The external oracle `../shared/tools/roce-pcap-check` (a pure-Python
//! reference ICRC, scapy and tshark's InfiniBand dissector; no code shared
//! with this repository) judges a harness run written as a pcap: every
//! frame a link carried intact must pass (headers, lengths, ICRC over the
//! IPv4/IPv6 header exactly as the engine assumed it), and every corrupted
//! copy, written as delivered, must fail its ICRC. `--pmtu` is not given
//! because the QPs of a run use different path MTUs.
//!
//! Without the oracle or what it needs the test prints a skip notice,
//! unless the environment variable `CI` is set: then it fails
//! (`roce_test_support::pcap_oracle`).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use roce_harness::net::pcap::write_pcap;
use roce_harness::net::{Fate, TraceMode, TraceRecord};
use roce_harness::{simulate, Config};
use roce_test_support::pcap_oracle as oracle;

/// The oracle's JSON summary of a capture, and its exit status.
fn judge(oracle: &Path, pcap: &Path) -> (i32, serde_json::Value) {
    let out = Command::new("python3")
        .arg(oracle)
        .args(["--json", "--summary"])
        .arg(pcap)
        .output()
        .expect("python3");
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("oracle output is not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code().unwrap_or(-1), doc)
}

fn write(path: &Path, recs: &[&TraceRecord]) {
    let f = std::fs::File::create(path).expect("create pcap");
    write_pcap(recs.iter().copied(), std::io::BufWriter::new(f)).expect("write pcap");
}

/// The first seed whose run passes and carries IPv4 and IPv6, UD,
/// READ, atomics, SEND with Invalidate and corrupted copies.
fn rich_run() -> roce_harness::Run {
    let cfg = Config { trace: TraceMode::Full, ..Config::default() };
    for seed in 0..200 {
        let run = simulate(seed, &cfg);
        let recs = run.net.trace().records();
        let ops: BTreeSet<u8> = recs.iter().filter_map(|r| r.bytes.first().copied()).collect();
        let fams: BTreeSet<bool> = recs.iter().map(|r| r.meta.src.is_ipv4()).collect();
        let corrupted = recs.iter().any(|r| matches!(r.fate, Fate::Corrupted { .. }));
        let wanted = [0x0c, 0x10, 0x13, 0x14, 0x12, 0x17, 0x64];
        if run.result.is_ok() && fams.len() == 2 && corrupted && wanted.iter().all(|o| ops.contains(o)) {
            return run;
        }
    }
    panic!("no seed below 200 has the traffic this test needs");
}

#[test]
fn oracle_accepts_every_intact_frame_and_rejects_every_corrupted_one() {
    let Some(oracle) = oracle() else { return };
    let run = rich_run();
    let recs = run.net.trace().records();
    let (bad, good): (Vec<&TraceRecord>, Vec<&TraceRecord>) =
        recs.iter().partition(|r| matches!(r.fate, Fate::Corrupted { .. }));
    let dir = std::env::temp_dir().join(format!("roce-harness-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (good_path, bad_path) = (dir.join("intact.pcap"), dir.join("corrupted.pcap"));
    write(&good_path, &good);
    write(&bad_path, &bad);

    let (status, doc) = judge(&oracle, &good_path);
    let s = &doc["summary"];
    assert_eq!(status, 0, "oracle rejected intact frames: {s}");
    assert_eq!(s["packets"].as_u64(), Some(good.len() as u64), "{s}");
    assert_eq!(s["icrc_ok"].as_u64(), Some(good.len() as u64), "{s}");
    let versions = s["ip_versions"].as_object().expect("ip_versions");
    assert!(versions.contains_key("IPv4") && versions.contains_key("IPv6"), "{s}");
    assert!(s["by_opcode"].as_object().is_some_and(|m| m.len() >= 10), "too few opcodes: {s}");

    let (status, doc) = judge(&oracle, &bad_path);
    let s = &doc["summary"];
    assert_eq!(status, 1, "oracle accepted corrupted frames: {s}");
    assert_eq!(
        s["icrc_bad"].as_u64(),
        Some(bad.len() as u64),
        "every corrupted copy must fail its ICRC: {s}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
