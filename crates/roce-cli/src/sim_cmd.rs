//! `roce sim`: the fabric simulator (`roce-fabric`) from the command line.
//!
//! ```text
//! roce sim hpcc RUN_DIR --topology FILE [--out DIR] [--seed N]
//! roce sim compare RUN_DIR OUT_DIR
//! roce sim baseline [BASELINE_DIR] [--out DIR] [--only NAME]...
//! roce sim run SCENARIO.toml [--out DIR] [--seed N]
//! roce sim run --builtin NAME [--out DIR] [--seed N]
//! ```
//!
//! A run writes `fct.txt`, `pfc.txt` (the HPCC simulator's formats, see
//! `roce_fabric::hpcc::files`) and `summary.json` (`roce_fabric::summary`'s
//! JSON plus `user_cpu_s`, `max_rss_kib`, `wall_s` and
//! `packet_hops_per_cpu_s`) into its output directory, by default
//! `sim-out/<scenario name>` under the current directory (never into the
//! run directory, which may be shared baseline data).
//!
//! Exit status: 0 on success, 1 when a simulation fails, 2 on bad
//! arguments or unreadable/malformed files.

mod progress;
mod run;
mod usage;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use roce_fabric::compare::{compare, CompareError, Comparison};
use roce_fabric::hpcc::{self, HpccConfig, HpccError};
use roce_fabric::summary::summary_json;
use roce_fabric::{simulate, Ending, FabricError, Report, Scenario, PS_PER_S};
use serde_json::json;

use self::usage::{Meter, Usage};

/// Where output goes by default, under the current directory.
const DEFAULT_OUT_ROOT: &str = "sim-out";
/// The baseline data, relative to the directory holding the repository.
const BASELINE_REL: &str = "shared/fabric-sim-baseline";
/// Exit status of a failed simulation.
const EXIT_SIM_FAILED: u8 = 1;
/// Exit status of bad arguments or files.
const EXIT_USAGE: u8 = 2;

#[derive(Debug, clap::Subcommand)]
pub enum SimCommand {
    /// Simulate an HPCC run directory (config.txt + flow list) and write
    /// fct.txt, pfc.txt and summary.json.
    Hpcc(HpccArgs),
    /// Compare a baseline run directory with ours (fct.txt and pfc.txt of
    /// each): FCT ratios, slowdown percentiles per size bin, PFC counts.
    Compare(CompareArgs),
    /// Simulate every run of the HPCC baseline and compare each with it.
    Baseline(BaselineArgs),
    /// Simulate a TOML scenario or a built-in one; writes plots too.
    Run(run::RunArgs),
}

#[derive(Debug, clap::Args)]
pub struct HpccArgs {
    /// The run directory (config.txt and its flow list).
    pub run_dir: PathBuf,
    /// The topology file.
    #[arg(long, value_name = "FILE")]
    pub topology: PathBuf,
    /// Output directory (default: sim-out/<run name>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seed (default: the scenario's, 1).
    #[arg(long)]
    pub seed: Option<u64>,
}

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The baseline run directory.
    pub run_dir: PathBuf,
    /// Our output directory.
    pub out_dir: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct BaselineArgs {
    /// The baseline (with runs/ and topologies/; default: shared/fabric-sim-baseline
    /// beside the repository, looked for from the current directory up).
    pub baseline_dir: Option<PathBuf>,
    /// Output root: each run goes to DIR/<run name> (default: sim-out).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Only this run (repeatable).
    #[arg(long, value_name = "NAME")]
    pub only: Vec<String>,
}

