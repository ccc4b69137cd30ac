//! Many seeds in a row: a progress callback after each, and a summary with
//! the failures (each with its seed, so that it can be replayed alone).

use crate::run::{run_seed, Config, Failure, Report};

/// How many seeds drew each feature of the mix (every seed run counts,
/// whatever its outcome).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drawn {
    /// Seeds with congestion control on some host.
    pub cc: u64,
    /// Seeds with encrypted QPs.
    pub crypto: u64,
    /// Seeds whose faults ended, followed by a heal phase.
    pub healed: u64,
    /// Seeds with link blackouts.
    pub blackouts: u64,
    /// Seeds with congestion control, encryption and a heal phase at once.
    pub all: u64,
    /// Seeds on a switched fabric, those with two switches, the frames
    /// the switches marked CE (and the seeds with any) and the CNPs the
    /// engines sent.
    pub switched: u64,
    pub two_switches: u64,
    pub ce_marks: u64,
    pub ce_seeds: u64,
    /// PFC pauses the switches sent, and the seeds that met one.
    pub pfc_pauses: u64,
    pub pfc_seeds: u64,
    pub own_cnps: u64,
    /// Hosts with congestion control, encrypted QPs, injected CNPs and
    /// the rate cuts they caused, over all seeds.
    pub cc_hosts: u64,
    pub crypto_qps: u64,
    pub cnps: u64,
    pub rate_cuts: u64,
    /// Seeds with a device that caps its unacknowledged request bytes,
    /// those whose QPs waited under the cap, and the waits.
    pub capped: u64,
    pub budget_wait_seeds: u64,
    pub budget_waits: u64,
}

impl Drawn {
    fn add(&mut self, r: &Report) {
        let m = &r.mix;
        self.cc += u64::from(m.cc_hosts > 0);
        self.crypto += u64::from(m.crypto_qps > 0);
        self.healed += u64::from(m.healed);
        self.blackouts += u64::from(m.blackouts > 0);
        self.all += u64::from(m.cc_hosts > 0 && m.crypto_qps > 0 && m.healed);
        self.cc_hosts += m.cc_hosts as u64;
        self.crypto_qps += m.crypto_qps as u64;
        self.cnps += m.cnps as u64;
        self.rate_cuts += m.rate_cuts;
        self.switched += u64::from(m.switches > 0);
        self.two_switches += u64::from(m.switches > 1);
        self.ce_marks += m.ce_marks;
        self.ce_seeds += u64::from(m.ce_marks > 0);
        self.pfc_pauses += m.pfc_pauses;
        self.pfc_seeds += u64::from(m.pfc_pauses > 0);
        self.own_cnps += m.own_cnps;
        self.capped += u64::from(m.capped_hosts > 0);
        self.budget_wait_seeds += u64::from(m.budget_waits > 0);
        self.budget_waits += m.budget_waits;
    }
}

/// Totals over the passing runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub send_wrs: u64,
    pub completions: u64,
    pub packets: u64,
    pub lost: u64,
    pub corrupted: u64,
    pub duplicated: u64,
    pub rnr_naks: u64,
    pub seq_naks: u64,
    pub timeouts: u64,
    pub probes: u64,
    pub queue_full: u64,
    /// Simulated nanoseconds.
    pub sim_ns: u64,
}

impl Totals {
    fn add(&mut self, r: &Report) {
        self.send_wrs += r.send_wrs as u64;
        self.completions += r.completions as u64;
        self.packets += r.net.sent;
        self.lost += r.net.lost;
        self.corrupted += r.net.corrupted;
        self.duplicated += r.net.duplicated;
        self.rnr_naks += r.rnr_naks;
        self.seq_naks += r.seq_naks;
        self.timeouts += r.timeouts;
        self.probes += u64::from(r.probe);
        self.queue_full += r.queue_full;
        self.sim_ns += r.end.0;
    }
}

/// Options of a soak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoakOptions {
    /// Stop at the first failure.
    pub fail_fast: bool,
    /// Failures kept in full (all are counted).
    pub keep_failures: usize,
}

impl Default for SoakOptions {
    fn default() -> Self {
        SoakOptions { fail_fast: false, keep_failures: 20 }
    }
}

/// The state after each seed.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Seeds run so far.
    pub seeds: u64,
    pub passed: u64,
    pub failed: u64,
    /// Runs whose only fault is a legitimate retry exhaustion (see
    /// `exhaustion`): not failures, and not counted as passed either.
    pub exhausted: Vec<(u64, String)>,
    /// The first failures (up to `keep_failures`), in seed order.
    pub failures: Vec<Failure>,
    /// Seeds of every failure.
    pub failed_seeds: Vec<u64>,
    pub totals: Totals,
    /// The seed mix.
    pub drawn: Drawn,
    pub wall: std::time::Duration,
}

/// Records a legitimate retry exhaustion of `seed`, if that is what it is.
fn explained(seed: u64, cfg: &Config, s: &mut Summary) -> bool {
    match crate::exhaustion::explain(seed, cfg) {
        Some(why) => {
            s.exhausted.push((seed, why));
            true
        }
        None => false,
    }
}

/// Runs seeds `start..start + count`, calling `progress` after each.
pub fn soak(
    start: u64,
    count: u64,
    cfg: &Config,
    opts: SoakOptions,
    mut progress: impl FnMut(&Summary),
) -> Summary {
    let t0 = std::time::Instant::now();
    let mut s = Summary {
        seeds: 0,
        passed: 0,
        failed: 0,
        exhausted: Vec::new(),
        failures: Vec::new(),
        failed_seeds: Vec::new(),
        totals: Totals::default(),
        drawn: Drawn::default(),
        wall: std::time::Duration::ZERO,
    };
    for seed in start..start.saturating_add(count) {
        s.seeds += 1;
        let result = run_seed(seed, cfg);
        s.drawn.add(result.as_ref().unwrap_or_else(|f| &f.report));
        match result {
            Ok(r) => {
                s.passed += 1;
                s.totals.add(&r);
            }
            // Any RETRY_EXC_ERR, even one the checks accept (a probe's):
            // a stream that stopped early leaves its later effects
            // missing, and only the trace can tell why it stopped.
            Err(f) if f.report.retry_exhausted > 0 && explained(seed, cfg, &mut s) => {}
            Err(f) => {
                s.failed += 1;
                s.failed_seeds.push(seed);
                if s.failures.len() < opts.keep_failures {
                    s.failures.push(f);
                }
            }
        }
        s.wall = t0.elapsed();
        progress(&s);
        if opts.fail_fast && s.failed > 0 {
            break;
        }
    }
    s
}
