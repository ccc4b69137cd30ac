//! SVG plots of a run (plotters' SVG backend; text is written as SVG
//! `<text>` and drawn by the viewer's fonts, so no font files are needed).
//!
//! - `queues.svg`: the monitored ports' egress queues (all priorities, KB)
//!   over time, one line per port, and below them one row per port with a
//!   shaded band wherever the port was paused on any priority. Written
//!   when the report has queue samples.
//! - `rates.svg`: each flow's sending rate (Gb/s) over time. Written when
//!   the report has rate samples. The legend is left out beyond 16 flows.
//! - `fct_slowdown.svg`: FCT slowdown against flow size (log scale), one
//!   dot per flow. Written when the caller gives the slowdowns (it knows
//!   the ideal FCT's definition; this module does not).
//!
//! Ports are named `node:port (→peer)` and flows `f<index> src→dst`, with
//! the scenario's node names. Times are in microseconds.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::Report;
use crate::scenario::peer_of;
use crate::scenario::{NodeId, Scenario, Time, PS_PER_US};

/// Size of every plot, pixels.
const SIZE: (u32, u32) = (1000, 700);
/// Flows with a legend entry at most.
const MAX_LEGEND: usize = 16;

/// Writes the plots that the report has data for into `dir` (created if
/// missing) and returns their paths. `slowdowns`: (flow size in bytes,
/// FCT / ideal FCT) for `fct_slowdown.svg`.
pub fn write_plots(
    scn: &Scenario,
    report: &Report,
    dir: &Path,
    slowdowns: Option<&[(u64, f64)]>,
) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let mut write = |name: &str, svg: String| -> io::Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, svg)?;
        written.push(path);
        Ok(())
    };
    if !report.queues.is_empty() {
        write("queues.svg", queues_svg(scn, report).map_err(io::Error::other)?)?;
    }
    if !report.rates.is_empty() {
        write("rates.svg", rates_svg(scn, report).map_err(io::Error::other)?)?;
    }
    if let Some(s) = slowdowns.filter(|s| !s.is_empty()) {
        write("fct_slowdown.svg", slowdown_svg(scn, s).map_err(io::Error::other)?)?;
    }
    Ok(written)
}

/// Tableau's ten colours, cycled through by series.
const COLOURS: [(u8, u8, u8); 10] = [
    (0x1f, 0x77, 0xb4),
    (0xff, 0x7f, 0x0e),
    (0x2c, 0xa0, 0x2c),
    (0xd6, 0x27, 0x28),
    (0x94, 0x67, 0xbd),
    (0x8c, 0x56, 0x4b),
    (0xe3, 0x77, 0xc2),
    (0x7f, 0x7f, 0x7f),
    (0xbc, 0xbd, 0x22),
    (0x17, 0xbe, 0xcf),
];

fn colour(i: usize) -> RGBAColor {
    let (r, g, b) = COLOURS[i % COLOURS.len()];
    RGBColor(r, g, b).to_rgba()
}

/// A plot that could not be drawn: plotters' error, which carries the SVG
/// backend's.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct DrawError(Box<dyn std::error::Error + Send + Sync>);

type DrawResult<T> = Result<T, DrawError>;

fn err<E: std::error::Error + Send + Sync + 'static>(e: E) -> DrawError {
    DrawError(Box::new(e))
}

fn us(t: Time) -> f64 {
    t as f64 / PS_PER_US as f64
}

fn node_name(scn: &Scenario, n: NodeId) -> String {
    scn.nodes.get(n).map_or_else(|| format!("node{n}"), |s| s.name.clone())
}

fn port_label(scn: &Scenario, node: NodeId, port: u32) -> String {
    match peer_of(scn, node, port) {
        Some(p) => format!("{}:{port} (→{})", node_name(scn, node), node_name(scn, p)),
        None => format!("{}:{port}", node_name(scn, node)),
    }
}

fn flow_label(scn: &Scenario, flow: usize) -> String {
    match scn.flows.get(flow) {
        Some(f) => format!("f{flow} {}→{}", node_name(scn, f.src), node_name(scn, f.dst)),
        None => format!("f{flow}"),
    }
}

/// A range that is never empty (plotters needs start < end).
fn span(lo: f64, hi: f64) -> std::ops::Range<f64> {
    if hi > lo {
        lo..hi
    } else {
        lo..lo + 1.0
    }
}

