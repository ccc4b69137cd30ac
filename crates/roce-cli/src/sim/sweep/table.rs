//! The points' row files and the table they make (CSV, RFC 4180 as the
//! `csv` crate writes it).

use std::path::{Path, PathBuf};

use roce_fabric::sweep::{self, Grid};

use super::super::{io_err, SimCliError};

/// One row of the table: the cells under [`sweep::header`].
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub cells: Vec<String>,
    /// Where `ending` is among the cells.
    ending_at: usize,
}

impl Row {
    pub fn ending(&self) -> &str {
        &self.cells[self.ending_at]
    }

    /// The cell under `column` of `header`.
    pub fn get(&self, header: &[String], column: &str) -> Option<&str> {
        header.iter().position(|h| h == column).and_then(|i| self.cells.get(i)).map(String::as_str)
    }
}

fn csv_err(path: &Path) -> impl FnOnce(csv::Error) -> SimCliError + '_ {
    move |e| SimCliError::Usage(format!("{}: {e}", path.display()))
}

/// Writes point `index`'s row file: the header and the row, into a
/// temporary file renamed into place.
pub fn write_row(
    grid: &Grid,
    index: usize,
    labels: &[String],
    figures: &[String],
    path: &Path,
) -> Result<(), SimCliError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let tmp = path.with_extension(format!("csv.tmp{}", std::process::id()));
    {
        let mut w = csv::Writer::from_path(&tmp).map_err(csv_err(&tmp))?;
        w.write_record(sweep::header(grid)).map_err(csv_err(&tmp))?;
        let row =
            std::iter::once(index.to_string()).chain(labels.iter().cloned()).chain(figures.iter().cloned());
        w.write_record(row).map_err(csv_err(&tmp))?;
        w.flush().map_err(io_err(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

/// How many points have a row file.
pub fn rows_present(grid: &Grid, row_file: &dyn Fn(usize) -> PathBuf) -> usize {
    (0..grid.points()).filter(|&i| row_file(i).is_file()).count()
}

/// Reads point `index`'s row file and checks that this grid made it.
fn read_row(grid: &Grid, index: usize, path: &Path) -> Result<Row, String> {
    let mut r = csv::ReaderBuilder::new().has_headers(true).from_path(path).map_err(|e| e.to_string())?;
    let header = sweep::header(grid);
    let found: Vec<String> = r.headers().map_err(|e| e.to_string())?.iter().map(str::to_string).collect();
    if found != header {
        return Err("its columns are not this grid's (a row of another grid?)".into());
    }
    let mut records = r.records();
    let rec = records.next().ok_or("no row")?.map_err(|e| e.to_string())?;
    if records.next().is_some() {
        return Err("more than one row".into());
    }
    let cells: Vec<String> = rec.iter().map(str::to_string).collect();
    let labels = grid.labels(index).unwrap_or_default();
    if cells[0] != index.to_string() || cells[1..=labels.len()] != labels[..] {
        return Err(format!(
            "it is point {} with {}, not this grid's point {index} ({})",
            cells[0],
            cells[1..=labels.len()].join(", "),
            labels.join(", ")
        ));
    }
    Ok(Row { cells, ending_at: 1 + grid.axes.len() })
}

/// Joins every point's row into `table` (CSV); an error names the points
/// without a good row.
pub fn collect(
    grid: &Grid,
    row_file: &dyn Fn(usize) -> PathBuf,
    table: &Path,
) -> Result<Vec<Row>, SimCliError> {
    let mut rows = Vec::with_capacity(grid.points());
    let mut missing = Vec::new();
    let mut bad = Vec::new();
    for i in 0..grid.points() {
        let path = row_file(i);
        if !path.is_file() {
            missing.push(i);
            continue;
        }
        match read_row(grid, i, &path) {
            Ok(r) => rows.push(r),
            Err(why) => bad.push(format!("{}: {why}", path.display())),
        }
    }
    if !missing.is_empty() || !bad.is_empty() {
        const LISTED: usize = 10;
        let mut msg = String::new();
        if !missing.is_empty() {
            let list: Vec<String> = missing.iter().take(LISTED).map(usize::to_string).collect();
            let more = if missing.len() > LISTED { ", ..." } else { "" };
            msg += &format!(
                "{} of {} points have no row (points {}{more}; run them with --point I)",
                missing.len(),
                grid.points(),
                list.join(", ")
            );
        }
        for b in bad.iter().take(LISTED) {
            msg += &format!("{}{b}", if msg.is_empty() { "" } else { "; " });
        }
        return Err(SimCliError::Incomplete(msg));
    }
    let mut w = csv::Writer::from_path(table).map_err(csv_err(table))?;
    w.write_record(sweep::header(grid)).map_err(csv_err(table))?;
    for r in &rows {
        w.write_record(&r.cells).map_err(csv_err(table))?;
    }
    w.flush().map_err(io_err(table))?;
    Ok(rows)
}

/// The columns the printed table shows (the CSV has them all).
const SHOWN: &[&str] = &[
    "ending",
    "finished",
    "drops",
    "pauses_sent",
    "paused_us",
    "ecn_marks",
    "slowdown_p50",
    "slowdown_p95",
    "slowdown_p99",
    "small_p99",
];

/// Prints the table, aligned: the point, its axes and [`SHOWN`].
pub fn print(grid: &Grid, rows: &[Row]) {
    let header = sweep::header(grid);
    let cols: Vec<usize> = (0..=grid.axes.len())
        .chain(SHOWN.iter().filter_map(|c| header.iter().position(|h| h == c)))
        .collect();
    let lines: Vec<Vec<&str>> = std::iter::once(cols.iter().map(|&c| header[c].as_str()).collect())
        .chain(rows.iter().map(|r| cols.iter().map(|&c| r.cells[c].as_str()).collect()))
        .collect();
    let widths: Vec<usize> =
        (0..cols.len()).map(|k| lines.iter().map(|l| l[k].chars().count()).max().unwrap_or(0)).collect();
    for l in &lines {
        let cells: Vec<String> = l.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect();
        println!("{}", cells.join("  "));
    }
}
