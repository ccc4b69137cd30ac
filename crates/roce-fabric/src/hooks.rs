//! What a client of the fabric may watch and decide on its links: the
//! fault-injection harness (`roce-harness`) judges every datagram before the
//! link deals its random fate (directed faults: drop, delay or duplicate
//! exactly the packet a test is about) and sees every copy the link
//! carries (its packet trace, its ledgers).
//!
//! Only hosts' datagrams are shown (a PFC frame carries none). With
//! [`NoHooks`] the calls compile away.

use roce_proto::Transmit;

use crate::scenario::{NodeId, Time};

/// What a client decides for a datagram put on a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The link's own faults decide.
    Pass,
    /// Lost.
    Drop,
    /// One intact copy, this much later than the link would bring it and
    /// outside its FIFO order.
    Delay(Time),
    /// Two intact copies, in the link's order.
    Duplicate,
}

/// What became of one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fate {
    Delivered,
    Lost,
    /// Delivered with this bit (from the first byte's top bit) flipped.
    Corrupted {
        bit: u32,
    },
    /// No host has the destination address: never put on a link.
    Unroutable,
}

/// One copy of a datagram, as the link handled it.
#[derive(Debug, Clone, Copy)]
pub struct Copy<'a> {
    /// When the sending NIC put the datagram on the link.
    pub sent: Time,
    /// When the copy reaches the far end (`None`: lost or unroutable).
    pub arrive: Option<Time>,
    pub from: NodeId,
    /// The receiving node (`None`: unroutable).
    pub to: Option<NodeId>,
    /// 0 for the original, 1 for a duplicate.
    pub copy: u8,
    pub fate: Fate,
    /// The datagram's transmit metadata, as the engine produced it.
    pub tx: &'a Transmit,
    /// The datagram (BTH through ICRC) as it arrives, flipped bit included.
    pub bytes: &'a [u8],
}

/// A client's view of the links.
pub trait LinkHooks {
    /// Whether the fabric calls the hooks at all.
    const ACTIVE: bool = true;

    /// Called for each datagram a host puts on a link, before the link's
    /// faults, at `now`.
    fn judge(&mut self, now: Time, from: NodeId, to: NodeId, bytes: &[u8]) -> Verdict;

    /// Called for each copy, in the order copies are put on the wire.
    fn on_copy(&mut self, copy: &Copy<'_>);
}

/// No hooks: the fabric's own runs.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

impl LinkHooks for NoHooks {
    const ACTIVE: bool = false;

    fn judge(&mut self, _: Time, _: NodeId, _: NodeId, _: &[u8]) -> Verdict {
        Verdict::Pass
    }

    fn on_copy(&mut self, _: &Copy<'_>) {}
}
