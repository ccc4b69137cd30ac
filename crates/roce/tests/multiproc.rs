//! Several processes, each one device, over real UDP: every node connects an
//! RC QP to every other node and runs every operation against it; each node
//! then checks, byte for byte, what the others wrote into its memory.
//!
//! Without arguments this file is the orchestrator (run by `cargo test`):
//! it starts 2 and 4 node processes (itself, with `node` as argument) over
//! IPv4 and IPv6 loopback, relays their endpoints, and checks they all
//! succeed. The orchestrator is the out-of-band channel, through the nodes'
//! stdin and stdout.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use roce::*;

/// Layout of each node's memory region (per peer slot of `SLOT` bytes).
const SLOT: u64 = 1 << 20;
const MAX_NODES: u64 = 8;
/// Offsets inside a peer's slot: what the peer WRITEs, what it SENDs into,
/// the atomic counter.
const W_OFF: u64 = 0;
const W_LEN: u32 = 300_000;
const S_OFF: u64 = 400_000;
const S_LEN: u32 = 50_000;
/// The region every node fills with its own pattern for peers to READ.
const R_BASE: u64 = SLOT * MAX_NODES;
const R_LEN: u32 = 200_000;
/// Shared counter everyone FETCH_ADDs (8-byte aligned).
const COUNTER: u64 = R_BASE + R_LEN as u64 + 8;
const TOTAL: u64 = COUNTER + 4096;

