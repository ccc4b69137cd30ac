//! Side-by-side comparison of two HPCC-format result directories (the
//! artifact's baseline and ours): FCTs flow by flow, FCT slowdowns overall
//! and per size bin, PFC frames by node type and per node.
//!
//! Conventions (those of the artifact's `analysis/fct_analysis.py`):
//! - slowdown = fct / standalone, clipped below at 1, each file using its
//!   own `standalone_fct_ns` column;
//! - percentile p of n sorted values = the value at 0-based index
//!   `floor(n x p)` (`get_pctl`: `a[int(len(a) * p)]`), the last one if
//!   that is past the end; for the 3201 flows of `fat_ws30_dcqcn` this
//!   gives the README's p50/p95/p99 of 1.127 / 3.922 / 5.792;
//! - size bins: the matched flows sorted by size, cut into 20 groups of
//!   5 % of the flows each (`step` 5: flows `i n / 100 .. (i + 5) n / 100`,
//!   integer division), each labelled by its size range; only with at
//!   least [`MIN_FLOWS_FOR_BINS`] matched flows of more than one size.
//!   These bins pair each baseline flow with ours; the script instead bins
//!   each file on its own, leaves out its largest flow and orders equal
//!   sizes by their text, so beside them comes the script's own table of
//!   both files ([`fct_analysis`], printed in the script's format: the
//!   baseline as its first "CC", ours as its second).
//!
//! Each file's completion time is its largest FCT (the time the last flow
//! took: the run's completion when, as in the incasts, every flow starts
//! at once), compared with the mean FCT over all its flows.
//!
//! Flows are matched by (source host, destination host, size, start):
//! source ports differ between simulators, and the artifact's start times
//! can be 1 ns below ours (it converts the start seconds through a
//! float), so starts within [`START_MATCH_TOLERANCE_NS`] match; several
//! flows with the same key match in start order.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::hpcc::{read_fct, read_pfc, FctLine, HpccError, PfcLine};
use crate::scenario::NodeId;

pub mod fct_analysis;

use fct_analysis::{AnalysisOptions, AnalysisRow};

/// Starts this close (ns) are the same flow's.
pub const START_MATCH_TOLERANCE_NS: u64 = 1;
/// The per-flow table is printed for at most this many matched flows.
pub const PER_FLOW_TABLE_MAX: usize = 20;
/// Nodes shown in the per-node PFC table.
pub const TOP_PFC_NODES: usize = 20;
/// Width of a size bin, percent of the flows.
pub const BIN_STEP_PCT: usize = 5;
/// Size bins are made only with at least this many matched flows of more
/// than one size (with fewer, 5 % bins hold a flow or two).
pub const MIN_FLOWS_FOR_BINS: usize = 100;
/// Percentiles reported.
pub const PERCENTILES: [f64; 3] = [0.50, 0.95, 0.99];

/// Why a comparison could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error(transparent)]
    Read(#[from] HpccError),
}

/// The value at index `floor(n x p)` of `sorted` (clamped to the last);
/// `None` when empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let i = (sorted.len() as f64 * p).floor() as usize;
    Some(sorted[i.min(last)])
}

/// p50, p95 and p99 of some slowdowns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowdownStats {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

impl SlowdownStats {
    /// `None` when there are no values.
    pub fn of(mut values: Vec<f64>) -> Option<SlowdownStats> {
        values.sort_by(f64::total_cmp);
        let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
        Some(SlowdownStats {
            count: values.len(),
            mean,
            p50: percentile(&values, PERCENTILES[0])?,
            p95: percentile(&values, PERCENTILES[1])?,
            p99: percentile(&values, PERCENTILES[2])?,
        })
    }
}

/// Baseline and ours side by side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowdownPair {
    pub baseline: Option<SlowdownStats>,
    pub ours: Option<SlowdownStats>,
}

/// One size bin of the matched flows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BinStats {
    pub min_size: u64,
    pub max_size: u64,
    pub baseline: SlowdownStats,
    pub ours: SlowdownStats,
}

