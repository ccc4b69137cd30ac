//! Interop with a peer we did not write: Linux Soft-RoCE (rdma_rxe) and the
//! stock rdma-core and perftest tools, in a qemu VM reached through a tap
//! device (`../shared/tools/rxe-lab`), against `roce ping` and `roce perf`.
//!
//! Every pairing runs in both directions (stock server and our client, our
//! server and stock client) at rxe's path MTU, 1024: ibv_rc_pingpong and
//! ibv_ud_pingpong (their `--chk` data check on both ends), perftest's
//! ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw (CMP_AND_SWAP),
//! ib_write_lat and ib_send_lat, over IPv4, and 8 MiB READs from rxe,
//! which our requester splits within its READ budget (checked on the
//! wire); the RC pairs over IPv6 too (a
//! global address on both ends, rxe's GID for it; the exchange stays on
//! IPv4, where the stock tools listen). Then a part of it again with random
//! loss on the link in both directions (nftables in the lab's namespace;
//! netem where the kernel has it). Between the two, the 8 MiB READs once
//! more with the VM stopped for 300 ms in the middle of them: rxe falls
//! silent for longer than the ACK timeout and then replays the repeated
//! requests, and the run must complete.
//!
//! Judged by what crossed the wire, not by what either end says: the tap is
//! captured and `roce-pcap-check` must find every RoCE packet we sent
//! well-formed with a good ICRC (and a sample of rxe's, which keeps the
//! oracle honest); rxe must have accepted every packet we sent in the
//! loss-free part (its `rcvd_pkts` grows by exactly the packets we sent,
//! since it drops bad ones silently) and counted no retry, sequence error
//! or duplicate (but the duplicates of a pairing where a timer of ours
//! fired after the VM fell silent, printed beside it); our `--counters`
//! must show no ICRC error and no datagram the kernel refused. One pairing also writes `--pcap`, which must equal
//! the tap capture byte for byte (but for the UDP checksum of received
//! packets, which a socket cannot know).
//!
//! It boots a VM, so it runs only where asked: under CI, or with
//! `ROCE_INTEROP=1`. It needs root; without it (or when the lab's packages
//! cannot be downloaded) it skips with a notice.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const VM_IP: &str = "10.47.0.1";
const HOST_IP: &str = "10.47.0.3";
const VM_IP6: &str = "fd47::1";
const HOST_IP6: &str = "fd47::3";
const NETNS: &str = "rxelab";
/// rxe's counters that move only when packets are lost, late or refused.
const RXE_TROUBLE: [&str; 6] = [
    "duplicate_request",
    "out_of_seq_request",
    "rcvd_seq_err",
    "completer_retry_err",
    "retry_exceeded_err",
    "send_err",
];
/// Loss in each direction in the lossy part, percent.
const LOSS_PERCENT: u32 = 3;

struct Lab {
    tool: PathBuf,
    out: PathBuf,
    /// GID index of the VM's IPv6 address.
    gid6: u32,
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

impl Lab {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.tool);
        c.args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Result<String, String> {
        let o = self.cmd(args).output().map_err(|e| format!("rxe-lab {args:?}: {e}"))?;
        if o.status.success() {
            Ok(text(&o))
        } else {
            Err(format!("rxe-lab {args:?} failed ({}):\n{}", o.status, text(&o)))
        }
    }

    /// A command in the VM, killed there after `secs`.
    fn exec(&self, cmd: &str, secs: u32) -> (bool, String) {
        let o = self.cmd(&["exec", cmd]).env("RXE_LAB_TIMEOUT", secs.to_string()).output();
        match o {
            Ok(o) => (o.status.success(), text(&o)),
            Err(e) => (false, e.to_string()),
        }
    }

    fn counters(&self) -> BTreeMap<String, u64> {
        let t = self.run(&["counters", "-l"]).unwrap_or_default();
        t.lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_string(), v.trim().parse().ok()?))
            })
            .collect()
    }

    /// Waits until something in the VM listens on TCP 18515.
    fn vm_listening(&self) -> bool {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(30) {
            if self.exec("netstat -ltn", 10).1.contains(":18515 ") {
                return true;
            }
        }
        false
    }
}

