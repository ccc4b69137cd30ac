//! One seeded run: plan, instantiate, simulate, check.
//!
//! The seed is split into independent streams: `plan` (the workload),
//! `net` (link faults), and one per engine (keys, QPNs) drawn by the plan.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use roce_proto::{AsyncEvent, Duration, Instant, WcStatus};

use crate::application::{Application, Completion};
use crate::check::{self, FailureKind, Findings, LedgerTap, UdLedger};
use crate::net::{HostId, Limits, LinkParams, NetStats, Network, RunEnd, TraceMode, Verdict};
use crate::rng::SimRng;
use crate::workload::{self, Live, Params, Plan};

/// Settings of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub workload: Params,
    /// Simulated time by which every QP must be idle.
    pub time_limit: Duration,
    /// Events after which a run counts as livelocked.
    pub max_events: u64,
    pub trace: TraceMode,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            workload: Params::default(),
            time_limit: Duration::from_millis(20_000),
            max_events: 3_000_000,
            trace: TraceMode::Hash,
        }
    }
}

/// What a successful run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub seed: u64,
    pub hosts: usize,
    pub rc_qps: usize,
    pub ud_qps: usize,
    pub send_wrs: usize,
    pub recv_wrs: usize,
    pub completions: usize,
    /// The run included the invalidated-R_Key probe.
    pub probe: bool,
    /// Simulated time when the last event ran.
    pub end: Instant,
    pub net: NetStats,
    /// Fingerprint of the packet trace (`None` with `TraceMode::Off`).
    pub trace_fingerprint: Option<u64>,
    pub rnr_naks: u64,
    pub seq_naks: u64,
    pub timeouts: u64,
    pub duplicate_requests: u64,
    /// Posts that met a full queue and waited.
    pub queue_full: u64,
    /// Send WRs that completed with RETRY_EXC_ERR.
    pub retry_exhausted: usize,
    /// What the seed drew beside its workload.
    pub mix: MixReport,
}

/// The features of a seed's mix (see `workload::mix`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MixReport {
    /// Hosts running DCQCN.
    pub cc_hosts: usize,
    /// Encrypted RC QPs.
    pub crypto_qps: usize,
    /// CNPs injected.
    pub cnps: usize,
    /// Rate cuts the reaction points made.
    pub rate_cuts: u64,
    /// Link blackouts.
    pub blackouts: usize,
    /// The links' faults ended during the run (a faulty seed).
    pub healed: bool,
    /// Switches of the seed's fabric (0: the mesh), the frames they
    /// marked CE, and the CNPs the engines sent in answer.
    pub switches: usize,
    pub ce_marks: u64,
    /// The PFC pauses the switches sent.
    pub pfc_pauses: u64,
    pub own_cnps: u64,
    /// Hosts whose device caps its unacknowledged request bytes, and the
    /// times their QPs waited for room under the cap.
    pub capped_hosts: usize,
    pub budget_waits: u64,
}

/// A run that broke a rule.
#[derive(Debug, Clone)]
pub struct Failure {
    pub seed: u64,
    pub kind: FailureKind,
    pub findings: Findings,
    /// What the run did up to the failure.
    pub report: Box<Report>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {}: {} failure", self.seed, self.kind)?;
        for (k, m) in &self.findings.items {
            writeln!(f, "  [{k}] {m}")?;
        }
        if self.findings.more > 0 {
            writeln!(f, "  ... and {} more", self.findings.more)?;
        }
        let r = &self.report;
        write!(
            f,
            "  run: {} hosts, {} RC + {} UD QPs, {} send + {} recv WRs, probe {}, ended t={}ns, net {:?}",
            r.hosts, r.rc_qps, r.ud_qps, r.send_wrs, r.recv_wrs, r.probe, r.end.0, r.net
        )
    }
}

impl std::error::Error for Failure {}

/// What the application observed during a run.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub completions: Vec<Completion>,
    pub events: Vec<(HostId, AsyncEvent)>,
    /// Verbs calls that were refused.
    pub errors: Vec<String>,
    /// Send WRs still waiting for room in a full queue when the run ended.
    pub unposted: usize,
    /// WRs that met a full queue and waited.
    pub queue_full: u64,
}

/// A finished run with everything needed to inspect (or re-check) it.
pub struct Run {
    pub seed: u64,
    pub plan: Plan,
    pub net: Network,
    /// The verbs objects (`None` if setup failed).
    pub live: Option<Live>,
    pub observed: Observed,
    pub end: RunEnd,
    ledger: Rc<RefCell<UdLedger>>,
    pub result: Result<Report, Failure>,
}

/// The time by which a run must be quiet: the mix's heal bound (just
/// after it, so that an event due at the bound itself still runs).
fn plan_deadline(plan: &Plan) -> Instant {
    Instant(plan.mix.deadline.0.saturating_add(1))
}

/// Runs one seed and checks it.
pub fn run_seed(seed: u64, cfg: &Config) -> Result<Report, Failure> {
    simulate(seed, cfg).result
}

