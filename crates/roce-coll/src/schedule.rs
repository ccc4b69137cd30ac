//! The algorithms, each as one rank's schedule: an ordered list of
//! transfers (send a range to a peer, receive a range from a peer and copy
//! or reduce it in) grouped in steps. The executor ([`crate::Engine`])
//! splits transfers into slot-sized chunks and runs a chunk as soon as the
//! chunks it depends on are done, so steps pipeline: in a ring, block `b`
//! is forwarded chunk by chunk while it is still arriving.
//!
//! Semantics of a step: its sends read the working buffer as it was before
//! the step's receives (the executor enforces it chunk by chunk); a
//! receive that overlaps an earlier receive of the same range is applied
//! after it (reduction order is fixed, so results are reproducible).
//!
//! Pairing rule every builder keeps: the transfers from rank `a` to rank
//! `b`, in `a`'s schedule order, match one for one (same length) the
//! transfers `b` receives from `a`, in `b`'s order.

use crate::tree::{dtree, dtree_root};
use crate::types::{Algo, OpDesc, OpKind};

/// One transfer of a schedule. Offsets and lengths are in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Xfer {
    pub step: u32,
    pub peer: usize,
    pub send: bool,
    /// A send that reads the source buffer (all-to-all), not the working
    /// buffer.
    pub from_src: bool,
    /// A receive that reduces into the working buffer (else it copies).
    pub reduce: bool,
    /// A reducing receive into a range of the working buffer nothing has
    /// written yet (see [`Schedule::source_first`]): its left operand is
    /// the source buffer's range, not the working buffer's.
    pub init_from_src: bool,
    pub off: usize,
    pub len: usize,
}

/// One rank's schedule.
#[derive(Debug, Clone, Default)]
pub(crate) struct Schedule {
    pub xfers: Vec<Xfer>,
    /// A send of step `s` waits until every receive of earlier steps is
    /// complete, whatever ranges they touch (barrier rounds, which carry no
    /// data; Rabenseifner, whose steps must not overlap).
    pub step_barrier: bool,
    /// A send of step `s` is posted only when every send of the steps
    /// before `s - 1` has completed (the peer acknowledged it): at most two
    /// steps' sends in flight. A rank that holds several steps' data at
    /// once (it entered the call last, and its partners' messages are all
    /// in) would otherwise post them all together, the NIC would share its
    /// link between their QPs, and the first step's message, which every
    /// later step of every partner waits for, would leave at a fraction of
    /// the link's rate. Measured in the fabric simulator (recursive
    /// doubling, 64 KiB, 64 ranks, one of them 100 us late): 116 us from
    /// the last rank's entry to the end unordered, 73 us with one step of
    /// look-ahead, 62 us with none; in step (no rank late) 48.4 us both
    /// unordered and with one step of look-ahead, 58.4 us with none.
    pub send_in_order: bool,
    /// Transfers to one peer are sent side by side, each on channels of its
    /// own, when this is more than 1 and the communicator has at least this
    /// many channels (QPs per peer): the most transfers any rank of the
    /// algorithm sends to one peer. The double binary tree's is 2: where
    /// the two trees share an edge (a rank's parent in one tree is its child
    /// in the other) one transfer goes up while the other comes down. In
    /// schedule order the second waited for the whole of the first and
    /// finished last (8 ranks, 64 MiB: 10.5% over the tree's bandwidth
    /// bound); side by side on one QP the two shared one QP's turn at the
    /// NIC where every other transfer has a whole one (5 ranks: 26.6%);
    /// each on its own QPs, 0.7% (8 ranks) and 4.5% (5), as NCCL gives each
    /// of its two trees channels of its own. With fewer channels: in
    /// schedule order, as before. (The fabric simulator's ideal fabric;
    /// the measurements are in `docs/straggler-study.md`.) The receiver
    /// needs nothing: it places a message by the index in its header and
    /// applies it when its dependencies are done, in whatever order
    /// messages arrive.
    pub lanes: usize,
}

