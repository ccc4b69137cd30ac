//! The send WRs of one RC stream (the requests one QP posts to its peer):
//! a random mix of every RC operation with sizes from 0 bytes to several
//! path MTUs, several SGEs, inline data, fences and unsignalled WRs.

use roce_proto::QpCap;

use super::{split, Gen, Timing};
use crate::net::HostId;
use crate::workload::memory::{alloc, ATOM, LAND, SRC, TGT};
use crate::workload::plan::*;

/// The operations a stream draws from, with weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Send,
    SendImm,
    SendInv,
    Write,
    WriteImm,
    Read,
    CmpSwap,
    FetchAdd,
}

const MIX: [(Choice, u64); 8] = [
    (Choice::Send, 14),
    (Choice::SendImm, 10),
    (Choice::SendInv, 4),
    (Choice::Write, 16),
    (Choice::WriteImm, 8),
    (Choice::Read, 14),
    (Choice::CmpSwap, 6),
    (Choice::FetchAdd, 8),
];

/// A choice from [`MIX`] in proportion to the weights.
fn weighted(g: &mut Gen<'_>) -> Choice {
    let total: u64 = MIX.iter().map(|m| m.1).sum();
    let mut x = g.rng.below(total);
    for (c, w) in MIX {
        if x < w {
            return c;
        }
        x -= w;
    }
    unreachable!("x < total")
}

/// Generator state of one stream.
pub(super) struct StreamGen {
    req: QpIdx,
    /// Requester and responder hosts.
    rh: HostId,
    sh: HostId,
    mtu: u32,
    max_len: u32,
    cap: QpCap,
    timing: Timing,
    /// This stream's part of the peer's target region.
    window: Option<Seg>,
    /// This stream's atomic words on the peer, with their current values.
    words: Vec<(Seg, u64)>,
    /// A region on the peer this stream may write and will invalidate.
    open_inv: Option<(MrRef, u32)>,
}

impl StreamGen {
    pub fn new(g: &mut Gen<'_>, req: QpIdx, resp: QpIdx) -> StreamGen {
        let q = &g.plan.qps[req];
        let mtu = q.conn.expect("RC").mtu.bytes() as u32;
        StreamGen {
            req,
            rh: q.host,
            sh: g.plan.qps[resp].host,
            mtu,
            max_len: mtu * g.p.max_msg_mtus.max(1),
            cap: q.cap,
            timing: Timing::new(g.rng),
            window: None,
            words: Vec::new(),
            open_inv: None,
        }
    }

    /// `n` WRs of the normal mix.
    pub fn normal(mut self, g: &mut Gen<'_>, n: usize) -> Stream {
        let ops = (0..n)
            .map(|_| {
                let choice = weighted(g);
                self.op(g, choice)
            })
            .collect();
        Stream { qp: self.req, ops, probe: None }
    }

    /// A probe: up to `pre` ordinary SENDs and WRITEs, then a WR that must
    /// fail with a remote error (see [`ProbeKind`]), then up to two more WRs
    /// (flushed). No READ or atomic precedes the bad WR: if its NAK is lost,
    /// the requester cannot tell which earlier responses it still needs.
    pub fn probe(mut self, g: &mut Gen<'_>, pre: usize) -> Stream {
        let kind = *g.rng.pick(&ProbeKind::ALL);
        let mut ops = Vec::new();
        for _ in 0..g.rng.usize(0, pre) {
            let c = *g.rng.pick(&[Choice::Send, Choice::SendImm, Choice::Write, Choice::WriteImm]);
            ops.push(self.op(g, c));
        }
        let fixed = self.new_region(g, MrKind::Fixed);
        let flen = u64::from(fixed.1);
        let bad = match kind {
            ProbeKind::InvalidatedRkey => {
                let inv = self.new_region(g, MrKind::Inv);
                self.open_inv = Some(inv);
                if g.rng.chance(0.5) {
                    let len = g.rng.range(1, u64::from(inv.1)) as u32;
                    ops.push(self.write_to(g, Seg { mr: inv.0, off: 0, len }, None));
                }
                ops.push(self.op(g, Choice::SendInv));
                let len = g.rng.range(1, u64::from(inv.1.min(2 * self.mtu))) as u32;
                let off = g.rng.range(0, u64::from(inv.1 - len));
                self.write_to(g, Seg { mr: inv.0, off, len }, None)
            }
            ProbeKind::OutOfBounds => {
                let off = g.rng.range(0, flen);
                let len = (flen - off + g.rng.range(1, u64::from(2 * self.mtu))) as u32;
                self.write_to(g, Seg { mr: fixed.0, off, len }, None)
            }
            ProbeKind::NoReadAccess => {
                let off = g.rng.range(0, flen - 1);
                let len = g.rng.range(1, flen - off) as u32;
                let sges = vec![self.land(g, len)];
                self.finish(g, OpKind::Read { src: Seg { mr: fixed.0, off, len } }, sges, len)
            }
            ProbeKind::NoAtomicAccess => {
                let word = Seg { mr: fixed.0, off: 8 * g.rng.range(0, flen / 8 - 1), len: 8 };
                let sges = vec![self.land(g, 8)];
                let add = g.rng.u64();
                self.finish(g, OpKind::FetchAdd { word, add, counter: None }, sges, 8)
            }
            ProbeKind::RecvTooSmall => {
                let len = g.rng.range(1, u64::from(3 * self.mtu)) as u32;
                let sges = self.src_pieces(g, len);
                self.finish(g, OpKind::Send, sges, len)
            }
        };
        let bad_op = ops.len();
        ops.push(bad);
        for _ in 0..g.rng.usize(0, 2) {
            let c = *g.rng.pick(&[Choice::Send, Choice::Write]);
            ops.push(self.op(g, c));
        }
        Stream { qp: self.req, ops, probe: Some(Probe { bad_op, kind }) }
    }