fn pattern(from: u64, to: u64, kind: u64, len: usize) -> Vec<u8> {
    let mut x = from * 1_000_003 + to * 10_007 + kind * 101 + 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A node: `gso` off on an impaired link, so that nftables and HTB judge
/// every datagram on its own, as a lossy wire does (veth carries a GSO
/// send as one unsegmented packet, which would be dropped or delayed
/// whole).
fn node(id: u64, bind: &str, gso: bool) -> std::result::Result<(), String> {
    let e = |x: roce::Error| x.to_string();
    let mut cfg = DeviceConfig::new(bind.parse().unwrap());
    cfg.gso = gso;
    let dev = Device::open(cfg).map_err(e)?;
    let pd = dev.alloc_pd().map_err(e)?;
    let cq = dev.create_cq(4096).map_err(e)?;
    let mr = pd.reg_mr(MemBuf::new(TOTAL as usize), Access::ALL).map_err(e)?;
    mr.write(R_BASE as usize, &pattern(id, id, 9, R_LEN as usize)).unwrap();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut line = || lines.next().and_then(|l| l.ok()).ok_or_else(|| "orchestrator went away".to_string());
    let n: u64 = line()?.parse().map_err(|_| "bad node count")?;
    // One QP per peer; announce them with the MR.
    let mut qps = Vec::new();
    for peer in 0..n {
        if peer == id {
            qps.push(None);
            continue;
        }
        let qp = pd.create_qp(QpBuilder::rc(&cq).max_send_wr(64).max_recv_wr(64)).map_err(e)?;
        let ep = qp.endpoint();
        println!(
            "EP {id} {peer} {} {} {} {} {} {}",
            ep.gid,
            ep.port,
            ep.qpn,
            ep.psn.value(),
            mr.rkey(),
            mr.addr()
        );
        qps.push(Some((qp, ep)));
    }
    println!("READY");
    std::io::stdout().flush().unwrap();
    let mut remote = vec![None; n as usize];
    loop {
        let l = line()?;
        if l == "GO" {
            break;
        }
        // EP from to gid port qpn psn rkey addr, addressed to us (to == id)
        let f: Vec<&str> = l.split_whitespace().collect();
        let from: u64 = f[1].parse().unwrap();
        let ep = Endpoint {
            gid: f[3].parse().unwrap(),
            port: f[4].parse().unwrap(),
            qpn: f[5].parse().unwrap(),
            psn: Psn::new(f[6].parse().unwrap()),
        };
        remote[from as usize] = Some((ep, f[7].parse::<u32>().unwrap(), f[8].parse::<u64>().unwrap()));
    }
    let opts = ConnectOptions { mtu: PathMtu::Mtu1024, ..ConnectOptions::default() };
    for peer in 0..n as usize {
        if let (Some((qp, _)), Some((rep, _, _))) = (&qps[peer], &remote[peer]) {
            qp.connect(rep, &opts).map_err(e)?;
            // Room for the peer's SEND, in our slot for it.
            qp.post_recv(RecvWr {
                wr_id: 1000 + peer as u64,
                sg_list: vec![mr.sge(peer as u64 * SLOT + S_OFF, S_LEN)],
            })
            .map_err(e)?;
        }
    }
    println!("CONNECTED");
    std::io::stdout().flush().unwrap();
    if line()? != "RUN" {
        return Err("expected RUN".into());
    }
    // Every operation against every peer; sources live in a scratch area.
    let scratch = pd.reg_mr(MemBuf::new(1 << 20), Access::ALL).map_err(e)?;
    let mut recvs = 0;
    for peer in 0..n {
        let (Some((qp, _)), Some((_, rkey, addr))) = (&qps[peer as usize], &remote[peer as usize]) else {
            continue;
        };
        let base = addr + id * SLOT;
        let w = pattern(id, peer, 1, W_LEN as usize);
        let s = pattern(id, peer, 2, S_LEN as usize);
        let so = peer * 8192;
        scratch.write(0, &w).unwrap();
        scratch.write(W_LEN as usize, &s).unwrap();
        let wrs = vec![
            SendWr::new(
                1,
                SendOp::Write { remote_addr: base + W_OFF, rkey: *rkey },
                vec![scratch.sge(0, W_LEN)],
            ),
            SendWr::new(2, SendOp::SendWithImm { imm: id as u32 }, vec![scratch.sge(W_LEN as u64, S_LEN)]),
        ];
        qp.post_send_batch(wrs).map_err(e)?;
        // wait for these before reusing scratch
        wait(&cq, 2, &mut recvs)?;
        let rd = SendWr::new(
            3,
            SendOp::Read { remote_addr: addr + R_BASE, rkey: *rkey },
            vec![scratch.sge(0, R_LEN)],
        );
        let fa = SendWr::new(
            4,
            SendOp::FetchAdd { remote_addr: addr + COUNTER, rkey: *rkey, add: 1 << (8 * id) },
            vec![scratch.sge(R_LEN as u64 + so, 8)],
        );
        let cs = SendWr::new(
            5,
            SendOp::CompareSwap {
                remote_addr: addr + COUNTER + 8 * (id + 1),
                rkey: *rkey,
                compare: 0,
                swap: id + 100,
            },
            vec![scratch.sge(R_LEN as u64 + so + 8, 8)],
        );
        qp.post_send_batch(vec![rd, fa, cs]).map_err(e)?;
        wait(&cq, 3, &mut recvs)?;
        let mut got = vec![0; R_LEN as usize];
        scratch.read(0, &mut got).map_err(e)?;
        if got != pattern(peer, peer, 9, R_LEN as usize) {
            return Err(format!("READ from {peer}: data differs"));
        }
    }
    // Our receives: one SEND from each peer.
    let mut buf = [WC_ZERO; 64];
    while recvs < n - 1 {
        let k = cq.wait(&mut buf, Duration::from_secs(20)).map_err(e)?;
        for wc in &buf[..k] {
            if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv || wc.byte_len != S_LEN {
                return Err(format!("bad receive completion {wc:?}"));
            }
            recvs += 1;
        }
    }
    println!("DONE");
    std::io::stdout().flush().unwrap();
    if line()? != "CHECK" {
        return Err("expected CHECK".into());
    }
    // Everything the peers did to our memory.
    let mut mem = vec![0; mr.len()];
    mr.read(0, &mut mem).map_err(e)?;
    let mut total = 0u64;
    for peer in 0..n {
        if peer == id {
            continue;
        }
        let b = (peer * SLOT) as usize;
        if mem[b..b + W_LEN as usize] != pattern(peer, id, 1, W_LEN as usize)[..] {
            return Err(format!("WRITE from {peer}: data differs"));
        }
        if mem[b + S_OFF as usize..b + (S_OFF + S_LEN as u64) as usize]
            != pattern(peer, id, 2, S_LEN as usize)[..]
        {
            return Err(format!("SEND from {peer}: data differs"));
        }
        let cs = u64::from_ne_bytes(mem[(COUNTER + 8 * (peer + 1)) as usize..][..8].try_into().unwrap());
        if cs != peer + 100 {
            return Err(format!("CMP_SWAP from {peer}: {cs}"));
        }
        total += 1 << (8 * peer);
    }
    let counter = u64::from_ne_bytes(mem[COUNTER as usize..][..8].try_into().unwrap());
    if counter != total {
        return Err(format!("FETCH_ADD counter {counter:#x}, want {total:#x}"));
    }
    let c = dev.counters();
    if c.icrc_errors + c.malformed_dropped > 0 {
        return Err(format!("dropped packets: {c:?}"));
    }
    println!("STATS {}", c.out_of_seq_request);
    println!("OK");
    Ok(())
}

fn wait(cq: &Cq, n: usize, recvs: &mut u64) -> std::result::Result<(), String> {
    let mut got = 0;
    let mut buf = [WC_ZERO; 16];
    while got < n {
        let k = cq.wait(&mut buf, Duration::from_secs(20)).map_err(|e| e.to_string())?;
        for wc in &buf[..k] {
            if wc.status != WcStatus::Success {
                return Err(format!("completion {wc:?}"));
            }
            if wc.opcode == WcOpcode::Recv {
                // a peer's SEND arriving meanwhile
                if wc.byte_len != S_LEN {
                    return Err(format!("bad receive completion {wc:?}"));
                }
                *recvs += 1;
                continue;
            }
            got += 1;
        }
    }
    Ok(())
}

struct Node {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Node {
    fn expect(&mut self, what: &str) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut l = String::new();
            if self.out.read_line(&mut l).unwrap() == 0 {
                panic!("node exited before {what}: {lines:?}");
            }
            let l = l.trim().to_string();
            if l == what {
                return lines;
            }
            lines.push(l);
        }
    }
    fn send(&mut self, l: &str) {
        writeln!(self.child.stdin.as_mut().unwrap(), "{l}").unwrap();
    }
}