impl Schedule {
    fn send(&mut self, step: u32, peer: usize, off: usize, len: usize) {
        self.xfers.push(Xfer {
            step,
            peer,
            send: true,
            from_src: false,
            reduce: false,
            init_from_src: false,
            off,
            len,
        });
    }
    fn recv(&mut self, step: u32, peer: usize, off: usize, len: usize, reduce: bool) {
        self.xfers.push(Xfer {
            step,
            peer,
            send: false,
            from_src: false,
            reduce,
            init_from_src: false,
            off,
            len,
        });
    }
    /// For an out-of-place call whose working buffer starts as a copy of
    /// the source (all-reduce): rewrites the schedule to read the source
    /// wherever the working buffer has not been written yet, so that the
    /// copy is not made up front. A send of an unwritten range reads the
    /// source (`from_src`); a reducing receive into an unwritten range
    /// takes its left operand from the source (`init_from_src`); a copying
    /// receive needs nothing. Returns the ranges (in elements) no receive
    /// writes, which the caller copies from the source at the end; `None`,
    /// with the schedule unchanged, if some transfer covers written and
    /// unwritten elements at once (no builder makes one; the caller then
    /// copies up front). Sends of a step see the buffer as it was before
    /// the step's receives, as the executor runs them.
    pub(crate) fn source_first(&mut self, work_len: usize) -> Option<Vec<(usize, usize)>> {
        let mut written = Written::default();
        let mut out = self.xfers.clone();
        let mut i = 0;
        while i < out.len() {
            let mut j = i;
            while j < out.len() && out[j].step == out[i].step {
                j += 1;
            }
            for pass_sends in [true, false] {
                for x in out[i..j].iter_mut().filter(|x| x.send == pass_sends && x.len > 0) {
                    let (lo, hi) = (x.off, x.off + x.len);
                    match written.covered(lo, hi) {
                        0 if x.send => x.from_src = true,
                        0 => x.init_from_src = x.reduce,
                        c if c == hi - lo => {}
                        _ => return None,
                    }
                    if !x.send {
                        written.add(lo, hi);
                    }
                }
            }
            i = j;
        }
        self.xfers = out;
        Some(written.gaps(work_len))
    }

    fn sort(mut self) -> Schedule {
        // stable: keeps the builder's order within a step
        self.xfers.sort_by_key(|x| x.step);
        self
    }
}

/// The ranges of a working buffer written so far: sorted, disjoint, not
/// touching.
#[derive(Debug, Default)]
struct Written(Vec<(usize, usize)>);

impl Written {
    /// How many elements of `[lo, hi)` are written.
    fn covered(&self, lo: usize, hi: usize) -> usize {
        self.0.iter().map(|&(a, b)| b.min(hi).saturating_sub(a.max(lo))).sum()
    }

    fn add(&mut self, lo: usize, hi: usize) {
        self.0.push((lo, hi));
        self.0.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.0.len());
        for &(a, b) in &self.0 {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        self.0 = merged;
    }

    /// The ranges of `[0, len)` not written.
    fn gaps(&self, len: usize) -> Vec<(usize, usize)> {
        let mut gaps = Vec::new();
        let mut at = 0;
        for &(a, b) in &self.0 {
            if a > at {
                gaps.push((at, a.min(len)));
            }
            at = at.max(b);
        }
        if at < len {
            gaps.push((at, len));
        }
        gaps
    }
}

/// Balanced partition of `count` elements into `parts` blocks: block `b`.
pub(crate) fn block(count: usize, parts: usize, b: usize) -> (usize, usize) {
    let lo = (b as u128 * count as u128 / parts as u128) as usize;
    let hi = ((b + 1) as u128 * count as u128 / parts as u128) as usize;
    (lo, hi - lo)
}

