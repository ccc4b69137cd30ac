//! The RDMA side of `roce perf`: one device, a QP and a registered buffer
//! per connection, and perftest's loops (`run_iter_bw`, `run_iter_lat_write`,
//! `run_iter_lat_send`, `run_iter_lat`, `run_iter_bw_server`).
//!
//! Each QP's buffer has two halves of `half` bytes: the first is the local
//! side of our requests (the source of WRITEs and SENDs, the destination of
//! READs and atomic results), the second is what the peer reaches: its
//! WRITEs, READs and atomics target it, our receives land in it. The
//! sources hold a pattern that depends on the QP and the offset, so the
//! receiving end can check every byte of the last message.

use roce::crypto::Session;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use roce::{
    alloc_buffer, Access, AttrMask, ConnectOptions, Cq, Device, DeviceConfig, Endpoint, Mr, PathMtu, Pd, Psn,
    Qp, QpAttr, QpBuilder, QpState, QpType, RecvWr, SendOp, SendWr, Wc, WcStatus, WC_ZERO,
};
use serde_json::{json, Value};

use super::exchange::{BwReport, KeyMsg, Role, Verdict};
use super::flow::{Lat, Side};
use super::report::{self, HeaderInfo, RESULT_LINE};
use super::{AtomicType, Conf, Kind, Verb, MAX_OUT_READS};
use crate::oob::{gid_bytes, gid_ip, Encryption, Error, Result, ROCE_UDP_PORT};

mod cm;
mod lat;
mod sends;

use sends::{take, wait_one, wc_error, Sends, Stall, REAP_EVERY};

const PAGE: usize = 4096;
/// Low bits of a send work request id: the request's number (from 1); the
/// QP index sits above.
const IDX_BITS: u32 = 40;
/// A timed SEND receiver stops after the peer was quiet this long.
const DRAIN_QUIET: Duration = Duration::from_millis(200);

/// Byte `k` of the pattern of QP `qp`.
fn pattern_byte(qp: usize, k: usize) -> u8 {
    (k.wrapping_mul(31) ^ (k >> 8) ^ qp.wrapping_mul(97) ^ 0xa5) as u8
}

/// The bytes a sender's source holds: a function of the QP and the offset.
pub fn pattern(qp: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| pattern_byte(qp, k)).collect()
}

/// Where `got` first differs from the pattern of QP `qp`.
fn mismatch(qp: usize, got: &[u8]) -> Option<String> {
    let want = pattern(qp, got.len());
    got.iter().zip(&want).position(|(a, b)| a != b).map(|k| {
        format!(
            "data check failed on QP {qp}: byte {k} of {} is {:#04x}, expected {:#04x}",
            got.len(),
            got[k],
            want[k]
        )
    })
}

/// The 64-bit word (host order, as RDMA atomics leave it) at `at`.
fn read_u64(mr: &Mr, at: usize) -> Result<u64> {
    let mut w = [0u8; 8];
    mr.read(at, &mut w)?;
    Ok(u64::from_ne_bytes(w))
}

/// Everything `setup` creates.
struct Res {
    _pd: Pd,
    scq: Cq,
    rcq: Cq,
    qps: Vec<Qp>,
    mrs: Vec<Mr>,
    half: usize,

    /// Receives posted per QP in the current round.
    recv_posted: Vec<u64>,
}

/// The RDMA end of a perf test.
pub struct RdmaSide {
    conf: Conf,
    role: Role,
    quiet: bool,
    dev: Device,
    res: Option<Res>,
    remote: Vec<KeyMsg>,
    peer_is_roce: bool,
    mtu: PathMtu,
    failures: Vec<String>,
    /// Some data check passed on this end (or the server reported one).
    checked: bool,
    json: serde_json::Map<String, Value>,
    rows: Vec<Value>,
    /// Text held back until the test begins ([`RdmaSide::hold_output`]).
    held: Option<String>,
    /// `-R`: the QPs are connected through RDMA CM.
    cm: Option<cm::PerfCm>,
}

