use std::path::Path;

use super::check::{check, incast_flows, parse_cdf, poisson_flows, CheckError, CheckOptions, Workload};
use super::*;
use crate::scenario::PS_PER_US;

const TWO_SWITCH: &str = include_str!("../../topologies/two-switch.toml");
const G: u64 = 1_000_000_000;

fn two_switch() -> Scenario {
    toml_scenario::from_str(TWO_SWITCH).unwrap()
}

fn input(buffer: u64, scale: f64) -> PlanInput {
    PlanInput {
        mtu: 1024,
        buffer_bytes: buffer,
        lossless_mask: 1 << 3,
        headroom_scale: scale,
        framing: Framing::Ethernet,
        dcqcn_set: rules::DCQCN_SET.into(),
    }
}

/// Each port's headroom is the sum of its terms, and the simulator's
/// formula gives the same bytes.
#[test]
fn two_switch_headroom_is_the_sum_of_the_ieee_terms() {
    let p = plan(&two_switch(), &input(16 * 1024 * 1024, 1.0)).unwrap();
    assert_eq!((p.hosts, p.switches, p.nic_rate_bps), (16, 2, 100 * G));
    assert_eq!(p.largest_frame, 1130);
    assert_eq!(p.classes.len(), 2);
    let host = &p.classes[0];
    assert!(!p.classes[1].facing_host);
    assert_eq!((host.facing_host, host.rate_bps, host.ports), (true, 100 * G, 16));
    // 100G over 500 ns: 1130 + 84 + 12,500 + 15,360 + 25,216 + 1130.
    assert_eq!(host.terms.cable, 12_500);
    assert_eq!(host.headroom_bytes, 55_420);
    assert_eq!(host.terms.total(), 55_420);
    let trunk = &p.classes[1];
    // 400G over 1.5 us: the cable alone is 150 KB.
    assert_eq!(trunk.terms.cable, 150_000);
    assert_eq!(trunk.headroom_bytes, trunk.terms.total());
    assert_eq!(trunk.headroom_bytes, 1130 + 84 + 150_000 + 61_440 + 57_920 + 1130);
    assert_eq!((host.alpha, trunk.alpha), (0.125, 0.5));
    // One switch shape (8 hosts + the trunk), two switches of it.
    assert_eq!(p.groups.len(), 1);
    let g = &p.groups[0];
    assert_eq!((g.count, g.ports), (2, 9));
    assert_eq!(g.headroom_total, 8 * 55_420 + trunk.headroom_bytes);
    assert_eq!(g.pool, 16 * 1024 * 1024 - g.headroom_total - 9 * 4096);
    let host_in = g.thresholds.iter().find(|t| p.classes[t.class].facing_host).unwrap();
    assert_eq!(host_in.xoff_one, (0.125 * g.pool as f64 / 1.125) as u64);
    assert_eq!(host_in.xon_one, host_in.xoff_one - 3 * 1130);
    // The published 100G rule holds; the 400G one's Kmax of 6.4 MB does
    // not: five 100G hosts overload the trunk and pause at 5 x alpha B' /
    // (1 + 5 alpha) in all, below it.
    assert_eq!(p.ecn.len(), 2);
    assert!(p.ecn[0].lowered.is_none() && p.ecn[0].rule == p.ecn[0].published);
    assert_eq!((p.ecn[0].rule.kmin, p.ecn[0].rule.kmax), (400_000, 1_600_000));
    let l = p.ecn[1].lowered.as_ref().expect("the trunk's Kmax lowered");
    assert_eq!((l.k, l.ingress_rate_bps), (5, 100 * G));
    assert_eq!(l.bound, 5 * rules::xoff_at(0.125, 5, g.pool));
    assert_eq!(p.ecn[1].rule.kmax, (l.bound as f64 * 0.9) as u64);
    assert_eq!(p.nic.dcqcn_set, "hpcc");
    assert_eq!(p.nic.dcqcn_params, vec!["ai_rate_bps=20000000", "hai_rate_bps=200000000"]);
    let text = p.to_string();
    for needle in ["55420", "D-Resp", "Kmax 1.6MB", "alpha 1/8", "R_AI 20Mbps", "the `hpcc` set"] {
        assert!(text.contains(needle), "{needle} in\n{text}");
    }
}

