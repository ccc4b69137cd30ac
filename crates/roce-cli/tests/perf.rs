//! `roce perf` and `roce ping` as a user runs them: every test over real
//! UDP on loopback, a server and a client process, bad arguments, and the
//! packets of a run judged by the external oracle.

use std::net::{TcpListener, UdpSocket};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn roce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce")).args(args).output().expect("roce runs")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn assert_ok(o: &Output, what: &str) -> String {
    let (out, err) = text(o);
    assert!(o.status.success(), "{what}: exit {:?}\nstdout:\n{out}\nstderr:\n{err}", o.status);
    out
}

/// perftest's blocks: the information block, the addresses, the table.
fn assert_table(out: &str, what: &str, bw: bool, size: u64) {
    for needle in [
        "Connection type : RC",
        "Link type       : Ethernet",
        "Data ex. method : Ethernet",
        " local address: LID 0000 QPN 0x",
        " remote address: LID 0000 QPN 0x",
        " GID: ",
    ] {
        assert!(out.contains(needle), "{what}: no {needle:?} in\n{out}");
    }
    let header =
        if bw { " #bytes     #iterations    BW peak[MB/sec]" } else { " #bytes #iterations    t_min[usec]" };
    assert!(out.contains(header), "{what}: no results header in\n{out}");
    let row = out.lines().skip_while(|l| !l.starts_with(" #bytes")).nth(1).unwrap_or("");
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(fields.first().copied(), Some(size.to_string().as_str()), "{what}: row {row:?}");
    let n = if bw { 5 } else { 9 };
    assert_eq!(fields.len(), n, "{what}: row {row:?}");
    for f in &fields[1..] {
        assert!(f.parse::<f64>().is_ok_and(|v| v.is_finite() && v >= 0.0), "{what}: row {row:?}");
    }
}

#[test]
fn every_test_runs_over_loopback() {
    let tests = [
        ("write-bw", true, 65536),
        ("read-bw", true, 65536),
        ("send-bw", true, 65536),
        ("atomic-bw", true, 8),
        ("write-lat", false, 2),
        ("read-lat", false, 2),
        ("send-lat", false, 2),
        ("atomic-lat", false, 8),
    ];
    for (t, bw, size) in tests {
        let o = roce(&["perf", t, "--loopback", "--udp-port", "0", "-n", "20"]);
        let out = assert_ok(&o, t);
        assert_table(&out, t, bw, size);
    }
}

/// Ten thousand QPs on one device, each with perftest's default send
/// queue (one CQ of 1,280,016 entries): the bandwidth test runs without
/// error and verifies its data.
#[test]
fn ten_thousand_qps() {
    let o =
        roce(&["perf", "write-bw", "-q", "10000", "-s", "4096", "-n", "5", "--loopback", "--udp-port", "0"]);
    let out = assert_ok(&o, "write-bw -q 10000");
    assert_table(&out, "write-bw -q 10000", true, 4096);
    assert!(out.contains("Number of qps   : 10000"), "{out}");
    assert!(out.contains(" 4096       50000 "), "every QP's five messages: {out}");
}

#[test]
fn variants_run_over_loopback() {
    let runs: &[(&[&str], bool, u64)] = &[
        (&["write-bw", "-q", "3", "-s", "5000", "-m", "1024", "-t", "8", "-Q", "4"], true, 5000),
        (&["read-bw", "-b", "-s", "10000", "-m", "256"], true, 10000),
        (&["send-bw", "-b", "-q", "2", "-s", "3000"], true, 3000),
        (&["atomic-bw", "-A", "CMP_AND_SWAP", "-q", "2", "-F", "-d", "rxe0", "-x", "0"], true, 8),
        (&["atomic-lat", "-A", "CMP_AND_SWAP", "--verify"], false, 8),
        (&["write-lat", "-s", "300", "--verify"], false, 300),
        (&["send-lat", "-s", "5000", "--verify", "--busy-poll"], false, 5000),
        (&["read-lat", "-s", "1000", "--verify"], false, 1000),
    ];
    for (args, bw, size) in runs {
        let mut a = vec!["perf"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["--loopback", "--udp-port", "0", "-n", "20"]);
        let o = roce(&a);
        let out = assert_ok(&o, &a.join(" "));
        assert_table(&out, &a.join(" "), *bw, *size);
    }
}