impl RdmaSide {
    /// Opens the device on `bind` (its IP is the GID).
    pub fn open(
        conf: &Conf,
        role: Role,
        bind: SocketAddr,
        pcap: Option<PathBuf>,
        quiet: bool,
    ) -> Result<RdmaSide> {
        let mut cfg = DeviceConfig::new(bind);
        cfg.busy_poll = conf.busy_poll;
        cfg.pcap = pcap;
        cfg.gso = conf.gso;
        cfg.mr_addressing = conf.mr_addressing;
        cfg.cc = conf.cc.clone();
        cfg.line_rate_bps = conf.line_rate_bps;
        cfg.pin_peer_port = conf.pin_peer_port;
        let dev = Device::open(cfg).map_err(|source| Error::OpenDevice { bind, source })?;
        crate::report::opened(&dev);
        let mut side = RdmaSide::with_device(conf.clone(), role, dev, quiet);
        if conf.rdma_cm {
            side.cm = Some(cm::PerfCm::open(&side.dev, role, conf.tcp_port)?);
        }
        Ok(side)
    }

    fn with_device(conf: Conf, role: Role, dev: Device, quiet: bool) -> RdmaSide {
        RdmaSide {
            conf,
            role,
            quiet,
            dev,
            res: None,
            remote: Vec::new(),
            peer_is_roce: false,
            mtu: PathMtu::Mtu1024,
            failures: Vec::new(),
            checked: false,
            json: serde_json::Map::new(),
            rows: Vec::new(),
            held: None,
            cm: None,
        }
    }

    /// Forgets a peer dropped before the test: its QPs, CQs and buffers
    /// are destroyed and what was printed for it is discarded; the device
    /// stays for the next peer.
    pub fn reset(&mut self) {
        let (conf, dev) = (self.conf.clone(), self.dev.clone());
        let mut cm = self.cm.take();
        if let Some(c) = &mut cm {
            c.close(&dev);
        }
        *self = RdmaSide::with_device(conf, self.role, dev, self.quiet);
        if self.conf.rdma_cm {
            // A new listener for the next client (the old one went with the
            // connections of the dropped one).
            self.cm = cm::PerfCm::open(&self.dev, self.role, self.conf.tcp_port).ok();
        }
    }

    /// Holds back what this end prints until the test begins, so that a
    /// peer dropped before leaves nothing on stdout.
    pub fn hold_output(&mut self) {
        self.held = Some(String::new());
    }

    fn release_output(&mut self) {
        if let Some(t) = self.held.take() {
            print!("{t}");
        }
    }

    /// The device (a handle to the same one).
    pub fn device(&self) -> Device {
        self.dev.clone()
    }

    fn text(&self) -> bool {
        !self.quiet && !self.conf.json
    }

    fn say(&mut self, s: &str) {
        if !self.text() {
            return;
        }
        match &mut self.held {
            Some(t) => {
                t.push_str(s);
                t.push('\n');
            }
            None => println!("{s}"),
        }
    }

    fn res(&self) -> &Res {
        self.res.as_ref().expect("setup runs before the test")
    }

    fn verb(&self) -> Verb {
        self.conf.test.verb
    }

    /// The send work request number `idx` (from 0) of QP `qi`.
    fn wr(&self, qi: usize, idx: u64, size: u64, signaled: bool) -> SendWr {
        let res = self.res();
        let (mr, r) = (&res.mrs[qi], &self.remote[qi]);
        let id = ((qi as u64) << IDX_BITS) | (idx + 1);
        let (op, sge) = match self.verb() {
            Verb::Write => (SendOp::Write { remote_addr: r.vaddr, rkey: r.rkey }, mr.sge(0, size as u32)),
            Verb::Read => (SendOp::Read { remote_addr: r.vaddr, rkey: r.rkey }, mr.sge(0, size as u32)),
            Verb::Send => (SendOp::Send, mr.sge(0, size as u32)),
            Verb::Atomic => {
                let slot = (idx % (res.half as u64 / 8)) * 8;
                let op = match self.conf.atomic {
                    AtomicType::FetchAndAdd => {
                        SendOp::FetchAdd { remote_addr: r.vaddr, rkey: r.rkey, add: 1 }
                    }
                    AtomicType::CmpAndSwap => SendOp::CompareSwap {
                        remote_addr: r.vaddr,
                        rkey: r.rkey,
                        compare: idx,
                        swap: idx + 1,
                    },
                };
                (op, mr.sge(slot, 8))
            }
        };
        let mut wr = SendWr::new(id, op, vec![sge]);
        wr.signaled = signaled;
        wr
    }