/// Builds `rank`'s schedule of `desc` (algorithm resolved, not `Auto`) on
/// `n` ranks.
pub(crate) fn build(desc: &OpDesc, rank: usize, n: usize) -> Schedule {
    let c = desc.count;
    match (desc.op, desc.algo) {
        _ if n == 1 => Schedule::default(),
        (OpKind::AllReduce, Algo::Ring) => {
            let mut s = Schedule::default();
            ring_reduce_scatter(&mut s, rank, n, 0, |b| block(c, n, b));
            ring_all_gather(&mut s, rank, n, n as u32 - 1, |b| block(c, n, b));
            s.sort()
        }
        (OpKind::AllReduce, Algo::Rabenseifner) => halving_doubling(rank, n, c, true),
        (OpKind::AllReduce, Algo::RecursiveDoubling) => halving_doubling(rank, n, c, false),
        (OpKind::AllReduce, Algo::Tree) => tree_all_reduce(rank, n, c),
        (OpKind::ReduceScatter, Algo::Ring) => {
            let mut s = Schedule::default();
            ring_reduce_scatter(&mut s, rank, n, 0, |b| (b * c, c));
            s.sort()
        }
        (OpKind::AllGather, Algo::Ring) => {
            let mut s = Schedule::default();
            ring_all_gather(&mut s, rank, n, 0, |b| (b * c, c));
            s.sort()
        }
        (OpKind::Broadcast, Algo::Ring) => {
            let mut s = Schedule::default();
            let v = (rank + n - desc.root) % n;
            if v > 0 {
                s.recv(0, (rank + n - 1) % n, 0, c, false);
            }
            if v < n - 1 {
                s.send(1, (rank + 1) % n, 0, c);
            }
            s
        }
        (OpKind::Reduce, Algo::Ring) => {
            // chain root+1 -> root+2 -> ... -> root
            let mut s = Schedule::default();
            let v = (rank + n - desc.root - 1) % n;
            if v > 0 {
                s.recv(0, (rank + n - 1) % n, 0, c, true);
            }
            if v < n - 1 {
                s.send(1, (rank + 1) % n, 0, c);
            }
            s
        }
        (OpKind::Broadcast, Algo::Tree) => tree_rooted(rank, n, c, desc.root, false),
        (OpKind::Reduce, Algo::Tree) => tree_rooted(rank, n, c, desc.root, true),
        (OpKind::AllToAll, Algo::Pairwise) => {
            let mut s = Schedule::default();
            for k in 1..n {
                let to = (rank + k) % n;
                let from = (rank + n - k) % n;
                s.xfers.push(Xfer {
                    step: k as u32,
                    peer: to,
                    send: true,
                    from_src: true,
                    reduce: false,
                    init_from_src: false,
                    off: to * c,
                    len: c,
                });
                s.recv(k as u32, from, from * c, c, false);
            }
            s
        }
        (OpKind::Barrier, Algo::Dissemination) => {
            let mut s = Schedule { step_barrier: true, ..Default::default() };
            let mut d = 1;
            let mut k = 0;
            while d < n {
                s.send(k, (rank + d) % n, 0, 0);
                s.recv(k, (rank + n - d) % n, 0, 0, false);
                d <<= 1;
                k += 1;
            }
            s
        }
        (op, algo) => unreachable!("{algo} does not run {op}: checked by the engine"),
    }
}

/// Ring reduce-scatter (NCCL's ring, Patarasuk & Yuan 2009): in step `s`
/// (0..n-1) rank `r` sends block `r-s-1` to `r+1` and reduces block `r-s-2`
/// from `r-1`; after `n-1` steps rank `r` holds the full reduction of
/// block `r`.
fn ring_reduce_scatter(
    s: &mut Schedule,
    r: usize,
    n: usize,
    step0: u32,
    blk: impl Fn(usize) -> (usize, usize),
) {
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    for k in 0..n - 1 {
        let (so, sl) = blk((r + 2 * n - k - 1) % n);
        let (ro, rl) = blk((r + 2 * n - k - 2) % n);
        s.send(step0 + k as u32, next, so, sl);
        s.recv(step0 + k as u32, prev, ro, rl, true);
    }
}

/// Ring all-gather: in step `s` rank `r` sends block `r-s` (its own block
/// first) to `r+1` and receives block `r-s-1` from `r-1`.
fn ring_all_gather(s: &mut Schedule, r: usize, n: usize, step0: u32, blk: impl Fn(usize) -> (usize, usize)) {
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    for k in 0..n - 1 {
        let (so, sl) = blk((r + n - k) % n);
        let (ro, rl) = blk((r + 2 * n - k - 1) % n);
        s.send(step0 + k as u32, next, so, sl);
        s.recv(step0 + k as u32, prev, ro, rl, false);
    }
}

