//! `roce sim plot TABLE.csv --out FIGURE.svg`: a table of figures as a line
//! plot (the straggler study's curves: iteration time against an injected
//! delay, busbw against a link's rate), drawn with the simulator's own
//! plotting (`roce_fabric::plot::sweep_svg`).
//!
//! The table: a header row (the x axis's name, then one name per line),
//! then rows of numbers; an empty cell leaves that point out.

use std::path::PathBuf;

use roce_fabric::plot::SweepSeries;

use super::SimCliError;

#[derive(Debug, clap::Args)]
pub struct PlotArgs {
    /// The table (CSV: header, then numbers; first column x).
    pub table: PathBuf,
    /// Where to write the SVG.
    #[arg(long, short, value_name = "FILE")]
    pub out: PathBuf,
    #[arg(long, default_value = "")]
    pub title: String,
    /// The y axis's name.
    #[arg(long, default_value = "")]
    pub y: String,
}

/// The lines of `text`: the x axis's name and each column's (name, points).
pub fn parse(text: &str) -> Result<(String, Vec<SweepSeries>), String> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let head: Vec<&str> = lines.next().ok_or("an empty table")?.split(',').map(str::trim).collect();
    if head.len() < 2 {
        return Err("the header names the x axis and one line at least".into());
    }
    let mut series: Vec<SweepSeries> = head[1..].iter().map(|h| (h.to_string(), Vec::new())).collect();
    for (i, line) in lines.enumerate() {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if cells.len() != head.len() {
            return Err(format!("row {}: {} cells, the header has {}", i + 1, cells.len(), head.len()));
        }
        let num = |c: &str| c.parse::<f64>().ok().filter(|v| v.is_finite());
        let x = num(cells[0]).ok_or(format!("row {}: x {:?} is not a number", i + 1, cells[0]))?;
        for (j, c) in cells[1..].iter().enumerate() {
            if c.is_empty() {
                continue;
            }
            let y =
                num(c).ok_or(format!("row {}, column {:?}: {c:?} is not a number", i + 1, head[j + 1]))?;
            series[j].1.push((x, y));
        }
    }
    Ok((head[0].to_string(), series))
}

pub fn cmd_plot(args: &PlotArgs) -> Result<(), SimCliError> {
    let text = std::fs::read_to_string(&args.table)
        .map_err(|e| SimCliError::Io { path: args.table.clone(), source: e })?;
    let (x, series) =
        parse(&text).map_err(|e| SimCliError::Usage(format!("{}: {e}", args.table.display())))?;
    let svg = roce_fabric::plot::sweep_svg(&args.title, &x, &args.y, &series, None)
        .map_err(|e| SimCliError::Io { path: args.out.clone(), source: e })?;
    std::fs::write(&args.out, svg).map_err(|e| SimCliError::Io { path: args.out.clone(), source: e })
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_table_becomes_lines_and_bad_cells_are_named() {
        let (x, s) = parse("d (us),measured,theory\n0,100,100\n50,151,\n\n100,199.5,200\n").unwrap();
        assert_eq!(x, "d (us)");
        assert_eq!(s[0], ("measured".to_string(), vec![(0.0, 100.0), (50.0, 151.0), (100.0, 199.5)]));
        assert_eq!(s[1].1, vec![(0.0, 100.0), (100.0, 200.0)]);
        for (bad, want) in [
            ("", "empty"),
            ("x\n1\n", "one line at least"),
            ("x,y\n1,2,3\n", "row 1: 3 cells"),
            ("x,y\nnan,2\n", "x \"nan\""),
            ("x,y\n1,fast\n", "column \"y\""),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(want), "{bad:?}: {e}");
        }
    }
}