    fn post_recv(&self, qi: usize, size: u64) -> Result<()> {
        let res = self.res();
        let sge = res.mrs[qi].sge(res.half as u64, size as u32);
        Ok(res.qps[qi].post_recv(RecvWr { wr_id: qi as u64, sg_list: vec![sge] })?)
    }

    /// Handles receive completions: counts them and posts replacements
    /// while fewer than `limit` were posted this round.
    fn on_recvs(&mut self, wcs: &[Wc], size: u64, rcnt: &mut [u64], limit: u64) -> Result<()> {
        for wc in wcs {
            if wc.status != WcStatus::Success {
                return Err(wc_error(wc, "a receive"));
            }
            let qi = wc.wr_id as usize;
            rcnt[qi] += 1;
            if self.res().recv_posted[qi] < limit {
                self.post_recv(qi, size)?;
                self.res.as_mut().expect("set up").recv_posted[qi] += 1;
            }
        }
        Ok(())
    }

    /// At the end of a timed run, moves each QP that has completed a
    /// message to ERR.
    ///
    /// perftest leaves the requests still queued at the end of a
    /// timed run to the QPs' destruction; flushing them now (the
    /// QPs to ERR, IBTA 10.3.1: outstanding WRs complete with a
    /// flush error) stops the traffic at the deadline instead of
    /// after a backlog of up to qps x tx-depth messages. Each QP
    /// first completes one message, so the peer's data check
    /// finds a whole one, and goes to ERR as soon as it has: one
    /// that waits for the slowest of thousands keeps sending its
    /// backlog meanwhile (with 10,000 QPs, tens of GB, for longer
    /// than the peer waits).
    fn flush_done_qps(&self, t: &mut Sends) -> Result<()> {
        for qi in 0..t.ccnt.len() {
            if !t.qp_flushed[qi] && t.ccnt[qi] > 0 {
                self.flush_qp(qi)?;
                t.qp_flushed[qi] = true;
                t.flushed = true;
            }
        }
        Ok(())
    }

    /// Moves QP `qi` to ERR: what the peer has not yet acknowledged
    /// completes with `WrFlushErr`.
    fn flush_qp(&self, qi: usize) -> Result<()> {
        let err = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
        self.res().qps[qi].modify(&err, AttrMask::STATE)?;
        Ok(())
    }

    /// Compares the received half of each QP's buffer with the pattern.
    fn check_received(&mut self, size: u64, skip_last: bool) -> Verdict {
        let res = self.res();
        let n = size as usize - usize::from(skip_last);
        if n > res.half {
            return Verdict::Bad(format!("data check: {size} bytes do not fit the {}-byte buffer", res.half));
        }
        for (qi, mr) in res.mrs.iter().enumerate() {
            let mut got = vec![0u8; n];
            if mr.read(res.half, &mut got).is_err() {
                return Verdict::Bad("data check: buffer too small".into());
            }
            if let Some(m) = mismatch(qi, &got) {
                return Verdict::Bad(m);
            }
        }
        self.checked = true;
        Verdict::Ok
    }

    /// After READs: the local half must hold the peer's pattern.
    fn check_read(&mut self, size: u64) {
        if !self.peer_is_roce {
            return;
        }
        let mut bad = Vec::new();
        for (qi, mr) in self.res().mrs.iter().enumerate() {
            let mut got = vec![0u8; size as usize];
            match mr.read(0, &mut got) {
                Ok(()) => bad.extend(mismatch(qi, &got)),
                Err(e) => bad.push(e.to_string()),
            }
        }
        self.checked |= bad.is_empty();
        self.failures.extend(bad);
    }

