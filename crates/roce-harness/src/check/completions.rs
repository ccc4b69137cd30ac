//! Work completions.
//!
//! Send side (IBTA §10.7.2.1, §11.4.1): every signalled WR (or every WR of an
//! `sq_sig_all` QP) completes exactly once, successfully, in posting order,
//! with the WR's opcode and length; an unsignalled success completes
//! silently. The probe stream instead ends with one error (remote access
//! on its bad WRITE, or transport retries exhausted once the responder
//! stopped answering) followed by a WR_FLUSH_ERR for every later WR.
//!
//! Receive side of RC (§9.7.5.1, responder executes in PSN order): the k-th
//! message that consumes a receive WR completes the k-th receive WR posted
//! to the QP (any unused WR of an SRQ), with the message's length,
//! immediate data or invalidated R_Key, and the peer's QPN.

use std::collections::{BTreeMap, BTreeSet};

use roce_proto::{WcOpcode, WcStatus, WC_WITH_IMM, WC_WITH_INV};

use super::findings::{FailureKind, Findings};
use super::Ctx;
use crate::application::Completion;
use crate::net::HostId;
use crate::workload::{Op, OpKind, ProbeKind, QpIdx, RecvQueue, Stream};

/// Completions by (host, QPN), send and receive side apart, in poll order.
#[derive(Default)]
pub struct Observed<'c> {
    pub sends: BTreeMap<(HostId, u32), Vec<&'c Completion>>,
    pub recvs: BTreeMap<(HostId, u32), Vec<&'c Completion>>,
}

