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
//! | all-reduce Rabenseifner | 2 lg p + 2e | 2(p-1)/p S + 2e S, plus one chunk per step (see below) | (p-1)/p S + e S |
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
//!
//! **Ranks sharing a host's cores.** The terms above assume a core (and a
//! link) per rank. When `ranks_per_host` ranks share `host_cores` cores and
//! outnumber them (`roce coll --np 8` on a 2-core machine), two more bounds
//! apply, and each term is the larger of the two:
//!
//! * latency: a rank that waits sleeps and must be woken and scheduled
//!   before the step moves on, so every rank activation costs `wake_ns` of
//!   one of the cores: `activations x wake / cores` over the host's ranks.
//!   Activations per all-reduce: ring `2(n-1)` per rank, Rabenseifner
//!   `2 lg p`, recursive doubling `lg p` (plus the folds), double tree 4
//!   per rank (each tree once up, once down).
//! * bandwidth: the host moves at most `cores x B` in total (every byte is
//!   sent and received by a core), and the busiest rank has `cores /
//!   ranks` of a core, so the time is at least the host's total bytes /
//!   (cores x B), and at least the busiest rank's bytes x ranks / (cores x
//!   B); the reduction likewise.
//!
//! Rabenseifner's halving and doubling steps each change partner, and a
//! step can send a chunk only once the previous step's matching chunk has
//! arrived and been reduced, so it pays one chunk at link speed per step
//! (`2 lg p x min(chunk, S/p) / B`) where the ring streams to one
//! neighbour: calibrated on the measurements (np 4 and 8, 1 to 16 MiB: the
//! ring 12-36% faster with the same bytes), not derived.
//!
//! Measured on the 2-core development host (`scripts/coll-algos.sh`, 4 KiB
//! to 64 MiB, np 2/4/8): alpha ~50 us per step with a core per rank, B
//! ~0.85 GB/s per rank (1 MiB slots), a wake-up ~130 us; those are the
//! defaults. What the model leaves out: message-size effects inside the
//! transport (packets, completions, credits per slot), cache effects of
//! buffers larger than the last-level cache, and other load on the host.

use std::fmt::Write;

use crate::types::{Algo, OpKind};

/// Measurable parameters of the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Per-step latency (one message's one-way latency plus software
    /// overhead) with a core per rank, ns.
    pub alpha_ns: f64,
    /// Per-rank link bandwidth, bytes per second (what one rank can send
    /// and receive at the same time, with a core of its own).
    pub link_bytes_per_s: f64,
    /// Reduction throughput of one core, bytes per second.
    pub reduce_bytes_per_s: f64,
    /// Payload bytes per message (slot size minus header): the pipelining
    /// grain of chains and trees.
    pub chunk_bytes: f64,
    /// Ranks that share one host's cores (1: a host per rank).
    pub ranks_per_host: usize,
    /// Cores of that host; 0: at least one per rank (no sharing).
    pub host_cores: usize,
    /// CPU time one rank activation costs when ranks outnumber cores (a
    /// wake-up, the polls and the step's work), ns.
    pub wake_ns: f64,
}

impl Default for Params {
    /// The 2-core development host's figures (see the module doc) with a
    /// core per rank; set `ranks_per_host` and `host_cores` when ranks
    /// share a host (`roce coll --np` does), measure the rest for a real
    /// fabric.
    fn default() -> Params {
        Params {
            alpha_ns: 50_000.0,
            link_bytes_per_s: 0.85e9,
            reduce_bytes_per_s: 8.0e9,
            // Layout::DEFAULT's slots (the CLI sets its own)
            chunk_bytes: ((256 << 10) - crate::HEADER_BYTES) as f64,
            ranks_per_host: 1,
            host_cores: 0,
            wake_ns: 130_000.0,
        }
    }
}