    /// Congestion control at the end, like perftest's extra counters: the
    /// CNPs and cuts, and each QP's rate.
    fn report_cc(&mut self) {
        let c = self.dev.counters();
        let qpns: Vec<u32> =
            self.res.as_ref().map(|r| r.qps.iter().map(|q| q.endpoint().qpn).collect()).unwrap_or_default();
        let rates: Vec<(u32, roce::QpRateState)> =
            qpns.iter().filter_map(|&q| self.dev.qp_rate(q).map(|s| (q, s))).collect();
        if self.conf.json {
            let list: Vec<serde_json::Value> = rates
                .iter()
                .map(|(q, s)| {
                    serde_json::json!({
                        "qpn": q, "rate_bps": s.rate_bps, "target_bps": s.target_bps,
                        "alpha": s.alpha, "cuts": s.cuts,
                        "rtt_ns": s.rtt.map(|d| d.as_nanos()), "rtt_samples": s.rtt_samples,
                    })
                })
                .collect();
            self.json.insert("cc".into(), list.into());
            self.json.insert("cc_algorithm".into(), self.conf.cc.name().into());
            return;
        }
        println!(
            " Congestion control : {} (line rate {:.2} Gb/s): CNPs sent {}, received {}, rate cuts {}",
            self.conf.cc.name(),
            self.conf.line_rate_bps as f64 / 1e9,
            c.cnp_sent,
            c.cnp_rcvd,
            c.cc_rate_cuts
        );
        for (q, s) in rates {
            let rtt = match s.rtt {
                Some(d) => format!("{:.1} us ({} samples)", d.as_nanos() as f64 / 1e3, s.rtt_samples),
                None => "not measured".into(),
            };
            println!(
                "   QP 0x{q:06x}: rate {:.3} Gb/s, target {:.3} Gb/s, alpha {:.3}, cuts {}, RTT {rtt}",
                s.rate_bps as f64 / 1e9,
                s.target_bps as f64 / 1e9,
                s.alpha,
                s.cuts
            );
        }
    }

    /// Ends the run: prints the JSON document and turns data-check
    /// failures into an error.
    pub fn finish(mut self, r: Result<()>) -> Result<()> {
        self.release_output();
        if let Some(mut c) = self.cm.take() {
            // DREQs for the connections (answered in the background).
            c.close(&self.dev);
        }
        let r = r.map_err(|e| crate::report::with_send_error(&self.dev, e));
        if self.conf.cc.dcqcn().is_some() && !self.quiet {
            self.report_cc();
        }
        if self.conf.counters && !self.quiet {
            if self.conf.json {
                self.json.insert("counters".into(), crate::report::counters_json(&self.dev));
            } else {
                println!("{}", crate::report::counters_table(&self.dev));
            }
        }
        if r.is_ok() && !self.quiet {
            if let Some(w) = crate::report::send_error_warning(&self.dev) {
                eprintln!("{w}");
            }
        }
        if self.conf.json && !self.quiet {
            let check = if r.is_err() || !self.failures.is_empty() {
                "failed"
            } else if self.checked {
                "ok"
            } else {
                "not checked here"
            };
            self.json.insert("results".into(), Value::Array(std::mem::take(&mut self.rows)));
            self.json.insert("data_check".into(), check.into());
            if let Err(e) = &r {
                self.json.insert("error".into(), e.to_string().into());
            }
            println!(
                "{}",
                serde_json::to_string_pretty(&Value::Object(std::mem::take(&mut self.json)))
                    .unwrap_or_default()
            );
        }
        r?;
        if !self.failures.is_empty() {
            return Err(Error::Failed(self.failures.join("; ")));
        }
        Ok(())
    }
}

fn key_json(k: &KeyMsg) -> Value {
    json!({
        "qpn": k.qpn, "psn": k.psn, "rkey": k.rkey, "vaddr": k.vaddr,
        "out_reads": k.out_reads, "gid": gid_ip(k.gid).to_string(),
    })
}

