//! `roce sim baseline`: every run of the HPCC baseline simulated and put
//! beside the artifact's own results, then one table of them all: the
//! completion time (largest FCT) and mean FCT against the baseline's, the
//! slowdown percentiles, the baseline's user CPU seconds (from the
//! baseline README's runs table), ours, the speed-up, our max RSS and
//! packet hops per CPU second.
//!
//! Each run is simulated in a child process, this binary run again as
//! `roce sim hpcc RUN_DIR --topology FILE --out DIR`, so that its max RSS
//! is its own and not the peak of every run so far; its figures are read
//! back from the `summary.json` it writes. `--in-process` runs them all in
//! this process instead (the max RSS column is then the process's peak so
//! far).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use roce_fabric::compare::{compare, Comparison};
use roce_fabric::hpcc::HpccConfig;

use super::{io_err, load_hpcc, simulate_and_write, SimCliError, DEFAULT_OUT_ROOT, EXIT_SIM_FAILED};

/// The baseline data, relative to the directory holding the repository.
const BASELINE_REL: &str = "shared/fabric-sim-baseline";
/// The header of the baseline README's column of user CPU seconds.
const CPU_COLUMN: &str = "user CPU s";
const KIB_PER_MIB: f64 = 1024.0;

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
    /// Simulate every run in this process rather than one child process
    /// per run (max RSS is then this process's peak so far).
    #[arg(long)]
    pub in_process: bool,
    /// Model the HPCC ns-3 artifact's choices (`roce sim hpcc --ns3-compat`).
    #[arg(long)]
    pub ns3_compat: bool,
}

/// The baseline directory: given, or `shared/fabric-sim-baseline` in the
/// current directory or one of its ancestors, or beside the repository
/// this binary was built from.
pub(super) fn locate_baseline(given: Option<&Path>) -> Result<PathBuf, SimCliError> {
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

/// The user CPU seconds of each run in the baseline README's runs table:
/// the first number of the `user CPU s` column (`182.4 (repeat: 189.1)`
/// gives 182.4), by run name. Runs whose cell has no number are left out.
pub fn readme_cpu_seconds(readme: &str) -> HashMap<String, f64> {
    let cells = |line: &str| -> Vec<String> {
        let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
        inner.split('|').map(|c| c.trim().to_string()).collect()
    };
    let mut out = HashMap::new();
    let mut column = None;
    for line in readme.lines().filter(|l| l.trim_start().starts_with('|')) {
        let row = cells(line);
        if let Some(i) = row.iter().position(|c| c == CPU_COLUMN) {
            column = Some(i);
            continue;
        }
        let Some(col) = column else { continue };
        let (Some(run), Some(cell)) = (row.first(), row.get(col)) else { continue };
        let number: String = cell.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        if let Ok(v) = number.parse::<f64>() {
            out.insert(run.clone(), v);
        }
    }
    out
}

/// What a run cost and how it ended, from the `summary.json` it wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFigures {
    pub user_cpu_s: Option<f64>,
    pub max_rss_kib: Option<u64>,
    pub packet_hops: Option<u64>,
    /// `completed`, `stop_time`, `deadlock`, `stalled`.
    pub ending: String,
}

impl RunFigures {
    pub fn from_summary(v: &serde_json::Value) -> RunFigures {
        RunFigures {
            user_cpu_s: v["user_cpu_s"].as_f64(),
            max_rss_kib: v["max_rss_kib"].as_u64(),
            packet_hops: v["counters"]["packet_hops"].as_u64(),
            ending: v["ending"].as_str().unwrap_or("none").to_string(),
        }
    }

    fn read(out: &Path) -> Result<RunFigures, SimCliError> {
        let path = out.join("summary.json");
        let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|source| SimCliError::Summary { path: path.clone(), source })?;
        Ok(RunFigures::from_summary(&v))
    }
}

/// One line of the final table.
struct BaselineRow {
    run: String,
    result: Result<(RunFigures, Comparison), SimCliError>,
}

