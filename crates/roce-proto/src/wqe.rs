//! Work queue entries: posted send and receive work requests and the
//! progress the roles record on them. The send queue is shared by the
//! requester (which sends a WQE) and the completer (which retires it).

use roce_wire::Psn;

use crate::limits;
use crate::verbs::{RecvWr, SendOp, SendWr, WcStatus};

/// Inline data copied at post time: small payloads (the latency case) live
/// in the WQE itself, larger ones on the heap.
#[derive(Debug)]
pub(crate) enum InlineData {
    Small { buf: [u8; InlineData::SMALL], len: u8 },
    Large(Vec<u8>),
}

impl InlineData {
    pub const SMALL: usize = limits::INLINE_IN_WQE;

    pub fn zeroed(len: usize) -> InlineData {
        if len <= Self::SMALL {
            InlineData::Small { buf: [0; Self::SMALL], len: len as u8 }
        } else {
            InlineData::Large(vec![0; len])
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            InlineData::Small { buf, len } => &mut buf[..usize::from(*len)],
            InlineData::Large(v) => v,
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            InlineData::Small { buf, len } => &buf[..usize::from(*len)],
            InlineData::Large(v) => v,
        }
    }
}

/// A posted send work request and its progress.
#[derive(Debug)]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    /// The data of an inline send, copied at post time.
    pub inline_data: Option<InlineData>,
    /// Message length in bytes.
    pub length: u64,
    pub signaled: bool,
    /// PSN of the first and last packet (valid once `sent` is set).
    pub first_psn: Psn,
    pub last_psn: Psn,
    /// The requester began sending it: its PSN range is assigned.
    pub started: bool,
    /// READ: bytes of response placed so far.
    pub read_done: u64,
    /// READ: bytes asked for so far (the end of the last READ request
    /// sent; a rewind moves it back to `read_done`).
    pub read_sent: u64,
    /// READ: bytes of this WQE counted in the device's
    /// `Res::read_outstanding` (see `recharge`).
    pub read_charged: u64,
    /// Final status once retired by the completer.
    pub done: Option<WcStatus>,
}

impl SendWqe {
    pub fn npkts(&self, mtu: usize) -> u32 {
        if self.wr.op.is_read_or_atomic() {
            1
        } else {
            self.length.div_ceil(mtu as u64).max(1) as u32
        }
    }
    /// Brings this WQE's share of the device's outstanding READ bytes
    /// (`total`) to what it asked for and has not received.
    pub fn recharge(&mut self, total: &mut u64) {
        let now = self.read_sent.saturating_sub(self.read_done);
        *total = total.saturating_sub(self.read_charged) + now;
        self.read_charged = now;
    }

    /// Gives back this WQE's share of the device's outstanding READ bytes
    /// (it completed, was flushed or dropped).
    pub fn release(&mut self, total: &mut u64) {
        *total = total.saturating_sub(self.read_charged);
        self.read_charged = 0;
    }

    /// Number of response PSNs a READ consumes.
    pub fn resp_pkts(&self, mtu: usize) -> u32 {
        if matches!(self.wr.op, SendOp::Read { .. }) {
            self.length.div_ceil(mtu as u64).max(1) as u32
        } else {
            1
        }
    }
}

/// A receive work request waiting for a message.
#[derive(Debug, Clone)]
pub(crate) struct RecvWqe {
    pub wr: RecvWr,
    pub length: u64,
}
