//! What the command handlers share with the queue: the command as they
//! see it, what they decide, and the queue's state they may change.

use std::collections::HashSet;
use std::sync::Arc;

use super::Target;
use crate::wire::{Sqe, Status};

/// What a handler decided, before the queue turns it into a [`Step`].
pub(super) enum Outcome {
    Done {
        status: Status,
        dw0: u32,
        dw1: u32,
    },
    /// The host's data is needed (`len` bytes), brought `into` the
    /// command's buffer or straight into a namespace.
    NeedData {
        len: u32,
        into: Place,
    },
    /// `len` bytes go to the host `from` the command's buffer or a
    /// namespace, then success with `dw0`.
    Deliver {
        len: u32,
        dw0: u32,
        from: Place,
    },
    Park,
}

impl Outcome {
    pub(super) fn ok() -> Outcome {
        Outcome::Done { status: Status::SUCCESS, dw0: 0, dw1: 0 }
    }
    pub(super) fn ok_dw0(dw0: u32) -> Outcome {
        Outcome::Done { status: Status::SUCCESS, dw0, dw1: 0 }
    }
    pub(super) fn err(status: Status) -> Outcome {
        Outcome::Done { status, dw0: 0, dw1: 0 }
    }
}

/// Where a command's data is on the target's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The command's data buffer, which the driver owns.
    Buffer,
    /// Bytes from `offset` of namespace index `ns` (NSID - 1) of subsystem
    /// index `subsys`, whose back-end lends its memory to the NIC
    /// ([`Backend::region`](crate::namespace::Backend::region)): the blocks
    /// move between the host and the namespace by RDMA, with no copy
    /// through the command's buffer. A driver that cannot reach that memory
    /// copies through the buffer itself ([`Backend::read_at`] before the
    /// WRITE; [`Backend::write_at`] after the READ, then
    /// [`Queue::data_placed`](super::Queue::data_placed)).
    ///
    /// [`Backend::read_at`]: crate::namespace::Backend::read_at
    /// [`Backend::write_at`]: crate::namespace::Backend::write_at
    Namespace { subsys: usize, ns: usize, offset: u64 },
}

/// A command as the handlers see it.
pub(super) struct Cmd<'a> {
    pub sqe: Sqe<&'a [u8]>,
    /// Length of the data the SGL describes.
    pub sgl_len: u32,
    /// The host's data, once present (in-capsule, or fetched).
    pub data: Option<&'a [u8]>,
    /// The host's data is already where the command puts it: a fetch
    /// into a namespace ([`Place::Namespace`]) brought it there.
    pub placed: bool,
    pub now: u64,
}

/// The part of a queue the handlers read and change: which target, which
/// queue, its controller once connected, and whether the host asked to
/// disconnect.
pub(super) struct QueueState {
    pub target: Arc<Target>,
    pub qid: u16,
    /// Commands the host may have outstanding (HSQSIZE + 1).
    pub entries: u16,
    pub cntlid: Option<u16>,
    pub disconnect: bool,
    /// Namespaces (subsystem and namespace index) whose memory the driver
    /// reaches by RDMA on this connection ([`Queue::reach`](super::Queue::reach)):
    /// their commands name them as their data's place.
    pub direct: HashSet<(usize, usize)>,
}

impl QueueState {
    pub fn crqsize(&self) -> u16 {
        self.entries
    }
    pub fn request_disconnect(&mut self) {
        self.disconnect = true;
    }
}
