//! Whole-run rules: liveness (the run quiesces with every send WR posted and
//! every send queue empty by the mix's heal bound, within the event bound,
//! and no QP is in error but where a probe or a retry exhaustion puts it),
//! the engines' counters agree with the network (every corrupted copy was
//! dropped by its ICRC, every delivered or injected copy was received,
//! every injected CNP reached its QP, nothing misrouted or unauthenticated),
//! and async events happen only where the plan provokes errors.

use std::collections::BTreeSet;

use roce_proto::{AsyncEvent, QpState, WcStatus};

use super::findings::{FailureKind, Findings};
use super::Ctx;
use crate::net::RunEnd;

/// The run ended with nothing on the wire: idle, or stopped at the heal
/// bound with only timers left (a reaction point raises its rate back to
/// the line rate on a timer, long after its QP went idle; an outstanding
/// WR is caught by the per-QP check).
fn quiet(ctx: &Ctx<'_>) -> bool {
    match ctx.end {
        RunEnd::Idle => true,
        RunEnd::TimeLimit => {
            ctx.net.stats().in_flight() == 0 && (!ctx.net.switched() || ctx.net.frames_in_fabric() == 0)
        }
        RunEnd::EventLimit => false,
    }
}

pub fn check_liveness(ctx: &Ctx<'_>, f: &mut Findings) {
    let net = ctx.net;
    let mix = &ctx.plan.mix;
    if !quiet(ctx) {
        f.fail(
            FailureKind::Liveness,
            format!(
                "{:?} at t={}ns after {} events with {} still pending (faults end at {}ns, heal bound {}ns)",
                ctx.end,
                net.now().0,
                net.stats().events,
                net.pending(),
                mix.faults_end().0,
                mix.deadline.0
            ),
        );
    }
    if ctx.unposted > 0 {
        f.fail(
            FailureKind::Liveness,
            format!("{} send WRs never found room in their send queue", ctx.unposted),
        );
    }
    for (i, q) in ctx.plan.qps.iter().enumerate() {
        let qpn = ctx.live.qpns[i];
        let e = net.engine(q.host);
        let n = e.sq_outstanding(qpn);
        if n > 0 {
            let a = e.query_qp(qpn).ok();
            f.fail(
                FailureKind::Liveness,
                format!(
                    "host {} QP {qpn:#x} ({:?}) state {:?} has {n} send WRs outstanding (sq_psn {:?})",
                    q.host,
                    q.qp_type,
                    e.qp_state(qpn),
                    a.map(|a| a.sq_psn.value())
                ),
            );
        }
    }
    if let Some(d) = net.deadlock() {
        f.fail(FailureKind::Liveness, format!("the switched fabric deadlocked: {d}"));
    }
    check_error_states(ctx, f);
}

/// A QP ends in the error state only where a probe puts it (its remote
/// error, or the retries its requester spends on a responder that went
/// mute), or where its requester exhausted its retries (RETRY_EXC_ERR,
/// which the soak accepts only when the trace shows every copy of the
/// stuck request, or every answer to it, lost: `exhaustion`). Anything
/// else broke a healed connection.
fn check_error_states(ctx: &Ctx<'_>, f: &mut Findings) {
    let (plan, live) = (ctx.plan, ctx.live);
    let probe_qps: BTreeSet<usize> = plan
        .streams
        .iter()
        .filter(|s| s.probe.is_some())
        .flat_map(|s| [s.qp, plan.qps[s.qp].conn.expect("probe is RC").peer])
        .collect();
    let exhausted: BTreeSet<(usize, u32)> = ctx
        .completions
        .iter()
        .filter(|c| c.wc.status == WcStatus::RetryExcErr)
        .map(|c| (c.host, c.wc.qp_num))
        .collect();
    for (i, q) in plan.qps.iter().enumerate() {
        let qpn = live.qpns[i];
        let e = ctx.net.engine(q.host);
        if e.qp_state(qpn) != Some(QpState::Err) || probe_qps.contains(&i) {
            continue;
        }
        if !exhausted.contains(&(q.host, qpn)) {
            f.fail(
                FailureKind::Liveness,
                format!(
                    "host {} QP {qpn:#x} ({:?}) is in error with no fault to justify it",
                    q.host, q.qp_type
                ),
            );
        }
    }
}

