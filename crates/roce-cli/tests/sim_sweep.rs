//! `roce sim sweep` as a user runs it: the 24-point incast sweep and a
//! shortened fat-tree sweep run here with `--jobs 2` and as a job array on
//! a real single-node Slurm (started by the test), giving byte-identical
//! tables; a plot; an incomplete or foreign set of rows refused by
//! `--collect`; bad grids and arguments refused with a clear message.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use roce_test_support::slurm::Cluster;

fn roce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce"))
}

fn run(cmd: &mut Command) -> (Option<i32>, String, String) {
    let o: Output = cmd.output().expect("runs roce");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("roce-sweep-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn incast_grid() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../roce-fabric/sweeps/incast-ecn.toml")
}

/// The fat-tree sweep's grid with the run cut to its first 60 flows and
/// 2 x 1 x 3 points (the full one is minutes of CPU per point in a debug
/// build); `None` without the baseline beside the repository.
fn small_fat_tree_grid(dir: &Path) -> Option<PathBuf> {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("../roce-fabric/sweeps/fat-tree-ecn.toml");
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fabric-sim-baseline");
    if !base.join("runs/fat_ws30_dcqcn").is_dir() {
        assert!(!roce_test_support::in_ci(), "no HPCC baseline at {}", base.display());
        eprintln!("skipped the fat-tree sweep: no baseline at {}", base.display());
        return None;
    }
    let text = std::fs::read_to_string(&full).unwrap();
    let base = base.canonicalize().unwrap();
    let text = text
        .replace("../../../../shared/fabric-sim-baseline", base.to_str().unwrap())
        .replace("[base]\n", "[base]\nmax_flows = 60\n")
        .replace(r#"values = ["100KB", "200KB", "400KB", "800KB"]"#, r#"values = ["100KB", "800KB"]"#)
        .replace(r#"values = ["1600KB", "3200KB"]"#, r#"values = ["1600KB"]"#);
    let path = dir.join("fat-small.toml");
    std::fs::write(&path, text).unwrap();
    Some(path)
}

fn table(out: &Path) -> String {
    std::fs::read_to_string(out.join("sweep.csv")).unwrap()
}

/// The sweep here, `--jobs 2`: every point has its row and the table its
/// header, the rows in point order.
fn sweep_here(grid: &Path, out: &Path, extra: &[&str]) -> String {
    let (code, stdout, stderr) =
        run(roce().args(["sim", "sweep"]).arg(grid).arg("--out").arg(out).args(["--jobs", "2"]).args(extra));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    table(out)
}

#[test]
fn a_sweep_here_and_on_slurm_give_the_same_table() {
    let dir = tmp("slurm");
    let here = sweep_here(&incast_grid(), &dir.join("here"), &["--plot", "slowdown_p99"]);
    let lines: Vec<&str> = here.lines().collect();
    assert_eq!(lines.len(), 25, "a header and 24 points:\n{here}");
    assert!(lines[0].starts_with("point,kmin,kmax,dcqcn,ending,"), "{}", lines[0]);
    assert!(lines[24].starts_with("23,400KB,1600KB,hpcc,completed,7,7,0,"), "{}", lines[24]);
    // The settings reach the run: the DCQCN sets and thresholds differ in
    // what they mark.
    let marks: std::collections::BTreeSet<&str> =
        lines[1..].iter().map(|l| l.split(',').nth(11).unwrap()).collect();
    assert!(marks.len() > 12, "ECN marks per point: {marks:?}");
    let svg = std::fs::read_to_string(dir.join("here/sweep-slowdown_p99.svg")).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("kmax=1600KB, dcqcn=nvidia"),
        "{}",
        &svg[..svg.len().min(400)]
    );
    // Run again, a point's row is the same bytes.
    assert_eq!(sweep_here(&incast_grid(), &dir.join("again"), &[]), here);
    let fat = small_fat_tree_grid(&dir);
    let fat_here = fat.as_ref().map(|g| sweep_here(g, &dir.join("fat-here"), &[]));
    if let Some(t) = &fat_here {
        assert_eq!(t.lines().count(), 7, "{t}");
        assert!(t.lines().skip(1).all(|l| l.contains(",completed,60,60,")), "{t}");
    }

    let cluster = match Cluster::start(&dir.join("cluster")) {
        Ok(c) => c,
        Err(why) => {
            assert!(!roce_test_support::in_ci(), "Slurm could not start: {why}");
            eprintln!("skipped the Slurm half: {why}");
            return;
        }
    };
    let (k, v) = cluster.env();
    for (grid, out, want) in [
        (incast_grid(), dir.join("slurm"), Some(&here)),
        (fat.unwrap_or_default(), dir.join("fat-slurm"), fat_here.as_ref()),
    ] {
        let Some(want) = want else { continue };
        let (code, stdout, stderr) = run(roce()
            .env(k, v)
            .args(["sim", "sweep"])
            .arg(&grid)
            .arg("--out")
            .arg(&out)
            .args(["--slurm", "--wait"]));
        assert_eq!(code, Some(0), "{stdout}\n{stderr}\n{}", cluster.logs());
        assert!(stdout.contains("submitted") && stdout.contains("as Slurm job"), "{stdout}");
        assert_eq!(&table(&out), want, "the Slurm table differs from the local one");
        assert!(std::fs::read_dir(out.join("slurm")).unwrap().count() > 0, "the tasks' logs");
    }
    drop(cluster);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn collect_names_the_points_without_a_good_row() {
    let dir = tmp("collect");
    let out = dir.join("out");
    let full = sweep_here(&incast_grid(), &out, &[]);
    let collect =
        || run(roce().args(["sim", "sweep"]).arg(incast_grid()).arg("--out").arg(&out).arg("--collect"));
    let (code, _, stderr) = collect();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(table(&out), full);

    std::fs::remove_file(out.join("rows/000007.csv")).unwrap();
    let (code, _, stderr) = collect();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("1 of 24 points have no row (points 7;"), "{stderr}");

    // One point run alone puts its row back.
    let (code, stdout, stderr) =
        run(roce().args(["sim", "sweep"]).arg(incast_grid()).arg("--out").arg(&out).args(["--point", "7"]));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("point 7 (kmin=100KB, kmax=800KB, dcqcn=nvidia): completed"), "{stdout}");
    assert_eq!(collect().0, Some(0));
    assert_eq!(table(&out), full);

    // A row that another point wrote is not this point's.
    std::fs::copy(out.join("rows/000003.csv"), out.join("rows/000004.csv")).unwrap();
    let (code, _, stderr) = collect();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("000004.csv: it is point 3"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn points_the_scenario_rejects_fail_first_or_get_a_row() {
    let dir = tmp("invalid");
    let grid = |skip: bool| {
        let path = dir.join(format!("grid-{skip}.toml"));
        std::fs::write(
            &path,
            format!(
                "skip_invalid = {skip}\n[base]\nbuiltin = \"incast\"\n[[axis]]\nkey = \"switch.ecn_rules.*.kmin\"\n\
                 name = \"kmin\"\nvalues = [\"100KB\", \"90MB\"]\n"
            ),
        )
        .unwrap();
        path
    };
    let (code, stdout, stderr) =
        run(roce().args(["sim", "sweep"]).arg(grid(false)).arg("--out").arg(dir.join("a")));
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("point 1 (kmin=90MB)") && stderr.contains("skip_invalid"), "{stderr}");
    assert!(!dir.join("a/rows").exists(), "nothing ran");

    let t = sweep_here(&grid(true), &dir.join("b"), &[]);
    let rows: Vec<&str> = t.lines().collect();
    assert!(rows[1].starts_with("0,100KB,completed,"), "{t}");
    assert!(rows[2].starts_with("1,90MB,invalid,,") && rows[2].contains("kmin"), "{t}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_grids_and_arguments_are_refused_clearly() {
    let dir = tmp("bad");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (vec![dir.join("nope.toml").into()], "cannot read"),
        (
            vec![write(
                "typo.toml",
                "[base]\nbuiltin = \"incast\"\n[[axis]]\nkey = \"nic.mtuu\"\nvalues = [1024]\n",
            )
            .into()],
            "mtuu",
        ),
        (vec![write("syntax.toml", "[base\n").into()], "syntax.toml"),
        (vec![incast_grid().into(), "--point".into(), "24".into()], "no point 24: the grid has 24"),
        (vec![incast_grid().into(), "--collect".into(), "--plot".into(), "nope".into()], "not a figure"),
        (
            vec![
                incast_grid().into(),
                "--collect".into(),
                "--plot".into(),
                "drops".into(),
                "--x".into(),
                "y".into(),
            ],
            "not an axis",
        ),
        (vec![incast_grid().into(), "--jobs".into(), "0".into()], "--jobs"),
        (vec![incast_grid().into(), "--wait".into()], "--slurm"),
    ];
    for (args, want) in cases {
        let (code, stdout, stderr) =
            run(roce().args(["sim", "sweep"]).args(&args).arg("--out").arg(dir.join("out")));
        assert_eq!(code, Some(2), "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(want), "{args:?}: wanted {want:?} in {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // --collect where nothing ran: every point is missing.
    let (code, _, stderr) = run(roce()
        .args(["sim", "sweep"])
        .arg(incast_grid())
        .arg("--out")
        .arg(dir.join("empty"))
        .arg("--collect"));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("24 of 24 points have no row"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
