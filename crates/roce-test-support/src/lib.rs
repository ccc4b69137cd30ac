//! What the workspace's tests share: whether they run under CI, where the
//! external pcap oracle (`../shared/tools/roce-pcap-check`) is, and where
//! the Soft-RoCE lab (`../shared/tools/rxe-lab`) is.
//!
//! The oracle rule is the same everywhere: where the oracle or what it needs
//! (python3, scapy, and under CI tshark) is missing, a test skips with a
//! notice on stderr, except under CI, where that is a failure.

pub mod lab;
pub mod module_graph;
pub mod slurm;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (this crate sits in `crates/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn modified(p: &Path) -> std::time::SystemTime {
    std::fs::metadata(p).and_then(|m| m.modified()).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The newest modification among `p` and the files under it.
fn newest(p: &Path) -> std::time::SystemTime {
    let mut t = modified(p);
    if p.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            t = t.max(newest(&e.unwrap().path()));
        }
    }
    t
}

/// `name`, a cdylib of workspace crate `krate`, as cargo built it beside
/// the running test, checked to be no older than that crate's sources:
/// cargo does not rebuild a crate's cdylib for its own integration tests
/// (only for a crate that depends on it), so an old library fails the
/// test with the command to run, rather than testing old code.
///
/// # Panics
/// When the library is missing or older than the sources.
pub fn built_cdylib(name: &str, krate: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let lib = exe.parent().expect("the test's directory").join(name);
    let dir = repo_root().join("crates").join(krate);
    let sources = ["src", "build.rs", "symbols.txt", "Cargo.toml"]
        .iter()
        .map(|f| dir.join(f))
        .filter(|p| p.exists())
        .map(|p| newest(&p))
        .max();
    assert!(
        lib.is_file() && Some(modified(&lib)) >= sources,
        "{} is missing or older than {krate}'s sources: run `cargo build -p {krate}` first",
        lib.display()
    );
    lib
}

/// Whether `CI` is set to something other than empty, `0` or `false`.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
}

fn runs(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd).args(args).output().is_ok_and(|o| o.status.success())
}

/// The oracle script (`ROCE_PCAP_CHECK`, else the shared tools beside the
/// repository), or `None` after a skip notice when it cannot run here.
///
/// # Panics
/// Under CI, when the oracle cannot run.
pub fn pcap_oracle() -> Option<PathBuf> {
    let path = std::env::var_os("ROCE_PCAP_CHECK")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/tools/roce-pcap-check"));
    let mut missing = Vec::new();
    if !path.is_file() {
        missing.push(format!("the oracle {}", path.display()));
    }
    if !runs("python3", &["--version"]) {
        missing.push("python3".to_string());
    } else if !runs("python3", &["-c", "import scapy"]) {
        missing.push("scapy (pip install scapy==2.8.0)".to_string());
    }
    let tshark = runs("tshark", &["--version"]);
    if !tshark && in_ci() {
        missing.push("tshark (apt-get install tshark)".to_string());
    }
    if !missing.is_empty() {
        let msg = format!("roce-pcap-check oracle unavailable: missing {}", missing.join(", "));
        assert!(!in_ci(), "{msg} (CI is set: the oracle tests must run)");
        // straight to stderr, past the test harness's capture, so the skip shows
        let _ =
            writeln!(std::io::stderr(), "SKIPPED: {msg}; set up ../shared/tools and scapy to run this test");
        return None;
    }
    if !tshark {
        let _ = writeln!(
            std::io::stderr(),
            "note: tshark not found; the oracle runs without its tshark comparison"
        );
    }
    Some(path)
}

/// The `rxe-lab` tool (`ROCE_RXE_LAB`, else the shared tools beside the
/// repository), if it and what it needs are here: root (it makes a network
/// namespace and a tap device) and the tool itself. `None` after a notice
/// on stderr saying why.
///
/// # Panics
/// Under CI, when the tool is missing (root is the only thing CI may lack).
pub fn rxe_lab() -> Option<PathBuf> {
    let path = std::env::var_os("ROCE_RXE_LAB")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/tools/rxe-lab/rxe-lab"));
    let skip = |why: String| {
        let _ = writeln!(std::io::stderr(), "SKIPPED: the Soft-RoCE interop suite cannot run here: {why}");
        None
    };
    if !path.is_file() {
        let msg = format!("{} not found", path.display());
        assert!(!in_ci(), "{msg} (CI is set: the interop suite must run)");
        return skip(msg);
    }
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !root {
        return skip("it needs root (a network namespace and a tap device)".into());
    }
    Some(path)
}

/// The straggler traces (`ROCE_STRAGGLER_TRACES`, else
/// `../shared/straggler-traces` beside the repository), or `None` after a
/// skip notice on stderr when they are not there.
///
/// # Panics
/// Under CI, when the traces are missing.
pub fn straggler_traces() -> Option<PathBuf> {
    let dir = std::env::var_os("ROCE_STRAGGLER_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/straggler-traces"));
    if dir.join("trace-AR.parquet").is_file() && dir.join("trace-ST.parquet").is_file() {
        return Some(dir);
    }
    let msg = format!("the straggler traces are not in {}", dir.display());
    assert!(!in_ci(), "{msg} (CI is set: the trace replay tests must run)");
    let _ = writeln!(std::io::stderr(), "SKIPPED: {msg}; set ROCE_STRAGGLER_TRACES to their directory");
    None
}
