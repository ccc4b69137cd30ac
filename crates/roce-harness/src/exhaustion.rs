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
//! The rule read from the trace, for some PSN the requester sent (the
//! stuck one): after the last response the QP received at or before that
//! PSN (any kind; responses past it are ignored as out of sequence, a
//! READ's answer past a gap), the requester sent the stuck request
//! retry_cnt times, or retry_cnt + 1 times when no send of it before that
//! response was already timed (it was first sent after it, no response
//! came at all, or the response was an RNR NAK, after which the resend
//! is not a retry, §9.7.5.2.8); and no plain ACK past it arrived since
//! (it would acknowledge the stuck request, unless that is a READ or an
//! atomic, whose answer it then reports lost). A READ resumed mid-message
//! carries a PSN inside the range of its first send, which counts as a
//! send of it.

use roce_proto::{Instant, WcStatus};
use roce_wire::{Psn, RocePacket, RocePacketRepr, Syndrome};

use crate::net::trace::{without_protection, Fate, TraceMode, TraceRecord};
use crate::run::{simulate, Config};

/// The datagram as it was sent: a corrupted copy is recorded as delivered
/// with its flipped bit, flipped back here; an encrypted QP's packet is
/// read by its clear headers.
fn as_sent(r: &TraceRecord) -> Option<Vec<u8>> {
    let mut bytes = r.bytes.clone();
    if let Fate::Corrupted { bit } = r.fate {
        *bytes.get_mut(bit as usize / 8)? ^= 0x80 >> (bit % 8);
    }
    without_protection(&bytes)
}

/// BTH fields of a recorded datagram as it was sent: (request?, dest QP,
/// PSN).
fn bth(r: &TraceRecord) -> Option<(bool, u32, Psn)> {
    let bytes = as_sent(r)?;
    let p = RocePacket::new_checked(&bytes[..]).ok()?;
    Some((p.opcode_info().request, p.bth().dest_qp(), p.bth().psn()))
}

/// BTH opcodes of an RC RDMA READ request and an RC ACKNOWLEDGE.
const RC_RDMA_READ_REQUEST: u8 = 0x0c;
const RC_ACKNOWLEDGE: u8 = 0x11;

/// The last PSN a request covers: its own, or for an RDMA READ request
/// the last of its responses' (one per path MTU of the length asked,
/// IBTA §9.7.4.1.4): a READ resumed after part of its answer came is sent
/// again with a PSN inside that range.
fn last_psn(r: &TraceRecord, psn: Psn, mtu: usize) -> Psn {
    let parsed = as_sent(r).and_then(|b| RocePacketRepr::parse(&b).ok().map(|p| (p.bth.opcode, p.ext.reth)));
    match parsed {
        Some((RC_RDMA_READ_REQUEST, Some(reth))) => {
            let n = (reth.dma_len as usize).div_ceil(mtu.max(1)).max(1);
            psn.add(n as u32 - 1)
        }
        _ => psn,
    }
}

/// Whether a request is an RDMA READ or an atomic (its answer carries data).
fn reads_or_atomic(r: &TraceRecord) -> bool {
    as_sent(r).and_then(|b| b.first().copied()).is_some_and(|op| matches!(op, 0x0c | 0x13 | 0x14))
}

/// A response that reached the QP before its failure.
struct Heard {
    at: Instant,
    psn: Psn,
    /// An ACKNOWLEDGE that is no NAK: it acknowledges every request
    /// before its PSN, coalesced (IBTA §9.7.5.1.1).
    plain_ack: bool,
    /// An RNR NAK: the resend after it is not a retry.
    rnr_nak: bool,
    /// A PSN sequence error NAK: it asks for its PSN again, no answer to
    /// the request there (IBTA §9.7.5.2.5).
    seq_nak: bool,
}

impl Heard {
    fn new(at: Instant, psn: Psn, bytes: &[u8]) -> Heard {
        let parsed = without_protection(bytes).and_then(|b| {
            let p = RocePacketRepr::parse(&b).ok()?;
            Some((p.bth.opcode, p.ext.aeth?.syndrome))
        });
        let syndrome = parsed.map(|(_, s)| s);
        Heard {
            at,
            psn,
            plain_ack: matches!(parsed, Some((RC_ACKNOWLEDGE, Syndrome::Ack { .. }))),
            rnr_nak: matches!(syndrome, Some(Syndrome::RnrNak { .. })),
            seq_nak: matches!(syndrome, Some(Syndrome::Nak(roce_wire::NakCode::PsnSequenceError))),
        }
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
        // Responses that reached the QP before the failure.
        let heard: Vec<Heard> = recs
            .iter()
            .filter(|r| r.to == Some(e.host) && r.fate == Fate::Delivered)
            .filter_map(|r| Some((r, r.arrive.filter(|&t| t <= e.at)?)))
            .filter_map(|(r, t)| match bth(r) {
                Some((false, q, psn)) if q == qpn => Some(Heard::new(t, psn, &r.bytes)),
                _ => None,
            })
            .collect();
        let mtu = conn.mtu.bytes();
        let mut psns: Vec<Psn> = sent.iter().map(|&(_, p)| p).collect();
        psns.sort_unstable_by_key(|p| p.value());
        psns.dedup();
        let found = psns.into_iter().find_map(|stuck| {
            // The chain of retries starts at the last response at or
            // before the stuck PSN (progress resets the count, §9.7.6.1.3;
            // a READ response past a gap does not answer it), but for a
            // sequence error NAK at the stuck PSN itself, which answers
            // nothing there: it only asks for it again.
            let last = heard
                .iter()
                .filter(|h| !stuck.is_before(h.psn) && (h.psn != stuck || !h.seq_nak))
                .max_by_key(|h| h.at);
            let from = last.map(|h| h.at);
            let after = |r: &TraceRecord| from.is_none_or(|t| r.sent > t);
            // A plain ACK past the stuck PSN after that acknowledges it,
            // unless it is a READ or an atomic, which need their own answer
            // (an ACK past one says it was lost, §9.7.5.1.2).
            let needs_answer = sent.iter().any(|(r, p)| *p == stuck && reads_or_atomic(r));
            let acked = !needs_answer
                && heard
                    .iter()
                    .any(|h| from.is_none_or(|t| h.at > t) && stuck.is_before(h.psn) && h.plain_ack);
            let n = sent.iter().filter(|(r, p)| *p == stuck && after(r)).count();
            // A send of the stuck request before the chain, or of a READ
            // whose range holds its PSN, already ran the ACK timer; an RNR
            // NAK's resend is not a retry (§9.7.5.2.8).
            let timed_before = sent
                .iter()
                .any(|(r, p)| !after(r) && !stuck.is_before(*p) && !last_psn(r, *p, mtu).is_before(stuck));
            let rnr = last.is_some_and(|h| h.rnr_nak);
            let need = usize::from(conn.retry_cnt) + usize::from(!timed_before || rnr);
            (!acked && n >= need).then_some((stuck, n))
        });
        let (stuck, n) = found?;
        why.push(format!(
            "host {} QP {qpn:#x}: PSN {} sent {n} times after the last response, retry_cnt {}, \
             no response got through",
            e.host, stuck, conn.retry_cnt
        ));
    }
    Some(why.join("; "))
}
