//! The verbs-shaped transport the algorithms run over.
//!
//! A communicator of `n` ranks is, per pair of ranks and channel (several
//! channels per peer, each with its own UDP source port, so ECMP can spread
//! one collective over several paths), two reliable connected QPs, one for
//! data and one for credits, and two memory regions registered once at
//! creation and reused by every call:
//!
//! * **receive slots**: for each peer `p` and channel `c`, `slots` slots of
//!   `slot_bytes` each, where only `p` writes (RDMA WRITE with immediate,
//!   IBTA vol. 1 §9.4.3 / §9.7.2: the immediate arrives in the completion
//!   of the receive WQE the write consumes);
//! * **staging slots**: the same shape, where the local rank prepares the
//!   bytes it writes to `p`'s receive slot of the same `(channel, slot)`.
//!
//! The algorithm owns slot allocation. Flow control is by credits: a rank
//! writes into slot `s` of `(p, c)` only after `p` released it with a
//! zero-length WRITE WITH IMMEDIATE (a *notify* here) carrying the slot
//! index; at the start every slot is free. So a write never lands in a slot
//! the receiver is still reading, and no QP's receive queue needs more than
//! `slots` WQEs.
//!
//! **Why credits have their own QP.** A send queue is processed in order
//! (IBTA vol. 1 §9.5: a QP's requests execute in the order posted), so a
//! credit posted on the QP that also carries this rank's data to the same
//! peer waits behind up to `slots` slot-sized WRITEs. Wherever two ranks
//! send to each other at once (every exchange of Rabenseifner and recursive
//! doubling, the tree's up and down phases, any ring of two) the peer then
//! runs out of slots while its credits queue: measured in the fabric
//! simulator, a 2-rank 64 MiB all-reduce with 4 slots ran 11% slower than
//! its bandwidth bound, and 3% with 16. The credit QP carries credits only,
//! both ways, so a credit leaves as soon as it is posted; NCCL's IB
//! transport likewise gives each direction of a peer pair its own QPs.
//!
//! An implementation on `roce` (`roce::Qp::post_send` with
//! `SendOp::WriteWithImm`, one `roce::Mr` for all receive slots and one for
//! all staging slots, `Cq::poll` / `Cq::poll_or_drive`) keeps each QP's
//! receive queue stocked (every data or notify write consumes a receive
//! WQE), posts data on the channel's data QP and credits on its credit
//! QP, reports an arrival on either with the channel's index, maps `(peer, channel, slot)` to a remote address and rkey exchanged
//! at connection time, and encodes `token` in the `wr_id`. The fabric
//! simulator's implementation does the same on `roce-proto` engines.

use crate::error::TransportError;

/// Shape of the registered memory and QPs, identical on every rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// QPs per peer (`--qps-per-peer`), at least 1.
    pub channels: usize,
    /// Receive slots per `(peer, channel)`, at least 1, at most
    /// [`Layout::MAX_SLOTS`]. More slots keep more writes in flight.
    pub slots: usize,
    /// Bytes per slot, a multiple of 64 and at least
    /// [`Layout::MIN_SLOT_BYTES`]. Each message carries a
    /// [`crate::HEADER_BYTES`]-byte header, then payload.
    pub slot_bytes: usize,
}

impl Layout {
    pub const MAX_SLOTS: usize = 256;
    pub const MIN_SLOT_BYTES: usize = 128;

    /// The defaults: 2 channels, 4 slots of 256 KiB (2 MiB in flight per
    /// peer).
    pub const DEFAULT: Layout = Layout { channels: 2, slots: 4, slot_bytes: 256 << 10 };

    /// Bytes of the receive region (and of the staging region) a rank
    /// registers on a communicator of `n` ranks.
    pub fn region_bytes(&self, n: usize) -> usize {
        n.saturating_sub(1) * self.channels * self.slots * self.slot_bytes
    }

    /// Offset of `(peer_index, channel, slot)` in a region laid out peer-major
    /// (peer index = the peer's rank, or rank - 1 above the local rank).
    pub fn offset(&self, peer_index: usize, channel: usize, slot: usize) -> usize {
        ((peer_index * self.channels + channel) * self.slots + slot) * self.slot_bytes
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.channels == 0 || self.channels > 64 {
            return Err(format!("channels must be 1..=64, got {}", self.channels));
        }
        if self.slots == 0 || self.slots > Layout::MAX_SLOTS {
            return Err(format!("slots must be 1..={}, got {}", Layout::MAX_SLOTS, self.slots));
        }
        if self.slot_bytes < Layout::MIN_SLOT_BYTES
            || self.slot_bytes % 64 != 0
            || self.slot_bytes > (1 << 30)
        {
            return Err(format!(
                "slot_bytes must be a multiple of 64 in {}..=1 GiB, got {}",
                Layout::MIN_SLOT_BYTES,
                self.slot_bytes
            ));
        }
        Ok(())
    }
}

