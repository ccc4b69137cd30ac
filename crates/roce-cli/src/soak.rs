//! `roce soak`: runs the fault-injection harness (`roce-harness`) over a range
//! of seeds: random verbs workloads on simulated hosts over faulty links,
//! each run checked against a shadow model. Prints a progress line while it
//! runs and a summary at the end; every failure names its seed, and
//! `--start SEED --seeds 1` replays it alone.
//!
//! Exit status: 0 when every seed passes, 1 when some seed fails, 2 on bad
//! arguments or when a pcap cannot be written.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use roce_harness::net::trace::describe;
use roce_harness::net::{pcap::write_pcap, TraceMode};
use roce_harness::{soak, Config, SoakOptions, Summary};

#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// Number of seeds to run.
    #[arg(long, default_value_t = 1000)]
    pub seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    pub start: u64,
    /// Largest loss probability of a link (each faulty link draws in [0, P]).
    #[arg(long, value_name = "P")]
    pub loss: Option<f64>,
    /// Largest fraction of packets delayed out of order.
    #[arg(long, value_name = "P")]
    pub reorder: Option<f64>,
    /// Largest duplication probability.
    #[arg(long, value_name = "P")]
    pub duplicate: Option<f64>,
    /// Largest probability of a flipped bit.
    #[arg(long, value_name = "P")]
    pub corrupt: Option<f64>,
    /// Fraction of runs with perfect links.
    #[arg(long, value_name = "P")]
    pub clean_runs: Option<f64>,
    /// Most hosts per run.
    #[arg(long)]
    pub max_hosts: Option<usize>,
    /// Most RC QP pairs per run.
    #[arg(long)]
    pub max_pairs: Option<usize>,
    /// Most send WRs per RC stream.
    #[arg(long)]
    pub max_ops: Option<usize>,
    /// Largest message in path MTUs.
    #[arg(long)]
    pub max_msg_mtus: Option<u32>,
    /// No UD QPs.
    #[arg(long)]
    pub no_ud: bool,
    /// No shared receive queues.
    #[arg(long)]
    pub no_srq: bool,
    /// No late receive WRs (RNR storms).
    #[arg(long)]
    pub no_rnr: bool,
    /// No invalidated-R_Key probe.
    #[arg(long)]
    pub no_probe: bool,
    /// IPv4 only.
    #[arg(long)]
    pub no_ipv6: bool,
    /// Stop at the first failing seed.
    #[arg(long)]
    pub fail_fast: bool,
    /// Write the packet trace of each failing seed to DIR/seed-N.pcap (with
    /// `--seeds 1`, of that seed whatever its outcome).
    #[arg(long, value_name = "DIR")]
    pub pcap_dir: Option<PathBuf>,
    /// With `--seeds 1`: print that seed's packet trace, one line per copy.
    #[arg(long)]
    pub trace: bool,
    /// Print every kept failure in full (default: the first 3).
    #[arg(long)]
    pub verbose: bool,
    /// Seconds between progress lines (0: none).
    #[arg(long, default_value_t = 2.0)]
    pub progress: f64,
}

impl SoakArgs {
    /// The run configuration these arguments describe.
    pub fn config(&self) -> Result<Config, String> {
        let mut c = Config::default();
        let w = &mut c.workload;
        let f = &mut w.faults;
        for (v, slot, name) in [
            (self.loss, &mut f.max_loss, "--loss"),
            (self.reorder, &mut f.max_reorder, "--reorder"),
            (self.duplicate, &mut f.max_duplicate, "--duplicate"),
            (self.corrupt, &mut f.max_corrupt, "--corrupt"),
            (self.clean_runs, &mut f.clean_runs, "--clean-runs"),
        ] {
            if let Some(p) = v {
                if !(0.0..=1.0).contains(&p) {
                    return Err(format!("{name} must be a probability in [0, 1], not {p}"));
                }
                *slot = p;
            }
        }
        if let Some(n) = self.max_hosts {
            if n < 2 {
                return Err("--max-hosts must be at least 2".into());
            }
            w.hosts = (w.hosts.0.min(n), n);
        }
        if let Some(n) = self.max_pairs {
            w.rc_pairs = (w.rc_pairs.0.min(n), n);
        }
        if let Some(n) = self.max_ops {
            w.ops_per_stream = (w.ops_per_stream.0.min(n), n);
        }
        if let Some(n) = self.max_msg_mtus {
            w.max_msg_mtus = n.max(1);
        }
        if self.no_ud {
            w.ud_msgs = 0;
        }
        w.srq &= !self.no_srq;
        w.rnr_storms &= !self.no_rnr;
        w.probe &= !self.no_probe;
        w.ipv6 &= !self.no_ipv6;
        c.trace = TraceMode::Hash;
        Ok(c)
    }
}

