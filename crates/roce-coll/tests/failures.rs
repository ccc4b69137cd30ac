//! Failures: a rank that stops answering, ranks that disagree on the call,
//! bad arguments; and what must still work: late ranks, back-to-back calls
//! whose messages overtake each other.

mod common;

use common::*;
use proptest::prelude::*;
use roce_coll::testkit::{Cluster, MemTransport, NetConfig, RankBuffers};
use roce_coll::{Algo, Buffers, Config, DataType, Engine, Error, OpDesc, OpKind, RedOp, Waiting};

fn ar(count: usize) -> OpDesc {
    OpDesc::new(OpKind::AllReduce, DataType::F32, count).algo(Algo::Ring)
}

#[test]
fn a_stalled_rank_fails_every_other_rank_naming_it() {
    for (stall_at, count) in [(0, 100), (30_000, 5_000)] {
        let mut net = NetConfig::new(3);
        net.stall = vec![(2, stall_at)];
        let res = run_err(&[ar(count); 4], 4, net);
        assert!(res[2].is_none(), "the stalled rank is not driven");
        for (r, x) in res.iter().enumerate() {
            if r == 2 {
                continue;
            }
            match x {
                Some(Err(Error::Timeout { op, peer, waited_ms, .. })) => {
                    assert_eq!(*op, OpKind::AllReduce);
                    assert!(*waited_ms >= 1000, "{waited_ms}");
                    if r == 3 {
                        assert_eq!(*peer, 2, "rank 3 waits for its ring predecessor");
                    }
                }
                other => panic!("rank {r}: {other:?}"),
            }
        }
        let msg = match &res[3] {
            Some(Err(e)) => e.to_string(),
            _ => unreachable!(),
        };
        assert!(msg.contains("all-reduce") && msg.contains("rank 2"), "{msg}");
    }
}

#[test]
fn a_stalled_root_times_out_a_broadcast_waiting_for_data() {
    let d = OpDesc::new(OpKind::Broadcast, DataType::I32, 1000).root(1).algo(Algo::Tree);
    let mut net = NetConfig::new(9);
    net.stall = vec![(1, 0)];
    let res = run_err(&[d; 5], 5, net);
    let mut named_root = false;
    for (r, x) in res.iter().enumerate() {
        if r == 1 {
            continue;
        }
        match x {
            Some(Err(Error::Timeout { peer, waiting, .. })) => {
                assert_eq!(*waiting, Waiting::Data);
                named_root |= *peer == 1;
            }
            other => panic!("rank {r}: {other:?}"),
        }
    }
    assert!(named_root);
}

fn disagree(descs: &[OpDesc], field: &str) {
    let n = descs.len();
    let res = run_err(descs, n, NetConfig::new(1));
    let mut seen = false;
    for (r, x) in res.iter().enumerate() {
        match x {
            Some(Err(Error::Mismatch { field: f, .. })) => {
                assert_eq!(*f, field, "rank {r}");
                seen = true;
            }
            // a rank that only exchanged with ranks agreeing with it may
            // finish (a broadcast chain upstream of the disagreeing rank);
            // the others fail, by mismatch or, behind a failed rank, timeout
            Some(Err(Error::Timeout { .. })) | Some(Ok(())) => {}
            other => panic!("rank {r}: {other:?} (expected a mismatch on {field})"),
        }
    }
    assert!(seen, "nobody reported the mismatch on {field}");
}

#[test]
fn ranks_that_disagree_are_refused_with_the_field_named() {
    let d = ar(64);
    disagree(&[d, d, OpDesc { count: 65, ..d }, d], "count");
    disagree(&[d, d.redop(RedOp::Max), d], "reduction");
    disagree(&[d, OpDesc { dtype: DataType::I32, ..d }, d], "data type");
    let b = OpDesc::new(OpKind::Broadcast, DataType::F32, 64).algo(Algo::Ring);
    disagree(&[b, b, b.root(2)], "root");
    disagree(&[d, d, d.algo(Algo::Tree)], "algorithm");
    // all-reduce against reduce-scatter of the same buffer size
    let rs = OpDesc::new(OpKind::ReduceScatter, DataType::F32, 32).algo(Algo::Ring);
    disagree(&[ar(64), rs], "operation");
}

#[test]
fn a_corrupt_message_is_refused_not_reduced() {
    let mut net = NetConfig::new(2);
    net.corrupt = vec![(1, 3)];
    let res = run_err(&[ar(500); 3], 3, net);
    let mut refused = false;
    for (r, x) in res.iter().enumerate() {
        match x {
            Some(Err(Error::Protocol { peer, detail, .. })) => {
                assert_eq!(*peer, 1, "{detail}");
                refused = true;
            }
            Some(Err(Error::Timeout { .. })) => {}
            other => panic!("rank {r}: {other:?}"),
        }
    }
    assert!(refused);
}