/// A smaller buffer leaves too little pool for the published Kmax of a
/// 100G egress too: the plan lowers it below the bound and says why.
#[test]
fn ecn_marks_before_pfc_pauses_or_kmax_is_lowered() {
    let p = plan(&two_switch(), &input(4 * 1024 * 1024, 1.0)).unwrap();
    let pool = p.groups[0].pool;
    // 100G egress: two 100G hosts overload it (bound 2 x alpha B' / (1 +
    // 2 alpha)), tighter than the trunk alone (1 x 1/2 B' / 1.5).
    let e100 = &p.ecn[0];
    let l = e100.lowered.as_ref().expect("1.6 MB cannot fit a 4 MiB switch");
    assert_eq!((l.k, l.ingress_rate_bps, l.bound), (2, 100 * G, 2 * rules::xoff_at(0.125, 2, pool)));
    assert!(e100.rule.kmax < l.bound && e100.rule.kmax >= l.bound * 8 / 10);
    assert!(e100.rule.kmin <= e100.rule.kmax / 4);
    let e400 = &p.ecn[1];
    assert!(e400.lowered.is_some() && e400.rule.kmax < e400.published.kmax);
    assert!(p.to_string().contains("lowered from 1.6MB"));
    assert_eq!(p.switch.ecn, vec![e100.rule, e400.rule]);
}

/// The sections read back as the same settings.
#[test]
fn sections_are_a_scenarios_switch_and_nic() {
    let p = plan(&two_switch(), &input(4 * 1024 * 1024, 1.0)).unwrap();
    let sections = p.toml_sections();
    assert!(
        sections.contains("[switch]") && sections.contains("[nic]") && sections.contains("headroom_extra")
    );
    let scn = toml_scenario::from_str(&format!("{TWO_SWITCH}\n{sections}")).unwrap();
    assert_eq!(scn.switch, p.switch);
    assert_eq!(scn.nic, p.nic);
    assert_eq!(p.apply(&two_switch()).switch, p.switch);
}

#[test]
fn bad_inputs_are_typed_errors() {
    let t = two_switch();
    assert!(matches!(
        plan(&t, &PlanInput { mtu: 1500, ..input(1 << 24, 1.0) }),
        Err(PlanError::BadMtu(1500))
    ));
    let nvidia = plan(&t, &PlanInput { dcqcn_set: "nvidia".into(), ..input(1 << 24, 1.0) }).unwrap();
    assert_eq!(nvidia.nic.dcqcn_set, "nvidia");
    assert!(matches!(plan(&t, &input(1 << 24, 0.0)), Err(PlanError::BadScale(_))));
    assert!(matches!(
        plan(&t, &PlanInput { dcqcn_set: "fast".into(), ..input(1 << 24, 1.0) }),
        Err(PlanError::DcqcnSet(_))
    ));
    assert!(matches!(plan(&t, &input(1 << 24, f64::NAN)), Err(PlanError::BadScale(_))));
    assert!(matches!(
        plan(&t, &PlanInput { lossless_mask: 0, ..input(1 << 24, 1.0) }),
        Err(PlanError::NoLossless)
    ));
    match plan(&t, &input(500_000, 1.0)) {
        Err(PlanError::BufferTooSmall { switch, needed, .. }) => {
            assert_eq!(switch, "s1");
            assert!(needed > 500_000);
        }
        other => panic!("{other:?}"),
    }
    let hosts_only = toml_scenario::from_str(
        "hosts = [\"x\", \"y\"]\n[[links]]\na = \"x\"\nb = \"y\"\nrate = \"100G\"\ndelay = \"1us\"\n",
    )
    .unwrap();
    assert!(matches!(plan(&hosts_only, &input(1 << 24, 1.0)), Err(PlanError::NoSwitch)));
    let mut broken = two_switch();
    broken.links[0].b = 99;
    assert!(matches!(plan(&broken, &input(1 << 24, 1.0)), Err(PlanError::Topology(_))));
}