pub fn check_counters(ctx: &Ctx<'_>, f: &mut Findings) {
    let net = ctx.net;
    let st = net.stats();
    let mut sum = roce_proto::Counters::default();
    for h in 0..net.host_count() {
        let e = net.engine(h);
        let c = e.counters();
        sum.sent_pkts += c.sent_pkts;
        sum.rcvd_pkts += c.rcvd_pkts;
        sum.icrc_errors += c.icrc_errors;
        sum.cnp_sent += c.cnp_sent;
        sum.cnp_rcvd += c.cnp_rcvd;
        sum.ecn_ce_rcvd += c.ecn_ce_rcvd;
        for (name, v) in c.iter() {
            let must_be_zero = matches!(
                name,
                "malformed_dropped"
                    | "unknown_qp_dropped"
                    | "transport_mismatch_dropped"
                    | "addr_mismatch_dropped"
                    | "pkey_violation_dropped"
                    | "qkey_violation_dropped"
                    | "crypto_auth_failed"
                    | "cnp_dropped"
            );
            if must_be_zero && v != 0 {
                f.fail(FailureKind::Accounting, format!("engine {:?} counted {name} = {v}", e.config().gids));
            }
        }
    }
    // PFC on every priority: a switch never drops.
    if st.switch_drops != 0 {
        f.fail(FailureKind::Accounting, format!("the lossless switches dropped {} frames", st.switch_drops));
    }
    if sum.sent_pkts != st.sent {
        f.fail(
            FailureKind::Accounting,
            format!("engines sent {} packets, the network carried {}", sum.sent_pkts, st.sent),
        );
    }
    if quiet(ctx) {
        if sum.icrc_errors != st.corrupted {
            f.fail(
                FailureKind::Accounting,
                format!(
                    "{} corrupted copies delivered but {} ICRC errors counted",
                    st.corrupted, sum.icrc_errors
                ),
            );
        }
        let came = st.delivered + st.corrupted + st.injected;
        if sum.rcvd_pkts != came {
            f.fail(
                FailureKind::Accounting,
                format!("{came} copies delivered or injected but {} received", sum.rcvd_pkts),
            );
        }
        // Only a switch marks CE (none on the mesh): a notification point
        // answers CE-marked packets only (Annex A17.9.2), no more CE marks
        // arrive than the switches made, and every CNP received is one the
        // mix injected or an engine's the links delivered intact.
        if sum.cnp_sent > sum.ecn_ce_rcvd
            || sum.ecn_ce_rcvd > st.ce_marked
            || sum.cnp_rcvd != st.injected + st.cnps_delivered
        {
            f.fail(
                FailureKind::Accounting,
                format!(
                    "{} CNPs injected, {} delivered, {} received; {} sent for {} CE marks received, {} made",
                    st.injected, st.cnps_delivered, sum.cnp_rcvd, sum.cnp_sent, sum.ecn_ce_rcvd, st.ce_marked
                ),
            );
        }
    }
}

pub fn check_events(ctx: &Ctx<'_>, f: &mut Findings) {
    let plan = ctx.plan;
    let probe_qps: BTreeSet<(usize, u32)> = plan
        .streams
        .iter()
        .filter(|s| s.probe.is_some())
        .flat_map(|s| {
            let q = &plan.qps[s.qp];
            let peer = q.conn.expect("probe is RC").peer;
            [(q.host, ctx.live.qpns[s.qp]), (plan.qps[peer].host, ctx.live.qpns[peer])]
        })
        .collect();
    for &(host, ev) in ctx.events {
        let ok = match ev {
            AsyncEvent::QpFatal(q) | AsyncEvent::QpReqErr(q) | AsyncEvent::QpAccessErr(q) => {
                probe_qps.contains(&(host, q))
            }
            _ => false,
        };
        if !ok {
            f.fail(FailureKind::Event, format!("host {host}: unexpected {ev:?}"));
        }
    }
}