/// A flow found in both files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowPair {
    pub baseline: FctLine,
    pub ours: FctLine,
}

impl FlowPair {
    /// Our FCT over the baseline's.
    pub fn ratio(&self) -> f64 {
        self.ours.fct_ns as f64 / self.baseline.fct_ns.max(1) as f64
    }
}

/// Minimum, mean and maximum of the FCT ratios (ours / baseline).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatioStats {
    pub min: f64,
    pub mean: f64,
    pub max: f64,
}

/// A file's largest and mean FCT, over all its flows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FctTotals {
    pub flows: usize,
    /// The largest FCT (ns): the completion time of the last flow.
    pub last_ns: u64,
    pub mean_ns: f64,
}

impl FctTotals {
    /// `None` when there are no flows.
    pub fn of(lines: &[FctLine]) -> Option<FctTotals> {
        let last_ns = lines.iter().map(|l| l.fct_ns).max()?;
        let mean_ns = lines.iter().map(|l| l.fct_ns as f64).sum::<f64>() / lines.len() as f64;
        Some(FctTotals { flows: lines.len(), last_ns, mean_ns })
    }
}

/// PFC frames received, by node type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PfcCounts {
    pub host_pause: usize,
    pub host_resume: usize,
    pub switch_pause: usize,
    pub switch_resume: usize,
}

impl PfcCounts {
    fn of(lines: &[PfcLine]) -> PfcCounts {
        let mut c = PfcCounts::default();
        for l in lines {
            *match (l.is_switch, l.pause) {
                (false, true) => &mut c.host_pause,
                (false, false) => &mut c.host_resume,
                (true, true) => &mut c.switch_pause,
                (true, false) => &mut c.switch_resume,
            } += 1;
        }
        c
    }

    pub fn total(&self) -> usize {
        self.host_pause + self.host_resume + self.switch_pause + self.switch_resume
    }
}

/// PFC frames one node received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodePfc {
    pub node: NodeId,
    pub is_switch: bool,
    pub baseline_pause: usize,
    pub baseline_resume: usize,
    pub ours_pause: usize,
    pub ours_resume: usize,
}

impl NodePfc {
    fn total(&self) -> usize {
        self.baseline_pause + self.baseline_resume + self.ours_pause + self.ours_resume
    }
}

/// PFC side by side.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PfcComparison {
    pub baseline: PfcCounts,
    pub ours: PfcCounts,
    /// The [`TOP_PFC_NODES`] nodes with the most frames (both files), most first.
    pub top_nodes: Vec<NodePfc>,
}

/// Everything [`compare`] finds.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub baseline_dir: PathBuf,
    pub ours_dir: PathBuf,
    pub baseline_flows: usize,
    pub ours_flows: usize,
    /// Matched flows, in the baseline's order.
    pub pairs: Vec<FlowPair>,
    pub unmatched_baseline: Vec<FctLine>,
    pub unmatched_ours: Vec<FctLine>,
    /// Over the matched flows.
    pub fct_ratio: Option<RatioStats>,
    /// Each file's largest and mean FCT, over all its flows.
    pub baseline_fct: Option<FctTotals>,
    pub ours_fct: Option<FctTotals>,
    /// Each file over all its flows.
    pub overall: SlowdownPair,
    /// Each file over its flows of each of the [`SIZE_CLASSES`].
    pub classes: Vec<SlowdownPair>,
    pub bins: Vec<BinStats>,
    /// `fct_analysis.py`'s table (default options) of each file, when it
    /// has at least [`MIN_FLOWS_FOR_BINS`] flows and the script would
    /// give one.
    pub artifact_bins: Option<ArtifactBins>,
    pub pfc: PfcComparison,
}

/// The artifact script's table of each file.
#[derive(Debug, Clone, PartialEq)]
pub struct ArtifactBins {
    pub baseline: Vec<AnalysisRow>,
    pub ours: Vec<AnalysisRow>,
}

