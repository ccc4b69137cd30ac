//! `roce sim coll [WORKLOAD.toml]`: collectives on the simulated fabric
//! (`roce_fabric::coll`), printed as `roce coll` prints them (nccl-tests'
//! table, through `roce coll`'s own printer and test data), plus the
//! iteration time's p50 / p99 / max per size, who the ranks waited for,
//! and what the simulation cost. With no file, a built-in workload
//! (`roce_fabric::coll::workload::DEFAULT`: 8 ranks at 100G on one
//! switch). Same workload and seed, byte-identical output (`--usage` adds
//! the CPU figures, which are not).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use roce_coll::OpDesc;
use roce_fabric::coll::{self, workload, CollResult, DataCheck, Workload};
use roce_fabric::PS_PER_S;

use super::usage::Meter;
use super::SimCliError;
use crate::coll::data::Shape;
use crate::coll::format;

#[derive(Debug, clap::Args)]
pub struct CollArgs {
    /// The workload (TOML; the format is in `roce_fabric::coll::workload`).
    /// Default: a built-in one (8 ranks, one switch, all-reduce 64 KiB ..
    /// 16 MiB).
    pub workload: Option<PathBuf>,
    /// Seed (default: the workload's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print the built-in workload and exit.
    #[arg(long)]
    pub print_default: bool,
    /// Also print user CPU, max RSS and packet-hops per CPU-second.
    #[arg(long)]
    pub usage: bool,
    /// Also print every iteration's time (the in-place half), per size.
    #[arg(long)]
    pub iterations: bool,
    /// Also write each size's per-rank timeline (the in-place half: every
    /// rank's compute phases and calls, and where each iteration ended) as
    /// SVG, to PREFIX-COLLECTIVE-BYTES.svg.
    #[arg(long, value_name = "PREFIX")]
    pub timeline: Option<PathBuf>,
}

/// `roce coll`'s test data, as the check of the simulated runs.
struct Check;

fn shape(d: &OpDesc, n: usize, rank: usize) -> Shape {
    Shape { op: d.op, dt: d.dtype, redop: d.redop, count: d.count, root: d.root, rank, n }
}

impl DataCheck for Check {
    fn fill(&self, d: &OpDesc, n: usize, rank: usize, in_place: bool, input: &mut [u8]) {
        let s = shape(d, n, rank);
        s.fill_input(input, if in_place { s.inplace_input_at() } else { 0 });
    }
    fn wrong(&self, d: &OpDesc, n: usize, rank: usize, in_place: bool, result: &[u8]) -> u64 {
        let s = shape(d, n, rank);
        s.count_wrong(result, if in_place { s.inplace_result_at() } else { 0 })
    }
}

