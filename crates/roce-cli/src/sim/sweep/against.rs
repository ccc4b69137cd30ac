//! `--baseline RUN_DIR`: each point's FCT slowdowns against a baseline
//! run's (`roce sim compare`'s figures, each file over its own flows):
//! ours / baseline for p50, p95 and p99 of all flows and of each size
//! class, and the largest distance from 1.

use std::path::{Path, PathBuf};

use roce_fabric::compare::{compare, SlowdownPair, SIZE_CLASSES};
use roce_fabric::sweep::Grid;

use super::super::SimCliError;

/// Prints the table; `point_dir` gives a point's output directory.
pub fn print(grid: &Grid, baseline: &Path, point_dir: &dyn Fn(usize) -> PathBuf) -> Result<(), SimCliError> {
    let groups: Vec<&str> = std::iter::once("all").chain(SIZE_CLASSES.iter().map(|c| c.0)).collect();
    println!(
        "slowdown ours/baseline ({}), p50 p95 p99 of: {}",
        baseline.display(),
        groups.iter().map(|g| format!("[{g}]")).collect::<Vec<_>>().join(" ")
    );
    for i in 0..grid.points() {
        let labels = grid.labels(i).unwrap_or_default();
        let c = compare(baseline, &point_dir(i))?;
        let pairs: Vec<&SlowdownPair> = std::iter::once(&c.overall).chain(&c.classes).collect();
        let mut cells = Vec::new();
        let mut worst = 0.0f64;
        for p in pairs {
            match (&p.baseline, &p.ours) {
                (Some(b), Some(o)) => {
                    let r = [o.p50 / b.p50, o.p95 / b.p95, o.p99 / b.p99];
                    worst = r.iter().fold(worst, |w, x| w.max((x - 1.0).abs()));
                    cells.push(format!("{:.3} {:.3} {:.3}", r[0], r[1], r[2]));
                }
                _ => cells.push("  -     -     -  ".into()),
            }
        }
        println!("{i:>5} {:<24} {}  worst {:.1}%", labels.join(" "), cells.join(" | "), worst * 100.0);
    }
    Ok(())
}
