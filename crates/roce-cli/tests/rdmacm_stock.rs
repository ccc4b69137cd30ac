//! Unmodified rdma_cm programs over roce's librdmacm and libibverbs
//! (`roce exec`, with `crates/roce-rdmacm`'s library preloaded beside the
//! verbs one): Debian's `rdmacm-utils` (rping, ucmatose, udaddy,
//! rdma_server/rdma_client, cmtime) and perftest's `-R` mode, two
//! processes on loopback (127.0.25.1 serving, 127.0.25.2 connecting),
//! each with the CM on its device's UDP socket (port 4791 of its address,
//! where CM peers send). Every process is killed if
//! it outlives its time limit, so a regression fails rather than hangs.
//!
//! The server is started first; the client is started once the server's
//! device socket is bound, and started again (a few times) while its
//! connection request is rejected for want of a listener, which is how
//! it learns that the server's `rdma_listen` has not run yet.
//!
//! Without the binaries or the library the tests say so and pass; under
//! CI (`.ci/run` installs the binaries and builds the library) they fail.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use roce_test_support::in_ci;

/// The pairs run one at a time (a 2-core machine).
static SERIAL: Mutex<()> = Mutex::new(());

const LIMIT: Duration = Duration::from_secs(30);
const SERVER: &str = "127.0.25.1";
const CLIENT: &str = "127.0.25.2";

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn find(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| p.is_file())
}

fn skip(msg: &str) {
    assert!(!in_ci(), "{msg}: CI must run the stock rdma_cm programs");
    eprintln!("SKIPPED: {msg}");
}

/// The workspace's librdmacm beside the `roce` binary (roce-cli does not
/// depend on it, so it is built on its own).
fn rdmacm() -> Option<PathBuf> {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_roce"));
    let lib = exe.parent()?.join("libroce_rdmacm.so");
    if lib.is_file() {
        return Some(lib);
    }
    skip(&format!("{} missing (cargo build -p roce-rdmacm)", lib.display()));
    None
}

fn have(tools: &[&str]) -> Option<PathBuf> {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| find(t).is_none()).collect();
    if !missing.is_empty() {
        skip(&format!(
            "missing {} (apt-get install rdmacm-utils perftest libfabric-bin)",
            missing.join(", ")
        ));
        return None;
    }
    rdmacm()
}

struct Proc {
    what: String,
    child: Child,
    out: PathBuf,
    deadline: Instant,
}

fn out_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("roce-rdmacm-stock-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `roce exec --addr ADDR --udp-port UDP -- PROG...` with the librdmacm
/// preloaded too.
fn spawn(what: &str, lib: &Path, addr: &str, udp: u16, prog: &[&str]) -> Proc {
    let out = out_dir().join(format!("{}.out", what.replace([' ', '/'], "_")));
    let f = File::create(&out).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["exec", "--addr", addr, "--udp-port", &udp.to_string(), "--"])
        .args(prog)
        .env_remove("ROCE_DEVICES")
        .env("LD_PRELOAD", lib)
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    Proc { what: what.to_string(), child, out, deadline: Instant::now() + LIMIT }
}

/// A process left behind by a failed check is killed, so that its
/// address is free for the next pair.
impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