impl Side for RdmaSide {
    fn setup(&mut self, mtu: PathMtu, cycle_buffer: usize) -> Result<Vec<KeyMsg>> {
        self.mtu = mtu;
        let c = &self.conf;
        let max_size = c.sizes.iter().copied().max().unwrap_or(1) as usize;
        let half = max_size.max(cycle_buffer.min(1 << 20)).max(PAGE).next_multiple_of(PAGE);
        let pd = self.dev.alloc_pd()?;
        let (sq, rq) = match (c.test.kind, c.test.verb) {
            (Kind::Bw, Verb::Send) => (c.tx_depth, c.rx_depth),
            (Kind::Bw, _) => (c.tx_depth, 1),
            (Kind::Lat, Verb::Send) => (2, c.rx_depth),
            (Kind::Lat, _) => (2, 1),
        };
        let scq = self.dev.create_cq(sq as usize * c.qps + 16)?;
        let rcq = self.dev.create_cq(rq as usize * c.qps + 16)?;
        let port = self.dev.local_addr().port();
        let gid = gid_bytes(self.dev.gid());
        let (mut qps, mut mrs, mut local) = (Vec::new(), Vec::new(), Vec::new());
        let zeros = vec![0u8; half];
        for qi in 0..c.qps {
            let qp = pd.create_qp(
                QpBuilder::new(QpType::Rc, &scq, &rcq)
                    .max_send_wr(sq)
                    .max_recv_wr(rq)
                    .max_sge(1, 1)
                    .max_inline_data(0),
            )?;
            let mr = pd.reg_mr(alloc_buffer(2 * half), Access::ALL)?;
            let fill = match c.test.verb {
                Verb::Write | Verb::Send => Some(0),
                Verb::Read => Some(half),
                Verb::Atomic => None,
            };
            // perftest writes its buffers before the test; so do we, so
            // that no page is first touched (faulted in and zeroed by the
            // kernel) while the test is timed.
            match fill {
                Some(at) => {
                    mr.write(at, &pattern(qi, half))?;
                    mr.write(half - at, &zeros)?;
                }
                None => {
                    mr.write(0, &zeros)?;
                    mr.write(half, &zeros)?;
                }
            }
            local.push(KeyMsg {
                lid: 0,
                out_reads: if matches!(c.test.verb, Verb::Read | Verb::Atomic) {
                    c.out_reads.into()
                } else {
                    1
                },
                qpn: qp.qpn(),
                psn: qp.endpoint().psn.value(),
                rkey: mr.rkey(),
                vaddr: mr.addr() + half as u64,
                gid,
                srqn: if port == ROCE_UDP_PORT { 0 } else { port.into() },
            });
            qps.push(qp);
            mrs.push(mr);
        }
        let recv_posted = vec![0; c.qps];
        self.res = Some(Res { _pd: pd, scq, rcq, qps, mrs, half, recv_posted });
        Ok(local)
    }

    fn print_header(&mut self) {
        let c = &self.conf;
        let device = self.dev.local_addr().to_string();
        let h = HeaderInfo {
            test: c.test,
            atomic_name: c.atomic.perftest_name(),
            duplex: c.duplex,
            server: self.role == Role::Server,
            device: device.clone(),
            qps: c.qps,
            tx_depth: c.tx_depth,
            rx_depth: c.rx_depth,
            cq_mod: c.cq_mod,
            mtu: self.mtu.bytes(),
            out_reads: c.out_reads.into(),
            icrc_check: self.dev.rx_icrc_check().to_string(),
            encryption: c.encrypt.as_ref().map(Encryption::describe),
        };
        let header = report::header(&h);
        let role = if self.role == Role::Server { "server" } else { "client" };
        let j = &mut self.json;
        j.insert("test".into(), c.test.name().into());
        if c.test.verb == Verb::Atomic {
            j.insert("atomic_type".into(), c.atomic.perftest_name().into());
        }
        j.insert("role".into(), role.into());
        j.insert("device".into(), device.into());
        j.insert("qps".into(), c.qps.into());
        j.insert("mtu".into(), self.mtu.bytes().into());
        j.insert("bidirectional".into(), c.duplex.into());
        j.insert("tx_depth".into(), c.tx_depth.into());
        j.insert("cq_mod".into(), c.cq_mod.into());
        let unit = match (c.test.kind, c.gbits) {
            (Kind::Lat, _) => "usec",
            (Kind::Bw, true) => "Gb/sec",
            (Kind::Bw, false) => "MB/sec",
        };
        j.insert("unit".into(), unit.into());
        j.insert("icrc_check".into(), self.dev.rx_icrc_check().to_string().into());
        j.insert("encrypted".into(), c.encrypt.is_some().into());
        self.say(&header);
    }

