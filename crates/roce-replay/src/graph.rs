//! The operation graph of a recorded job, one per step (steps are
//! independent: each starts from the step's first recorded start).
//!
//! The rules are the dependency model of the what-if analysis (Lin et al.,
//! OSDI'25, §4 and the repository's `analyzer/`), stated here as
//! implemented:
//!
//! * Within a worker, forward and backward computes run in their recorded
//!   order (one compute stream); each of the four pipeline transfer types
//!   runs in its recorded order (one stream each); the data-parallel
//!   collectives (`params-all-gather`, `grads-reduce-scatter`) run in their
//!   recorded order (one stream).
//! * A pipeline send depends on the compute it carries the output of; a
//!   receive feeds the compute that consumes it and waits for the previous
//!   compute of the same direction. Transfers are matched to computes in
//!   order; a receive that starts after the worker's last compute of its
//!   direction, or a send that ends before its first, is a no-op the
//!   profiler recorded but the schedule never launched, and so is a
//!   transfer whose peer model chunk is outside `0..vpp*pp`. The first
//!   backward send and receive wait for the compute two before the first
//!   backward compute (the 1F1B warm-up).
//! * The first forward compute of a model chunk waits for that chunk's
//!   last parameter all-gather; with a `separate-grads-all-reduce` (gradient
//!   reduce overlapped with backward), a chunk's first gradient
//!   reduce-scatter waits for its last backward compute. After the last
//!   compute: `gc`, `layernorm-grads-all-reduce`, the embedding all-reduce
//!   (first and last stage), then the remaining gradient reduce-scatters
//!   (or the separate all-reduce), `optimizer-clip-main-grad`, `optimizer`.
//! * Across workers: the k-th launched forward (backward) send of stage s
//!   pairs with the k-th launched forward (backward) receive of stage s+1
//!   (s-1) of the same data-parallel and tensor-parallel rank; a
//!   data-parallel collective joins the ops of the same type and number on
//!   every data-parallel rank of the same stage and tensor-parallel rank;
//!   the embedding all-reduce joins the first and last stage; the clip's
//!   norm all-reduce joins every worker. A joined group starts when its last
//!   participant arrives; each participant then takes its transfer time.
//!
//! From the recorded times: an operation's *launch delay* is its start
//! minus the latest end of its dependencies (minus the step's first start
//! for an operation without any): time the trace cannot explain (CPU-side
//! work, data loading). A joined operation's *transfer time* is its end
//! minus the group's latest start. Both are clamped to 0 where below -10 ms
//! (clock skew between hosts), as the published analysis does.

use std::collections::{BTreeMap, HashMap};

use crate::error::ReplayError;
use crate::meta::JobMeta;
use crate::trace::{Op, OpKind};

/// Timestamp tolerance when classifying no-op transfers (seconds).
const NOOP_EPS: f64 = 5e-5;
/// Negative launch delays and transfer times below this are clock skew and
/// clamped to 0 (seconds).
const SKEW_EPS: f64 = 1e-2;

/// One worker (a recorded rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Worker {
    /// Global rank.
    pub rank: u32,
    /// Data-parallel rank.
    pub dp_rank: u32,
    /// Pipeline stage.
    pub stage: u32,
    /// Position among the ranks recorded for this data-parallel rank and
    /// stage (the tensor-parallel rank where a trace keeps several).
    pub tp: u32,
}

/// Operations that run together: a pipeline transfer pair, a collective.
#[derive(Debug, Clone)]
pub struct Group {
    /// The type of its first member (sends and receives pair up).
    pub kind: OpKind,
    /// Local op indices of the members.
    pub members: Vec<u32>,
}

