//! Unmodified verbs programs over roce's libibverbs (`roce exec`): Debian's
//! `ibverbs-utils` (ibv_devinfo, ibv_rc_pingpong, ibv_ud_pingpong) and
//! `perftest` binaries, two processes on loopback (127.0.0.1 and
//! 127.0.0.2), and mixed pairs of a stock tool against `roce perf` /
//! `roce ping`, which shows that their out-of-band exchange is perftest's
//! and ibv_rc_pingpong's. Every process is killed if it outlives its time
//! limit, so a regression fails rather than hangs.
//!
//! Without the binaries the tests say so and pass; under CI (`.ci/run`
//! installs them) they fail.

use std::fs::File;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use roce_test_support::in_ci;

/// The pairs run one at a time: a 2-core machine shares its CPUs poorly
/// between two benchmarks, and their time limits assume it need not.
static SERIAL: Mutex<()> = Mutex::new(());

const LIMIT: Duration = Duration::from_secs(90);

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn find(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| p.is_file())
}

/// Whether the stock tools are here; a notice (or, under CI, a failure)
/// when they are not.
fn have(tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| find(t).is_none()).collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!("missing {} (apt-get install perftest ibverbs-utils)", missing.join(", "));
    assert!(!in_ci(), "{msg}: CI must run the stock verbs programs");
    eprintln!("SKIPPED: {msg}");
    false
}

fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A process whose output goes to a file, killed at its deadline.
struct Proc {
    what: String,
    child: Child,
    out: PathBuf,
    deadline: Instant,
}

