//! `roce fabric plan` as a user runs it: the two-switch example planned
//! and checked (exit 0), the same with a third of the headroom failing its
//! check with drops counted (exit 1), and bad input refused with a clear
//! message (exit 2), never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../roce-fabric/topologies/two-switch.toml")
}

fn roce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce")).args(args).output().expect("runs roce")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The example with a 2 MiB buffer and a small incast (seconds in a debug
/// build): the plan holds; at 0.3 of the headroom the trunk's cable no
/// longer fits and the check fails.
#[test]
fn the_example_holds_and_a_short_headroom_fails() {
    let ex = example();
    let dir = std::env::temp_dir().join(format!("roce-fabric-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("plan.toml");
    let base = [ex.to_str().unwrap(), "--buffer", "2MiB", "--check", "--incast-size", "256KiB"];
    let o = roce(&[&["fabric", "plan"][..], &base, &["--out", out.to_str().unwrap()]].concat());
    let (stdout, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("55420"), "the 100G host ports' headroom: {stdout}");
    assert!(stdout.contains("the plan HOLDS"), "{stdout}");
    assert!(stdout.contains("drops 0 (0 for want of buffer)"), "{stdout}");
    let sections = std::fs::read_to_string(&out).unwrap();
    assert!(sections.contains("[[switch.headroom_extra]]") && sections.contains("[nic]"), "{sections}");
    // The written sections make a scenario with the example's topology.
    let topo = std::fs::read_to_string(&ex).unwrap();
    let scn = dir.join("planned.toml");
    std::fs::write(&scn, format!("{topo}\n{sections}")).unwrap();
    let o = roce(&["fabric", "plan", scn.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));

    let o = roce(&[&["fabric", "plan"][..], &base, &["--headroom-scale", "0.3"]].concat());
    let (stdout, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("DOES NOT HOLD"), "{stdout}");
    assert!(
        stdout.contains("for want of buffer") && stdout.contains("s1 port 9 (from s2) refused"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_is_refused_clearly() {
    let ex = example();
    let ex = ex.to_str().unwrap();
    let cases: [(&[&str], &str); 7] = [
        (&[ex, "--mtu", "1500"], "MTU 1500: expected an IB path MTU"),
        (&[ex, "--buffer", "lots"], "--buffer"),
        (&[ex, "--buffer", "300KB"], "no shared buffer is left"),
        (&[ex, "--lossless", "9"], "--lossless 9: priorities are 0..=7"),
        (&[ex, "--headroom-scale=0"], "headroom scale 0: expected a finite number above 0"),
        (&[ex, "--cable", "far"], "--cable \"far\""),
        (&["/nonexistent/topology.txt"], "/nonexistent/topology.txt"),
    ];
    for (args, expected) in cases {
        let o = roce(&[&["fabric", "plan"][..], args].concat());
        let (stdout, stderr) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stdout}\n{stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // A malformed HPCC topology names its file and line.
    let dir = std::env::temp_dir().join(format!("roce-fabric-plan-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("topo.txt");
    std::fs::write(&bad, "3 1 2\n0\n0 1 100Gbps 1us 0\n0 x 100Gbps 1us 0\n").unwrap();
    let o = roce(&["fabric", "plan", bad.to_str().unwrap()]);
    let (_, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr.contains("topo.txt:4"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