#[test]
fn flows_for_the_check() {
    let t = plan(&two_switch(), &input(1 << 24, 1.0)).unwrap().apply(&two_switch());
    let f = incast_flows(&t, 4, 1000).unwrap();
    let srcs: Vec<String> = f.iter().map(|f| t.nodes[f.src].name.clone()).collect();
    assert_eq!(srcs, ["a2", "a5", "b1", "b5"], "spread over both switches");
    assert!(f.iter().all(|f| t.nodes[f.dst].name == "a1" && f.priority == 3));
    assert!(matches!(incast_flows(&t, 16, 1000), Err(CheckError::TooFewHosts { needed: 17, hosts: 16 })));
    let cdf = parse_cdf("0 0\n10000 50\n1000000 100\n").unwrap();
    let flows = poisson_flows(&t, &cdf, 0.3, 200 * PS_PER_US, 7).unwrap();
    assert_eq!(flows, poisson_flows(&t, &cdf, 0.3, 200 * PS_PER_US, 7).unwrap(), "deterministic");
    assert!(flows.iter().all(|f| f.src != f.dst && f.size <= 1_000_000 && f.start_ps < 200 * PS_PER_US));
    assert!(flows.windows(2).all(|w| w[0].start_ps <= w[1].start_ps));
    // 16 hosts x 0.3 x 100G x 200 us / 8 over a mean of ~254 KB: ~47 flows.
    assert!((25..80).contains(&flows.len()), "{}", flows.len());
    assert!(matches!(parse_cdf("0 0\n10 50\n"), Err(CheckError::BadCdf { line: 2, .. })));
    assert!(matches!(parse_cdf("10 50\n5 60\n20 100\n"), Err(CheckError::BadCdf { line: 2, .. })));
    assert!(matches!(parse_cdf("x 50\n"), Err(CheckError::BadCdf { line: 1, .. })));
    assert!(matches!(poisson_flows(&t, &cdf, 0.0, 1, 1), Err(CheckError::BadLoad(_))));
}

/// The check of the two-switch example with a small buffer: the plan
/// holds (the incast pauses and fills part of some headroom, nothing is
/// dropped); with 0.3 of the headroom the trunk's 150 KB of cable no
/// longer fit and frames are dropped, which the check reports.
#[test]
fn the_check_passes_a_plan_and_fails_a_short_headroom() {
    let t = two_switch();
    let opts = |w: Option<Workload>| CheckOptions {
        incast_senders: None,
        incast_bytes: Some(256 * 1024),
        workload: w,
        payload: 1024,
    };
    let good = plan(&t, &input(2 * 1024 * 1024, 1.0)).unwrap();
    let planned = good.apply(&t);
    let cdf = parse_cdf("0 0\n10000 60\n200000 100\n").unwrap();
    let flows = poisson_flows(&planned, &cdf, 0.5, 100 * PS_PER_US, 1).unwrap();
    let r = check(&planned, &opts(Some(Workload { name: "mix".into(), flows })), None).unwrap();
    assert!(r.holds(), "{r}");
    assert_eq!(r.incast.drops(), 0);
    assert!(r.incast.pauses_sent > 0 && r.incast.pause.total_ps > 0, "the incast must pause: {r}");
    let fullest = r.incast.fullest.expect("headroom used");
    assert!(fullest.used.peak_bytes > 0 && fullest.used.peak_bytes <= fullest.used.headroom_bytes);
    let w = r.workload.as_ref().unwrap();
    assert_eq!((w.drops(), w.finished), (0, w.flows));
    assert!(w.slowdown.is_some_and(|s| s.p99 >= 1.0));

    let short = plan(&t, &input(2 * 1024 * 1024, 0.3)).unwrap();
    let r = check(&short.apply(&t), &opts(None), None).unwrap();
    assert!(!r.holds(), "{r}");
    assert!(r.incast.drops_buffer > 0, "{r}");
    assert!(!r.incast.refusing_ports.is_empty());
    assert!(r.to_string().contains("DOES NOT HOLD"));
    assert!(r.problems()[0].contains("for want of buffer"), "{:?}", r.problems());
}

/// The fat-tree of the HPCC baseline, planned (no simulation: that is in
/// the docs' figures, far too slow for a debug test).
#[test]
fn the_fat_tree_plan() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fabric-sim-baseline/topologies/fat320_hpcc.txt");
    if !path.is_file() {
        eprintln!("skipped: no {}", path.display());
        return;
    }
    let topo = crate::hpcc::Topology::read(&path).unwrap();
    let scn = crate::hpcc::scenario_from_parts(&topo, &[], &Default::default());
    let p = plan(&scn, &input(32 * 1024 * 1024, 1.0)).unwrap();
    assert_eq!((p.hosts, p.switches), (320, 56));
    let host = p.classes.iter().find(|c| c.facing_host).unwrap();
    assert_eq!((host.ports, host.rate_bps, host.headroom_bytes), (320, 100 * G, 67_920));
    let up = p.classes.iter().find(|c| !c.facing_host).unwrap();
    assert_eq!((up.rate_bps, up.headroom_bytes), (400 * G, 1130 + 84 + 100_000 + 61_440 + 57_920 + 1130));
    assert_eq!(p.groups.len(), 3, "ToR, aggregation, core");
    assert!(p.ecn.iter().all(|e| e.lowered.is_none()));
}