fn out_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("roce-stock-verbs-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `roce ARGS...` (an `exec` of a stock tool, or our own tools).
fn spawn(what: &str, args: &[String]) -> Proc {
    let out = out_dir().join(format!("{}.out", what.replace([' ', '/'], "_")));
    let f = File::create(&out).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .env_remove("ROCE_DEVICES")
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    Proc { what: what.to_string(), child, out, deadline: Instant::now() + LIMIT }
}

impl Proc {
    /// Waits for the exit (polling the child, bounded by its deadline) and
    /// returns its output, asserting success.
    fn finish(mut self) -> String {
        let status: ExitStatus = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > self.deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("{} still running after {:?}:\n{}", self.what, LIMIT, read(&self.out));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let text = read(&self.out);
        assert!(status.success(), "{}: {status}\n{text}", self.what);
        text
    }

    /// Waits until the process listens on TCP `port` (seen in
    /// /proc/net/tcp{,6}, so no connection is spent on asking).
    fn wait_listening(&mut self, port: u16) {
        loop {
            if listening(port) {
                return;
            }
            if let Some(s) = self.child.try_wait().unwrap() {
                panic!("{} exited ({s}) before listening:\n{}", self.what, read(&self.out));
            }
            if Instant::now() > self.deadline {
                let _ = self.child.kill();
                panic!("{} never listened on TCP port {port}", self.what);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        read(Path::new(f)).lines().skip(1).any(|l| {
            let v: Vec<&str> = l.split_whitespace().collect();
            v.len() > 3 && v[1].ends_with(&want) && v[3] == "0A"
        })
    })
}

fn exec_args(addr: &str, udp: u16, prog: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = ["exec", "--addr", addr, "--udp-port", &udp.to_string(), "--"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(prog.iter().map(|s| s.to_string()));
    a
}

/// A server (listening on `tcp`) and a client; returns both outputs.
fn pair(what: &str, server: Vec<String>, client: Vec<String>, tcp: u16) -> (String, String) {
    let mut s = spawn(&format!("{what} server"), &server);
    s.wait_listening(tcp);
    let c = spawn(&format!("{what} client"), &client);
    let cout = c.finish();
    let sout = s.finish();
    (sout, cout)
}

/// Two stock processes over the library, each on its own address and
/// both on one free UDP port.
fn stock_pair(tool: &str, extra: &[&str]) -> (String, String) {
    let (tcp, udp) = (free_tcp_port(), free_udp_port());
    let port = tcp.to_string();
    let mut prog = vec![tool, "-d", "roce0", "-p", &port];
    prog.extend_from_slice(extra);
    let server = exec_args("127.0.0.1", udp, &prog);
    prog.push("127.0.0.1");
    let client = exec_args("127.0.0.2", udp, &prog);
    pair(&format!("{tool} {}", extra.join(" ")), server, client, tcp)
}

/// The result rows of a perftest table: the lines after the `#bytes`
/// header, each all numbers, the size first.
fn rows(out: &str, what: &str) -> Vec<Vec<f64>> {
    let rows: Vec<Vec<f64>> = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"))
        .skip(1)
        .take_while(|l| !l.starts_with("---"))
        .map(|l| l.split_whitespace().map(|f| f.parse::<f64>().unwrap_or(f64::NAN)).collect())
        .collect();
    assert!(!rows.is_empty(), "{what}: no results in\n{out}");
    for r in &rows {
        assert!(r.iter().all(|v| v.is_finite() && *v >= 0.0), "{what}: row {r:?} in\n{out}");
    }
    rows
}

/// Bandwidth rows: a positive message rate for each size, and an average
/// bandwidth that is that rate times the size (perftest's MB is 2^20
/// bytes). The average is printed with two decimals, so a slow small size
/// on a loaded machine reads 0.00 (2 bytes at 2,500 messages a second is
/// 0.005 MB/s): the rate is what shows the transfers happened, and the
/// product checks that the two columns describe the same run.
fn assert_bw(out: &str, what: &str, sizes: usize) -> f64 {
    let rows = rows(out, what);
    assert_eq!(rows.len(), sizes, "{what}: {} sizes in\n{out}", rows.len());
    for r in &rows {
        assert_eq!(r.len(), 5, "{what}: row {r:?}");
        assert!(r[4] > 0.0, "{what}: no messages in row {r:?}\n{out}");
        let expect = r[0] * r[4] * 1e6 / f64::from(1u32 << 20);
        // Rounding: 0.005 MB/s on the average, half a unit in the sixth
        // decimal of the rate.
        let slack = 0.006 + r[0] * 0.5e-6 * 1e6 / f64::from(1u32 << 20) + expect * 0.01;
        assert!(
            (r[3] - expect).abs() <= slack,
            "{what}: row {r:?} has {} MB/s, its rate says {expect:.3}\n{out}",
            r[3]
        );
    }
    rows[0][3]
}

/// Latency rows: a positive typical and average latency.
fn assert_lat(out: &str, what: &str, sizes: usize) {
    let rows = rows(out, what);
    assert_eq!(rows.len(), sizes, "{what}: {} sizes in\n{out}", rows.len());
    for r in &rows {
        assert!(r.len() >= 6, "{what}: row {r:?}");
        assert!(r[4] > 0.0 && r[5] > 0.0, "{what}: no latency in row {r:?}\n{out}");
    }
}

/// perftest's `-a`: every power of two from 2 bytes to 8 MiB.
const ALL_SIZES: usize = 23;

/// An `ib_read_bw -a` table from a loaded 2-core machine: the small sizes'
/// averages print as 0.00 while their rates show the reads happened.
const SLOW_TABLE: &str = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 2          20               0.01               0.00   \t\t   0.002552
 4          20               0.02               0.01   \t\t   0.001545
 4096       20               8.01               7.51   \t\t   0.001923
 131072     20               708.57             646.59 \t\t   0.005173
 8388608    20               526.17             526.17 \t\t   0.000066
---------------------------------------------------------------------------------------
";

#[test]
fn bandwidth_rows_are_checked_by_their_rate() {
    assert_eq!(assert_bw(SLOW_TABLE, "slow table", 5), 0.0);
    // An average the rate does not account for is caught.
    let forged = SLOW_TABLE.replace("646.59", "64.59");
    let caught = std::panic::catch_unwind(|| assert_bw(&forged, "forged", 5));
    assert!(caught.is_err(), "a 10x wrong average passed");
    let silent = SLOW_TABLE.replace("0.001923", "0.000000");
    assert!(std::panic::catch_unwind(|| assert_bw(&silent, "silent", 5)).is_err(), "a zero rate passed");
}

#[test]
fn ibv_devinfo_sees_a_rocev2_port() {
    if !have(&["ibv_devinfo"]) {
        return;
    }
    let _g = serial();
    let out = spawn("ibv_devinfo", &exec_args("127.0.0.1", free_udp_port(), &["ibv_devinfo", "-v"])).finish();
    for needle in [
        "hca_id:\troce0",
        "PORT_ACTIVE (4)",
        "active_mtu:\t\t4096 (5)",
        "link_layer:\t\tEthernet",
        "GID[  0]:\t\t::ffff:127.0.0.1, RoCE v2",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
    ] {
        assert!(out.contains(needle), "ibv_devinfo: no {needle:?} in\n{out}");
    }
}

#[test]
fn pingpong_examples() {
    if !have(&["ibv_rc_pingpong", "ibv_ud_pingpong"]) {
        return;
    }
    let _g = serial();
    for (tool, extra) in [
        ("ibv_rc_pingpong", &["-g", "0"][..]),
        ("ibv_rc_pingpong", &["-g", "0", "-e"]),
        ("ibv_ud_pingpong", &["-g", "0"]),
    ] {
        let (s, c) = stock_pair(tool, extra);
        for (side, out) in [("server", &s), ("client", &c)] {
            assert!(out.contains("remote address: LID 0x0000"), "{tool} {side}: {out}");
            assert!(out.contains(" Mbit/sec") && out.contains("1000 iters in "), "{tool} {side}: {out}");
            assert!(!out.contains("= 0.00 Mbit/sec"), "{tool} {side}: {out}");
        }
    }
}

#[test]
fn perftest_bandwidth() {
    if !have(&["ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw"]) {
        return;
    }
    let _g = serial();
    for tool in ["ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw"] {
        let (s, c) = stock_pair(tool, &[]);
        assert_bw(&c, tool, 1);
        assert!(s.contains("Link type       : Ethernet"), "{tool} server: {s}");
        if tool == "ib_atomic_bw" {
            continue;
        }
        let (_, c) = stock_pair(tool, &["-a", "-n", "20"]);
        assert_bw(&c, &format!("{tool} -a"), ALL_SIZES);
    }
}

#[test]
fn perftest_latency() {
    if !have(&["ib_write_lat", "ib_send_lat"]) {
        return;
    }
    let _g = serial();
    for tool in ["ib_write_lat", "ib_send_lat"] {
        let c = lat_pair(tool, &[]);
        assert_lat(&c, tool, 1);
        let c = lat_pair(tool, &["-a", "-n", "20"]);
        assert_lat(&c, &format!("{tool} -a"), ALL_SIZES);
    }
}

/// A latency pair's client output. perftest converts cycles to
/// microseconds with a CPU frequency it estimates for every report; on a
/// loaded machine the estimate can fail ("Correlation coefficient r^2:
/// ... < 0.9") and that report reads inf whatever the transport did. Such a
/// run is tried again, at most twice; any other output is returned as it is.
fn lat_pair(tool: &str, extra: &[&str]) -> String {
    let mut c = String::new();
    for _ in 0..3 {
        c = stock_pair(tool, extra).1;
        if !c.contains("Correlation coefficient r^2") {
            break;
        }
    }
    c
}

/// A stock tool against `roce perf` / `roce ping`, both roles. perftest's
/// exchange carries no UDP port, so both devices use RoCEv2's 4791, on
/// 127.0.0.1 and 127.0.0.2.
#[test]
fn mixed_pairs_with_roce_tools() {
    if !have(&["ib_write_bw", "ib_read_bw", "ibv_rc_pingpong"]) {
        return;
    }
    let _g = serial();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    for (tool, ours) in [("ib_write_bw", "write-bw"), ("ib_read_bw", "read-bw")] {
        let tcp = free_tcp_port();
        let p = tcp.to_string();
        // stock client, roce server
        let (so, co) = pair(
            &format!("{tool} vs roce perf server"),
            s(&["perf", ours, "--bind", "127.0.0.1", "-p", &p]),
            exec_args("127.0.0.2", 4791, &[tool, "-d", "roce0", "-p", &p, "127.0.0.1"]),
            tcp,
        );
        assert_bw(&co, &format!("{tool} client vs roce perf"), 1);
        assert_bw(&so, &format!("roce perf server vs {tool}"), 1);
        // roce client, stock server
        let tcp = free_tcp_port();
        let p = tcp.to_string();
        let (so, co) = pair(
            &format!("roce perf client vs {tool} server"),
            exec_args("127.0.0.1", 4791, &[tool, "-d", "roce0", "-p", &p]),
            s(&["perf", ours, "127.0.0.1", "--bind", "127.0.0.2", "-p", &p]),
            tcp,
        );
        assert_bw(&co, &format!("roce perf client vs {tool}"), 1);
        assert_bw(&so, &format!("{tool} server vs roce perf"), 1);
    }
    let tcp = free_tcp_port();
    let p = tcp.to_string();
    let (so, co) = pair(
        "ibv_rc_pingpong vs roce ping server",
        s(&["ping", "--bind", "127.0.0.1", "-p", &p]),
        exec_args("127.0.0.2", 4791, &["ibv_rc_pingpong", "-d", "roce0", "-g", "0", "-p", &p, "127.0.0.1"]),
        tcp,
    );
    assert!(co.contains("1000 iters in "), "{co}");
    assert!(so.contains("1000 iters in "), "{so}");
    let tcp = free_tcp_port();
    let p = tcp.to_string();
    let (so, co) = pair(
        "roce ping vs ibv_rc_pingpong server",
        exec_args("127.0.0.1", 4791, &["ibv_rc_pingpong", "-d", "roce0", "-g", "0", "-p", &p]),
        s(&["ping", "127.0.0.1", "--bind", "127.0.0.2", "-p", &p]),
        tcp,
    );
    assert!(co.contains("1000 iters in "), "{co}");
    assert!(so.contains("1000 iters in "), "{so}");
}

/// Bad input gets an errno, not a crash: a program naming no configured
/// device, or a device whose address cannot be bound.
#[test]
fn errors_are_reported_not_crashed() {
    if !have(&["ibv_rc_pingpong", "ibv_devinfo"]) {
        return;
    }
    let _g = serial();
    let o = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(exec_args("127.0.0.1", free_udp_port(), &["ibv_rc_pingpong", "-d", "nosuch", "-g", "0"]))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("IB device nosuch not found"), "{o:?}");
    // 192.0.2.1 (TEST-NET-1) is on no interface: the device cannot open.
    let o = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(exec_args("192.0.2.1", free_udp_port(), &["ibv_devinfo"]))
        .output()
        .unwrap();
    assert!(o.status.code().is_some(), "killed by a signal: {o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("192.0.2.1"), "{o:?}");
}

/// `tests/c/verbs_api.c`, compiled against rdma-core's header and linked
/// against its libibverbs, run over ours: discovery, queries, a completion
/// channel's fd under poll(2), the async fd under epoll(7), inline sends
/// of unregistered memory, and the errnos programs check.
#[test]
fn c_program_over_the_library() {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        let msg = "missing <infiniband/verbs.h> (apt-get install libibverbs-dev)";
        assert!(!in_ci(), "{msg}: CI must build the C test");
        eprintln!("SKIPPED: {msg}");
        return;
    }
    let _g = serial();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/verbs_api.c");
    let exe = out_dir().join("verbs_api");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc).arg("-Wall").arg(&src).arg("-o").arg(&exe).arg("-libverbs").output();
    let built = match built {
        Ok(o) => o,
        Err(e) => {
            assert!(!in_ci(), "no C compiler ({cc}: {e}) under CI");
            eprintln!("SKIPPED: no C compiler ({cc}: {e})");
            return;
        }
    };
    assert!(built.status.success(), "verbs_api.c did not build:\n{}", String::from_utf8_lossy(&built.stderr));
    let exe = exe.to_string_lossy().into_owned();
    let out = spawn("verbs_api", &exec_args("127.0.0.1", free_udp_port(), &[&exe])).finish();
    assert_eq!(out.trim(), "ok", "{out}");
}

/// `tests/c/dlopen_verbs.c`: a program with no link-time libibverbs that
/// `dlopen`s it by name, as NCCL and Python's ctypes do, under `roce
/// exec`. Both the unversioned `libibverbs.so` (which rdma-core's
/// development package also provides) and `libibverbs.so.1` must give
/// roce's library and no second one: the program checks that one
/// libibverbs is mapped, lists the device and runs an RDMA WRITE and a
/// SEND between two QPs.
#[test]
fn a_program_that_dlopens_libibverbs_gets_ours_alone() {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        let msg = "missing <infiniband/verbs.h> (apt-get install libibverbs-dev)";
        assert!(!in_ci(), "{msg}: CI must build the C test");
        eprintln!("SKIPPED: {msg}");
        return;
    }
    let _g = serial();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/dlopen_verbs.c");
    let exe = out_dir().join("dlopen_verbs");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = match Command::new(&cc).arg("-Wall").arg(&src).arg("-o").arg(&exe).arg("-ldl").output() {
        Ok(o) => o,
        Err(e) => {
            assert!(!in_ci(), "no C compiler ({cc}: {e}) under CI");
            eprintln!("SKIPPED: no C compiler ({cc}: {e})");
            return;
        }
    };
    assert!(
        built.status.success(),
        "dlopen_verbs.c did not build:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let exe = exe.to_string_lossy().into_owned();
    for name in ["libibverbs.so", "libibverbs.so.1"] {
        let out = spawn(&format!("dlopen {name}"), &exec_args("127.0.0.1", free_udp_port(), &[&exe, name]))
            .finish();
        assert!(out.lines().any(|l| l == "ok"), "{out}");
    }
}