/// One step's operations and their dependencies.
#[derive(Debug, Clone)]
pub struct StepGraph {
    /// The step number.
    pub step: i64,
    /// Index into [`Job::ops`] of each local op.
    pub ops: Vec<u32>,
    /// Worker index of each local op.
    pub worker: Vec<u32>,
    /// Each local op's type, rank and number, for messages.
    pub name: Vec<OpName>,
    /// In-worker dependencies of each local op.
    pub deps: Vec<Vec<u32>>,
    /// Dependants (the reverse of `deps`).
    pub succ: Vec<Vec<u32>>,
    /// The group each joined op belongs to.
    pub group: Vec<Option<u32>>,
    /// The groups.
    pub groups: Vec<Group>,
    /// The step's first recorded start (seconds).
    pub start: f64,
    /// The recorded step time: last end minus first start.
    pub recorded_time: f64,
    /// Launch delay of each op (seconds).
    pub launch: Vec<f64>,
    /// Recorded cost of each op: the duration of a worker-local op, the
    /// transfer time of a joined one (seconds).
    pub recorded_cost: Vec<f64>,
}

/// An operation as messages name it: type, rank, number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpName {
    /// Its type.
    pub kind: OpKind,
    /// The worker's global rank.
    pub rank: u32,
    /// Its number among its type on its worker in its step.
    pub seq: i64,
}

impl std::fmt::Display for OpName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} #{} of rank {}", self.kind.name(), self.seq, self.rank)
    }
}

/// A recorded job: its operations, workers and per-step graphs.
#[derive(Debug, Clone)]
pub struct Job {
    /// Parallelism.
    pub meta: JobMeta,
    /// Every recorded operation.
    pub ops: Vec<Op>,
    /// The workers, indexed by [`StepGraph::worker`].
    pub workers: Vec<Worker>,
    /// One graph per step, by step number.
    pub steps: Vec<StepGraph>,
}

impl Job {
    /// Builds the graphs of every step.
    pub fn build(ops: Vec<Op>, meta: JobMeta) -> Result<Job, ReplayError> {
        if ops.is_empty() {
            return Err(ReplayError::Empty);
        }
        meta.check(&ops)?;
        let mut ranks: Vec<(u32, u32, u32)> = ops.iter().map(|o| (o.dp_rank, o.stage, o.rank)).collect();
        ranks.sort_unstable();
        ranks.dedup();
        let mut workers: Vec<Worker> = Vec::new();
        for (i, &(dp_rank, stage, rank)) in ranks.iter().enumerate() {
            if workers.iter().any(|w| w.rank == rank) {
                return Err(ReplayError::MetaMismatch(format!(
                    "rank {rank} recorded under two dp_rank/stage pairs"
                )));
            }
            let tp = if i > 0 && ranks[i - 1].0 == dp_rank && ranks[i - 1].1 == stage {
                workers[i - 1].tp + 1
            } else {
                0
            };
            workers.push(Worker { rank, dp_rank, stage, tp });
        }
        let worker_of: HashMap<u32, u32> =
            workers.iter().enumerate().map(|(i, w)| (w.rank, i as u32)).collect();
        let overlap = ops.iter().any(|o| o.kind == OpKind::SeparateGradsAllReduce);
        let mut by_step: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
        for (i, o) in ops.iter().enumerate() {
            by_step.entry(o.step).or_default().push(i as u32);
        }
        let mut steps = Vec::with_capacity(by_step.len());
        for (step, idx) in by_step {
            let ctx = Ctx { ops: &ops, workers: &workers, worker_of: &worker_of, meta, overlap };
            steps.push(ctx.step_graph(step, idx)?);
        }
        Ok(Job { meta, ops, workers, steps })
    }

    /// Step numbers in order.
    pub fn step_ids(&self) -> Vec<i64> {
        self.steps.iter().map(|s| s.step).collect()
    }
}

struct Ctx<'a> {
    ops: &'a [Op],
    workers: &'a [Worker],
    worker_of: &'a HashMap<u32, u32>,
    meta: JobMeta,
    overlap: bool,
}

/// One worker's ops of a step, by kind, each list in recorded order.
struct WorkerOps {
    by_kind: HashMap<OpKind, Vec<u32>>,
    /// Forward and backward computes in recorded order.
    compute: Vec<u32>,
}

