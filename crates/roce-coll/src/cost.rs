//! The cost model that picks an algorithm, NCCL tuner style: for each
//! candidate, `time = steps * alpha + wire_bytes / link_bandwidth +
//! reduced_bytes / reduce_throughput`, and the cheapest wins (NCCL
//! `src/graph/tuning.cc`: `time = lat * nSteps + bytes / bw`; the per
//! algorithm step counts and bytes are those of Thakur, Rabenseifner and
//! Gropp, IJHPCA 2005, and of NCCL's ring and tree).
//!
//! Per algorithm, with `n` ranks, `S` bytes per rank, `p` the largest power
//! of two <= `n` and `e = 1` if `n` is not a power of two (else 0):
//!
//! | op, algorithm | steps | bytes each rank sends (critical path) | bytes reduced |
//! |---|---|---|---|
//! | all-reduce ring | 2(n-1) | 2(n-1)/n S | (n-1)/n S |
//! | all-reduce Rabenseifner | 2 lg p + 2e | 2(p-1)/p S + 2e S | (p-1)/p S + e S |
//! | all-reduce recursive doubling | lg p + 2e | lg p S + 2e S | lg p S + e S |
//! | all-reduce double binary tree | 2 depth | 2S (interior in one tree, leaf in the other), pipelined | S |
//! | reduce-scatter / all-gather ring | n-1 | (n-1)/n S_total | (n-1)/n S_total (RS) |
//! | broadcast / reduce ring (chain) | n-1 + chunks | S, pipelined | S (reduce) |
//! | broadcast / reduce tree | depth + chunks | S, pipelined | S (reduce) |
//! | all-to-all pairwise | n-1 | (n-1)/n S_total | 0 |
//! | barrier dissemination | ceil(lg n) | 0 | 0 |
//!
//! Pipelined algorithms (chain, tree) pay one extra step per chunk in
//! flight on the path: their latency term is `(depth + chunks - 1)` steps
//! of one chunk each rather than `depth` whole-message steps; the model
//! uses `depth * alpha + S/B + (depth - 1) * chunk/B`.

use std::fmt::Write;

use crate::types::{Algo, OpKind};

/// Measurable parameters of the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Per-step latency (one message's one-way latency plus software
    /// overhead), ns.
    pub alpha_ns: f64,
    /// Per-rank link bandwidth, bytes per second (what one rank can send
    /// and receive at the same time).
    pub link_bytes_per_s: f64,
    /// Reduction throughput of one core, bytes per second.
    pub reduce_bytes_per_s: f64,
    /// Payload bytes per message (slot size minus header): the pipelining
    /// grain of chains and trees.
    pub chunk_bytes: f64,
}

impl Default for Params {
    /// Loopback-scale defaults (2 GB/s per rank, 20 us per step, 8 GB/s
    /// reduction, 256 KiB slots); measure and set them for a real fabric.
    fn default() -> Params {
        Params {
            alpha_ns: 20_000.0,
            link_bytes_per_s: 2.0e9,
            reduce_bytes_per_s: 8.0e9,
            chunk_bytes: 262_080.0,
        }
    }
}

fn lg(x: usize) -> f64 {
    (usize::BITS - 1 - x.max(1).leading_zeros()) as f64
}

/// Depth (edges root to deepest leaf) of NCCL's binary tree over `n`.
fn tree_depth(n: usize) -> f64 {
    (lg(n.max(1)) + if n.is_power_of_two() { 0.0 } else { 1.0 }).max(1.0)
}

/// The most any rank sends in a double-tree all-reduce, in units of the
/// vector size: per tree, half the vector to the parent and to each child.
fn tree_send_factor(n: usize) -> f64 {
    (0..n)
        .map(|r| {
            crate::tree::dtree(n, r)
                .iter()
                .map(|t| (t.parent.is_some() as usize + t.children.iter().flatten().count()) as f64 * 0.5)
                .sum::<f64>()
        })
        .fold(0.0, f64::max)
}

