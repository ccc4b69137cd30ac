//! Debian's stock fio (a program we did not write) drives roce's
//! initiator through the external engine against roce's target on
//! loopback: random writes of 4-128 KiB verified by fio's own CRC32C
//! headers, a second run that verifies what the first left, and fails
//! once a byte of the namespace is changed, trims and flushes, two jobs as
//! threads on one device, and a bad file name and an unknown NQN, each
//! refused with our reason. fio must be installed (`apt-get install
//! fio`); without it the test skips, except under CI.

use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce::{Device, DeviceConfig};
use roce_nvmf::namespace::{Backend, MemBackend};
use roce_nvmf::server::{serve, Log};
use roce_nvmf::target::{Namespace, SubsystemConfig, Target, TargetConfig};
use roce_test_support::{built_cdylib, in_ci};

const NQN: &str = "nqn.2026-11.io.roce:fio";
const TARGET: &str = "127.0.8.2";
const HOST: &str = "127.0.8.3";
const NS_BYTES: u64 = 32 << 20;

fn fio_present() -> bool {
    let ok = Command::new("fio").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(!in_ci(), "fio is not installed (apt-get install fio); CI must run this test");
        eprintln!("SKIPPED: fio is not installed (apt-get install fio)");
    }
    ok
}

fn file_name(nqn: &str) -> String {
    format!("traddr={TARGET} trsvcid=4420 subnqn={} ns=1 hostaddr={HOST}", nqn.replace(':', "\\:"))
}

