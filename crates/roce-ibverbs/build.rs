//! Links the cdylib as rdma-core's `libibverbs.so.1`: its soname, and the
//! symbol versions programs linked against rdma-core ask for. From
//! `symbols.txt` it writes the linker version script (the version nodes)
//! and `.symver` directives binding each symbol to its node: rustc's own
//! export list would otherwise leave every symbol unversioned.

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
    for (ver, syms) in &nodes {
        writeln!(map, "{ver} {{\n  global:").unwrap();
        for s in syms {
            writeln!(map, "    {s};").unwrap();
        }
        map.push_str("};\n");
    }
    std::fs::write(format!("{out}/libibverbs.map"), map).expect("write the version script");
    std::fs::write(format!("{out}/symver.rs"), asm).expect("write the .symver directives");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={out}/libibverbs.map");
}
