//! A plan checked by simulation: the fabric with the plan's settings runs
//! a worst-case incast and a workload, and must drop nothing.
//!
//! - The incast: `senders` hosts (by default every host but the receiver;
//!   fewer are spread evenly over the others, so they sit under different
//!   switches) each send `bytes` to the first host at once,
//!   with congestion control off. That is the worst case for headroom:
//!   senders at line rate when XOFF comes, as in the first round trips of
//!   any burst before a CNP can arrive, here for the whole incast; and
//!   enough bytes (by default three buffers' worth in all) that the
//!   receiver's switch pauses its peers, and they theirs.
//! - The workload: the caller's flows (an HPCC flow list, or
//!   [`poisson_flows`] from a flow-size CDF) with the whole plan, DCQCN
//!   included.
//!
//! Each run reports its drops (frames refused for want of buffer: a full
//! headroom — the plan's failure — and any other loss), the time ports
//! spent paused (from the PFC frames received: PAUSE to RESUME per port
//! and priority), FCT slowdown p50/p95/p99 (fct / standalone FCT, the
//! artifact's convention, [`crate::compare::SlowdownStats`]) and the port
//! whose headroom came closest to full. A plan holds when every run
//! completes and drops nothing.

use std::collections::HashMap;

use crate::compare::SlowdownStats;
use crate::hpcc::Standalone;
use crate::report::{Ending, HeadroomUse, Report};
use crate::rng::SimRng;
use crate::scenario::{peer_of, FlowOp, FlowSpec, NodeId, Scenario, Time, HPCC_FLOW_DPORT, PS_PER_S};
use crate::sim::{simulate, FabricError, Progress};

/// The incast's bytes in all, in buffers of one switch, by default.
pub const INCAST_BUFFERS: u64 = 3;
/// The smallest incast flow.
pub const MIN_INCAST_FLOW: u64 = 64 * 1024;
/// The priority flows are sent at (the usual lossless one).
pub const FLOW_PRIORITY: u8 = 3;

/// Why a check could not run.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("an incast needs {needed} hosts; the topology has {hosts}")]
    TooFewHosts { needed: usize, hosts: usize },
    #[error("flow-size CDF line {line}: {reason}")]
    BadCdf { line: usize, reason: String },
    #[error("load {0}: expected a number above 0 and at most 1")]
    BadLoad(f64),
    #[error("no lossless priority to send the check's flows at")]
    NoLossless,
    #[error("simulating the {run}: {source}")]
    Sim {
        run: &'static str,
        #[source]
        source: FabricError,
    },
}

/// A workload for the check.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub name: String,
    pub flows: Vec<FlowSpec>,
}

/// What the check runs.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOptions {
    /// Incast senders (`None`: every host but the receiver).
    pub incast_senders: Option<usize>,
    /// Bytes per incast flow (`None`: [`INCAST_BUFFERS`] buffers over the
    /// senders, at least [`MIN_INCAST_FLOW`]).
    pub incast_bytes: Option<u64>,
    pub workload: Option<Workload>,
    /// IB payload per packet for the standalone FCT (the MTU).
    pub payload: u64,
}

/// Paused time from the PFC frames received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PauseTime {
    /// Summed over (node, port, priority).
    pub total_ps: Time,
    pub longest_ps: Time,
    /// (node, port) pairs ever paused.
    pub ports: usize,
}

/// One run of the check.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub name: String,
    pub flows: usize,
    pub finished: usize,
    pub ending: Option<Ending>,
    pub end_ps: Time,
    /// Frames refused for want of buffer (a full headroom on a lossless
    /// priority), and lost otherwise (links, watchdog, no route).
    pub drops_buffer: u64,
    pub drops_other: u64,
    pub pauses_sent: u64,
    pub ecn_marks: u64,
    pub pause: PauseTime,
    pub slowdown: Option<SlowdownStats>,
    /// The port whose headroom came closest to full.
    pub fullest: Option<PortUse>,
    /// Ports that refused frames.
    pub refusing_ports: Vec<PortUse>,
}