/// Rabenseifner (`rsag`: reduce-scatter by recursive halving, then
/// all-gather by recursive doubling) or recursive doubling (`!rsag`:
/// lg p exchanges of the whole vector), after Thakur, Rabenseifner and
/// Gropp, "Optimization of collective communication operations in MPICH",
/// IJHPCA 2005, §4. With `n` not a power of two, `p` the largest power of
/// two below and `rem = n - p`: the first `2 rem` ranks fold pairwise
/// (even rank sends its vector to the odd one, which reduces it and takes
/// part as rank `r/2`), the `p` remaining ranks run the power-of-two
/// algorithm, and each odd rank finally sends the result back to its even
/// partner.
fn halving_doubling(r: usize, n: usize, count: usize, rsag: bool) -> Schedule {
    let mut s = Schedule::default();
    let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let rem = n - p;
    let real = |v: usize| if v < rem { 2 * v + 1 } else { v + rem };
    let lg = p.trailing_zeros();
    let last = 2 * lg + 1;
    let v = if r < 2 * rem {
        if r % 2 == 0 {
            s.send(0, r + 1, 0, count);
            s.recv(last, r + 1, 0, count, false);
            return s;
        }
        s.recv(0, r - 1, 0, count, true);
        r / 2
    } else {
        r - rem
    };
    if rsag {
        let off = |b: usize| block(count, p, b).0;
        let (mut lo, mut hi) = (0usize, p);
        let mut step = 1;
        let mut mask = p >> 1;
        while mask > 0 {
            let partner = real(v ^ mask);
            let mid = lo + (hi - lo) / 2;
            let (keep, give) = if v & mask == 0 { ((lo, mid), (mid, hi)) } else { ((mid, hi), (lo, mid)) };
            s.send(step, partner, off(give.0), off(give.1) - off(give.0));
            s.recv(step, partner, off(keep.0), off(keep.1) - off(keep.0), true);
            (lo, hi) = keep;
            step += 1;
            mask >>= 1;
        }
        let off = |b: usize| if b == p { count } else { block(count, p, b).0 };
        let mut mask = 1;
        while mask < p {
            let partner = real(v ^ mask);
            let w = hi - lo;
            let other = if v & mask == 0 { (hi, hi + w) } else { (lo - w, lo) };
            s.send(step, partner, off(lo), off(hi) - off(lo));
            s.recv(step, partner, off(other.0), off(other.1) - off(other.0), false);
            lo = lo.min(other.0);
            hi = hi.max(other.1);
            step += 1;
            mask <<= 1;
        }
    } else {
        let mut mask = 1;
        let mut step = 1;
        while mask < p {
            let partner = real(v ^ mask);
            s.send(step, partner, 0, count);
            s.recv(step, partner, 0, count, true);
            step += 1;
            mask <<= 1;
        }
    }
    if r < 2 * rem {
        s.send(last, r - 1, 0, count);
    }
    // Rabenseifner's steps run one after the other: a step's sends wait
    // for the whole of the previous steps' receives. Each step alone fills
    // the link, so letting step k+1 start on the chunks already reduced
    // gains nothing, and costs: the NIC shares the link between the QPs of
    // both steps, step k's last chunks (which every later step waits for)
    // leave later, and the delay compounds over the lg p steps. Measured
    // in the fabric simulator (8 ranks, one switch, 64 MiB): 29% over the
    // bandwidth bound chunk-pipelined, 0.6% with the barrier (whose cost
    // is one latency per step, the model's `2 lg p alpha`). Recursive
    // doubling keeps the pipeline: each of its steps moves the whole
    // vector, and chunk c of step k+1 may leave once chunk c of step k is
    // in (the same simulator: 256 KiB on 8 ranks 69.6 us pipelined, 73.6
    // us with the barrier).
    s.step_barrier = rsag;
    s.send_in_order = true;
    s.sort()
}

