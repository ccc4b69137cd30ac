use std::path::{Path, PathBuf};

use roce_proto::cc::{ClampRule, DcqcnParams, Fraction};

use super::*;
use crate::report::{FctRecord, PfcRecord, Report};
use crate::scenario::{EcnRule, PS_PER_NS, PS_PER_S};

/// The shared baseline directory (`shared/` beside the repository).
pub(crate) fn baseline_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fabric-sim-baseline");
    if dir.join("runs").is_dir() {
        Some(dir)
    } else {
        eprintln!("skipped: no baseline at {}", dir.display());
        None
    }
}

/// Every baseline run: (run dir, topology file).
pub(crate) fn baseline_runs(base: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut runs: Vec<_> = std::fs::read_dir(base.join("runs")).unwrap().map(|e| e.unwrap().path()).collect();
    runs.sort();
    runs.into_iter()
        .map(|run| {
            let cfg = HpccConfig::read(&run.join("config.txt")).unwrap();
            let topo = base.join("topologies").join(cfg.topology_file.unwrap());
            (run, topo)
        })
        .collect()
}

fn small_topology() -> Topology {
    Topology::parse(
        "4 1 3\n3\n0 3 100Gbps 1us 0\n3 1 100Gbps 1us 0.5\n2 3 400Gbps 1000ns 0\n",
        Path::new("t"),
    )
    .unwrap()
}

fn small_config(extra: &str) -> HpccConfig {
    let text = format!(
        "ENABLE_QCN 1\nUSE_DYNAMIC_PFC_THRESHOLD 1\nPACKET_PAYLOAD_SIZE 1000\nCC_MODE 1\n\
         KMAX_MAP 1 100000000000 1600\nKMIN_MAP 1 100000000000 400\nPMAX_MAP 1 100000000000 0.20\n\
         BUFFER_SIZE 16\nALPHA_RESUME_INTERVAL 1\nRATE_DECREASE_INTERVAL 4\nCLAMP_TARGET_RATE 0\n\
         RP_TIMER 300\nEWMA_GAIN 0.00390625\nFAST_RECOVERY_TIMES 1\nRATE_AI 20Mb/s\nRATE_HAI 200Mb/s\n\
         MIN_RATE 1000Mb/s\nACK_HIGH_PRIO 1\nSIMULATOR_STOP_TIME 4.00\n{extra}"
    );
    HpccConfig::parse(&text, Path::new("config.txt")).unwrap()
}

#[test]
fn host_ips_follow_the_artifact() {
    assert_eq!(host_ip(0), 0x0b00_0001);
    assert_eq!(host_ip(13), 0x0b00_0d01);
    assert_eq!(host_ip(303), 0x0b01_2f01);
    assert_eq!(ip_node(host_ip(303)), 303);
}

#[test]
fn ib_mtu_is_the_smallest_that_holds_the_payload() {
    assert_eq!(ib_mtu_for(1000), 1024);
    assert_eq!(ib_mtu_for(1024), 1024);
    assert_eq!(ib_mtu_for(1025), 2048);
    assert_eq!(ib_mtu_for(1), 256);
    assert_eq!(ib_mtu_for(4096), 4096);
}