/// Runs one seed and keeps everything (network, trace, memory, completions).
pub fn simulate(seed: u64, cfg: &Config) -> Run {
    let root = SimRng::new(seed);
    let mut plan = workload::generate(&mut root.fork("plan"), &cfg.workload);
    workload::mix::draw(&mut root.fork("mix"), &mut plan, &cfg.workload.mix);
    let mut net = Network::new(root.fork("net"), LinkParams::ideal(Duration::from_micros(1)), cfg.trace);
    if let Some(f) = &plan.mix.fabric {
        net.use_fabric(f.scenario());
    }
    let ledger = Rc::new(RefCell::new(UdLedger::default()));
    net.add_tap(Box::new(LedgerTap(ledger.clone())));
    let dark = plan.mix.blackouts.clone();
    if !dark.is_empty() {
        net.add_rule(Box::new(move |now: Instant, from, to, _: &[u8]| {
            let hit = dark.iter().any(|b| b.link == (from, to) && b.from <= now && now < b.until);
            if hit {
                Verdict::Drop
            } else {
                Verdict::Pass
            }
        }));
    }
    let mut run = Run {
        seed,
        plan,
        net,
        live: None,
        observed: Observed::default(),
        end: RunEnd::Idle,
        ledger,
        result: Ok(Report::default()),
    };
    match workload::setup(&run.plan, &mut run.net) {
        Ok(live) => {
            let mut app = Application::new(&run.plan, &live);
            app.schedule(&mut run.net);
            // The heal bound, or the configured limit if that comes first.
            let until = plan_deadline(&run.plan).min(Instant::ZERO + cfg.time_limit);
            let limits = Limits { until, max_events: cfg.max_events };
            run.end = run.net.run(&mut app, limits);
            app.poll(&mut run.net);
            let unposted = app.unposted_sends();
            run.observed = Observed {
                completions: app.completions,
                events: app.events,
                errors: app.errors,
                unposted,
                queue_full: app.queue_full,
            };
            run.live = Some(live);
            run.result = run.check();
        }
        Err(e) => {
            let mut findings = Findings::default();
            findings.fail(FailureKind::Setup, e);
            let report = Box::new(run.report());
            run.result = Err(Failure { seed, kind: FailureKind::Setup, findings, report });
        }
    }
    run
}

impl Run {
    /// Checks the run as it stands (memory is read now): the same verdict
    /// as `result` unless something was changed since.
    pub fn check(&self) -> Result<Report, Failure> {
        let Some(live) = &self.live else { return self.result.clone() };
        // SAFETY: only this run's engines, in `self.net`, touch this memory,
        // and only inside `&mut Engine` calls; with `&self` none can be in
        // progress, so no access can happen concurrently.
        let actual: Vec<Vec<u8>> = live.hosts.iter().map(|h| unsafe { h.mem.to_vec() }).collect();
        let ledger = self.ledger.borrow();
        let ctx = check::Ctx {
            plan: &self.plan,
            live,
            net: &self.net,
            end: self.end,
            completions: &self.observed.completions,
            events: &self.observed.events,
            unposted: self.observed.unposted,
            ledger: &ledger,
            actual: &actual,
        };
        let mut findings = check::verify(&ctx);
        for e in self.observed.errors.iter().rev() {
            findings.items.insert(0, (FailureKind::Post, e.clone()));
        }
        let report = self.report();
        match findings.kind() {
            None => Ok(report),
            Some(kind) => Err(Failure { seed: self.seed, kind, findings, report: Box::new(report) }),
        }
    }

    /// What the run did.
    pub fn report(&self) -> Report {
        let (plan, net) = (&self.plan, &self.net);
        let mut r = Report {
            seed: self.seed,
            hosts: plan.hosts.len(),
            rc_qps: plan.qps.iter().filter(|q| q.conn.is_some()).count(),
            ud_qps: plan.qps.iter().filter(|q| q.conn.is_none()).count(),
            send_wrs: plan.streams.iter().map(|s| s.ops.len()).sum(),
            recv_wrs: plan.recvs.iter().map(|r| r.wqes.len()).sum(),
            probe: plan.streams.iter().any(|s| s.probe.is_some()),
            completions: self.observed.completions.len(),
            end: net.now(),
            net: net.stats(),
            trace_fingerprint: net.trace().fingerprint(),
            queue_full: self.observed.queue_full,
            retry_exhausted: (self.observed.completions.iter())
                .filter(|c| !c.is_recv() && c.wc.status == WcStatus::RetryExcErr)
                .count(),
            mix: MixReport {
                cc_hosts: plan.mix.cc_hosts(),
                crypto_qps: plan.mix.crypto.len(),
                cnps: plan.mix.cnps.len(),
                rate_cuts: 0,
                blackouts: plan.mix.blackouts.len(),
                healed: plan.mix.heal_at.is_some(),
                switches: plan.mix.fabric.as_ref().map_or(0, |f| f.switches()),
                ce_marks: net.stats().ce_marked,
                pfc_pauses: net.stats().pfc_pauses,
                own_cnps: 0,
                capped_hosts: plan.mix.tx_caps.iter().flatten().count(),
                budget_waits: 0,
            },
            ..Report::default()
        };
        for h in 0..net.host_count() {
            let c = net.engine(h).counters();
            r.rnr_naks += c.send_rnr_err;
            r.seq_naks += c.rcvd_seq_err;
            r.timeouts += c.completer_retry_err;
            r.duplicate_requests += c.duplicate_request;
            r.mix.rate_cuts += c.cc_rate_cuts;
            r.mix.own_cnps += c.cnp_sent;
            r.mix.budget_waits += c.tx_budget_waits;
        }
        r
    }
}
