//! `roce sim replay TRACE.parquet`: a recorded training job replayed
//! (`roce-replay`): the what-if straggler slowdown S with its
//! decompositions, then the job's communication taken from an analytic
//! fabric, healthy and with one degraded access link.
//!
//! The metadata (parallelism) comes from `--meta`, else from
//! `meta-X.yaml` beside `trace-X.parquet`, else from the trace itself.
//! `--reference RESULT.json` (the published analysis' output) prints the
//! per-step times beside the published ones.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use roce_replay::comm::{replay_with, AllReduce, AnalyticFabric, CommModel, DegradedLink, Recorded};
use roce_replay::whatif::{mean, WhatIf};
use roce_replay::{read_trace, Job, JobMeta};

use super::SimCliError;

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The trace (parquet, one row per operation).
    pub trace: PathBuf,
    /// The job's parallelism (default: meta-X.yaml beside trace-X.parquet,
    /// else inferred from the trace).
    #[arg(long, value_name = "META.yaml")]
    pub meta: Option<PathBuf>,
    /// A published result (result-X.json) to print the per-step times
    /// beside.
    #[arg(long, value_name = "RESULT.json")]
    pub reference: Option<PathBuf>,
    /// Print every step's times.
    #[arg(long)]
    pub per_step: bool,
    /// Access-link rate of the analytic fabric, Gb/s.
    #[arg(long, value_name = "GBPS", default_value_t = 100.0)]
    pub link_gbps: f64,
    /// Per-step latency α of the analytic fabric, microseconds.
    #[arg(long, value_name = "US", default_value_t = 5.0)]
    pub alpha_us: f64,
    /// All-reduce algorithm of the analytic fabric: ring or tree.
    #[arg(long, default_value = "ring")]
    pub algorithm: String,
    /// The rank whose access link is degraded (default: the first worker).
    #[arg(long, value_name = "RANK")]
    pub degrade_rank: Option<u32>,
    /// The degraded link's rate as a fraction of the nominal one.
    #[arg(long, value_name = "F", default_value_t = 0.5)]
    pub degrade_fraction: f64,
}

/// The metadata file beside a trace: `trace-X.parquet` -> `meta-X.yaml`.
fn meta_beside(trace: &Path) -> Option<PathBuf> {
    let stem = trace.file_stem()?.to_str()?;
    let name = stem.strip_prefix("trace-")?;
    let p = trace.with_file_name(format!("meta-{name}.yaml"));
    p.is_file().then_some(p)
}

