//! Links the cdylib as rdma-core's `libibverbs.so.1`: its soname, and the
//! symbol versions programs linked against rdma-core ask for. From
//! `symbols.txt` it writes the linker version script (the version nodes)
//! and `.symver` directives binding each symbol to its node: rustc's own
//! export list would otherwise leave every symbol unversioned.
//!
//! A line `VERSION SYMBOL` binds the function `SYMBOL` as the default
//! version (`SYMBOL@@VERSION`). A line `VERSION SYMBOL IMPL` binds the
//! function `IMPL` as an older, non-default version (`SYMBOL@VERSION`), as
//! rdma-core's `symver()` does for its IBVERBS_1.0 compatibility entry
//! points: a binary linked against that version gets `IMPL`. The version
//! nodes chain in the order rdma-core's `libibverbs.map` declares them.
//! The version `GLIBC_BASE` stands for glibc's first version on the
//! target architecture.
//! (`IMPL` stays exported under its own name too: rustc exports every
//! `#[no_mangle]` function.)

use std::collections::BTreeMap;
use std::fmt::Write as _;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rerun-if-changed=symbols.txt");
    let list = std::fs::read_to_string(format!("{dir}/symbols.txt")).expect("symbols.txt");
    // The version of glibc's oldest symbols, which differs by architecture.
    let glibc_base = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "GLIBC_2.17",
        _ => "GLIBC_2.2.5",
    };
    let mut nodes: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut asm = String::from("std::arch::global_asm!(\n");
    for line in list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let mut words = line.split_whitespace();
        let (Some(ver), Some(sym)) = (words.next(), words.next()) else {
            panic!("symbols.txt: expected VERSION SYMBOL [IMPL], got {line:?}");
        };
        let ver = if ver == "GLIBC_BASE" { glibc_base } else { ver };
        nodes.entry(ver).or_default().push(sym);
        match words.next() {
            None => writeln!(asm, "    \".symver {sym}, {sym}@@{ver}\",").unwrap(),
            Some(imp) => writeln!(asm, "    \".symver {imp}, {sym}@{ver}\",").unwrap(),
        }
    }
    asm.push_str(");\n");
    let mut map = String::new();
    let mut names: Vec<&str> = nodes.keys().copied().collect();
    names.sort_by_key(|v| node_rank(v));
    let mut parent: Option<&str> = None;
    for ver in names {
        writeln!(map, "{ver} {{\n  global:").unwrap();
        for s in &nodes[ver] {
            writeln!(map, "    {s};").unwrap();
        }
        match parent {
            // The public nodes chain (IBVERBS_1.1 inherits IBVERBS_1.0 ...),
            // as in rdma-core's map; the private node stands alone.
            Some(p) if ver.starts_with("IBVERBS_1.") => writeln!(map, "}} {p};").unwrap(),
            _ => map.push_str("};\n"),
        }
        if ver.starts_with("IBVERBS_1.") {
            parent = Some(ver);
        }
    }
    std::fs::write(format!("{out}/libibverbs.map"), map).expect("write the version script");
    std::fs::write(format!("{out}/symver.rs"), asm).expect("write the .symver directives");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={out}/libibverbs.map");
}

/// The order of a version node: IBVERBS_1.N by N, then the others.
fn node_rank(ver: &str) -> (u32, String) {
    match ver.strip_prefix("IBVERBS_1.").and_then(|n| n.parse::<u32>().ok()) {
        Some(n) => (n, String::new()),
        None => (u32::MAX, ver.to_string()),
    }
}