impl Params {
    /// Cores shared by more ranks than there are: `Some(cores)`.
    fn shared_cores(&self) -> Option<f64> {
        (self.host_cores > 0 && self.ranks_per_host > self.host_cores).then_some(self.host_cores as f64)
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

/// One algorithm's cost in the model's units, before the parameters.
struct Shape {
    /// Sequential steps (the latency path).
    steps: f64,
    /// Bytes the busiest rank sends, and reduces.
    busiest: f64,
    busiest_reduced: f64,
    /// Bytes all ranks send together, and reduce.
    total: f64,
    total_reduced: f64,
    /// Rank activations over all ranks.
    activations: f64,
    /// Pipeline fill, bytes at link speed.
    fill: f64,
}

impl Shape {
    fn time(&self, n: usize, p: &Params) -> f64 {
        let bw = p.link_bytes_per_s * 1e-9; // bytes per ns
        let red = p.reduce_bytes_per_s * 1e-9;
        let mut lat = self.steps * p.alpha_ns;
        let mut data = self.busiest / bw + self.busiest_reduced / red;
        if let Some(cores) = p.shared_cores() {
            // this host's share of the job
            let here = (p.ranks_per_host.min(n) as f64) / n as f64;
            let ranks = p.ranks_per_host.min(n) as f64;
            lat = lat.max(self.activations * here * p.wake_ns / cores);
            let host = here * (self.total / bw + self.total_reduced / red) / cores;
            let busiest = ranks * (self.busiest / bw + self.busiest_reduced / red) / cores;
            data = data.max(host).max(busiest);
        }
        lat + data + self.fill / bw
    }
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
    let pow2 = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let pf = pow2 as f64;
    let rem = (n - pow2) as f64;
    let e = if pow2 == n { 0.0 } else { 1.0 };
    let chunk = p.chunk_bytes.max(1.0);
    let sh = match (op, algo) {
        (OpKind::AllReduce, Algo::Ring) => Shape {
            steps: 2.0 * (nf - 1.0),
            busiest: 2.0 * (nf - 1.0) / nf * s,
            busiest_reduced: (nf - 1.0) / nf * s,
            total: 2.0 * (nf - 1.0) * s,
            total_reduced: (nf - 1.0) * s,
            activations: 2.0 * (nf - 1.0) * nf,
            fill: 0.0,
        },
        (OpKind::AllReduce, Algo::Rabenseifner) => Shape {
            steps: 2.0 * lg(pow2) + 2.0 * e,
            busiest: 2.0 * (pf - 1.0) / pf * s + 2.0 * e * s,
            busiest_reduced: (pf - 1.0) / pf * s + e * s,
            total: 2.0 * (pf - 1.0) * s + 2.0 * rem * s,
            total_reduced: (pf - 1.0) * s + rem * s,
            activations: 2.0 * lg(pow2) * pf + 4.0 * rem,
            // steps do not overlap (`Schedule::step_barrier`): a halving
            // step starts once the previous one's last chunk is in and
            // reduced, the step's own transfer streams in chunks. So the
            // fill is one chunk's reduction per halving step (in bytes at
            // link speed), not a chunk crossing the link, which the
            // chunk-pipelined version of the schedule paid.
            fill: lg(pow2) * chunk.min(s / pf) * p.link_bytes_per_s / p.reduce_bytes_per_s,
        },
        (OpKind::AllReduce, Algo::RecursiveDoubling) => Shape {
            steps: lg(pow2) + 2.0 * e,
            busiest: lg(pow2) * s + 2.0 * e * s,
            busiest_reduced: lg(pow2) * s + e * s,
            total: lg(pow2) * pf * s + 2.0 * rem * s,
            total_reduced: lg(pow2) * pf * s + rem * s,
            activations: lg(pow2) * pf + 4.0 * rem,
            fill: 0.0,
        },
        (OpKind::AllReduce, Algo::Tree) => {
            // each tree moves S/2 up and S/2 down; a rank interior in one
            // tree and a leaf in the other sends (and receives) 1.5 S + 0.5 S
            // = 2 S in total (NCCL: "each GPU sends and receives ~2S"),
            // pipelined in chunks; the busiest rank's share, exactly.
            let d = tree_depth(n);
            let c = chunk.min(s / 2.0);
            Shape {
                steps: 2.0 * d,
                busiest: tree_send_factor(n) * s,
                busiest_reduced: s,
                total: 2.0 * (nf - 1.0) * s,
                total_reduced: (nf - 1.0) * s,
                activations: 4.0 * nf,
                fill: 2.0 * (d - 1.0) * c,
            }
        }
        (OpKind::ReduceScatter, Algo::Ring) | (OpKind::AllGather, Algo::Ring) => {
            let r = if op == OpKind::ReduceScatter { 1.0 } else { 0.0 };
            Shape {
                steps: nf - 1.0,
                busiest: (nf - 1.0) * s,
                busiest_reduced: r * (nf - 1.0) * s,
                total: nf * (nf - 1.0) * s,
                total_reduced: r * nf * (nf - 1.0) * s,
                activations: (nf - 1.0) * nf,
                fill: 0.0,
            }
        }
        (OpKind::Broadcast | OpKind::Reduce, Algo::Ring) => {
            let c = chunk.min(s);
            let r = if op == OpKind::Reduce { 1.0 } else { 0.0 };
            Shape {
                steps: nf - 1.0,
                busiest: s,
                busiest_reduced: r * s,
                total: (nf - 1.0) * s,
                total_reduced: r * (nf - 1.0) * s,
                activations: nf,
                fill: (nf - 2.0).max(0.0) * c,
            }
        }
        (OpKind::Broadcast | OpKind::Reduce, Algo::Tree) => {
            let d = tree_depth(n) + 1.0;
            let c = chunk.min(s / 2.0);
            let r = if op == OpKind::Reduce { 1.0 } else { 0.0 };
            Shape {
                steps: d,
                busiest: s,
                busiest_reduced: r * s,
                total: (nf - 1.0) * s,
                total_reduced: r * (nf - 1.0) * s,
                activations: 2.0 * nf,
                fill: (d - 1.0) * c,
            }
        }
        (OpKind::AllToAll, Algo::Pairwise) => Shape {
            steps: nf - 1.0,
            busiest: (nf - 1.0) * s,
            busiest_reduced: 0.0,
            total: nf * (nf - 1.0) * s,
            total_reduced: 0.0,
            activations: (nf - 1.0) * nf,
            fill: 0.0,
        },
        (OpKind::Barrier, Algo::Dissemination) => {
            let k = lg(n.next_power_of_two());
            Shape {
                steps: k,
                busiest: 0.0,
                busiest_reduced: 0.0,
                total: 0.0,
                total_reduced: 0.0,
                activations: k * nf,
                fill: 0.0,
            }
        }
        _ => return None,
    };
    Some(sh.time(n, p))
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
        "# cost model: {op}, {bytes} B per rank, {n} ranks; alpha {:.1} us, link {:.2} GB/s, reduce {:.2} GB/s, \
         {} ranks per host on {} cores, wake-up {:.1} us\n",
        p.alpha_ns / 1e3,
        p.link_bytes_per_s / 1e9,
        p.reduce_bytes_per_s / 1e9,
        p.ranks_per_host,
        p.host_cores,
        p.wake_ns / 1e3
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
        Params {
            alpha_ns: 5_000.0,
            link_bytes_per_s: 12.5e9,
            reduce_bytes_per_s: 1e30,
            // byte-sized chunks: no pipeline fill, as the analytic model
            chunk_bytes: 1.0,
            ..Params::default()
        }
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

    /// Eight ranks on two cores: never faster than with a core each, the
    /// activations make ring's many steps dear for small messages, and the
    /// host's total bytes make recursive doubling (lg n whole vectors per
    /// rank) dear for large ones.
    #[test]
    fn ranks_sharing_cores_pay_wake_ups_and_the_hosts_bandwidth() {
        let own = Params::default();
        let shared = Params { ranks_per_host: 8, host_cores: 2, ..own };
        for algo in Algo::candidates(OpKind::AllReduce) {
            for bytes in [4 << 10, 1 << 20, 64 << 20] {
                let a = predict(OpKind::AllReduce, algo, bytes, 8, &own).unwrap();
                let b = predict(OpKind::AllReduce, algo, bytes, 8, &shared).unwrap();
                assert!(b >= a, "{algo} {bytes}: {b} < {a}");
            }
        }
        let t = |algo, bytes| predict(OpKind::AllReduce, algo, bytes, 8, &shared).unwrap();
        // 112 activations x 130 us / 2 cores
        assert!((t(Algo::Ring, 4096) / 1e3 - 7280.0).abs() < 100.0, "{}", t(Algo::Ring, 4096));
        assert_ne!(choose(OpKind::AllReduce, 4096, 8, &shared), Algo::Ring);
        assert!(t(Algo::RecursiveDoubling, 64 << 20) > 1.5 * t(Algo::Ring, 64 << 20));
        // a host per rank (ranks_per_host 1) is the plain model
        let one = Params { ranks_per_host: 1, host_cores: 2, ..own };
        assert!(t(Algo::Tree, 0).is_finite());
        assert_eq!(
            predict(OpKind::AllReduce, Algo::Tree, 1 << 20, 8, &one),
            predict(OpKind::AllReduce, Algo::Tree, 1 << 20, 8, &own)
        );
    }
}