fn run_cluster(n: u64, bind: &str) {
    let places: Vec<(Option<String>, String)> = (0..n).map(|_| (None, bind.to_string())).collect();
    run_cluster_in(&places);
}

/// Runs one node per entry: in that network namespace (if any), bound
/// there. Returns the requests the nodes saw ahead of the expected PSN.
fn run_cluster_in(places: &[(Option<String>, String)]) -> u64 {
    let n = places.len() as u64;
    let exe = std::env::current_exe().unwrap();
    let mut nodes: Vec<Node> = places
        .iter()
        .enumerate()
        .map(|(i, (ns, bind))| {
            let mut cmd = match ns {
                Some(ns) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", ns]).arg(&exe);
                    c
                }
                None => Command::new(&exe),
            };
            let gso = if ns.is_some() { "per-datagram" } else { "gso" };
            let mut child = cmd
                .args(["node", &i.to_string(), bind, gso])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let out = BufReader::new(child.stdout.take().unwrap());
            Node { child, out }
        })
        .collect();
    let mut eps = Vec::new();
    for nd in nodes.iter_mut() {
        nd.send(&n.to_string());
        eps.extend(nd.expect("READY"));
    }
    for ep in &eps {
        let to: usize = ep.split_whitespace().nth(2).unwrap().parse().unwrap();
        nodes[to].send(ep);
    }
    for nd in nodes.iter_mut() {
        nd.send("GO");
        nd.expect("CONNECTED");
    }
    for nd in nodes.iter_mut() {
        nd.send("RUN");
    }
    for nd in nodes.iter_mut() {
        nd.expect("DONE");
    }
    for nd in nodes.iter_mut() {
        nd.send("CHECK");
    }
    let mut out_of_seq = 0;
    for (i, nd) in nodes.iter_mut().enumerate() {
        for l in nd.expect("OK") {
            if let Some(v) = l.strip_prefix("STATS ") {
                out_of_seq += v.parse::<u64>().unwrap();
            }
        }
        let st = nd.child.wait().unwrap();
        assert!(st.success(), "node {i} failed");
    }
    out_of_seq
}