impl ArtifactBins {
    fn of(base: &[FctLine], ours: &[FctLine]) -> Option<ArtifactBins> {
        if base.len().min(ours.len()) < MIN_FLOWS_FOR_BINS {
            return None;
        }
        let opts = AnalysisOptions::default();
        Some(ArtifactBins {
            baseline: fct_analysis::fct_analysis(base, &opts)?,
            ours: fct_analysis::fct_analysis(ours, &opts)?,
        })
    }

    /// The script's output with the baseline and ours as its two files.
    pub fn script_output(&self) -> String {
        fct_analysis::format_tables(&[&self.baseline, &self.ours])
    }
}

impl Comparison {
    /// The largest FCT ratio (ours / baseline), if any flow matched.
    pub fn fct_ratio_max(&self) -> Option<f64> {
        self.fct_ratio.map(|r| r.max)
    }

    /// Our largest FCT over the baseline's (the completion times).
    pub fn last_fct_ratio(&self) -> Option<f64> {
        let (b, o) = (self.baseline_fct?, self.ours_fct?);
        (b.last_ns > 0).then(|| o.last_ns as f64 / b.last_ns as f64)
    }

    /// Our mean FCT over the baseline's.
    pub fn mean_fct_ratio(&self) -> Option<f64> {
        let (b, o) = (self.baseline_fct?, self.ours_fct?);
        (b.mean_ns > 0.0).then(|| o.mean_ns / b.mean_ns)
    }

    /// Compares already-read files.
    pub fn from_lines(
        baseline_dir: &Path,
        ours_dir: &Path,
        base_fct: &[FctLine],
        ours_fct: &[FctLine],
        base_pfc: &[PfcLine],
        ours_pfc: &[PfcLine],
    ) -> Comparison {
        let (pairs, unmatched_baseline, unmatched_ours) = match_flows(base_fct, ours_fct);
        let fct_ratio = ratio_stats(&pairs);
        let overall = SlowdownPair {
            baseline: SlowdownStats::of(base_fct.iter().map(FctLine::slowdown).collect()),
            ours: SlowdownStats::of(ours_fct.iter().map(FctLine::slowdown).collect()),
        };
        Comparison {
            baseline_dir: baseline_dir.to_path_buf(),
            ours_dir: ours_dir.to_path_buf(),
            baseline_flows: base_fct.len(),
            ours_flows: ours_fct.len(),
            bins: size_bins(&pairs),
            artifact_bins: ArtifactBins::of(base_fct, ours_fct),
            pairs,
            unmatched_baseline,
            unmatched_ours,
            fct_ratio,
            baseline_fct: FctTotals::of(base_fct),
            ours_fct: FctTotals::of(ours_fct),
            overall,
            classes: class_stats(base_fct, ours_fct),
            pfc: compare_pfc(base_pfc, ours_pfc),
        }
    }
}

/// The flow-size classes of the HPCC paper's reading of FCT slowdown
/// (small flows' tail latency is what ECN and DCQCN are tuned for): a
/// label and the sizes `lo..hi` (bytes) of each.
pub const SIZE_CLASSES: [(&str, u64, u64); 3] =
    [("< 100KB", 0, 100_000), ("100KB - 1MB", 100_000, 1_000_000), (">= 1MB", 1_000_000, u64::MAX)];

/// The index into [`SIZE_CLASSES`] of a flow of `size` bytes.
pub fn size_class(size: u64) -> usize {
    SIZE_CLASSES.iter().position(|&(_, lo, hi)| (lo..hi).contains(&size)).unwrap_or(SIZE_CLASSES.len() - 1)
}

/// Each file's slowdowns in each of the [`SIZE_CLASSES`], over its own flows.
fn class_stats(base: &[FctLine], ours: &[FctLine]) -> Vec<SlowdownPair> {
    let of = |lines: &[FctLine], c: usize| {
        SlowdownStats::of(lines.iter().filter(|l| size_class(l.size) == c).map(FctLine::slowdown).collect())
    };
    (0..SIZE_CLASSES.len()).map(|c| SlowdownPair { baseline: of(base, c), ours: of(ours, c) }).collect()
}

