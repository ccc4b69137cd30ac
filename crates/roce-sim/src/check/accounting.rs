//! Whole-run rules: liveness (the run quiesces with every send WR posted and
//! every send queue empty within the time and event bounds), the engines' counters agree with the
//! network (every corrupted copy was dropped by its ICRC, every delivered
//! copy was received, nothing misrouted), and async events happen only
//! where the plan provokes errors.

use std::collections::BTreeSet;

use roce_proto::AsyncEvent;

use super::findings::{FailureKind, Findings};
use super::Ctx;
use crate::net::RunEnd;

pub fn check_liveness(ctx: &Ctx<'_>, f: &mut Findings) {
    let net = ctx.net;
    if ctx.end != RunEnd::Idle {
        f.fail(
            FailureKind::Liveness,
            format!(
                "{:?} at t={}ns after {} events with {} still pending",
                ctx.end,
                net.now().0,
                net.stats().events,
                net.pending()
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
        for (name, v) in c.iter() {
            let must_be_zero = matches!(
                name,
                "malformed_dropped"
                    | "unknown_qp_dropped"
                    | "transport_mismatch_dropped"
                    | "addr_mismatch_dropped"
                    | "pkey_violation_dropped"
                    | "qkey_violation_dropped"
            );
            if must_be_zero && v != 0 {
                f.fail(FailureKind::Accounting, format!("engine {:?} counted {name} = {v}", e.config().gids));
            }
        }
    }
    if sum.sent_pkts != st.sent {
        f.fail(
            FailureKind::Accounting,
            format!("engines sent {} packets, the network carried {}", sum.sent_pkts, st.sent),
        );
    }
    if ctx.end == RunEnd::Idle {
        if sum.icrc_errors != st.corrupted {
            f.fail(
                FailureKind::Accounting,
                format!(
                    "{} corrupted copies delivered but {} ICRC errors counted",
                    st.corrupted, sum.icrc_errors
                ),
            );
        }
        if sum.rcvd_pkts != st.delivered + st.corrupted {
            f.fail(
                FailureKind::Accounting,
                format!("{} copies delivered but {} received", st.delivered + st.corrupted, sum.rcvd_pkts),
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
