//! Hand-made traces, written with the crate's own writer, whose replays
//! and slowdowns are known by hand.

use roce_replay::comm::{replay_with, AllReduce, AnalyticFabric, DegradedLink, Recorded};
use roce_replay::replay::replay;
use roce_replay::whatif::{mean, WhatIf};
use roce_replay::{read_trace, write_trace, Job, JobMeta, Op, OpKind, ReplayError};

fn op(dp: u32, stage: u32, rank: u32, step: i64, kind: OpKind, start: f64, duration: f64) -> Op {
    let compute = matches!(kind, OpKind::ForwardCompute | OpKind::BackwardCompute);
    Op {
        dp_rank: dp,
        stage,
        rank,
        step,
        kind,
        start,
        duration,
        seq: 0,
        mc: if compute || kind.is_dp_collective() { 0 } else { -1 },
        gmc: if compute { i64::from(stage) } else { -1 },
    }
}

/// Two data-parallel workers, no pipeline, two steps. Step 1: worker 1's
/// backward takes 3 s instead of 2 (a straggler), the gradient
/// reduce-scatter waits for it. Step 2: no straggler. Step 2 starts at
/// t = 10 s.
///
/// per worker: all-gather 0.1, forward 1, backward 2 (3), gc 0,
/// reduce-scatter 0.2 after the last arrival, clip 0.1, optimizer 0.5.
/// Step times 4.9 and 3.9: mean 4.4. Typical: backward (2+2+2+3)/4 = 2.25,
/// so the straggler-free step is 0.1+1+2.25+0.2+0.1+0.5 = 4.15 and
/// S = 4.4/4.15. Keeping only dp rank 1's stragglers: steps 4.9 and 4.15
/// (worker 0 at the typical 2.25 > 2): S_1 = 4.525/4.15; keeping only dp
/// rank 0's: 4.15 both steps, S_0 = 1; keeping every backward: 4.9 and
/// 3.9, S_backward = S.
fn data_parallel_job() -> Vec<Op> {
    let mut ops = Vec::new();
    for (step, t0, slow) in [(1, 0.0, 3.0), (2, 10.0, 2.0)] {
        let rs_start = t0 + 1.1 + slow; // the later arrival
        for (dp, bwd) in [(0u32, 2.0), (1u32, slow)] {
            let r = dp;
            let bwd_end = t0 + 1.1 + bwd;
            ops.push(op(dp, 0, r, step, OpKind::ParamsAllGather, t0, 0.1));
            ops.push(op(dp, 0, r, step, OpKind::ForwardCompute, t0 + 0.1, 1.0));
            ops.push(op(dp, 0, r, step, OpKind::BackwardCompute, t0 + 1.1, bwd));
            ops.push(op(dp, 0, r, step, OpKind::Gc, bwd_end, 0.0));
            ops.push(op(dp, 0, r, step, OpKind::GradsReduceScatter, bwd_end, rs_start + 0.2 - bwd_end));
            ops.push(op(dp, 0, r, step, OpKind::OptimizerClipMainGrad, rs_start + 0.2, 0.1));
            ops.push(op(dp, 0, r, step, OpKind::Optimizer, rs_start + 0.3, 0.5));
        }
    }
    ops
}

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("roce-replay-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn straggler_slowdown_of_a_hand_made_trace() {
    let path = tmp("dp.parquet");
    write_trace(&path, &data_parallel_job()).unwrap();
    let ops = read_trace(&path).unwrap();
    assert_eq!(ops, data_parallel_job(), "the trace reads back as written");
    let meta = JobMeta { dp_size: 2, pp_size: 1, tp_size: 1, vpp_size: 1, dsp_size: 1 };
    assert_eq!(JobMeta::infer(&ops), meta);
    let job = Job::build(ops, meta).unwrap();
    let w = WhatIf::analyze(&job).unwrap();
    assert!(close(w.base[0], 4.9) && close(w.base[1], 3.9), "{:?}", w.base);
    assert!(w.replayed.iter().zip(&w.base).all(|(a, b)| close(*a, *b)), "{:?}", w.replayed);
    assert!(w.nodelay.iter().zip(&w.base).all(|(a, b)| close(*a, *b)), "no launch delays: {:?}", w.nodelay);
    assert!(close(w.typical[&OpKind::BackwardCompute], 2.25));
    assert!(close(w.typical[&OpKind::GradsReduceScatter], 0.2), "{:?}", w.typical);
    assert!(w.noblk.iter().all(|&t| close(t, 4.15)), "{:?}", w.noblk);
    assert!(close(w.slowdown(), 4.4 / 4.15), "S = {}", w.slowdown());
    // each step's own typical backward: (2+3)/2 and 2
    assert!(close(w.noblk_step[0], 4.4) && close(w.noblk_step[1], 3.9), "{:?}", w.noblk_step);
    let d = w.decompose(&job).unwrap();
    assert_eq!(d.by_dp_rank[0].0, 1);
    assert!(close(d.by_dp_rank[0].1, 4.525 / 4.15), "{:?}", d.by_dp_rank);
    assert!(close(d.by_dp_rank[1].1, 1.0), "{:?}", d.by_dp_rank);
    // keeping every backward as recorded is the whole straggler: 4.9 and 3.9
    let bwd = d.by_optype.iter().find(|(l, _)| l == "backward-compute").unwrap().1;
    assert!(close(bwd, 4.4 / 4.15), "{:?}", d.by_optype);
    let fwd = d.by_optype.iter().find(|(l, _)| l == "forward-compute").unwrap().1;
    assert!(close(fwd, 1.0), "{:?}", d.by_optype);
}

