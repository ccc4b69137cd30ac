//! `--plot COLUMN`: one column of the table against one axis, a line per
//! combination of the other axes.

use std::collections::BTreeMap;
use std::path::Path;

use roce_fabric::plot::SweepSeries;
use roce_fabric::sweep::{self, Grid};
use roce_fabric::toml_scenario::{parse_duration, parse_size};
use roce_fabric::PS_PER_US;

use super::super::{io_err, SimCliError};
use super::table::Row;

/// Checks that `column` is a figure of the table and `x` an axis.
pub fn check_columns(grid: &Grid, column: &str, x: Option<&str>) -> Result<(), SimCliError> {
    if !sweep::FIGURES.contains(&column) || matches!(column, "ending" | "error") {
        return Err(SimCliError::Usage(format!(
            "--plot {column:?}: not a figure of the table; there are: {}",
            sweep::FIGURES
                .iter()
                .filter(|f| !matches!(**f, "ending" | "error"))
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if let Some(x) = x {
        if !grid.axes.iter().any(|a| a.name == x) {
            let names: Vec<&str> = grid.axes.iter().map(|a| a.name.as_str()).collect();
            return Err(SimCliError::Usage(format!(
                "--x {x:?}: not an axis; the axes are: {}",
                names.join(", ")
            )));
        }
    }
    Ok(())
}

/// An axis's values placed along x: numbers as they are, sizes in KB,
/// durations in us, anything else in order, named.
struct Placement {
    at: Vec<f64>,
    unit: &'static str,
    ticks: Option<Vec<(f64, String)>>,
}

fn place(labels: &[String]) -> Placement {
    let all = |f: &dyn Fn(&str) -> Option<f64>| labels.iter().map(|l| f(l)).collect::<Option<Vec<f64>>>();
    if let Some(at) = all(&|l| l.parse::<f64>().ok().filter(|v| v.is_finite())) {
        return Placement { at, unit: "", ticks: None };
    }
    if let Some(at) = all(&|l| parse_size("x", l).ok().map(|b| b as f64 / 1000.0)) {
        return Placement { at, unit: " (KB)", ticks: None };
    }
    if let Some(at) = all(&|l| parse_duration("x", l).ok().map(|ps| ps as f64 / PS_PER_US as f64)) {
        return Placement { at, unit: " (us)", ticks: None };
    }
    let at: Vec<f64> = (0..labels.len()).map(|i| i as f64).collect();
    let ticks = at.iter().copied().zip(labels.iter().cloned()).collect();
    Placement { at, unit: "", ticks: Some(ticks) }
}

/// Draws `column` against axis `x` (default the first) into `path` (SVG).
pub fn write(
    grid: &Grid,
    rows: &[Row],
    column: &str,
    x: Option<&str>,
    path: &Path,
) -> Result<(), SimCliError> {
    let xi = x.and_then(|x| grid.axes.iter().position(|a| a.name == x)).unwrap_or(0);
    let axis = &grid.axes[xi];
    let placed = place(&axis.labels);
    let header = sweep::header(grid);
    // One line per combination of the other axes' values, in point order.
    let mut series: BTreeMap<Vec<usize>, SweepSeries> = BTreeMap::new();
    for r in rows {
        let Some(mut at) = r.cells.first().and_then(|c| c.parse().ok()).and_then(|i| grid.value_indices(i))
        else {
            continue;
        };
        let Some(y) = r.get(&header, column).and_then(|c| c.parse::<f64>().ok()) else { continue };
        let k = at.remove(xi);
        let name = || {
            let others: Vec<String> = (0..grid.axes.len())
                .filter(|&j| j != xi)
                .map(|j| format!("{}={}", grid.axes[j].name, r.cells[1 + j]))
                .collect();
            if others.is_empty() {
                column.to_string()
            } else {
                others.join(", ")
            }
        };
        series.entry(at).or_insert_with(|| (name(), Vec::new())).1.push((placed.at[k], y));
    }
    let mut series: Vec<SweepSeries> = series.into_values().collect();
    for s in &mut series {
        s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let svg = roce_fabric::plot::sweep_svg(
        &format!("{}: {column} by {}", grid.name, axis.name),
        &format!("{}{}", axis.name, placed.unit),
        column,
        &series,
        placed.ticks.as_deref(),
    )
    .map_err(io_err(path))?;
    std::fs::write(path, svg).map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_are_placed_by_what_their_values_are() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let p = place(&s(&["0.3", "0.5"]));
        assert_eq!((p.at, p.unit), (vec![0.3, 0.5], ""));
        let p = place(&s(&["100KB", "1MB"]));
        assert_eq!((p.at, p.unit), (vec![100.0, 1000.0], " (KB)"));
        let p = place(&s(&["2us", "1ms"]));
        assert_eq!((p.at, p.unit), (vec![2.0, 1000.0], " (us)"));
        let p = place(&s(&["paper", "hpcc"]));
        assert_eq!(p.at, vec![0.0, 1.0]);
        assert_eq!(p.ticks.unwrap()[1].1, "hpcc");
    }
}
