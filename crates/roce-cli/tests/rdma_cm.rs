//! `roce ping -R` (and its errors) run as a process on loopback: both ends
//! connect through RDMA CM. Each run takes its own random 127.x.y.z so
//! that parallel runs do not meet on UDP 4791.

use std::process::{Command, Output};

fn roce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce")).args(args).output().expect("run roce")
}

/// A loopback address of this run: 127.(100..200).x.y.
fn addr(salt: u64) -> String {
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    let x = seed.wrapping_mul(6364136223846793005).wrapping_add(salt.wrapping_mul(1442695040888963407)) >> 33;
    format!("127.{}.{}.{}", 100 + x % 100, (x >> 8) as u8, 2 + (x >> 16) % 250)
}

#[test]
fn ping_over_rdma_cm_on_loopback() {
    let mut last = String::new();
    for salt in 0..4 {
        let ip = addr(salt);
        let o = roce(&["ping", "-R", "--loopback", "--bind", &ip, "-n", "50", "-s", "100", "--counters"]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        last = format!("{out}{}", String::from_utf8_lossy(&o.stderr));
        if last.contains("Address already in use") {
            continue;
        }
        assert!(o.status.success(), "{last}");
        assert!(out.contains("(RDMA CM)") && out.contains("50 iters"), "{out}");
        // The client's counters, printed before it disconnects: REQ and
        // RTU sent, REP received, all through QP 1.
        let count = |name: &str| {
            let l = out.lines().find(|l| l.trim_start().starts_with(name)).expect(name);
            l.rsplit(':').next().unwrap().trim().parse::<u64>().unwrap()
        };
        assert_eq!((count("gsi_sent"), count("gsi_rcvd"), count("gsi_dropped")), (2, 1, 0), "{out}");
        return;
    }
    panic!("no free address: {last}");
}

#[test]
fn ping_over_rdma_cm_server_needs_bind_and_nobody_listening_is_rejected() {
    let o = roce(&["ping", "-R"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs --bind"), "{o:?}");
    // A client towards an address where a device answers CM but nobody
    // listens on the port: REJ reason 8, a clear error.
    let (dev, ip) = (0..8)
        .find_map(|salt| {
            let ip = addr(salt + 10);
            let cfg = roce::DeviceConfig::new(format!("{ip}:4791").parse().unwrap());
            roce::Device::open(cfg).ok().map(|d| (d, ip))
        })
        .expect("a free 127.x.y.z:4791");
    let client = (0..8).map(|s| addr(s + 20)).find(|c| *c != ip).unwrap();
    let o = roce(&["ping", "-R", &ip, "-p", "7000", "--bind", &client, "--timeout", "10"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("rejected") && err.contains("reason 8"), "{err}");
    assert!(dev.cm_counters().rejects_sent >= 1);
}

/// `roce perf -R --loopback`: both ends' QPs connected through the CM
/// (two QPs, so two REQ/REP/RTU exchanges), the test verified.
#[test]
fn perf_over_rdma_cm_on_loopback() {
    for (test, extra) in [("write-bw", ["-q", "2"]), ("read-lat", ["-s", "64"])] {
        let mut done = false;
        for salt in 40..44 {
            let ip = addr(salt);
            let mut args = vec!["perf", test, "-R", "--loopback", "--bind", &ip, "-n", "50", "--counters"];
            args.extend_from_slice(&extra);
            let o = roce(&args);
            let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            if out.contains("Address already in use") {
                continue;
            }
            assert!(o.status.success(), "{test}: {out}");
            let gsi = out.lines().find(|l| l.trim_start().starts_with("gsi_sent")).expect("gsi_sent");
            let n: u64 = gsi.rsplit(':').next().unwrap().trim().parse().unwrap();
            let qps = if test == "write-bw" { 2 } else { 1 };
            assert!(n >= 2 * qps, "{test}: a REQ and an RTU per QP: {gsi}");
            done = true;
            break;
        }
        assert!(done, "{test}: no free address");
    }
}

/// `--burst` (ucmatose's order: the server sends all, then the client).
#[test]
fn ping_burst_over_rdma_cm_on_loopback() {
    for salt in 60..64 {
        let ip = addr(salt);
        let o = roce(&["ping", "-R", "--burst", "--loopback", "--bind", &ip, "-n", "30", "-s", "100"]);
        let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        if out.contains("Address already in use") {
            continue;
        }
        assert!(o.status.success() && out.contains("30 iters"), "{out}");
        return;
    }
    panic!("no free address");
}