#[test]
fn launch_delays_are_removed_by_the_no_delay_replay() {
    // worker 0's forward starts 0.3 s after its all-gather ended: a launch delay
    let mut ops = data_parallel_job();
    for o in ops.iter_mut().filter(|o| o.step == 2 && o.rank == 0) {
        if !matches!(o.kind, OpKind::ParamsAllGather) {
            o.start += 0.3;
        }
    }
    // the reduce-scatter still ends together: worker 0 now arrives at 13.4, after worker 1 (13.1)
    for o in ops.iter_mut().filter(|o| o.step == 2) {
        match (o.rank, o.kind) {
            (_, OpKind::GradsReduceScatter) => o.duration = 13.6 - o.start,
            (_, OpKind::OptimizerClipMainGrad) => o.start = 13.6,
            (_, OpKind::Optimizer) => o.start = 13.7,
            _ => {}
        }
    }
    let job = Job::build(ops, JobMeta::infer(&data_parallel_job())).unwrap();
    let w = WhatIf::analyze(&job).unwrap();
    assert!(close(w.base[1], 4.2), "{:?}", w.base);
    assert!(close(w.replayed[1], 4.2), "{:?}", w.replayed);
    assert!(close(w.nodelay[1], 3.9), "{:?}", w.nodelay);
}

/// Two stages, one micro-batch: forward on stage 0, activations to stage
/// 1, forward and backward there, gradients back, backward on stage 0;
/// the clip joins both stages.
fn pipeline_job() -> Vec<Op> {
    vec![
        op(0, 0, 0, 7, OpKind::ForwardCompute, 0.0, 1.0),
        op(0, 0, 0, 7, OpKind::ForwardSend, 1.0, 0.1),
        op(0, 1, 1, 7, OpKind::ForwardRecv, 0.0, 1.1),
        op(0, 1, 1, 7, OpKind::ForwardCompute, 1.1, 1.0),
        op(0, 1, 1, 7, OpKind::BackwardCompute, 2.1, 2.0),
        op(0, 1, 1, 7, OpKind::BackwardSend, 4.1, 0.1),
        op(0, 0, 0, 7, OpKind::BackwardRecv, 1.0, 3.2),
        op(0, 0, 0, 7, OpKind::BackwardCompute, 4.2, 2.0),
        op(0, 0, 0, 7, OpKind::Gc, 6.2, 0.0),
        op(0, 1, 1, 7, OpKind::Gc, 4.1, 0.0),
        op(0, 0, 0, 7, OpKind::OptimizerClipMainGrad, 6.2, 0.1),
        op(0, 1, 1, 7, OpKind::OptimizerClipMainGrad, 4.1, 2.2),
        op(0, 0, 0, 7, OpKind::Optimizer, 6.3, 0.5),
        op(0, 1, 1, 7, OpKind::Optimizer, 6.3, 0.5),
    ]
}

