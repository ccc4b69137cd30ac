//! Replaying one step's operation graph: a topological pass in which an
//! operation starts when its in-worker dependencies have ended (plus its
//! launch delay, where kept), a worker-local operation then takes its cost,
//! and a joined group (pipeline pair, collective) starts when its last
//! participant has arrived, each participant then taking its own cost.

use std::collections::VecDeque;

use crate::error::ReplayError;
use crate::graph::StepGraph;

/// One replayed step: start and end of every op, relative to the step's
/// start.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// Start of each local op (seconds from the step's start).
    pub start: Vec<f64>,
    /// End of each local op.
    pub end: Vec<f64>,
}

impl Timeline {
    /// The step time: last end minus first start.
    pub fn step_time(&self) -> f64 {
        let first = self.start.iter().copied().fold(f64::INFINITY, f64::min);
        let last = self.end.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        last - first
    }
}

/// Replays `g` with `cost[i]` for each op (the duration of a local op, the
/// transfer time of a joined one) and, if given, the launch delays.
pub fn replay(g: &StepGraph, cost: &[f64], launch: Option<&[f64]>) -> Result<Timeline, ReplayError> {
    let n = g.ops.len();
    let bad = |what: String| Err(ReplayError::BadCosts { step: g.step, what });
    if cost.len() != n || launch.is_some_and(|l| l.len() != n) {
        return bad(format!(
            "{n} operations, {} costs, {:?} launch delays",
            cost.len(),
            launch.map(<[f64]>::len)
        ));
    }
    if let Some(i) = cost.iter().position(|c| !c.is_finite()) {
        return bad(format!("{}: cost {}", g.name[i], cost[i]));
    }
    let mut waiting: Vec<usize> = g.deps.iter().map(Vec::len).collect();
    let mut arrived = vec![0usize; g.groups.len()];
    let mut group_start = vec![f64::NEG_INFINITY; g.groups.len()];
    let mut start = vec![f64::NAN; n];
    let mut end = vec![f64::NAN; n];
    let mut ready: VecDeque<u32> = (0..n as u32).filter(|&v| waiting[v as usize] == 0).collect();
    let mut finished = 0usize;
    let mut done: Vec<u32> = Vec::new();
    while let Some(v) = ready.pop_front() {
        let vi = v as usize;
        let after = g.deps[vi].iter().map(|&u| end[u as usize]).fold(0.0, f64::max);
        start[vi] = after + launch.map_or(0.0, |l| l[vi]);
        done.clear();
        match g.group[vi] {
            None => {
                end[vi] = start[vi] + cost[vi];
                done.push(v);
            }
            Some(id) => {
                let id = id as usize;
                arrived[id] += 1;
                group_start[id] = group_start[id].max(start[vi]);
                if arrived[id] == g.groups[id].members.len() {
                    for &m in &g.groups[id].members {
                        end[m as usize] = group_start[id] + cost[m as usize];
                        done.push(m);
                    }
                }
            }
        }
        for &u in &done {
            finished += 1;
            for &s in &g.succ[u as usize] {
                waiting[s as usize] -= 1;
                if waiting[s as usize] == 0 {
                    ready.push_back(s);
                }
            }
        }
    }
    if finished != n {
        let stuck = (0..n).filter(|&v| end[v].is_nan()).collect::<Vec<_>>();
        return Err(ReplayError::Cycle {
            step: g.step,
            stuck: stuck.len(),
            example: stuck.first().map_or_else(String::new, |&v| g.name[v].to_string()),
        });
    }
    Ok(Timeline { start, end })
}
