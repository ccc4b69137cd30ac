//! A point's row: the summary figures of its run, as text, so that two
//! runs of the same point give the same bytes.

use crate::compare::{size_class, SlowdownStats};
use crate::plan::check::{pause_time, slowdowns};
use crate::report::{Ending, Report};
use crate::scenario::{Scenario, Time};

use super::Grid;

/// The figures' columns, after `point` and the axes.
///
/// - `ending`: completed, stop_time, deadlock, stalled; or `invalid` (the
///   scenario rejects the point's settings) or `failed` (the simulation
///   failed), with `error` saying why and no figures;
/// - `flows`, `finished`: flows in the run and finished;
/// - `drops`: frames lost for any reason (buffer, link, watchdog, no
///   route, NIC); `pauses_sent`: PFC XOFF frames sent;
/// - `paused_us`: time queues spent paused, summed over (node, port,
///   priority); `paused_ports`: ports ever paused;
/// - `ecn_marks`, `cnps`;
/// - `fct_p50_us`, `fct_p99_us`: flow completion time;
/// - `slowdown_p50/p95/p99`: FCT over the flow's standalone FCT (clipped
///   below at 1, percentiles as `roce sim compare`), all flows;
/// - `small_p50` .. `large_p99`: slowdown p50/p95/p99 of each size class
///   (`compare::SIZE_CLASSES`: small < 100 KB, medium 100 KB - 1 MB,
///   large >= 1 MB; empty when a class has no finished flow);
/// - `end_us`: simulated time at the end; `packet_hops`.
pub const FIGURES: &[&str] = &[
    "ending",
    "flows",
    "finished",
    "drops",
    "pauses_sent",
    "paused_us",
    "paused_ports",
    "ecn_marks",
    "cnps",
    "fct_p50_us",
    "fct_p99_us",
    "slowdown_p50",
    "slowdown_p95",
    "slowdown_p99",
    "small_p50",
    "small_p95",
    "small_p99",
    "medium_p50",
    "medium_p95",
    "medium_p99",
    "large_p50",
    "large_p95",
    "large_p99",
    "end_us",
    "packet_hops",
    "error",
];

/// Why a point has no figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The scenario rejects the point's settings.
    Invalid,
    /// The simulation failed.
    Failed,
}

/// The table's header: `point`, the axes' names, [`FIGURES`].
pub fn header(grid: &Grid) -> Vec<String> {
    std::iter::once("point".to_string())
        .chain(grid.axes.iter().map(|a| a.name.clone()))
        .chain(FIGURES.iter().map(|s| s.to_string()))
        .collect()
}

fn us(ps: Time) -> String {
    format!("{:.3}", ps as f64 / 1e6)
}

fn ratio(x: Option<f64>) -> String {
    x.map_or_else(String::new, |v| format!("{v:.4}"))
}

/// The figures of a run of `scn` (its [`FIGURES`], in order); `payload`
/// is the IB payload per packet for the standalone FCT.
pub fn figures(scn: &Scenario, report: &Report, payload: u64) -> Vec<String> {
    let c = &report.counters;
    let mut classes: [Vec<f64>; 3] = Default::default();
    let mut all = Vec::with_capacity(report.fct.len());
    for (size, slowdown) in slowdowns(scn, report, payload) {
        classes[size_class(size)].push(slowdown);
        all.push(slowdown);
    }
    let mut fcts: Vec<f64> = report.fct.iter().map(|r| r.fct_ps as f64).collect();
    fcts.sort_by(f64::total_cmp);
    let fct_pct = |p: f64| crate::compare::percentile(&fcts, p).map_or_else(String::new, |ps| us(ps as Time));
    let all = SlowdownStats::of(all);
    let class_stats: Vec<Option<SlowdownStats>> = classes.into_iter().map(SlowdownStats::of).collect();
    let pause = pause_time(report);
    let ending = match &report.ending {
        None => "none",
        Some(Ending::Completed) => "completed",
        Some(Ending::StopTime) => "stop_time",
        Some(Ending::Deadlock { .. }) => "deadlock",
        Some(Ending::Stalled) => "stalled",
    };
    let mut row = vec![
        ending.to_string(),
        scn.flows.len().to_string(),
        report.fct.len().to_string(),
        c.frames_lost().to_string(),
        c.pfc_pause_sent.to_string(),
        us(pause.total_ps),
        pause.ports.to_string(),
        c.ecn_marked.to_string(),
        c.cnps.to_string(),
        fct_pct(0.50),
        fct_pct(0.99),
        ratio(all.as_ref().map(|s| s.p50)),
        ratio(all.as_ref().map(|s| s.p95)),
        ratio(all.as_ref().map(|s| s.p99)),
    ];
    for class in &class_stats {
        row.extend([ratio(class.map(|s| s.p50)), ratio(class.map(|s| s.p95)), ratio(class.map(|s| s.p99))]);
    }
    row.extend([us(report.end_ps), c.packet_hops.to_string(), String::new()]);
    row
}

/// The figures of a point that did not run: `ending` says why, `error`
/// the message, the rest empty.
pub fn unrun(status: Status, error: &str) -> Vec<String> {
    let mut row = vec![String::new(); FIGURES.len()];
    row[0] = match status {
        Status::Invalid => "invalid",
        Status::Failed => "failed",
    }
    .to_string();
    // One line per cell: a table's row stays a row.
    row[FIGURES.len() - 1] = error.replace(['\n', '\r'], " ");
    row
}
