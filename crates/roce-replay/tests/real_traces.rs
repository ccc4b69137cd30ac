//! The two published straggler traces: S within 5% of the paper's.

use roce_replay::whatif::{mean, WhatIf};
use roce_replay::{read_trace, Job, JobMeta};

fn run(name: &str, published: f64) {
    let Some(dir) = roce_test_support::straggler_traces() else { return };
    let ops = read_trace(&dir.join(format!("trace-{name}.parquet"))).unwrap();
    let meta = JobMeta::read(&dir.join(format!("meta-{name}.yaml"))).unwrap();
    let job = Job::build(ops, meta).unwrap();
    let w = WhatIf::analyze(&job).unwrap();
    for i in 0..w.steps.len() {
        eprintln!(
            "{name} step {} base {:.3} replayed {:.3} nodelay {:.3} noblk {:.3}",
            w.steps[i], w.base[i], w.replayed[i], w.nodelay[i], w.noblk[i]
        );
    }
    let s = w.slowdown();
    eprintln!(
        "{name}: S = {s:.4} (published {published}), base {:.3} nodelay {:.3} noblk {:.3}",
        mean(&w.base),
        mean(&w.nodelay),
        mean(&w.noblk)
    );
    assert!((s / published - 1.0).abs() < 0.05, "{name}: S = {s:.4}, published {published}");
    // the replay with recorded durations and launch delays is the recording
    let off = w.base.iter().zip(&w.replayed).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(off < 1e-6, "{name}: replayed steps differ from the recorded ones by {off} s");
    // with each step's own typical durations S moves little
    let within = w.slowdown_within_steps();
    assert!((within / published - 1.0).abs() < 0.05, "{name}: S within steps = {within:.4}");
}

#[test]
fn trace_ar_slowdown_matches_the_paper() {
    run("AR", 1.973);
}

#[test]
fn trace_st_slowdown_matches_the_paper() {
    run("ST", 1.179);
}