/// Reads `fct.txt` and `pfc.txt` of both directories and compares them.
pub fn compare(baseline_dir: &Path, ours_dir: &Path) -> Result<Comparison, CompareError> {
    let base_fct = read_fct(&baseline_dir.join("fct.txt"))?;
    let ours_fct = read_fct(&ours_dir.join("fct.txt"))?;
    let base_pfc = read_pfc(&baseline_dir.join("pfc.txt"))?;
    let ours_pfc = read_pfc(&ours_dir.join("pfc.txt"))?;
    Ok(Comparison::from_lines(baseline_dir, ours_dir, &base_fct, &ours_fct, &base_pfc, &ours_pfc))
}

type FlowKey = (NodeId, NodeId, u64);

fn key(l: &FctLine) -> FlowKey {
    (l.src(), l.dst(), l.size)
}

/// Pairs flows with the same key whose starts are within the tolerance,
/// in start order.
fn match_flows(base: &[FctLine], ours: &[FctLine]) -> (Vec<FlowPair>, Vec<FctLine>, Vec<FctLine>) {
    let mut groups: HashMap<FlowKey, (Vec<usize>, Vec<usize>)> = HashMap::new();
    for (i, l) in base.iter().enumerate() {
        groups.entry(key(l)).or_default().0.push(i);
    }
    for (i, l) in ours.iter().enumerate() {
        groups.entry(key(l)).or_default().1.push(i);
    }
    let mut pairs = Vec::new();
    let mut base_left = Vec::new();
    let mut ours_left = Vec::new();
    for (mut b, mut o) in groups.into_values() {
        b.sort_by_key(|&i| (base[i].start_ns, i));
        o.sort_by_key(|&i| (ours[i].start_ns, i));
        let (mut i, mut j) = (0, 0);
        while i < b.len() && j < o.len() {
            let (sb, so) = (base[b[i]].start_ns, ours[o[j]].start_ns);
            if sb.abs_diff(so) <= START_MATCH_TOLERANCE_NS {
                pairs.push((b[i], o[j]));
                i += 1;
                j += 1;
            } else if sb < so {
                base_left.push(b[i]);
                i += 1;
            } else {
                ours_left.push(o[j]);
                j += 1;
            }
        }
        base_left.extend_from_slice(&b[i..]);
        ours_left.extend_from_slice(&o[j..]);
    }
    pairs.sort_unstable();
    base_left.sort_unstable();
    ours_left.sort_unstable();
    (
        pairs.into_iter().map(|(i, j)| FlowPair { baseline: base[i], ours: ours[j] }).collect(),
        base_left.into_iter().map(|i| base[i]).collect(),
        ours_left.into_iter().map(|j| ours[j]).collect(),
    )
}

