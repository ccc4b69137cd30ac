//! The per-size-bin slowdown table of the HPCC artifact's
//! `analysis/fct_analysis.py` (alibaba-edu/High-Precision-Congestion-
//! Control, commit 9f4be2a), computed the way that script computes it, so
//! that its output on an `fct.txt` and ours agree line for line. The
//! script is not copied here; these are the rules it follows:
//!
//! 1. Selection (`awk`): flows whose dport column is 100 (`-t 0`; 200 for
//!    `-t 1`, the incast flows) and whose `start + fct` is below the time
//!    limit (`-T`, default 3,000,000,000 ns).
//! 2. Each selected flow becomes the text `slowdown size`, slowdown =
//!    fct / standalone printed by awk: below 1 it is `1`; an integral
//!    value prints as an integer, any other with awk's `%.6g`. Percentiles
//!    are taken of these printed values (the script parses them back).
//! 3. Order (`sort -n -k 2`): by size; lines of equal size by their whole
//!    text, byte by byte (sort's last-resort comparison, under the C
//!    locale; another locale's collation can order such ties otherwise).
//! 4. The script splits the output at newlines and keeps all but the last
//!    two pieces: the empty piece after the final newline and the last
//!    line, i.e. the largest flow is left out. n = the lines kept.
//! 5. Bins of `step` % (`-s`, default 5): bin i holds lines `i n / 100`
//!    up to `(i + step) n / 100` (integer division); its row has the size
//!    of its last line and the slowdowns at 0-based index
//!    `int(len x p)` of its sorted values for p = 0.5, 0.95, 0.99. A bin
//!    with no line makes the script fail; we return no table then.
//! 6. Output: per bin `"%.3f %d" % (i / 100, size)`, then for each file
//!    compared `"\t%.3f %.3f %.3f"` of its p50, p95 and p99; the size is
//!    the first file's.

use crate::hpcc::FctLine;

/// The script's dport of normal flows (`-t 0`).
pub const NORMAL_DPORT: u16 = 100;
/// The script's default time limit `-T` (ns).
pub const DEFAULT_TIME_LIMIT_NS: u64 = 3_000_000_000;
/// The script's default bin width `-s` (percent of the flows).
pub const DEFAULT_STEP_PCT: usize = 5;
/// Percentiles of each row.
const PCTLS: [f64; 3] = [0.5, 0.95, 0.99];

/// The script's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnalysisOptions {
    /// Flows with this dport are selected (`-t 0`: 100, `-t 1`: 200).
    pub dport: u16,
    /// Only flows with `start + fct` below this (ns).
    pub time_limit_ns: u64,
    /// Bin width, percent of the flows (1..=100).
    pub step_pct: usize,
}

impl Default for AnalysisOptions {
    fn default() -> Self {
        AnalysisOptions {
            dport: NORMAL_DPORT,
            time_limit_ns: DEFAULT_TIME_LIMIT_NS,
            step_pct: DEFAULT_STEP_PCT,
        }
    }
}

/// One row of one file's table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AnalysisRow {
    /// The bin's first line, percent of the flows.
    pub start_pct: usize,
    /// The size of the bin's last flow.
    pub size: u64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

/// A slowdown as awk prints it: `1` below 1, an integral value as an
/// integer, anything else with `%.6g`.
pub fn awk_slowdown(fct_ns: u64, standalone_ns: u64) -> String {
    let s = fct_ns as f64 / standalone_ns as f64;
    let s = if s < 1.0 { 1.0 } else { s };
    if s == s.trunc() && s.abs() < 1e15 {
        format!("{}", s as i64)
    } else {
        format_g6(s)
    }
}

/// C's `%.6g` of a finite positive value.
fn format_g6(v: f64) -> String {
    const P: i32 = 6;
    // The exponent %g decides on is the one of the value rounded to P
    // significant digits.
    let sci = format!("{:.*e}", (P - 1) as usize, v);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if (-4..P).contains(&exp) {
        let decimals = (P - 1 - exp).max(0) as usize;
        trim(&format!("{v:.decimals$}"))
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    }
}

/// The table of one file's flows (see the module docs); `None` when a bin
/// would be empty (the script fails there) or `step_pct` is not 1..=100.
/// A flow with a standalone FCT of 0 is left out (awk stops at a division
/// by zero; ours cannot finish).
pub fn fct_analysis(lines: &[FctLine], opts: &AnalysisOptions) -> Option<Vec<AnalysisRow>> {
    if !(1..=100).contains(&opts.step_pct) {
        return None;
    }
    let mut sel: Vec<(String, u64)> = lines
        .iter()
        .filter(|l| {
            l.dport == opts.dport && l.start_ns + l.fct_ns < opts.time_limit_ns && l.standalone_ns > 0
        })
        .map(|l| (awk_slowdown(l.fct_ns, l.standalone_ns), l.size))
        .collect();
    sel.sort_by(|a, b| {
        a.1.cmp(&b.1).then_with(|| format!("{} {}", a.0, a.1).cmp(&format!("{} {}", b.0, b.1)))
    });
    sel.pop();
    let n = sel.len();
    let mut rows = Vec::new();
    for i in (0..100).step_by(opts.step_pct) {
        let (l, r) = (i * n / 100, ((i + opts.step_pct) * n / 100).min(n));
        let bin = sel.get(l..r).filter(|b| !b.is_empty())?;
        let mut slow: Vec<f64> = bin.iter().map(|(s, _)| s.parse().unwrap_or(f64::NAN)).collect();
        slow.sort_by(f64::total_cmp);
        let pctl = |p: f64| slow[(slow.len() as f64 * p) as usize];
        rows.push(AnalysisRow {
            start_pct: i,
            size: bin[bin.len() - 1].1,
            p50: pctl(PCTLS[0]),
            p95: pctl(PCTLS[1]),
            p99: pctl(PCTLS[2]),
        });
    }
    Some(rows)
}

