//! Typed errors of the collectives.

use crate::types::OpKind;

/// An error a [`crate::Transport`] reports (a failed post, an error
/// completion, a dead connection). `peer` names the rank involved when the
/// transport knows it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("transport error{}: {message}", peer.map(|p| format!(" with rank {p}")).unwrap_or_default())]
pub struct TransportError {
    pub peer: Option<usize>,
    pub message: String,
}

impl TransportError {
    pub fn new(peer: Option<usize>, message: impl Into<String>) -> TransportError {
        TransportError { peer, message: message.into() }
    }
}

/// What the collective was waiting for when its deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Data the peer had to send.
    Data,
    /// A credit: the peer had not released a receive slot.
    Credit,
    /// The local completion of a write to the peer.
    SendCompletion,
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Waiting::Data => "data from",
            Waiting::Credit => "a free receive slot (credit) from",
            Waiting::SendCompletion => "the completion of a write to",
        })
    }
}

/// Errors of a collective call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The call's arguments are invalid (buffer sizes, root, algorithm
    /// for this operation, communicator configuration).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// [`crate::Engine::start`] while an operation is still running, or
    /// `progress` with none started.
    #[error("{0}")]
    State(&'static str),

    /// A peer stopped answering: nothing arrived for the operation within
    /// the timeout (the transport's clock decides).
    #[error(
        "{op} #{seq}: rank {peer} did not answer within {waited_ms} ms (waiting for {waiting} rank {peer})"
    )]
    Timeout { op: OpKind, seq: u32, peer: usize, waiting: Waiting, waited_ms: u64 },

    /// A peer describes the same call differently (operation, type,
    /// reduction, count, root or algorithm): the ranks disagree.
    #[error("{op} #{seq}: rank {peer} disagrees on the call: its {field} is {theirs}, ours is {ours}")]
    Mismatch { op: OpKind, seq: u32, peer: usize, field: &'static str, ours: String, theirs: String },

    /// A message that does not belong to the current operation or breaks
    /// the protocol (stale sequence number, unknown slot, bad header).
    #[error("{op} #{seq}: protocol error from rank {peer}: {detail}")]
    Protocol { op: OpKind, seq: u32, peer: usize, detail: String },

    /// The transport failed.
    #[error("{op} #{seq}: {source}")]
    Transport {
        op: OpKind,
        seq: u32,
        #[source]
        source: TransportError,
    },
}

impl Error {
    /// The peer rank the error names, if any.
    pub fn peer(&self) -> Option<usize> {
        match self {
            Error::Timeout { peer, .. } | Error::Mismatch { peer, .. } | Error::Protocol { peer, .. } => {
                Some(*peer)
            }
            Error::Transport { source, .. } => source.peer,
            _ => None,
        }
    }
}
