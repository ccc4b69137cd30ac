//! The library exports every symbol and version node rdma-core 44's
//! `libibverbs.so.1` does, with the same default (`@@`) or older (`@`)
//! binding: Debian builds its programs with immediate binding, so a single
//! missing `name@VERSION` stops a program at load ("version IBVERBS_1.12
//! not found", libfabric's failure before this list was complete).
//! Compared with `readelf` on both libraries; the library may export more.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use roce_test_support::in_ci;

mod support;

/// Debian's libibverbs, where the multiarch layout puts it.
fn debian_library() -> Option<PathBuf> {
    ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"]
        .iter()
        .map(|d| Path::new(d).join("libibverbs.so.1"))
        .find(|p| p.is_file())
}

fn readelf(args: &[&str], lib: &Path) -> String {
    let out = Command::new("readelf")
        .args(args)
        .arg(lib)
        .output()
        .unwrap_or_else(|e| panic!("readelf (binutils): {e}"));
    assert!(
        out.status.success(),
        "readelf {args:?} {}: {}",
        lib.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("readelf prints text")
}

/// The defined dynamic symbols as `name@VERSION` / `name@@VERSION` (the
/// absolute symbols naming the version nodes left out: `nodes` has those).
fn symbols(lib: &Path) -> BTreeSet<String> {
    readelf(&["--dyn-syms", "-W"], lib)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Num: Value Size Type Bind Vis Ndx Name
            (f.len() == 8 && f[0].ends_with(':') && f[6] != "UND" && f[6] != "ABS" && f[4] != "LOCAL")
                .then(|| f[7].to_string())
        })
        .collect()
}

/// The version nodes the library defines (not its soname's base entry).
fn nodes(lib: &Path) -> BTreeSet<String> {
    readelf(&["-V", "-W"], lib)
        .lines()
        .filter(|l| l.contains("Rev:") && !l.contains("Flags: BASE"))
        .filter_map(|l| l.split("Name: ").nth(1).map(|n| n.trim().to_string()))
        .collect()
}

#[test]
fn every_symbol_and_version_node_of_rdma_core_44_is_exported() {
    let Some(debian) = debian_library() else {
        assert!(!in_ci(), "CI must compare with Debian's libibverbs.so.1 (apt-get install libibverbs1)");
        eprintln!("SKIPPED: no libibverbs.so.1 of rdma-core installed (apt-get install libibverbs1)");
        return;
    };
    let ours = support::library();

    let want = nodes(&debian);
    assert!(want.contains("IBVERBS_1.14") && want.contains("IBVERBS_PRIVATE_34"), "{want:?}");
    let have = nodes(&ours);
    let missing: Vec<_> = want.difference(&have).collect();
    assert!(missing.is_empty(), "version nodes missing from {}: {missing:?}", ours.display());

    let want = symbols(&debian);
    assert!(want.len() > 150 && want.contains("ibv_get_device_list@@IBVERBS_1.1"), "{want:?}");
    let have = symbols(&ours);
    let missing: Vec<_> = want.difference(&have).collect();
    assert!(missing.is_empty(), "symbols missing from {}: {missing:?}", ours.display());
}
