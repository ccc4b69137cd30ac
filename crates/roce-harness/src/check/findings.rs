//! What the checks found: a list of (kind, message), the first one being
//! the headline of a failure.

use std::fmt;

/// The rule a failure broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureKind {
    /// The plan could not be instantiated.
    Setup,
    /// A verbs call of the plan was refused.
    Post,
    /// Not every QP was idle (no outstanding send WR) within the bounds.
    Liveness,
    /// Engine counters disagree with what the network delivered.
    Accounting,
    /// An async event that nothing in the plan explains.
    Event,
    /// A work completion missing, extra, out of order or wrong.
    Completion,
    /// Atomics were not linearizable / not executed exactly once.
    Atomic,
    /// A UD datagram arrived altered, unknown or too often.
    Ud,
    /// Final memory differs from the shadow model.
    Memory,
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            FailureKind::Setup => "setup",
            FailureKind::Post => "post",
            FailureKind::Liveness => "liveness",
            FailureKind::Accounting => "accounting",
            FailureKind::Event => "async event",
            FailureKind::Completion => "completion",
            FailureKind::Atomic => "atomics",
            FailureKind::Ud => "UD",
            FailureKind::Memory => "memory",
        };
        f.write_str(s)
    }
}

/// At most this many messages are kept.
const MAX_ITEMS: usize = 40;

/// Accumulated check failures.
#[derive(Debug, Clone, Default)]
pub struct Findings {
    pub items: Vec<(FailureKind, String)>,
    /// Messages dropped beyond the limit.
    pub more: usize,
}

impl Findings {
    pub fn fail(&mut self, kind: FailureKind, msg: impl Into<String>) {
        if self.items.len() < MAX_ITEMS {
            self.items.push((kind, msg.into()));
        } else {
            self.more += 1;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Kind of the first failure.
    pub fn kind(&self) -> Option<FailureKind> {
        self.items.first().map(|i| i.0)
    }
}