#[test]
fn scenario_mapping() {
    let topo = small_topology();
    let flows = parse_flows("1\n0 2 3 100 5000 2.000000962\n", Path::new("f")).unwrap();
    let scn = scenario_from_parts(&topo, &flows, &small_config("LINK_DOWN 10 2 3\n"));
    let names: Vec<_> = scn.nodes.iter().map(|n| (n.name.as_str(), n.kind)).collect();
    assert_eq!(
        names,
        vec![
            ("h0", NodeKind::Host),
            ("h1", NodeKind::Host),
            ("h2", NodeKind::Host),
            ("s3", NodeKind::Switch)
        ]
    );
    assert_eq!(scn.links.len(), 3);
    assert_eq!((scn.links[1].a, scn.links[1].b, scn.links[1].loss), (3, 1, 0.5));
    assert_eq!(scn.links[2].rate_bps, 400_000_000_000);
    assert_eq!(
        scn.flows[0],
        FlowSpec {
            src: 0,
            dst: 2,
            priority: 3,
            size: 5000,
            start_ps: 2_000_000_962_000,
            op: FlowOp::Write,
            dport: 100
        }
    );
    assert_eq!(scn.framing, Framing::Ppp);
    assert_eq!(scn.switch.buffer_bytes, 16 * 1024 * 1024);
    assert_eq!(
        scn.switch.ecn,
        vec![EcnRule { rate_bps: 100_000_000_000, kmin: 400_000, kmax: 1_600_000, pmax: 0.2 }]
    );
    assert!(scn.switch.ecn_enabled);
    assert!(matches!(scn.switch.pfc, PfcThreshold::Dynamic { .. }));
    assert_eq!(scn.nic.mtu, 1024);
    assert_eq!(scn.nic.cc, "dcqcn");
    assert_eq!(scn.nic.ack_priority, Some(7));
    assert_eq!(scn.seed, 1);
    assert_eq!(scn.stop_ps, Some(4 * PS_PER_S));
    assert_eq!(scn.deadlock_check_ps, 100 * PS_PER_US);
    assert_eq!(
        scn.events,
        vec![TimedEvent { at_ps: 2 * PS_PER_S + 10 * PS_PER_US, kind: EventKind::LinkDown { link: 2 } }]
    );
}

#[test]
fn qcn_off_static_pfc_and_low_priority_acks() {
    let cfg = small_config(
        "ENABLE_QCN 0\nUSE_DYNAMIC_PFC_THRESHOLD 0\nACK_HIGH_PRIO 0\nPACKET_PAYLOAD_SIZE 2000\n",
    );
    let scn = scenario_from_parts(&small_topology(), &[], &cfg);
    assert!(!scn.switch.ecn_enabled);
    assert_eq!(scn.nic.cc, "none");
    assert_eq!(scn.nic.ack_priority, None);
    assert_eq!(scn.nic.mtu, 2048);
    assert_eq!(scn.switch.pfc, PfcThreshold::Static { xoff: 1024 * 1024, xon: 1024 * 1024 - 3 * 1024 });
    let cc3 = scenario_from_parts(&small_topology(), &[], &small_config("CC_MODE 3\n"));
    assert_eq!(cc3.nic.cc, "none");
}