pub fn cmd_replay(args: &ReplayArgs) -> Result<ExitCode, SimCliError> {
    let algorithm = match args.algorithm.as_str() {
        "ring" => AllReduce::Ring,
        "tree" => AllReduce::Tree,
        other => return Err(SimCliError::Usage(format!("--algorithm {other:?}: ring or tree"))),
    };
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !(positive(args.link_gbps) && args.alpha_us.is_finite() && args.alpha_us >= 0.0) {
        return Err(SimCliError::Usage("--link-gbps must be > 0 and --alpha-us >= 0".into()));
    }
    if !(positive(args.degrade_fraction) && args.degrade_fraction <= 1.0) {
        return Err(SimCliError::Usage("--degrade-fraction must be in (0, 1]".into()));
    }
    let ops = read_trace(&args.trace)?;
    let n_ops = ops.len();
    let (meta, meta_from) = match args.meta.clone().or_else(|| meta_beside(&args.trace)) {
        Some(p) => (JobMeta::read(&p)?, p.display().to_string()),
        None => (JobMeta::infer(&ops), "inferred from the trace".to_string()),
    };
    let job = Job::build(ops, meta)?;
    if let Some(rank) = args.degrade_rank.filter(|r| !job.workers.iter().any(|w| w.rank == *r)) {
        return Err(SimCliError::Usage(format!("--degrade-rank {rank}: no such rank in the trace")));
    }
    let w = WhatIf::analyze(&job)?;
    println!(
        "trace {}: {n_ops} operations, {} workers, {} steps; dp {} x pp {} x tp {}{} (vpp {}), {meta_from}",
        args.trace.display(),
        job.workers.len(),
        job.steps.len(),
        meta.dp_size,
        meta.pp_size,
        meta.tp_size,
        if meta.dsp_size > 1 { format!(" x dsp {}", meta.dsp_size) } else { String::new() },
        meta.vpp_size
    );
    let check = w.base.iter().zip(&w.replayed).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    println!("replay check: recorded durations and launch delays reproduce every step within {check:.2e} s");
    println!(
        "mean step time (s): base {:.4}  no-delay {:.4}  no-blocking {:.4}",
        mean(&w.base),
        mean(&w.nodelay),
        mean(&w.noblk)
    );
    println!("launch slowdown  mean(base)/mean(no-delay)          = {:.4}", w.launch_slowdown());
    println!("straggler slowdown S = mean(no-delay)/mean(no-blocking) = {:.4}", w.slowdown());
    println!(
        "  (typical durations over the whole trace, as published; with each step's own: no-blocking {:.4}, \
         S = {:.4})",
        mean(&w.noblk_step),
        w.slowdown_within_steps()
    );
    println!("\ntypical duration per op type (s; mean for compute, median transfer time for communication):");
    for (k, t) in &w.typical {
        println!("  {:<28} {t:>9.5}", k.name());
    }
    let d = w.decompose(&job)?;
    println!("\nS with only these operations' stragglers kept:");
    println!("  {:<28} {:>7}", "op type", "S");
    for (l, s) in &d.by_optype {
        println!("  {l:<28} {s:>7.4}");
    }
    println!("  {:<28} {:>7}", "dp_rank", "S");
    for (l, s) in &d.by_dp_rank {
        println!("  {l:<28} {s:>7.4}");
    }
    println!("  {:<28} {:>7}", "stage", "S");
    for (l, s) in &d.by_stage {
        println!("  {l:<28} {s:>7.4}");
    }
    if args.per_step || args.reference.is_some() {
        print_steps(&w, args.reference.as_deref())?;
    }
    network(&job, &w, args, algorithm)?;
    Ok(ExitCode::SUCCESS)
}

/// The published per-step times of a result file.
struct Reference {
    base: BTreeMap<i64, f64>,
    nodelay: BTreeMap<i64, f64>,
    noblk: BTreeMap<i64, f64>,
    s: f64,
}

fn read_reference(path: &Path) -> Result<Reference, SimCliError> {
    let text = std::fs::read_to_string(path).map_err(super::io_err(path))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|source| SimCliError::Summary { path: path.into(), source })?;
    let bad = |what: &str| SimCliError::Usage(format!("{}: {what}", path.display()));
    let steps = |key: &str| -> Result<BTreeMap<i64, f64>, SimCliError> {
        let obj = v.get(key).and_then(|o| o.as_object()).ok_or_else(|| bad(&format!("no object `{key}`")))?;
        obj.iter()
            .map(|(k, t)| {
                let step = k.parse().map_err(|_| bad(&format!("`{key}`: step {k:?} is not a number")))?;
                let t = t.as_f64().ok_or_else(|| bad(&format!("`{key}`.{k} is not a number")))?;
                Ok((step, t))
            })
            .collect()
    };
    Ok(Reference {
        base: steps("step_t_base")?,
        nodelay: steps("step_t_nodelay")?,
        noblk: steps("step_t_noblk")?,
        s: v.get("blocking_slowdown")
            .and_then(|s| s.as_f64())
            .ok_or_else(|| bad("no `blocking_slowdown`"))?,
    })
}

