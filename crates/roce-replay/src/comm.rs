//! Communication from a model instead of the trace.
//!
//! The replay asks a [`CommModel`] for the duration of every joined
//! operation (a pipeline send/receive pair, a data-parallel collective,
//! the embedding and clip all-reduces), given its type, its participants
//! and what the trace recorded for it. Two models:
//!
//! * [`Recorded`]: the trace's own transfer times (the what-if replay).
//! * [`AnalyticFabric`]: the cost model of `../shared/collectives-notes.md`
//!   §7 on a non-blocking fabric (a fat-tree with full bisection: only the
//!   hosts' access links can be bottlenecks), one GPU per host, every
//!   access link at `link_bytes_per_s` except an optional degraded one.
//!   A collective runs at its slowest participant's link (ring: "replace
//!   B by min B_i"), so one degraded link slows exactly the collectives
//!   and transfers that cross it.
//!
//! The traces record no byte counts. [`calibrated_bytes`] derives them:
//! each communication type's size is the one whose ring cost at the
//! nominal rate equals the median recorded transfer time of that type (the
//! typical duration of the what-if analysis). On the healthy
//! fabric with ring all-reduce every collective therefore takes its
//! type's typical time; what changes is what the fabric changes.
//!
//! The packet-level fabric (`roce sim coll` on `roce-fabric`) is meant to
//! be a third implementation: the trait hands it the type, the ranks and
//! the recorded times, and [`calibrated_bytes`] the sizes, which is what
//! it needs to run each collective on simulated hosts.

use std::collections::BTreeMap;

use crate::error::ReplayError;
use crate::graph::{Job, StepGraph};
use crate::replay::replay;
use crate::trace::OpKind;

/// One joined operation the replay needs a duration for.
#[derive(Debug, Clone, Copy)]
pub struct CommInstance<'a> {
    /// The step.
    pub step: i64,
    /// The type (a pipeline pair is named by its send).
    pub kind: OpKind,
    /// The participants' global ranks, in member order.
    pub ranks: &'a [u32],
    /// The recorded transfer time of each participant (seconds).
    pub recorded: &'a [f64],
}

/// Where the replay takes communication durations from.
pub trait CommModel {
    /// A one-line description for reports.
    fn describe(&self) -> String;
    /// The duration of each participant, from the group's start (seconds),
    /// in member order.
    fn durations(&self, c: &CommInstance<'_>) -> Vec<f64>;
}

/// The trace's own transfer times.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recorded;

impl CommModel for Recorded {
    fn describe(&self) -> String {
        "communication as recorded".into()
    }

    fn durations(&self, c: &CommInstance<'_>) -> Vec<f64> {
        c.recorded.to_vec()
    }
}

/// The all-reduce algorithm of the analytic model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllReduce {
    /// Ring: 2(n-1)/n · S/B + 2(n-1)α.
    Ring,
    /// Pipelined double binary tree: S/B + 2⌈log2 n⌉α.
    Tree,
}

/// A host access link running below its rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DegradedLink {
    /// The rank whose access link it is.
    pub rank: u32,
    /// Its rate as a fraction of the nominal one (0 < f <= 1).
    pub fraction: f64,
}

/// The analytic fabric (see the module docs).
#[derive(Debug, Clone)]
pub struct AnalyticFabric {
    /// Nominal access-link rate, bytes per second.
    pub link_bytes_per_s: f64,
    /// Per-step latency α, seconds.
    pub alpha_s: f64,
    /// All-reduce algorithm.
    pub algorithm: AllReduce,
    /// One degraded access link, if any.
    pub degraded: Option<DegradedLink>,
    /// Bytes per rank of each communication type.
    pub bytes: BTreeMap<OpKind, f64>,
}

fn is_all_reduce(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::SeparateGradsAllReduce | OpKind::EmbeddingGradsAllReduce | OpKind::OptimizerClipMainGrad
    )
}

/// Latency steps and bandwidth factor (of S/B) of a type on n ranks.
fn shape(kind: OpKind, n: usize, algorithm: AllReduce) -> (f64, f64) {
    let nf = n as f64;
    if kind.is_p2p() {
        (1.0, 1.0)
    } else if is_all_reduce(kind) {
        match algorithm {
            AllReduce::Ring => (2.0 * (nf - 1.0), 2.0 * (nf - 1.0) / nf),
            AllReduce::Tree => (2.0 * nf.log2().ceil(), 1.0),
        }
    } else {
        // reduce-scatter, all-gather (ring)
        (nf - 1.0, (nf - 1.0) / nf)
    }
}

impl AnalyticFabric {
    /// A fabric whose per-type sizes are derived from the trace
    /// ([`calibrated_bytes`]).
    pub fn calibrated(
        job: &Job,
        link_bytes_per_s: f64,
        alpha_s: f64,
        algorithm: AllReduce,
    ) -> AnalyticFabric {
        let bytes = calibrated_bytes(job, link_bytes_per_s, alpha_s);
        AnalyticFabric { link_bytes_per_s, alpha_s, algorithm, degraded: None, bytes }
    }

    /// The same fabric with one access link degraded.
    pub fn with_degraded(&self, link: Option<DegradedLink>) -> AnalyticFabric {
        AnalyticFabric { degraded: link, ..self.clone() }
    }