    fn op(&mut self, g: &mut Gen<'_>, c: Choice) -> Op {
        match c {
            Choice::Send | Choice::SendImm | Choice::SendInv => {
                let len = self.msg_len(g);
                let kind = match c {
                    Choice::Send => OpKind::Send,
                    Choice::SendImm => OpKind::SendImm { imm: g.rng.u32() },
                    _ => {
                        let target = match self.open_inv.take() {
                            Some((r, _)) => r,
                            None => self.new_region(g, MrKind::Inv).0,
                        };
                        OpKind::SendInv { target }
                    }
                };
                let sges = self.src_pieces(g, len);
                self.finish(g, kind, sges, len)
            }
            Choice::Write | Choice::WriteImm => {
                let imm = (c == Choice::WriteImm).then(|| g.rng.u32());
                let dst = self.write_dst(g);
                self.write_to(g, dst, imm)
            }
            Choice::Read => {
                let len = self.msg_len(g);
                let src_len = g.plan.hosts[self.sh].mrs[SRC].len as u64;
                let off = g.rng.range(0, src_len - u64::from(len));
                let src = Seg { mr: MrRef { host: self.sh, mr: SRC }, off, len };
                let sges =
                    split(g.rng, len, self.cap.max_send_sge).into_iter().map(|l| self.land(g, l)).collect();
                self.finish(g, OpKind::Read { src }, sges, len)
            }
            Choice::CmpSwap => {
                let i = self.word(g);
                let (word, cur) = self.words[i];
                let compare = if g.rng.chance(0.5) { cur } else { cur ^ g.rng.range(1, u64::MAX) };
                let swap = g.rng.u64();
                if compare == cur {
                    self.words[i].1 = swap;
                }
                let sges = vec![self.land(g, 8)];
                self.finish(g, OpKind::CmpSwap { word, compare, swap }, sges, 8)
            }
            Choice::FetchAdd => {
                let kind = if g.rng.chance(0.5) {
                    let c = self.counter(g);
                    let add = loop {
                        let a = g.rng.range(1, 1 << 24);
                        if g.counter_adds[c].insert(a) {
                            break a;
                        }
                    };
                    OpKind::FetchAdd { word: g.plan.counters[c].word, add, counter: Some(c) }
                } else {
                    let i = self.word(g);
                    let add = g.rng.u64();
                    self.words[i].1 = self.words[i].1.wrapping_add(add);
                    OpKind::FetchAdd { word: self.words[i].0, add, counter: None }
                };
                let sges = vec![self.land(g, 8)];
                self.finish(g, kind, sges, 8)
            }
        }
    }

    fn write_to(&mut self, g: &mut Gen<'_>, dst: Seg, imm: Option<u32>) -> Op {
        let kind = match imm {
            Some(imm) => OpKind::WriteImm { dst, imm },
            None => OpKind::Write { dst },
        };
        let sges = self.src_pieces(g, dst.len);
        self.finish(g, kind, sges, dst.len)
    }

    /// Where a WRITE goes: mostly this stream's window, sometimes the
    /// region it will invalidate later.
    fn write_dst(&mut self, g: &mut Gen<'_>) -> Seg {
        if self.open_inv.is_none() && g.rng.chance(0.1) {
            self.open_inv = Some(self.new_region(g, MrKind::Inv));
        }
        if let Some((r, ilen)) = self.open_inv {
            if g.rng.chance(0.5) {
                let len = g.rng.range(0, u64::from(ilen)) as u32;
                let off = g.rng.range(0, u64::from(ilen - len));
                return Seg { mr: r, off, len };
            }
        }
        let len = self.msg_len(g);
        let w = *self.window.get_or_insert_with(|| {
            let size = self.max_len + g.rng.range(0, u64::from(self.max_len)) as u32;
            let gap = g.rng.range(0, 64);
            alloc(&mut g.plan.hosts, MrRef { host: self.sh, mr: TGT }, size, gap, 1)
        });
        let off = w.off + g.rng.range(0, u64::from(w.len - len));
        Seg { mr: w.mr, off, len }
    }