/// Double binary tree all-reduce (NCCL's `Tree`): half `t` of the vector
/// is reduced up tree `t` and broadcast back down it. Steps: 0 reduce from
/// the children, 1 send to the parent, 2 receive the result from the
/// parent, 3 send it to the children.
fn tree_all_reduce(r: usize, n: usize, count: usize) -> Schedule {
    let mut s = Schedule::default();
    let trees = dtree(n, r);
    let half = [(0, count / 2), (count / 2, count - count / 2)];
    for (t, node) in trees.iter().enumerate() {
        let (o, l) = half[t];
        for c in node.children.iter().flatten() {
            s.recv(0, *c, o, l, true);
        }
        if let Some(p) = node.parent {
            s.send(1, p, o, l);
            s.recv(2, p, o, l, false);
        }
        for c in node.children.iter().flatten() {
            s.send(3, *c, o, l);
        }
    }
    s.lanes = 2;
    s.sort()
}

/// Double binary tree broadcast (`!reduce`) or reduce rooted at `root`:
/// ranks renumbered so the root is 0, half `t` travels tree `t`. Tree 1's
/// root is not the root: for a broadcast the root first hands it half 1
/// (and takes no part in tree 1's broadcast of what it already has); for a
/// reduce tree 1's root sends the reduced half 1 to the root at the end.
fn tree_rooted(r: usize, n: usize, count: usize, root: usize, reduce: bool) -> Schedule {
    let mut s = Schedule::default();
    let v = (r + n - root) % n;
    let real = |x: usize| (x + root) % n;
    let trees = dtree(n, v);
    let half = [(0, count / 2), (count / 2, count - count / 2)];
    let t1root = dtree_root(n, 1);
    for (t, node) in trees.iter().enumerate() {
        let (o, l) = half[t];
        let skip = |x: usize| t == 1 && x == 0; // the root holds half 1 already / gets it at the end
        if reduce {
            for c in node.children.iter().flatten() {
                s.recv(0, real(*c), o, l, true);
            }
            if let Some(p) = node.parent {
                s.send(1, real(p), o, l);
            }
            if t == 1 && v == t1root && t1root != 0 {
                s.send(2, real(0), o, l);
            }
            if t == 1 && v == 0 && t1root != 0 {
                s.recv(2, real(t1root), o, l, false);
            }
        } else {
            if t == 1 && v == 0 && t1root != 0 {
                s.send(0, real(t1root), o, l);
            }
            if t == 1 && v == t1root && t1root != 0 {
                s.recv(0, real(0), o, l, false);
            }
            if let Some(p) = node.parent {
                if !skip(v) {
                    s.recv(1, real(p), o, l, false);
                }
            }
            for c in node.children.iter().flatten() {
                if !skip(*c) {
                    s.send(2, real(*c), o, l);
                }
            }
        }
    }
    s.sort()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{DataType, RedOp};

    /// A float sum of `count` elements.
    fn f32_sum(op: OpKind, algo: Algo, count: usize, root: usize) -> OpDesc {
        OpDesc { op, dtype: DataType::F32, redop: RedOp::Sum, count, root, algo }
    }

    /// On two ranks ring and Rabenseifner all-reduce are the same
    /// exchange (send the other half, reduce ours, send ours back, take
    /// theirs): transfer for transfer, only the step numbers differ. So a
    /// measured difference between them at np = 2 is the host's noise, not
    /// the algorithm.
    #[test]
    fn ring_and_rabenseifner_are_one_schedule_on_two_ranks() {
        for count in [1, 37, 1 << 20] {
            for r in 0..2 {
                let d = |algo| f32_sum(OpKind::AllReduce, algo, count, 0);
                let strip = |s: Schedule| -> Vec<Xfer> {
                    s.xfers.into_iter().map(|x| Xfer { step: 0, ..x }).collect()
                };
                assert_eq!(
                    strip(build(&d(Algo::Ring), r, 2)),
                    strip(build(&d(Algo::Rabenseifner), r, 2)),
                    "count {count} rank {r}"
                );
            }
        }
    }

    /// Every all-reduce algorithm, every rank, n = 1..17 and counts with
    /// empty and uneven blocks: the rewrite applies (no transfer straddles
    /// written and unwritten elements), every element is written by some
    /// receive except on one rank or with nothing to do, the first
    /// touches read the source and nothing else changes.
    #[test]
    fn all_reduce_reads_the_source_until_written() {
        for n in 1..=17 {
            for algo in Algo::candidates(OpKind::AllReduce) {
                for count in [0, 1, n - 1, 2 * n + 3, 97] {
                    let d = f32_sum(OpKind::AllReduce, algo, count, 0);
                    for r in 0..n {
                        let before = build(&d, r, n);
                        let mut after = before.clone();
                        let gaps = after
                            .source_first(count)
                            .unwrap_or_else(|| panic!("{algo} n={n} r={r} count={count}"));
                        let all = if n == 1 || count == 0 { vec![(0, count)] } else { Vec::new() };
                        let all: Vec<_> = all.into_iter().filter(|&(a, b)| b > a).collect();
                        assert_eq!(gaps, all, "{algo} n={n} r={r} count={count}");
                        let (mut sends, mut inits) = (0, 0);
                        for (x, y) in before.xfers.iter().zip(&after.xfers) {
                            let plain = Xfer { from_src: x.from_src, init_from_src: false, ..*y };
                            assert_eq!(*x, plain, "only the two flags change");
                            sends += usize::from(y.from_src);
                            inits += usize::from(y.init_from_src);
                            assert!(!y.init_from_src || (y.reduce && !y.send));
                        }
                        // Whatever touches a rank's buffer first (a send,
                        // or the fold's reduce in Rabenseifner's odd
                        // ranks) reads the source.
                        if n > 1 && count >= n {
                            assert!(sends + inits > 0, "{algo} n={n} r={r} count={count}");
                        }
                        let reduces = before.xfers.iter().any(|x| x.reduce && x.len > 0);
                        assert!(inits > 0 || !reduces || count == 0, "{algo} n={n} r={r} count={count}");
                    }
                }
            }
        }
    }

    /// A transfer over written and unwritten elements at once is refused,
    /// the schedule left as it was; ranges no receive writes are returned.
    #[test]
    fn source_first_refuses_a_straddling_transfer() {
        let mut s = Schedule::default();
        s.recv(0, 1, 0, 4, true);
        s.send(1, 1, 2, 4);
        let before = s.xfers.clone();
        assert_eq!(s.source_first(10), None);
        assert_eq!(s.xfers, before);
        let mut s = Schedule::default();
        s.send(0, 1, 0, 4);
        s.recv(0, 1, 0, 4, true);
        s.recv(1, 1, 6, 2, false);
        assert_eq!(s.source_first(10), Some(vec![(4, 6), (8, 10)]));
        assert!(s.xfers[0].from_src && s.xfers[1].init_from_src && !s.xfers[2].init_from_src);
    }

    /// The pairing rule: what `a` sends `b` matches, in order and length,
    /// what `b` receives from `a`; for every algorithm and op up to n = 17.
    #[test]
    fn sends_and_receives_pair_up() {
        for n in 1..=17 {
            for op in OpKind::ALL {
                for algo in Algo::candidates(op) {
                    for root in [0, n / 2, n - 1] {
                        let d = f32_sum(op, algo, 37, root);
                        let sch: Vec<Schedule> = (0..n).map(|r| build(&d, r, n)).collect();
                        for a in 0..n {
                            for b in 0..n {
                                let sent: Vec<usize> = sch[a]
                                    .xfers
                                    .iter()
                                    .filter(|x| x.send && x.peer == b)
                                    .map(|x| x.len)
                                    .collect();
                                let got: Vec<usize> = sch[b]
                                    .xfers
                                    .iter()
                                    .filter(|x| !x.send && x.peer == a)
                                    .map(|x| x.len)
                                    .collect();
                                assert_eq!(sent, got, "{op} {algo} n={n} root={root} {a}->{b}");
                            }
                        }
                    }
                }
            }
        }
    }
}
