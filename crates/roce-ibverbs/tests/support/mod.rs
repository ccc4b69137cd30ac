//! What the integration tests share: the library cargo built.
//!
//! cargo does not rebuild a cdylib for its own crate's integration tests
//! (only for a crate that depends on it), so a library older than the
//! crate's sources fails the test with the command to run, rather than
//! testing old code.

use std::path::{Path, PathBuf};

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

/// The library cargo built beside this test (the cdylib of this crate),
/// checked to be no older than the crate's sources.
pub fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let deps = exe.parent().expect("the test's directory");
    let lib = deps.join("libroce_ibverbs.so");
    let built = if lib.is_file() { Some(modified(&lib)) } else { None };
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources =
        ["src", "build.rs", "symbols.txt", "Cargo.toml"].iter().map(|f| newest(&crate_dir.join(f))).max();
    assert!(
        built.is_some_and(|b| Some(b) >= sources),
        "{} is missing or older than the crate's sources: run `cargo build -p roce-ibverbs` first \
         (cargo test does not rebuild a crate's cdylib for its own integration tests)",
        lib.display()
    );
    lib
}