    fn connect(&mut self, remote: &[KeyMsg], peer_is_roce: bool, session: Option<&Session>) -> Result<()> {
        self.peer_is_roce = peer_is_roce;
        self.remote = remote.to_vec();
        if self.cm.is_some() {
            return self.cm_connect(remote, peer_is_roce);
        }
        let ours = self.dev.gid();
        let res = self.res();
        for (i, r) in remote.iter().enumerate() {
            let ip = gid_ip(r.gid);
            if ip.is_ipv4() != ours.is_ipv4() {
                return Err(Error::Protocol(format!(
                    "GID types differ: we are {ours}, the peer is {ip}; use the same IP version on both ends"
                )));
            }
            let ep = Endpoint { gid: ip, port: r.udp_port(peer_is_roce), qpn: r.qpn, psn: Psn::new(r.psn) };
            let opts = ConnectOptions {
                mtu: self.mtu,
                max_rd_atomic: (r.out_reads.clamp(1, MAX_OUT_READS.into()) as u8).min(self.conf.out_reads),
                max_dest_rd_atomic: self.conf.out_reads,
                ..ConnectOptions::default()
            };
            if let Some(s) = session {
                res.qps[i].protect(&s.qp_keys(res.qps[i].endpoint().qpn, r.qpn))?;
            }
            res.qps[i].connect(&ep, &opts)?;
        }
        Ok(())
    }

    fn print_local(&mut self, local: &[KeyMsg]) {
        for k in local {
            self.say(&report::address("local", k, self.verb()));
        }
        self.json.insert("local".into(), local.iter().map(key_json).collect());
    }

    fn print_remote(&mut self, remote: &KeyMsg) {
        self.say(&report::address("remote", remote, self.verb()));
        let list = self.json.entry("remote").or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(a) = list {
            a.push(key_json(remote));
        }
    }

    fn print_results_header(&mut self) {
        let h = match self.conf.test.kind {
            Kind::Bw => report::bw_header(self.conf.gbits),
            Kind::Lat => report::lat_header(self.conf.duration.is_some()),
        };
        self.say(&format!("{RESULT_LINE}\n{h}"));
    }

    fn prepare_recv(&mut self, size: u64) -> Result<()> {
        let count = match self.conf.iters {
            Some(n) => u64::from(self.conf.rx_depth).min(n),
            None => self.conf.rx_depth.into(),
        };
        for qi in 0..self.conf.qps {
            for _ in 0..count {
                self.post_recv(qi, size)?;
            }
            self.res.as_mut().expect("set up").recv_posted[qi] = count;
        }
        Ok(())
    }