impl<'c> Observed<'c> {
    pub fn new(all: &'c [Completion]) -> Observed<'c> {
        let mut o = Observed::default();
        for c in all {
            let side = if c.is_recv() { &mut o.recvs } else { &mut o.sends };
            side.entry((c.host, c.wc.qp_num)).or_default().push(c);
        }
        o
    }
}

/// A receive WR (list, index in list) and the message it received
/// (stream, op index); `short` if the buffer was too small for it.
#[derive(Debug, Clone, Copy)]
pub struct RecvMatch {
    pub wqe: (usize, usize),
    pub msg: (usize, usize),
    pub short: bool,
}

/// The ops of a stream the responder executes (all but the probe's tail).
pub fn executed(s: &Stream) -> &[Op] {
    &s.ops[..s.probe.map_or(s.ops.len(), |p| p.bad_op)]
}

/// The ops of a stream that take a receive WR at the responder, and
/// whether that WR is too small (the `RecvTooSmall` probe's SEND).
fn receive_takers(s: &Stream) -> Vec<(usize, bool)> {
    let short = s.probe.filter(|p| p.kind == ProbeKind::RecvTooSmall).map(|p| p.bad_op);
    let mut v: Vec<(usize, bool)> = executed(s)
        .iter()
        .enumerate()
        .filter(|(_, o)| o.kind.consumes_recv())
        .map(|(i, _)| (i, false))
        .collect();
    v.extend(short.map(|i| (i, true)));
    v
}

fn cqe_text(c: &Completion) -> String {
    let w = &c.wc;
    format!(
        "wr {} {:?} {:?} len {} imm {:#x} flags {:#x} src_qp {:#x} (CQ {}, t={}ns)",
        w.wr_id, w.status, w.opcode, w.byte_len, w.imm_data, w.wc_flags, w.src_qp, c.cq, c.at.0
    )
}

/// Why a send CQE does not report a successful `op`.
fn send_mismatch(c: &Completion, op: &Op, qpn: u32, cq: usize) -> Option<String> {
    let w = &c.wc;
    let want = (op.wr_id, WcStatus::Success, op.kind.wc_opcode(), op.len, qpn, cq);
    let got = (w.wr_id, w.status, w.opcode, w.byte_len, w.qp_num, c.cq);
    (want != got).then(|| {
        format!(
            "expected wr {} Success {:?} len {} on CQ {cq}, got {}",
            op.wr_id,
            want.2,
            op.len,
            cqe_text(c)
        )
    })
}

pub fn check_sends(ctx: &Ctx<'_>, obs: &Observed<'_>, f: &mut Findings) {
    let (plan, live) = (ctx.plan, ctx.live);
    let mut with_stream = BTreeSet::new();
    for s in &plan.streams {
        with_stream.insert(s.qp);
        let q = &plan.qps[s.qp];
        let qpn = live.qpns[s.qp];
        let got = obs.sends.get(&(q.host, qpn)).map_or(&[][..], |v| &v[..]);
        let who = format!("host {} QP {qpn:#x} ({:?})", q.host, q.qp_type);
        if s.probe.is_some() {
            check_probe(s, got, qpn, q.send_cq, &who, f);
            continue;
        }
        let want: Vec<&Op> = s.ops.iter().filter(|o| o.signaled || q.sq_sig_all).collect();
        for (k, (c, op)) in got.iter().zip(&want).enumerate() {
            if let Some(m) = send_mismatch(c, op, qpn, q.send_cq) {
                f.fail(FailureKind::Completion, format!("{who} send CQE #{k}: {m}"));
                break;
            }
        }
        if got.len() != want.len() {
            let extra =
                got.get(want.len()).map(|c| format!("; first extra: {}", cqe_text(c))).unwrap_or_default();
            f.fail(
                FailureKind::Completion,
                format!(
                    "{who}: {} send CQEs for {} signalled WRs (of {}){extra}",
                    got.len(),
                    want.len(),
                    s.ops.len()
                ),
            );
        }
    }
    for (i, q) in plan.qps.iter().enumerate() {
        if with_stream.contains(&i) {
            continue;
        }
        if let Some(c) = obs.sends.get(&(q.host, live.qpns[i])).and_then(|v| v.first()) {
            f.fail(
                FailureKind::Completion,
                format!(
                    "host {} QP {:#x} posted nothing but completed {}",
                    q.host,
                    live.qpns[i],
                    cqe_text(c)
                ),
            );
        }
    }
}

/// The probe's completions: successes in order, then one error on some WR
/// `j` (the probe's remote error if `j` is the bad WR; RETRY_EXC_ERR for `j`
/// up to it, when the NAK was lost and the responder, now in error, stays
/// mute), then WR_FLUSH_ERR for every WR after `j`.
fn check_probe(s: &Stream, got: &[&Completion], qpn: u32, cq: usize, who: &str, f: &mut Findings) {
    let probe = s.probe.expect("probe");
    let bad = probe.bad_op;
    let Some(e) = got.iter().position(|c| c.wc.status != WcStatus::Success) else {
        let wr = s.ops[bad].wr_id;
        f.fail(FailureKind::Completion, format!("{who}: the {:?} probe (wr {wr}) did not fail", probe.kind));
        return;
    };
    let err = got[e];
    let Some(j) = s.ops.iter().position(|o| o.wr_id == err.wc.wr_id) else {
        f.fail(
            FailureKind::Completion,
            format!("{who}: error completion for an unknown WR: {}", cqe_text(err)),
        );
        return;
    };
    let ok = match err.wc.status {
        WcStatus::RetryExcErr => j <= bad,
        st => j == bad && st == probe.kind.status(),
    };
    if !ok || err.wc.opcode != s.ops[j].kind.wc_opcode() || err.cq != cq {
        f.fail(
            FailureKind::Completion,
            format!("{who}: {:?} probe: WR #{j} (bad WR is #{bad}) failed as {}", probe.kind, cqe_text(err)),
        );
    }
    let want: Vec<&Op> = s.ops[..j].iter().filter(|o| o.signaled).collect();
    if want.len() != e {
        f.fail(
            FailureKind::Completion,
            format!("{who}: {e} successes before the probe error, {} expected", want.len()),
        );
    }
    for (k, (c, op)) in got[..e].iter().zip(&want).enumerate() {
        if let Some(m) = send_mismatch(c, op, qpn, cq) {
            f.fail(FailureKind::Completion, format!("{who} send CQE #{k}: {m}"));
            return;
        }
    }
    let rest = &got[e + 1..];
    let flushed = &s.ops[j + 1..];
    let same = rest.len() == flushed.len()
        && rest
            .iter()
            .zip(flushed)
            .all(|(c, o)| c.wc.wr_id == o.wr_id && c.wc.status == WcStatus::WrFlushErr);
    if !same {
        let text: Vec<String> = rest.iter().map(|c| cqe_text(c)).collect();
        f.fail(
            FailureKind::Completion,
            format!(
                "{who}: expected {} WR_FLUSH_ERR after the probe error, got [{}]",
                flushed.len(),
                text.join("; ")
            ),
        );
    }
}

/// Checks RC receive completions and returns which receive WR took which
/// message.
pub fn check_rc_recvs(ctx: &Ctx<'_>, obs: &Observed<'_>, f: &mut Findings) -> Vec<RecvMatch> {
    let (plan, live) = (ctx.plan, ctx.live);
    let mut by_wr: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for (l, r) in plan.recvs.iter().enumerate() {
        for (i, w) in r.wqes.iter().enumerate() {
            by_wr.insert(w.wr_id, (l, i));
        }
    }
    let incoming: BTreeMap<QpIdx, usize> = plan
        .streams
        .iter()
        .enumerate()
        .filter_map(|(si, s)| plan.qps[s.qp].conn.map(|c| (c.peer, si)))
        .collect();
    let mut used = BTreeSet::new();
    let mut matches = Vec::new();
    for (r, q) in plan.qps.iter().enumerate() {
        if q.conn.is_none() {
            continue;
        }
        let qpn = live.qpns[r];
        let who = format!("host {} QP {qpn:#x}", q.host);
        let got = obs.recvs.get(&(q.host, qpn)).map_or(&[][..], |v| &v[..]);
        let msgs: Vec<(usize, usize, bool)> = incoming
            .get(&r)
            .map(|&si| {
                receive_takers(&plan.streams[si]).into_iter().map(|(i, short)| (si, i, short)).collect()
            })
            .unwrap_or_default();
        if got.len() != msgs.len() {
            let first =
                got.get(msgs.len()).map(|c| format!("; first extra: {}", cqe_text(c))).unwrap_or_default();
            f.fail(
                FailureKind::Completion,
                format!("{who}: {} receive CQEs for {} messages{first}", got.len(), msgs.len()),
            );
        }
        let list = plan.recvs.iter().position(|l| l.queue == RecvQueue::Qp(r));
        let srq = q
            .srq
            .and_then(|s| plan.recvs.iter().position(|l| l.queue == RecvQueue::Srq { host: q.host, srq: s }));
        for (k, (c, &(si, oi, short))) in got.iter().zip(&msgs).enumerate() {
            let s = &plan.streams[si];
            let op = &s.ops[oi];
            let peer = live.qpns[s.qp];
            let wrong = if short {
                let w = &c.wc;
                let ok = (w.status, w.opcode, w.qp_num, c.cq)
                    == (WcStatus::LocLenErr, WcOpcode::Recv, qpn, q.recv_cq);
                (!ok).then(|| format!("expected LocLenErr Recv (buffer too small), got {}", cqe_text(c)))
            } else {
                recv_mismatch(ctx, c, op, qpn, peer, q.recv_cq)
            };
            if let Some(m) = wrong {
                f.fail(
                    FailureKind::Completion,
                    format!("{who} receive CQE #{k} (message wr {}): {m}", op.wr_id),
                );
                break;
            }
            let wqe = match (list, srq) {
                (Some(l), None) => {
                    plan.recvs[l].wqes.get(k).filter(|w| w.wr_id == c.wc.wr_id).map(|_| (l, k))
                }
                (None, Some(l)) => by_wr.get(&c.wc.wr_id).copied().filter(|&(ll, _)| ll == l),
                _ => None,
            };
            match wqe {
                Some(w) if used.insert(c.wc.wr_id) => {
                    matches.push(RecvMatch { wqe: w, msg: (si, oi), short })
                }
                _ => {
                    f.fail(
                        FailureKind::Completion,
                        format!(
                            "{who} receive CQE #{k}: receive WR {} is not the next posted one (or reused)",
                            c.wc.wr_id
                        ),
                    );
                    break;
                }
            }
        }
    }
    matches
}

/// Why a receive CQE does not report message `op` from QP `peer`.
fn recv_mismatch(ctx: &Ctx<'_>, c: &Completion, op: &Op, qpn: u32, peer: u32, cq: usize) -> Option<String> {
    let (opcode, flags, imm) = match op.kind {
        OpKind::Send => (WcOpcode::Recv, 0, 0),
        OpKind::SendImm { imm } => (WcOpcode::Recv, WC_WITH_IMM, imm),
        OpKind::SendInv { target } => (WcOpcode::Recv, WC_WITH_INV, ctx.live.keys(target).rkey),
        OpKind::WriteImm { imm, .. } => (WcOpcode::RecvRdmaWithImm, WC_WITH_IMM, imm),
        _ => unreachable!("does not consume a receive WR"),
    };
    let w = &c.wc;
    let want = (WcStatus::Success, opcode, op.len, flags, imm, peer, qpn, cq);
    let got = (w.status, w.opcode, w.byte_len, w.wc_flags, w.imm_data, w.src_qp, w.qp_num, c.cq);
    (want != got).then(|| {
        format!(
            "expected Success {opcode:?} len {} flags {flags:#x} imm {imm:#x} src_qp {peer:#x} on CQ {cq}, got {}",
            op.len,
            cqe_text(c)
        )
    })
}