/// The topology file of a run (its config's `TOPOLOGY_FILE`, looked for
/// in the baseline's `topologies/`).
fn topology_of(base: &Path, run_dir: &Path) -> Result<PathBuf, SimCliError> {
    let cfg = HpccConfig::read(&run_dir.join("config.txt"))?;
    let topo_name = cfg.topology_file.as_deref().ok_or_else(|| {
        SimCliError::Usage(format!("{}: no TOPOLOGY_FILE", run_dir.join("config.txt").display()))
    })?;
    let topo_file = Path::new(topo_name).file_name().unwrap_or(topo_name.as_ref());
    Ok(base.join("topologies").join(topo_file))
}

/// Simulates one run in a child process (this binary, `sim hpcc`).
fn run_in_child(run_dir: &Path, topology: &Path, out: &Path, ns3_compat: bool) -> Result<(), SimCliError> {
    let exe = std::env::current_exe().map_err(io_err(Path::new("current executable")))?;
    let status = Command::new(&exe)
        .arg("sim")
        .arg("hpcc")
        .arg(run_dir)
        .arg("--topology")
        .arg(topology)
        .arg("--out")
        .arg(out)
        .args(ns3_compat.then_some("--ns3-compat"))
        .status()
        .map_err(io_err(&exe))?;
    if status.success() {
        Ok(())
    } else {
        Err(SimCliError::Usage(format!("{} sim hpcc {}: {status}", exe.display(), run_dir.display())))
    }
}

fn run_one_baseline(
    base: &Path,
    run_dir: &Path,
    out_root: &Path,
    in_process: bool,
    ns3_compat: bool,
) -> Result<(RunFigures, Comparison), SimCliError> {
    let topology = topology_of(base, run_dir)?;
    let mut run = load_hpcc(run_dir, &topology, None)?;
    if ns3_compat {
        roce_fabric::hpcc::ns3_compat(&mut run.scenario);
    }
    let out = out_root.join(&run.scenario.name);
    if in_process {
        simulate_and_write(&run.scenario, &out, u64::from(run.payload()))?;
    } else {
        std::fs::create_dir_all(&out).map_err(io_err(&out))?;
        // A stale summary must not pass for this run's.
        let _ = std::fs::remove_file(out.join("summary.json"));
        run_in_child(run_dir, &topology, &out, ns3_compat)?;
    }
    let figures = RunFigures::read(&out)?;
    let comparison = compare(run_dir, &out)?;
    Ok((figures, comparison))
}

pub fn cmd_baseline(args: &BaselineArgs) -> Result<ExitCode, SimCliError> {
    let base = locate_baseline(args.baseline_dir.as_deref())?;
    let runs = baseline_runs(&base, &args.only)?;
    let out_root = args.out.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_OUT_ROOT));
    let readme = base.join("README.md");
    let base_cpu = std::fs::read_to_string(&readme).map(|t| readme_cpu_seconds(&t)).unwrap_or_default();
    let mut rows = Vec::new();
    for run_dir in runs {
        let run = run_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        println!("==== {run}");
        let result = run_one_baseline(&base, &run_dir, &out_root, args.in_process, args.ns3_compat);
        match &result {
            Ok((_, comparison)) => print!("{comparison}"),
            Err(e) => println!("FAILED: {e}"),
        }
        println!();
        rows.push(BaselineRow { run, result });
    }
    print_baseline_table(&rows, &base_cpu, args.in_process);
    let failed = rows.iter().any(|r| r.result.is_err());
    Ok(if failed { ExitCode::from(EXIT_SIM_FAILED) } else { ExitCode::SUCCESS })
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".into(), |x| format!("{x:.digits$}"))
}