/// A switch port's headroom use, with the port named.
#[derive(Debug, Clone, PartialEq)]
pub struct PortUse {
    /// `s1 port 9 (from s2)`.
    pub name: String,
    pub used: HeadroomUse,
}

impl RunSummary {
    pub fn drops(&self) -> u64 {
        self.drops_buffer + self.drops_other
    }

    /// Why this run says the plan does not hold (empty: it holds).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.drops() > 0 {
            p.push(format!(
                "{}: {} frames dropped ({} for want of buffer)",
                self.name,
                self.drops(),
                self.drops_buffer
            ));
        }
        if self.ending != Some(Ending::Completed) {
            p.push(format!(
                "{}: {} of {} flows finished ({:?})",
                self.name, self.finished, self.flows, self.ending
            ));
        }
        p
    }
}

/// The check's runs.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckReport {
    pub incast: RunSummary,
    pub workload: Option<RunSummary>,
}

impl CheckReport {
    pub fn runs(&self) -> impl Iterator<Item = &RunSummary> {
        std::iter::once(&self.incast).chain(self.workload.as_ref())
    }

    /// Why the plan does not hold (empty: it holds).
    pub fn problems(&self) -> Vec<String> {
        self.runs().flat_map(RunSummary::problems).collect()
    }

    pub fn holds(&self) -> bool {
        self.problems().is_empty()
    }
}

/// The incast's flows on `scn`: `senders` hosts spread over the others
/// (the `i x others / senders`-th), each `bytes` to the first host, all
/// at time 0.
pub fn incast_flows(scn: &Scenario, senders: usize, bytes: u64) -> Result<Vec<FlowSpec>, CheckError> {
    let hosts: Vec<NodeId> = scn.hosts().collect();
    if senders == 0 || senders + 1 > hosts.len() {
        return Err(CheckError::TooFewHosts { needed: senders.max(1) + 1, hosts: hosts.len() });
    }
    let (receiver, others) = (hosts[0], &hosts[1..]);
    Ok((0..senders)
        .map(|i| FlowSpec {
            src: others[i * others.len() / senders],
            dst: receiver,
            priority: lossless_priority(scn),
            size: bytes,
            start_ps: 0,
            op: FlowOp::Write,
            dport: HPCC_FLOW_DPORT,
        })
        .collect())
}

/// [`FLOW_PRIORITY`] if lossless, else the lowest lossless priority.
fn lossless_priority(scn: &Scenario) -> u8 {
    let mask = scn.switch.lossless_mask;
    if mask & (1 << FLOW_PRIORITY) != 0 {
        FLOW_PRIORITY
    } else {
        mask.trailing_zeros().min(7) as u8
    }
}

/// Reads a flow-size CDF: lines `size_bytes cdf_percent`, percents rising
/// to 100 (the HPCC artifact's `traffic_gen` files).
pub fn parse_cdf(text: &str) -> Result<Vec<(u64, f64)>, CheckError> {
    let mut cdf: Vec<(u64, f64)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let bad = |reason: &str| CheckError::BadCdf { line: i + 1, reason: reason.into() };
        let mut f = line.split_whitespace();
        let Some(size) = f.next() else { continue };
        let size: u64 = size.parse().map_err(|_| bad("the size is not a number of bytes"))?;
        let pct: f64 =
            f.next().and_then(|p| p.parse().ok()).ok_or_else(|| bad("no percent after the size"))?;
        if f.next().is_some() {
            return Err(bad("more than two fields"));
        }
        if !(0.0..=100.0).contains(&pct) || cdf.last().is_some_and(|&(s, p)| size < s || pct < p) {
            return Err(bad("sizes and percents must rise, percents within 0..=100"));
        }
        cdf.push((size, pct));
    }
    if cdf.last().map(|&(_, p)| p) != Some(100.0) {
        return Err(CheckError::BadCdf {
            line: text.lines().count(),
            reason: "the CDF must end at 100".into(),
        });
    }
    Ok(cdf)
}

