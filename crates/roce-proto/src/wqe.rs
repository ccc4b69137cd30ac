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
    /// READ: response bytes placed past a gap, above `read_done` (see
    /// `completer`, selective recovery).
    pub read_above: ReadRanges,
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

/// Byte ranges of a READ's responses placed past a gap: sorted, disjoint
/// and not touching, `[start, end)`. Empty (and unallocated) unless a
/// response was lost; at most one range per hole, so a responder that
/// skips every other packet makes it as long as the READ has packets.
#[derive(Debug, Default)]
pub(crate) struct ReadRanges(Vec<(u64, u64)>);

impl ReadRanges {
    /// Records `[start, end)` as placed.
    pub fn insert(&mut self, start: u64, end: u64) {
        let v = &mut self.0;
        // The first range that ends at or after `start` (touching counts).
        let i = v.partition_point(|&(_, e)| e < start);
        let mut j = i;
        let (mut s, mut e) = (start, end);
        while j < v.len() && v[j].0 <= e {
            s = s.min(v[j].0);
            e = e.max(v[j].1);
            j += 1;
        }
        v.splice(i..j, [(s, e)]);
    }

    /// Whether the byte at `off` was placed.
    pub fn contains(&self, off: u64) -> bool {
        let i = self.0.partition_point(|&(_, e)| e <= off);
        self.0.get(i).is_some_and(|&(s, _)| s <= off)
    }

    /// The start of the first range at or above `off`.
    pub fn next_start(&self, off: u64) -> Option<u64> {
        let i = self.0.partition_point(|&(_, e)| e <= off);
        self.0.get(i).map(|&(s, _)| s.max(off))
    }

    /// `done` advanced to there: ranges it reached are taken in, and the
    /// new end of the bytes placed in order is returned.
    pub fn absorb(&mut self, mut done: u64) -> u64 {
        let n = self.0.partition_point(|&(s, _)| s <= done);
        for &(_, e) in &self.0[..n] {
            done = done.max(e);
        }
        self.0.drain(..n);
        done
    }

    /// Whether a range begins exactly at `off`.
    pub fn starts_at(&self, off: u64) -> bool {
        let i = self.0.partition_point(|&(s, _)| s < off);
        self.0.get(i).is_some_and(|&(s, _)| s == off)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn clear(&mut self) {
        self.0 = Vec::new();
    }
}

/// A receive work request waiting for a message.
#[derive(Debug, Clone)]
pub(crate) struct RecvWqe {
    pub wr: RecvWr,
    pub length: u64,
}

#[cfg(test)]
mod tests {
    use super::ReadRanges;

    #[test]
    fn ranges_merge_and_are_taken_in_order() {
        let mut r = ReadRanges::default();
        r.insert(30, 40);
        r.insert(10, 20);
        r.insert(50, 60);
        assert_eq!(r.0, [(10, 20), (30, 40), (50, 60)]);
        r.insert(20, 30);
        assert_eq!(r.0, [(10, 40), (50, 60)], "touching ranges join");
        r.insert(45, 55);
        assert_eq!(r.0, [(10, 40), (45, 60)]);
        assert!(r.contains(10) && r.contains(39) && !r.contains(40) && !r.contains(9));
        assert_eq!(r.next_start(0), Some(10));
        assert_eq!(r.next_start(12), Some(12));
        assert_eq!(r.next_start(40), Some(45));
        assert_eq!(r.next_start(60), None);
        assert!(r.starts_at(10) && r.starts_at(45) && !r.starts_at(12) && !r.starts_at(40));
        assert_eq!(r.absorb(5), 5, "nothing reached");
        assert_eq!(r.absorb(10), 40);
        assert_eq!(r.0, [(45, 60)]);
        assert_eq!(r.absorb(50), 60, "a range already partly in order");
        assert!(r.is_empty());
    }
}