impl Ctx<'_> {
    fn op(&self, g: &StepGraph, local: u32) -> &Op {
        &self.ops[g.ops[local as usize] as usize]
    }

    fn step_graph(&self, step: i64, idx: Vec<u32>) -> Result<StepGraph, ReplayError> {
        let n = idx.len();
        let start = idx.iter().map(|&i| self.ops[i as usize].start).fold(f64::INFINITY, f64::min);
        let end = idx.iter().map(|&i| self.ops[i as usize].end()).fold(f64::NEG_INFINITY, f64::max);
        let worker: Vec<u32> = idx.iter().map(|&i| self.worker_of[&self.ops[i as usize].rank]).collect();
        let name = idx
            .iter()
            .map(|&i| {
                let o = &self.ops[i as usize];
                OpName { kind: o.kind, rank: o.rank, seq: o.seq }
            })
            .collect();
        let mut g = StepGraph {
            step,
            ops: idx,
            worker,
            name,
            deps: vec![Vec::new(); n],
            succ: vec![Vec::new(); n],
            group: vec![None; n],
            groups: Vec::new(),
            start,
            recorded_time: end - start,
            launch: vec![0.0; n],
            recorded_cost: vec![0.0; n],
        };
        // per worker, per kind, in recorded order
        let mut per_worker: Vec<WorkerOps> = (0..self.workers.len())
            .map(|_| WorkerOps { by_kind: HashMap::new(), compute: Vec::new() })
            .collect();
        for local in 0..n as u32 {
            let w = g.worker[local as usize] as usize;
            per_worker[w].by_kind.entry(self.op(&g, local).kind).or_default().push(local);
        }
        let order = |g: &StepGraph, v: &mut Vec<u32>| {
            v.sort_by(|&a, &b| {
                let (x, y) = (self.op(g, a), self.op(g, b));
                x.start.total_cmp(&y.start).then(x.seq.cmp(&y.seq)).then(x.kind.cmp(&y.kind))
            })
        };
        for wo in &mut per_worker {
            for list in wo.by_kind.values_mut() {
                order(&g, list);
            }
            let mut c: Vec<u32> = [OpKind::ForwardCompute, OpKind::BackwardCompute]
                .iter()
                .flat_map(|k| wo.by_kind.get(k).cloned().unwrap_or_default())
                .collect();
            order(&g, &mut c);
            wo.compute = c;
        }
        // launched (non-no-op) transfers per worker and kind
        let mut launched: Vec<HashMap<OpKind, Vec<u32>>> = vec![HashMap::new(); self.workers.len()];
        for (w, wo) in per_worker.iter().enumerate() {
            self.worker_deps(&mut g, w, wo, &mut launched[w])?;
        }
        self.join(&mut g, &per_worker, &launched)?;
        for (v, deps) in g.deps.iter().enumerate() {
            for &u in deps {
                g.succ[u as usize].push(v as u32);
            }
        }
        self.recorded_costs(&mut g);
        Ok(g)
    }

    fn chain(g: &mut StepGraph, ops: &[u32]) {
        for w in ops.windows(2) {
            g.deps[w[1] as usize].push(w[0]);
        }
    }

    fn worker_deps(
        &self,
        g: &mut StepGraph,
        w: usize,
        wo: &WorkerOps,
        launched: &mut HashMap<OpKind, Vec<u32>>,
    ) -> Result<(), ReplayError> {
        let rank = self.workers[w].rank;
        // the op indices leave `g` while its dependencies are written
        let idx = std::mem::take(&mut g.ops);
        let r = self.worker_deps_of(g, &idx, rank, wo, launched);
        g.ops = idx;
        r
    }

    fn worker_deps_of(
        &self,
        g: &mut StepGraph,
        idx: &[u32],
        rank: u32,
        wo: &WorkerOps,
        launched: &mut HashMap<OpKind, Vec<u32>>,
    ) -> Result<(), ReplayError> {
        let op = |l: u32| &self.ops[idx[l as usize] as usize];
        let list = |k: OpKind| wo.by_kind.get(&k).map(Vec::as_slice).unwrap_or(&[]);
        let first = |k: OpKind| list(k).iter().copied().min_by_key(|&l| op(l).seq);
        let last = |k: OpKind| list(k).iter().copied().max_by_key(|&l| op(l).seq);
        Self::chain(g, &wo.compute);
        for k in [OpKind::ForwardSend, OpKind::ForwardRecv, OpKind::BackwardSend, OpKind::BackwardRecv] {
            Self::chain(g, list(k));
        }
        // match transfers with computes
        let chunks = i64::from(self.meta.vpp_size) * i64::from(self.meta.pp_size);
        for (compute_kind, send, recv, delta) in [
            (OpKind::ForwardCompute, OpKind::ForwardSend, OpKind::ForwardRecv, 1i64),
            (OpKind::BackwardCompute, OpKind::BackwardSend, OpKind::BackwardRecv, -1i64),
        ] {
            let comps = list(compute_kind).to_vec();
            let last_start = comps.iter().map(|&c| op(c).start).fold(f64::NEG_INFINITY, f64::max);
            let first_end = comps.iter().map(|&c| op(c).end()).fold(f64::INFINITY, f64::min);
            for (kind, is_recv) in [(send, false), (recv, true)] {
                let transfers = list(kind).to_vec();
                let real = |l: u32| {
                    let o = op(l);
                    if is_recv {
                        o.start <= last_start + NOOP_EPS
                    } else {
                        o.end() >= first_end - NOOP_EPS
                    }
                };
                let count = transfers.iter().filter(|&&l| real(l)).count();
                let mut next = 0;
                if count != comps.len() {
                    if count != 0 && count + 1 != comps.len() || count > comps.len() {
                        return Err(ReplayError::Pipeline {
                            step: g.step,
                            rank,
                            what: format!(
                                "{count} {} for {} {} (expected as many, one fewer or none)",
                                kind.name(),
                                comps.len(),
                                compute_kind.name()
                            ),
                        });
                    }
                    if is_recv && count + 1 == comps.len() {
                        next = 1; // the first receive was never recorded
                    }
                }
                for &t in &transfers {
                    if !real(t) {
                        continue;
                    }
                    let c = comps[next];
                    // the peer's model chunk: receives come from (sends go to) the neighbour
                    let peer_gmc = op(c).gmc + if is_recv { -delta } else { delta };
                    if (0..chunks).contains(&peer_gmc) {
                        launched.entry(kind).or_default().push(t);
                    }
                    if is_recv {
                        g.deps[c as usize].push(t);
                        if next > 0 {
                            g.deps[t as usize].push(comps[next - 1]);
                        }
                    } else {
                        g.deps[t as usize].push(c);
                    }
                    next += 1;
                }
            }
        }
        // 1F1B warm-up: the first backward transfers wait for the compute two before the first backward
        if let Some(fb) = wo.compute.iter().position(|&c| op(c).kind == OpKind::BackwardCompute) {
            if fb >= 2 && op(wo.compute[fb - 2]).kind == OpKind::ForwardCompute {
                for k in [OpKind::BackwardRecv, OpKind::BackwardSend] {
                    if let Some(&t) = list(k).first() {
                        g.deps[t as usize].push(wo.compute[fb - 2]);
                    }
                }
            }
        }
        let use_dp = self.meta.dp_size > 1;
        let rs_by_seq = {
            let mut v = list(OpKind::GradsReduceScatter).to_vec();
            v.sort_by_key(|&l| op(l).seq);
            v
        };
        if use_dp {
            let mut dp_stream: Vec<u32> = list(OpKind::ParamsAllGather)
                .iter()
                .chain(list(OpKind::GradsReduceScatter))
                .copied()
                .collect();
            dp_stream.sort_by(|&a, &b| {
                let (x, y) = (op(a), op(b));
                x.start.total_cmp(&y.start).then(x.seq.cmp(&y.seq)).then(x.kind.cmp(&y.kind))
            });
            Self::chain(g, &dp_stream);
            // a chunk's first forward waits for its last parameter all-gather
            let mut ags = list(OpKind::ParamsAllGather).to_vec();
            ags.sort_by_key(|&l| std::cmp::Reverse(op(l).seq));
            let mut done = Vec::new();
            for ag in ags {
                let mc = op(ag).mc;
                if done.contains(&mc) {
                    continue;
                }
                done.push(mc);
                let first_fwd = list(OpKind::ForwardCompute)
                    .iter()
                    .copied()
                    .filter(|&c| op(c).mc == mc)
                    .min_by(|&a, &b| op(a).start.total_cmp(&op(b).start));
                if let Some(f) = first_fwd {
                    g.deps[f as usize].push(ag);
                }
            }
            if self.overlap {
                let mut done = Vec::new();
                for &rs in &rs_by_seq {
                    let mc = op(rs).mc;
                    if done.contains(&mc) {
                        continue;
                    }
                    done.push(mc);
                    let last_bwd = list(OpKind::BackwardCompute)
                        .iter()
                        .copied()
                        .filter(|&c| op(c).mc == mc)
                        .max_by(|&a, &b| op(a).end().total_cmp(&op(b).end()));
                    if let Some(b) = last_bwd {
                        g.deps[rs as usize].push(b);
                    }
                }
            }
        }
        // after the last compute
        let last_compute = wo.compute.iter().copied().max_by(|&a, &b| op(a).end().total_cmp(&op(b).end()));
        let gc = first(OpKind::Gc);
        if let (Some(gc), Some(lc)) = (gc, last_compute) {
            g.deps[gc as usize].push(lc);
        }
        let mut tail: Vec<u32> = Vec::new();
        let mut heads: Vec<u32> = gc.into_iter().collect();
        tail.extend(first(OpKind::LayernormGradsAllReduce));
        tail.extend(first(OpKind::EmbeddingGradsAllReduce));
        if use_dp && self.overlap {
            heads.extend(last(OpKind::GradsReduceScatter));
            tail.extend(first(OpKind::SeparateGradsAllReduce));
        } else if use_dp {
            tail.extend(&rs_by_seq);
        }
        tail.extend(first(OpKind::OptimizerClipMainGrad));
        tail.extend(first(OpKind::Optimizer));
        if let Some(&h) = tail.first() {
            g.deps[h as usize].extend(heads);
        }
        Self::chain(g, &tail);
        Ok(())
    }

    fn add_group(g: &mut StepGraph, kind: OpKind, members: Vec<u32>) {
        let id = g.groups.len() as u32;
        for &m in &members {
            g.group[m as usize] = Some(id);
        }
        g.groups.push(Group { kind, members });
    }

    fn join(
        &self,
        g: &mut StepGraph,
        per_worker: &[WorkerOps],
        launched: &[HashMap<OpKind, Vec<u32>>],
    ) -> Result<(), ReplayError> {
        let pp = self.meta.pp_size;
        let find = |dp: u32, stage: u32, tp: u32| {
            self.workers.iter().position(|w| w.dp_rank == dp && w.stage == stage && w.tp == tp)
        };
        let none: Vec<u32> = Vec::new();
        // pipeline pairs
        for (w, worker) in self.workers.iter().enumerate() {
            for (send, recv, delta) in [
                (OpKind::ForwardSend, OpKind::ForwardRecv, 1i64),
                (OpKind::BackwardSend, OpKind::BackwardRecv, -1i64),
            ] {
                let peer_stage = ((i64::from(worker.stage) + delta).rem_euclid(i64::from(pp))) as u32;
                let sends = launched[w].get(&send).unwrap_or(&none);
                let peer = find(worker.dp_rank, peer_stage, worker.tp);
                let recvs = peer.and_then(|p| launched[p].get(&recv)).unwrap_or(&none);
                for (&s, &r) in sends.iter().zip(recvs) {
                    Self::add_group(g, send, vec![s, r]);
                }
                if sends.len() > recvs.len() {
                    return Err(ReplayError::UnmatchedSend {
                        step: g.step,
                        rank: worker.rank,
                        stage: worker.stage,
                        peer_stage,
                        optype: send.name(),
                        index: recvs.len(),
                    });
                }
                if recvs.len() > sends.len() {
                    let p = &self.workers[peer.unwrap_or(w)];
                    return Err(ReplayError::UnmatchedRecv {
                        step: g.step,
                        rank: p.rank,
                        stage: p.stage,
                        peer_stage: worker.stage,
                        optype: recv.name(),
                        index: sends.len(),
                    });
                }
            }
            // receives whose sender stage holds no worker at all
            for (recv, delta) in [(OpKind::ForwardRecv, -1i64), (OpKind::BackwardRecv, 1i64)] {
                let peer_stage = ((i64::from(worker.stage) + delta).rem_euclid(i64::from(pp))) as u32;
                let recvs = launched[w].get(&recv).unwrap_or(&none);
                if !recvs.is_empty() && find(worker.dp_rank, peer_stage, worker.tp).is_none() {
                    return Err(ReplayError::UnmatchedRecv {
                        step: g.step,
                        rank: worker.rank,
                        stage: worker.stage,
                        peer_stage,
                        optype: recv.name(),
                        index: 0,
                    });
                }
            }
        }
        // transfers that were never launched run alone
        for wo in per_worker {
            for k in [OpKind::ForwardSend, OpKind::ForwardRecv, OpKind::BackwardSend, OpKind::BackwardRecv] {
                for &t in wo.by_kind.get(&k).unwrap_or(&none) {
                    if g.group[t as usize].is_none() {
                        Self::add_group(g, k, vec![t]);
                    }
                }
            }
        }
        // collectives
        let mut joined: BTreeMap<(OpKind, i64, u32, u32), Vec<u32>> = BTreeMap::new();
        for local in 0..g.ops.len() as u32 {
            let o = self.op(g, local);
            let w = self.workers[g.worker[local as usize] as usize];
            let key = match o.kind {
                k if k.is_dp_collective() && self.meta.dp_size > 1 => (k, o.seq, w.stage, w.tp),
                OpKind::EmbeddingGradsAllReduce => (o.kind, o.seq, w.dp_rank, w.tp),
                OpKind::OptimizerClipMainGrad => (o.kind, o.seq, 0, 0),
                _ => continue,
            };
            joined.entry(key).or_default().push(local);
        }
        for ((kind, seq, _, _), members) in joined {
            let expected = match kind {
                OpKind::EmbeddingGradsAllReduce => {
                    if pp > 1 {
                        2
                    } else {
                        1
                    }
                }
                OpKind::OptimizerClipMainGrad => self.workers.len(),
                _ => self.meta.dp_size as usize,
            };
            if members.len() != expected {
                return Err(ReplayError::MissingParticipant {
                    step: g.step,
                    optype: kind.name(),
                    seq,
                    found: members.len(),
                    expected,
                });
            }
            Self::add_group(g, kind, members);
        }
        Ok(())
    }

    fn recorded_costs(&self, g: &mut StepGraph) {
        let n = g.ops.len();
        for v in 0..n {
            let o = self.op(g, v as u32);
            let ready = if g.deps[v].is_empty() {
                g.start
            } else {
                g.deps[v].iter().map(|&u| self.op(g, u).end()).fold(f64::NEG_INFINITY, f64::max)
            };
            let d = o.start - ready;
            g.launch[v] = if d <= -SKEW_EPS { 0.0 } else { d };
            g.recorded_cost[v] = match g.group[v] {
                None => o.duration,
                Some(id) => {
                    let latest = g.groups[id as usize]
                        .members
                        .iter()
                        .map(|&m| self.op(g, m).start)
                        .fold(f64::NEG_INFINITY, f64::max);
                    let t = o.end() - latest;
                    if t <= -SKEW_EPS {
                        0.0
                    } else {
                        t
                    }
                }
            };
        }
    }
}