#[test]
fn a_pipeline_replays_as_recorded() {
    let ops = pipeline_job();
    let job = Job::build(ops.clone(), JobMeta::infer(&ops)).unwrap();
    let g = &job.steps[0];
    assert_eq!(g.groups.len(), 3, "forward pair, backward pair, clip: {:?}", g.groups);
    let t = replay(g, &g.recorded_cost, Some(&g.launch)).unwrap();
    for (l, &i) in g.ops.iter().enumerate() {
        let o = &job.ops[i as usize];
        assert!(close(t.end[l], o.end()), "{:?} ends at {} instead of {}", o.kind, t.end[l], o.end());
    }
    assert!(close(t.step_time(), 6.8));
    // the backward receive's launch delay (it was posted early) changes nothing
    assert!(close(replay(g, &g.recorded_cost, None).unwrap().step_time(), 6.8));
}

#[test]
fn communication_models() {
    let job = Job::build(data_parallel_job(), JobMeta::infer(&data_parallel_job())).unwrap();
    let w = WhatIf::analyze(&job).unwrap();
    // the recorded model is the no-delay replay
    assert_eq!(replay_with(&job, &Recorded, None).unwrap(), w.nodelay);
    // the calibrated healthy fabric gives every collective its typical time
    let rate = 12.5e9;
    let healthy = AnalyticFabric::calibrated(&job, rate, 0.0, AllReduce::Ring);
    let t = replay_with(&job, &healthy, Some(&w.typical)).unwrap();
    assert!(t.iter().all(|&x| close(x, 4.15)), "{t:?}");
    // all-gather 0.1 s and reduce-scatter 0.2 s on 2 ranks: (n-1)/n S/B
    assert!(close(healthy.bytes[&OpKind::ParamsAllGather], 0.1 * rate * 2.0));
    // rank 1's link at half rate doubles the three collectives: +0.1 +0.2 +0.1 s
    let slow = healthy.with_degraded(Some(DegradedLink { rank: 1, fraction: 0.5 }));
    let t = replay_with(&job, &slow, Some(&w.typical)).unwrap();
    assert!(t.iter().all(|&x| close(x, 4.55)), "{t:?}");
    // a rank outside every collective changes nothing
    let other = healthy.with_degraded(Some(DegradedLink { rank: 9, fraction: 0.5 }));
    assert!(close(mean(&replay_with(&job, &other, Some(&w.typical)).unwrap()), 4.15));
}