fn print_baseline_table(rows: &[BaselineRow], base_cpu: &HashMap<String, f64>, in_process: bool) {
    println!("completion = largest FCT; ratios are ours / baseline; slowdown ratios of p50/p95/p99;");
    println!(
        "base CPU s: the baseline README's `user CPU s` (n/a: not found); speed-up = base CPU / our CPU"
    );
    println!("(CPU times tick in 10 ms: the speed-up of a run of a few ticks is rough)");
    if in_process {
        println!("(--in-process: max RSS is this process's peak up to that run)");
    }
    println!(
        "{:<22} {:>10} {:>10} {:>7} {:>7}  {:<23} {:>8} {:>8} {:>8} {:>8} {:>8}  ending",
        "run",
        "base ms",
        "ours ms",
        "ratio",
        "mean r",
        "slowdown p50/p95/p99 r",
        "base CPU",
        "our CPU",
        "speed-up",
        "RSS MiB",
        "Mhop/s"
    );
    for row in rows {
        let (f, c) = match &row.result {
            Err(e) => {
                println!("{:<22} FAILED: {e}", row.run);
                continue;
            }
            Ok(fc) => fc,
        };
        let ms = |ns: u64| ns as f64 / 1e6;
        let sd = match (c.overall.baseline, c.overall.ours) {
            (Some(b), Some(u)) => format!("{:.3}/{:.3}/{:.3}", u.p50 / b.p50, u.p95 / b.p95, u.p99 / b.p99),
            _ => "-".into(),
        };
        let ours_cpu = f.user_cpu_s;
        let base = base_cpu.get(&row.run).copied();
        let speedup = match (base, ours_cpu) {
            (Some(b), Some(o)) if o > 0.0 => Some(b / o),
            _ => None,
        };
        let hops = match (f.packet_hops, ours_cpu) {
            (Some(h), Some(s)) if s > 0.0 => Some(h as f64 / s / 1e6),
            _ => None,
        };
        println!(
            "{:<22} {:>10} {:>10} {:>7} {:>7}  {:<23} {:>8} {:>8} {:>8} {:>8} {:>8}  {}",
            row.run,
            opt(c.baseline_fct.map(|t| ms(t.last_ns)), 3),
            opt(c.ours_fct.map(|t| ms(t.last_ns)), 3),
            opt(c.last_fct_ratio(), 4),
            opt(c.mean_fct_ratio(), 4),
            sd,
            opt(base, 1),
            opt(ours_cpu, 2),
            opt(speedup, 1),
            opt(f.max_rss_kib.map(|k| k as f64 / KIB_PER_MIB), 1),
            opt(hops, 2),
            f.ending
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::EXIT_USAGE;

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
    fn cpu_seconds_come_from_the_readme_table() {
        let readme = "\
# x
| a | b |
|---|---|
| 1 | 2 |

## Runs
| run | flows | user CPU s | result |
|---|---|---|---|
| fat_ws30_dcqcn | 3201 | 182.4 (repeat: 189.1) | p50 1.127 |
| incast2_dcqcn | 2 x 100 MB | 1.6 | FCT 17 ms |
| odd | x | ? | - |
";
        let cpu = readme_cpu_seconds(readme);
        assert_eq!(cpu.len(), 2, "{cpu:?}");
        assert_eq!(cpu["fat_ws30_dcqcn"], 182.4);
        assert_eq!(cpu["incast2_dcqcn"], 1.6);
        assert!(readme_cpu_seconds("no table").is_empty());
    }

    #[test]
    fn the_real_readme_gives_every_run_its_cpu_seconds() {
        let Ok(base) = locate_baseline(None) else { return };
        let Ok(text) = std::fs::read_to_string(base.join("README.md")) else { return };
        let cpu = readme_cpu_seconds(&text);
        assert_eq!(cpu.get("fat_ws30_dcqcn"), Some(&182.4));
        for run in baseline_runs(&base, &[]).unwrap() {
            let name = run.file_name().unwrap().to_string_lossy().into_owned();
            assert!(cpu.contains_key(&name), "{name}: {cpu:?}");
        }
    }

    #[test]
    fn figures_are_read_from_a_summary() {
        let v = serde_json::json!({
            "ending": "completed",
            "user_cpu_s": 1.5,
            "wall_s": 2.0,
            "max_rss_kib": 2048,
            "counters": { "packet_hops": 3_000_000 },
        });
        let f = RunFigures::from_summary(&v);
        assert_eq!(
            f,
            RunFigures {
                user_cpu_s: Some(1.5),
                max_rss_kib: Some(2048),
                packet_hops: Some(3_000_000),
                ending: "completed".into(),
            }
        );
        let none = RunFigures::from_summary(&serde_json::json!({ "ending": null, "user_cpu_s": null }));
        assert_eq!((none.user_cpu_s, none.ending.as_str()), (None, "none"));
    }
}
