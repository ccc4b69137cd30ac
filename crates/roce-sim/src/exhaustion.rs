//! Telling a legitimate retry exhaustion from an engine bug.
//!
//! Over lossy links RETRY_EXC_ERR is the right outcome when the requester
//! sent the same request retry_cnt + 1 times and no response to it got
//! through (each copy, or every answer to it, was lost or corrupted; IBTA
//! vol. 1 §9.7.6.1.3). The checker cannot see that, so the soak re-runs a
//! failing seed with the full packet trace and counts it as an exhausted
//! run, not a failure, only if every RETRY_EXC_ERR in it is explained so.

use roce_proto::WcStatus;
use roce_wire::{Psn, RocePacket, RocePacketRepr, Syndrome};

use crate::net::trace::{Fate, TraceMode, TraceRecord};
use crate::run::{simulate, Config};

/// BTH fields of a recorded datagram as it was sent (a corrupted copy is
/// recorded as delivered; its flipped bit is flipped back): (request?, dest
/// QP, PSN).
fn bth(r: &TraceRecord) -> Option<(bool, u32, Psn)> {
    let mut bytes = r.bytes.clone();
    if let Fate::Corrupted { bit } = r.fate {
        *bytes.get_mut(bit as usize / 8)? ^= 0x80 >> (bit % 8);
    }
    let p = RocePacket::new_checked(&bytes[..]).ok()?;
    Some((p.opcode_info().request, p.bth().dest_qp(), p.bth().psn()))
}

/// Whether a response lets the requester get past `stuck`: it covers a
/// later PSN, or `stuck` itself other than as a NAK. A PSN sequence-error
/// NAK at `stuck` asks for `stuck` again (go-back-N, IBTA §9.7.5.2.5); an
/// RNR NAK there only delays it (§9.7.5.2.8).
fn progresses(bytes: &[u8], stuck: Psn) -> bool {
    let Ok(p) = RocePacketRepr::parse(bytes) else { return false };
    let nak = matches!(p.ext.aeth.map(|a| a.syndrome), Some(Syndrome::Nak(_) | Syndrome::RnrNak { .. }));
    if p.bth.psn == stuck {
        !nak
    } else {
        !p.bth.psn.is_before(stuck)
    }
}

/// If every RETRY_EXC_ERR of the seed is a legitimate exhaustion, says why
/// for each; `None` if there is none or one is not explained.
pub fn explain(seed: u64, cfg: &Config) -> Option<String> {
    let run = simulate(seed, &Config { trace: TraceMode::Full, ..cfg.clone() });
    let live = run.live.as_ref()?;
    let recs = run.net.trace().records();
    let errs: Vec<_> = run
        .observed
        .completions
        .iter()
        .filter(|c| !c.is_recv() && c.wc.status == WcStatus::RetryExcErr)
        .collect();
    if errs.is_empty() {
        return None;
    }
    let mut why = Vec::new();
    for e in errs {
        let qpn = e.wc.qp_num;
        let qi = live.qpns.iter().position(|&q| q == qpn)?;
        let conn = run.plan.qps[qi].conn?;
        let peer = live.qpns[conn.peer];
        // Original copies of this QP's requests, sent before the failure.
        let sent: Vec<(&TraceRecord, Psn)> = recs
            .iter()
            .filter(|r| r.from == e.host && r.copy == 0 && r.sent <= e.at)
            .filter_map(|r| match bth(r) {
                Some((true, q, psn)) if q == peer => Some((r, psn)),
                _ => None,
            })
            .collect();
        // The stuck request: the PSN sent most often.
        let mut best: Option<(Psn, usize)> = None;
        for &(_, p) in &sent {
            let n = sent.iter().filter(|(_, q)| *q == p).count();
            if best.is_none_or(|(_, m)| n > m) {
                best = Some((p, n));
            }
        }
        let (stuck, n) = best?;
        let need = usize::from(conn.retry_cnt) + 1;
        if n < need {
            return None;
        }
        let copies: Vec<_> = sent.iter().filter(|(_, p)| *p == stuck).collect();
        let from = copies[copies.len() - need].0.sent;
        // An intact response past the stuck PSN, or at it but no NAK,
        // that arrived in the meantime would have let the requester
        // progress.
        let answered = recs.iter().any(|r| {
            r.to == Some(e.host)
                && r.fate == Fate::Delivered
                && r.arrive.is_some_and(|t| t >= from && t <= e.at)
                && matches!(bth(r), Some((false, q, _)) if q == qpn)
                && progresses(&r.bytes, stuck)
        });
        if answered {
            return None;
        }
        why.push(format!(
            "host {} QP {qpn:#x}: PSN {} sent {n} times, retry_cnt {}, no response got through",
            e.host, stuck, conn.retry_cnt
        ));
    }
    Some(why.join("; "))
}
