use std::path::{Path, PathBuf};

use super::*;
use crate::simulate;

fn grid(text: &str) -> Result<Grid, SweepError> {
    Grid::parse(text, Path::new("grid.toml"), "grid", &PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

const INCAST_KMIN_X_SET: &str = r#"
[base]
builtin = "incast"

[[axis]]
key = "switch.ecn_rules.*.kmin"
name = "kmin"
values = ["100KB", "200KB", "400KB"]

[[axis]]
key = "nic.dcqcn_set"
values = ["paper", "hpcc"]
"#;

#[test]
fn points_are_every_combination_the_last_axis_fastest() {
    let g = grid(INCAST_KMIN_X_SET).unwrap();
    assert_eq!((g.name.as_str(), g.points()), ("grid", 6));
    let labels: Vec<Vec<String>> = (0..6).map(|i| g.labels(i).unwrap()).collect();
    assert_eq!(labels[0], ["100KB", "paper"]);
    assert_eq!(labels[1], ["100KB", "hpcc"]);
    assert_eq!(labels[5], ["400KB", "hpcc"]);
    assert!(g.values(6).is_none());
    assert!(matches!(g.point(6), Err(SweepError::Grid(_))));
}

#[test]
fn a_point_is_the_base_with_its_settings() {
    let g = grid(INCAST_KMIN_X_SET).unwrap();
    let base = crate::builtin::scenario("incast").unwrap();
    let p = g.point(3).unwrap();
    assert_eq!(p.values, ["200KB", "hpcc"]);
    assert!(p.scenario.switch.ecn.len() > 1, "every rule is set, not only one");
    for (rule, was) in p.scenario.switch.ecn.iter().zip(&base.switch.ecn) {
        assert_eq!((rule.kmin, rule.kmax, rule.rate_bps), (200_000, was.kmax, was.rate_bps));
    }
    assert_eq!(p.scenario.nic.dcqcn_set, "hpcc");
    assert_eq!(g.point(0).unwrap().scenario.nic.dcqcn_set, "paper");
    // Everything the axes do not touch is the base's.
    let mut same = p.scenario.clone();
    same.switch.ecn = base.switch.ecn.clone();
    assert_eq!(same, base);
    assert_eq!(p.payload, u64::from(base.nic.mtu));
}

#[test]
fn the_base_reads_back_unchanged() {
    for name in crate::builtin::NAMES {
        let text = format!("[base]\nbuiltin = \"{name}\"\n[[axis]]\nkey = \"seed\"\nvalues = [1]\n");
        let g = grid(&text).unwrap();
        let p = g.point(0).unwrap();
        let mut base = crate::builtin::scenario(name).unwrap();
        base.seed = 1;
        assert_eq!(p.scenario, base, "{name}");
    }
}

/// The HPCC fat-tree run written in the scenario format and read back is
/// the run: a sweep over it changes only what its axes say.
#[test]
fn an_hpcc_base_reads_back_unchanged() {
    let Some(dir) = crate::hpcc::tests::baseline_dir() else { return };
    let text = format!(
        "[base]\nhpcc_run = \"{0}/runs/fat_ws30_dcqcn\"\nhpcc_topology = \"{0}/topologies/fat320_hpcc.txt\"\n\
         max_flows = 50\n[[axis]]\nkey = \"nic.ack_req_every\"\nvalues = [1, 64]\n",
        dir.display()
    );
    let g = grid(&text).unwrap();
    let run =
        crate::hpcc::load_run_full(&dir.join("runs/fat_ws30_dcqcn"), &dir.join("topologies/fat320_hpcc.txt"))
            .unwrap();
    let mut base = run.scenario.clone();
    base.flows.truncate(50);
    let p = g.point(1).unwrap();
    assert_eq!(p.payload, u64::from(run.payload()));
    base.nic.ack_req_every = 64;
    assert_eq!(p.scenario, base);
}

#[test]
fn keys_that_address_nothing_are_named() {
    let with_axis = |key: &str, values: &str| {
        grid(&format!("[base]\nbuiltin = \"incast\"\n[[axis]]\nkey = \"{key}\"\nvalues = {values}\n"))
            .unwrap_err()
            .to_string()
    };
    let e = with_axis("nic.dcqcn_sett", "[\"paper\"]");
    assert!(e.contains("dcqcn_sett"), "{e}");
    let e = with_axis("switch.ecn_rules.9.kmin", "[\"1KB\"]");
    assert!(e.contains("no [9]"), "{e}");
    let e = with_axis("switch.ecn_rules.x.kmin", "[\"1KB\"]");
    assert!(e.contains("index it with a number"), "{e}");
    let e = with_axis("seed.x", "[1]");
    assert!(e.contains("seed is a integer"), "{e}");
    let e = with_axis("workload.load", "[0.5]");
    assert!(e.contains("no [workload]"), "{e}");
    let e = with_axis("nic..mtu", "[1024]");
    assert!(e.contains("empty segment"), "{e}");
    let e = with_axis("nic.mtu", "[]");
    assert!(e.contains("no values"), "{e}");
    let e = with_axis("nic.mtu", "[\"big\"]");
    assert!(e.contains("first value"), "{e}");
}

#[test]
fn bad_grids_are_refused() {
    let e = |t: &str| grid(t).unwrap_err().to_string();
    assert!(e("[base]\nbuiltin = \"nope\"\n").contains("no built-in scenario"));
    assert!(e("[base]\nbuiltin = \"incast\"\n").contains("no [[axis]]"));
    assert!(e("[base]\nbuiltin = \"incast\"\nscenario = \"x.toml\"\n").contains("exactly one"));
    assert!(e("[base]\nbuiltin = \"incast\"\nbogus = 1\n").contains("bogus"));
    assert!(e("[base]\nhpcc_run = \"r\"\n").contains("go together"));
    let two = "[base]\nbuiltin = \"incast\"\n[[axis]]\nkey = \"seed\"\nvalues = [1]\n[[axis]]\nkey = \"nic.mtu\"\nname = \"seed\"\nvalues = [1024]\n";
    assert!(e(two).contains("two axes"));
    let clash = "[base]\nbuiltin = \"incast\"\n[[axis]]\nkey = \"seed\"\nname = \"drops\"\nvalues = [1]\n";
    assert!(e(clash).contains("column"));
    let huge = format!(
        "[base]\nbuiltin = \"incast\"\n[[axis]]\nkey = \"seed\"\nvalues = [{0}]\n[[axis]]\nkey = \"nic.mtu\"\nvalues = [{0}]\n",
        (0..400).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
    );
    assert!(e(&huge).contains("more than"));
}

#[test]
fn a_point_the_scenario_rejects_says_which_and_why() {
    let g = grid(
        "[base]\nbuiltin = \"incast\"\n[[axis]]\nkey = \"switch.ecn_rules.*.kmin\"\nname = \"kmin\"\n\
         values = [\"100KB\", \"90MB\"]\n",
    )
    .unwrap();
    assert!(g.point(0).is_ok());
    let e = g.point(1).unwrap_err();
    assert!(matches!(e, SweepError::Point { index: 1, .. }), "{e}");
    let e = e.to_string();
    assert!(e.contains("kmin=90MB") && e.contains("kmin"), "{e}");
}

#[test]
fn a_workload_replaces_the_flows_and_its_load_can_be_swept() {
    let g = grid(
        "[base]\nbuiltin = \"incast\"\n[workload]\ncdf = \"tests/data/small-cdf.txt\"\nload = 0.3\n\
         duration = \"50us\"\n[[axis]]\nkey = \"workload.load\"\nvalues = [0.2, 0.8]\n",
    )
    .unwrap();
    let light = g.point(0).unwrap().scenario.flows;
    let heavy = g.point(1).unwrap().scenario.flows;
    assert!(!light.is_empty() && heavy.len() > 2 * light.len(), "{} {}", light.len(), heavy.len());
    assert_eq!(g.point(1).unwrap().scenario.flows, heavy, "deterministic");
    let bad = grid(
        "[base]\nbuiltin = \"incast\"\n[workload]\ncdf = \"tests/data/small-cdf.txt\"\nload = 0.3\n\
         duration = \"50us\"\n[[axis]]\nkey = \"workload.load\"\nvalues = [2.0]\n",
    )
    .unwrap();
    assert!(bad.point(0).unwrap_err().to_string().contains("load 2"));
}

#[test]
fn a_row_is_the_same_bytes_every_run_and_has_every_column() {
    let g = grid(INCAST_KMIN_X_SET).unwrap();
    let p = g.point(2).unwrap();
    let row = |p: &Point| figures(&p.scenario, &simulate(&p.scenario, None).unwrap(), p.payload);
    let a = row(&p);
    assert_eq!(a, row(&p));
    assert_eq!(a.len(), FIGURES.len());
    assert_eq!(header(&g).len(), 1 + g.axes.len() + FIGURES.len());
    let col = |name: &str| &a[FIGURES.iter().position(|f| *f == name).unwrap()];
    assert_eq!(col("ending"), "completed");
    assert_eq!(
        (col("flows"), col("finished"), col("drops")),
        (&"7".to_string(), &"7".to_string(), &"0".to_string())
    );
    assert!(col("ecn_marks").parse::<u64>().unwrap() > 0);
    // 1 MB flows: the large class only.
    assert!(col("small_p50").is_empty() && col("medium_p99").is_empty());
    let large: Vec<f64> =
        ["large_p50", "large_p95", "large_p99"].iter().map(|c| col(c).parse().unwrap()).collect();
    assert!(large[0] >= 1.0 && large[0] <= large[1] && large[1] <= large[2], "{large:?}");
    assert!(col("error").is_empty());
    let u = unrun(Status::Invalid, "kmin > kmax\nsecond line");
    assert_eq!((u[0].as_str(), u.len()), ("invalid", FIGURES.len()));
    assert_eq!(u[FIGURES.len() - 1], "kmin > kmax second line");
}

#[test]
fn an_axis_of_setting_tables_makes_them_together() {
    let g = grid(
        r#"
[base]
builtin = "incast"
[[axis]]
name = "cc"
labels = ["paper", "hpcc-artifact"]
values = [ { "nic.dcqcn_set" = "paper", nic = { dcqcn_params = [] } },
           { nic = { dcqcn_set = "hpcc", dcqcn_params = ["g=1/256"] }, "switch.ecn_rules.0.kmin" = "100KB" } ]
[[axis]]
key = "nic.mtu"
values = [1024, 4096]
"#,
    )
    .unwrap();
    assert_eq!(g.labels(2).unwrap(), ["hpcc-artifact", "1024"]);
    let p = g.point(3).unwrap().scenario;
    assert_eq!(
        (p.nic.dcqcn_set.as_str(), p.nic.dcqcn_params.clone(), p.nic.mtu),
        ("hpcc", vec!["g=1/256".to_string()], 4096)
    );
    assert_eq!(p.switch.ecn[0].kmin, 100_000);
    // Merged, not replaced: the rest of [nic] is the base's.
    let base = crate::builtin::scenario("incast").unwrap();
    assert_eq!((p.nic.ack_priority, p.nic.ack_req_every), (base.nic.ack_priority, base.nic.ack_req_every));
    let p = g.point(0).unwrap().scenario;
    assert_eq!((p.nic.dcqcn_set.as_str(), p.nic.dcqcn_params.len()), ("paper", 0));
    assert_eq!(p.switch.ecn, base.switch.ecn);

    let e = |t: &str| grid(t).unwrap_err().to_string();
    assert!(e("[base]\nbuiltin = \"incast\"\n[[axis]]\nvalues = [{ seed = 1 }]\n").contains("needs a name"));
    assert!(e("[base]\nbuiltin = \"incast\"\n[[axis]]\nname = \"x\"\nvalues = [1]\n")
        .contains("table of settings"));
    assert!(e("[base]\nbuiltin = \"incast\"\n[[axis]]\nkey = \"seed\"\nlabels = [\"a\"]\nvalues = [1, 2]\n")
        .contains("1 labels for 2 values"));
}

/// The ablation grid's points are the base with each `hpcc::compat`
/// choice alone, and `ns3_compat` with all: the grid and the preset
/// cannot drift apart.
#[test]
fn the_ns3_ablation_grid_is_the_presets_choices() {
    if crate::hpcc::tests::baseline_dir().is_none() {
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sweeps/fat-tree-ns3-ablation.toml");
    let g = Grid::from_path(&path).unwrap();
    let base = g.point(0).unwrap().scenario;
    let mut want = Vec::new();
    for c in crate::hpcc::Choice::ALL {
        let mut s = base.clone();
        c.apply(&mut s);
        want.push((c.name().to_string(), s));
    }
    let mut all = base.clone();
    crate::hpcc::ns3_compat(&mut all);
    want.push(("ns3-compat".into(), all));
    assert_eq!(g.points(), 1 + want.len());
    for (i, (name, scn)) in want.iter().enumerate() {
        let p = g.point(i + 1).unwrap();
        assert_eq!(&p.values[0], name);
        assert_eq!(&p.scenario, scn, "{name}");
        assert_ne!(&p.scenario, &base, "{name} changes something");
    }
}
