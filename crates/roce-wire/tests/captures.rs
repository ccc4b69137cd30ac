//! Real captures: every RoCEv2 frame that Linux Soft-RoCE (rdma_rxe) put on the
//! wire parses, its ICRC verifies, and re-emitting the parsed repr gives the
//! same bytes. The oracle's sample capture: valid frames likewise, broken
//! frames rejected with the fault its `.expected.json` names.

use std::path::{Path, PathBuf};

use roce_wire::pcap::PcapReader;
use roce_wire::{ParseOptions, RoceFrameRepr};

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

fn is_roce_udp(frame: &[u8]) -> bool {
    // IPv4 or IPv6 UDP to 4791, possibly VLAN-tagged: let the parser decide.
    !matches!(
        roce_wire::frame::locate(frame, roce_wire::ROCE_PORT),
        Err(e) if e.is_not_roce()
    )
}

#[test]
fn softroce_captures_round_trip_byte_for_byte() {
    let dir = testdata().join("softroce");
    let mut files = 0;
    let mut total = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pcap") {
            continue;
        }
        files += 1;
        let mut n = 0;
        for (i, rec) in PcapReader::open(&path).unwrap().enumerate() {
            let rec = rec.unwrap();
            if !is_roce_udp(&rec.data) {
                continue;
            }
            let opts = ParseOptions { pmtu: Some(1024), ..ParseOptions::default() };
            let repr = RoceFrameRepr::parse(&rec.data, &opts)
                .unwrap_or_else(|e| panic!("{} frame {}: {e}", path.display(), i + 1));
            let again = repr.to_vec().unwrap();
            assert_eq!(again, rec.data, "{} frame {}: re-emit differs", path.display(), i + 1);
            n += 1;
        }
        assert!(n > 0, "{}: no RoCE frames", path.display());
        total += n;
    }
    assert_eq!(files, 10);
    // The capture README counts 520 RoCE frames (its ICRC table: 10+14+40+16+25+25+20+25+325+20).
    assert_eq!(total, 520);
}

/// `(frame number, valid, expected fault kinds)` from the sample's expected.json.
fn expected() -> Vec<(usize, bool, Vec<String>)> {
    let text = std::fs::read_to_string(testdata().join("oracle/roce-sample.expected.json")).unwrap();
    // A tiny extraction rather than a JSON dependency: each frame object is on
    // one line of the form {"frame": N, "name": ..., "valid": B, "kinds": [..], ...}.
    let mut out = Vec::new();
    for chunk in text.split("{\"frame\": ").skip(1) {
        let n: usize = chunk[..chunk.find(',').unwrap()].parse().unwrap();
        let valid = chunk.contains("\"valid\": true");
        let k0 = chunk.find("\"kinds\": [").unwrap() + 10;
        let k1 = k0 + chunk[k0..].find(']').unwrap();
        let kinds = chunk[k0..k1]
            .split(',')
            .map(|s| s.trim().trim_matches('"').to_string())
            .filter(|s| !s.is_empty())
            .collect();
        out.push((n, valid, kinds));
    }
    out
}

#[test]
fn oracle_sample_valid_and_broken_frames() {
    let exp = expected();
    assert_eq!(exp.len(), 83);
    let recs: Vec<_> = PcapReader::open(testdata().join("oracle/roce-sample.pcap"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(recs.len(), 83);
    // The sample was made with --pmtu 256.
    let opts = ParseOptions { pmtu: Some(256), ..ParseOptions::default() };
    for (n, valid, kinds) in exp {
        let data = &recs[n - 1].data;
        let got = RoceFrameRepr::parse(data, &opts);
        if valid {
            let repr = got.unwrap_or_else(|e| panic!("frame {n}: {e}"));
            assert_eq!(&repr.to_vec().unwrap(), data, "frame {n}: re-emit differs");
        } else {
            let err = got.err().unwrap_or_else(|| panic!("frame {n}: broken frame accepted"));
            assert!(
                kinds.iter().any(|k| k == err.kind()),
                "frame {n}: got {} ({err}), want one of {kinds:?}",
                err.kind()
            );
        }
    }
}
