use std::path::Path;

use super::*;
use crate::hpcc::host_ip;

fn fct(src: NodeId, dst: NodeId, size: u64, start_ns: u64, fct_ns: u64, standalone_ns: u64) -> FctLine {
    FctLine {
        sip: host_ip(src),
        dip: host_ip(dst),
        sport: 10000,
        dport: 100,
        size,
        start_ns,
        fct_ns,
        standalone_ns,
    }
}

#[test]
fn percentile_is_the_floor_index() {
    let v: Vec<f64> = (1..=10).map(f64::from).collect();
    // n = 10: p50 -> index 5, p95 -> 9, p99 -> 9 (not interpolated, not nearest rank).
    assert_eq!(percentile(&v, 0.5), Some(6.0));
    assert_eq!(percentile(&v, 0.95), Some(10.0));
    assert_eq!(percentile(&v, 0.99), Some(10.0));
    assert_eq!(percentile(&v, 0.0), Some(1.0));
    assert_eq!(percentile(&v, 1.0), Some(10.0), "clamped to the last");
    let v4 = [1.0, 2.0, 3.0, 4.0];
    assert_eq!(percentile(&v4, 0.5), Some(3.0), "nearest rank would give 2, linear 2.5");
    assert_eq!(percentile(&[], 0.5), None);
}

#[test]
fn slowdown_is_clipped_at_one() {
    assert_eq!(fct(1, 2, 10, 0, 50, 100).slowdown(), 1.0);
    assert_eq!(fct(1, 2, 10, 0, 300, 100).slowdown(), 3.0);
}

#[test]
fn flows_match_by_key_with_a_1ns_start_tolerance() {
    let base = [
        fct(1, 2, 100, 2_000_002_611, 1000, 500),
        fct(1, 2, 100, 2_000_002_611, 1100, 500),
        fct(3, 2, 100, 10, 1000, 500),
        fct(4, 2, 100, 10, 1000, 500),
    ];
    let ours = [
        fct(3, 2, 100, 11, 2000, 500),
        fct(1, 2, 100, 2_000_002_612, 900, 500),
        fct(1, 2, 100, 2_000_002_612, 1000, 500),
        fct(4, 2, 100, 12, 1000, 500),
        fct(5, 2, 100, 12, 1000, 500),
    ];
    let c = Comparison::from_lines(Path::new("b"), Path::new("o"), &base, &ours, &[], &[]);
    assert_eq!(c.pairs.len(), 3);
    assert_eq!((c.pairs[0].baseline.fct_ns, c.pairs[0].ours.fct_ns), (1000, 900));
    assert_eq!((c.pairs[1].baseline.fct_ns, c.pairs[1].ours.fct_ns), (1100, 1000));
    assert_eq!(c.pairs[2].ours.fct_ns, 2000);
    assert_eq!(c.unmatched_baseline, vec![base[3]]);
    assert_eq!(c.unmatched_ours, vec![ours[3], ours[4]]);
    let r = c.fct_ratio.unwrap();
    assert_eq!((r.min, r.max), (0.9, 2.0));
    assert_eq!(c.fct_ratio_max(), Some(2.0));
    assert!((r.mean - (0.9 + 1000.0 / 1100.0 + 2.0) / 3.0).abs() < 1e-12);
}

#[test]
fn pfc_counts_by_type_and_node() {
    let p = |node, is_switch, pause| PfcLine { time_ns: 1, node, is_switch, if_index: 1, pause };
    let base = [p(0, true, true), p(0, true, false), p(5, false, true)];
    let ours = [p(5, false, true), p(5, false, true), p(5, false, false), p(7, true, true)];
    let c = Comparison::from_lines(Path::new("b"), Path::new("o"), &[], &[], &base, &ours);
    assert_eq!(
        c.pfc.baseline,
        PfcCounts { host_pause: 1, host_resume: 0, switch_pause: 1, switch_resume: 1 }
    );
    assert_eq!(c.pfc.ours, PfcCounts { host_pause: 2, host_resume: 1, switch_pause: 1, switch_resume: 0 });
    assert_eq!(
        c.pfc.top_nodes[0],
        NodePfc {
            node: 5,
            is_switch: false,
            baseline_pause: 1,
            baseline_resume: 0,
            ours_pause: 2,
            ours_resume: 1
        }
    );
    assert_eq!(c.pfc.top_nodes.len(), 3);
    assert!(c.to_string().contains("host 5"));
}

#[test]
fn bins_cut_the_matched_flows_in_twentieths() {
    let base: Vec<_> = (0..110u64).map(|i| fct(1, 2, 1000 + i, i, 200, 100)).collect();
    let ours: Vec<_> = (0..110u64).map(|i| fct(1, 2, 1000 + i, i, 300, 100)).collect();
    let c = Comparison::from_lines(Path::new("b"), Path::new("o"), &base, &ours, &[], &[]);
    assert_eq!(c.bins.len(), 20);
    // 110 flows: bin i holds flows i * 110 / 100 .. (i + 5) * 110 / 100.
    assert_eq!((c.bins[0].min_size, c.bins[0].max_size, c.bins[0].baseline.count), (1000, 1004, 5));
    assert_eq!((c.bins[1].min_size, c.bins[1].max_size, c.bins[1].baseline.count), (1005, 1010, 6));
    assert_eq!(c.bins[19].max_size, 1109);
    assert_eq!(c.bins.iter().map(|b| b.ours.count).sum::<usize>(), 110);
    assert_eq!((c.bins[3].baseline.p50, c.bins[3].ours.p50), (2.0, 3.0));
    // Too few flows, or a single size: no bins.
    let c = Comparison::from_lines(Path::new("b"), Path::new("o"), &base[..99], &ours[..99], &[], &[]);
    assert!(c.bins.is_empty());
    let same: Vec<_> = (0..200u64).map(|i| fct(1, 2, 500, i, 200, 100)).collect();
    let c = Comparison::from_lines(Path::new("b"), Path::new("o"), &same, &same, &[], &[]);
    assert!(c.bins.is_empty());
}

