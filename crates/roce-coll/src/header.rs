//! The header at the start of every data message, and the immediate.
//!
//! Every data message carries the full description of the call (operation,
//! type, reduction, count, root, algorithm, sequence number), so ranks
//! that disagree on the call are detected by the first message that
//! crosses between them, not only in the rendezvous; and a late or foreign
//! message is recognised by its sequence number and refused, never
//! reduced into the wrong call.
//!
//! The 32-bit immediate (IBTA vol. 1 §9.4.3, carried by WRITE WITH
//! IMMEDIATE) says what arrived without reading the slot:
//! bit 31 = 1 for a credit, 0 for data; bits 30..16 = low 15 bits of the
//! sequence number (data) or 0 (credit); bits 15..0 = slot index.

use crate::types::{Algo, DataType, OpDesc, OpKind, RedOp};
use crate::HEADER_BYTES;

const MAGIC: u32 = 0x4C4F_4352; // "RCOL" little-endian
const CREDIT: u32 = 1 << 31;

/// What an immediate says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Imm {
    Data { seq15: u32, slot: usize },
    Credit { slot: usize },
}

impl Imm {
    pub(crate) fn data(seq: u32, slot: usize) -> u32 {
        ((seq & 0x7fff) << 16) | slot as u32
    }
    pub(crate) fn credit(slot: usize) -> u32 {
        CREDIT | slot as u32
    }
    pub(crate) fn parse(imm: u32) -> Imm {
        let slot = (imm & 0xffff) as usize;
        if imm & CREDIT != 0 {
            Imm::Credit { slot }
        } else {
            Imm::Data { seq15: (imm >> 16) & 0x7fff, slot }
        }
    }
}

/// The decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub seq: u32,
    pub op: u8,
    pub dtype: u8,
    pub redop: u8,
    pub algo: u8,
    pub sender: u32,
    pub root: u32,
    pub step: u32,
    pub count: u64,
    /// Index of this message among all the messages of the call from the
    /// sender to the receiver.
    pub msg: u32,
    /// Payload elements.
    pub elems: u32,
}

impl Header {
    pub(crate) fn for_call(desc: &OpDesc, seq: u32, sender: usize) -> Header {
        Header {
            seq,
            op: desc.op.code(),
            dtype: desc.dtype.code(),
            redop: desc.redop.code(),
            algo: desc.algo.code(),
            sender: sender as u32,
            root: desc.root as u32,
            step: 0,
            count: desc.count as u64,
            msg: 0,
            elems: 0,
        }
    }

    pub(crate) fn write(&self, out: &mut [u8]) {
        let out = &mut out[..HEADER_BYTES];
        out.fill(0);
        out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4..8].copy_from_slice(&self.seq.to_le_bytes());
        out[8] = self.op;
        out[9] = self.dtype;
        out[10] = self.redop;
        out[11] = self.algo;
        out[12..16].copy_from_slice(&self.sender.to_le_bytes());
        out[16..20].copy_from_slice(&self.root.to_le_bytes());
        out[20..24].copy_from_slice(&self.step.to_le_bytes());
        out[24..32].copy_from_slice(&self.count.to_le_bytes());
        out[32..36].copy_from_slice(&self.msg.to_le_bytes());
        out[36..40].copy_from_slice(&self.elems.to_le_bytes());
    }

    /// Decodes a header; `None` if the magic is wrong or the slot too short.
    pub(crate) fn read(b: &[u8]) -> Option<Header> {
        if b.len() < HEADER_BYTES {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        if u32_at(0) != MAGIC {
            return None;
        }
        Some(Header {
            seq: u32_at(4),
            op: b[8],
            dtype: b[9],
            redop: b[10],
            algo: b[11],
            sender: u32_at(12),
            root: u32_at(16),
            step: u32_at(20),
            count: u64::from_le_bytes(b[24..32].try_into().unwrap()),
            msg: u32_at(32),
            elems: u32_at(36),
        })
    }

    /// The first field where `self` (ours) and `theirs` describe different
    /// calls, with both values rendered.
    pub(crate) fn mismatch(&self, theirs: &Header) -> Option<(&'static str, String, String)> {
        let op =
            |c: u8| OpKind::ALL.iter().find(|o| o.code() == c).map_or(format!("?{c}"), |o| o.to_string());
        let dt =
            |c: u8| DataType::ALL.iter().find(|o| o.code() == c).map_or(format!("?{c}"), |o| o.to_string());
        let ro = |c: u8| RedOp::ALL.iter().find(|o| o.code() == c).map_or(format!("?{c}"), |o| o.to_string());
        let al = |c: u8| {
            Algo::CONCRETE
                .iter()
                .chain([Algo::Auto].iter())
                .find(|o| o.code() == c)
                .map_or(format!("?{c}"), |o| o.to_string())
        };
        if self.op != theirs.op {
            return Some(("operation", op(self.op), op(theirs.op)));
        }
        if self.dtype != theirs.dtype {
            return Some(("data type", dt(self.dtype), dt(theirs.dtype)));
        }
        if self.count != theirs.count {
            return Some(("count", self.count.to_string(), theirs.count.to_string()));
        }
        if self.redop != theirs.redop {
            return Some(("reduction", ro(self.redop), ro(theirs.redop)));
        }
        if self.root != theirs.root {
            return Some(("root", self.root.to_string(), theirs.root.to_string()));
        }
        if self.algo != theirs.algo {
            return Some(("algorithm", al(self.algo), al(theirs.algo)));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_mismatch_names_the_field() {
        let d = OpDesc::new(OpKind::AllReduce, DataType::F32, 1000).algo(Algo::Ring);
        let mut h = Header::for_call(&d, 7, 3);
        h.msg = 5;
        h.elems = 42;
        h.step = 2;
        let mut buf = [0u8; 64];
        h.write(&mut buf);
        assert_eq!(Header::read(&buf), Some(h));
        let other = Header::for_call(&d.redop(RedOp::Max), 7, 1);
        assert_eq!(h.mismatch(&other), Some(("reduction", "sum".into(), "max".into())));
        let other = Header::for_call(&OpDesc { count: 999, ..d }, 7, 1);
        assert_eq!(h.mismatch(&other), Some(("count", "1000".into(), "999".into())));
        buf[0] ^= 1;
        assert_eq!(Header::read(&buf), None);
    }

    #[test]
    fn imm_round_trips() {
        assert_eq!(Imm::parse(Imm::data(0x1234_5678, 17)), Imm::Data { seq15: 0x5678, slot: 17 });
        assert_eq!(Imm::parse(Imm::credit(255)), Imm::Credit { slot: 255 });
    }
}
