//! What the integration tests share: the library cargo built.
//!
//! cargo does not rebuild a cdylib for its own crate's integration tests
//! (only for a crate that depends on it), so a library older than the
//! crate's sources fails the test with the command to run, rather than
//! testing old code.

use std::path::PathBuf;

/// The library cargo built beside this test (the cdylib of this crate),
/// checked to be no older than the crate's sources.
pub fn library() -> PathBuf {
    roce_test_support::built_cdylib("libroce_ibverbs.so", "roce-ibverbs")
}
