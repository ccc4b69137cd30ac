//! A run's summary as JSON, for people and scripts:
//!
//! ```json
//! { "name": "incast", "seed": 1,
//!   "ending": "completed",            // stop_time, deadlock, stalled, or null (not ended)
//!   "end_ps": 600000000,
//!   "flows": { "total": 7, "done": 7, "failed": 0 },
//!   "fct_ns": { "p50": .., "p95": .., "p99": .., "max": .., "mean": .. },   // null when no flow finished
//!   "pfc_pauses_received": { "host": 3, "switch": 0 },
//!   "pfc_resumes_received": { "host": 3, "switch": 0 },
//!   "watchdog": { "firings": 0, "log": [ { "time_ps": .., "node": "S0", "port": 3, "peer": "S1", "priority": 3 } ] },
//!   "deadlock": null,                // or { "at_ps": .., "cycle": ["S0", "S1", "S2"], "queues": [ {..} ] }
//!   "counters": { ..every field of Counters.. } }
//! ```
//!
//! Percentiles are nearest-rank: the p-th is the smallest FCT that at
//! least p % of the finished flows do not exceed. FCTs are in nanoseconds
//! (fractional: the simulator counts picoseconds). Pauses and resumes are
//! the PFC frames received, counted by the receiver's kind.

use serde_json::{json, Value};

use crate::report::{Ending, QueueRef, Report};
use crate::scenario::peer_of;
use crate::scenario::{Scenario, Time};

/// The summary of `report`, a run of `scn` (format in the module docs).
pub fn summary_json(scn: &Scenario, report: &Report) -> Value {
    let name = |n: usize| scn.nodes.get(n).map_or_else(|| format!("node{n}"), |s| s.name.clone());
    let queue = |q: &QueueRef| {
        json!({
            "node": name(q.node),
            "port": q.port,
            "peer": peer_of(scn, q.node, q.port).map(name),
            "priority": q.priority,
        })
    };
    let mut fcts: Vec<Time> = report.fct.iter().map(|r| r.fct_ps).collect();
    fcts.sort_unstable();
    let ns = |ps: Time| ps as f64 / 1000.0;
    let fct = if fcts.is_empty() {
        Value::Null
    } else {
        let mean = fcts.iter().map(|&f| f as f64).sum::<f64>() / fcts.len() as f64 / 1000.0;
        json!({
            "p50": ns(percentile(&fcts, 50.0)),
            "p95": ns(percentile(&fcts, 95.0)),
            "p99": ns(percentile(&fcts, 99.0)),
            "max": ns(*fcts.last().expect("not empty")),
            "mean": mean,
        })
    };
    let count = |pause: bool, switch: bool| {
        report.pfc.iter().filter(|r| r.pause == pause && r.is_switch == switch).count()
    };
    let (ending, deadlock) = match &report.ending {
        None => (Value::Null, Value::Null),
        Some(Ending::Completed) => (json!("completed"), Value::Null),
        Some(Ending::StopTime) => (json!("stop_time"), Value::Null),
        Some(Ending::Stalled) => (json!("stalled"), Value::Null),
        Some(Ending::Deadlock { at_ps, cycle }) => (
            json!("deadlock"),
            json!({
                "at_ps": at_ps,
                "cycle": cycle.iter().map(|q| name(q.node)).collect::<Vec<_>>(),
                "queues": cycle.iter().map(queue).collect::<Vec<_>>(),
            }),
        ),
    };
    json!({
        "name": scn.name,
        "seed": scn.seed,
        "ending": ending,
        "end_ps": report.end_ps,
        "flows": {
            "total": scn.flows.len(),
            "done": report.fct.len(),
            "failed": report.counters.flows_failed,
        },
        "fct_ns": fct,
        "pfc_pauses_received": { "host": count(true, false), "switch": count(true, true) },
        "pfc_resumes_received": { "host": count(false, false), "switch": count(false, true) },
        "watchdog": {
            "firings": report.watchdog_log.len(),
            "log": report.watchdog_log.iter().map(|(t, q)| {
                let mut v = queue(q);
                v["time_ps"] = json!(t);
                v
            }).collect::<Vec<_>>(),
        },
        "deadlock": deadlock,
        "counters": serde_json::to_value(report.counters).expect("counters serialise"),
    })
}

