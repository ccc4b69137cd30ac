//! The RDMA CM's path MTU follows the link, as the kernel's does
//! (`iboe_get_mtu(ndev->mtu)`): two network namespaces joined by a veth,
//! `roce perf write-bw -R` between them (the QPs connected by REQ/REP/RTU),
//! once with the veth at 1500 bytes (a RoCE MTU of 1024, what rxe and the
//! kernel's CM take on Ethernet) and once at 9000 (4096). The client's
//! packet count tells which MTU its QP sent at: 50 WRITEs of 64 KiB are
//! 3,200 packets at 1024 and 800 at 4096. Stock `ibv_devinfo` over the
//! library reports the same as the port's `active_mtu`.
//!
//! Needs root and `ip`; skips with the reason otherwise (CI has them).

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

#[path = "support/child.rs"]
mod child;
use child::{finish, json_of, roce_in, sh, stdout_of};

const LIMIT: Duration = Duration::from_secs(60);
const WRITES: u64 = 50;
const SIZE: u64 = 65536;

/// Namespaces `s` (10.79.0.1) and `r` (10.79.0.2) on the two ends of a veth.
struct Net {
    s: String,
    r: String,
    vs: String,
    vr: String,
}

impl Net {
    fn create() -> Result<Net, String> {
        let id = std::process::id() % 100_000;
        let (s, r) = (format!("rms{id}"), format!("rmr{id}"));
        let (vs, vr) = (format!("vms{id}"), format!("vmr{id}"));
        sh(&["ip", "netns", "add", &s]).map_err(|e| format!("cannot create network namespaces ({e})"))?;
        let net = Net { s: s.clone(), r: r.clone(), vs: vs.clone(), vr: vr.clone() };
        sh(&["ip", "netns", "add", &r])?;
        sh(&["ip", "link", "add", &vs, "type", "veth", "peer", "name", &vr])?;
        for (ns, dev, addr) in [(&s, &vs, "10.79.0.1/24"), (&r, &vr, "10.79.0.2/24")] {
            sh(&["ip", "link", "set", dev, "netns", ns])?;
            sh(&["ip", "-n", ns, "addr", "add", addr, "dev", dev])?;
            sh(&["ip", "-n", ns, "link", "set", dev, "up"])?;
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    fn set_mtu(&self, mtu: u32) {
        let m = mtu.to_string();
        sh(&["ip", "-n", &self.s, "link", "set", &self.vs, "mtu", &m]).unwrap();
        sh(&["ip", "-n", &self.r, "link", "set", &self.vr, "mtu", &m]).unwrap();
    }

    /// One `write-bw -R` run: the client's JSON.
    fn run(&self, port: u16) -> Value {
        let port = port.to_string();
        let common = ["--counters", "--json", "--timeout", "20", "-R", "-p", port.as_str()];
        let mut a = vec!["perf", "write-bw", "--bind", "10.79.0.2"];
        a.extend(common);
        let server = roce_in(&self.r, &a);
        let (n, s) = (WRITES.to_string(), SIZE.to_string());
        let mut a = vec!["perf", "write-bw", "10.79.0.2", "--bind", "10.79.0.1", "-n", &n, "-s", &s];
        a.extend(common);
        let client = roce_in(&self.s, &a);
        let c = json_of(&finish(client, "client", LIMIT), "client");
        json_of(&finish(server, "server", LIMIT), "server");
        c
    }

    /// Stock `ibv_devinfo -v` over the library on 10.79.0.1: its port's
    /// `active_mtu` line.
    fn devinfo_mtu(&self) -> String {
        let o = finish(
            roce_in(&self.s, &["exec", "--addr", "10.79.0.1", "--", "ibv_devinfo", "-v"]),
            "ibv_devinfo",
            LIMIT,
        );
        let out = stdout_of(&o, "ibv_devinfo");
        out.lines()
            .find(|l| l.contains("active_mtu:"))
            .unwrap_or_else(|| panic!("no active_mtu in\n{out}"))
            .split_whitespace()
            .skip(1)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn have_devinfo() -> bool {
    Command::new("ibv_devinfo").arg("--help").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.s]);
        let _ = sh(&["ip", "netns", "del", &self.r]);
    }
}

fn sent_pkts(v: &Value) -> u64 {
    v["counters"]["engine"]["sent_pkts"].as_u64().unwrap_or_else(|| panic!("no sent_pkts in {v}"))
}

#[test]
fn the_cm_takes_its_path_mtu_from_the_link() {
    let net = match Net::create() {
        Ok(n) => n,
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "CI must run the link MTU test: {e}");
            eprintln!("skipped: {e}");
            return;
        }
    };
    let data = |mtu: u64| WRITES * SIZE / mtu;
    // A verbs program sees the same MTU as its port's active MTU, as on rxe.
    let devinfo = have_devinfo();
    if !devinfo {
        eprintln!("skipped the ibv_devinfo part: no ibv_devinfo");
    }
    net.set_mtu(1500);
    if devinfo {
        assert_eq!(net.devinfo_mtu(), "1024 (3)");
    }
    let at_1500 = sent_pkts(&net.run(19401));
    net.set_mtu(9000);
    if devinfo {
        assert_eq!(net.devinfo_mtu(), "4096 (5)");
    }
    let at_9000 = sent_pkts(&net.run(19402));
    eprintln!("client packets: veth MTU 1500 {at_1500}, 9000 {at_9000}");
    // The data packets, and a few more (CM MADs, a probe): never the
    // count of the other MTU.
    assert!((data(1024)..data(1024) + 100).contains(&at_1500), "MTU 1500: {at_1500} packets");
    assert!((data(4096)..data(4096) + 100).contains(&at_9000), "MTU 9000: {at_9000} packets");
}
