//! Every crate of the workspace keeps its rooms small and its modules
//! importing one another in one direction: no source file over 1,000
//! lines outside tests, and no import circle among a crate's top-level
//! modules or among the files of one folder (see
//! `roce_test_support::module_graph` for how the graphs are read).
//!
//! `cargo test -p roce-test-support --test rooms -- --nocapture` prints
//! each crate's graphs.

use roce_test_support::module_graph::{long_files, Graphs};
use roce_test_support::repo_root;

fn crates() -> Vec<(String, std::path::PathBuf)> {
    let mut out: Vec<_> = std::fs::read_dir(repo_root().join("crates"))
        .expect("the workspace's crates")
        .filter_map(|e| {
            let dir = e.ok()?.path();
            let src = dir.join("src");
            let name = dir.file_name()?.to_string_lossy().into_owned();
            src.is_dir().then_some((name, src))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_crate_is_found() {
    let names: Vec<String> = crates().into_iter().map(|(n, _)| n).collect();
    for want in ["roce-wire", "roce-proto", "roce", "roce-fabric", "roce-cli", "roce-ibverbs"] {
        assert!(names.iter().any(|n| n == want), "{want} not among {names:?}");
    }
}

#[test]
fn no_import_circle_in_any_crate() {
    let mut circles = Vec::new();
    for (name, src) in crates() {
        let g = Graphs::of(&src);
        println!("== {name}");
        g.print();
        if let Some((graph, circle)) = g.circle() {
            circles.push(format!("{name}: among the {graph}: {}", circle.join(" -> ")));
        }
    }
    assert!(circles.is_empty(), "import circles:\n{}", circles.join("\n"));
}

#[test]
fn no_source_file_over_1000_lines() {
    let long: Vec<String> = crates()
        .into_iter()
        .flat_map(|(_, src)| long_files(&src, 1000))
        .map(|(f, n)| format!("{} ({n} lines)", f.display()))
        .collect();
    assert!(long.is_empty(), "files over 1,000 lines: {long:?}");
}

#[test]
fn the_check_sees_a_circle() {
    let dir = std::env::temp_dir().join(format!("roce-rooms-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::X;\nmod c;\nmod d;\n").unwrap();
    std::fs::write(src.join("b.rs"), "pub struct X;\nuse crate::a::Y; // a comment: crate::zzz\n").unwrap();
    std::fs::write(src.join("a/c.rs"), "use super::d::Z;\n").unwrap();
    std::fs::write(src.join("a/d.rs"), "use super::c::W;\n#[cfg(test)]\nuse crate::b::X;\n").unwrap();
    let g = Graphs::of(&src);
    std::fs::remove_dir_all(&dir).unwrap();
    let top = roce_test_support::module_graph::find_cycle(&g.top_no_tests).expect("a <-> b");
    assert_eq!(top.len(), 2, "{top:?}");
    let within = roce_test_support::module_graph::find_cycle(&g.within).expect("a/c <-> a/d");
    assert!(within.contains(&"a/c".to_string()) && within.contains(&"a/d".to_string()), "{within:?}");
}