    /// The rate of a rank's access link.
    fn rate(&self, rank: u32) -> f64 {
        match self.degraded {
            Some(d) if d.rank == rank => self.link_bytes_per_s * d.fraction,
            _ => self.link_bytes_per_s,
        }
    }

    /// The cost of `bytes` per rank of type `kind` on `ranks`.
    pub fn cost(&self, kind: OpKind, ranks: &[u32], bytes: f64) -> f64 {
        if ranks.len() < 2 {
            return 0.0;
        }
        let b = ranks.iter().map(|&r| self.rate(r)).fold(f64::INFINITY, f64::min);
        let (steps, factor) = shape(kind, ranks.len(), self.algorithm);
        steps * self.alpha_s + factor * bytes / b
    }
}

impl CommModel for AnalyticFabric {
    fn describe(&self) -> String {
        let mut s = format!(
            "analytic non-blocking fabric, {:.0} Gb/s access links, alpha {:.1} us, {:?} all-reduce",
            self.link_bytes_per_s * 8e-9,
            self.alpha_s * 1e6,
            self.algorithm
        );
        if let Some(d) = self.degraded {
            s.push_str(&format!(", rank {}'s link at {:.0}%", d.rank, d.fraction * 100.0));
        }
        s
    }

    fn durations(&self, c: &CommInstance<'_>) -> Vec<f64> {
        let bytes = self.bytes.get(&c.kind).copied().unwrap_or(0.0);
        vec![self.cost(c.kind, c.ranks, bytes); c.ranks.len()]
    }
}

/// Bytes per rank of each communication type, which the traces do not
/// record: the size whose ring cost (§7: α + S/B for a transfer,
/// (n-1)/n · S/B + (n-1)α for reduce-scatter and all-gather,
/// 2(n-1)/n · S/B + 2(n-1)α for all-reduce) at `link_bytes_per_s` equals
/// the type's median recorded transfer time, on its most common
/// participant count. Any model that needs sizes (the packet-level fabric
/// too) takes them from here.
pub fn calibrated_bytes(job: &Job, link_bytes_per_s: f64, alpha_s: f64) -> BTreeMap<OpKind, f64> {
    let mut times: BTreeMap<OpKind, Vec<f64>> = BTreeMap::new();
    let mut sizes: BTreeMap<OpKind, BTreeMap<usize, usize>> = BTreeMap::new();
    for g in &job.steps {
        for gr in g.groups.iter().filter(|gr| gr.members.len() > 1) {
            let t = times.entry(gr.kind).or_default();
            t.extend(gr.members.iter().map(|&m| g.recorded_cost[m as usize]));
            *sizes.entry(gr.kind).or_default().entry(gr.members.len()).or_default() += 1;
        }
    }
    let mut bytes = BTreeMap::new();
    for (kind, mut t) in times {
        t.sort_by(f64::total_cmp);
        let median = t[t.len() / 2];
        let n = sizes[&kind].iter().max_by_key(|(_, &c)| c).map_or(2, |(&n, _)| n);
        let (steps, factor) = shape(kind, n, AllReduce::Ring);
        bytes.insert(kind, ((median - steps * alpha_s) * link_bytes_per_s / factor).max(0.0));
    }
    bytes
}

/// Step times of `job` replayed without launch delays, communication from
/// `model`, worker-local ops at their recorded durations (or, with
/// `typical`, at their kind's typical duration: a straggler-free job).
pub fn replay_with(
    job: &Job,
    model: &dyn CommModel,
    typical: Option<&BTreeMap<OpKind, f64>>,
) -> Result<Vec<f64>, ReplayError> {
    let mut times = Vec::with_capacity(job.steps.len());
    for g in &job.steps {
        times.push(replay(g, &costs(job, g, model, typical)?, None)?.step_time());
    }
    Ok(times)
}

fn costs(
    job: &Job,
    g: &StepGraph,
    model: &dyn CommModel,
    typical: Option<&BTreeMap<OpKind, f64>>,
) -> Result<Vec<f64>, ReplayError> {
    let mut cost: Vec<f64> = match typical {
        Some(t) => g.ops.iter().map(|&i| t[&job.ops[i as usize].kind]).collect(),
        None => g.recorded_cost.clone(),
    };
    for gr in &g.groups {
        let ranks: Vec<u32> =
            gr.members.iter().map(|&m| job.workers[g.worker[m as usize] as usize].rank).collect();
        let recorded: Vec<f64> = gr.members.iter().map(|&m| g.recorded_cost[m as usize]).collect();
        let d = model.durations(&CommInstance {
            step: g.step,
            kind: gr.kind,
            ranks: &ranks,
            recorded: &recorded,
        });
        if d.len() != ranks.len() || d.iter().any(|t| !(t.is_finite() && *t >= 0.0)) {
            return Err(ReplayError::BadCosts {
                step: g.step,
                what: format!(
                    "{} answered {d:?} for {} with {} participants",
                    model.describe(),
                    g.name[gr.members[0] as usize],
                    ranks.len()
                ),
            });
        }
        for (&m, t) in gr.members.iter().zip(d) {
            cost[m as usize] = t;
        }
    }
    Ok(cost)
}