fn print_steps(w: &WhatIf, reference: Option<&Path>) -> Result<(), SimCliError> {
    let r = reference.map(read_reference).transpose()?;
    println!("\nper step (s){}:", if r.is_some() { ", ours | published" } else { "" });
    print!("  {:>6} {:>9} {:>9} {:>9}", "step", "base", "no-delay", "no-blk");
    if r.is_some() {
        print!(" | {:>9} {:>9} {:>9}", "base", "no-delay", "no-blk");
    }
    println!();
    let mut worst: f64 = 0.0;
    for (i, step) in w.steps.iter().enumerate() {
        print!("  {step:>6} {:>9.4} {:>9.4} {:>9.4}", w.base[i], w.nodelay[i], w.noblk[i]);
        if let Some(r) = &r {
            let get = |m: &BTreeMap<i64, f64>| m.get(step).copied().unwrap_or(f64::NAN);
            let (b, n, k) = (get(&r.base), get(&r.nodelay), get(&r.noblk));
            worst =
                worst.max((b - w.base[i]).abs()).max((n - w.nodelay[i]).abs()).max((k - w.noblk[i]).abs());
            print!(" | {b:>9.4} {n:>9.4} {k:>9.4}");
        }
        println!();
    }
    if let Some(r) = r {
        println!(
            "  largest per-step difference {worst:.2e} s; S {:.4} vs published {:.4} ({:+.2}%)",
            w.slowdown(),
            r.s,
            (w.slowdown() / r.s - 1.0) * 100.0
        );
    }
    Ok(())
}

/// What the network adds: the job with its communication from the
/// analytic fabric, healthy and with one link degraded.
fn network(job: &Job, w: &WhatIf, args: &ReplayArgs, algorithm: AllReduce) -> Result<(), SimCliError> {
    let healthy =
        AnalyticFabric::calibrated(job, args.link_gbps * 1e9 / 8.0, args.alpha_us * 1e-6, algorithm);
    let rank = args.degrade_rank.unwrap_or(job.workers[0].rank);
    let link = |rank| Some(DegradedLink { rank, fraction: args.degrade_fraction });
    let degraded = healthy.with_degraded(link(rank));
    println!("\ncommunication from a model: {}", healthy.describe());
    println!(
        "  (the trace has no byte counts: each communication type's size is the one whose ring cost at \
         {} Gb/s equals its median recorded transfer time)",
        args.link_gbps
    );
    let sizes: Vec<String> =
        healthy.bytes.iter().map(|(k, b)| format!("{} {:.3} MB", k.name(), b / 1e6)).collect();
    println!("  derived sizes per rank: {}", sizes.join(", "));
    println!("  {:<44} {:>12} {:>12}", "mean step time (s)", "as recorded", "straggler-free");
    let typical = Some(&w.typical);
    let models: [(&str, &dyn CommModel); 3] =
        [("recorded communication", &Recorded), ("analytic fabric, healthy", &healthy), ("", &degraded)];
    let mut rows = Vec::new();
    for (name, m) in models {
        let a = mean(&replay_with(job, m, None)?);
        let b = mean(&replay_with(job, m, typical)?);
        let name = if name.is_empty() {
            format!("rank {rank}'s link at {:.0}%", args.degrade_fraction * 100.0)
        } else {
            name.to_string()
        };
        println!("  {name:<44} {a:>12.4} {b:>12.4}");
        rows.push((a, b));
    }
    println!(
        "  degraded vs healthy: {:+.2}% (compute as recorded), {:+.2}% (straggler-free compute)",
        (rows[2].0 / rows[1].0 - 1.0) * 100.0,
        (rows[2].1 / rows[1].1 - 1.0) * 100.0
    );
    // each rank's link in turn, summarised per stage
    println!("  each rank's link degraded in turn (straggler-free compute), per stage:");
    for stage in 0..job.meta.pp_size {
        let mut changes = Vec::new();
        for wk in job.workers.iter().filter(|w| w.stage == stage) {
            let m = healthy.with_degraded(link(wk.rank));
            changes.push((wk.rank, mean(&replay_with(job, &m, typical)?) / rows[1].1 - 1.0));
        }
        changes.sort_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(lo), Some(hi)) = (changes.first(), changes.last()) {
            println!(
                "    stage {stage}: {:+.2}% (rank {}) .. {:+.2}% (rank {})",
                lo.1 * 100.0,
                lo.0,
                hi.1 * 100.0,
                hi.0
            );
        }
    }
    Ok(())
}