/// A peer that connects and then only answers (its driver thread ACKs),
/// until it is killed.
fn sink(bind: &str) -> std::result::Result<(), String> {
    let e = |x: roce::Error| x.to_string();
    let dev = Device::open(DeviceConfig::new(bind.parse().unwrap())).map_err(e)?;
    let pd = dev.alloc_pd().map_err(e)?;
    let cq = dev.create_cq(64).map_err(e)?;
    let mr = pd.reg_mr(MemBuf::new(1 << 20), Access::ALL).map_err(e)?;
    let qp = pd.create_qp(QpBuilder::rc(&cq)).map_err(e)?;
    let ep = qp.endpoint();
    println!("EP {} {} {} {} {} {}", ep.gid, ep.port, ep.qpn, ep.psn.value(), mr.rkey(), mr.addr());
    std::io::stdout().flush().unwrap();
    let mut l = String::new();
    std::io::stdin().read_line(&mut l).map_err(|x| x.to_string())?;
    let f: Vec<&str> = l.split_whitespace().collect();
    let peer = Endpoint {
        gid: f[1].parse().unwrap(),
        port: f[2].parse().unwrap(),
        qpn: f[3].parse().unwrap(),
        psn: Psn::new(f[4].parse().unwrap()),
    };
    qp.connect(&peer, &ConnectOptions::default()).map_err(e)?;
    println!("CONNECTED");
    std::io::stdout().flush().unwrap();
    // Block until killed (or until the orchestrator closes stdin).
    let _ = std::io::stdin().read_line(&mut l);
    Ok(())
}

