//! NVMe over Fabrics against the Linux kernel's NVMe/RDMA host (nvme-rdma
//! over Soft-RoCE in the rxe lab VM), with `roce nvmf target` serving a
//! file in the lab's namespace:
//!
//! * the VM's `nvme discover` lists our subsystem;
//! * `nvme connect -t rdma` gives a namespace of the file's size and our
//!   block size; 16 MiB written with `dd oflag=direct` read back with the
//!   same checksum, and the target's file holds those bytes;
//! * namespace 2, in the target device's registered memory (`mem:`, moved
//!   by RDMA straight from and into it): 8 MiB written with 128 KiB
//!   O_DIRECT writes read back the same with 128 KiB and 4 KiB reads;
//! * disconnect, reconnect: the bytes are still there;
//! * with 3% random loss each way on the link (nftables), another 16 MiB
//!   the same way;
//! * the clean part's capture passes `roce-pcap-check`;
//! * the other way round, roce's initiator against the kernel's target
//!   (nvmet-rdma, `nvmet-setup up`): `roce nvmf discover` lists its
//!   subsystem, `roce nvmf connect --write-read-check 4M` writes and reads
//!   back a pattern, and the kernel target's file holds it.
//!
//! It boots a VM and takes a few minutes, more than CI's budget for an
//! addition: it runs with `ROCE_INTEROP=1` (`ROCE_INTEROP=1 cargo test -p
//! roce-cli --test rxe_nvmf`). It needs root; without it (or without the
//! lab's packages) it skips with a notice.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use roce_test_support::lab::{self, text, Lab};

const NQN: &str = "nqn.2026-11.io.roce:lab";
const DISK_MIB: u64 = 64;
/// Namespace 2: memory registered with the target's device, whose blocks
/// the target sends and receives by RDMA with no copy.
const MEM_MIB: u64 = 16;
const CONNECT: &str = "nvme connect -t rdma -n nqn.2026-11.io.roce:lab -a 10.47.0.3 -s 4420";
/// Shell: waits up to a minute for the namespace's block device after a
/// connect (the host scans namespaces after `nvme connect` returns, and
/// under loss a scan may wait for a reconnection), then names it `$dev`.
const WAIT_NS: &str = "i=0; while [ $i -lt 300 ]; do d=$(ls -d /sys/block/nvme*n1 2>/dev/null | head -1); \
     [ -n \"$d\" ] && [ -b /dev/${d##*/} ] && break; sleep 0.2; i=$((i+1)); done; dev=/dev/${d##*/}; \
     [ -b \"$dev\" ] || { echo 'no namespace block device'; exit 1; };";
const DISCONNECT: &str = "nvme disconnect -n nqn.2026-11.io.roce:lab";

/// The target in the lab's namespace, serving `disk`.
fn start_target(disk: &Path, log: &Path) -> Child {
    let out = std::fs::File::create(log).expect("target log");
    lab::in_netns(env!("CARGO_BIN_EXE_roce"))
        .args(["nvmf", "target", "--nqn", NQN, "--addr", "10.47.0.3", "--namespace"])
        .arg(format!("{},mem:{MEM_MIB}M", disk.display()))
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        // Its own session: the lab's job control must not signal it.
        .process_group(0)
        .spawn()
        .expect("roce nvmf target starts")
}

fn md5_of(path: &Path, offset: u64, len: u64) -> String {
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "dd if={} bs=1M skip={} count={} 2>/dev/null | md5sum",
            path.display(),
            offset >> 20,
            len >> 20
        ))
        .output()
        .expect("md5sum");
    String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap_or("").to_string()
}

/// The first md5 in `s` (32 hex digits at the start of a line).
fn md5s(s: &str) -> Vec<String> {
    s.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.len() == 32 && w.chars().all(|c| c.is_ascii_hexdigit()))
        .map(str::to_string)
        .collect()
}

/// Writes 16 MiB of fresh random bytes at MiB `at_mib` of the namespace
/// with O_DIRECT, reads them back the same way: the two checksums.
fn write_read(lab: &Lab, at_mib: u64) -> Result<(String, String), String> {
    let cmd = format!(
        "{WAIT_NS} dd if=/dev/urandom of=/tmp/w bs=1M count=16 2>/dev/null && md5sum /tmp/w && \
         dd if=/tmp/w of=$dev bs=1M seek={at_mib} oflag=direct && \
         dd if=$dev bs=1M skip={at_mib} count=16 iflag=direct 2>/dev/null | md5sum"
    );
    let (ok, out) = lab.exec(&cmd, 600);
    let m = md5s(&out);
    if !ok || m.len() != 2 {
        return Err(format!("write and read back failed:\n{out}"));
    }
    Ok((m[0].clone(), m[1].clone()))
}