fn queues_svg(scn: &Scenario, report: &Report) -> DrawResult<String> {
    // Ports in the order the scenario monitors them, then any others.
    let mut order: Vec<(NodeId, u32)> = scn.monitor.ports.clone();
    for s in &report.queues {
        if !order.contains(&(s.node, s.port)) {
            order.push((s.node, s.port));
        }
    }
    let mut series: Vec<Vec<(f64, u64, u8)>> = vec![Vec::new(); order.len()];
    for s in &report.queues {
        let i = order.iter().position(|&p| p == (s.node, s.port)).expect("listed above");
        series[i].push((us(s.time_ps), s.bytes, s.paused));
    }
    let keep: Vec<usize> = (0..order.len()).filter(|&i| !series[i].is_empty()).collect();
    let t_end = report.queues.iter().map(|s| us(s.time_ps)).fold(0.0, f64::max).max(us(report.end_ps));
    let t_start = report.queues.iter().map(|s| us(s.time_ps)).fold(f64::INFINITY, f64::min).min(t_end);
    let q_max = report.queues.iter().map(|s| s.bytes).max().unwrap_or(0) as f64 / 1000.0;

    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let title = format!("{}: egress queues of the monitored ports", scn.name);
        let root = root.titled(&title, ("sans-serif", 22)).map_err(err)?;
        let (upper, lower) = root.split_vertically(SIZE.1 * 62 / 100);

        let mut chart = ChartBuilder::on(&upper)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(span(t_start, t_end), span(0.0, q_max * 1.05))
            .map_err(err)?;
        chart.configure_mesh().x_desc("time (us)").y_desc("queue (KB)").draw().map_err(err)?;
        for (k, &i) in keep.iter().enumerate() {
            let colour = colour(k);
            let (node, port) = order[i];
            chart
                .draw_series(LineSeries::new(
                    series[i].iter().map(|&(t, b, _)| (t, b as f64 / 1000.0)),
                    colour.stroke_width(2),
                ))
                .map_err(err)?
                .label(port_label(scn, node, port))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;

        pause_panel(scn, &lower, &order, &keep, &series, t_start..t_end.max(t_start + 1.0))?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// One row per port, the first on top; a band where its samples show it paused (from a
/// paused sample to the next sample).
fn pause_panel(
    scn: &Scenario,
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    order: &[(NodeId, u32)],
    keep: &[usize],
    series: &[Vec<(f64, u64, u8)>],
    time: std::ops::Range<f64>,
) -> DrawResult<()> {
    let rows = keep.len().max(1);
    let labels: Vec<String> = keep.iter().map(|&i| port_label(scn, order[i].0, order[i].1)).collect();
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(150)
        .caption("paused (any priority)", ("sans-serif", 16))
        .build_cartesian_2d(time.clone(), -0.5..(rows as f64 - 0.5))
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows)
        .y_label_formatter(&|y| {
            let r = y.round();
            if (y - r).abs() < 1e-6 && r >= 0.0 {
                // The first port on the top row.
                rows.checked_sub(r as usize + 1).and_then(|k| labels.get(k)).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc("time (us)")
        .draw()
        .map_err(err)?;
    for (row, &i) in keep.iter().enumerate() {
        let colour = colour(row);
        let s = &series[i];
        let mut bands = Vec::new();
        for (j, &(t, _, paused)) in s.iter().enumerate() {
            if paused != 0 {
                let t1 = s.get(j + 1).map_or(time.end, |n| n.0);
                match bands.last_mut() {
                    Some((_, end)) if *end == t => *end = t1,
                    _ => bands.push((t, t1)),
                }
            }
        }
        let y = (rows - 1 - row) as f64;
        chart
            .draw_series(
                bands
                    .into_iter()
                    .map(|(a, b)| Rectangle::new([(a, y - 0.35), (b, y + 0.35)], colour.mix(0.5).filled())),
            )
            .map_err(err)?;
    }
    Ok(())
}

fn rates_svg(scn: &Scenario, report: &Report) -> DrawResult<String> {
    let mut flows: BTreeMap<usize, Vec<(f64, f64)>> = BTreeMap::new();
    for r in &report.rates {
        flows.entry(r.flow).or_default().push((us(r.time_ps), r.rate_bps / 1e9));
    }
    let t_end = report.rates.iter().map(|r| us(r.time_ps)).fold(0.0, f64::max);
    let t_start = report.rates.iter().map(|r| us(r.time_ps)).fold(f64::INFINITY, f64::min).min(t_end);
    let r_max = report.rates.iter().map(|r| r.rate_bps / 1e9).fold(0.0, f64::max);

    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{}: flow sending rates", scn.name), ("sans-serif", 22))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(span(t_start, t_end), span(0.0, r_max * 1.05))
            .map_err(err)?;
        chart.configure_mesh().x_desc("time (us)").y_desc("rate (Gb/s)").draw().map_err(err)?;
        let legend = flows.len() <= MAX_LEGEND;
        for (k, (&flow, pts)) in flows.iter().enumerate() {
            let colour = colour(k);
            let drawn = chart
                .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))
                .map_err(err)?;
            if legend {
                drawn.label(flow_label(scn, flow)).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
            }
        }
        if legend {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}

fn slowdown_svg(scn: &Scenario, points: &[(u64, f64)]) -> DrawResult<String> {
    let sizes = points.iter().map(|p| p.0.max(1) as f64);
    let (lo, hi) = sizes.fold((f64::INFINITY, 0.0f64), |(lo, hi), s| (lo.min(s), hi.max(s)));
    let (lo, hi) = (lo / 1.5, hi * 1.5);
    let s_max = points.iter().map(|p| p.1).filter(|s| s.is_finite()).fold(1.0, f64::max);

    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{}: FCT slowdown by flow size", scn.name), ("sans-serif", 22))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(span(lo, hi).log_scale(), span(0.0, s_max * 1.05))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("flow size (bytes)")
            .y_desc("FCT / ideal FCT")
            .x_label_formatter(&|x| human_bytes(*x))
            .draw()
            .map_err(err)?;
        let colour = colour(0);
        chart
            .draw_series(
                points
                    .iter()
                    .filter(|p| p.1.is_finite())
                    .map(|&(s, d)| Circle::new((s.max(1) as f64, d), 3, colour.mix(0.7).filled())),
            )
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

fn human_bytes(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.3}GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.3}MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.3}KB", b / 1e3)
    } else {
        format!("{b:.0}B")
    }
    .replace(".000", "")
}