pub fn run(args: &SoakArgs) -> ExitCode {
    let cfg = match args.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("roce soak: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = SoakOptions { fail_fast: args.fail_fast, keep_failures: 50 };
    let every = Duration::from_secs_f64(args.progress.max(0.0));
    let mut last = Instant::now();
    let s = soak(args.start, args.seeds, &cfg, opts, |s| {
        if args.progress > 0.0 && last.elapsed() >= every {
            last = Instant::now();
            eprintln!("{}", progress_line(s, args.seeds));
        }
    });
    print_summary(&s, args);
    let mut status = if s.failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    if args.trace && args.seeds == 1 {
        let run = roce_harness::simulate(args.start, &Config { trace: TraceMode::Full, ..cfg.clone() });
        for r in run.net.trace().records() {
            println!("{}", describe(r));
        }
    }
    if let Some(dir) = &args.pcap_dir {
        let seeds: Vec<u64> = if args.seeds == 1 { vec![args.start] } else { s.failed_seeds.clone() };
        for seed in seeds {
            if let Err(e) = dump_pcap(dir, seed, &cfg) {
                eprintln!("roce soak: {e}");
                status = ExitCode::from(2);
            }
        }
    }
    status
}

fn progress_line(s: &Summary, total: u64) -> String {
    let rate = s.seeds as f64 / s.wall.as_secs_f64().max(1e-9);
    let eta = (total.saturating_sub(s.seeds)) as f64 / rate.max(1e-9);
    format!(
        "soak: {}/{total} seeds, {} passed, {} failed, {:.0} seeds/s, {} packets, eta {:.0}s",
        s.seeds, s.passed, s.failed, rate, s.totals.packets, eta
    )
}

fn print_summary(s: &Summary, args: &SoakArgs) {
    let t = &s.totals;
    let mut out = std::io::stdout().lock();
    let shown = if args.verbose { s.failures.len() } else { s.failures.len().min(3) };
    for f in &s.failures[..shown] {
        let _ = writeln!(out, "{f}\n");
    }
    let _ = writeln!(
        out,
        "soak seeds {}..{}: {} run, {} passed, {} failed in {:.1}s",
        args.start,
        args.start.saturating_add(s.seeds),
        s.seeds,
        s.passed,
        s.failed,
        s.wall.as_secs_f64()
    );
    for (seed, why) in &s.exhausted {
        let _ = writeln!(out, "  seed {seed}: legitimate retry exhaustion, not counted as a failure: {why}");
    }
    let _ = writeln!(
        out,
        "  passing runs: {} send WRs, {} completions, {} packets ({} lost, {} corrupted, {} duplicated), \
         {} RNR NAKs, {} sequence NAKs, {} timeouts, {} probes, {} full-queue waits, {:.1} simulated s",
        t.send_wrs,
        t.completions,
        t.packets,
        t.lost,
        t.corrupted,
        t.duplicated,
        t.rnr_naks,
        t.seq_naks,
        t.timeouts,
        t.probes,
        t.queue_full,
        t.sim_ns as f64 / 1e9
    );
    let d = &s.drawn;
    let pct = |n: u64| 100.0 * n as f64 / (s.seeds.max(1)) as f64;
    let _ = writeln!(
        out,
        "  seed mix: congestion control {} ({:.1}%: {} hosts, {} CNPs injected, {} rate cuts), \
         encryption {} ({:.1}%: {} QPs), faults ending then a heal phase {} ({:.1}%), \
         link blackouts {} ({:.1}%), all of CC + encryption + heal {} ({:.1}%), \
         a switched fabric {} ({:.1}%: {} with two switches, {} CE marks on {} seeds, \
         {} CNPs from the engines, {} PFC pauses on {} seeds), \
         a device cap on request bytes {} ({:.1}%: {} waits on {} seeds)",
        d.cc,
        pct(d.cc),
        d.cc_hosts,
        d.cnps,
        d.rate_cuts,
        d.crypto,
        pct(d.crypto),
        d.crypto_qps,
        d.healed,
        pct(d.healed),
        d.blackouts,
        pct(d.blackouts),
        d.all,
        pct(d.all),
        d.switched,
        pct(d.switched),
        d.two_switches,
        d.ce_marks,
        d.ce_seeds,
        d.own_cnps,
        d.pfc_pauses,
        d.pfc_seeds,
        d.capped,
        pct(d.capped),
        d.budget_waits,
        d.budget_wait_seeds
    );
    if s.failed > 0 {
        let list: Vec<String> = s.failed_seeds.iter().take(50).map(|x| x.to_string()).collect();
        let more = if s.failed_seeds.len() > 50 { " ..." } else { "" };
        let _ = writeln!(out, "  failed seeds: {}{more}", list.join(" "));
        let _ = writeln!(out, "  replay one: roce soak --start SEED --seeds 1 --verbose [--pcap-dir DIR]");
    }
}

fn dump_pcap(dir: &std::path::Path, seed: u64, cfg: &Config) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut cfg = cfg.clone();
    cfg.trace = TraceMode::Full;
    let run = roce_harness::simulate(seed, &cfg);
    let path = dir.join(format!("seed-{seed}.pcap"));
    let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    write_pcap(run.net.trace().records(), std::io::BufWriter::new(file))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("wrote {} ({} frames)", path.display(), run.net.trace().records().len());
    Ok(())
}
