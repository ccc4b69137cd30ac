//! The fabric's own rules on its import graph, beside the workspace-wide
//! check (`roce-test-support`'s `tests/rooms.rs`: no circle among any
//! crate's top-level modules or the files of one folder):
//!
//! - the deadlock detector is a pure function: it imports nothing of the
//!   crate;
//! - the event loop, the plots and the summary read the scenario's rules
//!   (`scenario`), not the TOML reader.
//!
//! `cargo test -p roce-fabric --test module_graph -- --nocapture` prints
//! the graphs.

use std::path::Path;

use roce_test_support::module_graph::Graphs;

#[test]
fn the_detector_and_the_event_loop_import_what_they_should() {
    let g = Graphs::of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    g.print();
    assert_eq!(g.circle(), None, "an import circle");
    // The check reads the graph at all: the event loop uses the scenario.
    assert!(g.top_no_tests.get("sim").is_some_and(|t| t.contains("scenario")), "{:?}", g.top_no_tests);
    assert!(!g.top.contains_key("deadlock"), "deadlock imports {:?}", g.top.get("deadlock"));
    for m in ["sim", "plot", "summary"] {
        assert!(
            !g.top_no_tests.get(m).is_some_and(|t| t.contains("toml_scenario")),
            "{m} imports the TOML reader"
        );
    }
}