    /// `run_iter_bw` (and `run_iter_bi` for SEND): up to tx-depth requests
    /// outstanding per QP, a completion every cq-mod requests.
    fn run_bw(&mut self, size: u64) -> Result<BwReport> {
        let c = self.conf.clone();
        let q = c.qps;
        let (n, deadline) = (c.iters.unwrap_or(u64::MAX), c.duration.map(|d| Instant::now() + d));
        let timed = deadline.is_some();
        let (tx, cq_mod) = (u64::from(c.tx_depth), u64::from(c.cq_mod));
        let recv_too = c.duplex && c.test.verb == Verb::Send;
        let limit = if timed { u64::MAX } else { n };
        let mut rcnt = vec![0u64; q];
        // Per-request times only feed the peak; without it, the span will do.
        let record = !timed && !c.no_peak;
        let cap = if record { (n as usize).saturating_mul(q).min(1 << 24) } else { 0 };
        let mut posted = Vec::with_capacity(cap);
        let mut wcs = vec![WC_ZERO; 256];
        let mut stall = Stall::new(c.timeout);
        let start = Instant::now();
        let mut t = Sends::new(q, start, deadline, record, cap);
        let mut last_recv = start;
        let mut stopped = false;
        loop {
            let now = Instant::now();
            stopped |= deadline.is_some_and(|d| now >= d);
            if stopped && timed {
                self.flush_done_qps(&mut t)?;
            }
            let mut reaped = now;
            // Completions taken between posts: progress, and perhaps all
            // that was outstanding (a post that flushed for longer than a
            // round trip), so the wait below must not block on a CQ that
            // nothing will fill.
            let mut reaped_some = false;
            for qi in 0..q {
                // Past the deadline, only a QP that has not posted yet (a
                // first pass over thousands of QPs can outlast a short
                // run) posts its first group: every QP sends something.
                if stopped && t.scnt[qi] > 0 {
                    continue;
                }
                let mut want = (n - t.scnt[qi]).min(tx - (t.scnt[qi] - t.ccnt[qi]));
                if stopped {
                    // one group is something; a whole TX depth per QP
                    // would be a backlog to flush
                    want = want.min(cq_mod);
                }
                if timed {
                    // Timed runs post whole moderation groups: each ends signalled.
                    want -= want % cq_mod;
                }
                if want == 0 {
                    continue;
                }
                let first = t.scnt[qi];
                let wrs: Vec<SendWr> = (first..first + want)
                    .map(|i| self.wr(qi, i, size, (i + 1) % cq_mod == 0 || i + 1 == n))
                    .collect();
                // A post sends what the device has ready, from this thread:
                // with thousands of QPs one pass can take seconds, so
                // completions are taken as they come, not after it.
                let at = Instant::now();
                self.res().qps[qi].post_send_batch(wrs)?;
                if record {
                    posted.extend(std::iter::repeat_n(at, want as usize));
                }
                let now = Instant::now();
                t.scnt[qi] += want;
                if now.duration_since(reaped) >= REAP_EVERY {
                    let k = take(&self.res().scq, &mut wcs, Duration::ZERO)?;
                    t.absorb(&wcs[..k], now)?;
                    reaped_some |= k > 0;
                    reaped = now;
                    stopped |= deadline.is_some_and(|d| now >= d);
                    if stopped && timed {
                        // a pass over thousands of QPs outlasts the run:
                        // the done ones stop sending now, not after it
                        self.flush_done_qps(&mut t)?;
                    }
                }
            }
            let sends_done = (0..q).all(|i| {
                t.ccnt[i] == t.scnt[i] && if timed { stopped && t.scnt[i] > 0 } else { t.scnt[i] == n }
            });
            let recvs_done = !recv_too
                || if timed {
                    stopped && last_recv.elapsed() >= DRAIN_QUIET
                } else {
                    rcnt.iter().all(|&r| r >= n)
                };
            if sends_done && recvs_done {
                break;
            }
            let now = Instant::now();
            let mut wait = stall.left().max(Duration::from_millis(1));
            if recv_too {
                wait = Duration::from_millis(1);
            } else if let (Some(d), false) = (deadline, stopped) {
                wait = wait.min(d.saturating_duration_since(now).max(Duration::from_micros(100)));
            }
            if sends_done || reaped_some {
                wait = Duration::ZERO;
            }
            let k = take(&self.res().scq, &mut wcs, wait)?;
            t.absorb(&wcs[..k], Instant::now())?;
            let mut progressed = k > 0 || reaped_some;
            if recv_too {
                let r = take(
                    &self.res().rcq,
                    &mut wcs,
                    if sends_done { Duration::from_millis(1) } else { Duration::ZERO },
                )?;
                if r > 0 {
                    // Flushed receives are not reposted: the QP is in ERR.
                    let flushed = t.flushed;
                    let batch: Vec<Wc> = wcs[..r]
                        .iter()
                        .filter(|w| !(flushed && w.status == WcStatus::WrFlushErr))
                        .copied()
                        .collect();
                    self.on_recvs(&batch, size, &mut rcnt, limit)?;
                    last_recv = Instant::now();
                    progressed = true;
                }
            }
            if progressed {
                stall.progress();
            } else {
                stall.check("waiting for completions")?;
            }
        }
        let mut rep = if !record {
            report::bw_report_span(size, t.done, t.last_done.saturating_duration_since(start), c.gbits)
        } else {
            report::bw_report(size, &posted, &t.completed, c.cq_mod as usize, c.gbits)
        };
        if c.no_peak {
            rep.bw_peak = 0.0;
        }
        if c.test.verb == Verb::Read {
            self.check_read(size);
        }
        Ok(rep)
    }

