//! `roce sim sweep`: a parameter grid over a scenario (the grid format is
//! `roce_fabric::sweep`'s), each point a deterministic run, one CSV table.
//!
//! ```text
//! roce sim sweep GRID.toml [--out DIR] [--jobs N]       every point here, N at a time
//! roce sim sweep GRID.toml --point I [--out DIR]        point I alone (a Slurm task)
//! roce sim sweep GRID.toml --slurm [--wait] [--sbatch-arg ARG]...
//! roce sim sweep GRID.toml --collect [--plot COLUMN [--x AXIS]] [--baseline RUN_DIR]
//! roce sim sweep GRID.toml --list | --show-base
//! ```
//!
//! Every point runs as its own process, `roce sim sweep GRID --point I`,
//! whether the local runner starts it (`--jobs N` at a time) or a task of
//! a Slurm job array does (`--slurm` submits the array through `sbatch`;
//! the tasks run this same executable on the grid file, so both must be
//! where the cluster's nodes see them, as on any shared file system). A
//! point writes, under the output directory (default
//! `sim-out/sweep-<grid name>`):
//!
//! - `points/NNNNNN/`: its run's `fct.txt`, `pfc.txt`, `summary.json`;
//! - `rows/NNNNNN.csv`: the table's header and its row (written whole,
//!   then renamed into place, so a row file is never half there).
//!
//! Collecting (after a local run, after `--slurm --wait`, or with
//! `--collect`) checks that every point has its row, made by this grid
//! (the header and the point's values must match), and joins them into
//! `sweep.csv`, in point order. A row holds only what the run decides
//! (no CPU time), so a point gives the same row wherever it ran, and two
//! sweeps of one grid give byte-identical tables. `--plot COLUMN` draws
//! `sweep-COLUMN.svg`: the column against one axis (`--x`, default the
//! first), one line per combination of the other axes. `--baseline
//! RUN_DIR` prints each point's slowdown percentiles over a baseline
//! run's (all flows and each size class).
//!
//! Exit status: 0 when every point has its row; 1 when a simulation
//! failed or a point has no row; 2 on a bad grid, bad arguments, or a
//! point the scenario rejects (unless the grid says `skip_invalid`).

mod against;
mod plot;
mod slurm;
mod table;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use roce_fabric::simulate;
use roce_fabric::sweep::{self, Grid, Status, SweepError};

use super::usage::Meter;
use super::{default_out, io_err, write_outputs, SimCliError, EXIT_SIM_FAILED};

#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// The grid file (TOML): a base scenario and its axes.
    pub grid: PathBuf,
    /// Output directory (default: sim-out/sweep-<grid name>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Points run at once here (default: the CPUs available).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub jobs: Option<u32>,
    /// Run point I alone and write its row (what each Slurm task runs).
    #[arg(long, value_name = "I", conflicts_with_all = ["jobs", "slurm", "collect", "list", "show_base"])]
    pub point: Option<usize>,
    /// Submit the points as a Slurm job array (sbatch) instead of running
    /// them here.
    #[arg(long, conflicts_with_all = ["jobs", "collect", "list", "show_base"])]
    pub slurm: bool,
    /// With --slurm: wait for the array to finish, then collect.
    #[arg(long, requires = "slurm")]
    pub wait: bool,
    /// With --slurm: an argument for sbatch (e.g. --sbatch-arg=--partition=cpu);
    /// may be repeated.
    #[arg(long, value_name = "ARG", requires = "slurm", allow_hyphen_values = true)]
    pub sbatch_arg: Vec<String>,
    /// Join the points' rows into sweep.csv (after a Slurm array).
    #[arg(long, conflicts_with_all = ["list", "show_base"])]
    pub collect: bool,
    /// Draw this column of the table against an axis (sweep-COLUMN.svg).
    #[arg(long, value_name = "COLUMN")]
    pub plot: Option<String>,
    /// The axis --plot puts along x (default: the first).
    #[arg(long, value_name = "AXIS", requires = "plot")]
    pub x: Option<String>,
    /// A baseline run directory (HPCC's fct.txt, pfc.txt): print each
    /// point's slowdown p50/p95/p99, all flows and each size class, over
    /// the baseline's.
    #[arg(long, value_name = "RUN_DIR")]
    pub baseline: Option<PathBuf>,
    /// List the points and their values; run nothing.
    #[arg(long, conflicts_with = "show_base")]
    pub list: bool,
    /// Print the base scenario in the scenario format (the text the axes'
    /// keys address); run nothing.
    #[arg(long)]
    pub show_base: bool,
}

