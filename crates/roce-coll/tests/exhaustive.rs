//! Every operation x type x reduction x algorithm on 1..=9 ranks, counts
//! 0, 1, < n, not divisible by n and multi-chunk, in place and out of
//! place, over the in-memory transport with reordering; each result
//! checked against the model.

mod common;

use common::*;
use roce_coll::{DataType, OpDesc, OpKind, RedOp};

fn counts(n: usize) -> Vec<usize> {
    let mut c = vec![0, 1, n.saturating_sub(1).max(1), 2 * n + 3, 97];
    c.dedup();
    c
}

fn sweep(op: OpKind, ns: std::ops::RangeInclusive<usize>) {
    let mut runs = 0;
    for n in ns {
        for algo in algos(op) {
            for dt in DataType::ALL {
                let redops: &[RedOp] = if op.reduces() { &RedOp::ALL } else { &[RedOp::Sum] };
                for &redop in redops {
                    for (ci, count) in counts(n).into_iter().enumerate() {
                        for inplace in [false, true] {
                            let root = if op.rooted() { (n * 2 / 3 + ci) % n } else { 0 };
                            let d = OpDesc { op, dtype: dt, redop, count, root, algo };
                            let seed = (runs as u64) * 7919 + n as u64;
                            check(d, n, inplace, layout(runs), seed).unwrap_or_else(|e| panic!("{e}"));
                            runs += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(runs > 0);
}

#[test]
fn all_reduce() {
    sweep(OpKind::AllReduce, 1..=9);
}

#[test]
fn reduce_scatter() {
    sweep(OpKind::ReduceScatter, 1..=9);
}

#[test]
fn all_gather() {
    sweep(OpKind::AllGather, 1..=9);
}

#[test]
fn broadcast() {
    sweep(OpKind::Broadcast, 1..=9);
}

#[test]
fn reduce() {
    sweep(OpKind::Reduce, 1..=9);
}

#[test]
fn all_to_all() {
    sweep(OpKind::AllToAll, 1..=9);
}

#[test]
fn barrier() {
    sweep(OpKind::Barrier, 1..=9);
}

/// Large messages: many chunks in flight on every channel, every algorithm.
#[test]
fn large_messages_stream() {
    for n in [2, 3, 5, 8] {
        for op in [
            OpKind::AllReduce,
            OpKind::ReduceScatter,
            OpKind::AllGather,
            OpKind::Broadcast,
            OpKind::Reduce,
            OpKind::AllToAll,
        ] {
            for algo in algos(op) {
                for (k, dt) in [DataType::F32, DataType::Bf16].into_iter().enumerate() {
                    let d = OpDesc { op, dtype: dt, redop: RedOp::Sum, count: 20_011, root: n - 1, algo };
                    check(d, n, k == 1, layout(2), n as u64 + k as u64).unwrap_or_else(|e| panic!("{e}"));
                }
            }
        }
    }
}