#[test]
fn a_late_rank_only_delays_the_call() {
    let mut net = NetConfig::new(5);
    net.start_at_ns = vec![0, 0, 400_000_000, 0, 0];
    let mut cfg = Config::new(0, 5);
    cfg.layout = layout(1);
    cfg.timeout_ns = 1_000_000_000;
    let mut cl = Cluster::new(5, &cfg, net).unwrap();
    let d = ar(1000);
    let mut bufs: Vec<RankBuffers> = (0..5).map(|r| input(&d, 5, r, false)).collect();
    let res = cl.run(&[d; 5], &mut bufs);
    assert!(res.iter().all(|r| matches!(r, Some(Ok(())))), "{res:?}");
    assert!(cl.net.borrow().now() >= 400_000_000);
    for (r, b) in bufs.iter().enumerate() {
        assert_eq!(b.result(), expected(&d, 5, r, false).unwrap().1.as_slice());
    }
}

/// Calls back to back on one communicator: slots and credits carry over,
/// and a fast rank's messages for call k+1 arrive while slower ranks are
/// still in call k.
#[test]
fn back_to_back_calls_reuse_the_slots() {
    for seed in 0..6u64 {
        let n = 3 + seed as usize % 4;
        let mut cfg = Config::new(0, n);
        cfg.layout = layout(seed as usize);
        cfg.timeout_ns = 10_000_000_000;
        let mut net = NetConfig::new(seed);
        net.max_delay_ns = 200_000;
        let mut cl = Cluster::new(n, &cfg, net).unwrap();
        let calls = [
            OpDesc::new(OpKind::AllReduce, DataType::F32, 300).redop(RedOp::Max),
            OpDesc::new(OpKind::Barrier, DataType::U8, 0),
            OpDesc::new(OpKind::AllGather, DataType::Bf16, 77),
            OpDesc::new(OpKind::AllReduce, DataType::I64, 5).algo(Algo::RecursiveDoubling),
            OpDesc::new(OpKind::Broadcast, DataType::U8, 999).root(n - 1),
            OpDesc::new(OpKind::AllToAll, DataType::I32, 40),
            OpDesc::new(OpKind::ReduceScatter, DataType::F64, 33).redop(RedOp::Avg),
            OpDesc::new(OpKind::AllReduce, DataType::F16, 1000).algo(Algo::Tree).redop(RedOp::Sum),
            OpDesc::new(OpKind::Reduce, DataType::I32, 400).root(1).algo(Algo::Tree).redop(RedOp::Prod),
        ];
        for (k, d) in calls.iter().cycle().take(20).enumerate() {
            let inplace = k % 3 == 0;
            let mut bufs: Vec<RankBuffers> = (0..n).map(|r| input(d, n, r, inplace)).collect();
            let res = cl.run(&vec![*d; n], &mut bufs);
            for (r, x) in res.iter().enumerate() {
                assert!(matches!(x, Some(Ok(()))), "seed {seed} call {k} {d:?} rank {r}: {x:?}");
                if let Some((at, want)) = expected(d, n, r, inplace) {
                    assert_eq!(
                        &bufs[r].result()[at..at + want.len()],
                        want.as_slice(),
                        "seed {seed} call {k} rank {r}"
                    );
                }
            }
        }
    }
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    let cfg = Config::new(0, 2);
    let mut cl = Cluster::new(2, &cfg, NetConfig::new(0)).unwrap();
    let (e, t): (&mut Engine, &mut MemTransport) = (&mut cl.engines[0], &mut cl.transports[0]);
    let mut small = vec![0u8; 10];
    let d = ar(4);
    assert!(matches!(e.start(t, d, &mut Buffers::InPlace(&mut small)), Err(Error::InvalidArgument(_))));
    let mut ok = vec![0u8; 16];
    let bad_algo = d.algo(Algo::Pairwise);
    assert!(matches!(e.start(t, bad_algo, &mut Buffers::InPlace(&mut ok)), Err(Error::InvalidArgument(_))));
    let bad_root = OpDesc::new(OpKind::Reduce, DataType::F32, 4).root(2);
    assert!(matches!(e.start(t, bad_root, &mut Buffers::InPlace(&mut ok)), Err(Error::InvalidArgument(_))));
    assert!(matches!(e.progress(t, &mut Buffers::InPlace(&mut ok)), Err(Error::State(_))));
    e.start(t, d, &mut Buffers::InPlace(&mut ok)).unwrap();
    assert!(matches!(e.start(t, d, &mut Buffers::InPlace(&mut ok)), Err(Error::State(_))));
    assert!(Engine::new(Config::new(2, 2)).is_err());
    let mut c = Config::new(0, 2);
    c.layout.slot_bytes = 100;
    assert!(Engine::new(c).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Any operation, type, size, rank count, layout and schedule seed.
    #[test]
    fn any_call_matches_the_model(
        n in 1usize..=9,
        op in 0usize..7,
        dt in 0usize..7,
        redop in 0usize..5,
        algo in 0usize..4,
        count in 0usize..400,
        inplace: bool,
        lay in 0usize..4,
        seed: u64,
        root in 0usize..9,
    ) {
        let op = OpKind::ALL[op];
        let algos = algos(op);
        let d = OpDesc {
            op,
            dtype: DataType::ALL[dt],
            redop: RedOp::ALL[redop],
            count,
            root: root % n,
            algo: algos[algo % algos.len()],
        };
        prop_assert_eq!(check(d, n, inplace, layout(lay), seed), Ok(()));
    }
}