/// One line of a sweep's plot: its label and its (x, y) points.
pub type SweepSeries = (String, Vec<(f64, f64)>);

/// A sweep's figure against one axis, one line per combination of the
/// other axes (`roce sim sweep --plot`): an SVG document. `x_ticks`, when
/// given, names the x positions (an axis of sizes or words).
pub fn sweep_svg(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[SweepSeries],
    x_ticks: Option<&[(f64, String)]>,
) -> io::Result<String> {
    sweep_svg_inner(title, x_desc, y_desc, series, x_ticks).map_err(io::Error::other)
}

fn sweep_svg_inner(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[SweepSeries],
    x_ticks: Option<&[(f64, String)]>,
) -> DrawResult<String> {
    let all = || series.iter().flat_map(|s| s.1.iter());
    let (x_lo, x_hi) =
        all().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
    let y_hi = all().map(|p| p.1).fold(0.0f64, f64::max);
    let (x_lo, x_hi) = if x_lo.is_finite() { (x_lo, x_hi) } else { (0.0, 1.0) };
    let pad = ((x_hi - x_lo) * 0.05).max(0.5);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(span(x_lo - pad, x_hi + pad), span(0.0, y_hi * 1.1))
            .map_err(err)?;
        let tick_label = |x: &f64| match x_ticks {
            Some(t) => {
                t.iter().find(|(at, _)| (at - x).abs() < 1e-9).map_or_else(String::new, |t| t.1.clone())
            }
            None => format!("{x}"),
        };
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(x_desc).y_desc(y_desc).x_label_formatter(&tick_label);
        if let Some(t) = x_ticks {
            // One label per named position: plotters' ticks land on them
            // when there are as many as the span's whole numbers.
            mesh.x_labels(t.len() * 2 + 1);
        }
        mesh.draw().map_err(err)?;
        for (k, (label, pts)) in series.iter().enumerate() {
            let colour = colour(k);
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))
                .map_err(err)?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, colour.filled()))).map_err(err)?;
        }
        if series.len() > 1 && series.len() <= MAX_LEGEND {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// A collective run's per-rank timeline (`roce sim coll --timeline`):
/// one row per rank (rank 0 at the bottom) with its compute phases (grey)
/// and its calls (blue),
/// and a red line where each iteration ended (the last rank out of the
/// call). `spans[r][k]` is rank `r`'s call `k` (start, end); `t0` the
/// run's start (rank `r`'s first compute phase begins there, each later
/// one where its previous call ended).
pub fn timeline_svg(title: &str, t0: Time, spans: &[Vec<(Time, Time)>]) -> io::Result<String> {
    timeline_inner(title, t0, spans).map_err(io::Error::other)
}

fn timeline_inner(title: &str, t0: Time, spans: &[Vec<(Time, Time)>]) -> DrawResult<String> {
    let n = spans.len();
    let iters = spans.iter().map(Vec::len).max().unwrap_or(0);
    let end = spans.iter().flatten().map(|s| s.1).max().unwrap_or(t0);
    let height = (120 + n as u32 * 6).clamp(400, 4000);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (SIZE.0, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(span(0.0, us(end - t0)), span(0.0, n as f64))
            .map_err(err)?;
        chart.configure_mesh().x_desc("time (us)").y_desc("rank").disable_y_mesh().draw().map_err(err)?;
        let grey = RGBColor(0xc8, 0xc8, 0xc8).filled();
        let blue = colour(0).filled();
        for (r, calls) in spans.iter().enumerate() {
            let (y0, y1) = (r as f64 + 0.1, r as f64 + 0.9);
            let mut prev = t0;
            for &(a, b) in calls {
                chart
                    .draw_series([
                        Rectangle::new([(us(prev - t0), y0), (us(a - t0), y1)], grey),
                        Rectangle::new([(us(a - t0), y0), (us(b - t0), y1)], blue),
                    ])
                    .map_err(err)?;
                prev = b;
            }
        }
        for k in 0..iters {
            let t = spans.iter().filter_map(|c| c.get(k)).map(|s| s.1).max().unwrap_or(t0);
            let x = us(t - t0);
            chart
                .draw_series([PathElement::new(vec![(x, 0.0), (x, n as f64)], RED.stroke_width(1))])
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_draws_every_phase_and_every_iteration_end() {
        let us = |x: u64| x * PS_PER_US;
        // 3 ranks, 2 calls each; rank 2 enters each call late
        let spans = vec![
            vec![(us(10), us(40)), (us(50), us(80))],
            vec![(us(10), us(41)), (us(51), us(80))],
            vec![(us(30), us(40)), (us(70), us(80))],
        ];
        let svg = timeline_svg("t", 0, &spans).unwrap();
        assert_eq!(svg.matches("fill=\"#C8C8C8\"").count(), 6, "compute phases");
        assert_eq!(svg.matches("fill=\"#1F77B4\"").count(), 6, "calls");
        assert_eq!(svg.matches("stroke=\"#FF0000\"").count(), 2, "iteration ends");
    }
    use crate::report::{QueueSample, RateSample};

    /// Checks that every element opened is closed, in order (tags only;
    /// enough to catch truncated or interleaved output).
    fn assert_well_formed(svg: &str) {
        assert!(svg.trim_start().starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.trim_end().ends_with("</svg>"));
        let mut stack: Vec<&str> = Vec::new();
        let mut rest = svg;
        while let Some(i) = rest.find('<') {
            rest = &rest[i + 1..];
            let end = rest.find('>').expect("unclosed tag");
            let tag = &rest[..end];
            rest = &rest[end + 1..];
            if tag.starts_with('?') || tag.starts_with('!') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop(), Some(name.trim()), "mismatched </{name}>");
            } else if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().unwrap());
            }
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
    }

    /// The distinct stroke colours of the polylines other than black: one
    /// per plotted series (its legend sample uses the same colour).
    fn series_colours(svg: &str) -> usize {
        let mut colours = std::collections::BTreeSet::new();
        for part in svg.split("<polyline").skip(1) {
            let tag = &part[..part.find('>').unwrap()];
            if let Some(i) = tag.find("stroke=\"") {
                let c = &tag[i + 8..];
                let c = &c[..c.find('"').unwrap()];
                // Axes and ticks are black.
                if c != "#000000" {
                    colours.insert(c.to_string());
                }
            }
        }
        colours.len()
    }

    fn scenario() -> Scenario {
        crate::toml_scenario::from_str(
            "hosts = [\"h1..h3\"]\nswitches = [\"sw\"]\n[[host_group]]\nprefix = \"x\"\ncount = 1\nattach = \"sw\"\n\
             rate = \"100G\"\ndelay = \"1us\"\n[link_defaults]\nrate = \"100G\"\ndelay = \"1us\"\n\
             [[links]]\na = \"sw\"\nb = \"h1\"\n[[links]]\na = \"sw\"\nb = \"h2\"\n[[links]]\na = \"sw\"\nb = \"h3\"\n\
             [[incast]]\nsenders = [\"h1\", \"h2\"]\nreceiver = \"h3\"\nsize = \"100KB\"\n\
             [monitor]\nports = [\"sw->h3\", \"sw->h1\", \"h1->sw\"]\n",
        )
        .unwrap()
    }

    fn report() -> Report {
        let mut r = Report { end_ps: 100 * PS_PER_US, ..Report::default() };
        for t in 0..100u64 {
            let time_ps = t * PS_PER_US;
            for (k, &(node, port)) in [(4usize, 4u32), (4, 2), (0, 1)].iter().enumerate() {
                let bytes = (t * 1000 * (k as u64 + 1)) % 70_000;
                let paused =
                    if k == 2 && (20..40).contains(&t) || k == 1 && t % 10 == 0 { 1 << 3 } else { 0 };
                r.queues.push(QueueSample { time_ps, node, port, bytes, paused });
            }
            for flow in 0..2 {
                r.rates.push(RateSample {
                    time_ps,
                    flow,
                    rate_bps: 1e11 / (1.0 + (t * (flow as u64 + 1)) as f64 / 50.0),
                });
            }
        }
        r
    }

    fn temp_dir(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("roce-fabric-plot-{tag}-{}", std::process::id()))
    }

    #[test]
    fn writes_the_three_plots() {
        let dir = temp_dir("all");
        let slow = [(1000u64, 1.0), (100_000, 2.5), (1_000_000, 7.25), (20_000_000, 1.2)];
        let files = write_plots(&scenario(), &report(), &dir, Some(&slow)).unwrap();
        let names: Vec<String> =
            files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into()).collect();
        assert_eq!(names, ["queues.svg", "rates.svg", "fct_slowdown.svg"]);
        let queues = std::fs::read_to_string(dir.join("queues.svg")).unwrap();
        assert_well_formed(&queues);
        assert_eq!(series_colours(&queues), 3);
        assert!(queues.contains("sw:4 (→h3)"), "port label missing");
        assert!(queues.contains("h1:1 (→sw)"));
        // Pause bands: 20 us on h1's port plus the 10 one-sample pauses of sw:1.
        assert!(queues.matches("<rect").count() >= 11);
        let rates = std::fs::read_to_string(dir.join("rates.svg")).unwrap();
        assert_well_formed(&rates);
        assert_eq!(series_colours(&rates), 2);
        assert!(rates.contains("f1 h2→h3"));
        let slow_svg = std::fs::read_to_string(dir.join("fct_slowdown.svg")).unwrap();
        assert_well_formed(&slow_svg);
        assert_eq!(slow_svg.matches("<circle").count(), 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writes_only_what_has_data() {
        let dir = temp_dir("none");
        let empty = Report::default();
        assert!(write_plots(&scenario(), &empty, &dir, None).unwrap().is_empty());
        assert!(write_plots(&scenario(), &empty, &dir, Some(&[])).unwrap().is_empty());
        let mut one = Report::default();
        one.queues.push(QueueSample { time_ps: 0, node: 4, port: 3, bytes: 0, paused: 0 });
        let files = write_plots(&scenario(), &one, &dir, None).unwrap();
        assert_eq!(files.len(), 1);
        assert_well_formed(&std::fs::read_to_string(&files[0]).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_sweep_plot_has_a_line_per_series_and_names_its_ticks() {
        let series = vec![
            ("dcqcn=paper".to_string(), vec![(0.0, 2.0), (1.0, 3.0)]),
            ("dcqcn=hpcc".to_string(), vec![(0.0, 1.5), (1.0, 1.2)]),
        ];
        let ticks = [(0.0, "low".to_string()), (1.0, "high".to_string())];
        let svg = sweep_svg("t", "ecn", "slowdown_p99", &series, Some(&ticks)).unwrap();
        assert!(svg.contains("dcqcn=paper") && svg.contains("dcqcn=hpcc"), "{svg}");
        assert!(svg.contains("low\n</text>") && svg.contains("high\n</text>"), "{svg}");
        assert_eq!(svg.matches("<circle").count(), 4, "a dot per point: {svg}");
        assert!(sweep_svg("empty", "x", "y", &[], None).unwrap().contains("<svg"));
    }
}
