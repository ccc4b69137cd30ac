//! RDMA CM against the Linux kernel's CM (Soft-RoCE in the rxe lab VM):
//! `roce ping -R --burst` against the stock `ucmatose` both ways (its data
//! is plain SENDs: its server sends `-C` messages of `-S` bytes, its client
//! answers with as many, which `roce ping --burst -s 100 -n C` matches),
//! first on a clean link, then with 3% random loss
//! each way (nftables in the lab's namespace), where CM and transport
//! retransmissions must interoperate. The clean part's tap capture must
//! pass `roce-pcap-check`, and `roce pcap decode` must name the CM
//! messages on it.
//!
//! It boots a VM and takes about 165 s with the lab up (most of it the
//! kernel's 2.1 s QP timeout after each loss, and ucmatose's server, which
//! lingers up to its 60 s wait after the data), more than CI's budget for
//! an addition: it runs only with `ROCE_INTEROP=1`, under the lab's lock
//! (`flock /work/helpers/rxe-lab.lock cargo test -p roce-cli --test
//! rxe_cm_interop`). It needs root; without it (or without the lab's
//! packages) it skips with a notice.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use roce_test_support::lab::{self, text, Lab};

/// `roce` in the lab's namespace, run to its end.
fn roce(args: &[&str]) -> (bool, String) {
    let o = lab::in_netns(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("ip netns exec runs");
    (o.status.success(), text(&o))
}

/// The kernel's ucmatose as the server, `roce ping -R` as the client. A
/// REJ 8 means the server does not listen yet: the client tries again.
fn vm_server(lab: &Lab, count: u32) -> Result<String, String> {
    let c = count.to_string();
    let job = lab.run(&["bg", &format!("ucmatose -b 10.47.0.1 -C {count} -S 100")])?;
    let job = job.trim().to_string();
    let t = Instant::now();
    let mut ours;
    loop {
        ours = roce(&[
            "ping",
            "-R",
            "--burst",
            "10.47.0.1",
            "--bind",
            "10.47.0.3",
            "-p",
            "7471",
            "-s",
            "100",
            "-n",
            &c,
            "--timeout",
            "60",
            "--counters",
        ]);
        if ours.0 || !ours.1.contains("reason 8") || t.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    let vm = lab.run(&["wait", &job, "60"]).unwrap_or_else(|e| e);
    if ours.0 && vm.contains("data transfers complete") {
        Ok(ours.1)
    } else {
        Err(format!("--- ours:\n{}\n--- ucmatose:\n{vm}", ours.1))
    }
}

/// `roce ping -R` as the server, the kernel's ucmatose as the client (it
/// tries again while our server is not listening yet: REJ 8).
fn host_server(lab: &Lab, count: u32) -> Result<String, String> {
    let c = count.to_string();
    let srv = std::thread::spawn(move || {
        roce(&[
            "ping",
            "-R",
            "--burst",
            "--bind",
            "10.47.0.3",
            "-p",
            "7471",
            "-s",
            "100",
            "-n",
            &c,
            "--timeout",
            "60",
            "--counters",
        ])
    });
    let t = Instant::now();
    let mut vm;
    loop {
        vm = lab.exec(&format!("ucmatose -s 10.47.0.3 -C {count} -S 100"), 90);
        if vm.0 || !vm.1.contains("REJECTED") || t.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    let ours = srv.join().expect("the server thread");
    if ours.0 && vm.0 {
        Ok(ours.1)
    } else {
        Err(format!("--- ours:\n{}\n--- ucmatose:\n{}", ours.1, vm.1))
    }
}

fn suite(lab: &Lab, out: &Path, check: Option<&Path>) -> Vec<String> {
    let mut failures = Vec::new();
    let clean = out.join("cm-clean.pcap");
    let _ = lab.run(&["capture", "start", clean.to_str().unwrap()]);
    for (name, r) in [
        ("ucmatose server, roce ping -R client", vm_server(lab, 10)),
        ("roce ping -R server, ucmatose client", host_server(lab, 10)),
    ] {
        match r {
            Ok(_) => eprintln!("ok   {name}"),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    let _ = lab.run(&["capture", "stop"]);
    if let Some(check) = check {
        let o = Command::new("python3").arg(check).args(["--summary", "--pmtu", "1024"]).arg(&clean).output();
        match o {
            Ok(o) if o.status.success() => {
                eprintln!("ok   roce-pcap-check: {}", text(&o).lines().last().unwrap_or(""))
            }
            Ok(o) => failures.push(format!("roce-pcap-check on {}: {}", clean.display(), text(&o))),
            Err(e) => failures.push(format!("roce-pcap-check: {e}")),
        }
    }
    let o = Command::new(env!("CARGO_BIN_EXE_roce")).args(["pcap", "decode"]).arg(&clean).output().unwrap();
    let decoded = text(&o);
    for m in ["CM REQ", "CM REP", "CM RTU", "CM DREQ", "CM DREP"] {
        if !decoded.contains(m) {
            failures.push(format!("roce pcap decode names no {m} on the capture:\n{decoded}"));
        }
    }
    if let Err(e) = lab::add_loss("cmloss", 3) {
        failures.push(format!("cannot impair the link: {e}"));
        return failures;
    }
    for (name, r) in [
        ("ucmatose server, roce ping -R client, 3% loss", vm_server(lab, 100)),
        ("roce ping -R server, ucmatose client, 3% loss", host_server(lab, 100)),
    ] {
        match r {
            Ok(_) => eprintln!("ok   {name}"),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    let n = lab::dropped("cmloss");
    eprintln!("lossy part: nftables dropped {n} RoCE packets");
    if n == 0 {
        failures.push("the lossy part dropped nothing".into());
    }
    lab::remove_loss("cmloss");
    failures
}

fn main() {
    if !std::env::var("ROCE_INTEROP").is_ok_and(|v| v == "1") {
        eprintln!(
            "SKIPPED: the RDMA CM interop test boots a VM for about 3 minutes; it runs with ROCE_INTEROP=1"
        );
        return;
    }
    let check = roce_test_support::pcap_oracle();
    let out = std::env::temp_dir().join(format!("roce-cm-interop-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let Some(lab) = Lab::boot() else { return };
    let t = Instant::now();
    let failures = suite(&lab, &out, check.as_deref());
    let _ = lab.run(&["down"]);
    eprintln!(
        "RDMA CM interop: {:.0} s with the lab up; captures in {}",
        t.elapsed().as_secs_f64(),
        out.display()
    );
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("\n=== {f}");
        }
        std::process::exit(1);
    }
}