/// Runs fio with the engine and `args`, giving it 60 s.
fn fio(args: &[&str]) -> Output {
    let lib = built_cdylib("libroce_fio.so", "roce-fio");
    // fio leaves its verify state files in its working directory.
    let dir = std::env::temp_dir().join(format!("roce-fio-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let mut cmd = Command::new("fio");
    cmd.current_dir(&dir)
        .arg(format!("--ioengine=external:{}", lib.display()))
        .args(["--thread=1", "--output-format=normal"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("fio runs");
    let pid = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(60);
            while !done.load(Ordering::Relaxed) {
                if Instant::now() > end {
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                    return;
                }
                std::thread::park_timeout(Duration::from_millis(100));
            }
        })
    };
    let out = child.wait_with_output().expect("fio's output");
    done.store(true, Ordering::Relaxed);
    watchdog.thread().unpark();
    watchdog.join().unwrap();
    out
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The sum of fio's "issued rwts: total=R,W,T,..." over the jobs.
fn issued(o: &Output) -> [u64; 3] {
    let mut sum = [0u64; 3];
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        if let Some(rest) = line.trim().strip_prefix("issued rwts: total=") {
            let v: Vec<u64> = rest.split([',', ' ']).take(3).map(|x| x.parse().unwrap_or(0)).collect();
            for (s, x) in sum.iter_mut().zip(v) {
                *s += x;
            }
        }
    }
    sum
}

#[test]
fn stock_fio_verifies_through_the_engine() {
    if !fio_present() {
        return;
    }
    let mem = Arc::new(MemBackend::new(NS_BYTES));
    let cfg = TargetConfig {
        subsystems: vec![SubsystemConfig {
            nqn: NQN.into(),
            allowed_hosts: Vec::new(),
            namespaces: vec![Namespace::new(mem.clone(), 4096)],
        }],
        traddr: TARGET.into(),
        ..TargetConfig::default()
    };
    let target = Arc::new(Target::new(cfg).unwrap());
    let tdev = Device::open(DeviceConfig::new(SocketAddr::new(TARGET.parse().unwrap(), 4791))).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let log: Log = Arc::new(|m: &str| eprintln!("target: {m}"));
    let server = {
        let (t, s) = (target.clone(), stop.clone());
        std::thread::spawn(move || serve(&tdev, t, 4420, &s, log))
    };
    let name = format!("--filename={}", file_name(NQN));

    // Random writes of 4-128 KiB at depth 16 over 16 MiB, each block
    // carrying fio's CRC32C header, then read back and checked by fio.
    let w = fio(&[
        "--name=write",
        &name,
        "--rw=randwrite",
        "--bsrange=4k-128k",
        "--iodepth=16",
        "--size=16M",
        "--verify=crc32c",
        "--randseed=7",
    ]);
    let out = text(&w);
    assert!(w.status.success(), "fio failed:\n{out}");
    assert!(out.contains("err= 0"), "{out}");
    let [r, wr, _] = issued(&w);
    assert!(wr > 100 && r == wr, "fio issued {wr} writes and {r} verify reads:\n{out}");
    // The bytes are in the target's namespace, not only in fio's buffers,
    // and nothing lies past the 16 MiB fio was given.
    assert!(mem.snapshot(0, 16 << 20).iter().any(|&b| b != 0), "nothing reached the namespace");
    assert!(mem.snapshot(16 << 20, 16 << 20).iter().all(|&b| b == 0), "data written past the job's range");
    let st = target.stats();
    assert!(st.writes >= wr && st.reads >= r, "{st:?}");

    // A new connection verifies what the first left (fio replays the
    // same offsets and sizes) ...
    let verify = || {
        fio(&[
            "--name=write",
            &name,
            "--rw=randwrite",
            "--bsrange=4k-128k",
            "--iodepth=8",
            "--size=16M",
            "--verify=crc32c",
            "--verify_only",
            "--randseed=7",
        ])
    };
    let v = verify();
    assert!(v.status.success(), "verify_only failed:\n{}", text(&v));
    // ... and finds one byte changed behind its back: the check reads the
    // namespace.
    let mut b = mem.snapshot(9 << 20, 1);
    b[0] ^= 0x40;
    mem.write_at(9 << 20, &b).unwrap();
    let bad = verify();
    assert!(!bad.status.success(), "a corrupted namespace verified:\n{}", text(&bad));
    assert!(text(&bad).contains("verify"), "{}", text(&bad));

    // Two jobs as threads on one device, each its own controller and
    // 8 MiB, sequential 128 KiB writes with a flush every 4, verified.
    let before = target.stats();
    let two = fio(&[
        "--name=two",
        &name,
        "--numjobs=2",
        "--offset_increment=8M",
        "--rw=write",
        "--bs=128k",
        "--iodepth=4",
        "--size=8M",
        "--fsync=4",
        "--verify=crc32c",
    ]);
    assert!(two.status.success(), "two jobs failed:\n{}", text(&two));
    let after = target.stats();
    assert!(after.controllers_made >= before.controllers_made + 2, "{after:?}");
    let other =
        after.commands - after.reads - after.writes - (before.commands - before.reads - before.writes);
    // 64 writes per job, a flush after every 4: at least 32 flushes, on
    // top of the admin commands of two controllers.
    assert!(other >= 32, "{other} commands besides reads and writes");

    // Trims: Dataset Management deallocate, which this target answers by
    // zeroing the blocks.
    let t = fio(&["--name=trim", &name, "--rw=trim", "--bs=1M", "--size=4M", "--iodepth=2"]);
    assert!(t.status.success(), "trim failed:\n{}", text(&t));
    assert_eq!(issued(&t)[2], 4, "{}", text(&t));
    assert!(mem.snapshot(0, 4 << 20).iter().all(|&b| b == 0), "trimmed blocks still hold data");

    // A bad file name and an unknown subsystem (the Connect's status:
    // invalid parameters) fail the job, with why.
    let b = fio(&["--name=bad", "--filename=traddr=127.0.8.2 color=red", "--rw=read", "--size=1M"]);
    assert!(!b.status.success());
    assert!(text(&b).contains("unknown key `color`"), "{}", text(&b));
    let unknown = format!("--filename={}", file_name("nqn.2026-11.io.roce:nothing"));
    let u = fio(&["--name=unknown", &unknown, "--rw=read", "--size=1M"]);
    assert!(!u.status.success());
    assert!(text(&u).contains("Connect failed: connect: invalid parameters"), "{}", text(&u));

    stop.store(true, Ordering::Relaxed);
    server.join().unwrap().unwrap();
    let _ =
        std::fs::remove_dir_all(std::env::temp_dir().join(format!("roce-fio-test-{}", std::process::id())));
}
