//! The checks can fail: a passing run, tampered with after the fact in one
//! way at a time, must be rejected by the check that owns the broken rule.

use roce_harness::check::FailureKind;
use roce_harness::workload::{MrKind, OpKind};
use roce_harness::{simulate, Config, Run};
use roce_proto::{AsyncEvent, AttrMask, Duration, QpAttr, QpState};

/// A passing run with WRITEs, SENDs, shared counters and UD receives.
fn rich() -> Run {
    let cfg = Config::default();
    for seed in 100..300 {
        let run = simulate(seed, &cfg);
        let p = &run.plan;
        let has = |f: &dyn Fn(&OpKind) -> bool| p.streams.iter().flat_map(|s| &s.ops).any(|o| f(&o.kind));
        let ud_recvs =
            run.observed.completions.iter().filter(|c| c.is_recv() && c.wc.wc_flags & 1 != 0).count();
        if run.result.is_ok()
            && has(&|k| matches!(k, OpKind::Write { dst } if dst.len > 0))
            && has(&|k| matches!(k, OpKind::FetchAdd { counter: Some(_), .. }))
            && has(&|k| matches!(k, OpKind::SendImm { .. }))
            && ud_recvs > 0
        {
            return run;
        }
    }
    panic!("no rich passing seed in 100..300");
}

fn kinds(run: &Run) -> Vec<FailureKind> {
    match run.check() {
        Ok(_) => Vec::new(),
        Err(f) => f.findings.items.iter().map(|i| i.0).collect(),
    }
}

fn flip(run: &Run, host: usize, off: usize) {
    let mem = &run.live.as_ref().unwrap().hosts[host].mem;
    let mut b = [0u8];
    // SAFETY: only the run's engines touch this memory, inside `&mut Engine`
    // calls, and `&Run` rules those out meanwhile.
    unsafe {
        mem.read(off, &mut b).unwrap();
        mem.write(off, &[b[0] ^ 0x10]).unwrap();
    }
}

#[test]
fn memory_model_notices_one_flipped_byte() {
    let run = rich();
    assert!(run.check().is_ok());
    let w = run.plan.streams.iter().flat_map(|s| &s.ops).find_map(|o| match o.kind {
        OpKind::Write { dst } if dst.len > 0 => Some(dst),
        _ => None,
    });
    let dst = w.unwrap();
    let off = run.plan.buf_off(&dst) + dst.len as usize / 2;
    flip(&run, dst.mr.host, off);
    assert_eq!(kinds(&run), [FailureKind::Memory]);
    flip(&run, dst.mr.host, off);
    assert!(run.check().is_ok());
    // A byte nobody writes: the constant source region.
    let src = run.plan.hosts[0].mrs.iter().find(|m| m.kind == MrKind::Src).unwrap().buf_off + 5;
    flip(&run, 0, src);
    assert_eq!(kinds(&run), [FailureKind::Memory]);
}

#[test]
fn completion_checks_notice_lost_reordered_and_altered_completions() {
    let base = rich();
    let sends: Vec<usize> =
        (0..base.observed.completions.len()).filter(|&i| !base.observed.completions[i].is_recv()).collect();

    let mut run = rich();
    run.observed.completions.remove(sends[0]);
    assert!(kinds(&run).contains(&FailureKind::Completion));

    // Two send completions of one QP swapped.
    let mut run = rich();
    let c = &run.observed.completions;
    let pair = sends
        .iter()
        .flat_map(|&i| sends.iter().map(move |&j| (i, j)))
        .find(|&(i, j)| i < j && c[i].host == c[j].host && c[i].wc.qp_num == c[j].wc.qp_num)
        .unwrap();
    run.observed.completions.swap(pair.0, pair.1);
    assert!(kinds(&run).contains(&FailureKind::Completion));

    let mut run = rich();
    let imm = run.observed.completions.iter_mut().find(|c| c.is_recv() && c.wc.wc_flags == 2).unwrap();
    imm.wc.imm_data ^= 1;
    assert!(kinds(&run).contains(&FailureKind::Completion));
}

#[test]
fn ud_check_notices_a_receive_completed_twice() {
    let mut run = rich();
    let ud = *run.observed.completions.iter().find(|c| c.is_recv() && c.wc.wc_flags & 1 != 0).unwrap();
    run.observed.completions.push(ud);
    assert!(kinds(&run).contains(&FailureKind::Ud));
}

#[test]
fn atomics_check_notices_a_wrong_original() {
    let run = rich();
    let land = run.plan.streams.iter().flat_map(|s| &s.ops).find_map(|o| match o.kind {
        OpKind::FetchAdd { counter: Some(_), .. } => Some(o.sges[0]),
        _ => None,
    });
    let land = land.unwrap();
    flip(&run, land.mr.host, run.plan.buf_off(&land));
    assert_eq!(kinds(&run)[0], FailureKind::Atomic);
}

#[test]
fn event_and_liveness_checks_fail_when_they_should() {
    let mut run = rich();
    // A fatal error on a UD QP: nothing in a plan provokes one.
    let ud = run.plan.qps.iter().position(|q| q.conn.is_none()).unwrap();
    let (host, qpn) = (run.plan.qps[ud].host, run.live.as_ref().unwrap().qpns[ud]);
    run.observed.events.push((host, AsyncEvent::QpFatal(qpn)));
    assert_eq!(kinds(&run), [FailureKind::Event]);

    let cfg = Config { time_limit: Duration::from_micros(150), ..Config::default() };
    let seed = run.seed;
    let f = simulate(seed, &cfg).result.expect_err("150 us is too short for any rich run");
    assert_eq!(f.kind, FailureKind::Liveness, "{f}");
}

/// Liveness after the heal phase: a QP that ends in the error state with no
/// probe and no retry exhaustion to justify it fails the run.
#[test]
fn a_qp_in_error_without_a_fault_fails_liveness() {
    let mut run = rich();
    let rc =
        run.plan.streams.iter().find(|s| s.probe.is_none()).map(|s| run.plan.qps[s.qp].conn.unwrap().peer);
    let rc = rc.expect("an RC stream");
    let (host, qpn) = (run.plan.qps[rc].host, run.live.as_ref().unwrap().qpns[rc]);
    let attr = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
    run.net.engine_mut(host).modify_qp(qpn, &attr, AttrMask::STATE).expect("any state may go to ERR");
    let f = run.check().expect_err("a QP in error");
    assert!(
        f.findings.items.iter().any(|(k, m)| *k == FailureKind::Liveness && m.contains("no fault")),
        "{f}"
    );
}
