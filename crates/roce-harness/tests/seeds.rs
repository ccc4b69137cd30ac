//! The reliability soak that runs in `cargo test`: many seeds of mixed
//! workloads (every RC operation, UD, SRQ, inline, several SGEs, PSN wrap,
//! RNR storms, the invalidated-R_Key probe) over links with up to 10% loss,
//! reordering, duplication and corruption, with the seed mix (DCQCN and
//! CNPs, encryption, blackouts, faults that end and a heal phase). Every run must pass every check
//! of `roce_harness::check`; a failure prints the seed and what broke.
//!
//! `ROCE_HARNESS_SEEDS=N` runs N seeds instead (e.g. for a longer local soak).

use roce_harness::{soak, Config, SoakOptions};

/// Seeds run by default (debug build: about 30 s on two busy cores).
const SEEDS: u64 = 2000;

#[test]
fn two_thousand_seeds_pass_every_check() {
    let n = std::env::var("ROCE_HARNESS_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(SEEDS);
    let cfg = Config { trace: roce_harness::net::TraceMode::Off, ..Config::default() };
    assert!(cfg.workload.faults.max_loss >= 0.10 && cfg.workload.rnr_storms && cfg.workload.ud_msgs > 0);
    let s = soak(0, n, &cfg, SoakOptions { fail_fast: false, keep_failures: usize::MAX }, |_| {});
    eprintln!(
        "{} seeds in {:.1}s: {} passed, {} failed; {} packets, {} lost, {} corrupted, \
         {} RNR NAKs, {} sequence NAKs, {} timeouts, {} probes",
        s.seeds,
        s.wall.as_secs_f64(),
        s.passed,
        s.failed,
        s.totals.packets,
        s.totals.lost,
        s.totals.corrupted,
        s.totals.rnr_naks,
        s.totals.seq_naks,
        s.totals.timeouts,
        s.totals.probes
    );
    let text: Vec<String> = s.failures.iter().map(|f| f.to_string()).collect();
    let seeds: Vec<u64> = s.failures.iter().map(|f| f.seed).collect();
    assert!(s.failed == 0, "{} seeds failed: {seeds:?}\n{}", s.failed, text.join("\n\n"));
    // The faults the test is about did happen.
    let t = s.totals;
    assert!(
        t.lost > 0 && t.corrupted > 0 && t.duplicated > 0 && t.rnr_naks > 0 && t.seq_naks > 0 && t.probes > 0
    );
    // And so did the seed mix: congestion control that cut rates,
    // encryption, blackouts, and faults that ended before a heal phase.
    let d = s.drawn;
    eprintln!("seed mix: {d:?}");
    assert!(d.cc > 0 && d.rate_cuts > 0 && d.crypto > 0 && d.blackouts > 0 && d.healed > 0 && d.all > 0);
}