/// Why a `roce sim` command failed.
#[derive(Debug, thiserror::Error)]
pub enum SimCliError {
    #[error(transparent)]
    Hpcc(#[from] HpccError),
    #[error(transparent)]
    Compare(#[from] CompareError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Scenario(String),
    #[error("simulation failed: {0}")]
    Sim(#[from] FabricError),
    #[error("{0}")]
    Usage(String),
}

impl SimCliError {
    fn exit_code(&self) -> ExitCode {
        match self {
            SimCliError::Sim(_) => ExitCode::from(EXIT_SIM_FAILED),
            _ => ExitCode::from(EXIT_USAGE),
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SimCliError + '_ {
    move |source| SimCliError::Io { path: path.to_path_buf(), source }
}

pub fn main(cmd: &SimCommand) -> ExitCode {
    let result = match cmd {
        SimCommand::Hpcc(args) => cmd_hpcc(args),
        SimCommand::Compare(args) => cmd_compare(args),
        SimCommand::Baseline(args) => cmd_baseline(args),
        SimCommand::Run(args) => run::cmd_run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roce sim: {e}");
            e.exit_code()
        }
    }
}

/// What one simulation produced.
pub struct Outcome {
    pub report: Report,
    pub usage: Usage,
}

fn default_out(name: &str) -> PathBuf {
    Path::new(DEFAULT_OUT_ROOT).join(name)
}

/// Simulates `scn` with a progress bar and writes fct.txt, pfc.txt and
/// summary.json into `out_dir` (created). `payload`: packet payload of the
/// standalone FCT.
pub fn simulate_and_write(scn: &Scenario, out_dir: &Path, payload: u64) -> Result<Outcome, SimCliError> {
    std::fs::create_dir_all(out_dir).map_err(io_err(out_dir))?;
    let mut bar = progress::Bar::new(&scn.name, scn.flows.len());
    let meter = Meter::start();
    let result = simulate(scn, Some(&mut bar));
    let usage = meter.stop();
    bar.finish();
    let report = result?;
    write_file(&out_dir.join("fct.txt"), |w| hpcc::write_fct(w, scn, &report, payload))?;
    write_file(&out_dir.join("pfc.txt"), |w| hpcc::write_pfc(w, scn, &report))?;
    let hops_per_cpu = usage.user_cpu_s.filter(|&s| s > 0.0).map(|s| report.counters.packet_hops as f64 / s);
    let mut summary = summary_json(scn, &report);
    if let Some(obj) = summary.as_object_mut() {
        obj.insert("user_cpu_s".into(), json!(usage.user_cpu_s));
        obj.insert("max_rss_kib".into(), json!(usage.max_rss_kib));
        obj.insert("wall_s".into(), json!(usage.wall_s));
        obj.insert("packet_hops_per_cpu_s".into(), json!(hops_per_cpu));
    }
    write_file(&out_dir.join("summary.json"), |w| {
        serde_json::to_writer_pretty(&mut *w, &summary).map_err(std::io::Error::other)?;
        writeln!(w)
    })?;
    print_summary(scn, &report, &usage, out_dir);
    Ok(Outcome { report, usage })
}

fn write_file(
    path: &Path,
    body: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), SimCliError> {
    let file = File::create(path).map_err(io_err(path))?;
    let mut w = BufWriter::new(file);
    body(&mut w).and_then(|()| w.flush()).map_err(io_err(path))
}

/// How a run ended, in words.
pub fn describe_ending(ending: &Option<Ending>) -> String {
    match ending {
        None => "no ending recorded".into(),
        Some(Ending::Completed) => "completed".into(),
        Some(Ending::StopTime) => "stop time reached".into(),
        Some(Ending::Deadlock { at_ps, cycle }) => {
            format!(
                "DEADLOCK at {:.6} s (cycle of {} paused queues)",
                *at_ps as f64 / PS_PER_S as f64,
                cycle.len()
            )
        }
        Some(Ending::Stalled) => "stalled (flows left that cannot finish)".into(),
    }
}

fn print_summary(scn: &Scenario, report: &Report, usage: &Usage, out_dir: &Path) {
    let c = &report.counters;
    println!(
        "{}: {} at {:.6} s simulated; {}/{} flows finished; {} packet hops, {} PFC pauses sent, {} ECN marks, {} drops",
        scn.name,
        describe_ending(&report.ending),
        report.end_ps as f64 / PS_PER_S as f64,
        report.fct.len(),
        scn.flows.len(),
        c.packet_hops,
        c.pfc_pause_sent,
        c.ecn_marked,
        c.dropped_buffer + c.dropped_link + c.dropped_watchdog + c.dropped_unroutable
    );
    let cpu = usage.user_cpu_s.map_or("?".into(), |s| format!("{s:.2}"));
    let rss = usage.max_rss_kib.map_or("?".into(), |k| format!("{:.1}", k as f64 / 1024.0));
    println!(
        "  user CPU {cpu} s, wall {:.2} s, max RSS {rss} MiB; output in {}",
        usage.wall_s,
        out_dir.display()
    );
}

/// Loads an HPCC run over `topology`, with an optional seed.
fn load_hpcc(run_dir: &Path, topology: &Path, seed: Option<u64>) -> Result<hpcc::HpccRun, SimCliError> {
    let mut run = hpcc::load_run_full(run_dir, topology)?;
    if let Some(seed) = seed {
        run.scenario.seed = seed;
    }
    Ok(run)
}

fn cmd_hpcc(args: &HpccArgs) -> Result<ExitCode, SimCliError> {
    let run = load_hpcc(&args.run_dir, &args.topology, args.seed)?;
    let out = args.out.clone().unwrap_or_else(|| default_out(&run.scenario.name));
    simulate_and_write(&run.scenario, &out, u64::from(run.payload()))?;
    Ok(ExitCode::SUCCESS)
}

fn cmd_compare(args: &CompareArgs) -> Result<ExitCode, SimCliError> {
    let c = compare(&args.run_dir, &args.out_dir)?;
    print!("{c}");
    Ok(ExitCode::SUCCESS)
}

/// The baseline directory: given, or `shared/fabric-sim-baseline` in the
/// current directory or one of its ancestors, or beside the repository
/// this binary was built from.
fn locate_baseline(given: Option<&Path>) -> Result<PathBuf, SimCliError> {
    if let Some(dir) = given {
        return if dir.join("runs").is_dir() {
            Ok(dir.to_path_buf())
        } else {
            Err(SimCliError::Usage(format!("{}: no runs/ directory in it", dir.display())))
        };
    }
    let mut candidates: Vec<PathBuf> = std::env::current_dir()
        .map(|cwd| cwd.ancestors().map(|a| a.join(BASELINE_REL)).collect())
        .unwrap_or_default();
    candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..").join(BASELINE_REL));
    let found = candidates.into_iter().find(|d| d.join("runs").is_dir());
    found.map(|d| d.canonicalize().unwrap_or(d)).ok_or_else(|| {
        SimCliError::Usage(format!(
            "no {BASELINE_REL} found from the current directory up; give BASELINE_DIR"
        ))
    })
}

/// The run directories of a baseline, sorted, restricted to `only`.
fn baseline_runs(base: &Path, only: &[String]) -> Result<Vec<PathBuf>, SimCliError> {
    let runs_dir = base.join("runs");
    let mut runs: Vec<PathBuf> = std::fs::read_dir(&runs_dir)
        .map_err(io_err(&runs_dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("config.txt").is_file())
        .collect();
    runs.sort();
    for name in only {
        if !runs.iter().any(|r| r.file_name().is_some_and(|n| n == name.as_str())) {
            return Err(SimCliError::Usage(format!("no run named {name:?} in {}", runs_dir.display())));
        }
    }
    if !only.is_empty() {
        runs.retain(|r| r.file_name().is_some_and(|n| only.iter().any(|o| n == o.as_str())));
    }
    Ok(runs)
}

/// One line of the final table of `roce sim baseline`.
struct BaselineRow {
    run: String,
    result: Result<(Outcome, Comparison), String>,
}

fn run_one_baseline(
    base: &Path,
    run_dir: &Path,
    out_root: &Path,
) -> Result<(Outcome, Comparison), SimCliError> {
    let cfg = HpccConfig::read(&run_dir.join("config.txt"))?;
    let topo_name = cfg.topology_file.as_deref().ok_or_else(|| {
        SimCliError::Usage(format!("{}: no TOPOLOGY_FILE", run_dir.join("config.txt").display()))
    })?;
    let topo_file = Path::new(topo_name).file_name().unwrap_or(topo_name.as_ref());
    let run = load_hpcc(run_dir, &base.join("topologies").join(topo_file), None)?;
    let out = out_root.join(&run.scenario.name);
    let outcome = simulate_and_write(&run.scenario, &out, u64::from(run.payload()))?;
    let comparison = compare(run_dir, &out)?;
    Ok((outcome, comparison))
}

fn cmd_baseline(args: &BaselineArgs) -> Result<ExitCode, SimCliError> {
    let base = locate_baseline(args.baseline_dir.as_deref())?;
    let runs = baseline_runs(&base, &args.only)?;
    let out_root = args.out.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_OUT_ROOT));
    let mut rows = Vec::new();
    for run_dir in runs {
        let run = run_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        println!("==== {run}");
        let result = run_one_baseline(&base, &run_dir, &out_root);
        match &result {
            Ok((_, comparison)) => print!("{comparison}"),
            Err(e) => println!("FAILED: {e}"),
        }
        println!();
        rows.push(BaselineRow { run, result: result.map_err(|e| e.to_string()) });
    }
    print_baseline_table(&rows);
    let failed = rows.iter().any(|r| r.result.is_err());
    Ok(if failed { ExitCode::from(EXIT_SIM_FAILED) } else { ExitCode::SUCCESS })
}

fn print_baseline_table(rows: &[BaselineRow]) {
    println!("(baseline CPU seconds: see the baseline README's table)");
    println!(
        "{:<24} {:>10} {:>9} {:>12} {:>9}  {:<26} ending",
        "run", "our CPU s", "wall s", "Mhops/CPU s", "max FCT", "slowdown p50/p95/p99 ratio"
    );
    for row in rows {
        match &row.result {
            Err(e) => println!("{:<24} FAILED: {e}", row.run),
            Ok((o, c)) => {
                let cpu = o.usage.user_cpu_s;
                let hops = cpu.filter(|&s| s > 0.0).map(|s| o.report.counters.packet_hops as f64 / s / 1e6);
                let sd = match (c.overall.baseline, c.overall.ours) {
                    (Some(b), Some(u)) => {
                        format!("{:.3} / {:.3} / {:.3}", u.p50 / b.p50, u.p95 / b.p95, u.p99 / b.p99)
                    }
                    _ => "-".into(),
                };
                println!(
                    "{:<24} {:>10} {:>9.2} {:>12} {:>9}  {:<26} {}",
                    row.run,
                    cpu.map_or("?".into(), |s| format!("{s:.2}")),
                    o.usage.wall_s,
                    hops.map_or("?".into(), |h| format!("{h:.2}")),
                    c.fct_ratio_max().map_or("-".into(), |r| format!("{r:.4}")),
                    sd,
                    describe_ending(&o.report.ending)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_baseline_is_a_usage_error() {
        let e = locate_baseline(Some(Path::new("/nonexistent-baseline"))).unwrap_err();
        assert!(matches!(e, SimCliError::Usage(_)));
        assert_eq!(e.exit_code(), ExitCode::from(EXIT_USAGE));
    }

    #[test]
    fn unknown_only_names_are_rejected() {
        let Ok(base) = locate_baseline(None) else { return };
        let runs = baseline_runs(&base, &[]).unwrap();
        assert_eq!(runs.len(), 8);
        let one = baseline_runs(&base, &["victim_alone".into()]).unwrap();
        assert_eq!(one.len(), 1);
        assert!(matches!(baseline_runs(&base, &["nope".into()]), Err(SimCliError::Usage(_))));
    }

    #[test]
    fn a_small_hpcc_run_writes_its_files() {
        use roce_fabric::hpcc::{parse_flows, scenario_from_parts, Topology};
        let topo =
            Topology::parse("3 1 2\n0\n0 1 100Gbps 1us 0\n0 2 100Gbps 1us 0\n", Path::new("t")).unwrap();
        let flows = parse_flows("1\n1 2 3 100 20000 2\n", Path::new("f")).unwrap();
        let cfg = HpccConfig::parse("SIMULATOR_STOP_TIME 2.1\n", Path::new("c")).unwrap();
        let scn = scenario_from_parts(&topo, &flows, &cfg);
        let dir = std::env::temp_dir().join(format!("roce-sim-cmd-{}", std::process::id()));
        let outcome = simulate_and_write(&scn, &dir, 1000).unwrap();
        assert_eq!(outcome.report.fct.len(), 1);
        let fct = hpcc::read_fct(&dir.join("fct.txt")).unwrap();
        assert_eq!((fct[0].src(), fct[0].dst(), fct[0].size), (1, 2, 20000));
        assert!(fct[0].fct_ns >= fct[0].standalone_ns * 9 / 10, "{fct:?}");
        assert!(hpcc::read_pfc(&dir.join("pfc.txt")).unwrap().is_empty());
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
        assert!(summary.get("wall_s").is_some_and(|v| v.is_f64()), "{summary}");
        assert!(summary.get("packet_hops_per_cpu_s").is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn endings_are_described() {
        assert_eq!(describe_ending(&Some(Ending::Completed)), "completed");
        assert!(describe_ending(&Some(Ending::Deadlock { at_ps: PS_PER_S, cycle: vec![] }))
            .starts_with("DEADLOCK"));
    }
}
