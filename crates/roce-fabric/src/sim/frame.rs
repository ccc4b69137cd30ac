//! Frames and their slots. A hop reads a frame's [`Hop`], carried by value
//! in its arrival event and in the queues; only the frame's ends read its
//! [`Frame`] and datagram, kept together in one 128-byte [`Slot`] of a slab
//! indexed by frame id (free slots are reused, last freed first).

use super::Sim;
use crate::datagram::Datagram;
use crate::hooks::LinkHooks;

/// A frame's record in its `Slot`: what only its ends read (the hops
/// carry a `Hop`).
#[derive(Clone, Copy)]
pub(super) struct Frame {
    /// A PFC frame.
    pub(super) pfc: bool,
    /// Bytes on the wire.
    pub(super) wire: u32,
    /// Data: source and destination IPv4 and UDP ports.
    pub(super) src_ip: u32,
    pub(super) dst_ip: u32,
    pub(super) sport: u16,
    pub(super) dport: u16,
}

/// What a hop reads of a frame, carried by value in its arrival event and
/// in the queues: a switch forwards a frame without reading its slot,
/// which is out of cache by the time the frame arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hop {
    pub(super) fid: u32,
    /// Data: the flow hash (ECMP); PFC: the pause quanta (0: XON).
    pub(super) hash: u32,
    /// Data: the destination host.
    pub(super) dst: u16,
    /// Bytes on the wire.
    pub(super) wire: u16,
    /// At a switch: the ingress port it came in by (0-based), for the
    /// buffer accounting.
    pub(super) in_port: u16,
    /// Bits 0-2: the priority (PFC: the priority paused); bits 3-4: the
    /// IP header's ECN codepoint (3 = CE); bit 5: a PFC frame.
    pub(super) bits: u8,
}

impl Hop {
    pub(super) const PFC: u8 = 1 << 5;

    #[inline]
    pub(super) fn prio(self) -> u8 {
        self.bits & 7
    }
    #[inline]
    pub(super) fn ecn(self) -> u8 {
        (self.bits >> 3) & 3
    }
    #[inline]
    pub(super) fn set_ecn(&mut self, ecn: u8) {
        self.bits = (self.bits & !(3 << 3)) | (ecn & 3) << 3;
    }
    #[inline]
    pub(super) fn pfc(self) -> bool {
        self.bits & Hop::PFC != 0
    }
}

/// A frame and its datagram in 128 aligned bytes, read by the frame's
/// receiving host (the hops carry a `Hop`) in one fetch: a CPU fetches a
/// 128-byte pair of lines when one misses.
#[repr(C, align(128))]
pub(super) struct Slot {
    /// `None` when the slot is free.
    pub(super) frame: Option<Frame>,
    /// The frame's datagram (none for a PFC frame).
    pub(super) bytes: Datagram,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 128);

impl<H: LinkHooks> Sim<H> {
    pub(super) fn alloc_frame(&mut self, f: Frame, bytes: Datagram) -> u32 {
        if let Some(i) = self.free_frames.pop() {
            self.slots[i as usize] = Slot { frame: Some(f), bytes };
            i
        } else {
            self.slots.push(Slot { frame: Some(f), bytes });
            if H::ACTIVE {
                self.txs.push(None);
            }
            (self.slots.len() - 1) as u32
        }
    }

    /// Drops a frame, counting a data frame's bytes.
    pub(super) fn drop_frame(&mut self, hop: Hop) {
        if !hop.pfc() {
            self.report.counters.dropped_bytes += hop.wire as u64;
        }
        self.free_frame(hop.fid);
    }

    pub(super) fn free_frame(&mut self, id: u32) {
        let slot = &mut self.slots[id as usize];
        if slot.frame.take().is_some() {
            std::mem::replace(&mut slot.bytes, Datagram::none()).recycle(&mut self.bufs);
        }
        self.free_frames.push(id);
    }

    pub(super) fn frame(&self, id: u32) -> &Frame {
        self.slots[id as usize].frame.as_ref().expect("live frame")
    }

    /// A copy of frame `fid` (a duplicate on a faulty link).
    pub(super) fn clone_frame(&mut self, fid: u32) -> u32 {
        let copy = *self.frame(fid);
        let bytes = self.slots[fid as usize].bytes.copy(&mut self.bufs);
        let id = self.alloc_frame(copy, bytes);
        if H::ACTIVE {
            self.txs[id as usize] = self.txs[fid as usize];
        }
        id
    }

    pub(super) fn pfc_frame(&mut self, prio: u8, quanta: u16) -> Hop {
        let wire = self.scn.framing.pfc_wire_len();
        let f = Frame { pfc: true, wire, src_ip: 0, dst_ip: 0, sport: 0, dport: 0 };
        let fid = self.alloc_frame(f, Datagram::none());
        Hop { fid, hash: quanta as u32, dst: 0, wire: wire as u16, in_port: 0, bits: Hop::PFC | (prio & 7) }
    }
}
