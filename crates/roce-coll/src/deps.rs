//! Chunk-level dependencies between the transfers of a schedule, found by
//! one sweep over the working buffer's ranges.
//!
//! A send depends on the receives of earlier steps that last wrote what it
//! reads (true dependency). A receive depends on the sends since the last
//! write of its range, its own step's included (they must read the old
//! value first: anti-dependency), and on the last receive into the range
//! (output dependency: fixed reduction order). Only the latest writer of
//! each range is recorded; it depends on the earlier ones, so checking it
//! suffices. The executor checks a dependency per chunk: a chunk covering
//! elements `[a, b)` waits until the dependency's completed prefix covers
//! its overlap with `[a, b)`.

use crate::schedule::Schedule;

/// A dependency of a transfer on transfer `x`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dep {
    pub x: usize,
    /// Wait for the whole of `x`, not only the overlapping prefix.
    pub full: bool,
}

struct Seg {
    lo: usize,
    hi: usize,
    writer: Option<usize>,
    readers: Vec<usize>,
}

/// Splits the segment list so that `at` is a boundary.
fn split(segs: &mut Vec<Seg>, at: usize) {
    let i = segs.partition_point(|s| s.hi <= at);
    if i < segs.len() && segs[i].lo < at {
        let s = &mut segs[i];
        let right = Seg { lo: at, hi: s.hi, writer: s.writer, readers: s.readers.clone() };
        s.hi = at;
        segs.insert(i + 1, right);
    }
}

/// The indices of the segments covering `[lo, hi)` (after splitting).
fn covering(segs: &mut Vec<Seg>, lo: usize, hi: usize) -> std::ops::Range<usize> {
    split(segs, lo);
    split(segs, hi);
    let a = segs.partition_point(|s| s.hi <= lo);
    let b = segs.partition_point(|s| s.lo < hi);
    a..b
}

fn push(deps: &mut Vec<Dep>, d: Dep) {
    if !deps.contains(&d) {
        deps.push(d);
    }
}

/// The dependencies of every transfer of `sched` (sorted by step), over a
/// working buffer of `work_len` elements.
pub(crate) fn compute(sched: &Schedule, work_len: usize) -> Vec<Vec<Dep>> {
    let xs = &sched.xfers;
    let mut deps: Vec<Vec<Dep>> = vec![Vec::new(); xs.len()];
    let mut segs = vec![Seg { lo: 0, hi: work_len, writer: None, readers: Vec::new() }];
    let mut prev_recvs: Vec<usize> = Vec::new(); // receives of earlier steps (step barrier)
    let mut i = 0;
    while i < xs.len() {
        let step = xs[i].step;
        let mut j = i;
        while j < xs.len() && xs[j].step == step {
            j += 1;
        }
        // sends first: they read the state before the step
        for k in i..j {
            let x = xs[k];
            if !x.send {
                continue;
            }
            if sched.step_barrier {
                for &r in &prev_recvs {
                    push(&mut deps[k], Dep { x: r, full: true });
                }
            }
            if x.from_src || x.len == 0 {
                continue;
            }
            for s in covering(&mut segs, x.off, x.off + x.len) {
                if let Some(w) = segs[s].writer {
                    push(&mut deps[k], Dep { x: w, full: false });
                }
                segs[s].readers.push(k);
            }
        }
        for k in i..j {
            let x = xs[k];
            if x.send || x.len == 0 {
                continue;
            }
            for s in covering(&mut segs, x.off, x.off + x.len) {
                let seg = &mut segs[s];
                for &r in &seg.readers {
                    push(&mut deps[k], Dep { x: r, full: false });
                }
                if let Some(w) = seg.writer {
                    push(&mut deps[k], Dep { x: w, full: false });
                }
                seg.writer = Some(k);
                seg.readers.clear();
            }
        }
        prev_recvs.extend((i..j).filter(|&k| !xs[k].send));
        i = j;
    }
    deps
}
