//! nccl-tests' output, byte for byte where it is specified: the header,
//! the column titles, the number formats of a result row, the footer
//! (nccl-tests `src/common.cu` and `src/util.cu`).

use roce_coll::OpKind;

/// C's `%g` (six significant digits, trailing zeros dropped).
pub fn g(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else if v > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let exp = v.abs().log10().floor() as i32;
    if !(-4..6).contains(&exp) {
        let s = format!("{:.5e}", v);
        // Rust: 1.23450e7 -> C: 1.2345e+07
        let (mant, e) = s.split_once('e').expect("exponent");
        let mant = trim_zeros(mant);
        let e: i32 = e.parse().expect("exponent digits");
        return format!("{mant}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    trim_zeros(&format!("{:.*}", decimals, v)).to_string()
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// A time in us as nccl-tests prints it: `%7.2f` below 100 us, `%7.1f`
/// below 10 ms, `%7.0f` above.
pub fn time_us(t: f64) -> String {
    if t < 100.0 {
        format!("{t:7.2}")
    } else if t < 10_000.0 {
        format!("{t:7.1}")
    } else {
        format!("{t:7.0}")
    }
}

/// nccl-tests' `getFloatStr`: the most decimals (2, 1, 0) that fit `width`.
pub fn fit(v: f64, width: usize) -> String {
    for d in [2usize, 1, 0] {
        let s = format!("{v:width$.d$}");
        if s.len() <= width {
            return s;
        }
    }
    format!("{v:width$.1e}")
}

/// busbw / algbw for an operation on `n` ranks (nccl-tests
/// doc/PERFORMANCE.md).
pub fn bus_factor(op: OpKind, n: usize) -> f64 {
    let n = n as f64;
    match op {
        OpKind::AllReduce => 2.0 * (n - 1.0) / n,
        OpKind::ReduceScatter | OpKind::AllGather | OpKind::AllToAll => (n - 1.0) / n,
        OpKind::Broadcast | OpKind::Reduce | OpKind::Barrier => 1.0,
    }
}

/// The nccl-tests program an operation is.
pub fn program(op: OpKind) -> &'static str {
    match op {
        OpKind::AllReduce => "all_reduce_perf",
        OpKind::ReduceScatter => "reduce_scatter_perf",
        OpKind::AllGather => "all_gather_perf",
        OpKind::Broadcast => "broadcast_perf",
        OpKind::Reduce => "reduce_perf",
        OpKind::AllToAll => "alltoall_perf",
        OpKind::Barrier => "barrier_perf",
    }
}

/// The column titles (three lines after a `#` line).
pub fn columns(per_iter: bool) -> String {
    if !per_iter {
        return "#\n\
#                                                              out-of-place                       in-place\n\
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"
            .to_string();
    }
    let pre =
        |a: &str, b: &str, c: &str, d: &str, e: &str| format!("# {a:>10}  {b:>12}  {c:>8}  {d:>6}  {e:>6}");
    let half = |t: &str, a: &str, b: &str, w: &str, mn: &str, mx: &str, p: &str, cv: &str| {
        format!("  {t:>7}  {a:>6}  {b:>6}  {w:>6}  {mn:>7}  {mx:>7}  {p:>7}  {cv:>7}")
    };
    let mut s = String::from("#\n");
    s += &pre("", "", "", "", "");
    s += "              out-of-place (+ per-iteration)                                in-place (+ per-iteration)\n";
    s += &pre("size", "count", "type", "redop", "root");
    s += &half("time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%");
    s += &half("time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%");
    s += "\n";
    s += &pre("(B)", "(elements)", "", "", "");
    s += &half("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)");
    s += &half("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)");
    s += "\n";
    s
}

/// The start of a row: `%12li  %12li  %8s  %6s  %6s`.
pub fn row_start(bytes: usize, count: usize, dtype: &str, redop: &str, root: i64) -> String {
    format!("{bytes:12}  {count:12}  {dtype:>8}  {redop:>6}  {root:>6}")
}

/// One half of a row (out-of-place or in-place):
/// ` %7s  %6.2f  %6.2f  %5s`, `#wrong` as `%5g` or `N/A`.
pub fn row_half(time: f64, algbw: f64, busbw: f64, wrong: Option<u64>) -> String {
    let w = match wrong {
        Some(w) => format!("{:>5}", g(w as f64)),
        None => "  N/A".to_string(),
    };
    format!(" {}  {algbw:6.2}  {busbw:6.2}  {w}", time_us(time))
}

/// Per-iteration statistics (us): min, max, nearest-rank p99, and the
/// coefficient of variation (%), of the per-iteration max over ranks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IterStats {
    pub min: f64,
    pub max: f64,
    pub p99: f64,
    pub cv_pct: f64,
}

impl IterStats {
    pub fn of(times: &[f64]) -> Option<IterStats> {
        if times.is_empty() {
            return None;
        }
        let mut s = times.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let p99 = s[(n * 99).div_ceil(100).saturating_sub(1).min(n - 1)];
        let avg = s.iter().sum::<f64>() / n as f64;
        let var = s.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        let cv_pct = if avg > 0.0 { var.sqrt() / avg * 100.0 } else { 0.0 };
        Some(IterStats { min: s[0], max: s[n - 1], p99, cv_pct })
    }

    /// `  %7s  %7s  %7s  %7s`.
    pub fn columns(&self) -> String {
        format!("  {}  {}  {}  {}", fit(self.min, 7), fit(self.max, 7), fit(self.p99, 7), fit(self.cv_pct, 7))
    }
}

/// The footer.
pub fn footer(wrong: u64, avg_busbw: f64, program: &str) -> String {
    format!(
        "# {:<20} : {} {}\n# {:<20} : {}\n#\n# Collective test concluded: {program}\n",
        "Out of bounds values",
        wrong,
        if wrong > 0 { "FAILED" } else { "OK" },
        "Avg bus bandwidth",
        g(avg_busbw)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g_is_c_printf_g() {
        assert_eq!(g(6.313_056), "6.31306");
        assert_eq!(g(0.0), "0");
        assert_eq!(g(12.0), "12");
        assert_eq!(g(0.5), "0.5");
        assert_eq!(g(123456.0), "123456");
        assert_eq!(g(1234567.0), "1.23457e+06");
        assert_eq!(g(0.000_012_5), "1.25e-05");
    }

    /// The row of nccl-tests' README, rebuilt from its numbers.
    #[test]
    fn a_row_is_nccl_tests_row() {
        let want = "           8             2     float     sum      -1    6.21    0.00    0.00      0    6.23    0.00    0.00      0";
        let got = row_start(8, 2, "float", "sum", -1)
            + &row_half(6.21, 0.0, 0.0, Some(0))
            + &row_half(6.23, 0.0, 0.0, Some(0));
        assert_eq!(got, want);
        assert_eq!(time_us(123.456), "  123.5");
        assert_eq!(time_us(12345.6), "  12346");
        assert!(row_half(1.0, 0.0, 0.0, None).ends_with("  N/A"));
    }

    #[test]
    fn footer_and_columns_match() {
        let f = footer(0, 6.313_06, "all_reduce_perf");
        assert!(f.starts_with("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 6.31306\n#\n"));
        assert!(f.ends_with("# Collective test concluded: all_reduce_perf\n"));
        let c = columns(false);
        assert!(c.contains(
            "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        ));
        assert!(columns(true).contains("i_cv%"));
    }

    #[test]
    fn iteration_statistics() {
        let s = IterStats::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!((s.min, s.max, s.p99), (1.0, 4.0, 4.0));
        assert!((s.cv_pct - 44.72).abs() < 0.01);
        assert_eq!(IterStats::of(&[]), None);
        assert!((bus_factor(OpKind::AllReduce, 4) - 1.5).abs() < 1e-12);
    }
}