fn suite(lab: &Lab, dir: &Path, check: Option<&Path>) -> Vec<String> {
    let mut failures = Vec::new();
    let mut fail = |what: &str, e: String| failures.push(format!("{what}: {e}"));

    let (ok, out) = lab.exec("nvme discover -t rdma -a 10.47.0.3 -s 4420", 60);
    if ok && out.contains(&format!("subnqn:  {NQN}")) && out.contains("traddr:  10.47.0.3") {
        eprintln!("ok   nvme discover lists {NQN}");
    } else {
        fail("nvme discover", out);
    }

    let (ok, out) = lab.exec(
        &format!(
            "{CONNECT} && {WAIT_NS} \
             echo size $(cat $d/size) lbs $(cat $d/queue/logical_block_size)"
        ),
        90,
    );
    let want = format!("size {} lbs 4096", DISK_MIB << 11);
    if ok && out.contains(&want) {
        eprintln!("ok   nvme connect: a namespace of {DISK_MIB} MiB in 4 KiB blocks");
    } else {
        fail("nvme connect", format!("wanted \"{want}\":\n{out}"));
    }

    let disk = dir.join("disk.img");
    match write_read(lab, 0) {
        Ok((w, r)) if w == r && md5_of(&disk, 0, 16 << 20) == w => {
            eprintln!(
                "ok   16 MiB written and read back with O_DIRECT (md5 {w}), the target's file holds them"
            )
        }
        Ok((w, r)) => fail(
            "16 MiB through the kernel host",
            format!("wrote {w}, read back {r}, the file holds {}", md5_of(&disk, 0, 16 << 20)),
        ),
        Err(e) => fail("16 MiB through the kernel host", e),
    }
    let first = md5_of(&disk, 0, 16 << 20);

    let (ok, out) = lab.exec(
        &format!(
            "{WAIT_NS} m=${{dev%1}}2; i=0; while [ ! -b $m ] && [ $i -lt 150 ]; do sleep 0.2; i=$((i+1)); done; \
             dd if=/dev/urandom of=/tmp/m bs=1M count=8 2>/dev/null && md5sum /tmp/m && \
             dd if=/tmp/m of=$m bs=128k oflag=direct 2>/dev/null && \
             dd if=$m bs=128k count=64 iflag=direct 2>/dev/null | md5sum && \
             dd if=$m bs=4k count=2048 iflag=direct 2>/dev/null | md5sum"
        ),
        300,
    );
    let m = md5s(&out);
    if ok && m.len() == 3 && m[0] == m[1] && m[1] == m[2] {
        eprintln!(
            "ok   namespace 2 in the target device's memory: 8 MiB written with 128 KiB O_DIRECT, read back \
             with 128 KiB and 4 KiB reads (md5 {})",
            m[0]
        );
    } else {
        fail("namespace 2 (device memory)", format!("wanted three equal md5s:\n{out}"));
    }

    let (ok, out) = lab.exec(
        &format!(
            "{DISCONNECT} && {CONNECT} && {WAIT_NS} \
             dd if=$dev bs=1M count=16 iflag=direct 2>/dev/null | md5sum"
        ),
        120,
    );
    if ok && md5s(&out).first() == Some(&first) {
        eprintln!("ok   disconnect and reconnect: the 16 MiB read back the same");
    } else {
        fail("disconnect and reconnect", format!("wanted {first}:\n{out}"));
    }
    let _ = lab.exec(DISCONNECT, 60);
    let _ = lab.run(&["capture", "stop"]);
    if let Some(check) = check {
        let pcap = dir.join("nvmf-clean.pcap");
        let o = Command::new("python3").arg(check).args(["--summary", "--pmtu", "1024"]).arg(&pcap).output();
        match o {
            Ok(o) if o.status.success() => {
                eprintln!("ok   roce-pcap-check: {}", text(&o).lines().last().unwrap_or(""))
            }
            Ok(o) => fail("roce-pcap-check", format!("{}: {}", pcap.display(), text(&o))),
            Err(e) => fail("roce-pcap-check", e.to_string()),
        }
    }

    if let Err(e) = lab::add_loss("nvmfloss", 3) {
        fail("cannot impair the link", e);
        return failures;
    }
    let t = Instant::now();
    let (ok, out) = lab.exec(
        &format!(
            "echo 5 > /sys/module/nvme_core/parameters/io_timeout && dmesg -c > /dev/null && \
             {CONNECT} --reconnect-delay 1"
        ),
        120,
    );
    if !ok {
        fail("nvme connect with 3% loss", out);
    } else {
        let r = write_read(lab, 32);
        let (_, log) = lab.exec("dmesg | grep -c 'Successfully reconnected'; dmesg | grep -c 'not free'", 30);
        let counts: Vec<&str> = log.split_whitespace().collect();
        match r {
            Ok((w, r)) if w == r && md5_of(&disk, 32 << 20, 16 << 20) == w => eprintln!(
                "ok   with 3% loss each way: 16 MiB written and read back (md5 {w}) in {:.0} s, {} packets \
                 dropped; the host reconnected {} times (rxe \"not free\" {} times)",
                t.elapsed().as_secs_f64(),
                lab::dropped("nvmfloss"),
                counts.first().unwrap_or(&"?"),
                counts.get(1).unwrap_or(&"?"),
            ),
            Ok((w, r)) => fail(
                "16 MiB with 3% loss",
                format!("wrote {w}, read back {r}, the file holds {}", md5_of(&disk, 32 << 20, 16 << 20)),
            ),
            Err(e) => fail("16 MiB with 3% loss", e),
        }
        let (ok, out) = lab.exec(DISCONNECT, 120);
        if !ok {
            fail("nvme disconnect with 3% loss", out);
        }
    }
    if lab::dropped("nvmfloss") == 0 {
        fail("the lossy part", "nftables dropped nothing".into());
    }
    lab::remove_loss("nvmfloss");
    failures
}

