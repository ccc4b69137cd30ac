//! `roce coll` as a user runs it: ranks as real processes on loopback,
//! every operation x type x reduction checked (`#wrong` = 0 on
//! integer-valued data), the launchers (`--np`, mpirun, torchrun's
//! variables, explicit flags), and the failures: a rank killed, a rank
//! stopped, ranks that disagree, all ending in an error that names the
//! rank, never a hang.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Launcher variables of the environment the tests run in must not leak
/// into the ranks.
const LAUNCHER_VARS: [&str; 14] = [
    "ROCE_COLL_RANK",
    "ROCE_COLL_WORLD",
    "ROCE_COLL_RENDEZVOUS",
    "RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_STEP_NODELIST",
    "PMIX_NAMESPACE",
];

fn roce() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_roce"));
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    c
}

/// Runs to the end, killed (and failed) after `limit`: a hang is a
/// failure. The command runs in its own process group, so that what it
/// started (ranks, mpirun's children) goes with it.
fn run_bounded(mut c: Command, limit: Duration) -> Output {
    use std::os::unix::process::CommandExt;
    let mut child =
        c.process_group(0).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("roce starts");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
            let _ = child.kill();
            let o = child.wait_with_output().expect("output");
            panic!(
                "still running after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn coll(op: &str, args: &[&str]) -> Output {
    let mut c = roce();
    c.arg("coll").arg(op).args(args);
    run_bounded(c, Duration::from_secs(240))
}

fn ok(o: &Output, what: &str) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{what}: exit {:?}\nstdout:\n{out}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// The result rows of an nccl-tests table.
fn rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// Every row has 13 fields, both #wrong are 0, and the footer says OK.
fn assert_clean(out: &str, what: &str, want_rows: usize) {
    let r = rows(out);
    assert_eq!(r.len(), want_rows, "{what}: rows\n{out}");
    for row in &r {
        assert_eq!(row.len(), 13, "{what}: {row:?}");
        assert_eq!((row[8].as_str(), row[12].as_str()), ("0", "0"), "{what}: {row:?}");
    }
    assert!(out.contains("# Out of bounds values : 0 OK"), "{what}:\n{out}");
    assert!(out.contains("# Avg bus bandwidth    : "), "{what}:\n{out}");
}

const OPS: [&str; 6] = ["all-reduce", "reduce-scatter", "all-gather", "broadcast", "reduce", "all-to-all"];

/// Every operation x type x reduction on 2, 3, 4 and 8 ranks, at sizes of
/// 0 bytes and counts no rank count divides, in and out of place; the
/// root of broadcast and reduce the last rank.
#[test]
fn every_op_type_and_reduction_is_right_on_2_3_4_and_8_ranks() {
    for np in [2usize, 3, 4, 8] {
        for op in OPS {
            let root = (np - 1).to_string();
            let nps = np.to_string();
            let args = [
                "--np",
                &nps,
                "-b",
                "0",
                "-e",
                "1000",
                "-i",
                "333",
                "-d",
                "all",
                "-o",
                "all",
                "-n",
                "2",
                "-w",
                "0",
                "-r",
                &root,
                "--timeout",
                "20",
            ];
            let o = coll(op, &args);
            let what = format!("{op} on {np} ranks");
            let out = ok(&o, &what);
            // 4 sizes x 7 types x (5 reductions, or 1)
            let reductions = if matches!(op, "all-gather" | "broadcast" | "all-to-all") { 1 } else { 5 };
            assert_clean(&out, &what, 4 * 7 * reductions);
        }
    }
}

/// Larger buffers, several messages per slot and per step: 2 and 4 ranks,
/// every algorithm that runs all-reduce.
#[test]
fn large_all_reduces_are_right_with_every_algorithm() {
    for np in ["2", "4"] {
        for algo in ["ring", "rabenseifner", "recursive-doubling", "tree"] {
            let o = coll(
                "all-reduce",
                &["--np", np, "-b", "3M", "-e", "3M", "-n", "2", "-w", "1", "--algo", algo, "-d", "int32"],
            );
            let out = ok(&o, &format!("{algo} on {np}"));
            assert_clean(&out, &format!("{algo} on {np}"), 1);
        }
    }
    let o = coll("reduce-scatter", &["--np", "3", "-b", "5M", "-e", "5M", "-n", "2", "-d", "bfloat16"]);
    assert_clean(&ok(&o, "reduce-scatter 5M"), "reduce-scatter 5M", 1);
    let o = coll("all-to-all", &["--np", "4", "-b", "4M", "-e", "4M", "-n", "2", "-d", "uint8"]);
    assert_clean(&ok(&o, "all-to-all 4M"), "all-to-all 4M", 1);
}

/// The nccl-tests header and the per-iteration columns (-I 1).
#[test]
fn header_and_per_iteration_columns() {
    let o = coll("all-reduce", &["--np", "2", "-b", "8", "-e", "64", "-f", "8", "-I", "1", "-n", "5"]);
    let out = ok(&o, "-I 1");
    assert!(
        out.starts_with(
            "# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 8(factor) warmup iters: 1 iters: 5 "
        ),
        "{out}"
    );
    assert!(out.contains("#  Rank  0 Group  0 Pid "), "{out}");
    assert!(out.contains("#  Rank  1 Group  0 Pid "), "{out}");
    assert!(out.contains("i_min") && out.contains("i_cv%"), "{out}");
    let r = rows(&out);
    assert_eq!(r.len(), 2, "{out}");
    for row in r {
        assert_eq!(row.len(), 21, "{row:?}");
        assert_eq!(row[2], "float");
        assert_eq!(row[4], "-1");
    }
    assert!(out.ends_with("# Collective test concluded: all_reduce_perf\n"), "{out}");
}

/// nccl-tests' -m (calls per iteration) and -z 1..3 (blocking modes): the
/// header says so, the rows are right.
#[test]
fn aggregated_iterations_and_blocking_modes() {
    for (z, line) in [
        ("1", "# Blocking Enabled: wait and barrier after each inner iteration (-m) \n"),
        ("2", "# Blocking Enabled: wait after each inner iteration (-m), no barrier \n"),
        (
            "3",
            "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n",
        ),
    ] {
        let o = coll(
            "all-reduce",
            &["--np", "2", "-b", "1K", "-e", "64K", "-f", "8", "-n", "3", "-m", "4", "-z", z],
        );
        let out = ok(&o, "-m 4");
        assert!(out.contains("iters: 3 agg iters: 4 validation: 1"), "{out}");
        assert!(out.contains(line), "-z {z}: {out}");
        assert_clean(&out, "-m 4", 3);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Ranks started by hand, one process each, with `vars(rank)`.
fn ranks(n: usize, args: &[&str], vars: &dyn Fn(usize) -> Vec<(String, String)>) -> Vec<Child> {
    (0..n)
        .map(|r| {
            let mut c = roce();
            c.arg("coll").args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
            for (k, v) in vars(r) {
                c.env(k, v);
            }
            c.spawn().expect("rank starts")
        })
        .collect()
}

fn explicit(port: u16, n: usize) -> impl Fn(usize) -> Vec<(String, String)> {
    move |r| {
        vec![
            ("ROCE_COLL_RANK".into(), r.to_string()),
            ("ROCE_COLL_WORLD".into(), n.to_string()),
            ("ROCE_COLL_RENDEZVOUS".into(), format!("127.0.0.1:{port}")),
        ]
    }
}

/// Waits for every child, each bounded by `limit`; returns (status ok, stdout, stderr).
fn collect(children: Vec<Child>, limit: Duration) -> Vec<(bool, String, String)> {
    let start = Instant::now();
    let mut out = Vec::new();
    for mut c in children {
        loop {
            if c.try_wait().unwrap().is_some() {
                break;
            }
            if start.elapsed() > limit {
                let _ = c.kill();
                let o = c.wait_with_output().unwrap();
                panic!("a rank still ran after {limit:?}: {}", String::from_utf8_lossy(&o.stderr));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let o = c.wait_with_output().unwrap();
        out.push((
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ));
    }
    out
}

/// The torchrun variables set by hand (RANK, WORLD_SIZE, MASTER_ADDR,
/// MASTER_PORT; the store on MASTER_PORT + 1), and the explicit flags.
#[test]
fn torchrun_variables_and_explicit_flags_launch_ranks() {
    let port = free_port();
    let master = (port - 1).to_string();
    let kids = ranks(3, &["all-reduce", "-b", "1K", "-e", "1M", "-f", "32", "-n", "3"], &|r| {
        vec![
            ("RANK".into(), r.to_string()),
            ("WORLD_SIZE".into(), "3".into()),
            ("MASTER_ADDR".into(), "127.0.0.1".into()),
            ("MASTER_PORT".into(), master.clone()),
        ]
    });
    let res = collect(kids, Duration::from_secs(120));
    for (r, (okay, _, err)) in res.iter().enumerate() {
        assert!(okay, "rank {r}: {err}");
    }
    assert!(res[0].1.contains("from torchrun"), "{}", res[0].1);
    assert_clean(&res[0].1, "torchrun", 3);
    assert!(res[1].1.is_empty() && res[2].1.is_empty(), "only rank 0 prints");

    let port = free_port().to_string();
    let kids: Vec<Child> = (0..2)
        .map(|r| {
            let mut c = roce();
            c.args(["coll", "broadcast", "-b", "64K", "-e", "64K", "-r", "1", "--rank", &r.to_string()])
                .args(["--world", "2", "--rendezvous", &format!("127.0.0.1:{port}")])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    let res = collect(kids, Duration::from_secs(120));
    assert!(res.iter().all(|r| r.0), "{:?}", res.iter().map(|r| &r.2).collect::<Vec<_>>());
    assert_clean(&res[0].1, "explicit", 1);
}

/// `mpirun -np 4 roce coll all-reduce`, with no flag telling roce where
/// it runs (mpirun's own flags only: root in a container, 2 cores for 4
/// ranks; sizes and iterations cut down for a debug build).
#[test]
fn under_mpirun_with_no_extra_flags() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let found = Command::new("mpirun").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(!ci, "mpirun (openmpi-bin) is missing under CI=true: .ci/run installs it");
        eprintln!("skipped: mpirun not found (apt-get install openmpi-bin)");
        return;
    }
    let mut c = Command::new("mpirun");
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        "4",
        env!("CARGO_BIN_EXE_roce"),
        "coll",
        "all-reduce",
    ]);
    c.args(["-b", "1M", "-e", "1M", "-n", "5"]);
    let o = run_bounded(c, Duration::from_secs(240));
    let out = ok(&o, "mpirun -np 4");
    assert!(out.contains("from mpirun"), "{out}");
    assert!(out.contains("#  Rank  3 Group  0"), "{out}");
    assert_clean(&out, "mpirun", 1);
}

/// Waits until rank 0 printed its first result row (the ranks are in the
/// timed loops), returning what it printed so far.
fn wait_running(rank0: &mut Child) -> String {
    let stdout = rank0.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = String::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        seen += &l;
        seen += "\n";
        if !l.starts_with('#') {
            break;
        }
    }
    // Keep draining so rank 0 never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    seen
}

/// Long enough that the ranks are inside the sweep when one is disturbed.
const LONG: [&str; 10] = ["all-reduce", "-b", "64K", "-e", "1G", "-f", "2", "-n", "200", "--timeout"];

/// A rank killed in the middle: every other rank exits non-zero within
/// the timeout, naming it.
#[test]
fn a_killed_rank_is_named_by_the_others() {
    let port = free_port();
    let args: Vec<&str> = LONG.iter().copied().chain(["4"]).collect();
    let mut kids = ranks(4, &args, &explicit(port, 4));
    let seen = wait_running(&mut kids[0]);
    assert!(seen.contains("all_reduce") || seen.contains("float"), "{seen}");
    let t = Instant::now();
    kids[2].kill().unwrap();
    let res = collect(kids, Duration::from_secs(30));
    let took = t.elapsed();
    for (r, (okay, _, err)) in res.iter().enumerate() {
        if r == 2 {
            continue;
        }
        assert!(!okay, "rank {r} succeeded");
        assert!(err.contains("rank 2"), "rank {r} does not name rank 2: {err}");
    }
    assert!(took < Duration::from_secs(30), "{took:?}");
}

/// A rank stopped (SIGSTOP): the others exit non-zero within the
/// timeout, naming it.
#[test]
fn a_stopped_rank_is_named_by_the_others() {
    let port = free_port();
    let args: Vec<&str> = LONG.iter().copied().chain(["4"]).collect();
    let mut kids = ranks(3, &args, &explicit(port, 3));
    wait_running(&mut kids[0]);
    let pid = kids[1].id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let mut stopped = kids.remove(1);
    let res = collect(kids, Duration::from_secs(30));
    let _ = stopped.kill();
    let _ = stopped.wait();
    for (okay, _, err) in &res {
        assert!(!okay);
        assert!(err.contains("rank 1"), "does not name rank 1: {err}");
    }
}

/// Ranks that disagree on the call are refused with an error naming the
/// difference.
#[test]
fn ranks_that_disagree_are_refused() {
    let port = free_port();
    let kids: Vec<Child> = (0..2)
        .map(|r| {
            let mut c = roce();
            let dt = if r == 0 { "float" } else { "int32" };
            c.args(["coll", "all-reduce", "-b", "1K", "-e", "1K", "-d", dt, "--timeout", "5"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in explicit(port, 2)(r) {
                c.env(k, v);
            }
            c.spawn().unwrap()
        })
        .collect();
    let res = collect(kids, Duration::from_secs(30));
    for (okay, _, err) in &res {
        assert!(!okay);
        assert!(err.contains("runs a different test") && err.contains("-d "), "{err}");
    }
}

/// Bad arguments: a clear error and exit status 2, no rank started.
#[test]
fn bad_arguments_are_refused() {
    for args in [
        vec!["all-reduce", "-b", "1M", "-e", "1K"],
        vec!["all-reduce", "-d", "complex"],
        vec!["all-gather", "--algo", "tree"],
        vec!["all-reduce", "--qps-per-peer", "0"],
        vec!["all-reduce", "--delay", "x"],
        vec!["all-reduce", "-z", "4"],
        vec!["all-reduce", "-m", "0"],
        vec!["reduce", "--np", "2", "-r", "5", "-b", "8", "-e", "8"],
    ] {
        let mut c = roce();
        c.arg("coll").args(&args);
        let o = run_bounded(c, Duration::from_secs(60));
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(!o.stderr.is_empty(), "{args:?}: no message");
    }
}
