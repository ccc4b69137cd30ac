//! The crate's rooms stay small and its modules import one another in one
//! direction: no source file over 1,000 lines, and no circle among the
//! modules that `src/` files name (`crate::a::b`, `super::x`, and the
//! groups `use super::{x, y}`) outside their `#[cfg(test)] mod tests`.
//! A module declaring its children (`mod x;`) is not an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `crate::ffi::cq` for `src/ffi/cq.rs`, `crate::ffi` for `src/ffi/mod.rs`.
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(src()).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    std::iter::once("crate".to_string()).chain(parts).collect::<Vec<_>>().join("::")
}

/// The code of a file without comments and without its test module.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
    text.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join("\n")
}

/// Every path `crate::...` or `super::...` the code names, with `super`
/// resolved against `module`'s parent; groups `{a, b::c}` expanded.
fn paths(module: &str, code: &str) -> Vec<String> {
    let parent = module.rsplit_once("::").map_or("crate", |(p, _)| p).to_string();
    let bytes = code.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start).map(|i| i + from) {
            from = i + start.len();
            if i > 0 && (word(bytes[i - 1]) || bytes[i - 1] == b'$') {
                continue;
            }
            let mut end = from;
            while end < bytes.len() && (word(bytes[end]) || code[end..].starts_with("::")) {
                end += if code[end..].starts_with("::") { 2 } else { 1 };
            }
            let head = code[i..end].trim_end_matches("::");
            let head = if start == "super::" { head.replacen("super", &parent, 1) } else { head.to_string() };
            if code[end..].starts_with('{') {
                let close = code[end..].find('}').map_or(code.len(), |j| end + j);
                for item in code[end + 1..close].split(',') {
                    let item = item.split_whitespace().next().unwrap_or("");
                    if !item.is_empty() && item != "self" {
                        out.push(format!("{head}::{item}"));
                    }
                }
            } else {
                out.push(head);
            }
        }
    }
    out
}

#[test]
fn no_file_over_1000_lines() {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    for f in files {
        let n = std::fs::read_to_string(&f).unwrap().lines().count();
        assert!(n <= 1000, "{} has {n} lines", f.display());
    }
}

#[test]
fn no_import_circle() {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    let modules: BTreeMap<String, PathBuf> = files.iter().map(|f| (module_of(f), f.clone())).collect();
    // The longest module that is a prefix of `path`.
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").collect();
        (1..=parts.len()).rev().map(|n| parts[..n].join("::")).find(|m| modules.contains_key(m))
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, f) in &modules {
        let text = code(&std::fs::read_to_string(f).unwrap());
        for p in paths(m, &text) {
            if let Some(t) = resolve(&p).filter(|t| t != m && t != "crate") {
                edges.entry(m.clone()).or_default().insert(t);
            }
        }
    }
    assert!(edges.get("crate::ffi::context").is_some_and(|e| e.contains("crate::ffi::cq")), "{edges:?}");
    // Depth-first search for a back edge.
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, bool>,
        stack: &mut Vec<String>,
    ) {
        match state.get(m) {
            Some(true) => return,
            Some(false) => panic!("import circle: {} -> {m}", stack.join(" -> ")),
            None => {}
        }
        state.insert(m.to_string(), false);
        stack.push(m.to_string());
        for t in edges.get(m).into_iter().flatten() {
            visit(t, edges, state, stack);
        }
        stack.pop();
        state.insert(m.to_string(), true);
    }
    let mut state = BTreeMap::new();
    for m in modules.keys() {
        visit(m, &edges, &mut state, &mut Vec::new());
    }
}
