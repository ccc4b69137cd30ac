//! Whether a crate's modules import one another in one direction, read
//! from the source text, and whether its rooms stay small.
//!
//! Every `crate::a::...` and `super::x` path in a file of `src/` (its
//! `use` lines and paths written inline; comments aside) is an edge from
//! the file's module to the module it names. Three graphs:
//!
//! - `top`: between the crate's top-level modules, a module with its
//!   folder counting as one (`sim/nic.rs` is `sim`), tests included (tests
//!   may use any module as a fixture, so this one is for printing);
//! - `top_no_tests`: the same without test code (a file's `#[cfg(test)]`
//!   part and `tests.rs` files), which must be acyclic;
//! - `within`: between the files of one folder (`sim/port.rs` ->
//!   `sim/frame.rs`), which must be acyclic. A file may use its parent
//!   (the folder's own file, whose state it works on: `use super::Sim`),
//!   and the parent names its children's types; those edges are the
//!   folder's ownership, not circles.
//!
//! `mod x;` declares a child; it is not an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module as its path below the crate root (`[sim, nic]`).
pub type Module = Vec<String>;

/// Edges between modules, by name.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/a/b.rs` -> [a, b]; `src/a/mod.rs` -> [a]; `src/lib.rs` and `src/main.rs` -> [].
pub fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut m: Module = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    if m.last().is_some_and(|l| l == "mod" || l == "lib" || l == "main") {
        m.pop();
    }
    m
}

/// The code of a file, comments removed (line comments; the crate has no
/// block comments in code).
fn code(text: &str) -> String {
    text.lines().map(|l| l.find("//").map_or(l, |i| &l[..i])).collect::<Vec<_>>().join("\n")
}

/// Identifiers after `prefix` (`crate::` or `super::`): one, or each
/// first segment of a `{...}` group.
fn named_after(code: &str, prefix: &str) -> Vec<String> {
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            let mut depth = 0;
            let mut item = String::new();
            for c in group[..end].chars().chain(std::iter::once(',')) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(ident(item.trim()));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
        } else {
            out.push(ident(rest));
        }
    }
    out.retain(|s| !s.is_empty() && s != "self");
    out
}

pub fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        v: &str,
        graph: &Graph,
        colour: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        colour.insert(v.to_string(), 1);
        path.push(v.to_string());
        for w in graph.get(v).into_iter().flatten() {
            match colour.get(w.as_str()) {
                Some(1) => {
                    let start = path.iter().position(|x| x == w).unwrap();
                    return Some(path[start..].to_vec());
                }
                None => {
                    if let Some(c) = visit(w, graph, colour, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        colour.insert(v.to_string(), 2);
        None
    }
    let mut colour = BTreeMap::new();
    for v in graph.keys() {
        if !colour.contains_key(v) {
            if let Some(c) = visit(v, graph, &mut colour, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// The import graphs of the crate whose sources are under `src`.
#[derive(Debug, Default)]
pub struct Graphs {
    pub top: Graph,
    pub top_no_tests: Graph,
    pub within: Graph,
}

impl Graphs {
    /// Reads every `.rs` file under `src`.
    ///
    /// # Panics
    /// If `src` cannot be read (a test's fixture is missing).
    pub fn of(src: &Path) -> Graphs {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        files.sort();
        let modules: BTreeSet<Module> = files.iter().map(|f| module_of(src, f)).collect();
        // The longest known module a path starting at `m` names.
        let resolve = |mut m: Module| -> Option<Module> {
            while !m.is_empty() {
                if modules.contains(&m) {
                    return Some(m);
                }
                m.pop();
            }
            None
        };
        let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut within: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        // Between top-level modules, tests left out (a file's tests come last).
        let mut top_no_tests: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in &files {
            let me = module_of(src, file);
            let Some(my_top) = me.first().cloned() else { continue };
            let text = code(&std::fs::read_to_string(file).unwrap());
            let no_tests = if me.last().is_some_and(|l| l == "tests") {
                ""
            } else {
                text.split("#[cfg(test)]").next().unwrap_or("")
            };
            for first in named_after(no_tests, "crate::") {
                if let Some(target) = resolve(vec![first]) {
                    if target[0] != my_top {
                        top_no_tests.entry(my_top.clone()).or_default().insert(target[0].clone());
                    }
                }
            }
            let mut named = Vec::new();
            for first in named_after(&text, "crate::") {
                named.push(vec![first]);
            }
            if me.len() >= 2 {
                let parent = me[..me.len() - 1].to_vec();
                for first in named_after(&text, "super::") {
                    let mut m = parent.clone();
                    m.push(first);
                    named.push(m);
                }
            }
            for target in named.into_iter().filter_map(resolve) {
                if target[0] != my_top {
                    top.entry(my_top.clone()).or_default().insert(target[0].clone());
                }
                let siblings =
                    me.len() >= 2 && target.len() == me.len() && target[..me.len() - 1] == me[..me.len() - 1];
                if siblings && target != me {
                    within.entry(me.join("/")).or_default().insert(target.join("/"));
                }
            }
        }
        Graphs { top, top_no_tests, within }
    }

    /// Prints the graphs (a test's `--nocapture` output).
    pub fn print(&self) {
        let print = |name: &str, graph: &Graph| {
            println!("{name}:");
            for (from, to) in graph {
                println!("  {from} -> {}", to.iter().cloned().collect::<Vec<_>>().join(", "));
            }
        };
        print("top-level modules, tests included", &self.top);
        print("top-level modules", &self.top_no_tests);
        print("files of one folder", &self.within);
    }

    /// A circle among the top-level modules (test code left out) or among
    /// the files of one folder, if any, named by the graph it is in.
    pub fn circle(&self) -> Option<(&'static str, Vec<String>)> {
        find_cycle(&self.top_no_tests)
            .map(|c| ("top-level modules", c))
            .or_else(|| find_cycle(&self.within).map(|c| ("files of one folder", c)))
    }
}

/// The files under `src` longer than `max` lines, test files (`tests.rs`,
/// `*_tests.rs`, anything under a `tests/` folder) aside.
pub fn long_files(src: &Path, max: usize) -> Vec<(PathBuf, usize)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter(|f| {
            let name = f.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            name != "tests" && !name.ends_with("_tests") && !f.iter().any(|c| c == "tests")
        })
        .filter_map(|f| {
            let n = std::fs::read_to_string(&f).ok()?.lines().count();
            (n > max).then_some((f, n))
        })
        .collect()
}