#[test]
fn analytic_costs_follow_the_notes() {
    // collectives-notes §7: n = 8, S = 1 GiB, B = 12.5 GB/s, α = 5 us
    let f = AnalyticFabric {
        link_bytes_per_s: 12.5e9,
        alpha_s: 5e-6,
        algorithm: AllReduce::Ring,
        degraded: None,
        bytes: Default::default(),
    };
    let ranks: Vec<u32> = (0..8).collect();
    let s = (1u64 << 30) as f64;
    let ring = f.cost(OpKind::SeparateGradsAllReduce, &ranks, s);
    assert!((ring * 1e3 - 150.39).abs() < 0.01, "{ring}");
    let slow = f.with_degraded(Some(DegradedLink { rank: 3, fraction: 0.5 }));
    let ring_slow = slow.cost(OpKind::SeparateGradsAllReduce, &ranks, s);
    assert!((ring_slow * 1e3 - 300.71).abs() < 0.01, "{ring_slow}");
    let rs = f.cost(OpKind::GradsReduceScatter, &ranks, s);
    assert!(close(rs, 7.0 / 8.0 * s / 12.5e9 + 7.0 * 5e-6));
    let tree = AnalyticFabric { algorithm: AllReduce::Tree, ..f.clone() };
    assert!(close(tree.cost(OpKind::EmbeddingGradsAllReduce, &ranks, s), s / 12.5e9 + 6.0 * 5e-6));
    assert!(close(f.cost(OpKind::ForwardSend, &[0, 1], s), 5e-6 + s / 12.5e9));
}

// ---- bad input: typed errors, never a panic ----

#[test]
fn a_send_without_its_receive_is_an_error() {
    let ops: Vec<Op> = pipeline_job().into_iter().filter(|o| o.kind != OpKind::ForwardRecv).collect();
    match Job::build(ops.clone(), JobMeta::infer(&ops)) {
        Err(ReplayError::UnmatchedSend { step: 7, rank: 0, stage: 0, peer_stage: 1, optype, index: 0 }) => {
            assert_eq!(optype, "forward-send")
        }
        other => panic!("expected UnmatchedSend, got {other:?}"),
    }
    let ops: Vec<Op> = pipeline_job().into_iter().filter(|o| o.kind != OpKind::BackwardSend).collect();
    assert!(matches!(
        Job::build(ops.clone(), JobMeta::infer(&ops)),
        Err(ReplayError::UnmatchedRecv { rank: 0, .. })
    ));
}

#[test]
fn a_collective_missing_a_participant_is_an_error() {
    let ops: Vec<Op> = data_parallel_job()
        .into_iter()
        .filter(|o| !(o.rank == 1 && o.step == 2 && o.kind == OpKind::GradsReduceScatter))
        .collect();
    let e = Job::build(ops, JobMeta { dp_size: 2, pp_size: 1, tp_size: 1, vpp_size: 1, dsp_size: 1 })
        .unwrap_err();
    assert!(matches!(e, ReplayError::MissingParticipant { step: 2, found: 1, expected: 2, .. }), "{e}");
}

#[test]
fn a_trace_beyond_its_metadata_is_an_error() {
    let e = Job::build(
        data_parallel_job(),
        JobMeta { dp_size: 1, pp_size: 1, tp_size: 1, vpp_size: 1, dsp_size: 1 },
    )
    .unwrap_err();
    assert!(matches!(e, ReplayError::MetaMismatch(_)), "{e}");
    assert!(matches!(Job::build(Vec::new(), JobMeta::infer(&[])), Err(ReplayError::Empty)));
}

#[test]
fn malformed_metadata_is_an_error() {
    let p = std::path::Path::new("meta.yaml");
    let ok = JobMeta::parse("trial_name: X\ndp_size: 2\npp_size: 4\ntp_size: 1\nworld_size: 8\n", p).unwrap();
    assert_eq!(ok, JobMeta { dp_size: 2, pp_size: 4, tp_size: 1, vpp_size: 1, dsp_size: 1 });
    let dsp =
        JobMeta::parse("dp_size: 32\ndsp_size: 2\npp_size: 2\ntp_size: 1\nworld_size: 128\n", p).unwrap();
    assert_eq!(dsp.dsp_size, 2);
    for bad in [
        "dp_size: two\npp_size: 1\n",
        "dp_size: 0\npp_size: 1\n",
        "pp_size: 1\n",
        "dp_size: 2\npp_size: 2\nworld_size: 5\n",
        "dp_size: 2\npp_size: 2\ndsp_size: 2\nworld_size: 4\n",
        "just words\n",
    ] {
        assert!(matches!(JobMeta::parse(bad, p), Err(ReplayError::BadMeta { .. })), "{bad:?}");
    }
}