/// Predicted time in ns of `op` on `bytes` per rank (the `count *
/// size(type)` of the call) over `n` ranks with `algo`, or `None` if the
/// algorithm does not run the operation.
pub fn predict(op: OpKind, algo: Algo, bytes: usize, n: usize, p: &Params) -> Option<f64> {
    if !algo.applies_to(op) || algo == Algo::Auto {
        return None;
    }
    if n <= 1 {
        return Some(0.0);
    }
    let nf = n as f64;
    let s = bytes as f64;
    let bw = p.link_bytes_per_s * 1e-9; // bytes per ns
    let red = p.reduce_bytes_per_s * 1e-9;
    let a = p.alpha_ns;
    let pow2 = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let pf = pow2 as f64;
    let e = if pow2 == n { 0.0 } else { 1.0 };
    let chunk = p.chunk_bytes.max(1.0);
    let t = match (op, algo) {
        (OpKind::AllReduce, Algo::Ring) => {
            let blk = s / nf;
            2.0 * (nf - 1.0) * (a + blk / bw) + (nf - 1.0) * blk / red
        }
        (OpKind::AllReduce, Algo::Rabenseifner) => {
            let steps = 2.0 * lg(pow2) + 2.0 * e;
            steps * a + (2.0 * (pf - 1.0) / pf * s + 2.0 * e * s) / bw + ((pf - 1.0) / pf * s + e * s) / red
        }
        (OpKind::AllReduce, Algo::RecursiveDoubling) => {
            let steps = lg(pow2) + 2.0 * e;
            steps * a + (lg(pow2) * s + 2.0 * e * s) / bw + (lg(pow2) * s + e * s) / red
        }
        (OpKind::AllReduce, Algo::Tree) => {
            // each tree moves S/2 up and S/2 down; a rank interior in one
            // tree and a leaf in the other sends (and receives) 1.5 S + 0.5 S
            // = 2 S in total (NCCL: "each GPU sends and receives ~2S"),
            // pipelined in chunks; the busiest rank's share, exactly.
            let d = tree_depth(n);
            let c = chunk.min(s / 2.0);
            2.0 * d * a + tree_send_factor(n) * s / bw + 2.0 * (d - 1.0) * c / bw + s / red
        }
        (OpKind::ReduceScatter, Algo::Ring) | (OpKind::AllGather, Algo::Ring) => {
            let r = if op == OpKind::ReduceScatter { (nf - 1.0) * s / red } else { 0.0 };
            (nf - 1.0) * (a + s / bw) + r
        }
        (OpKind::Broadcast | OpKind::Reduce, Algo::Ring) => {
            let c = chunk.min(s);
            let r = if op == OpKind::Reduce { s / red } else { 0.0 };
            (nf - 1.0) * a + s / bw + (nf - 2.0).max(0.0) * c / bw + r
        }
        (OpKind::Broadcast | OpKind::Reduce, Algo::Tree) => {
            let d = tree_depth(n) + 1.0;
            let c = chunk.min(s / 2.0);
            let r = if op == OpKind::Reduce { s / red } else { 0.0 };
            d * a + s / bw + (d - 1.0) * c / bw + r
        }
        (OpKind::AllToAll, Algo::Pairwise) => (nf - 1.0) * (a + s / bw),
        (OpKind::Barrier, Algo::Dissemination) => lg(n.next_power_of_two()) * a,
        _ => return None,
    };
    Some(t)
}

/// The algorithm with the lowest predicted time for `op` on `bytes` per
/// rank over `n` ranks (ties: the first in [`Algo::CONCRETE`] order).
pub fn choose(op: OpKind, bytes: usize, n: usize, p: &Params) -> Algo {
    let mut best = (f64::INFINITY, Algo::Ring);
    for a in Algo::candidates(op) {
        if let Some(t) = predict(op, a, bytes, n, p) {
            if t < best.0 {
                best = (t, a);
            }
        }
    }
    best.1
}

/// A few lines listing each candidate's predicted time and the pick, for
/// `--explain`.
pub fn explain(op: OpKind, bytes: usize, n: usize, p: &Params) -> String {
    let pick = choose(op, bytes, n, p);
    let mut s = format!(
        "# cost model: {op}, {bytes} B per rank, {n} ranks; alpha {:.1} us, link {:.2} GB/s, reduce {:.2} GB/s\n",
        p.alpha_ns / 1e3,
        p.link_bytes_per_s / 1e9,
        p.reduce_bytes_per_s / 1e9
    );
    for a in Algo::candidates(op) {
        if let Some(t) = predict(op, a, bytes, n, p) {
            let _ = writeln!(
                s,
                "#   {:<20} {:>12.1} us{}",
                a.name(),
                t / 1e3,
                if a == pick { "  <- pick" } else { "" }
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> Params {
        Params { alpha_ns: 5_000.0, link_bytes_per_s: 12.5e9, reduce_bytes_per_s: 1e30, chunk_bytes: 1e30 }
    }

    /// The notes' §7 example: n = 8, S = 1 GiB, 100 Gb/s, alpha 5 us: ring
    /// 150.39 ms, Rabenseifner 150.35 ms, recursive doubling 257.7 ms.
    #[test]
    fn matches_the_analytic_model() {
        let s = 1usize << 30;
        let ring = predict(OpKind::AllReduce, Algo::Ring, s, 8, &p()).unwrap() / 1e6;
        let rab = predict(OpKind::AllReduce, Algo::Rabenseifner, s, 8, &p()).unwrap() / 1e6;
        let rd = predict(OpKind::AllReduce, Algo::RecursiveDoubling, s, 8, &p()).unwrap() / 1e6;
        assert!((ring - 150.39).abs() < 0.01, "{ring}");
        assert!((rab - 150.35).abs() < 0.01, "{rab}");
        assert!((rd - 257.7).abs() < 0.1, "{rd}");
    }

    #[test]
    fn small_messages_pick_log_steps_large_pick_bandwidth_optimal() {
        let p = Params::default();
        let small = choose(OpKind::AllReduce, 64, 8, &p);
        assert!(matches!(small, Algo::RecursiveDoubling | Algo::Tree), "{small}");
        let large = choose(OpKind::AllReduce, 256 << 20, 8, &p);
        assert!(matches!(large, Algo::Ring | Algo::Rabenseifner), "{large}");
        assert_eq!(choose(OpKind::AllToAll, 1 << 20, 8, &p), Algo::Pairwise);
        assert_eq!(choose(OpKind::Barrier, 0, 8, &p), Algo::Dissemination);
        let e = explain(OpKind::AllReduce, 1 << 20, 8, &p);
        assert!(e.contains("<- pick") && e.contains("ring") && e.contains("tree"), "{e}");
    }
}