    /// A message length: 0, small, up to one MTU, an exact multiple of the
    /// MTU, or up to `max_msg_mtus` MTUs.
    fn msg_len(&mut self, g: &mut Gen<'_>) -> u32 {
        let (mtu, max) = (u64::from(self.mtu), u64::from(self.max_len));
        (match g.rng.below(10) {
            0 => 0,
            1..=3 => g.rng.range(1, 64),
            4..=6 => g.rng.range(65, mtu),
            7 => mtu * g.rng.range(1, max / mtu),
            _ => g.rng.range(mtu + 1, max.max(mtu + 1)),
        })
        .min(max) as u32
    }

    /// SGEs over the requester's source region at random places.
    fn src_pieces(&mut self, g: &mut Gen<'_>, len: u32) -> Vec<Seg> {
        let src_len = g.plan.hosts[self.rh].mrs[SRC].len as u64;
        split(g.rng, len, self.cap.max_send_sge)
            .into_iter()
            .map(|l| {
                let off = g.rng.range(0, src_len - u64::from(l));
                Seg { mr: MrRef { host: self.rh, mr: SRC }, off, len: l }
            })
            .collect()
    }

    /// A fresh range of the requester's landing region.
    fn land(&mut self, g: &mut Gen<'_>, len: u32) -> Seg {
        let gap = g.rng.range(0, 16);
        alloc(&mut g.plan.hosts, MrRef { host: self.rh, mr: LAND }, len, gap, 1)
    }

    /// Index of one of this stream's atomic words (made on first use).
    fn word(&mut self, g: &mut Gen<'_>) -> usize {
        if self.words.is_empty() || (self.words.len() < 2 && g.rng.chance(0.2)) {
            let seg =
                alloc(&mut g.plan.hosts, MrRef { host: self.sh, mr: ATOM }, 8, 8 * g.rng.range(0, 2), 8);
            let init = g.rng.u64();
            g.init_writes.push((seg.mr, seg.off, init.to_ne_bytes().to_vec()));
            self.words.push((seg, init));
        }
        g.rng.usize(0, self.words.len() - 1)
    }

    /// A shared counter on the responder's host (one or two per host).
    fn counter(&mut self, g: &mut Gen<'_>) -> usize {
        let have = &g.host_counters[self.sh];
        if have.is_empty() || (have.len() < 2 && g.rng.chance(0.3)) {
            let word =
                alloc(&mut g.plan.hosts, MrRef { host: self.sh, mr: ATOM }, 8, 8 * g.rng.range(0, 2), 8);
            let init = g.rng.below(1 << 40);
            g.init_writes.push((word.mr, word.off, init.to_ne_bytes().to_vec()));
            g.host_counters[self.sh].push(g.plan.counters.len());
            g.plan.counters.push(SharedCounter { word, init });
            g.counter_adds.push(Default::default());
        }
        let have = &g.host_counters[self.sh];
        have[g.rng.usize(0, have.len() - 1)]
    }

    /// A new region of 8 to 512 bytes on the responder (to be invalidated,
    /// or for a probe).
    fn new_region(&mut self, g: &mut Gen<'_>, kind: MrKind) -> (MrRef, u32) {
        let len = (g.rng.range(8, 512) as u32).next_multiple_of(8);
        let mrs = &mut g.plan.hosts[self.sh].mrs;
        mrs.push(MrPlan { kind, len: len as usize, buf_off: 0, iova: 0 });
        (MrRef { host: self.sh, mr: mrs.len() - 1 }, len)
    }

    fn finish(&mut self, g: &mut Gen<'_>, kind: OpKind, sges: Vec<Seg>, len: u32) -> Op {
        let data_out = matches!(
            kind,
            OpKind::Send
                | OpKind::SendImm { .. }
                | OpKind::SendInv { .. }
                | OpKind::Write { .. }
                | OpKind::WriteImm { .. }
        );
        let sends = matches!(kind, OpKind::Send | OpKind::SendImm { .. } | OpKind::SendInv { .. });
        Op {
            wr_id: g.wr_id(),
            kind,
            sges,
            len,
            signaled: g.rng.chance(0.75),
            inline: data_out && len <= self.cap.max_inline_data && g.rng.chance(0.3),
            fence: g.rng.chance(0.1),
            solicited: sends && g.rng.chance(0.2),
            post_at: self.timing.next(g.rng),
        }
    }
}