/// The size at `u` (0..100) of a CDF, linear between its points.
fn cdf_size(cdf: &[(u64, f64)], u: f64) -> u64 {
    let i = cdf.partition_point(|&(_, p)| p < u);
    match (i.checked_sub(1).and_then(|j| cdf.get(j)), cdf.get(i)) {
        (Some(&(s0, p0)), Some(&(s1, p1))) if p1 > p0 => {
            (s0 as f64 + (s1 - s0) as f64 * (u - p0) / (p1 - p0)).round() as u64
        }
        (_, Some(&(s, _))) => s,
        (Some(&(s, _)), None) => s,
        (None, None) => 1,
    }
    .max(1)
}

/// The CDF's mean size.
fn cdf_mean(cdf: &[(u64, f64)]) -> f64 {
    cdf.windows(2).map(|w| (w[1].1 - w[0].1) / 100.0 * (w[0].0 + w[1].0) as f64 / 2.0).sum::<f64>().max(1.0)
}

/// Flows like the HPCC artifact's `traffic_gen`: at every host, arrivals
/// of a Poisson process whose rate makes `load` of the host's link
/// (mean gap = mean size x 8 / (load x rate)), each to a uniformly chosen
/// other host, its size drawn from `cdf`; over `duration_ps`, in start
/// order. Deterministic in `seed`.
pub fn poisson_flows(
    scn: &Scenario,
    cdf: &[(u64, f64)],
    load: f64,
    duration_ps: Time,
    seed: u64,
) -> Result<Vec<FlowSpec>, CheckError> {
    if !(load > 0.0 && load <= 1.0) {
        return Err(CheckError::BadLoad(load));
    }
    let hosts: Vec<NodeId> = scn.hosts().collect();
    if hosts.len() < 2 {
        return Err(CheckError::TooFewHosts { needed: 2, hosts: hosts.len() });
    }
    let rate_of =
        |h: NodeId| scn.links.iter().find(|l| l.a == h || l.b == h).map_or(0, |l| l.rate_bps) as f64;
    let mean = cdf_mean(cdf);
    let mut rng = SimRng::new(seed).fork("plan-workload");
    let prio = lossless_priority(scn);
    let mut flows = Vec::new();
    for (si, &src) in hosts.iter().enumerate() {
        let gap_s = mean * 8.0 / (load * rate_of(src)).max(1.0);
        let mut t = 0.0f64;
        loop {
            t += -gap_s * (1.0 - rng.unit()).ln();
            let start_ps = (t * PS_PER_S as f64) as Time;
            if start_ps >= duration_ps {
                break;
            }
            // One of the other hosts, uniformly.
            let j = rng.below(hosts.len() as u64 - 1) as usize;
            let dst = hosts[if j < si { j } else { j + 1 }];
            let size = cdf_size(cdf, rng.unit() * 100.0);
            flows.push(FlowSpec {
                src,
                dst,
                priority: prio,
                size,
                start_ps,
                op: FlowOp::Write,
                dport: HPCC_FLOW_DPORT,
            });
        }
    }
    flows.sort_by_key(|f| (f.start_ps, f.src));
    Ok(flows)
}

/// Runs the check of `planned` (a scenario with the plan applied; its
/// own flows are not run).
pub fn check(
    planned: &Scenario,
    opts: &CheckOptions,
    mut progress: Option<&mut dyn Progress>,
) -> Result<CheckReport, CheckError> {
    if planned.switch.lossless_mask == 0 {
        return Err(CheckError::NoLossless);
    }
    let senders = opts.incast_senders.unwrap_or_else(|| planned.hosts().count().saturating_sub(1));
    let bytes = opts.incast_bytes.unwrap_or_else(|| {
        (INCAST_BUFFERS * planned.switch.buffer_bytes / senders.max(1) as u64).max(MIN_INCAST_FLOW)
    });
    let mut incast = planned.clone();
    incast.name = format!("incast {senders} x {bytes} B, DCQCN off");
    incast.flows = incast_flows(planned, senders, bytes)?;
    incast.nic.cc = "none".into();
    let report = simulate(&incast, Relay::of(&mut progress).as_mut().map(|r| r as &mut dyn Progress))
        .map_err(|source| CheckError::Sim { run: "incast", source })?;
    let incast = summarise(&incast, &report, opts.payload);
    let workload = match &opts.workload {
        None => None,
        Some(w) => {
            let mut scn = planned.clone();
            scn.name = w.name.clone();
            scn.flows = w.flows.clone();
            let report = simulate(&scn, Relay::of(&mut progress).as_mut().map(|r| r as &mut dyn Progress))
                .map_err(|source| CheckError::Sim { run: "workload", source })?;
            Some(summarise(&scn, &report, opts.payload))
        }
    };
    Ok(CheckReport { incast, workload })
}