impl From<SweepError> for SimCliError {
    fn from(e: SweepError) -> SimCliError {
        SimCliError::Usage(e.to_string())
    }
}

/// Where a sweep's files go.
struct Layout {
    out: PathBuf,
}

impl Layout {
    fn point_dir(&self, index: usize) -> PathBuf {
        self.out.join("points").join(format!("{index:06}"))
    }
    fn row_file(&self, index: usize) -> PathBuf {
        self.out.join("rows").join(format!("{index:06}.csv"))
    }
    fn table(&self) -> PathBuf {
        self.out.join("sweep.csv")
    }
}

pub fn cmd_sweep(args: &SweepArgs) -> Result<ExitCode, SimCliError> {
    let grid = Grid::from_path(&args.grid)?;
    let layout =
        Layout { out: args.out.clone().unwrap_or_else(|| default_out(&format!("sweep-{}", grid.name))) };
    if args.show_base || args.list {
        return listing(&grid, args.show_base);
    }
    if let Some(plot) = &args.plot {
        // Known before any run: a typo should not cost a sweep.
        plot::check_columns(&grid, plot, args.x.as_deref())?;
    }
    if let Some(index) = args.point {
        return run_point(&grid, &layout, index);
    }
    let code = if args.collect {
        ExitCode::SUCCESS
    } else {
        check_points(&grid)?;
        if args.slurm {
            let grid_path = absolute(&args.grid)?;
            std::fs::create_dir_all(&layout.out).map_err(io_err(&layout.out))?;
            let out = absolute(&layout.out)?;
            let jobs = slurm::submit(&grid_path, &out, grid.points(), &args.sbatch_arg)?;
            println!("submitted {} points as Slurm job {}", grid.points(), jobs.join(", "));
            if !args.wait {
                println!(
                    "when it is done: roce sim sweep {} --out {} --collect",
                    args.grid.display(),
                    out.display()
                );
                return Ok(ExitCode::SUCCESS);
            }
            slurm::wait(&jobs, || table::rows_present(&grid, &|i| layout.row_file(i)))?;
            ExitCode::SUCCESS
        } else {
            let jobs = args.jobs.map_or_else(default_jobs, |j| j as usize);
            run_here(args, &grid, &layout, jobs)?
        }
    };
    let rows = table::collect(&grid, &|i| layout.row_file(i), &layout.table())?;
    table::print(&grid, &rows);
    println!("table: {}", layout.table().display());
    if let Some(base) = &args.baseline {
        against::print(&grid, base, &|i| layout.point_dir(i))?;
    }
    if let Some(column) = &args.plot {
        let path = layout.out.join(format!("sweep-{column}.svg"));
        plot::write(&grid, &rows, column, args.x.as_deref(), &path)?;
        println!("plot: {}", path.display());
    }
    let failed = rows.iter().filter(|r| r.ending() == "failed").count();
    if failed > 0 {
        eprintln!("roce sim sweep: {failed} of {} points failed (see the table's error column)", rows.len());
        return Ok(ExitCode::from(EXIT_SIM_FAILED));
    }
    Ok(code)
}

/// `--show-base` or `--list`, to stdout; a reader that stops early (a
/// pager, `head`) ends it quietly.
fn listing(grid: &Grid, base: bool) -> Result<ExitCode, SimCliError> {
    let mut out = std::io::stdout().lock();
    let written = if base {
        out.write_all(grid.base_toml().as_bytes())
    } else {
        let header = sweep::header(grid);
        (|| {
            writeln!(out, "{}", header[..=grid.axes.len()].join("\t"))?;
            for i in 0..grid.points() {
                writeln!(out, "{i}\t{}", grid.labels(i).unwrap_or_default().join("\t"))?;
            }
            out.flush()
        })()
    };
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(io_err(Path::new("stdout"))(e)),
        _ => Ok(ExitCode::SUCCESS),
    }
}

fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn absolute(p: &Path) -> Result<PathBuf, SimCliError> {
    std::path::absolute(p).map_err(io_err(p))
}

/// Builds every point before any runs: a grid that rejects a point fails
/// now, not after hours (unless it says `skip_invalid`, when the point's
/// row will say why).
fn check_points(grid: &Grid) -> Result<(), SimCliError> {
    for i in 0..grid.points() {
        match grid.point(i) {
            Ok(_) => {}
            Err(e @ SweepError::Point { .. }) if grid.skip_invalid => {
                println!("skipping {e}");
            }
            Err(e) => {
                return Err(SimCliError::Usage(format!(
                    "{e} (the grid may say skip_invalid = true to give such points a row saying why)"
                )))
            }
        }
    }
    Ok(())
}

/// One point: simulated, its outputs and its row written.
fn run_point(grid: &Grid, layout: &Layout, index: usize) -> Result<ExitCode, SimCliError> {
    let point = match grid.point(index) {
        Ok(p) => p,
        Err(e @ SweepError::Point { .. }) if grid.skip_invalid => {
            let labels = grid.labels(index).unwrap_or_default();
            table::write_row(
                grid,
                index,
                &labels,
                &sweep::unrun(Status::Invalid, &e.to_string()),
                &layout.row_file(index),
            )?;
            println!("{e}: row written, no run");
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    let labels = point.values.clone();
    let dir = layout.point_dir(index);
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let meter = Meter::start();
    let report = simulate(&point.scenario, None);
    let usage = meter.stop();
    let (figures, code) = match report {
        Ok(report) => {
            write_outputs(&point.scenario, &report, &usage, &dir, point.payload)?;
            (sweep::figures(&point.scenario, &report, point.payload), ExitCode::SUCCESS)
        }
        Err(e) => (sweep::unrun(Status::Failed, &e.to_string()), ExitCode::from(EXIT_SIM_FAILED)),
    };
    table::write_row(grid, index, &labels, &figures, &layout.row_file(index))?;
    let cpu = usage.user_cpu_s.map_or("?".into(), |s| format!("{s:.2}"));
    println!("point {index} ({}): {}; user CPU {cpu} s", grid.describe(&labels), figures[0]);
    Ok(code)
}

/// Every point here, `jobs` processes at a time, each `--point I` of this
/// executable; its output goes to `logs/NNNNNN.log`.
fn run_here(args: &SweepArgs, grid: &Grid, layout: &Layout, jobs: usize) -> Result<ExitCode, SimCliError> {
    let exe = std::env::current_exe().map_err(io_err(Path::new("the roce executable")))?;
    let logs = layout.out.join("logs");
    std::fs::create_dir_all(&logs).map_err(io_err(&logs))?;
    let n = grid.points();
    println!("{n} points, {} at a time; output in {}", jobs.min(n), layout.out.display());
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let meter = Meter::start();
    let worker = || -> Result<(), SimCliError> {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                return Ok(());
            }
            let log_path = logs.join(format!("{i:06}.log"));
            let log = std::fs::File::create(&log_path).map_err(io_err(&log_path))?;
            let err_log = log.try_clone().map_err(io_err(&log_path))?;
            let status = Command::new(&exe)
                .args(["sim", "sweep"])
                .arg(&args.grid)
                .arg("--out")
                .arg(&layout.out)
                .arg("--point")
                .arg(i.to_string())
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err_log)
                .status()
                .map_err(io_err(&exe))?;
            let k = done.fetch_add(1, Ordering::Relaxed) + 1;
            let what = grid.labels(i).map(|l| grid.describe(&l)).unwrap_or_default();
            let ending = match status.code() {
                Some(0) => "done".to_string(),
                _ => format!("{status}: see {}", log_path.display()),
            };
            println!("[{k}/{n}] point {i} ({what}): {ending}");
        }
    };
    let results: Vec<Result<(), SimCliError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..jobs.min(n)).map(|_| s.spawn(worker)).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(SimCliError::Usage("a sweep worker panicked".into()))))
            .collect()
    });
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    let usage = meter.stop();
    println!("{n} points in {:.1} s", usage.wall_s);
    Ok(ExitCode::SUCCESS)
}