    /// `run_iter_bw_server`: counts SENDs and keeps receives posted.
    fn run_bw_server(&mut self, size: u64) -> Result<BwReport> {
        let c = self.conf.clone();
        let q = c.qps;
        let (n, timed) = (c.iters.unwrap_or(u64::MAX), c.duration);
        let deadline = timed.map(|d| Instant::now() + d);
        let limit = if timed.is_some() { u64::MAX } else { n };
        let mut rcnt = vec![0u64; q];
        let mut wcs = vec![WC_ZERO; 256];
        let mut stall = Stall::new(c.timeout);
        let (mut first, mut last) = (None, Instant::now());
        loop {
            let done = match deadline {
                Some(d) => Instant::now() >= d && last.elapsed() >= DRAIN_QUIET,
                None => rcnt.iter().all(|&r| r >= n),
            };
            if done {
                break;
            }
            let wait = if deadline.is_some() {
                Duration::from_millis(20)
            } else {
                stall.left().max(Duration::from_millis(1))
            };
            let k = take(&self.res().rcq, &mut wcs, wait)?;
            if k == 0 {
                if deadline.is_none() {
                    stall.check("waiting for SENDs")?;
                }
                continue;
            }
            let now = Instant::now();
            first.get_or_insert(now);
            last = now;
            stall.progress();
            let batch = wcs[..k].to_vec();
            self.on_recvs(&batch, size, &mut rcnt, limit)?;
        }
        let total: u64 = rcnt.iter().sum();
        let span = first.map_or(Duration::ZERO, |f| last.saturating_duration_since(f));
        Ok(report::bw_report_span(size, total, span, c.gbits))
    }

    fn run_lat(&mut self, size: u64) -> Result<Lat> {
        match self.verb() {
            Verb::Write => self.write_lat(size),
            Verb::Send => self.send_lat(size),
            Verb::Read | Verb::Atomic => self.one_at_a_time(size),
        }
    }

    fn show_bw(&mut self, mine: &BwReport, peer: Option<&BwReport>) {
        self.say(&report::bw_row(mine, peer, self.conf.gbits));
        let mut row = serde_json::to_value(mine).unwrap_or_default();
        if let (Some(p), Value::Object(o)) = (peer, &mut row) {
            o.insert("remote".into(), serde_json::to_value(p).unwrap_or_default());
        }
        self.rows.push(row);
    }

    fn show_lat(&mut self, r: &Lat) {
        let (line, v) = match r {
            Lat::Iters(l) => (report::lat_row(l), serde_json::to_value(l)),
            Lat::Duration(l) => (report::lat_dur_row(l), serde_json::to_value(l)),
        };
        self.say(&line);
        self.rows.push(v.unwrap_or_default());
    }

    fn print_footer(&mut self) {
        self.say(RESULT_LINE);
    }

    fn check(&mut self, size: u64, peer_iters: u64) -> Verdict {
        if !self.peer_is_roce || self.res.is_none() {
            return Verdict::Skipped;
        }
        match self.verb() {
            Verb::Write | Verb::Send => self.check_received(size, false),
            Verb::Read => Verdict::Skipped,
            Verb::Atomic => {
                let res = self.res();
                let sum: u64 = res.mrs.iter().map(|m| read_u64(m, res.half).unwrap_or(0)).sum();
                if sum == peer_iters {
                    self.checked = true;
                    Verdict::Ok
                } else {
                    Verdict::Bad(format!(
                        "data check failed: the peer reported {peer_iters} atomics, the target words add up to {sum}"
                    ))
                }
            }
        }
    }

    fn begin_test(&mut self) {
        self.release_output();
    }

    fn peer_verdict(&mut self, v: Verdict) {
        match v {
            Verdict::Ok => self.checked = true,
            Verdict::Bad(m) => self.failures.push(m),
            Verdict::Skipped => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_catches_every_changed_byte() {
        let mut p = pattern(3, 5000);
        assert_eq!(mismatch(3, &p), None);
        assert!(mismatch(2, &p).is_some(), "each QP has its own pattern");
        p[4097] ^= 1;
        assert!(mismatch(3, &p).unwrap().contains("byte 4097 of 5000"));
        assert_ne!(pattern(0, 512)[..256], pattern(0, 512)[256..], "blocks differ");
    }

    #[test]
    fn verdicts_travel_in_a_report_slot() {
        for v in [Verdict::Ok, Verdict::Skipped] {
            assert_eq!(Verdict::from_slot(&v.to_slot()), Some(v));
        }
        assert!(matches!(Verdict::from_slot(&Verdict::Bad("x".into()).to_slot()), Some(Verdict::Bad(_))));
        assert_eq!(Verdict::from_slot(&2.5f64.to_bits().to_be_bytes()), None);
    }
}
