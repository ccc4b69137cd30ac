//! Every symbol and version node Debian's `librdmacm.so.1` (rdma-core 44)
//! exports is exported by ours, with the same version: Debian's programs
//! are linked with immediate binding and ask for each by version, so one
//! missing symbol stops them from loading at all. Read with `readelf
//! --dyn-syms` on both libraries. Without Debian's library or binutils the
//! test says so and passes, except under CI, where it fails.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const DEBIAN: &str = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

fn skip_or_fail(why: &str) {
    if roce_test_support::in_ci() {
        panic!("the symbol test cannot run under CI: {why}");
    }
    eprintln!("SKIPPED: the symbol test needs {why} (apt-get install librdmacm1 binutils)");
}

/// The library cargo built for this crate (the cdylib beside the test).
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let deps = exe.parent().expect("the test's directory");
    let lib = deps.join("libroce_rdmacm.so");
    assert!(lib.is_file(), "{} is missing: run `cargo build -p roce-rdmacm` first", lib.display());
    lib
}

/// The defined, global symbols of `lib` with their versions
/// (`name@VERSION`), and its version nodes.
fn exports(lib: &Path) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    let out = Command::new("readelf").args(["--dyn-syms", "-W"]).arg(lib).output().ok()?;
    assert!(out.status.success(), "readelf failed on {}", lib.display());
    let mut syms = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name
        if f.len() < 8 || f[6] == "UND" || f[4] == "LOCAL" || !f[7].contains('@') {
            continue;
        }
        syms.insert(f[7].replace("@@", "@"));
    }
    let out = Command::new("readelf").args(["-V", "-W"]).arg(lib).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let defs = text.split("Version needs").next().unwrap_or("");
    let nodes = defs
        .lines()
        .filter(|l| l.contains("Flags: none"))
        .filter_map(|l| l.split("Name: ").nth(1))
        .map(|n| n.trim().to_string())
        .collect();
    Some((syms, nodes))
}

#[test]
fn every_symbol_and_version_of_debians_librdmacm_is_exported() {
    if !Path::new(DEBIAN).exists() {
        return skip_or_fail(DEBIAN);
    }
    let Some((want, want_nodes)) = exports(Path::new(DEBIAN)) else {
        return skip_or_fail("readelf");
    };
    let (have, have_nodes) = exports(&library()).expect("readelf ran once already");
    assert!(want.len() >= 60, "Debian's library exports {} symbols?", want.len());
    let missing: Vec<_> = want.difference(&have).collect();
    assert!(missing.is_empty(), "missing from ours: {missing:?}");
    let missing_nodes: Vec<_> = want_nodes.difference(&have_nodes).collect();
    assert!(missing_nodes.is_empty(), "version nodes missing from ours: {missing_nodes:?}");
    assert!(want_nodes.contains("RDMACM_1.3"), "{want_nodes:?}");
}
