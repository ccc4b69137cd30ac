//! Links the cdylib as rdma-core's `librdmacm.so.1`: its soname, and the
//! symbol versions (RDMACM_1.0 to 1.3) programs linked against rdma-core 44
//! ask for. From `symbols.txt` it writes the linker version script (the
//! version nodes, each inheriting the one before as rdma-core's map does)
//! and `.symver` directives binding each symbol to its node.

use std::collections::BTreeMap;
use std::fmt::Write as _;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rerun-if-changed=symbols.txt");
    let list = std::fs::read_to_string(format!("{dir}/symbols.txt")).expect("symbols.txt");
    let mut nodes: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut asm = String::from("std::arch::global_asm!(\n");
    for line in list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (ver, sym) = line.split_once(' ').expect("VERSION SYMBOL");
        nodes.entry(ver).or_default().push(sym);
        writeln!(asm, "    \".symver {sym}, {sym}@@{ver}\",").unwrap();
    }
    asm.push_str(");\n");
    let mut map = String::new();
    let mut prev: Option<&str> = None;
    for (ver, syms) in &nodes {
        writeln!(map, "{ver} {{\n  global:").unwrap();
        for s in syms {
            writeln!(map, "    {s};").unwrap();
        }
        match prev {
            Some(p) => writeln!(map, "}} {p};").unwrap(),
            None => map.push_str("};\n"),
        }
        prev = Some(ver);
    }
    std::fs::write(format!("{out}/librdmacm.map"), map).expect("write the version script");
    std::fs::write(format!("{out}/symver.rs"), asm).expect("write the .symver directives");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={out}/librdmacm.map");
}