/// Nearest-rank percentile of sorted, non-empty `xs`.
fn percentile(xs: &[Time], p: f64) -> Time {
    let rank = ((p / 100.0) * xs.len() as f64).ceil() as usize;
    xs[rank.clamp(1, xs.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Counters, FctRecord, PfcRecord};
    use crate::scenario::PS_PER_US;

    fn fct(flow: usize, fct_ps: Time) -> FctRecord {
        FctRecord { flow, src: 0, dst: 1, sport: 49152, dport: 4791, size: 1000, start_ps: 0, fct_ps }
    }

    fn pfc(is_switch: bool, pause: bool) -> PfcRecord {
        PfcRecord { time_ps: 0, node: 0, is_switch, port: 1, priority: 3, pause }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let xs: Vec<Time> = (1..=100).collect();
        assert_eq!(percentile(&xs, 50.0), 50);
        assert_eq!(percentile(&xs, 95.0), 95);
        assert_eq!(percentile(&xs, 99.0), 99);
        assert_eq!(percentile(&xs, 100.0), 100);
        assert_eq!(percentile(&xs, 0.0), 1);
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(percentile(&[1, 2, 3], 50.0), 2);
    }

    #[test]
    fn summarises_a_deadlocked_ring() {
        let scn = crate::builtin::scenario("deadlock-ring").unwrap();
        let (s0, s1, s2) = (6, 7, 8);
        assert_eq!(scn.nodes[s0].name, "S0");
        // Ring egresses clockwise: S0:3 faces S1, S1:4 faces S2, S2:4 faces S0.
        let q = |node, port| QueueRef { node, port, priority: 3 };
        let report = Report {
            fct: (0..4).map(|i| fct(i, (i as Time + 1) * PS_PER_US)).collect(),
            pfc: vec![pfc(true, true), pfc(true, true), pfc(true, false), pfc(false, true)],
            counters: Counters { flows_failed: 1, watchdog_fired: 1, ..Counters::default() },
            ending: Some(Ending::Deadlock {
                at_ps: 100 * PS_PER_US,
                cycle: vec![q(s0, 3), q(s1, 4), q(s2, 4)],
            }),
            end_ps: 100 * PS_PER_US,
            watchdog_log: vec![(5, q(s1, 4))],
            ..Report::default()
        };
        let v = summary_json(&scn, &report);
        assert_eq!(v["name"], "deadlock-ring");
        assert_eq!(v["seed"], 1);
        assert_eq!(v["ending"], "deadlock");
        assert_eq!(v["end_ps"], 100_000_000);
        assert_eq!(v["flows"], json!({ "total": 6, "done": 4, "failed": 1 }));
        assert_eq!(
            v["fct_ns"],
            json!({ "p50": 2000.0, "p95": 4000.0, "p99": 4000.0, "max": 4000.0, "mean": 2500.0 })
        );
        assert_eq!(v["pfc_pauses_received"], json!({ "host": 1, "switch": 2 }));
        assert_eq!(v["pfc_resumes_received"], json!({ "host": 0, "switch": 1 }));
        assert_eq!(v["watchdog"]["firings"], 1);
        assert_eq!(
            v["watchdog"]["log"][0],
            json!({ "time_ps": 5, "node": "S1", "port": 4, "peer": "S2", "priority": 3 })
        );
        assert_eq!(v["deadlock"]["cycle"], json!(["S0", "S1", "S2"]));
        assert_eq!(v["deadlock"]["at_ps"], 100_000_000);
        assert_eq!(
            v["deadlock"]["queues"][2],
            json!({ "node": "S2", "port": 4, "peer": "S0", "priority": 3 })
        );
        assert_eq!(v["counters"]["watchdog_fired"], 1);
        assert_eq!(v["counters"]["flows_failed"], 1);
    }

    #[test]
    fn summarises_an_empty_run() {
        let scn = crate::builtin::scenario("incast").unwrap();
        let v = summary_json(&scn, &Report::default());
        assert_eq!(v["ending"], Value::Null);
        assert_eq!(v["fct_ns"], Value::Null);
        assert_eq!(v["deadlock"], Value::Null);
        assert_eq!(v["flows"], json!({ "total": 7, "done": 0, "failed": 0 }));
        assert_eq!(v["watchdog"], json!({ "firings": 0, "log": [] }));
        for (ending, word) in
            [(Ending::Completed, "completed"), (Ending::StopTime, "stop_time"), (Ending::Stalled, "stalled")]
        {
            let r = Report { ending: Some(ending), ..Report::default() };
            assert_eq!(summary_json(&scn, &r)["ending"], word);
        }
    }
}