#[test]
fn a_file_that_is_not_parquet_is_an_error() {
    let path = tmp("not.parquet");
    std::fs::write(&path, "step,optype\n1,forward-compute\n").unwrap();
    assert!(matches!(read_trace(&path), Err(ReplayError::NotParquet { .. })));
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(read_trace(&path), Err(ReplayError::NotParquet { .. })));
    assert!(matches!(read_trace(&tmp("absent.parquet")), Err(ReplayError::Io { .. })));
}

mod columns {
    //! Parquet files with a column missing or of the wrong type, written
    //! with the parquet writer directly.

    use std::sync::Arc;

    use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;

    use super::*;

    /// Writes one row of the given columns (`name type` pairs; the value
    /// written depends on the type).
    fn write(path: &std::path::Path, columns: &[(&str, &str)], optype: &str, duration: f64) {
        let fields: String = columns
            .iter()
            .map(|(n, t)| match *t {
                "string" => format!("required binary {n} (UTF8);"),
                t => format!("required {t} {n};"),
            })
            .collect();
        let schema = Arc::new(parse_message_type(&format!("message m {{ {fields} }}")).unwrap());
        let file = std::fs::File::create(path).unwrap();
        let mut w =
            SerializedFileWriter::new(file, schema, Arc::new(WriterProperties::builder().build())).unwrap();
        let mut rg = w.next_row_group().unwrap();
        let mut i = 0;
        while let Some(mut col) = rg.next_column().unwrap() {
            let (name, ty) = columns[i];
            match ty {
                "int32" => col.typed::<Int32Type>().write_batch(&[0], None, None),
                "int64" => col.typed::<Int64Type>().write_batch(&[1], None, None),
                "double" => col.typed::<DoubleType>().write_batch(
                    &[if name == "duration" { duration } else { 0.5 }],
                    None,
                    None,
                ),
                _ => col.typed::<ByteArrayType>().write_batch(&[ByteArray::from(optype)], None, None),
            }
            .unwrap();
            col.close().unwrap();
            i += 1;
        }
        rg.close().unwrap();
        w.close().unwrap();
    }

    const GOOD: [(&str, &str); 10] = [
        ("dp_rank", "int32"),
        ("stage", "int32"),
        ("rank", "int32"),
        ("step", "int64"),
        ("optype", "string"),
        ("start_ts", "double"),
        ("duration", "double"),
        ("seq_id", "int32"),
        ("mc", "int32"),
        ("gmc", "int32"),
    ];

    #[test]
    fn a_well_formed_row_reads() {
        let p = tmp("good.parquet");
        write(&p, &GOOD, "optimizer", 0.25);
        let ops = read_trace(&p).unwrap();
        assert_eq!(ops.len(), 1);
        assert_eq!((ops[0].kind, ops[0].duration, ops[0].step), (OpKind::Optimizer, 0.25, 1));
    }

    #[test]
    fn a_missing_column_is_an_error() {
        let p = tmp("missing.parquet");
        let cols: Vec<_> = GOOD.iter().copied().filter(|(n, _)| *n != "duration").collect();
        write(&p, &cols, "optimizer", 0.25);
        match read_trace(&p) {
            Err(ReplayError::MissingColumn { column: "duration", .. }) => {}
            other => panic!("expected MissingColumn, got {other:?}"),
        }
    }