fn ratio_stats(pairs: &[FlowPair]) -> Option<RatioStats> {
    if pairs.is_empty() {
        return None;
    }
    let ratios: Vec<f64> = pairs.iter().map(FlowPair::ratio).collect();
    Some(RatioStats {
        min: ratios.iter().copied().fold(f64::INFINITY, f64::min),
        mean: ratios.iter().sum::<f64>() / ratios.len() as f64,
        max: ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

/// The artifact's size bins over the matched flows (see the module docs).
fn size_bins(pairs: &[FlowPair]) -> Vec<BinStats> {
    let mut by_size: Vec<&FlowPair> = pairs.iter().collect();
    by_size.sort_by_key(|p| p.baseline.size);
    let n = by_size.len();
    let mut bins = Vec::new();
    let one_size = by_size.first().map(|p| p.baseline.size) == by_size.last().map(|p| p.baseline.size);
    if n < MIN_FLOWS_FOR_BINS || one_size {
        return bins;
    }
    for i in (0..100).step_by(BIN_STEP_PCT) {
        let (l, r) = (i * n / 100, (i + BIN_STEP_PCT) * n / 100);
        let group = &by_size[l..r];
        let (Some(first), Some(last)) = (group.first(), group.last()) else { continue };
        let base = SlowdownStats::of(group.iter().map(|p| p.baseline.slowdown()).collect());
        let ours = SlowdownStats::of(group.iter().map(|p| p.ours.slowdown()).collect());
        if let (Some(baseline), Some(ours)) = (base, ours) {
            bins.push(BinStats {
                min_size: first.baseline.size,
                max_size: last.baseline.size,
                baseline,
                ours,
            });
        }
    }
    bins
}

fn compare_pfc(base: &[PfcLine], ours: &[PfcLine]) -> PfcComparison {
    let mut nodes: BTreeMap<(NodeId, bool), NodePfc> = BTreeMap::new();
    let mut count = |lines: &[PfcLine], is_base: bool| {
        for l in lines {
            let e = nodes.entry((l.node, l.is_switch)).or_insert(NodePfc {
                node: l.node,
                is_switch: l.is_switch,
                baseline_pause: 0,
                baseline_resume: 0,
                ours_pause: 0,
                ours_resume: 0,
            });
            *match (is_base, l.pause) {
                (true, true) => &mut e.baseline_pause,
                (true, false) => &mut e.baseline_resume,
                (false, true) => &mut e.ours_pause,
                (false, false) => &mut e.ours_resume,
            } += 1;
        }
    };
    count(base, true);
    count(ours, false);
    let mut top: Vec<NodePfc> = nodes.into_values().collect();
    top.sort_by(|a, b| b.total().cmp(&a.total()).then(a.node.cmp(&b.node)));
    top.truncate(TOP_PFC_NODES);
    PfcComparison { baseline: PfcCounts::of(base), ours: PfcCounts::of(ours), top_nodes: top }
}

/// `24.4KB`, `3.88MB`: decimal units, as flow sizes are usually quoted.
fn fmt_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1_000_000_000, "GB"), (1_000_000, "MB"), (1_000, "KB")];
    for (scale, unit) in UNITS {
        if bytes >= scale {
            let v = format!("{:.2}", bytes as f64 / scale as f64);
            return format!("{}{unit}", v.trim_end_matches('0').trim_end_matches('.'));
        }
    }
    format!("{bytes}B")
}

fn ratio(ours: f64, base: f64) -> f64 {
    if base == 0.0 {
        f64::NAN
    } else {
        ours / base
    }
}

