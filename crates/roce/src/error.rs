//! Errors of the verbs API.

use roce_proto::VerbsError;

/// What went wrong in a call of the `roce` API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine refused the verb (bad argument, wrong state, full queue ...).
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// A socket or file operation failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// Waiting for a completion or a peer took longer than allowed.
    #[error("timed out: {0}")]
    Timeout(&'static str),
    /// The OS could not give the randomness that keys and QPNs are drawn
    /// from (there is no weaker fallback).
    #[error("no randomness from the OS: {0}")]
    Randomness(String),
    /// A bad configuration value.
    #[error("invalid configuration: {0}")]
    Config(String),
}

pub type Result<T> = std::result::Result<T, Error>;