/// Lends the caller's progress report to one run after another.
struct Relay<'a, 'b>(&'a mut (dyn Progress + 'b));

impl<'a, 'b> Relay<'a, 'b> {
    fn of(p: &'a mut Option<&'b mut dyn Progress>) -> Option<Relay<'a, 'b>> {
        p.as_mut().map(|p| Relay(&mut **p))
    }
}

impl Progress for Relay<'_, '_> {
    fn update(&mut self, now: Time, done: usize, total: usize) {
        self.0.update(now, done, total);
    }
}

/// The paused time of a run's PFC frames (a pause still on at the end
/// lasts until then).
pub fn pause_time(report: &Report) -> PauseTime {
    let mut since: HashMap<(NodeId, u32, u8), Time> = HashMap::new();
    let mut ports: HashMap<(NodeId, u32), ()> = HashMap::new();
    let mut out = PauseTime::default();
    let end = |from: Time, to: Time, out: &mut PauseTime| {
        let d = to.saturating_sub(from);
        out.total_ps += d;
        out.longest_ps = out.longest_ps.max(d);
    };
    for r in &report.pfc {
        let key = (r.node, r.port, r.priority);
        if r.pause {
            ports.insert((r.node, r.port), ());
            since.entry(key).or_insert(r.time_ps);
        } else if let Some(from) = since.remove(&key) {
            end(from, r.time_ps, &mut out);
        }
    }
    let mut left: Vec<Time> = since.into_values().collect();
    left.sort_unstable();
    for from in left {
        end(from, report.end_ps, &mut out);
    }
    out.ports = ports.len();
    out
}

/// Each finished flow's size and FCT slowdown (its FCT over its
/// standalone FCT, clipped below at 1; the artifact's convention), in
/// the report's order; `payload` is the IB payload per packet.
pub fn slowdowns(scn: &Scenario, report: &Report, payload: u64) -> Vec<(u64, f64)> {
    let mut alone = Standalone::new(scn, payload);
    report
        .fct
        .iter()
        .filter_map(|r| {
            let s = alone.fct_ps(r.src, r.dst, r.size)?;
            (s > 0).then(|| (r.size, (r.fct_ps as f64 / s as f64).max(1.0)))
        })
        .collect()
}

fn summarise(scn: &Scenario, report: &Report, payload: u64) -> RunSummary {
    let c = &report.counters;
    let slowdowns: Vec<f64> = slowdowns(scn, report, payload).into_iter().map(|(_, s)| s).collect();
    let fill = |h: &HeadroomUse| h.peak_bytes as f64 / h.headroom_bytes.max(1) as f64;
    let named = |h: &HeadroomUse| {
        let node = |n: NodeId| scn.nodes.get(n).map_or_else(|| format!("node {n}"), |x| x.name.clone());
        let peer = peer_of(scn, h.node, h.port).map_or_else(|| "?".into(), node);
        PortUse { name: format!("{} port {} (from {peer})", node(h.node), h.port), used: *h }
    };
    RunSummary {
        name: scn.name.clone(),
        flows: scn.flows.len(),
        finished: report.fct.len(),
        ending: report.ending.clone(),
        end_ps: report.end_ps,
        drops_buffer: c.dropped_buffer,
        drops_other: c.frames_lost() - c.dropped_buffer,
        pauses_sent: c.pfc_pause_sent,
        ecn_marks: c.ecn_marked,
        pause: pause_time(report),
        slowdown: SlowdownStats::of(slowdowns),
        fullest: report.headroom.iter().max_by(|a, b| fill(a).total_cmp(&fill(b))).map(named),
        refusing_ports: report.headroom.iter().filter(|h| h.refused > 0).map(named).collect(),
    }
}
