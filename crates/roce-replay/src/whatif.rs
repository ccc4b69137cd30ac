//! The what-if analysis: step times as recorded (base), replayed without
//! launch delays (no-delay), and replayed without launch delays with every
//! operation taking the typical duration of its kind (no-blocking: no
//! stragglers). The straggler slowdown is
//! `S = mean(no-delay) / mean(no-blocking)` (Lin et al., OSDI'25, Eq. 1).
//!
//! The typical duration of a kind is, as in the published analysis, taken
//! over the whole trace (every step, rank and stage): the mean for compute
//! kinds, the median for communication kinds (transfer times of joined
//! ops). `noblk_step` is the variant with each step's own typical
//! durations (what a straggler-free run of that very step would take);
//! it removes stragglers within a step but not slow steps. The decompositions replay the straggler-free job with only one
//! group's operations (one data-parallel rank, one stage, one op type) at
//! their recorded durations: `S_x = mean(that replay) / mean(no-blocking)`.

use std::collections::BTreeMap;

use crate::error::ReplayError;
use crate::graph::{Job, StepGraph};
use crate::replay::replay;
use crate::trace::OpKind;

/// The analysis of one job.
#[derive(Debug, Clone)]
pub struct WhatIf {
    /// Step numbers.
    pub steps: Vec<i64>,
    /// Recorded step times (seconds).
    pub base: Vec<f64>,
    /// Replayed with recorded costs and launch delays: should equal `base`.
    pub replayed: Vec<f64>,
    /// Replayed without launch delays.
    pub nodelay: Vec<f64>,
    /// Replayed without launch delays, every op at its kind's typical cost.
    pub noblk: Vec<f64>,
    /// The same with each step's own typical costs.
    pub noblk_step: Vec<f64>,
    /// Typical cost of each kind (seconds).
    pub typical: BTreeMap<OpKind, f64>,
}

/// Mean of a slice (0 for an empty one).
pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

impl WhatIf {
    /// Runs the base, no-delay and no-blocking replays.
    pub fn analyze(job: &Job) -> Result<WhatIf, ReplayError> {
        let typical = typical_costs(job);
        let mut w = WhatIf {
            steps: job.step_ids(),
            base: job.steps.iter().map(|s| s.recorded_time).collect(),
            replayed: Vec::new(),
            nodelay: Vec::new(),
            noblk: Vec::new(),
            noblk_step: Vec::new(),
            typical,
        };
        for g in &job.steps {
            w.replayed.push(replay(g, &g.recorded_cost, Some(&g.launch))?.step_time());
            w.nodelay.push(replay(g, &g.recorded_cost, None)?.step_time());
            w.noblk.push(replay(g, &w.typical_cost(job, g), None)?.step_time());
            let own = typical_of(job, std::slice::from_ref(g));
            let cost: Vec<f64> = g.ops.iter().map(|&i| own[&job.ops[i as usize].kind]).collect();
            w.noblk_step.push(replay(g, &cost, None)?.step_time());
        }
        Ok(w)
    }

    /// S with each step's own typical durations:
    /// mean(no-delay) / mean(no-blocking per step).
    pub fn slowdown_within_steps(&self) -> f64 {
        mean(&self.nodelay) / mean(&self.noblk_step)
    }

    /// The straggler slowdown S.
    pub fn slowdown(&self) -> f64 {
        mean(&self.nodelay) / mean(&self.noblk)
    }

    /// What launch delays add: mean(base) / mean(no-delay).
    pub fn launch_slowdown(&self) -> f64 {
        mean(&self.base) / mean(&self.nodelay)
    }

    /// Each op of `g` at its kind's typical cost.
    pub fn typical_cost(&self, job: &Job, g: &StepGraph) -> Vec<f64> {
        g.ops.iter().map(|&i| self.typical[&job.ops[i as usize].kind]).collect()
    }

    /// S with only the ops `keep` selects at their recorded cost.
    pub fn slowdown_keeping(&self, job: &Job, keep: impl Fn(usize) -> bool) -> Result<f64, ReplayError> {
        let mut times = Vec::with_capacity(job.steps.len());
        for g in &job.steps {
            let mut cost = self.typical_cost(job, g);
            for (l, &i) in g.ops.iter().enumerate() {
                if keep(i as usize) {
                    cost[l] = g.recorded_cost[l];
                }
            }
            times.push(replay(g, &cost, None)?.step_time());
        }
        Ok(mean(&times) / mean(&self.noblk))
    }

    /// The decompositions by op type (pipeline transfers per direction), by
    /// data-parallel rank and by stage, each sorted by decreasing S.
    pub fn decompose(&self, job: &Job) -> Result<Decomposition, ReplayError> {
        let mut labels: Vec<&'static str> = job.ops.iter().map(|o| o.kind.decomposition_label()).collect();
        labels.sort_unstable();
        labels.dedup();
        let mut by_optype = Vec::new();
        for l in labels {
            by_optype.push((
                l.to_string(),
                self.slowdown_keeping(job, |i| job.ops[i].kind.decomposition_label() == l)?,
            ));
        }
        let mut by_dp_rank = Vec::new();
        for d in 0..job.meta.dp_size {
            by_dp_rank.push((d, self.slowdown_keeping(job, |i| job.ops[i].dp_rank == d)?));
        }
        let mut by_stage = Vec::new();
        for s in 0..job.meta.pp_size {
            by_stage.push((s, self.slowdown_keeping(job, |i| job.ops[i].stage == s)?));
        }
        by_optype.sort_by(|a, b| b.1.total_cmp(&a.1));
        by_dp_rank.sort_by(|a, b| b.1.total_cmp(&a.1));
        by_stage.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(Decomposition { by_optype, by_dp_rank, by_stage })
    }
}

/// S recomputed with only one group's stragglers kept.
#[derive(Debug, Clone)]
pub struct Decomposition {
    /// By op type label.
    pub by_optype: Vec<(String, f64)>,
    /// By data-parallel rank.
    pub by_dp_rank: Vec<(u32, f64)>,
    /// By stage.
    pub by_stage: Vec<(u32, f64)>,
}

/// The typical cost of each kind over the whole trace: the mean for
/// compute kinds, the median for communication kinds.
pub fn typical_costs(job: &Job) -> BTreeMap<OpKind, f64> {
    typical_of(job, &job.steps)
}

fn typical_of(job: &Job, steps: &[StepGraph]) -> BTreeMap<OpKind, f64> {
    let mut per_kind: BTreeMap<OpKind, Vec<f64>> = BTreeMap::new();
    for g in steps {
        for (l, &i) in g.ops.iter().enumerate() {
            per_kind.entry(job.ops[i as usize].kind).or_default().push(g.recorded_cost[l]);
        }
    }
    per_kind.into_iter().map(|(k, v)| (k, if k.is_communication() { median(v) } else { mean(&v) })).collect()
}
