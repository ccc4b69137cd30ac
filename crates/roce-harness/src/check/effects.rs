//! What RC requests do to memory, predicted per stream in posting order
//! (the responder executes a QP's requests in PSN order, and streams touch
//! disjoint bytes): WRITE data lands in the peer's window, READ data (the
//! peer's constant source bytes) in the local SGEs, CMP_SWAP/FETCH_ADD on a
//! stream's own words follow a sequential model whose originals land
//! locally, and SEND data lands in the receive WR that took the message.

use std::collections::BTreeMap;

use crate::workload::{OpKind, Plan, Seg};

use super::completions::{executed, RecvMatch};
use super::shadow::Shadow;

/// Applies every executed RC request except shared-counter FETCH_ADDs
/// (see `atomics`) and SEND payloads (see [`apply_sends`]).
pub fn apply_rc(plan: &Plan, shadow: &mut Shadow) {
    // Current value of every per-stream atomic word, by (host, buffer offset).
    let mut words: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    let mut word_segs: BTreeMap<(usize, usize), Seg> = BTreeMap::new();
    for s in &plan.streams {
        for op in executed(s) {
            match op.kind {
                OpKind::Write { dst } | OpKind::WriteImm { dst, .. } => {
                    shadow.write(plan, &dst, &plan.gather_init(&op.sges));
                }
                OpKind::Read { src } => {
                    shadow.scatter(plan, &op.sges, &plan.gather_init(&[src]), None);
                }
                OpKind::CmpSwap { word, .. } | OpKind::FetchAdd { word, counter: None, .. } => {
                    let key = (word.mr.host, plan.buf_off(&word));
                    let cur = words.entry(key).or_insert_with(|| {
                        let o = key.1;
                        u64::from_ne_bytes(plan.hosts[key.0].init[o..o + 8].try_into().expect("8 bytes"))
                    });
                    word_segs.insert(key, word);
                    let orig = *cur;
                    match op.kind {
                        OpKind::CmpSwap { compare, swap, .. } if orig == compare => *cur = swap,
                        OpKind::FetchAdd { add, .. } => *cur = orig.wrapping_add(add),
                        _ => {}
                    }
                    shadow.scatter(plan, &op.sges, &orig.to_ne_bytes(), None);
                }
                _ => {}
            }
        }
    }
    for (key, v) in words {
        shadow.write(plan, &word_segs[&key], &v.to_ne_bytes());
    }
}

/// SEND payloads into the receive WRs that took them. A receive WR too
/// small for its SEND holds some prefix of it: not predicted.
pub fn apply_sends(plan: &Plan, matches: &[RecvMatch], shadow: &mut Shadow) {
    for m in matches {
        let op = &plan.streams[m.msg.0].ops[m.msg.1];
        let wqe = &plan.recvs[m.wqe.0].wqes[m.wqe.1];
        if m.short {
            shadow.forget(plan, &wqe.sges);
        } else if op.kind.carries_recv_data() {
            shadow.scatter(plan, &wqe.sges, &plan.gather_init(&op.sges), None);
        }
    }
}