impl Proc {
    /// The exit status and output, killing the process at its deadline.
    fn wait(&mut self) -> (ExitStatus, String) {
        let status = loop {
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
        (status, read(&self.out))
    }

    fn finish(mut self) -> String {
        let (status, text) = self.wait();
        assert!(status.success(), "{}: {status}\n{text}", self.what);
        text
    }

    /// Waits until the process has bound its device's UDP socket at
    /// `addr:port` (seen in /proc/net/udp).
    fn wait_bound(&mut self, addr: &str, port: u16) {
        let ip: std::net::Ipv4Addr = addr.parse().unwrap();
        let want = format!("{:08X}:{port:04X}", u32::from_le_bytes(ip.octets()));
        loop {
            let bound = read(Path::new("/proc/net/udp")).lines().skip(1).any(|l| {
                let v: Vec<&str> = l.split_whitespace().collect();
                v.len() > 1 && v[1] == want
            });
            if bound {
                return;
            }
            if let Some(s) = self.child.try_wait().unwrap() {
                panic!("{} exited ({s}) before binding:\n{}", self.what, read(&self.out));
            }
            if Instant::now() > self.deadline {
                let _ = self.child.kill();
                panic!("{} never bound {addr}:{port}", self.what);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Whether a client failed because its connection request found no
/// listener yet (REJ reason 8, reported as REJECTED).
fn no_listener(out: &str) -> bool {
    out.contains("REJECTED") || out.contains("refused") || out.contains("reject")
}

/// A stock server on 127.0.25.1 and its client on 127.0.25.2; both
/// outputs. A client rejected for want of a listener is started again;
/// with `restart` (perftest, whose server cannot take a second client
/// and whose own retry frees what it then uses) the server is too.
fn pair(name: &str, server: &[&str], client: &[&str], restart: bool) -> Option<(String, String)> {
    pair_with(name, server, client, restart, true)
}

/// `pair`, for a server that exits by itself (`exits`) or serves until
/// killed (cmtime's), which happens once the client is done.
fn pair_with(
    name: &str,
    server: &[&str],
    client: &[&str],
    restart: bool,
    exits: bool,
) -> Option<(String, String)> {
    let lib = have(&[server[0], client[0]])?;
    let _g = serial();
    // RoCEv2's port: the CM sends to port 4791 of the peer's address, as
    // the kernel's does.
    let udp = 4791;
    let mut tries = 0;
    let mut s = spawn(&format!("{name} server"), &lib, SERVER, udp, server);
    s.wait_bound(SERVER, udp);
    let cout = loop {
        let mut c = spawn(&format!("{name} client"), &lib, CLIENT, udp, client);
        let (status, text) = c.wait();
        if status.success() {
            break text;
        }
        tries += 1;
        assert!(
            no_listener(&text) && tries < 20,
            "{name} client: {status}\n{text}\nserver:\n{}",
            read(&s.out)
        );
        if restart {
            drop(s);
            s = spawn(&format!("{name} server"), &lib, SERVER, udp, server);
            s.wait_bound(SERVER, udp);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if !exits {
        let out = s.out.clone();
        drop(s);
        return Some((read(&out), cout));
    }
    let sout = s.finish();
    Some((sout, cout))
}

#[test]
fn rping_verifies_its_data() {
    let port = "7174";
    let Some((s, c)) = pair(
        "rping",
        &["rping", "-s", "-a", SERVER, "-p", port, "-C", "100", "-v", "-V"],
        &["rping", "-c", "-a", SERVER, "-p", port, "-C", "100", "-v", "-V"],
        false,
    ) else {
        return;
    };
    // -v prints each ping; -V fails the client on a mismatch.
    assert!(c.lines().filter(|l| l.contains("ping data: rdma-ping-")).count() >= 100, "{c}");
    assert!(s.lines().filter(|l| l.contains("server ping data: rdma-ping-")).count() >= 100, "{s}");
}

#[test]
fn ucmatose_connects_and_exchanges() {
    let Some((s, c)) = pair(
        "ucmatose",
        &["ucmatose", "-b", SERVER, "-p", "7471", "-c", "2", "-C", "10"],
        &["ucmatose", "-s", SERVER, "-p", "7471", "-c", "2", "-C", "10"],
        false,
    ) else {
        return;
    };
    for out in [&s, &c] {
        assert!(out.contains("data transfers complete") && out.contains("return status 0"), "{out}");
        assert!(!out.contains("failed"), "{out}");
    }
    assert!(s.contains("disconnecting"), "{s}");
}

#[test]
fn udaddy_resolves_a_ud_service_with_sidr() {
    let Some((s, c)) = pair(
        "udaddy",
        &["udaddy", "-b", SERVER, "-c", "2", "-C", "10"],
        &["udaddy", "-s", SERVER, "-c", "2", "-C", "10"],
        false,
    ) else {
        return;
    };
    for out in [&s, &c] {
        assert!(out.contains("data transfers complete"), "{out}");
        assert!(!out.contains("failed"), "{out}");
    }
}

#[test]
fn rdma_server_and_rdma_client() {
    let Some((s, c)) = pair(
        "rdma_server",
        &["rdma_server", "-s", SERVER, "-p", "7471"],
        &["rdma_client", "-s", SERVER, "-p", "7471"],
        false,
    ) else {
        return;
    };
    assert!(s.contains("rdma_server: end") && c.contains("rdma_client: end"), "{s}\n{c}");
}

#[test]
fn perftest_send_lat_over_rdma_cm() {
    let Some((s, c)) = pair(
        "ib_send_lat -R",
        &["ib_send_lat", "-R", "-d", "roce0", "-p", "18515", "-n", "200"],
        &["ib_send_lat", "-R", "-d", "roce0", "-p", "18515", "-n", "200", SERVER],
        true,
    ) else {
        return;
    };
    assert!(c.contains("t_avg") || c.contains("usec"), "{c}");
    assert!(!s.contains("Couldn't") && !c.contains("Couldn't"), "{s}\n{c}");
}

#[test]
fn perftest_write_bw_over_rdma_cm() {
    let Some((s, c)) = pair(
        "ib_write_bw -R",
        &["ib_write_bw", "-R", "-d", "roce0", "-p", "18516", "-n", "500"],
        &["ib_write_bw", "-R", "-d", "roce0", "-p", "18516", "-n", "500", SERVER],
        true,
    ) else {
        return;
    };
    assert!(c.contains("BW average"), "{c}");
    assert!(!s.contains("Couldn't") && !c.contains("Couldn't"), "{s}\n{c}");
}

#[test]
fn perftest_read_bw_over_rdma_cm() {
    let Some((s, c)) = pair(
        "ib_read_bw -R",
        &["ib_read_bw", "-R", "-d", "roce0", "-p", "18517", "-n", "500"],
        &["ib_read_bw", "-R", "-d", "roce0", "-p", "18517", "-n", "500", SERVER],
        true,
    ) else {
        return;
    };
    assert!(c.contains("BW average"), "{c}");
    assert!(!s.contains("Couldn't") && !c.contains("Couldn't"), "{s}\n{c}");
}

/// cmtime: 20 connections set up and torn down at once, its table of
/// per-step times printed (a figure, never a check: no timing assertion).
#[test]
fn cmtime_connects_and_disconnects_many() {
    let Some((_s, c)) = pair_with(
        "cmtime",
        &["cmtime", "-b", SERVER, "-p", "7472", "-c", "20"],
        &["cmtime", "-s", SERVER, "-p", "7472", "-c", "20"],
        false,
        false,
    ) else {
        return;
    };
    for step in ["connect", "disconnect", "destroy"] {
        assert!(c.lines().any(|l| l.starts_with(step)), "{c}");
    }
}

/// libfabric's verbs provider (Debian's libfabric-bin) over roce:
/// `fi_info -p verbs` lists the device, and `fi_pingpong` runs over its
/// datagram (UD) endpoints with every message acknowledged. The provider's
/// connected (FI_EP_MSG) endpoints need an RDMA-capable interface address
/// other than loopback, which it skips, so they are not listed here.
#[test]
fn libfabric_lists_the_device_and_pingpongs_over_verbs() {
    let Some(lib) = have(&["fi_info", "fi_pingpong"]) else { return };
    let listed = {
        let _g = serial();
        let p = spawn("fi_info", &lib, SERVER, 4791, &["fi_info", "-p", "verbs"]);
        p.finish()
    };
    assert!(listed.contains("provider: verbs") && listed.contains("domain: roce0"), "{listed}");
    // The server opens its device only once a client has reached it over
    // TCP, so there is no bound socket to wait for: the client is started
    // again while the server's TCP port refuses it.
    let _g = serial();
    let args = ["fi_pingpong", "-p", "verbs", "-e", "dgram", "-I", "50", "-S", "all"];
    let server = spawn("fi_pingpong server", &lib, SERVER, 4791, &args);
    let mut client_args = args.to_vec();
    client_args.push(SERVER);
    let mut tries = 0;
    let c = loop {
        let mut c = spawn("fi_pingpong client", &lib, CLIENT, 4791, &client_args);
        let (status, text) = c.wait();
        if status.success() {
            break text;
        }
        tries += 1;
        assert!(
            no_listener(&text) && tries < 50,
            "fi_pingpong client: {status}\n{text}\nserver:\n{}",
            read(&server.out)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let s = server.finish();
    for out in [&s, &c] {
        let rows = out.lines().filter(|l| l.split_whitespace().nth(2) == Some("=50")).count();
        assert!(rows >= 4, "every size acknowledged 50 of 50:\n{out}");
    }
}