impl Default for Layout {
    fn default() -> Layout {
        Layout::DEFAULT
    }
}

/// A completion the transport reports to the algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// A [`Transport::write`] finished locally (the peer acknowledged it:
    /// its staging slot may be reused). `token` is the one given to `write`.
    Sent { peer: usize, channel: usize, token: u64 },
    /// A peer's WRITE WITH IMMEDIATE (data into our receive slot, or a
    /// zero-length notify) arrived on `channel`, with its immediate.
    Arrived { peer: usize, channel: usize, imm: u32 },
}

/// The verbs the algorithms need. All methods are non-blocking.
///
/// Ranks are `0..n`; `peer` is never the local rank. The algorithm never
/// asks for a slot out of [`Layout`]'s range.
pub trait Transport {
    /// Monotonic time in nanoseconds. The only clock the algorithms read
    /// (deadlines); the simulator gives its simulated time.
    fn now_ns(&self) -> u64;

    /// Lends the staging slot `(peer, channel, slot)`, `slot_bytes` long,
    /// to `f`, which fills it before [`Transport::write`]. The algorithm
    /// calls it only for a slot whose last write has completed (a `Sent`
    /// came back): from its post to that completion the NIC reads it.
    ///
    /// A closure, not a returned slice: a transport over registered
    /// memory lends the region's bytes in place only while the NIC is
    /// kept off them (the `roce` transport holds the device's lock while
    /// `f` runs, `roce::Mr::with_bytes_mut`), so nothing is copied twice.
    /// (Changed from `staging(..) -> &mut [u8]`, which forced the `roce`
    /// transport to keep host copies of every slot.)
    fn stage(
        &mut self,
        peer: usize,
        channel: usize,
        slot: usize,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), TransportError>;

    /// Lends the receive slot `(peer, channel, slot)`, `slot_bytes` long,
    /// where `peer` writes, to `f` for reading. Called only after an
    /// `Arrived` for it and before the slot is released with a notify (the
    /// credit protocol: the peer writes it only between our notify and its
    /// data's `Arrived`). (Changed from `slot(..) -> &[u8]`; see
    /// [`Transport::stage`].)
    fn read_slot(
        &self,
        peer: usize,
        channel: usize,
        slot: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), TransportError>;

    /// Posts an RDMA WRITE WITH IMMEDIATE of the first `len` bytes of the
    /// staging slot `(peer, channel, slot)` into `peer`'s receive slot
    /// `(local rank, channel, slot)`, signalled: a `Sent` with `token`
    /// follows when it completes.
    fn write(
        &mut self,
        peer: usize,
        channel: usize,
        slot: usize,
        len: usize,
        imm: u32,
        token: u64,
    ) -> Result<(), TransportError>;

    /// Posts a zero-length WRITE WITH IMMEDIATE to `peer` on `channel`'s
    /// credit QP (a credit: never queued behind this rank's data). Its
    /// local completion is not reported (the transport may post it
    /// unsignalled). A full send queue is no error: nothing bounds how
    /// many credits await their ACKs (those may come back later than the
    /// data the credits let through, on another path), so the transport
    /// holds the credit and posts it from a later `poll`, once completions
    /// have made room. Credits may arrive in any order.
    fn notify(&mut self, peer: usize, channel: usize, imm: u32) -> Result<(), TransportError>;

    /// Appends the completions that are ready (possibly none) to `out`.
    /// Drives the underlying engine if it needs driving.
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<(), TransportError>;

    /// False for a timing-only transport, which carries each message's
    /// header and not its data (the fabric simulator when results are
    /// not checked): the algorithm then stages headers only and neither
    /// reduces nor copies what arrives. The messages, their lengths and
    /// their order are the same; the buffers' values are not defined.
    fn carries_data(&self) -> bool {
        true
    }
}

/// The receive slot a data write's immediate names, `None` for a credit
/// (a zero-length notify). The algorithms choose the immediates; a
/// transport that keeps host copies of its receive slots (the `roce`
/// driver's, the fabric simulator's) reads the slot from it to copy the
/// bytes that arrived. A small addition to the trait's contract for
/// transports outside this crate: the encoding itself stays private.
pub fn data_slot(imm: u32) -> Option<usize> {
    match crate::header::Imm::parse(imm) {
        crate::header::Imm::Data { slot, .. } => Some(slot),
        crate::header::Imm::Credit { .. } => None,
    }
}
