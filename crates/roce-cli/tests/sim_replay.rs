//! `roce sim replay`: the summary on a hand-made trace and on the ST
//! straggler trace, and clear errors (exit status 2) for bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use roce_replay::{write_trace, Op, OpKind};

fn roce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce")).args(args).output().expect("run roce")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roce-sim-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Two data-parallel workers; worker 1's backward takes 3 s in step 1
/// instead of 2: step times 4.9 and 3.9, straggler-free 4.15.
fn write_dp_trace(path: &Path) {
    let mut ops = Vec::new();
    for (step, slow) in [(1i64, 3.0), (2, 2.0)] {
        let rs = 1.1 + slow;
        for (r, bwd) in [(0u32, 2.0), (1u32, slow)] {
            let mk = |kind, start, duration| Op {
                dp_rank: r,
                stage: 0,
                rank: r,
                step,
                kind,
                start,
                duration,
                seq: 0,
                mc: 0,
                gmc: 0,
            };
            ops.push(mk(OpKind::ParamsAllGather, 0.0, 0.1));
            ops.push(mk(OpKind::ForwardCompute, 0.1, 1.0));
            ops.push(mk(OpKind::BackwardCompute, 1.1, bwd));
            ops.push(mk(OpKind::Gc, 1.1 + bwd, 0.0));
            ops.push(mk(OpKind::GradsReduceScatter, 1.1 + bwd, rs + 0.2 - (1.1 + bwd)));
            ops.push(mk(OpKind::OptimizerClipMainGrad, rs + 0.2, 0.1));
            ops.push(mk(OpKind::Optimizer, rs + 0.3, 0.5));
        }
    }
    write_trace(path, &ops).unwrap();
}

/// Two stages whose forward send has no receive on stage 1.
fn write_unmatched_send(path: &Path) {
    let mk = |stage: u32, kind, start, duration| Op {
        dp_rank: 0,
        stage,
        rank: stage,
        step: 5,
        kind,
        start,
        duration,
        seq: 0,
        mc: 0,
        gmc: i64::from(stage),
    };
    let ops = vec![
        mk(0, OpKind::ForwardCompute, 0.0, 1.0),
        mk(0, OpKind::ForwardSend, 1.0, 0.1),
        mk(1, OpKind::ForwardCompute, 1.1, 1.0),
        mk(0, OpKind::Optimizer, 2.1, 0.5),
        mk(1, OpKind::Optimizer, 2.1, 0.5),
    ];
    write_trace(path, &ops).unwrap();
}

#[test]
fn replay_prints_the_slowdown_and_what_a_degraded_link_adds() {
    let p = scratch("trace-dp.parquet");
    write_dp_trace(&p);
    let o = roce(&["sim", "replay", p.to_str().unwrap(), "--per-step", "--degrade-rank", "1"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("dp 2 x pp 1 x tp 1 (vpp 1), inferred from the trace"), "{out}");
    // S = 4.4 / 4.15
    assert!(out.contains(&format!("= {:.4}", 4.4 / 4.15)), "{out}");
    assert!(out.contains("rank 1's link at 50%"), "{out}");
    // straggler-free compute, three collectives doubled: 4.15 -> 4.55
    assert!(out.contains(&format!("{:+.2}% (straggler-free compute)", (4.55 / 4.15 - 1.0) * 100.0)), "{out}");
}

#[test]
fn the_st_trace_matches_the_published_result() {
    let Some(dir) = roce_test_support::straggler_traces() else { return };
    let trace = dir.join("trace-ST.parquet");
    let reference = dir.join("result-ST.json");
    let o = roce(&["sim", "replay", trace.to_str().unwrap(), "--reference", reference.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let line = out.lines().find(|l| l.contains("vs published")).expect("a comparison line");
    let ours: f64 = line.split("; S ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    assert!((ours / 1.179 - 1.0).abs() < 0.05, "{line}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let not_parquet = scratch("trace-bad.parquet");
    std::fs::write(&not_parquet, "dp_rank,stage\n0,0\n").unwrap();
    let mut cases: Vec<(Vec<String>, &str)> = vec![
        (vec![not_parquet.display().to_string()], "is not a readable parquet file"),
        (vec![scratch("absent.parquet").display().to_string()], "cannot read"),
        (
            vec![scratch("trace-dp2.parquet").display().to_string(), "--algorithm".into(), "star".into()],
            "ring or tree",
        ),
        (
            vec![scratch("trace-dp2.parquet").display().to_string(), "--degrade-fraction".into(), "0".into()],
            "--degrade-fraction",
        ),
        (
            vec![scratch("trace-dp2.parquet").display().to_string(), "--degrade-rank".into(), "7".into()],
            "no such rank",
        ),
        (
            vec![
                scratch("trace-dp2.parquet").display().to_string(),
                "--meta".into(),
                not_parquet.display().to_string(),
            ],
            "metadata",
        ),
    ];
    let unmatched = scratch("trace-unmatched.parquet");
    write_unmatched_send(&unmatched);
    cases.push((
        vec![unmatched.display().to_string()],
        "step 5: forward-send #0 of rank 0 (stage 0) has no matching receive on stage 1",
    ));
    write_dp_trace(&scratch("trace-dp2.parquet"));
    for (args, want) in cases {
        let mut all = vec!["sim", "replay"];
        all.extend(args.iter().map(String::as_str));
        let o = roce(&all);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {out}\n{err}");
        assert!(err.contains(want), "{args:?}: expected {want:?} in {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