#[test]
fn baseline_fat_tree_slowdowns_match_the_readme() {
    let Some(base) = crate::hpcc::tests::baseline_dir() else { return };
    let run = base.join("runs/fat_ws30_dcqcn");
    let c = compare(&run, &run).unwrap();
    let s = c.overall.baseline.unwrap();
    assert_eq!(s.count, 3201);
    let round3 = |x: f64| (x * 1000.0).round() / 1000.0;
    assert_eq!((round3(s.p50), round3(s.p95), round3(s.p99)), (1.127, 3.922, 5.792));
    assert_eq!(c.pairs.len(), 3201);
    assert_eq!(c.fct_ratio.map(|r| (r.min, r.max)), Some((1.0, 1.0)));
    assert_eq!(c.bins.len(), 20);
    assert_eq!(c.bins.iter().map(|b| b.baseline.count).sum::<usize>(), 3201);
    let text = c.to_string();
    assert!(text.contains("matched 3201"), "{text}");
}

#[test]
fn baseline_pfc_compares() {
    let Some(base) = crate::hpcc::tests::baseline_dir() else { return };
    let run = base.join("runs/incast64x500KB_noqcn");
    let c = compare(&run, &run).unwrap();
    assert_eq!(c.pfc.baseline.host_pause, 192);
    assert_eq!(c.pfc.baseline.host_resume, 192);
    assert_eq!(c.pfc.baseline.switch_pause, 0);
    assert_eq!(c.pfc.top_nodes.len(), TOP_PFC_NODES);
    assert!(!c.to_string().contains("baseline_us"), "no per-flow table for 64 flows");
}

#[test]
fn missing_files_are_errors() {
    assert!(matches!(
        compare(Path::new("/nonexistent-b"), Path::new("/nonexistent-o")),
        Err(CompareError::Read(_))
    ));
}

#[test]
fn completion_and_mean_fct_over_each_whole_file() {
    let base = [fct(1, 2, 100, 0, 1000, 500), fct(3, 2, 100, 0, 3000, 500)];
    // Ours has a flow the baseline has not: it counts in our totals.
    let ours = [fct(1, 2, 100, 0, 1500, 500), fct(3, 2, 100, 0, 2500, 500), fct(4, 2, 100, 0, 5000, 500)];
    let c = Comparison::from_lines(Path::new("b"), Path::new("o"), &base, &ours, &[], &[]);
    assert_eq!(c.baseline_fct, Some(FctTotals { flows: 2, last_ns: 3000, mean_ns: 2000.0 }));
    assert_eq!(c.ours_fct, Some(FctTotals { flows: 3, last_ns: 5000, mean_ns: 3000.0 }));
    assert_eq!(c.last_fct_ratio(), Some(5000.0 / 3000.0));
    assert_eq!(c.mean_fct_ratio(), Some(1.5));
    let text = c.to_string();
    assert!(
        text.contains("completion (largest FCT): baseline 3.000 us, ours 5.000 us, ratio 1.6667"),
        "{text}"
    );
    assert!(
        text.contains("mean FCT (all flows):     baseline 2.000 us, ours 3.000 us, ratio 1.5000"),
        "{text}"
    );
    let empty = Comparison::from_lines(Path::new("b"), Path::new("o"), &[], &ours, &[], &[]);
    assert_eq!(empty.baseline_fct, None);
    assert_eq!(empty.last_fct_ratio(), None);
    assert_eq!(empty.mean_fct_ratio(), None);
}

#[test]
fn size_classes_take_each_files_own_flows() {
    assert_eq!((size_class(1), size_class(99_999), size_class(100_000)), (0, 0, 1));
    assert_eq!((size_class(999_999), size_class(1_000_000), size_class(u64::MAX)), (1, 2, 2));
    let base = [fct(1, 2, 50_000, 0, 2000, 1000), fct(1, 2, 2_000_000, 0, 9000, 3000)];
    let ours = [fct(1, 2, 50_000, 0, 4000, 1000), fct(3, 2, 500_000, 0, 1000, 1000)];
    let c = Comparison::from_lines(Path::new("b"), Path::new("o"), &base, &ours, &[], &[]);
    let p50 = |s: &Option<SlowdownStats>| s.map(|s| s.p50);
    assert_eq!((p50(&c.classes[0].baseline), p50(&c.classes[0].ours)), (Some(2.0), Some(4.0)));
    assert_eq!((p50(&c.classes[1].baseline), p50(&c.classes[1].ours)), (None, Some(1.0)));
    assert_eq!((p50(&c.classes[2].baseline), p50(&c.classes[2].ours)), (Some(3.0), None));
    let text = c.to_string();
    assert!(text.contains("    < 100KB     "), "{text}");
    assert!(!text.contains(">= 1MB"), "a class only one file has is not a row: {text}");
}
