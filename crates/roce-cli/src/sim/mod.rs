//! `roce sim`: the fabric simulator (`roce-fabric`) from the command line.
//!
//! ```text
//! roce sim hpcc RUN_DIR --topology FILE [--out DIR] [--seed N]
//! roce sim compare RUN_DIR OUT_DIR
//! roce sim baseline [BASELINE_DIR] [--out DIR] [--only NAME]... [--in-process]
//! roce sim run SCENARIO.toml [--out DIR] [--seed N]
//! roce sim run --builtin NAME [--out DIR] [--seed N]
//! roce sim replay TRACE.parquet [--meta META.yaml] [--reference RESULT.json]
//! roce sim coll [WORKLOAD.toml] [--seed N] [--usage] [--iterations] [--timeline PREFIX]
//! roce sim plot TABLE.csv --out FIGURE.svg [--title T] [--y NAME]
//! roce sim sweep GRID.toml [--out DIR] [--jobs N | --point I | --slurm [--wait] | --collect]
//!                [--plot COLUMN [--x AXIS]] [--list] [--show-base]
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

mod baseline;
mod coll;
mod plot;
mod progress;
mod replay;
mod run;
mod sweep;
mod usage;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use roce_fabric::compare::{compare, CompareError};
use roce_fabric::hpcc::{self, HpccError};
use roce_fabric::summary::summary_json;
use roce_fabric::{simulate, Ending, FabricError, Report, Scenario, ScenarioError, PS_PER_S};
use serde_json::json;

use self::usage::{Meter, Usage};

/// Where output goes by default, under the current directory.
const DEFAULT_OUT_ROOT: &str = "sim-out";
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
    Baseline(baseline::BaselineArgs),
    /// Simulate a TOML scenario or a built-in one; writes plots too.
    Run(run::RunArgs),
    /// Replay a recorded training trace: the what-if straggler slowdown S
    /// and what a degraded link adds.
    Replay(replay::ReplayArgs),
    /// Run collectives (all-reduce, ...) of a workload on the simulated
    /// fabric, one rank per host; print nccl-tests' table.
    Coll(coll::CollArgs),
    /// Run a parameter grid over a scenario (GRID.toml): one deterministic
    /// run per point, here with --jobs N or as a Slurm job array, and one
    /// CSV table of the points' summary figures.
    Sweep(sweep::SweepArgs),
    /// Draw a CSV table (first column x, every other column a line) as
    /// an SVG line plot.
    Plot(plot::PlotArgs),
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
    /// IB path MTU of the NICs instead of the one for PACKET_PAYLOAD_SIZE
    /// (256, 512, 1024, 2048 or 4096).
    #[arg(long, value_name = "BYTES")]
    pub mtu: Option<u32>,
    /// Ask for an ACK every N packets (1: an ACK per packet, as the HPCC
    /// NIC; default 64).
    #[arg(long, value_name = "N")]
    pub ack_every: Option<u32>,
    /// Model the HPCC ns-3 artifact's choices instead of a RoCE fabric's
    /// (`roce_fabric::hpcc::compat`: an ACK per packet, ACKs and CNPs
    /// queued with their flow's data at switches, a CNP per marked packet).
    #[arg(long)]
    pub ns3_compat: bool,
}

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The baseline run directory.
    pub run_dir: PathBuf,
    /// Our output directory.
    pub out_dir: PathBuf,
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
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// A run's summary.json that does not parse.
    #[error("{}: {source}", path.display())]
    Summary {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("simulation failed: {0}")]
    Sim(#[from] FabricError),
    #[error("{0}")]
    Usage(String),
    /// A sweep whose points have not all given their row.
    #[error("{0}")]
    Incomplete(String),
    #[error(transparent)]
    Replay(#[from] roce_replay::ReplayError),
}

impl SimCliError {
    fn exit_code(&self) -> ExitCode {
        match self {
            SimCliError::Sim(_) | SimCliError::Incomplete(_) => ExitCode::from(EXIT_SIM_FAILED),
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
        SimCommand::Baseline(args) => baseline::cmd_baseline(args),
        SimCommand::Run(args) => run::cmd_run(args),
        SimCommand::Replay(args) => replay::cmd_replay(args),
        SimCommand::Coll(args) => coll::cmd_coll(args),
        SimCommand::Sweep(args) => sweep::cmd_sweep(args),
        SimCommand::Plot(args) => plot::cmd_plot(args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roce sim: {e}");
            e.exit_code()
        }
    }
}

/// What one simulation produced (its CPU time and memory are in the
/// summary it wrote).
pub struct Outcome {
    pub report: Report,
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
    write_outputs(scn, &report, &usage, out_dir, payload)?;
    print_summary(scn, &report, &usage, out_dir);
    Ok(Outcome { report })
}

/// Writes a run's fct.txt, pfc.txt and summary.json into `out_dir`
/// (which exists).
pub fn write_outputs(
    scn: &Scenario,
    report: &Report,
    usage: &Usage,
    out_dir: &Path,
    payload: u64,
) -> Result<(), SimCliError> {
    write_file(&out_dir.join("fct.txt"), |w| hpcc::write_fct(w, scn, report, payload))?;
    write_file(&out_dir.join("pfc.txt"), |w| hpcc::write_pfc(w, scn, report))?;
    let hops_per_cpu = usage.user_cpu_s.filter(|&s| s > 0.0).map(|s| report.counters.packet_hops as f64 / s);
    let mut summary = summary_json(scn, report);
    if let Some(obj) = summary.as_object_mut() {
        obj.insert("user_cpu_s".into(), json!(usage.user_cpu_s));
        obj.insert("max_rss_kib".into(), json!(usage.max_rss_kib));
        obj.insert("wall_s".into(), json!(usage.wall_s));
        obj.insert("packet_hops_per_cpu_s".into(), json!(hops_per_cpu));
    }
    write_file(&out_dir.join("summary.json"), |w| {
        serde_json::to_writer_pretty(&mut *w, &summary).map_err(std::io::Error::other)?;
        writeln!(w)
    })
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
    let mut run = load_hpcc(&args.run_dir, &args.topology, args.seed)?;
    if let Some(mtu) = args.mtu {
        run.scenario.nic.mtu = mtu;
    }
    if args.ns3_compat {
        hpcc::ns3_compat(&mut run.scenario);
    }
    if let Some(n) = args.ack_every {
        run.scenario.nic.ack_req_every = n;
    }
    let out = args.out.clone().unwrap_or_else(|| default_out(&run.scenario.name));
    simulate_and_write(&run.scenario, &out, u64::from(run.payload()))?;
    Ok(ExitCode::SUCCESS)
}

fn cmd_compare(args: &CompareArgs) -> Result<ExitCode, SimCliError> {
    let c = compare(&args.run_dir, &args.out_dir)?;
    print!("{c}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_hpcc_run_writes_its_files() {
        use roce_fabric::hpcc::{parse_flows, scenario_from_parts, HpccConfig, Topology};
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