fn md5_bytes(b: &[u8]) -> String {
    use std::io::Write;
    let mut c = Command::new("md5sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("md5sum");
    c.stdin.take().expect("stdin").write_all(b).expect("md5sum input");
    let o = c.wait_with_output().expect("md5sum");
    String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap_or("").to_string()
}

/// roce's initiator against the kernel's NVMe-oF target in the VM.
fn kernel_target(lab: &Lab) -> Vec<String> {
    let mut failures = Vec::new();
    let (ok, out) = lab.exec("nvmet-setup up 64", 60);
    if !ok {
        return vec![format!("nvmet-setup up: {out}")];
    }
    let roce = |args: &[&str]| {
        let o = lab::in_netns(env!("CARGO_BIN_EXE_roce"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("roce runs");
        (o.status.success(), text(&o))
    };
    let (ok, out) = roce(&["nvmf", "discover", "10.47.0.1", "--bind", "10.47.0.3"]);
    if ok && out.contains("subnqn:  nqn.2014-08.org.rxelab:disk") {
        eprintln!("ok   roce nvmf discover lists the kernel target's subsystem");
    } else {
        failures.push(format!("roce nvmf discover against the kernel target:\n{out}"));
    }
    let (ok, out) = roce(&[
        "nvmf",
        "connect",
        "10.47.0.1",
        "--bind",
        "10.47.0.3",
        "--nqn",
        "nqn.2014-08.org.rxelab:disk",
        "--write-read-check",
        "4M",
    ]);
    let want = md5_bytes(&roce_nvmf::initiator::pattern(4 << 20, 0x9e37_79b9));
    let (_, vm) = lab.exec("dd if=/tmp/nvmet-disk.img bs=1M count=4 2>/dev/null | md5sum", 60);
    if ok && out.contains("equal") && md5s(&vm).first() == Some(&want) {
        eprintln!("ok   roce nvmf connect to the kernel target: 4 MiB written, read back, and in its file (md5 {want})");
    } else {
        failures.push(format!("roce nvmf connect against the kernel target (want md5 {want}):\n{out}\n{vm}"));
    }
    let _ = lab.exec("nvmet-setup down", 60);
    failures
}

fn main() {
    if !std::env::var("ROCE_INTEROP").is_ok_and(|v| v == "1") {
        eprintln!(
            "SKIPPED: the NVMe-oF interop test boots a VM for a few minutes; it runs with ROCE_INTEROP=1"
        );
        return;
    }
    let check = roce_test_support::pcap_oracle();
    let dir: PathBuf = std::env::temp_dir().join(format!("roce-nvmf-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let disk = dir.join("disk.img");
    std::fs::File::create(&disk).unwrap().set_len(DISK_MIB << 20).unwrap();
    let Some(lab) = Lab::boot() else { return };
    let t = Instant::now();
    let log = dir.join("target.log");
    let mut target = start_target(&disk, &log);
    let pcap = dir.join("nvmf-clean.pcap");
    let _ = lab.run(&["capture", "start", pcap.to_str().unwrap()]);
    let mut failures = suite(&lab, &dir, check.as_deref());
    let _ = lab.run(&["capture", "stop"]);
    // SIGTERM: the target stops, disconnecting what is left, and prints
    // its counts.
    let _ = Command::new("kill").arg(target.id().to_string()).status();
    let status = target.wait().expect("the target ends");
    let mut tlog = String::new();
    let _ = std::fs::File::open(&log).and_then(|mut f| f.read_to_string(&mut tlog));
    eprintln!("--- target:\n{tlog}");
    if !status.success() {
        failures.push(format!("the target exited with {status}"));
    }
    // Our target had UDP 4791 of 10.47.0.3; the initiator takes it now.
    failures.extend(kernel_target(&lab));
    let _ = lab.run(&["down"]);
    eprintln!(
        "NVMe-oF interop: {:.0} s with the lab up; files in {}",
        t.elapsed().as_secs_f64(),
        dir.display()
    );
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("\n=== {f}");
        }
        std::process::exit(1);
    }
}
