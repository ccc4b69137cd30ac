//! Telling a legitimate retry exhaustion from an engine bug.
//!
//! Over lossy links RETRY_EXC_ERR is the right outcome when the requester's
//! ACK timer expired retry_cnt + 1 times in a row with nothing heard from
//! the responder in between: each copy of the stuck request, or every
//! answer to it, was lost or corrupted (IBTA vol. 1 §9.7.6.1.3; any
//! response resets the count, §9.7.6.1.4). The checker cannot see that, so
//! the soak re-runs a failing seed with the full packet trace and counts
//! it as an exhausted run, not a failure, only if every RETRY_EXC_ERR in
//! it is explained so.
//!
//! The rule read from the trace: after the last response the QP received
//! (any PSN, any kind), the requester sent its stuck request (the first
//! it sent after that response) retry_cnt times, or retry_cnt + 1 times
//! when no send of it before that response was already timed (it was
//! first sent after it, no response came at all, or the response was an
//! RNR NAK, after which the resend is not a retry, §9.7.5.2.8).

use roce_proto::WcStatus;
use roce_wire::{Psn, RocePacket, RocePacketRepr, Syndrome};

use crate::net::trace::{without_protection, Fate, TraceMode, TraceRecord};
use crate::run::{simulate, Config};

/// BTH fields of a recorded datagram as it was sent (a corrupted copy is
/// recorded as delivered; its flipped bit is flipped back; an encrypted
/// QP's packet is read by its clear headers): (request?, dest QP, PSN).
fn bth(r: &TraceRecord) -> Option<(bool, u32, Psn)> {
    let mut bytes = r.bytes.clone();
    if let Fate::Corrupted { bit } = r.fate {
        *bytes.get_mut(bit as usize / 8)? ^= 0x80 >> (bit % 8);
    }
    let bytes = without_protection(&bytes)?;
    let p = RocePacket::new_checked(&bytes[..]).ok()?;
    Some((p.opcode_info().request, p.bth().dest_qp(), p.bth().psn()))
}

/// Whether a response is an RNR NAK (the resend after it is not a retry).
fn is_rnr_nak(bytes: &[u8]) -> bool {
    let Some(bytes) = without_protection(bytes) else { return false };
    let Ok(p) = RocePacketRepr::parse(&bytes) else { return false };
    matches!(p.ext.aeth.map(|a| a.syndrome), Some(Syndrome::RnrNak { .. }))
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
        // The last response that reached the QP before the failure.
        let last = recs
            .iter()
            .filter(|r| r.to == Some(e.host) && r.fate == Fate::Delivered)
            .filter(|r| r.arrive.is_some_and(|t| t <= e.at))
            .filter(|r| matches!(bth(r), Some((false, q, _)) if q == qpn))
            .max_by_key(|r| r.arrive);
        let heard = last.and_then(|r| r.arrive);
        let after = |r: &TraceRecord| heard.is_none_or(|t| r.sent > t);
        let stuck = sent.iter().find(|(r, _)| after(r))?.1;
        let n = sent.iter().filter(|(r, p)| *p == stuck && after(r)).count();
        let timed_before = sent.iter().any(|(r, p)| *p == stuck && !after(r));
        let rnr = last.is_some_and(|r| is_rnr_nak(&r.bytes));
        let need = usize::from(conn.retry_cnt) + usize::from(!timed_before || rnr);
        if n < need {
            return None;
        }
        why.push(format!(
            "host {} QP {qpn:#x}: PSN {} sent {n} times after the last response, retry_cnt {}, \
             no response got through",
            e.host, stuck, conn.retry_cnt
        ));
    }
    Some(why.join("; "))
}