/// Waits until something in the lab's namespace listens on TCP 18515.
fn host_listening() -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(30) {
        let o = Command::new("ip").args(["netns", "exec", NETNS, "ss", "-Hltn", "sport = :18515"]).output();
        if o.is_ok_and(|o| !o.stdout.is_empty()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// `roce` in the lab's namespace.
fn roce(args: &[String]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", NETNS, env!("CARGO_BIN_EXE_roce")])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ip netns exec runs")
}

/// Waits for `child`, killing it after `limit`.
fn wait_bounded(mut child: Child, limit: Duration) -> (bool, String) {
    let t = Instant::now();
    while child.try_wait().ok().flatten().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            return (false, format!("killed after {limit:?}\n{}", text(&o)));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    (o.status.success(), text(&o))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Server {
    Vm,
    Roce,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Family {
    V4,
    V6,
}

/// One pairing: the stock tool (without GID index and server address) and
/// our command (without server address, `--bind` and `--timeout`).
struct Case {
    stock: &'static str,
    ours: &'static [&'static str],
    server: Server,
    family: Family,
}

impl Case {
    fn name(&self) -> String {
        let tool = self.stock.split_whitespace().next().unwrap_or("");
        let args: Vec<&str> = self.stock.split_whitespace().skip(1).collect();
        let dir = match self.server {
            Server::Vm => format!("roce -> {tool}"),
            Server::Roce => format!("{tool} -> roce"),
        };
        format!("{dir} {} [{:?}]", args.join(" "), self.family)
    }
}

/// What one run left to check.
struct Ran {
    ok: bool,
    log: String,
}

/// perftest's words when it cannot calibrate its cycle counter against the
/// clock (`get_cpu_mhz`: the samples' r^2 under 0.9), which a VM under
/// software emulation on a loaded host sometimes makes it do: it then
/// gives up its report after the transfer, and the pairing says nothing
/// of the wire.
const PERFTEST_CLOCK_FAILURE: &str = "Can't produce a report";

/// Runs a pairing, and once more if the stock perftest tool could not
/// calibrate its clock (`PERFTEST_CLOCK_FAILURE`); any other failure
/// stands.
fn run_case(lab: &Lab, c: &Case, timeout: u32, pcap: Option<&Path>) -> Ran {
    let r = run_case_once(lab, c, timeout, pcap);
    if r.ok || !r.log.contains(PERFTEST_CLOCK_FAILURE) {
        return r;
    }
    eprintln!("     ({}: the stock tool could not calibrate its clock; run again)", c.name());
    run_case_once(lab, c, timeout, pcap)
}

fn run_case_once(lab: &Lab, c: &Case, timeout: u32, pcap: Option<&Path>) -> Ran {
    let gid = match c.family {
        Family::V4 => 1,
        Family::V6 => lab.gid6,
    };
    let gid_flag = if c.stock.starts_with("ib_") { "-x" } else { "-g" };
    let stock = format!("{} -d rxe0 {gid_flag} {gid}", c.stock);
    let mut ours: Vec<String> = c.ours.iter().map(|s| s.to_string()).collect();
    ours.extend(["--timeout".into(), timeout.to_string(), "--counters".into()]);
    ours.extend(["--bind".into(), (if c.family == Family::V4 { HOST_IP } else { HOST_IP6 }).into()]);
    if let Some(p) = pcap {
        ours.extend(["--pcap".into(), p.display().to_string()]);
    }
    let limit = Duration::from_secs(u64::from(timeout) * 6 + 60);
    let (ours_ok, ours_out, stock_ok, stock_out) = match c.server {
        Server::Vm => {
            let id = match lab.run(&["bg", &stock]) {
                Ok(id) => id.trim().to_string(),
                Err(e) => return Ran { ok: false, log: e },
            };
            if !lab.vm_listening() {
                let _ = lab.run(&["wait", &id, "1"]);
                return Ran { ok: false, log: format!("{stock} never listened") };
            }
            ours.push(VM_IP.into());
            let (ok, out) = wait_bounded(roce(&ours), limit);
            let w = lab.cmd(&["wait", &id, &(timeout * 6 + 30).to_string()]).output();
            let (sok, sout) = w.map(|o| (o.status.success(), text(&o))).unwrap_or((false, String::new()));
            (ok, out, sok, sout)
        }
        Server::Roce => {
            let child = roce(&ours);
            if !host_listening() {
                let (_, out) = wait_bounded(child, Duration::from_secs(1));
                return Ran { ok: false, log: format!("roce never listened:\n{out}") };
            }
            let (sok, sout) = lab.exec(&format!("{stock} {HOST_IP}"), timeout * 6 + 30);
            let (ok, out) = wait_bounded(child, limit);
            (ok, out, sok, sout)
        }
    };
    let mut problems = Vec::new();
    if !ours_ok {
        problems.push("roce failed".to_string());
    }
    if !stock_ok {
        problems.push("the stock tool failed".to_string());
    }
    if stock_out.contains("invalid data") {
        problems.push("the stock tool's data check failed".to_string());
    }
    for (name, want) in [("icrc_errors", 0), ("tx_errors", 0)] {
        match counter(&ours_out, name) {
            Some(v) if v == want => {}
            v => problems.push(format!("our {name} is {v:?}")),
        }
    }
    let ok = problems.is_empty();
    let log = format!(
        "{}\n--- roce {}:\n{ours_out}\n--- {stock}:\n{stock_out}",
        problems.join("; "),
        ours.join(" ")
    );
    Ran { ok, log }
}

/// A counter from `--counters` output.
fn counter(out: &str, name: &str) -> Option<u64> {
    out.lines()
        .find(|l| l.trim_start().starts_with(&format!("{name} ")))
        .and_then(|l| l.rsplit(':').next())
        .and_then(|v| v.trim().parse().ok())
}

fn cases(families: &[Family], lossy: bool) -> Vec<Case> {
    let mut v = Vec::new();
    for &family in families {
        for server in [Server::Vm, Server::Roce] {
            let mut add = |stock, ours| v.push(Case { stock, ours, server, family });
            // With loss, the stock server can lose the ACK of its last
            // message and fail after the client has left: ibv_rc_pingpong
            // has no way around that, so only our client (which knows every
            // message arrived, and lingers) meets the stock server there.
            if !lossy || server == Server::Vm {
                add("ibv_rc_pingpong -s 4096 -n 100 -c", &["ping", "-s", "4096", "-n", "100", "-c"]);
            }
            if !lossy {
                add("ibv_rc_pingpong -s 64 -n 100 -c", &["ping", "-s", "64", "-n", "100", "-c"]);
            }
            if family == Family::V4 && !lossy {
                add("ibv_ud_pingpong -s 1024 -n 100 -c", &["ping", "--ud", "-s", "1024", "-n", "100", "-c"]);
                add("ibv_ud_pingpong -s 64 -n 100 -c", &["ping", "--ud", "-s", "64", "-n", "100", "-c"]);
            }
            add("ib_write_bw -s 65536 -n 50", &["perf", "write-bw", "-s", "65536", "-n", "50"]);
            add("ib_read_bw -s 65536 -n 50", &["perf", "read-bw", "-s", "65536", "-n", "50"]);
            add("ib_send_bw -s 65536 -n 50", &["perf", "send-bw", "-s", "65536", "-n", "50"]);
            add(
                "ib_atomic_bw -A CMP_AND_SWAP -n 200",
                &["perf", "atomic-bw", "-A", "CMP_AND_SWAP", "-n", "200"],
            );
            add("ib_write_lat -s 64 -n 200", &["perf", "write-lat", "-s", "64", "-n", "200"]);
            add("ib_send_lat -s 64 -n 200", &["perf", "send-lat", "-s", "64", "-n", "200"]);
            // Large READs from rxe, which our requester asks for in several
            // READ requests within its READ budget (`split_reads` checks
            // the requests on the wire). With loss too: each lost response
            // is asked for alone (a READ request for part of one rxe
            // already serves), not with the rest of the window.
            if family == Family::V4 && server == Server::Vm {
                add(BIG_READ_STOCK, &["perf", "read-bw", "-s", "8388608", "-n", "5"]);
            }
        }
    }
    v
}

/// The pairing of large, split READs: 8 MiB messages, 5 of them (perf
/// tools take no fewer). The VM's one emulated CPU sends their responses
/// in bursts with pauses of tens of milliseconds (up to the 67 ms ACK
/// timeout) and now and then loses one at a burst's edge; a run where that
/// happens is recovered by our requester (a repeated READ request, which
/// rxe counts as a duplicate), so this pairing must pass, but its
/// duplicates are its own and not counted against the loss-free part
/// (they are printed beside it). A device's READ chunk is a sixteenth of its
/// granted receive buffer (a quarter of the READ budget), 4 MiB at the
/// most the kernel grants here (32 MiB forced), so each message takes two
/// requests at least.
const BIG_READ_STOCK: &str = "ib_read_bw -s 8388608 -n 5";
const BIG_READS: u64 = 5;
const BIG_READ: u64 = 8 << 20;

/// Our IPv4 RDMA READ requests on the wire: (their number, the bytes they
/// ask for, the longest). The large pairing's 8 MiB READs must have gone
/// out as several requests, none for the whole message (IBTA vol. 1
/// 9.4.3: a READ is one request per message, so the requester splits a
/// message into messages of its own, each with its own RETH); the other
/// READ pairing asks for about 3 MiB in all, less than the large one.
fn split_reads(pcap: &Path) -> (u64, u64, u64) {
    let (mut n, mut bytes, mut longest) = (0, 0, 0);
    for (from_host, ip) in roce_packets(pcap, false) {
        // IPv4 (20 bytes) + UDP (8) + BTH (12), then the RETH: VA, R_Key,
        // DMA length.
        if !from_host || ip[0] >> 4 != 4 || ip.len() < 56 || ip[28] != 0x0c {
            continue;
        }
        let len = u64::from(u32::from_be_bytes([ip[52], ip[53], ip[54], ip[55]]));
        n += 1;
        bytes += len;
        longest = longest.max(len);
    }
    (n, bytes, longest)
}

/// The RoCE packets of a capture: (from the host?, IP header onwards),
/// with the UDP checksum of packets sent to the host cleared when `mask`.
fn roce_packets(path: &Path, mask: bool) -> Vec<(bool, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(r) = roce_wire::pcap::PcapReader::open(path) else { return out };
    for rec in r.flatten() {
        let Some(RoceFrame { udp_at, from_host }) = roce_frame(&rec.data) else { continue };
        let mut ip = rec.data[14..].to_vec();
        if mask && !from_host {
            ip[udp_at + 6..udp_at + 8].fill(0);
        }
        out.push((from_host, ip));
    }
    out
}

/// Where a captured Ethernet frame's UDP header starts (from the IP
/// header) and who sent it, if it is RoCEv2 (UDP to port 4791).
struct RoceFrame {
    udp_at: usize,
    from_host: bool,
}

fn roce_frame(f: &[u8]) -> Option<RoceFrame> {
    let host: [&[u8]; 2] = [&[10, 47, 0, 3], &HOST_IP6.parse::<std::net::Ipv6Addr>().unwrap().octets()];
    let ip = f.get(14..)?;
    let (udp_at, src) = match u16::from_be_bytes([f[12], f[13]]) {
        0x0800 if ip.len() >= 28 && ip[9] == 17 => (usize::from(ip[0] & 15) * 4, &ip[12..16]),
        0x86dd if ip.len() >= 48 && ip[6] == 17 => (40, &ip[8..24]),
        _ => return None,
    };
    if ip.len() < udp_at + 8 || u16::from_be_bytes([ip[udp_at + 2], ip[udp_at + 3]]) != 4791 {
        return None;
    }
    Some(RoceFrame { udp_at, from_host: host.contains(&src) })
}

/// Requests rxe sent again, from a capture: (all of them, those it had to:
/// more than 50 ms, three quarters of its 67 ms ACK timeout, after the
/// first copy with no ACK from us covering the PSN in between). rxe also
/// retries without need: its retransmit timer is re-armed, not reset, so a
/// timer armed for an earlier message can fire a fraction of a millisecond
/// into a later one; those are not ours to answer for.
fn rxe_retries(path: &Path) -> (usize, Vec<String>) {
    use roce_wire::{ParseOptions, RoceFrameRepr, Syndrome};
    let vm: [std::net::IpAddr; 2] = [VM_IP.parse().unwrap(), VM_IP6.parse().unwrap()];
    let Ok(r) = roce_wire::pcap::PcapReader::open(path) else { return (0, vec!["unreadable".into()]) };
    let mut first: BTreeMap<(u32, u32), Duration> = BTreeMap::new();
    let mut acks: Vec<(Duration, u32)> = Vec::new();
    let (mut again, mut ours) = (0, Vec::new());
    for rec in r.flatten() {
        let Ok(f) = RoceFrameRepr::parse(&rec.data, &ParseOptions::default()) else { continue };
        let src = match f.net {
            roce_wire::NetRepr::Ipv4(ip, _) => std::net::IpAddr::V4(ip.src),
            roce_wire::NetRepr::Ipv6(ip, _) => std::net::IpAddr::V6(ip.src),
            roce_wire::NetRepr::Grh(_) => continue,
        };
        let Ok(info) = f.packet.info() else { continue };
        let (t, psn) = (rec.timestamp, f.packet.bth.psn.value());
        if !vm.contains(&src) {
            if f.packet.ext.aeth.is_some_and(|a| matches!(a.syndrome, Syndrome::Ack { .. })) {
                acks.push((t, psn));
            }
            continue;
        }
        if !info.request {
            continue;
        }
        match first.get(&(f.packet.bth.dest_qp, psn)) {
            None => {
                first.insert((f.packet.bth.dest_qp, psn), t);
            }
            Some(&t0) => {
                again += 1;
                let covered = acks
                    .iter()
                    .any(|&(ta, p)| ta > t0 && ta < t && p.wrapping_sub(psn) & 0xff_ffff < 1 << 23);
                if t.saturating_sub(t0) > Duration::from_millis(50) && !covered {
                    ours.push(format!(
                        "PSN {psn} to QP {:#x} again after {:?}",
                        f.packet.bth.dest_qp,
                        t - t0
                    ));
                }
            }
        }
    }
    (again, ours)
}

/// The lab's run-time directory: the VM's pid file, and `share`, which
/// the VM sees as `/lab`.
fn lab_run_dir() -> PathBuf {
    let cache = std::env::var("RXE_LAB_CACHE").unwrap_or_else(|_| "/var/cache/rxe-lab".into());
    Path::new(&cache).join("run")
}

/// How much counter `k` grew from `before` to `after`.
fn grew(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, k: &str) -> u64 {
    after.get(k).copied().unwrap_or(0).saturating_sub(before.get(k).copied().unwrap_or(0))
}

/// `roce perf write-bw` from inside the VM to `roce` in the namespace. The
/// VM's own `roce` runs only if this build's C library fits the VM's
/// (Debian 12); otherwise the case is skipped with a notice.
fn vm_roce(lab: &Lab) -> Result<String, String> {
    let share = lab_run_dir().join("share/roce");
    std::fs::copy(env!("CARGO_BIN_EXE_roce"), &share)
        .map_err(|e| format!("copying roce into the VM: {e}"))?;
    let (runs, out) = lab.exec("/lab/roce --version", 30);
    if !runs {
        return Ok(format!("SKIPPED roce inside the VM: this build does not run there:\n{out}"));
    }
    let srv: Vec<String> =
        ["perf", "write-bw", "-s", "65536", "-n", "100", "--bind", HOST_IP, "--timeout", "20"]
            .iter()
            .map(|s| s.to_string())
            .chain(["--counters".to_string()])
            .collect();
    let child = roce(&srv);
    if !host_listening() {
        let (_, out) = wait_bounded(child, Duration::from_secs(1));
        return Err(format!("roce in the VM: our server never listened:\n{out}"));
    }
    // rxe holds UDP 4791 in the VM: that roce takes 4792 and says so.
    let (ok, vm_out) = lab.exec(
        &format!("/lab/roce perf write-bw {HOST_IP} -s 65536 -n 100 --timeout 20 --counters --bind {VM_IP} --udp-port 4792"),
        150,
    );
    let (sok, srv_out) = wait_bounded(child, Duration::from_secs(60));
    let mut problems = Vec::new();
    if !ok || !sok {
        problems.push("a run failed".to_string());
    }
    for (who, out) in [("VM", &vm_out), ("namespace", &srv_out)] {
        if counter(out, "icrc_errors") != Some(0) || counter(out, "tx_errors") != Some(0) {
            problems.push(format!("{who}: ICRC or send errors"));
        }
    }
    let gso = vm_out
        .lines()
        .find(|l| l.contains("UDP offloads"))
        .and_then(|l| l.split_once(':'))
        .map_or(String::new(), |(_, v)| v.trim().to_string());
    if !problems.is_empty() {
        return Err(format!(
            "roce in the VM -> roce: {}\n--- VM:\n{vm_out}\n--- namespace:\n{srv_out}",
            problems.join("; ")
        ));
    }
    Ok(format!("ok   roce (in the VM) -> roce: write-bw 64 KiB x 100; the VM's UDP offloads: {gso}"))
}

/// How long the VM is stopped in the middle of `stalled_read`'s READs:
/// more than four ACK timeouts (perftest's 14, 67 ms).
const STALL: Duration = Duration::from_millis(300);

/// Frames from the VM the tap has received, read in the namespace.
fn vm_frames() -> Option<u64> {
    let o = Command::new("ip")
        .args(["netns", "exec", NETNS, "cat", "/sys/class/net/rxetap0/statistics/rx_packets"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&o.stdout).trim().parse().ok()
}

/// The large READ pairing with the VM stopped (SIGSTOP to qemu) for
/// `STALL` once 3,000 of its frames have come, inside the first 8 MiB
/// message: rxe falls silent for longer than the ACK timeout, so our
/// requester repeats its outstanding READ requests, and rxe serves them
/// only after what it was sending and what was queued before them (a
/// replay that outlasts the ACK timeout again). The run must complete,
/// with our timer retries (at least one: the stall was seen) and rxe's
/// duplicate requests counted and the data checked by perftest.
fn stalled_read(lab: &Lab) -> Result<String, String> {
    let pid = std::fs::read_to_string(lab_run_dir().join("pid"))
        .map_err(|e| format!("stalled READ: the VM's pid file: {e}"))?;
    let pid = pid.trim().to_string();
    let c0 = lab.counters();
    let id = lab.run(&["bg", &format!("{BIG_READ_STOCK} -d rxe0 -x 1")])?.trim().to_string();
    if !lab.vm_listening() {
        let _ = lab.run(&["wait", &id, "1"]);
        return Err(format!("stalled READ: {BIG_READ_STOCK} never listened"));
    }
    let base = vm_frames().ok_or("stalled READ: cannot read the tap's counters")?;
    let ours: Vec<String> = ["perf", "read-bw", "-s", "8388608", "-n", "5", "--timeout", "20", "--counters"]
        .iter()
        .map(|s| s.to_string())
        .chain(["--bind".into(), HOST_IP.into(), VM_IP.into()])
        .collect();
    let child = roce(&ours);
    // Stop the VM once the READs are well under way; give up after a
    // minute (the run has failed by then and says why).
    let t = Instant::now();
    let (mut stopped, mut continued) = (false, true);
    while t.elapsed() < Duration::from_secs(60) {
        if vm_frames().is_some_and(|n| n >= base + 3_000) {
            let signal =
                |sig: &str| Command::new("kill").args([sig, &pid]).status().is_ok_and(|s| s.success());
            stopped = signal("-STOP");
            std::thread::sleep(STALL);
            continued = signal("-CONT");
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (ok, out) = wait_bounded(child, Duration::from_secs(180));
    let w = lab.cmd(&["wait", &id, "150"]).output();
    let (sok, sout) = w.map(|o| (o.status.success(), text(&o))).unwrap_or((false, String::new()));
    let dup = grew(&c0, &lab.counters(), "duplicate_request");
    let retries = counter(&out, "completer_retry_err").unwrap_or(0);
    let mut problems = Vec::new();
    if !stopped || !continued {
        problems.push("the VM was not stopped and continued");
    }
    if !ok || !sok || sout.contains("invalid data") {
        problems.push("a run failed");
    }
    if retries == 0 || counter(&out, "retry_exceeded_err") != Some(0) {
        problems.push("our requester did not retry, or ran out of retries");
    }
    if counter(&out, "icrc_errors") != Some(0) {
        problems.push("ICRC errors");
    }
    if !problems.is_empty() {
        return Err(format!(
            "stalled READ ({BIG_READ_STOCK}, VM stopped {STALL:?}): {}\n--- roce:\n{out}\n--- stock:\n{sout}",
            problems.join("; ")
        ));
    }
    Ok(format!(
        "ok   roce -> {BIG_READ_STOCK}, VM stopped {STALL:?} mid-READ: {retries} timer retries, \
         {} duplicate responses, rxe duplicate_request +{dup}",
        counter(&out, "duplicate_response").unwrap_or(0)
    ))
}

/// One in this many of rxe's RoCE frames goes to the oracle beside all of
/// ours.
const REFERENCE_SAMPLE: usize = 8;

/// The part of a tap capture the oracle judges, written beside it
/// (`<name>-judged.pcap`), frames copied byte for byte: every RoCE frame
/// our host sent and one in [`REFERENCE_SAMPLE`] of rxe's (the reference
/// peer's: they show the oracle accepts what the kernel sends). The oracle
/// computes each ICRC in Python, about 1.7 ms a frame; the whole loss-free
/// capture (94,000 frames, 72% of them rxe's) took 165 s of CI's 20
/// minutes. Returns the path and (ours, rxe's judged, rxe's in all).
fn judged_part(wire: &Path) -> Result<(PathBuf, usize, usize, usize), String> {
    let r = roce_wire::pcap::PcapReader::open(wire).map_err(|e| format!("{}: {e}", wire.display()))?;
    let out = wire.with_file_name(format!(
        "{}-judged.pcap",
        wire.file_stem().and_then(|s| s.to_str()).unwrap_or("capture")
    ));
    let mut w = roce_wire::pcap::PcapWriter::create(&out).map_err(|e| e.to_string())?;
    let (mut ours, mut theirs, mut judged) = (0, 0, 0);
    for rec in r.flatten() {
        let Some(frame) = roce_frame(&rec.data) else { continue };
        let keep = frame.from_host || theirs % REFERENCE_SAMPLE == 0;
        if frame.from_host {
            ours += 1;
        } else {
            judged += usize::from(keep);
            theirs += 1;
        }
        if keep {
            w.write(rec.timestamp, &rec.data).map_err(|e| e.to_string())?;
        }
    }
    w.finish().map_err(|e| e.to_string())?;
    Ok((out, ours, judged, theirs))
}

/// `roce-pcap-check --summary` on [`judged_part`] of a capture:
/// Ok(summary) when every RoCE packet in it passed.
fn oracle(check: &Path, wire: &Path) -> Result<String, String> {
    let (pcap, ours, judged, theirs) = judged_part(wire)?;
    if ours == 0 {
        return Err(format!("{}: none of our RoCE frames on the wire", wire.display()));
    }
    let o = Command::new("python3")
        .arg(check)
        .args(["--summary", "--pmtu", "1024"])
        .arg(&pcap)
        .output()
        .map_err(|e| e.to_string())?;
    let t = format!("judged: all {ours} RoCE frames of ours, {judged} of rxe's {theirs}\n{}", text(&o));
    if o.status.success() && t.contains(" 0 failed") && t.contains("bad 0") {
        Ok(t)
    } else {
        Err(t)
    }
}

fn wanted() -> bool {
    roce_test_support::in_ci() || std::env::var("ROCE_INTEROP").is_ok_and(|v| v == "1")
}

fn main() {
    if !wanted() {
        eprintln!("SKIPPED: the Soft-RoCE interop suite boots a VM; it runs under CI or with ROCE_INTEROP=1");
        return;
    }
    let Some(tool) = roce_test_support::rxe_lab() else { return };
    let check = roce_test_support::pcap_oracle();
    let out = std::env::temp_dir().join(format!("roce-interop-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let mut lab = Lab { tool, out, gid6: 0 };
    let started = Instant::now();
    // The packages come from Debian's mirror: without them there is no lab.
    if let Err(e) = lab.run(&["fetch"]) {
        eprintln!(
            "SKIPPED: the Soft-RoCE interop suite cannot run here: the lab's packages did not download:\n{e}"
        );
        return;
    }
    let _ = lab.run(&["down"]);
    if let Err(e) = lab.run(&["up"]) {
        panic!("the lab did not come up: {e}");
    }
    let boot = started.elapsed();
    let failures = suite(&mut lab, check.as_deref());
    let _ = lab.run(&["down"]);
    eprintln!(
        "interop suite: lab up in {:.0} s, whole suite {:.0} s; logs in {}",
        boot.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        lab.out.display()
    );
    if !failures.is_empty() {
        eprintln!("\n{} failure(s):", failures.len());
        for f in &failures {
            eprintln!("\n=== {f}");
        }
        std::process::exit(1);
    }
}

fn netns(args: &[&str]) -> Result<(), String> {
    let o =
        Command::new("ip").args(["netns", "exec", NETNS]).args(args).output().map_err(|e| e.to_string())?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("{args:?}: {}", text(&o)))
    }
}

/// Loads an nftables ruleset in the lab's namespace.
fn nft(ruleset: &str) -> Result<(), String> {
    use std::io::Write;
    let mut c = Command::new("ip")
        .args(["netns", "exec", NETNS, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft: {e}"))?;
    c.stdin.take().unwrap().write_all(ruleset.as_bytes()).map_err(|e| e.to_string())?;
    let o = c.wait_with_output().map_err(|e| e.to_string())?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("nft: {}\n{ruleset}", text(&o)))
    }
}

/// Random loss on the tap, both directions: netem on its egress if the
/// kernel has it, else nftables's netdev egress hook; nftables's ingress
/// hook the other way. Both act below IP, as a lossy link would: a drop in
/// the IP output path would instead fail the sender's send call (EPERM),
/// which is a refused datagram, not a lost one. Returns how.
fn impair() -> Result<&'static str, String> {
    let rule = |chain: &str, hook: &str| {
        format!(
            " chain {chain} {{\n  type filter hook {hook} device \"rxetap0\" priority 0;\n  \
             udp dport 4791 numgen random mod 100 < {LOSS_PERCENT} counter drop\n }}\n"
        )
    };
    let netem =
        ["tc", "qdisc", "add", "dev", "rxetap0", "root", "netem", "loss", &format!("{LOSS_PERCENT}%")];
    if netns(&netem).is_ok() {
        nft(&format!("table netdev roceloss {{\n{}}}\n", rule("in", "ingress")))?;
        return Ok("netem (host -> VM) and nftables ingress (VM -> host)");
    }
    nft(&format!("table netdev roceloss {{\n{}{}}}\n", rule("in", "ingress"), rule("eg", "egress")))?;
    Ok("nftables on the tap's egress and ingress")
}

fn suite(lab: &mut Lab, check: Option<&Path>) -> Vec<String> {
    let mut failures = Vec::new();
    // IPv6: a global address on both ends; rxe lists it as a new GID.
    let (_, info) =
        lab.exec("/sbin/ip -6 addr add fd47::1/64 dev eth0 nodad && sleep 1 && ibv_devinfo -v", 30);
    lab.gid6 = info
        .lines()
        .find(|l| l.contains(VM_IP6) && l.contains("GID["))
        .and_then(|l| l.split('[').nth(1)?.split(']').next()?.trim().parse().ok())
        .unwrap_or(0);
    if lab.gid6 == 0 {
        failures.push(format!("rxe lists no GID for {VM_IP6}:\n{info}"));
    }
    if let Err(e) = netns(&["ip", "-6", "addr", "add", &format!("{HOST_IP6}/64"), "dev", "rxetap0", "nodad"])
    {
        failures.push(format!("cannot add {HOST_IP6}: {e}"));
    }

    // Part 1: no loss.
    let wire = lab.out.join("interop.pcap");
    let ours_pcap = lab.out.join("ours.pcapng");
    let before = lab.counters();
    if let Err(e) = lab.run(&["capture", "start", wire.to_str().unwrap()]) {
        failures.push(format!("capture: {e}"));
        return failures;
    }
    let mut ran = 0;
    // Trouble a pairing explains itself, not counted against the part: the
    // 8 MiB READ pairing's (see `BIG_READ_STOCK`), and rxe's duplicate
    // requests in a pairing where a timer of ours fired (the ACK timeout,
    // or the READ tail timer's re-request). No packet is lost here, but
    // the VM's one emulated CPU now and then falls silent for tens of
    // milliseconds, longer than the tail timer's wait (20 ms at least) or
    // even the ACK timeout, and a timer that fires repeats requests rxe
    // then counts as duplicates. (Stopping the VM for 40 ms in the middle
    // of `ib_read_bw -s 65536` does it.) A duplicate with no timer fired
    // at our end is still a failure.
    let mut own: BTreeMap<&str, u64> = BTreeMap::new();
    let all = cases(&[Family::V4, Family::V6], false);
    for (i, c) in all.iter().enumerate() {
        // Our own capture for one pairing with GSO batches (64 KiB writes).
        let pcap = (i == 4).then_some(ours_pcap.as_path());
        let t = Instant::now();
        let c0 = lab.counters();
        let r = run_case(lab, c, 20, pcap);
        let c1 = lab.counters();
        let timers = ["completer_retry_err", "read_tail_rerequests"]
            .map(|k| (k, counter(&r.log, k).unwrap_or(0)))
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("our {k} +{n}"))
            .collect::<Vec<_>>();
        let notes: Vec<String> = RXE_TROUBLE
            .iter()
            .filter_map(|k| {
                let d = grew(&c0, &c1, k);
                if c.name().contains(BIG_READ_STOCK) || (*k == "duplicate_request" && !timers.is_empty()) {
                    *own.entry(k).or_default() += d;
                }
                (d > 0).then(|| format!("rxe {k} +{d}"))
            })
            .chain(timers.iter().cloned())
            .collect();
        eprintln!(
            "{} {} ({:.1} s){}",
            if r.ok { "ok  " } else { "FAIL" },
            c.name(),
            t.elapsed().as_secs_f64(),
            if notes.is_empty() { String::new() } else { format!(" [{}]", notes.join(", ")) }
        );
        if !r.ok {
            failures.push(format!("{}: {}", c.name(), r.log));
        }
        if i == 4 {
            eprintln!("     (with --pcap: {})", c.ours.join(" "));
        }
        ran += 1;
    }
    let _ = lab.run(&["capture", "stop"]);
    let after = lab.counters();
    let delta = |k: &str| grew(&before, &after, k);
    let wire_pkts = roce_packets(&wire, false);
    let sent = wire_pkts.iter().filter(|(h, _)| *h).count() as u64;
    eprintln!(
        "loss-free part: {ran} pairings; {} RoCE packets on the wire, {sent} from us; rxe rcvd_pkts +{}",
        wire_pkts.len(),
        delta("rcvd_pkts")
    );
    if sent == 0 || delta("rcvd_pkts") != sent {
        failures.push(format!(
            "rxe accepted {} of the {sent} packets we sent (it drops bad ones silently)",
            delta("rcvd_pkts")
        ));
    }
    // No loss, so rxe must have needed no retry because of us, and seen no
    // duplicate or out-of-sequence request, nor a NAK.
    let (again, ours) = rxe_retries(&wire);
    eprintln!(
        "rxe re-sent {again} requests ({} timer retries counted), {} of them for want of our ACK",
        delta("completer_retry_err"),
        ours.len()
    );
    if !ours.is_empty() {
        failures.push(format!("rxe had to retry for want of our ACK: {}", ours.join("; ")));
    }
    for k in RXE_TROUBLE.into_iter().filter(|&k| k != "completer_retry_err") {
        let d = delta(k).saturating_sub(own.get(k).copied().unwrap_or(0));
        if d != 0 {
            failures.push(format!("rxe counted {k} +{d} in the loss-free part"));
        }
    }
    let (n, bytes, longest) = split_reads(&wire);
    eprintln!("READs: {n} IPv4 READ requests from us, {bytes} bytes asked, the longest {longest}");
    if bytes < BIG_READS * BIG_READ || longest >= BIG_READ || n <= BIG_READS {
        failures.push(format!(
            "{BIG_READ_STOCK}: our READ requests asked for {bytes} bytes in {n} requests (longest {longest}); \
             want at least {} bytes, each request under {BIG_READ}",
            BIG_READS * BIG_READ
        ));
    }
    match check.map(|c| oracle(c, &wire)) {
        Some(Ok(s)) => eprintln!("roce-pcap-check on the tap capture:\n{s}"),
        Some(Err(s)) => failures.push(format!("roce-pcap-check on {}:\n{s}", wire.display())),
        None => {}
    }
    // Our --pcap against the wire.
    let ours = roce_packets(&ours_pcap, true);
    let wire_masked: std::collections::HashSet<Vec<u8>> =
        roce_packets(&wire, true).into_iter().map(|(_, p)| p).collect();
    let missing = ours.iter().filter(|(_, p)| !wire_masked.contains(p)).count();
    eprintln!("--pcap: {} packets, {missing} not on the wire as recorded", ours.len());
    if ours.is_empty() || missing > 0 {
        failures.push(format!(
            "{missing} of the {} packets in {} differ from the tap capture",
            ours.len(),
            ours_pcap.display()
        ));
    }

    // roce inside the VM (Linux 6.1, a virtio NIC without checksum offload,
    // where the kernel refuses UDP GSO with EIO) against roce in the
    // namespace: the driver must fall back to plain sends and lose nothing.
    match vm_roce(lab) {
        Ok(note) => eprintln!("{note}"),
        Err(e) => failures.push(e),
    }

    match stalled_read(lab) {
        Ok(note) => eprintln!("{note}"),
        Err(e) => failures.push(e),
    }

    // Part 2: random loss on the link.
    let lossy_before = lab.counters();
    let lossy_wire = lab.out.join("interop-loss.pcap");
    match impair() {
        Ok(how) => eprintln!("loss: {LOSS_PERCENT}% each way by {how}"),
        Err(e) => {
            failures.push(format!("cannot impair the link: {e}"));
            return failures;
        }
    }
    let _ = lab.run(&["capture", "start", lossy_wire.to_str().unwrap()]);
    for c in cases(&[Family::V4], true) {
        let t = Instant::now();
        let r = run_case(lab, &c, 30, None);
        eprintln!(
            "{} {} with loss ({:.1} s)",
            if r.ok { "ok  " } else { "FAIL" },
            c.name(),
            t.elapsed().as_secs_f64()
        );
        if !r.ok {
            failures.push(format!("{} with loss: {}", c.name(), r.log));
            continue;
        }
        if c.stock == BIG_READ_STOCK {
            // What the losses cost: responses received for the data's.
            let need = BIG_READS * BIG_READ.div_ceil(1024);
            let got = counter(&r.log, "rcvd_pkts").unwrap_or(0);
            eprintln!(
                "     {got} packets received for {need} responses ({:.2}x), {} gap requests, {} timer retries",
                got as f64 / need as f64,
                counter(&r.log, "read_gap_rerequests").unwrap_or(0),
                counter(&r.log, "completer_retry_err").unwrap_or(0)
            );
        }
        if counter(&r.log, "rcvd_seq_err").unwrap_or(0)
            + counter(&r.log, "out_of_seq_request").unwrap_or(0)
            + counter(&r.log, "completer_retry_err").unwrap_or(0)
            + counter(&r.log, "duplicate_request").unwrap_or(0)
            == 0
        {
            eprintln!("     (no recovery was needed on our side in this pairing)");
        }
    }
    let _ = lab.run(&["capture", "stop"]);
    let rules = Command::new("ip")
        .args(["netns", "exec", NETNS, "nft", "list", "table", "netdev", "roceloss"])
        .output()
        .map(|o| text(&o))
        .unwrap_or_default();
    let dropped: u64 = rules
        .split("counter packets ")
        .skip(1)
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    let _ = netns(&["nft", "delete", "table", "netdev", "roceloss"]);
    let _ = netns(&["tc", "qdisc", "del", "dev", "rxetap0", "root"]);
    eprintln!("lossy part: nftables dropped {dropped} RoCE packets");
    if dropped == 0 {
        failures.push("the lossy part dropped nothing: the impairment did not work".into());
    }
    let recovered = lab.counters();
    let d2 = |k: &str| grew(&lossy_before, &recovered, k);
    eprintln!(
        "lossy part: rxe duplicate_request +{} out_of_seq_request +{} rcvd_seq_err +{} completer_retry_err +{}",
        d2("duplicate_request"),
        d2("out_of_seq_request"),
        d2("rcvd_seq_err"),
        d2("completer_retry_err")
    );
    match check.map(|c| oracle(c, &lossy_wire)) {
        Some(Ok(s)) => eprintln!("roce-pcap-check on the lossy capture:\n{s}"),
        Some(Err(s)) => failures.push(format!("roce-pcap-check on {}:\n{s}", lossy_wire.display())),
        None => {}
    }
    failures
}