pub fn cmd_coll(args: &CollArgs) -> Result<ExitCode, SimCliError> {
    if args.print_default {
        print!("{}", workload::DEFAULT.trim_start());
        return Ok(ExitCode::SUCCESS);
    }
    let mut w = match &args.workload {
        Some(p) => workload::from_path(p)?,
        None => workload::from_str(workload::DEFAULT, Path::new("."))?,
    };
    if let Some(s) = args.seed {
        w.seed = s;
    }
    let meter = Meter::start();
    let mut wrong_total = 0;
    let mut hops = 0;
    for i in 0..w.collectives.len() {
        let res = coll::run(&w, i, Some(&Check))
            .map_err(|e| SimCliError::Usage(format!("simulation failed: {e}")))?;
        hops += res.packet_hops;
        let (text, wrong) = render(&w, &res);
        print!("{text}");
        if args.iterations {
            for row in &res.rows {
                let t: Vec<String> = row.in_place.iter_us.iter().map(|x| format!("{x:.3}")).collect();
                println!("# iterations (us): {}", t.join(" "));
            }
        }
        wrong_total += wrong;
        if let Some(prefix) = &args.timeline {
            for row in &res.rows {
                let path = PathBuf::from(format!("{}-{i}-{}.svg", prefix.display(), row.bytes));
                let title = format!(
                    "{} {} B, {} ranks, {}: per-rank timeline (grey compute, blue call)",
                    res.spec.op.name(),
                    row.bytes,
                    res.ranks,
                    row.algo.name()
                );
                let svg = roce_fabric::plot::timeline_svg(&title, row.in_place.t0, &row.in_place.spans)
                    .map_err(|e| SimCliError::Usage(format!("drawing {}: {e}", path.display())))?;
                std::fs::write(&path, svg)
                    .map_err(|e| SimCliError::Usage(format!("writing {}: {e}", path.display())))?;
                println!("# timeline: {}", path.display());
            }
        }
    }
    if args.usage {
        let u = meter.stop();
        let cpu = u.user_cpu_s.unwrap_or(f64::NAN);
        println!(
            "# usage: user CPU {cpu:.2} s, wall {:.2} s, max RSS {} KiB, packet-hops {hops}, {:.3e} packet-hops per CPU-second",
            u.wall_s,
            u.max_rss_kib.map_or("?".into(), |k| k.to_string()),
            hops as f64 / cpu
        );
    }
    Ok(if wrong_total > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn na_half() -> String {
    format!(" {:>7}  {:>6}  {:>6}  {:>5}", "N/A", "N/A", "N/A", "N/A")
}

fn percentile(sorted: &[f64], p: usize) -> f64 {
    let n = sorted.len();
    sorted[(n * p).div_ceil(100).saturating_sub(1).min(n - 1)]
}

/// The text of one collective's results and its wrong-element count.
pub fn render(w: &Workload, r: &CollResult) -> (String, u64) {
    let s = &r.spec;
    let n = r.ranks;
    let mut out = String::new();
    let min = s.sizes.iter().min().copied().unwrap_or(0);
    let max = s.sizes.iter().max().copied().unwrap_or(0);
    let checked = r.rows.iter().any(|row| row.in_place.wrong.is_some());
    out += &format!(
        "# nThread 1 nGpus 1 minBytes {min} maxBytes {max} step: {}(sizes) warmup iters: 0 iters: {} agg iters: 1 validation: {} graph: 0\n",
        s.sizes.len(),
        s.iterations,
        checked as u8
    );
    let f = &w.fabric;
    out += &format!(
        "# Simulated: {} ({} hosts, {} Gb/s links, {} ns delay, MTU {}, pfc {}, ecn {}, cc {}), {n} ranks, seed {}\n",
        r.topology,
        r.hosts,
        f.rate_bps as f64 / 1e9,
        f.delay_ps / 1000,
        f.mtu.bytes(),
        f.pfc,
        f.ecn,
        if f.dcqcn { "dcqcn" } else { "none" },
        w.seed
    );
    if let Some((nodes, depth)) = r.aggregation {
        out += &format!(
            "# The switches aggregate: {nodes} aggregation nodes, a tree of {depth} levels, each a pool of {} slots of {} B\n",
            s.slots, s.slot_bytes
        );
    }
    out += &format!(
        "# {} QPs per peer, {} slots of {} B, compute mean {} ns sigma {} ns",
        s.qps_per_peer,
        s.slots,
        s.slot_bytes,
        s.compute.mean_ps / 1000,
        s.compute.sigma_ps / 1000
    );
    if s.priority != 0 {
        out += &format!(", priority {}", s.priority);
    }
    for (rank, d) in &s.compute.delays {
        out += &format!(", rank {rank} +{} ns", d / 1000);
    }
    for l in &f.slow_links {
        out += &format!(", rank {}'s link at {}x", l.rank, l.fraction);
    }
    for l in &f.lossy_links {
        out += &format!(", rank {}'s link loses {}", l.rank, l.loss);
    }
    for st in &f.nic_stalls {
        out += &format!(", rank {}'s NIC stalls at {} ns", st.rank, st.at_ps / 1000);
    }
    for b in &f.background {
        out += &format!(
            ", background hosts {:?} -> host {} ({} B WRITEs, priority {}, {} in flight)",
            b.from, b.to, b.message, b.priority, b.depth
        );
    }
    if let Some(wt) = f.weights {
        out += &format!(", switch DWRR weights {wt:?}");
    }
    out += "\n";
    out += &format::columns(false);
    let factor = format::bus_factor(s.op, n);
    let (mut wrong, mut bw_sum, mut bw_n) = (0, 0.0, 0);
    let mut iters = String::new();
    for row in &r.rows {
        let redop = if s.op.reduces() { s.redop.name() } else { "none" };
        let root = if s.op.rooted() { 0 } else { -1 };
        let mut line = format::row_start(row.bytes, row.count, s.dtype.nccl_name(), redop, root);
        for h in [row.out_of_place.as_ref(), Some(&row.in_place)] {
            match h {
                None => line += &na_half(),
                Some(h) => {
                    let algbw =
                        if h.time_us > 0.0 { row.bytes as f64 / (h.time_us * 1e-6) / 1e9 } else { 0.0 };
                    bw_sum += algbw * factor;
                    bw_n += 1;
                    wrong += h.wrong.unwrap_or(0);
                    line += &format::row_half(h.time_us, algbw, algbw * factor, h.wrong);
                }
            }
        }
        out += &line;
        out += "\n";
        let mut it: Vec<f64> = row.in_place.iter_us.clone();
        if let Some(o) = &row.out_of_place {
            it.extend_from_slice(&o.iter_us);
        }
        it.sort_by(f64::total_cmp);
        iters += &format!(
            "# {:>10}  {:>18}  {}  {}  {}\n",
            row.bytes,
            row.algo.name(),
            format::fit(percentile(&it, 50), 10),
            format::fit(percentile(&it, 99), 10),
            format::fit(it[it.len() - 1], 10)
        );
    }
    out += &format::footer(wrong, if bw_n > 0 { bw_sum / bw_n as f64 } else { 0.0 }, format::program(s.op));
    out += "#\n# Iteration time (compute + call, the cluster's step), both halves\n";
    out += &format!(
        "# {:>10}  {:>18}  {:>10}  {:>10}  {:>10}\n",
        "size (B)", "algorithm", "p50 (us)", "p99 (us)", "max (us)"
    );
    out += &iters;
    let mut last: Vec<(u64, usize)> =
        r.last_in.iter().enumerate().map(|(i, &c)| (c, i)).filter(|x| x.0 > 0).collect();
    last.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let calls: u64 = r.last_in.iter().sum();
    out += "# Waited for (rank: calls it entered last):";
    for (c, i) in last.iter().take(5) {
        out += &format!(" {i}: {c}/{calls}");
    }
    out += "\n";
    out += "# Busiest links (share of the run spent sending):";
    for (a, b, share) in &r.busiest_links {
        out += &format!(" {a}->{b} {share:.3}");
    }
    out += "\n";
    if let Some((flows, bytes, ps)) = r.background {
        out += &format!(
            "# Background: {flows} flows delivered {bytes} B in {:.3} ms, {:.2} GB/s\n",
            ps as f64 / PS_PER_S as f64 * 1e3,
            bytes as f64 / (ps.max(1) as f64 / PS_PER_S as f64) / 1e9
        );
    }
    out += &format!(
        "# Simulated {:.3} ms: {} events, {} packet-hops, {} QPs, {} frames dropped, {} PFC pauses, busiest switch link {} frames ({:.2}x the mean)\n#\n",
        r.end_ps as f64 / PS_PER_S as f64 * 1e3,
        r.events,
        r.packet_hops,
        r.qps,
        r.dropped,
        r.pfc_pauses,
        r.max_trunk_frames,
        r.trunk_imbalance
    );
    (out, wrong)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: &str = r#"
seed = 3
[topology]
kind = "switch"
hosts = 3
[[collective]]
op = "all-reduce"
type = "bfloat16"
sizes = ["1KiB", "96KiB"]
iterations = 2
compute = { mean = "5us", sigma = "1us" }
"#;

    fn text(seed: u64) -> (String, u64) {
        let mut w = workload::from_str(TINY, Path::new(".")).unwrap();
        w.seed = seed;
        let r = coll::run(&w, 0, Some(&Check)).unwrap();
        render(&w, &r)
    }

    #[test]
    fn the_same_seed_prints_the_same_bytes() {
        let (a, wrong) = text(3);
        assert_eq!(wrong, 0, "{a}");
        assert_eq!(a, text(3).0);
        assert_ne!(a, text(4).0);
        assert!(a.contains("# Out of bounds values : 0 OK"), "{a}");
        assert!(a.contains("bfloat16"), "{a}");
    }

    /// In-network aggregation, every type and reduction, with the real
    /// tool's test values: 5 ranks over two pods of a k = 4 fat-tree,
    /// sizes of one chunk and of several, not a multiple of the chunk.
    #[test]
    fn the_switches_aggregate_every_type_and_reduction_right() {
        let mut text = String::from("[topology]\nkind = \"fat-tree\"\nk = 4\n");
        let types = ["float", "double", "half", "bfloat16", "int32", "int64", "uint8"];
        let ops = ["sum", "prod", "min", "max", "avg"];
        for t in types {
            for o in ops {
                text += &format!(
                    "[[collective]]\nalgo = \"switch\"\ntype = \"{t}\"\nredop = \"{o}\"\nranks = 5\n\
                     sizes = [\"8B\", \"20000B\"]\niterations = 1\nslots = 2\nslot_bytes = \"4KiB\"\ncheck = true\n"
                );
            }
        }
        let w = workload::from_str(&text, Path::new(".")).unwrap();
        for i in 0..w.collectives.len() {
            let r = coll::run(&w, i, Some(&Check)).unwrap();
            let wrong: u64 = r
                .rows
                .iter()
                .flat_map(|row| [row.out_of_place.as_ref().and_then(|h| h.wrong), row.in_place.wrong])
                .map(|x| x.expect("checked"))
                .sum();
            let c = &w.collectives[i];
            assert_eq!(wrong, 0, "{:?} {:?}", c.dtype, c.redop);
        }
    }

    #[test]
    fn the_default_workload_parses() {
        let w = workload::from_str(workload::DEFAULT, Path::new(".")).unwrap();
        assert_eq!(w.collectives.len(), 1);
    }
}
