//! The seed mix's switched fabric: seeds that draw one or two switches run
//! lossless (PFC) with ECN marking, and the checks see real CE marks and
//! the engines' own CNPs.

use roce_harness::{run_seed, simulate, Config};

#[test]
fn switched_seeds_meet_real_ce_marks_and_pass_the_checks() {
    let cfg = Config::default();
    let (mut switched, mut two, mut marked, mut answered, mut paused) = (0, 0, 0, 0, 0);
    for seed in 0..600 {
        let run = simulate(seed, &cfg);
        let Some(f) = &run.plan.mix.fabric else { continue };
        assert!(run.net.switched());
        let r = run.result.as_ref().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.mix.switches, f.switches());
        assert_eq!(r.net.switch_drops, 0, "seed {seed}: a lossless fabric dropped");
        switched += 1;
        two += usize::from(f.switches() == 2);
        marked += usize::from(r.net.ce_marked > 0);
        answered += usize::from(r.mix.own_cnps > 0 && r.net.cnps_delivered > 0);
        paused += usize::from(r.net.pfc_pauses > 0);
    }
    assert!(switched >= 30 && two >= 10, "{switched} switched seeds, {two} with two switches");
    assert!(marked >= 3 && answered >= 2, "CE marks on {marked} seeds, CNPs answered on {answered}");
    // The small buffers' PFC thresholds are met, and the headroom holds.
    assert!(paused >= 10, "PFC pauses on {paused} seeds");
}

#[test]
fn the_mesh_seeds_do_not_change_with_the_switched_draw() {
    // The fabric draws from a stream of its own: a seed that stays on the
    // mesh runs as it did without the draw.
    let mut off = Config::default();
    off.workload.mix.switched_runs = 0.0;
    let cfg = Config::default();
    let mut compared = 0;
    for seed in 0..40 {
        let on = simulate(seed, &cfg);
        if on.plan.mix.fabric.is_some() {
            continue;
        }
        let a = run_seed(seed, &off).map(|r| r.trace_fingerprint);
        let b = on.result.map(|r| r.trace_fingerprint);
        assert_eq!(a.ok(), b.ok(), "seed {seed}");
        compared += 1;
    }
    assert!(compared >= 20);
}

/// Seed 6 on two switches (the trunk a quarter of the hosts' 10 Gb/s):
/// its QPs kept the ACK timeouts drawn for a mesh of links without a rate,
/// some just above that mesh's round trip (65 us). On the fabric, answers
/// queued behind the trunk's higher classes (strict priority) for longer;
/// the requesters' timeouts resent everything, which filled the trunk
/// further, and a QP of the lowest class heard nothing for retry_cnt + 1
/// timeouts (RETRY_EXC_ERR, no loss to explain it). A switched seed's
/// timeouts are raised to what the fabric's round trip needs
/// (`workload::mix`).
#[test]
fn seed_6_on_two_switches_completes() {
    let run = simulate(6, &Config::default());
    let f = run.plan.mix.fabric.as_ref().expect("seed 6 draws a switched fabric");
    assert_eq!(f.switches(), 2);
    assert!(f.trunk_rate_bps < f.host_rate_bps, "an oversubscribed trunk");
    let r = run.result.as_ref();
    assert!(r.is_ok(), "{}", r.err().map(|e| e.to_string()).unwrap_or_default());
    // Every RC QP waits long enough for an answer queued in the fabric.
    let slowest = run.plan.qps.iter().filter_map(|q| q.conn).map(|c| c.timeout).min().expect("RC QPs");
    assert!(slowest >= 10, "ACK timeout code {slowest}");
}