#[test]
fn dcqcn_overrides_apply_to_the_params() {
    let cfg = small_config("CLAMP_TARGET_RATE 1\nRP_TIMER 55\nRATE_AI 40Mb/s\n");
    let kv = dcqcn_params(&cfg);
    let mut p = DcqcnParams::named("hpcc").unwrap();
    for s in &kv {
        p.set_kv(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    }
    assert_eq!(p.alpha_period.0, 1_000);
    assert_eq!(p.rate_decrease_period.0, 4_000);
    assert_eq!(p.rate_increase_period.0, 55_000);
    assert_eq!(p.g, Fraction::new(1, 256));
    assert_eq!(p.fast_recovery_steps, 1);
    assert_eq!(p.ai_rate_bps, 40_000_000);
    assert_eq!(p.hai_rate_bps, 200_000_000);
    assert_eq!(p.min_rate_bps, 1_000_000_000);
    assert_eq!(p.clamp_target, ClampRule::Always);
    // The baseline's values are the `hpcc` set's.
    let mut q = DcqcnParams::hpcc();
    for s in dcqcn_params(&small_config("")) {
        q.set_kv(&s).unwrap();
    }
    assert_eq!(q, DcqcnParams::hpcc());
}

#[test]
fn load_run_errors_name_the_file_and_line() {
    let dir = std::env::temp_dir().join(format!("roce-hpcc-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let topo = dir.join("topo.txt");
    std::fs::write(&topo, "4 1 3\n3\n0 3 100Gbps 1us 0\n3 1 100Gbps 1us 0\n2 3 400Gbps 1000ns 0\n").unwrap();
    std::fs::write(dir.join("config.txt"), "FLOW_FILE mix/flow.txt\nLINK_DOWN 5 0 3\n").unwrap();
    std::fs::write(dir.join("flow.txt"), "2\n0 2 3 100 5000 2\n0 3 3 100 5000 2\n").unwrap();
    match load_run(&dir, &topo) {
        Err(HpccError::Parse { path, line: 3, reason: ParseReason::Inconsistent(_) }) => {
            assert!(path.ends_with("flow.txt"))
        }
        other => panic!("{other:?}"),
    }
    std::fs::write(dir.join("flow.txt"), "1\n0 2 3 100 5000 2\n").unwrap();
    let scn = load_run(&dir, &topo).unwrap();
    assert_eq!(scn.events.len(), 1);
    assert!(scn.name.starts_with("roce-hpcc-load-"));
    std::fs::write(dir.join("config.txt"), "LINK_DOWN 5 0 1\n").unwrap();
    assert!(matches!(load_run(&dir, &topo), Err(HpccError::Parse { line: 1, .. })));
    assert!(matches!(load_run(&dir, &dir.join("missing.txt")), Err(HpccError::Io { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn standalone_fct_matches_every_baseline_flow() {
    let Some(base) = baseline_dir() else { return };
    let runs = baseline_runs(&base);
    assert_eq!(runs.len(), 8);
    let mut checked = 0;
    for (run, topo) in runs {
        let loaded = load_run_full(&run, &topo).unwrap();
        let scn = &loaded.scenario;
        assert!(!scn.flows.is_empty());
        let mut alone = Standalone::new(scn, u64::from(loaded.payload()));
        for line in read_fct(&run.join("fct.txt")).unwrap() {
            let ours = alone.fct_ps(line.src(), line.dst(), line.size).unwrap();
            assert_eq!(ours, line.standalone_ns * PS_PER_NS, "{}: {line:?}", run.display());
            let single = standalone_fct_ps(scn, line.src(), line.dst(), line.size, 1000);
            assert_eq!(single, Some(ours));
            checked += 1;
        }
    }
    assert_eq!(checked, 3201 + 2 + 8 + 64 + 64 + 1 + 9 + 9);
}

#[test]
fn baseline_pfc_files_parse() {
    let Some(base) = baseline_dir() else { return };
    let pfc = read_pfc(&base.join("runs/victim_pfconly/pfc.txt")).unwrap();
    assert_eq!(pfc.len(), 9324);
    let uplink_pauses =
        pfc.iter().filter(|p| p.node == 0 && p.is_switch && p.if_index == 1 && p.pause).count();
    assert_eq!(uplink_pauses, 705);
}

#[test]
fn fct_and_pfc_round_trip() {
    let topo = small_topology();
    let flows = parse_flows("2\n0 2 3 100 5000 2.000000962\n1 0 3 100 1 2\n", Path::new("f")).unwrap();
    let scn = scenario_from_parts(&topo, &flows, &small_config(""));
    let report = Report {
        fct: vec![
            FctRecord {
                flow: 1,
                src: 1,
                dst: 0,
                sport: 49152,
                dport: 4791,
                size: 1,
                start_ps: 2 * PS_PER_S,
                fct_ps: 4_321_999,
            },
            FctRecord {
                flow: 0,
                src: 0,
                dst: 2,
                sport: 49153,
                dport: 4791,
                size: 5000,
                start_ps: 2_000_000_962_000,
                fct_ps: 9_000_500,
            },
        ],
        pfc: vec![
            PfcRecord {
                time_ps: 2_000_000_001_999,
                node: 3,
                is_switch: true,
                port: 2,
                priority: 3,
                pause: true,
            },
            PfcRecord {
                time_ps: 2_000_000_005_000,
                node: 0,
                is_switch: false,
                port: 1,
                priority: 3,
                pause: false,
            },
        ],
        ..Report::default()
    };
    let mut buf = Vec::new();
    write_fct(&mut buf, &scn, &report, 1000).unwrap();
    let text = String::from_utf8(buf).unwrap();
    // h1 -> h0: 2 x 2000 ns + 2 x 80 ns + (1 + 48) x 8 / 100G = 3.92 -> 3 ns.
    // HPCC's ports (the pair's first flow: 10000; the flow list's 100),
    // not the UDP ports the record went out with.
    assert_eq!(text.lines().next().unwrap(), "0b000101 0b000001 10000 100 1 2000000000 4321 4163");
    let lines = parse_fct(&text, Path::new("fct.txt")).unwrap();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (lines[1].src(), lines[1].dst(), lines[1].start_ns, lines[1].fct_ns),
        (0, 2, 2_000_000_962, 9_000)
    );
    // h0 -> h2 via a 100G and a 400G hop: 4000 + 80 + 20 + 5240 x 8 / 100G (419.2).
    assert_eq!(lines[1].standalone_ns, 4000 + 80 + 20 + 419);
    let mut buf = Vec::new();
    write_pfc(&mut buf, &scn, &report).unwrap();
    let text = String::from_utf8(buf).unwrap();
    assert_eq!(text, "2000000001 3 1 2 1\n2000000005 0 0 1 0\n");
    let back = parse_pfc(&text, Path::new("pfc.txt")).unwrap();
    assert_eq!(
        back,
        vec![
            PfcLine { time_ns: 2_000_000_001, node: 3, is_switch: true, if_index: 2, pause: true },
            PfcLine { time_ns: 2_000_000_005, node: 0, is_switch: false, if_index: 1, pause: false },
        ]
    );
}

/// Each (source, destination) pair counts its own ports from 10000 in
/// flow-list order; the dport is the flow list's.
#[test]
fn sports_count_per_pair_in_list_order() {
    let topo = small_topology();
    let list = "5\n0 2 3 100 10 2\n1 2 3 100 10 2\n0 2 3 200 10 2.1\n2 0 3 100 10 2.2\n0 2 3 100 10 2.3\n";
    let flows = parse_flows(list, Path::new("f")).unwrap();
    let scn = scenario_from_parts(&topo, &flows, &small_config(""));
    assert_eq!(hpcc_sports(&scn), vec![10000, 10000, 10001, 10000, 10002]);
    assert_eq!(scn.flows.iter().map(|f| f.dport).collect::<Vec<_>>(), vec![100, 100, 200, 100, 100]);
}

/// Our ports for every flow of every baseline run are the ones the
/// artifact wrote in its `fct.txt` (the fat-tree has 51 flows that are a
/// pair's second, port 10001). Flows are found by (source, destination,
/// size) and a start within 1 ns (the artifact's start can be 1 ns
/// below ours: it converts the start seconds through a float).
#[test]
fn sports_match_every_baseline_flow() {
    let Some(base) = baseline_dir() else { return };
    let mut checked = 0;
    let mut second = 0;
    for (run, topo) in baseline_runs(&base) {
        let scn = load_run(&run, &topo).unwrap();
        let sports = hpcc_sports(&scn);
        for line in read_fct(&run.join("fct.txt")).unwrap() {
            let matching: Vec<usize> = (0..scn.flows.len())
                .filter(|&i| {
                    let f = &scn.flows[i];
                    (f.src, f.dst, f.size) == (line.src(), line.dst(), line.size)
                        && (f.start_ps / PS_PER_NS).abs_diff(line.start_ns) <= 1
                        && (sports[i], f.dport) == (line.sport, line.dport)
                })
                .collect();
            assert!(!matching.is_empty(), "{}: no flow with the ports of {line:?}", run.display());
            second += usize::from(line.sport > HPCC_FIRST_SPORT);
            checked += 1;
        }
    }
    assert_eq!(checked, 3201 + 2 + 8 + 64 + 64 + 1 + 9 + 9);
    assert_eq!(second, 51);
}

#[test]
fn malformed_output_files_are_errors() {
    let fct = |t: &str| parse_fct(t, Path::new("fct.txt"));
    assert!(matches!(fct("zz 0b000001 1 2 3 4 5 6\n"), Err(HpccError::Parse { line: 1, .. })));
    assert!(matches!(fct("\n0b000101 0b000001 1 2 3 4 5\n"), Err(HpccError::Parse { line: 2, .. })));
    let pfc = |t: &str| parse_pfc(t, Path::new("pfc.txt"));
    assert!(matches!(pfc("1 2 3 1 1\n"), Err(HpccError::Parse { line: 1, .. })));
    assert!(matches!(pfc("1 2 1 0 1\n"), Err(HpccError::Parse { line: 1, .. })));
    assert!(matches!(pfc("1 2 1 1 2\n"), Err(HpccError::Parse { line: 1, .. })));
    assert_eq!(pfc("").unwrap(), vec![]);
}
