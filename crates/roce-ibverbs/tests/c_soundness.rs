//! The library's memory-safety and error contracts seen from C:
//! `tests/c/soundness.c`, built against rdma-core's header and linked
//! against its libibverbs, run over this crate's library (preloaded, as
//! `roce exec` does) one scenario a process, on loopback. Where valgrind
//! is installed the scenarios that once touched freed memory run under
//! memcheck too, and any invalid access fails the test.
//!
//! cargo does not rebuild a cdylib for its own crate's integration tests
//! (only for a crate that depends on it: roce-cli, so `cargo test
//! --workspace` does): a library older than the crate's sources fails the
//! tests with the command to run (`cargo build -p roce-ibverbs`), rather
//! than testing old code.
//!
//! Without the header or a C compiler the tests say so and pass, except
//! under CI (`roce_test_support::in_ci`), where they fail; without
//! valgrind only the memcheck runs are skipped (and fail under CI too:
//! `.ci/run` installs it).

use std::io::Read;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use roce_test_support::in_ci;

mod support;
use support::library;

/// A scenario's time limit; under valgrind, ten times as long.
const LIMIT: Duration = Duration::from_secs(60);

fn skip(msg: &str) {
    assert!(!in_ci(), "{msg}: CI must run the C soundness tests");
    eprintln!("SKIPPED: {msg}");
}

/// `soundness.c`, built once for every test of this file; `None` (after a
/// notice) where there is no header or compiler.
fn program() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if !Path::new("/usr/include/infiniband/verbs.h").exists() {
                skip("missing <infiniband/verbs.h> (apt-get install libibverbs-dev)");
                return None;
            }
            let dir = std::env::temp_dir().join(format!("roce-ibverbs-soundness-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let exe = dir.join("soundness");
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/soundness.c");
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
            let built = match Command::new(&cc)
                .args(["-Wall", "-g"])
                .arg(&src)
                .arg("-o")
                .arg(&exe)
                .arg("-libverbs")
                .output()
            {
                Ok(o) => o,
                Err(e) => {
                    skip(&format!("no C compiler ({cc}: {e})"));
                    return None;
                }
            };
            assert!(
                built.status.success(),
                "soundness.c did not build:\n{}",
                String::from_utf8_lossy(&built.stderr)
            );
            Some(exe)
        })
        .as_deref()
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs one scenario over the library (under `valgrind` if given) and
/// returns its exit status's success and its output.
fn run(scenario: &str, valgrind: Option<&Path>) -> (bool, String) {
    let exe = program().expect("built");
    let mut cmd = match valgrind {
        Some(v) => {
            let mut c = Command::new(v);
            c.args(["-q", "--error-exitcode=99", "--"]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let mut child = cmd
        .arg(scenario)
        .env("ROCE_DEVICES", format!("roce0=127.0.0.1:{}", free_udp_port()))
        .env("LD_PRELOAD", library())
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let limit = if valgrind.is_some() { LIMIT * 10 } else { LIMIT };
    let deadline = Instant::now() + limit;
    // The pipes are drained after the exit: the program writes little.
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{scenario} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut out).unwrap();
    (status.success() && out.lines().any(|l| l == "ok"), format!("{status}\n{out}"))
}

fn scenario(name: &str) {
    if program().is_none() {
        return;
    }
    let (ok, out) = run(name, None);
    assert!(ok, "{name}: {out}");
}

/// The same scenario under memcheck: no invalid read or write, no use of
/// freed memory (valgrind exits 99 on any error it reports).
fn under_valgrind(name: &str) {
    if program().is_none() {
        return;
    }
    let Some(valgrind) = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("valgrind")).find(|p| p.is_file()))
    else {
        skip("missing valgrind (apt-get install valgrind)");
        return;
    };
    let (ok, out) = run(name, Some(&valgrind));
    assert!(
        ok && !out.contains("Invalid read") && !out.contains("Invalid write"),
        "{name} under valgrind: {out}"
    );
}

#[test]
fn destroying_a_cq_takes_its_queued_events() {
    scenario("cq-teardown");
}

#[test]
fn destroying_a_cq_takes_its_queued_events_memcheck() {
    under_valgrind("cq-teardown");
}

#[test]
fn async_events_reach_the_owning_context() {
    scenario("two-contexts");
}

#[test]
fn async_events_reach_the_owning_context_memcheck() {
    under_valgrind("two-contexts");
}

#[test]
fn a_chained_post_send_keeps_the_real_errno() {
    scenario("chain-errno");
}

#[test]
fn num_sge_is_bounded_before_anything_is_read() {
    scenario("sge-bound");
}