#[test]
fn report_gbits_and_all_sizes() {
    let o = roce(&["perf", "write-bw", "--loopback", "--udp-port", "0", "-n", "5", "-a", "--report_gbits"]);
    let out = assert_ok(&o, "write-bw -a");
    assert!(out.contains("BW peak[Gb/sec]    BW average[Gb/sec]"), "{out}");
    let sizes: Vec<u64> = out
        .lines()
        .skip_while(|l| !l.starts_with(" #bytes"))
        .skip(1)
        .map_while(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(sizes, (1..=23).map(|i| 1u64 << i).collect::<Vec<_>>());
}

#[test]
fn timed_runs() {
    for t in ["write-bw", "send-lat"] {
        let o = roce(&["perf", t, "--loopback", "--udp-port", "0", "-D", "1"]);
        let out = assert_ok(&o, t);
        let header = if t == "write-bw" {
            "BW average"
        } else {
            " #bytes        #iterations       t_avg[usec]    tps average"
        };
        assert!(out.contains(header), "{out}");
    }
}

/// A timed run with more queued than its time lets through (256 QPs of
/// 128 x 64 KiB WRITEs is 2 GiB): it counts what completed by the
/// deadline, then flushes the rest (the QPs to ERR), and each QP first
/// completes one message, so the server still checks every QP's data.
/// READs check on the client; a bidirectional SEND test also flushes its
/// posted receives, which must not be reposted or reported as errors.
#[test]
fn timed_runs_flush_their_backlog_and_check_every_qp() {
    let runs: &[&[&str]] =
        &[&["write-bw", "-q", "256"], &["read-bw", "-q", "16"], &["send-bw", "-b", "-q", "4", "-s", "8192"]];
    for args in runs {
        let mut a = vec!["perf"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["--loopback", "--udp-port", "0", "-D", "1", "--json"]);
        let o = roce(&a);
        let out = assert_ok(&o, &a.join(" "));
        let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
        assert_eq!(v["data_check"], "ok", "{out}");
        let iters = v["results"][0]["iters"].as_u64().expect("iters");
        assert!(iters > 0, "{out}");
    }
}

#[test]
fn ipv6_loopback() {
    let o = roce(&[
        "perf",
        "write-bw",
        "--loopback",
        "--bind",
        "::1",
        "--udp-port",
        "0",
        "-n",
        "20",
        "-s",
        "10000",
    ]);
    let out = assert_ok(&o, "IPv6 write-bw");
    assert_table(&out, "IPv6 write-bw", true, 10000);
    assert!(out.contains(" GID: 00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:01"), "{out}");
}

#[test]
fn json_output_reports_the_data_check() {
    // The write-bw client learns the server's verdict; the read-bw client
    // checks what it read itself; the send-bw client leaves it to the server.
    for (t, check) in [("write-bw", "ok"), ("read-bw", "ok"), ("send-bw", "not checked here")] {
        let o = roce(&["perf", t, "--loopback", "--udp-port", "0", "-n", "20", "-q", "2", "--json"]);
        let out = assert_ok(&o, &format!("{t} --json"));
        let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
        assert_eq!(v["test"], t.replace('-', "_"));
        assert_eq!(v["data_check"], check, "{t}");
        assert_eq!(v["results"][0]["size"], 65536);
        assert_eq!(v["results"][0]["iters"], 40);
        assert_eq!(v["local"].as_array().map(Vec::len), Some(2));
        assert_eq!(v["remote"].as_array().map(Vec::len), Some(2));
    }
}

fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A server process and a client process, each with its own UDP port.
#[test]
fn server_and_client_processes() {
    for (test, extra) in [("write-bw", &[][..]), ("send-lat", &["-s", "100"][..]), ("read-bw", &["-b"][..])] {
        let (tcp, u1, u2) =
            (free_tcp_port().to_string(), free_udp_port().to_string(), free_udp_port().to_string());
        let mut srv_args =
            vec!["perf", test, "-p", &tcp, "--udp-port", &u1, "--bind", "127.0.0.1", "-n", "50"];
        srv_args.extend_from_slice(extra);
        let server = Command::new(env!("CARGO_BIN_EXE_roce"))
            .args(&srv_args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut cli_args = vec!["perf", test, "127.0.0.1", "-p", &tcp, "--udp-port", &u2, "-n", "50"];
        cli_args.extend_from_slice(extra);
        let client = roce(&cli_args);
        let server = server.wait_with_output().unwrap();
        let cout = assert_ok(&client, &format!("{test} client"));
        let sout = assert_ok(&server, &format!("{test} server"));
        assert!(sout.contains("* Waiting for client to connect... *"), "{sout}");
        let bw = test.ends_with("bw");
        let size = if bw { 65536 } else { 100 };
        assert_table(&cout, test, bw, size);
        assert!(cout.contains(&format!("Device         : 127.0.0.1:{u2}")), "{cout}");
        assert_table(&sout, test, bw, size);
    }
}

#[test]
fn ping_over_loopback_and_between_processes() {
    let o = roce(&["ping", "--loopback", "--udp-port", "0", "-n", "50", "-s", "1000"]);
    let out = assert_ok(&o, "ping --loopback");
    assert!(out.contains("  local address:  LID 0x"), "{out}");
    assert!(out.contains("  remote address: LID 0x"), "{out}");
    assert!(out.contains("100000 bytes in "), "{out}");
    assert!(out.contains("50 iters in "), "{out}");

    let (tcp, u1) = (free_tcp_port().to_string(), free_udp_port().to_string());
    let server = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["ping", "-p", &tcp, "--udp-port", &u1, "--bind", "::1", "-n", "30", "-s", "64"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = roce(&["ping", "::1", "-p", &tcp, "--udp-port", "0", "-n", "30", "-s", "64"]);
    let server = server.wait_with_output().unwrap();
    let cout = assert_ok(&client, "ping client");
    let sout = assert_ok(&server, "ping server");
    for out in [&cout, &sout] {
        assert!(out.contains("GID ::1"), "{out}");
        assert!(out.contains("3840 bytes in "), "{out}");
    }
}

#[test]
fn bad_arguments_are_refused_clearly() {
    let cases: &[(&[&str], &str)] = &[
        (&["perf", "write-bw", "-s", "0"], "at least 1 byte"),
        (&["perf", "write-bw", "-m", "1000"], "not a path MTU"),
        (&["perf", "write-bw", "-m", "8192"], "not a path MTU"),
        (&["perf", "read-lat", "-m", "abc"], "not a valid MTU"),
        (&["perf", "atomic-bw", "-A", "SWAP"], "possible values: CMP_AND_SWAP, FETCH_AND_ADD"),
        (&["perf", "write-bw", "-A", "CMP_AND_SWAP"], "atomic tests only"),
        (&["perf", "atomic-lat", "-s", "16"], "must be 8"),
        (&["perf", "write-lat", "-q", "2"], "one QP"),
        (&["perf", "send-lat", "-b"], "bandwidth tests only"),
        (&["perf", "write-bw", "-n", "2"], "between 5 and"),
        (&["perf", "write-bw", "-q", "0"], "between 1 and"),
        (&["perf", "write-bw", "-x", "1"], "GID index 1 does not exist"),
        (&["perf", "write-bw", "-D", "1", "-n", "10"], "cannot be used with"),
        (&["perf", "write-bw", "-t", "0"], "between 1 and"),
        (&["perf", "write-bw", "-s", "2000000000"], "at most"),
        (&["perf", "write-bw", "-s", "1000000000", "-q", "4"], "MiB of buffers"),
        (&["perf", "write-bw", "--bind", "0.0.0.0"], "unicast address"),
        (&["perf", "write-bw", "--loopback", "--bind", "192.0.2.1"], "loopback address"),
        (&["perf", "write-bw", "--loopback", "10.0.0.1"], "cannot be used with"),
        (&["perf", "nonsense-bw"], "unrecognized subcommand"),
        (&["ping", "-s", "0"], "at least 1 byte"),
        (&["ping", "-m", "100"], "not a path MTU"),
        (&["ping", "-g", "3"], "GID index 3 does not exist"),
    ];
    for (args, msg) in cases {
        let o = roce(args);
        let (out, err) = text(&o);
        assert!(!o.status.success(), "{args:?} succeeded:\n{out}");
        assert!(err.contains(msg), "{args:?}: expected {msg:?} in:\n{err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn unreachable_server_fails_after_the_timeout() {
    let port = free_tcp_port().to_string();
    for cmd in [&["perf", "write-bw"][..], &["ping"][..]] {
        let mut a = cmd.to_vec();
        a.extend_from_slice(&["127.0.0.1", "-p", &port, "--timeout", "1", "--udp-port", "0"]);
        let t = std::time::Instant::now();
        let o = roce(&a);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{a:?}: {err}");
        assert!(err.contains("cannot reach the server at 127.0.0.1:"), "{a:?}: {err}");
        assert!(t.elapsed() < Duration::from_secs(10), "{a:?}");
    }
    // A busy UDP port is reported before anybody connects.
    let taken = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let o = roce(&["perf", "write-bw", "--bind", "127.0.0.1", "--udp-port", &port, "-p", "0"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("UDP port is taken"), "{err}");
}

/// A loopback run's capture passes `roce-pcap-check`. The server device
/// listens on 4791 (the oracle judges packets to that port), on an address
/// of its own so parallel runs do not collide.
#[test]
fn loopback_capture_passes_the_oracle() {
    let Some(check) = roce_test_support::pcap_oracle() else { return };
    let dir = std::env::temp_dir().join(format!("roce-perf-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ip = format!("127.{}.{}.{}", 100 + std::process::id() % 100, std::process::id() / 100 % 250 + 1, 9);
    for (t, extra) in [
        ("write-bw", &["-s", "10000"][..]),
        ("atomic-bw", &["-A", "CMP_AND_SWAP"][..]),
        ("read-lat", &["-s", "3000"][..]),
    ] {
        let pcap = dir.join(format!("{t}.pcap"));
        let p = pcap.to_str().unwrap();
        let mut a = vec![
            "perf",
            t,
            "--loopback",
            "--bind",
            &ip,
            "--udp-port",
            "4791",
            "-m",
            "1024",
            "-n",
            "20",
            "--pcap",
            p,
        ];
        a.extend_from_slice(extra);
        assert_ok(&roce(&a), &a.join(" "));
        let o =
            Command::new("python3").arg(&check).args(["--summary", "--pmtu", "1024", p]).output().unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{t}: roce-pcap-check failed:\n{out}\n{err}");
        assert!(out.contains("0 failed"), "{t}: {out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `roce` with `args`, killing it if it is still running after
/// `limit` (a hang fails the test instead of stalling the suite).
fn roce_bounded(args: &[&str], limit: Duration) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("roce runs");
    wait_bounded(child, limit, &format!("{args:?}"))
}

fn wait_bounded(mut child: std::process::Child, limit: Duration, what: &str) -> Output {
    let t = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            let (out, err) = text(&o);
            panic!("{what} still ran after {limit:?}:\n{out}\n{err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Runs `roce` with `args`, expects it to fail within `limit` with `msg`.
fn fails_in_time(args: &[&str], limit: Duration, msg: &str) {
    let o = roce_bounded(args, limit);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}:\n{out}\n{err}");
    assert!(err.contains(msg), "{args:?}: expected {msg:?} in:\n{err}");
}

/// A server that accepts and then says nothing: every phase of the
/// client's exchange gives up after `--timeout`.
#[test]
fn a_silent_server_times_out() {
    // A server that accepts and never answers.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        for c in l.incoming().take(2) {
            conns.push(c.unwrap());
        }
        conns
    });
    let limit = Duration::from_secs(15);
    fails_in_time(
        &["ping", "127.0.0.1", "-p", &port, "--timeout", "1", "--udp-port", "0"],
        limit,
        "the peer sent nothing within --timeout",
    );
    fails_in_time(
        &["perf", "write-bw", "127.0.0.1", "-p", &port, "--timeout", "1", "--udp-port", "0"],
        limit,
        "timed out",
    );
    drop(held.join().unwrap());
    // A client that connects and never speaks is dropped by the server,
    // which goes on waiting for the next: see tests/attacks.rs.
}

/// A peer that stops dead mid-run (SIGSTOP: its TCP connection stays open,
/// nothing more comes over TCP or RDMA): the other end gives up after
/// `--timeout` instead of waiting for ever.
#[test]
fn a_frozen_peer_mid_run_times_out() {
    use std::io::BufRead;
    for (test, freeze_client) in [("write-bw", true), ("write-bw", false), ("send-lat", true)] {
        // Both ends take a UDP port from the kernel (a port picked free
        // beforehand can be taken by a parallel test before the server binds).
        let tcp = free_tcp_port().to_string();
        let srv = ["perf", test, "-p", &tcp, "--udp-port", "0", "--bind", "127.0.0.1", "-D", "60"];
        let mut server = Command::new(env!("CARGO_BIN_EXE_roce"))
            .args(srv)
            .args(["--timeout", "2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let cli = ["perf", test, "127.0.0.1", "-p", &tcp, "--udp-port", "0", "-D", "60", "--timeout", "2"];
        let mut client = Command::new(env!("CARGO_BIN_EXE_roce"))
            .args(cli)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Freeze one end once both have exchanged their addresses.
        let mut lines = std::io::BufReader::new(client.stdout.take().unwrap()).lines();
        if !lines.by_ref().map_while(|l| l.ok()).any(|l| l.starts_with(" remote address:")) {
            let _ = server.kill();
            let _ = client.kill();
            let (s, c) = (server.wait_with_output().unwrap(), client.wait_with_output().unwrap());
            panic!(
                "{test}: the client never connected\nserver: {}\nclient: {}",
                String::from_utf8_lossy(&s.stderr),
                String::from_utf8_lossy(&c.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(300));
        let (frozen, live) =
            if freeze_client { (&mut client, &mut server) } else { (&mut server, &mut client) };
        let pid = frozen.id().to_string();
        assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
        let t = std::time::Instant::now();
        let status = loop {
            if let Some(s) = live.try_wait().unwrap() {
                break Some(s);
            }
            if t.elapsed() > Duration::from_secs(30) {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
        let _ = frozen.wait();
        let _ = live.kill();
        let mut err = String::new();
        let _ = std::io::Read::read_to_string(live.stderr.as_mut().unwrap(), &mut err);
        let who = if freeze_client { "server" } else { "client" };
        let status =
            status.unwrap_or_else(|| panic!("{test}: the {who} still waits 30 s after its peer froze"));
        assert_eq!(status.code(), Some(1), "{test} {who}: {err}");
        assert!(!err.contains("panicked"), "{test} {who}: {err}");
    }
}

/// `--counters` prints the device's counters; `roce ping --ud` and `-c`
/// run ibv_ud_pingpong's and the data check's variants.
#[test]
fn counters_ud_and_chk_over_loopback() {
    let value = |out: &str, name: &str| -> u64 {
        let line =
            out.lines().find(|l| l.trim_start().starts_with(&format!("{name} "))).unwrap_or_else(|| {
                panic!("no counter {name} in:\n{out}");
            });
        line.rsplit(':').next().unwrap().trim().parse().unwrap()
    };
    let o = roce(&["perf", "write-bw", "--loopback", "-n", "50", "--counters"]);
    let out = assert_ok(&o, "perf --counters");
    assert!(out.contains("ICRC check (receive)          : IPv4 ID inferred"), "{out}");
    assert!(out.contains(" ICRC check      : IPv4 ID inferred"), "{out}");
    assert!(value(&out, "rcvd_pkts") > 0 && value(&out, "sent_pkts") > 0, "{out}");
    assert_eq!(value(&out, "icrc_errors"), 0, "{out}");
    assert_eq!(value(&out, "icrc_ipv4_id_inferred"), value(&out, "rcvd_pkts"), "{out}");
    assert_eq!(value(&out, "tx_errors"), 0, "{out}");
    for name in ["rx_errors", "rx_dropped_socket_full", "timerfd_failures"] {
        assert_eq!(value(&out, name), 0, "{out}");
    }
    assert!(out.contains("driver timer                  : timerfd"), "{out}");
    assert!(
        out.contains("socket receive buffer         : ") && out.contains(" bytes granted for 33554432 asked"),
        "{out}"
    );

    let o = roce(&["perf", "write-bw", "--loopback", "-n", "50", "--counters", "--json", "--no-gso"]);
    let out = assert_ok(&o, "perf --counters --json");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["counters"]["engine"]["icrc_errors"], 0, "{out}");
    assert_eq!(v["counters"]["gso"], false, "{out}");
    for name in ["rx_errors", "rx_dropped_socket_full", "timerfd_failures"] {
        assert_eq!(v["counters"][name], 0, "{out}");
    }
    assert_eq!(v["counters"]["socket_buffers"]["recv_requested"], 32 << 20, "{out}");
    assert!(v["counters"]["socket_buffers"]["recv_granted"].as_u64().unwrap() > 0, "{out}");
    assert_eq!(v["counters"]["dead"], serde_json::Value::Null, "{out}");

    for extra in [&["--ud", "-s", "1024"][..], &["-s", "10000"][..]] {
        let mut a = vec!["ping", "--loopback", "--udp-port", "0", "-n", "40", "-c", "--counters"];
        a.extend_from_slice(extra);
        let out = assert_ok(&roce(&a), &a.join(" "));
        assert!(out.contains("40 iters in "), "{out}");
        assert_eq!(value(&out, "rdma_recvs"), 40, "{out}");
        assert_eq!(value(&out, "icrc_errors"), 0, "{out}");
    }
    let o = roce(&["ping", "--loopback", "--ud", "-s", "2000"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("larger than the path MTU (1024)"), "{err}");
}
