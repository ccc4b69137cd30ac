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
    /// A DSCP (device or QP) that does not fit the 6 bits of the IP
    /// header's DS field (RFC 2474): 0..=63.
    #[error("DSCP {0} is not a 6-bit value (0..=63)")]
    Dscp(u8),
    /// The device is dead: its engine panicked (the message says where and
    /// why), so its state cannot be trusted. Every verb on it fails with
    /// this from then on and every wait wakes with it; counters and
    /// statistics still read what was counted. Open a new device.
    #[error("the device is dead: {0}")]
    DeviceDead(String),
    /// The connection manager refused a call (wrong state, private data
    /// too long, port in use, ...).
    #[error("connection manager: {0}")]
    Cm(#[from] roce_proto::cm::CmError),
    /// The peer rejected the connection: the REJ's reason (8: nobody
    /// listens on that port; 28: the application said no; 10: stale
    /// connection) and its private data.
    #[error("connection rejected by the peer: reason {reason} ({})", roce_wire::cm::reject_reason_name(*reason))]
    Rejected { reason: u16, private_data: Vec<u8> },
    /// The peer never answered the connection manager's retries.
    #[error("{0} did not answer the connection request")]
    Unreachable(std::net::SocketAddr),
}

pub type Result<T> = std::result::Result<T, Error>;