fn fmt_stats_row(
    f: &mut fmt::Formatter<'_>,
    label: &str,
    b: &SlowdownStats,
    o: &SlowdownStats,
) -> fmt::Result {
    write!(f, "  {label:<22} {:>6}", b.count)?;
    for (bv, ov) in [(b.p50, o.p50), (b.p95, o.p95), (b.p99, o.p99)] {
        write!(f, "  {bv:>8.3} {ov:>8.3} {:>6.3}", ratio(ov, bv))?;
    }
    writeln!(f)
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "baseline: {}", self.baseline_dir.display())?;
        writeln!(f, "ours:     {}", self.ours_dir.display())?;
        writeln!(
            f,
            "flows: baseline {}, ours {}, matched {} (unmatched: baseline {}, ours {})",
            self.baseline_flows,
            self.ours_flows,
            self.pairs.len(),
            self.unmatched_baseline.len(),
            self.unmatched_ours.len()
        )?;
        if !self.pairs.is_empty() && self.pairs.len() <= PER_FLOW_TABLE_MAX {
            writeln!(
                f,
                "  {:>5} {:>5} {:>10} {:>14} {:>14} {:>14} {:>7}",
                "src", "dst", "size", "start_ns", "baseline_us", "ours_us", "ratio"
            )?;
            for p in &self.pairs {
                let b = &p.baseline;
                writeln!(
                    f,
                    "  {:>5} {:>5} {:>10} {:>14} {:>14.3} {:>14.3} {:>7.4}",
                    b.src(),
                    b.dst(),
                    fmt_size(b.size),
                    b.start_ns,
                    b.fct_ns as f64 / 1e3,
                    p.ours.fct_ns as f64 / 1e3,
                    p.ratio()
                )?;
            }
        }
        if let Some(r) = self.fct_ratio {
            writeln!(f, "FCT ratio ours/baseline: min {:.4}  mean {:.4}  max {:.4}", r.min, r.mean, r.max)?;
        }
        if let (Some(b), Some(o)) = (self.baseline_fct, self.ours_fct) {
            let us = |ns: f64| ns / 1e3;
            writeln!(
                f,
                "completion (largest FCT): baseline {:.3} us, ours {:.3} us, ratio {:.4}",
                us(b.last_ns as f64),
                us(o.last_ns as f64),
                ratio(o.last_ns as f64, b.last_ns as f64)
            )?;
            writeln!(
                f,
                "mean FCT (all flows):     baseline {:.3} us, ours {:.3} us, ratio {:.4}",
                us(b.mean_ns),
                us(o.mean_ns),
                ratio(o.mean_ns, b.mean_ns)
            )?;
        }
        writeln!(f, "slowdown = fct/standalone (>= 1); percentile p = sorted[floor(n p)]; bins = 5% of matched flows by size")?;
        writeln!(
            f,
            "  {:<22} {:>6}  {:>8} {:>8} {:>6}  {:>8} {:>8} {:>6}  {:>8} {:>8} {:>6}",
            "sizes",
            "flows",
            "p50 base",
            "ours",
            "ratio",
            "p95 base",
            "ours",
            "ratio",
            "p99 base",
            "ours",
            "ratio"
        )?;
        match (&self.overall.baseline, &self.overall.ours) {
            (Some(b), Some(o)) => fmt_stats_row(f, "all (each file)", b, o)?,
            (b, o) => writeln!(
                f,
                "  all: baseline {} flows, ours {} flows",
                b.map_or(0, |s| s.count),
                o.map_or(0, |s| s.count)
            )?,
        }
        for (pair, (label, _, _)) in self.classes.iter().zip(SIZE_CLASSES) {
            if let (Some(b), Some(o)) = (&pair.baseline, &pair.ours) {
                fmt_stats_row(f, &format!("  {label}"), b, o)?;
            }
        }
        for bin in &self.bins {
            let label = format!("{} - {}", fmt_size(bin.min_size), fmt_size(bin.max_size));
            fmt_stats_row(f, &label, &bin.baseline, &bin.ours)?;
        }
        if let Some(a) = &self.artifact_bins {
            let o = AnalysisOptions::default();
            writeln!(
                f,
                "fct_analysis.py -s {} -t 0 (each file: dport {}, ending before {} ns, by size, the largest left out):",
                o.step_pct, o.dport, o.time_limit_ns
            )?;
            writeln!(f, "pct size\tbaseline p50 p95 p99\tours p50 p95 p99")?;
            f.write_str(&a.script_output())?;
        }
        let (b, o) = (&self.pfc.baseline, &self.pfc.ours);
        writeln!(f, "PFC frames received    baseline pause/resume  ours pause/resume")?;
        let row = |f: &mut fmt::Formatter<'_>, label: &str, counts: [usize; 4]| {
            let [bp, br, op, or] = counts;
            writeln!(f, "  {label:<20} {bp:>10} / {br:<10} {op:>8} / {or}")
        };
        row(f, "hosts", [b.host_pause, b.host_resume, o.host_pause, o.host_resume])?;
        row(f, "switches", [b.switch_pause, b.switch_resume, o.switch_pause, o.switch_resume])?;
        if !self.pfc.top_nodes.is_empty() {
            writeln!(f, "  per node (top {TOP_PFC_NODES}):")?;
            for n in &self.pfc.top_nodes {
                let name = format!("{} {}", if n.is_switch { "switch" } else { "host" }, n.node);
                row(
                    f,
                    &format!("  {name}"),
                    [n.baseline_pause, n.baseline_resume, n.ours_pause, n.ours_resume],
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