/// Killing the peer mid-run: the survivor's WRs end with RETRY_EXC_ERR and
/// flushes and its QP in ERR, within a bounded time, never a hang.
fn killed_peer(bind: &str) {
    let exe = std::env::current_exe().unwrap();
    let mut child =
        Command::new(&exe).args(["sink", bind]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    let f: Vec<&str> = l.split_whitespace().collect();
    let remote = Endpoint {
        gid: f[1].parse().unwrap(),
        port: f[2].parse().unwrap(),
        qpn: f[3].parse().unwrap(),
        psn: Psn::new(f[4].parse().unwrap()),
    };
    let (rkey, raddr): (u32, u64) = (f[5].parse().unwrap(), f[6].parse().unwrap());
    let dev = Device::open(DeviceConfig::new(bind.parse().unwrap())).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(1024).unwrap();
    let mr = pd.reg_mr(MemBuf::new(1 << 20), Access::ALL).unwrap();
    let qp = pd.create_qp(QpBuilder::rc(&cq).max_send_wr(256)).unwrap();
    let ep = qp.endpoint();
    let stdin = child.stdin.as_mut().unwrap();
    writeln!(stdin, "EP {} {} {} {}", ep.gid, ep.port, ep.qpn, ep.psn.value()).unwrap();
    l.clear();
    out.read_line(&mut l).unwrap();
    assert_eq!(l.trim(), "CONNECTED");
    let opts = ConnectOptions { timeout: 12, retry_cnt: 3, ..ConnectOptions::default() };
    qp.connect(&remote, &opts).unwrap();
    let write = |id| SendWr::new(id, SendOp::Write { remote_addr: raddr, rkey }, vec![mr.sge(0, 65536)]);
    let mut buf = [WC_ZERO; 64];
    let mut ok = 0u64;
    let mut id = 0;
    let mut killed_at = None;
    let mut statuses = Vec::new();
    // Keep 16 WRITEs in flight; kill the peer after 200 have completed.
    for _ in 0..16 {
        qp.post_send(write(id)).unwrap();
        id += 1;
    }
    loop {
        let n = cq.wait(&mut buf, Duration::from_secs(30)).expect("the survivor must not hang");
        for wc in &buf[..n] {
            if wc.status == WcStatus::Success {
                ok += 1;
            } else {
                statuses.push(wc.status);
            }
        }
        if ok >= 200 && killed_at.is_none() {
            child.kill().unwrap();
            killed_at = Some(std::time::Instant::now());
        }
        if !statuses.is_empty() && qp.outstanding() == 0 {
            break;
        }
        if statuses.is_empty() {
            for _ in 0..n {
                qp.post_send(write(id)).unwrap();
                id += 1;
            }
        }
    }
    let took = killed_at.unwrap().elapsed();
    child.wait().unwrap();
    assert_eq!(statuses[0], WcStatus::RetryExcErr, "{statuses:?}");
    assert!(statuses[1..].iter().all(|s| *s == WcStatus::WrFlushErr), "{statuses:?}");
    assert_eq!(qp.state().unwrap(), QpState::Err);
    assert!(dev.counters().retry_exceeded_err == 1);
    println!(
        "multiproc: peer killed after {ok} WRITEs: RETRY_EXC_ERR + {} flushed, QP in ERR after {took:.2?}",
        statuses.len() - 1
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("sink") {
        if let Err(e) = sink(&args[2]) {
            eprintln!("sink: {e}");
            std::process::exit(1);
        }
        return;
    }
    if args.get(1).map(String::as_str) == Some("node") {
        let id: u64 = args[2].parse().unwrap();
        match node(id, &args[3], args.get(4).map(String::as_str) != Some("per-datagram")) {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                eprintln!("node {id}: {e}");
                println!("FAIL {e}");
                std::process::exit(1);
            }
        }
    }
    let mut passed = 0;
    for (n, bind) in [(2, "127.0.0.1:0"), (4, "127.0.0.1:0"), (2, "[::1]:0"), (4, "[::1]:0")] {
        let t = std::time::Instant::now();
        run_cluster(n, bind);
        println!("multiproc: {n} processes on {bind}: every operation verified ({:.2?})", t.elapsed());
        passed += 1;
    }
    killed_peer("127.0.0.1:0");
    passed += 1;
    match netns::Pair::create() {
        Ok(pair) => {
            for (a, b) in [(pair.a_v4.clone(), pair.b_v4.clone()), (pair.a_v6.clone(), pair.b_v6.clone())] {
                let t = std::time::Instant::now();
                let before = pair.delayed();
                let out_of_seq =
                    run_cluster_in(&[(Some(pair.a.clone()), a.clone()), (Some(pair.b.clone()), b)]);
                let dropped =
                    pair.dropped().map_or(String::new(), |d| format!(", {d} packets dropped so far"));
                let mut delayed = String::new();
                if pair.reorder_class {
                    let d = pair.delayed() - before;
                    assert!(d > 0, "no packet went through the slow class");
                    delayed = format!(", {d} packets delayed");
                }
                assert!(out_of_seq > 0, "the impaired link produced no out-of-sequence request");
                println!(
                    "multiproc: 2 namespaces over veth ({}{dropped}{delayed}), {a}: every operation verified, \
                     {out_of_seq} requests arrived out of sequence ({:.2?})",
                    pair.impairment,
                    t.elapsed()
                );
                passed += 1;
            }
        }
        Err(why) => println!("multiproc: network-namespace test SKIPPED: {why}"),
    }
    println!("{passed} passed, 0 failed");
}

/// Two network namespaces joined by a veth pair, made (and removed) by the
/// test itself, with loss and reordering from `tc netem` where the kernel has
/// it, else random loss from nftables.
mod netns {
    use std::process::Command;

    pub struct Pair {
        pub a: String,
        pub b: String,
        pub a_v4: String,
        pub b_v4: String,
        pub a_v6: String,
        pub b_v6: String,
        pub impairment: String,
        /// Whether reordering comes from the slow HTB class.
        pub reorder_class: bool,
        va: String,
        vb: String,
    }

    fn sh(args: &[&str]) -> Result<(), String> {
        let out = Command::new(args[0]).args(&args[1..]).output().map_err(|e| format!("{}: {e}", args[0]))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("`{}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
        }
    }

    impl Pair {
        pub fn create() -> Result<Pair, String> {
            let id = std::process::id() % 100_000;
            let (a, b) = (format!("roce-a{id}"), format!("roce-b{id}"));
            let (va, vb) = (format!("rva{id}"), format!("rvb{id}"));
            sh(&["ip", "netns", "add", &a]).map_err(|e| format!("cannot create network namespaces ({e})"))?;
            let pair = Pair {
                a: a.clone(),
                b: b.clone(),
                a_v4: "10.77.0.1:4791".into(),
                b_v4: "10.77.0.2:4791".into(),
                a_v6: "[fd77::1]:4791".into(),
                b_v6: "[fd77::2]:4791".into(),
                impairment: String::new(),
                reorder_class: false,
                va: va.clone(),
                vb: vb.clone(),
            };
            let mut pair = pair;
            sh(&["ip", "netns", "add", &b])?;
            sh(&["ip", "link", "add", &va, "type", "veth", "peer", "name", &vb])?;
            for (ns, dev, v4, v6) in
                [(&a, &va, "10.77.0.1/24", "fd77::1/64"), (&b, &vb, "10.77.0.2/24", "fd77::2/64")]
            {
                sh(&["ip", "link", "set", dev, "netns", ns])?;
                sh(&["ip", "-n", ns, "addr", "add", v4, "dev", dev])?;
                sh(&["ip", "-n", ns, "-6", "addr", "add", v6, "dev", dev, "nodad"])?;
                sh(&["ip", "-n", ns, "link", "set", dev, "up"])?;
                sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
            }
            let netem = [(&a, &va), (&b, &vb)].iter().all(|(ns, dev)| {
                sh(&[
                    "ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "netem", "loss",
                    "2%", "delay", "200us", "reorder", "20%", "50%",
                ])
                .is_ok()
            });
            if netem {
                pair.impairment = "tc netem: 2% loss, 200 us delay, 20% reordered".into();
            } else {
                for (ns, dev) in [(&a, &va), (&b, &vb)] {
                    let nft = |rule: &[&str]| {
                        let mut v = vec!["ip", "netns", "exec", ns.as_str(), "nft"];
                        v.extend_from_slice(rule);
                        sh(&v)
                    };
                    nft(&["add", "table", "inet", "roce"])
                        .map_err(|e| format!("no tc netem in this kernel and no nftables for loss ({e})"))?;
                    nft(&["add", "chain", "inet", "roce", "in", "{ type filter hook input priority 0; }"])?;
                    nft(&[
                        "add", "rule", "inet", "roce", "in", "udp", "dport", "4791", "numgen", "random",
                        "mod", "100", "<", "10", "counter", "drop",
                    ])?;
                    // Reordering without netem: an HTB qdisc with a fast
                    // class and a slow one (100 Mbit/s, one packet of
                    // burst), and nftables sending a random 20% of RoCE
                    // packets to the slow class by their skb priority. A
                    // 4 KiB packet waits there about 330 us while later
                    // packets pass it.
                    let tc = |args: &[&str]| {
                        let mut v = vec!["ip", "netns", "exec", ns.as_str(), "tc"];
                        v.extend_from_slice(args);
                        sh(&v)
                    };
                    tc(&["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10"])
                        .map_err(|e| format!("no tc netem and no htb for reordering ({e})"))?;
                    tc(&[
                        "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate",
                        "10gbit",
                    ])?;
                    tc(&[
                        "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb", "rate",
                        "100mbit", "burst", "1600", "cburst", "1600",
                    ])?;
                    nft(&["add", "chain", "inet", "roce", "out", "{ type filter hook output priority 0; }"])?;
                    nft(&[
                        "add", "rule", "inet", "roce", "out", "udp", "dport", "4791", "numgen", "random",
                        "mod", "100", "<", "20", "meta", "priority", "set", "1:20",
                    ])?;
                }
                pair.reorder_class = true;
                pair.impairment = "no tc netem in this kernel: 10% random loss by nftables, 20% of packets \
                                   delayed through a slow HTB class (reordered)"
                    .into();
            }
            Ok(pair)
        }
    }

    impl Pair {
        /// Packets the nftables rules dropped so far (None with netem).
        pub fn dropped(&self) -> Option<u64> {
            let mut total = None;
            for ns in [&self.a, &self.b] {
                let out = Command::new("ip").args(["netns", "exec", ns, "nft", "list", "ruleset"]).output();
                let text = out.map(|o| String::from_utf8_lossy(&o.stdout).to_string()).unwrap_or_default();
                let n = text
                    .split("packets ")
                    .nth(1)
                    .and_then(|t| t.split_whitespace().next())
                    .and_then(|t| t.parse::<u64>().ok());
                *total.get_or_insert(0) += n?;
            }
            total
        }
    }

    impl Pair {
        /// Packets that went through the slow HTB class, in both namespaces.
        pub fn delayed(&self) -> u64 {
            let mut total = 0;
            for (ns, dev) in [(&self.a, &self.va), (&self.b, &self.vb)] {
                let out = Command::new("ip")
                    .args(["netns", "exec", ns, "tc", "-s", "class", "show", "dev", dev, "classid", "1:20"])
                    .output();
                let text = out.map(|o| String::from_utf8_lossy(&o.stdout).to_string()).unwrap_or_default();
                total += text
                    .split(" bytes ")
                    .nth(1)
                    .and_then(|t| t.split_whitespace().next())
                    .and_then(|t| t.parse::<u64>().ok())
                    .unwrap_or(0);
            }
            total
        }
    }

    impl Drop for Pair {
        fn drop(&mut self) {
            let _ = sh(&["ip", "netns", "del", &self.a]);
            let _ = sh(&["ip", "netns", "del", &self.b]);
        }
    }
}