/// The script's output for several files' tables (its "CCs"), in order:
/// one line per bin, the size from the first table. Tables must have the
/// same bins; a shorter one ends the output.
pub fn format_tables(tables: &[&[AnalysisRow]]) -> String {
    let mut out = String::new();
    let Some(first) = tables.first() else { return out };
    for (k, row) in first.iter().enumerate() {
        out += &format!("{:.3} {}", row.start_pct as f64 / 100.0, row.size);
        for t in tables {
            let Some(r) = t.get(k) else { return out };
            out += &format!("\t{:.3} {:.3} {:.3}", r.p50, r.p95, r.p99);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpcc::host_ip;

    #[test]
    fn slowdowns_print_as_awk_prints_them() {
        assert_eq!(awk_slowdown(50, 100), "1");
        assert_eq!(awk_slowdown(300, 100), "3");
        assert_eq!(awk_slowdown(6116, 6206), "1");
        assert_eq!(awk_slowdown(12568, 12637), "1");
        assert_eq!(awk_slowdown(14641, 14681), "1");
        assert_eq!(awk_slowdown(17011259, 8388160), "2.02801");
        assert_eq!(awk_slowdown(2487451, 46080), "53.9811");
        assert_eq!(awk_slowdown(10, 3), "3.33333");
        assert_eq!(awk_slowdown(1_234_567_890, 1), "1234567890");
        assert_eq!(format_g6(1234567.5), "1.23457e+06");
        assert_eq!(format_g6(0.5), "0.5");
        assert_eq!(format_g6(9.9999996), "10");
    }

    fn line(size: u64, fct_ns: u64, dport: u16) -> FctLine {
        FctLine {
            sip: host_ip(1),
            dip: host_ip(2),
            sport: 10000,
            dport,
            size,
            start_ns: 2_000_000_000,
            fct_ns,
            standalone_ns: 1000,
        }
    }

    /// 41 selected flows of sizes 1..=41 (slowdown = size / 10, at least
    /// 1), one of dport 200 and one too late: the largest is dropped, 40
    /// remain, 2 per 5 % bin.
    #[test]
    fn bins_follow_the_script() {
        let mut lines: Vec<FctLine> = (1..=41).map(|s| line(s, s * 100, 100)).collect();
        lines.push(line(7, 99_000, 200));
        lines.push(FctLine { start_ns: 2_999_999_000, ..line(8, 1000, 100) });
        let rows = fct_analysis(&lines, &AnalysisOptions::default()).unwrap();
        assert_eq!(rows.len(), 20);
        assert_eq!((rows[0].start_pct, rows[0].size, rows[0].p50), (0, 2, 1.0));
        // The last bin holds sizes 39 and 40: p50 = index 1.
        assert_eq!((rows[19].start_pct, rows[19].size, rows[19].p50, rows[19].p99), (95, 40, 4.0, 4.0));
        let text = format_tables(&[&rows, &rows]);
        assert_eq!(text.lines().count(), 20);
        assert_eq!(text.lines().last().unwrap(), "0.950 40\t4.000 4.000 4.000\t4.000 4.000 4.000");
        // Too few flows for every bin to hold one: no table.
        assert_eq!(fct_analysis(&lines[..10], &AnalysisOptions::default()), None);
        let none_selected = AnalysisOptions { dport: 4791, ..AnalysisOptions::default() };
        assert_eq!(fct_analysis(&lines, &none_selected), None);
    }

    /// Equal sizes across a bin boundary are ordered by their text.
    #[test]
    fn ties_order_by_the_line_text() {
        // 21 flows of one size (slowdowns 1, 1.5, 2, ... by text order
        // "1 5" < "1.5 5" < "10 5" < "2 5"...), one larger dropped.
        let mut lines: Vec<FctLine> = (0..21).map(|k| line(5, 1000 + 500 * k, 100)).collect();
        lines.push(line(6, 1000, 100));
        let rows = fct_analysis(&lines, &AnalysisOptions::default()).unwrap();
        // n = 21: bin 0 holds line 0 ("1 5"), bin 1 line 1 ("1.5 5"), bin 2
        // line 2 ("10 5", not "2 5").
        assert_eq!(rows[0].p50, 1.0);
        assert_eq!(rows[1].p50, 1.5);
        assert_eq!(rows[2].p50, 10.0);
    }
}
