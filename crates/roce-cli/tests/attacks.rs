//! The out-of-band TCP exchange of `roce perf` and `roce ping` servers
//! against clients that stall, trickle, send garbage or abort: each is
//! dropped within `--timeout` with a line on stderr, what was created for
//! it is destroyed, and the next client is served.
//!
//! Every process is bounded: a server or client still running after its
//! limit is killed and the test fails.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The server's `--timeout` in the tests that wait for it.
const TIMEOUT: u64 = 2;
/// The longest any process or wait may take before the test fails.
const LIMIT: Duration = Duration::from_secs(60);

/// A loopback address of this test alone (the servers' devices bind it).
fn unique_ip() -> String {
    static N: AtomicU32 = AtomicU32::new(1);
    let pid = std::process::id();
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("127.{}.{}.{}", 100 + pid % 100, pid / 100 % 250 + 1, n)
}

fn free_tcp_port() -> String {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string()
}

/// A server process; its stderr is read line by line as it comes.
struct Server {
    child: Child,
    lines: Receiver<String>,
    err: Vec<String>,
    stderr: Option<JoinHandle<()>>,
    stdout: Option<JoinHandle<String>>,
    port: String,
    ip: String,
}

impl Server {
    /// `roce <args> -p PORT --bind IP --udp-port 0 --timeout TIMEOUT`.
    fn start(args: &[&str]) -> Server {
        let (ip, port) = (unique_ip(), free_tcp_port());
        let t = TIMEOUT.to_string();
        let mut child = Command::new(env!("CARGO_BIN_EXE_roce"))
            .args(args)
            .args(["-p", &port, "--bind", &ip, "--udp-port", "0", "--timeout", &t])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("roce runs");
        let (tx, lines) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let mut out = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        Server { child, lines, err: Vec::new(), stderr: Some(stderr), stdout: Some(stdout), port, ip }
    }

    fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    /// Connects to the server, retrying until it listens.
    fn connect(&self) -> TcpStream {
        let t = Instant::now();
        loop {
            match TcpStream::connect(self.addr()) {
                Ok(s) => return s,
                Err(e) if t.elapsed() > LIMIT => panic!("nothing listens on {}: {e}", self.addr()),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// Waits for the stderr line that says `client` was dropped; returns it.
    fn dropped(&mut self, client: &TcpStream, limit: Duration) -> String {
        let me = client.local_addr().unwrap();
        self.line_with(&format!("dropped client {me}: "), limit)
    }

    /// Waits for a stderr line that contains `want`; returns it.
    fn line_with(&mut self, want: &str, limit: Duration) -> String {
        let t = Instant::now();
        loop {
            let left = limit.saturating_sub(t.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.err.push(l.clone());
                    if l.contains(want) {
                        return l;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no {want:?} on the server's stderr within {limit:?}:\n{}", self.err.join("\n"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = self.child.kill();
                    let status = self.child.wait().unwrap();
                    panic!("the server ended ({status}) without {want:?}:\n{}", self.err.join("\n"))
                }
            }
        }
    }

    /// The process's resident memory (kB) and open file descriptors.
    fn footprint(&self) -> (u64, usize) {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server runs");
        let rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
        (rss, fds)
    }

    /// Waits for the server to end (killing it after `LIMIT`).
    fn finish(mut self) -> (ExitStatus, String, String) {
        let t = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if t.elapsed() > LIMIT {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the server still ran after {LIMIT:?}:\n{}", self.err.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.stderr.take().unwrap().join().unwrap();
        self.err.extend(self.lines.try_iter());
        let out = self.stdout.take().unwrap().join().unwrap();
        (status, out, self.err.join("\n"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A failed test leaves no server behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `roce` with `args`, killing it after `LIMIT`.
fn roce_bounded(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("roce runs");
    // Drain both pipes as the child writes: a full pipe would stall it.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            let err = String::from_utf8_lossy(&err.join().unwrap()).into_owned();
            panic!("{args:?} still ran after {LIMIT:?}:\n{err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}

/// A well-behaved client of `server` (`cmd` is "perf write-bw" or "ping"
/// with the server's options); it must succeed, and so must the server.
fn real_client_is_served(server: Server, cmd: &[&str]) -> (String, String) {
    let mut a = cmd.to_vec();
    let (ip, port) = (server.ip.clone(), server.port.clone());
    a.extend_from_slice(&[&ip, "-p", &port, "--udp-port", "0", "--timeout", "30"]);
    let c = roce_bounded(&a);
    let (status, sout, serr) = server.finish();
    let (cout, cerr) = (String::from_utf8_lossy(&c.stdout), String::from_utf8_lossy(&c.stderr));
    assert!(c.status.success(), "client {a:?}: {:?}\n{cout}\n{cerr}\nserver:\n{sout}\n{serr}", c.status);
    assert!(status.success(), "server: {status:?}\n{sout}\n{serr}\nclient:\n{cout}\n{cerr}");
    assert!(!serr.contains("panicked"), "{serr}");
    (sout, serr)
}

/// Reads until the server closes the connection (the client was dropped).
fn closed_by_server(s: &mut TcpStream) {
    s.set_read_timeout(Some(LIMIT)).unwrap();
    let mut sink = Vec::new();
    // A reset is as good as an orderly close.
    let _ = s.read_to_end(&mut sink);
}

const PERF: &[&str] = &["perf", "write-bw", "-n", "50"];
const PING: &[&str] = &["ping", "-n", "30", "-s", "64"];

/// perftest's version message as `roce perf` sends it.
fn perf_version() -> [u8; 16] {
    *b"6.06\0roce\0\0\0\0\0\0\0"
}

/// The client's messages up to the keys: version, system data, MTU.
fn perf_hello() -> Vec<u8> {
    let mut m = perf_version().to_vec();
    m.extend_from_slice(&4096u32.to_be_bytes());
    m.extend_from_slice(&64u32.to_be_bytes());
    m.extend_from_slice(b"3\0");
    m
}

/// A valid perftest key message (QPN 0x14, GID 127.0.0.1).
const PERF_KEY: &[u8; 108] =
    b"0000:0001:000014:7ab9c9:00000524:00005621ec672000:00:00:00:00:00:00:00:00:00:00:ff:ff:7f:00:00:01:00000000:\0";

/// A valid ibv_rc_pingpong address message (QPN 0x12, GID 127.0.0.1).
const PING_ADDR: &[u8; 52] = b"0000:000012:6bbad9:00000000000000000000ffff7f000001\0";

/// A client that connects and says nothing is dropped after `--timeout`;
/// the client queued behind it is served.
#[test]
fn silent_exchange_client_is_dropped_and_the_next_is_served() {
    let mut server = Server::start(PERF);
    let silent = server.connect();
    let line = server.dropped(&silent, LIMIT);
    let me = silent.local_addr().unwrap();
    assert!(
        line.contains(&format!(
            "roce perf: dropped client {me}: timed out in the exchange after {TIMEOUT} s"
        )),
        "{line}"
    );
    let (sout, _) = real_client_is_served(server, PERF);
    assert_eq!(sout.matches("* Waiting for client to connect... *").count(), 1, "{sout}");
    assert_eq!(sout.matches("Connection type : RC").count(), 1, "{sout}");
}

#[test]
fn silent_ping_client_is_dropped_and_the_next_is_served() {
    let mut server = Server::start(PING);
    let silent = server.connect();
    let line = server.dropped(&silent, LIMIT);
    let me = silent.local_addr().unwrap();
    assert!(
        line.contains(&format!(
            "roce ping: dropped client {me}: timed out in the exchange after {TIMEOUT} s"
        )),
        "{line}"
    );
    let (sout, _) = real_client_is_served(server, PING);
    assert!(sout.contains("3840 bytes in "), "{sout}");
}

/// A client that sends a valid exchange slowly is dropped by the deadline
/// of the whole exchange: whether it trickles one byte every 0.4 x
/// `--timeout` (each byte well inside any per-read timeout) or sends each
/// message whole, 0.8 x `--timeout` after the one before (each inside a
/// per-message timeout; a server with one would begin the test with it).
#[test]
fn trickling_client_is_dropped_by_the_phase_deadline() {
    let bytes = |m: &[u8]| m.iter().map(|&b| vec![b]).collect::<Vec<_>>();
    let hello = perf_hello();
    let mut messages = vec![hello[..16].to_vec(), hello[16..20].to_vec(), hello[20..24].to_vec()];
    messages.push(hello[24..].to_vec());
    messages.extend(std::iter::repeat_n(PERF_KEY.to_vec(), 4));
    let cases = [
        (PERF, bytes(&hello), TIMEOUT * 400),
        (PERF, messages, TIMEOUT * 800),
        (PING, bytes(PING_ADDR), TIMEOUT * 400),
    ];
    for (cmd, chunks, gap) in cases {
        let mut server = Server::start(cmd);
        let mut slow = server.connect();
        let start = Instant::now();
        let mut writer = slow.try_clone().unwrap();
        let attack = std::thread::spawn(move || {
            for c in chunks {
                if writer.write_all(&c).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(gap));
            }
        });
        // Bounded generously: it must fail rather than hang, not measure.
        let limit = Duration::from_secs(TIMEOUT + 10);
        let line = server.dropped(&slow, limit);
        let took = start.elapsed();
        assert!(line.contains(&format!("timed out in the exchange after {TIMEOUT} s")), "{cmd:?}: {line}");
        assert!(took < limit, "{cmd:?}: dropped after {took:?}");
        closed_by_server(&mut slow);
        let _ = slow.shutdown(Shutdown::Both);
        attack.join().unwrap();
        real_client_is_served(server, cmd);
    }
}

/// Clients that send what is not the exchange (another protocol, malformed
/// messages, an incompatible version) are dropped at once, with the
/// reason; then a real client is served.
#[test]
fn garbage_client_is_dropped_and_the_next_is_served() {
    let junk_key = [b'z'; 108];
    let mut old_version = [0u8; 16];
    old_version[..5].copy_from_slice(b"5.60\0");
    let mut bad_key = perf_hello();
    bad_key.extend_from_slice(&junk_key);
    let perf: [(&[u8], &str); 4] = [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "versions older than"),
        (&old_version, "versions older than"),
        (&bad_key, "malformed key message"),
        (&[0xff; 200], "versions older than"),
    ];
    let mut ping_bad_done = PING_ADDR.to_vec();
    ping_bad_done.extend_from_slice(b"DONE!");
    let mut http = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
    http.resize(52, 0);
    let ping: [(&[u8], &str); 3] = [
        (&http, "malformed address"),
        (&[0xff; 52], "malformed address"),
        (&ping_bad_done, "malformed end of the exchange"),
    ];
    for (cmd, cases) in [(PERF, &perf[..]), (PING, &ping[..])] {
        let mut server = Server::start(cmd);
        for (bytes, why) in cases {
            let mut c = server.connect();
            c.write_all(bytes).unwrap();
            let line = server.dropped(&c, LIMIT);
            assert!(
                line.contains(why),
                "{cmd:?} {:?}: expected {why:?} in {line}",
                String::from_utf8_lossy(bytes)
            );
            closed_by_server(&mut c);
        }
        let (_, serr) = real_client_is_served(server, cmd);
        assert_eq!(serr.matches("dropped client").count(), cases.len(), "{serr}");
    }
}

/// Connects, sends `hello`, reads `reply` bytes of answer, and aborts:
/// every other time with a reset (SO_LINGER 0) instead of a close.
fn abort_after(server: &mut Server, hello: &[u8], reply: usize, i: usize) {
    let mut c = server.connect();
    c.write_all(hello).unwrap();
    let mut answer = vec![0u8; reply];
    c.set_read_timeout(Some(LIMIT)).unwrap();
    c.read_exact(&mut answer).unwrap();
    if i % 2 == 1 {
        socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO)).unwrap();
    }
    let me = c.local_addr().unwrap();
    drop(c);
    let want = format!("dropped client {me}: ");
    let t = Instant::now();
    loop {
        match server.lines.recv_timeout(LIMIT.saturating_sub(t.elapsed())) {
            Ok(l) => {
                server.err.push(l.clone());
                if l.contains(&want) {
                    return;
                }
            }
            Err(e) => panic!("client {i} was never dropped ({e:?}):\n{}", server.err.join("\n")),
        }
    }
}

/// A hundred clients each make the server create 1000 QPs with their
/// buffers (they get through version, system data and MTU) and abort. With
/// those kept, the device's 65536 QPs would run out before the real client,
/// which needs 1000 more; its memory and descriptors stay level too.
#[test]
fn a_hundred_aborted_exchanges_leave_no_qps_behind() {
    let cmd = &["perf", "write-bw", "-q", "1000", "-s", "64", "-n", "5"];
    let mut server = Server::start(cmd);
    for i in 0..10 {
        abort_after(&mut server, &perf_hello(), 26, i);
    }
    let (rss0, fds0) = server.footprint();
    for i in 10..100 {
        abort_after(&mut server, &perf_hello(), 26, i);
    }
    let (rss, fds) = server.footprint();
    // Kept buffers alone would be 90 x 1000 x 8 KiB, half of it written.
    assert!(rss < rss0 + 64 * 1024, "the server grew from {rss0} kB to {rss} kB");
    assert!(fds <= fds0 + 2, "the server's descriptors went from {fds0} to {fds}");
    let (sout, serr) = real_client_is_served(server, cmd);
    assert_eq!(serr.matches("roce perf: dropped client").count(), 100, "{serr}");
    // Nothing was printed for the dropped clients.
    assert_eq!(sout.matches("Number of qps   : 1000").count(), 1, "{sout}");
    assert_eq!(sout.matches(" local address:").count(), 1000, "one line per QP of the one run");
}

/// The ping server's one QP, connected to each of a hundred clients that
/// abort before "done", is reset for the next; the real client is served.
#[test]
fn ping_survives_a_hundred_aborted_exchanges() {
    for ud in [false, true] {
        let mut cmd = PING.to_vec();
        if ud {
            cmd.push("--ud");
        }
        let mut server = Server::start(&cmd);
        for i in 0..10 {
            abort_after(&mut server, PING_ADDR, 52, i);
        }
        let (rss0, fds0) = server.footprint();
        for i in 10..100 {
            abort_after(&mut server, PING_ADDR, 52, i);
        }
        let (rss, fds) = server.footprint();
        assert!(rss < rss0 + 16 * 1024, "ud {ud}: the server grew from {rss0} kB to {rss} kB");
        assert!(fds <= fds0 + 2, "ud {ud}: descriptors went from {fds0} to {fds}");
        let (sout, _) = real_client_is_served(server, &cmd);
        assert_eq!(sout.matches("  local address:").count(), 1, "{sout}");
        assert!(sout.contains("3840 bytes in "), "{sout}");
    }
}

/// `--encrypt`: two `roce` ends that both ask for it agree on keys in the
/// exchange and run protected (perf and ping), and say so.
#[test]
fn encrypted_perf_and_ping_interoperate_with_themselves() {
    let perf = ["perf", "write-bw", "-n", "50", "-s", "10000", "--encrypt", "--counters"];
    let (sout, serr) = real_client_is_served(Server::start(&perf), &perf);
    assert!(sout.contains("Encryption      : AES-128-GCM"), "{sout}\n{serr}");
    assert!(sout.contains("crypto_auth_failed            : 0"), "{sout}");
    let ping = ["ping", "-n", "30", "-s", "4096", "-c", "--encrypt"];
    real_client_is_served(Server::start(&ping), &ping);
}

/// One end with `--encrypt`, the other without: the client fails at once
/// with a message that names the flag, the server drops it (saying why)
/// and serves the next client.
#[test]
fn encryption_on_one_end_only_fails_cleanly() {
    for (cmd, enc) in [(PERF, &["--encrypt"][..]), (PING, &["--encrypt"][..])] {
        for server_encrypts in [true, false] {
            let with = [cmd, enc].concat();
            let (scmd, ccmd) = if server_encrypts { (&with[..], cmd) } else { (cmd, &with[..]) };
            let mut server = Server::start(scmd);
            let mut a = ccmd.to_vec();
            let (ip, port) = (server.ip.clone(), server.port.clone());
            a.extend_from_slice(&[&ip, "-p", &port, "--udp-port", "0", "--timeout", "30"]);
            let c = roce_bounded(&a);
            let cerr = String::from_utf8_lossy(&c.stderr);
            assert!(!c.status.success(), "{a:?} succeeded against {scmd:?}");
            assert!(cerr.contains("--encrypt") && !cerr.contains("panicked"), "{a:?}: {cerr}");
            let line = server.line_with("dropped client", LIMIT);
            assert!(line.contains("encrypt"), "{line}");
            real_client_is_served(server, scmd);
        }
    }
}

/// A capture of a protected run: every packet is RoCEv2 with a right ICRC
/// (the independent oracle), the payloads ciphertext.
#[test]
fn encrypted_capture_passes_the_oracle() {
    let Some(check) = roce_test_support::pcap_oracle() else { return };
    let dir = std::env::temp_dir().join(format!("roce-enc-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("enc.pcap");
    let p = pcap.to_str().unwrap();
    let ip = unique_ip();
    let a = [
        "perf",
        "write-bw",
        "--loopback",
        "--bind",
        &ip,
        "--encrypt",
        "-m",
        "1024",
        "-s",
        "10000",
        "-n",
        "20",
        "--pcap",
        p,
    ];
    let o = roce_bounded(&a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // No --pmtu: a protected packet carries 24 bytes more than the MTU.
    let o = Command::new("python3").arg(&check).args(["--summary", p]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("0 failed") && out.contains("bad 0"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