    #[test]
    fn a_column_of_the_wrong_type_is_an_error() {
        let p = tmp("wrong.parquet");
        let mut cols = GOOD.to_vec();
        cols[6] = ("duration", "string");
        write(&p, &cols, "optimizer", 0.25);
        match read_trace(&p) {
            Err(ReplayError::WrongColumnType { column: "duration", .. }) => {}
            other => panic!("expected WrongColumnType, got {other:?}"),
        }
        let mut cols = GOOD.to_vec();
        cols[3] = ("step", "double");
        write(&p, &cols, "optimizer", 0.25);
        assert!(matches!(read_trace(&p), Err(ReplayError::WrongColumnType { column: "step", .. })));
    }

    #[test]
    fn bad_values_are_errors() {
        let p = tmp("values.parquet");
        write(&p, &GOOD, "optimizer", -1.0);
        assert!(matches!(read_trace(&p), Err(ReplayError::BadValue { column: "duration", row: 0, .. })));
        write(&p, &GOOD, "optimizer", f64::NAN);
        assert!(matches!(read_trace(&p), Err(ReplayError::BadValue { column: "duration", .. })));
        write(&p, &GOOD, "warp-drive", 0.1);
        match read_trace(&p) {
            Err(ReplayError::UnknownOpType { row: 0, optype }) => assert_eq!(optype, "warp-drive"),
            other => panic!("expected UnknownOpType, got {other:?}"),
        }
    }

    #[test]
    fn a_trace_without_rows_is_an_error() {
        let p = tmp("empty.parquet");
        write_trace(&p, &[]).unwrap();
        assert!(matches!(read_trace(&p), Err(ReplayError::Empty)));
    }
}

#[test]
fn a_trace_whose_order_makes_a_cycle_is_an_error_not_a_hang() {
    // stage 0 records its backward before its forward: its forward send
    // then waits (through both computes) for the backward receive, which
    // waits for stage 1's backward, which waits for that forward send
    let ops = vec![
        op(0, 0, 0, 3, OpKind::BackwardRecv, 0.0, 0.1),
        op(0, 0, 0, 3, OpKind::BackwardCompute, 0.1, 1.0),
        op(0, 0, 0, 3, OpKind::ForwardCompute, 1.1, 1.0),
        op(0, 0, 0, 3, OpKind::ForwardSend, 2.1, 0.1),
        op(0, 1, 1, 3, OpKind::ForwardRecv, 0.0, 2.2),
        op(0, 1, 1, 3, OpKind::ForwardCompute, 2.2, 1.0),
        op(0, 1, 1, 3, OpKind::BackwardCompute, 3.2, 1.0),
        op(0, 1, 1, 3, OpKind::BackwardSend, 4.2, 0.1),
    ];
    let job = Job::build(ops.clone(), JobMeta::infer(&ops)).unwrap();
    match WhatIf::analyze(&job) {
        Err(ReplayError::Cycle { step: 3, stuck, example }) => {
            assert!(stuck >= 4, "{stuck}");
            assert!(example.contains("of rank"), "{example}");
        }
        other => panic!("expected Cycle, got {other:?}"),
    }
}

#[test]
fn costs_that_do_not_fit_are_errors() {
    struct Short;
    impl roce_replay::comm::CommModel for Short {
        fn describe(&self) -> String {
            "a model that forgets a participant".into()
        }
        fn durations(&self, c: &roce_replay::comm::CommInstance<'_>) -> Vec<f64> {
            vec![0.1; c.ranks.len() - 1]
        }
    }
    let job = Job::build(data_parallel_job(), JobMeta::infer(&data_parallel_job())).unwrap();
    match replay_with(&job, &Short, None) {
        Err(ReplayError::BadCosts { step: 1, what }) => assert!(what.contains("forgets"), "{what}"),
        other => panic!("expected BadCosts, got {other:?}"),
    }
    let g = &job.steps[0];
    assert!(matches!(replay(g, &g.recorded_cost[1..], None), Err(ReplayError::BadCosts { .. })));
    let mut nan = g.recorded_cost.clone();
    nan[3] = f64::NAN;
    assert!(matches!(replay(g, &nan, None), Err(ReplayError::BadCosts { .. })));
}
