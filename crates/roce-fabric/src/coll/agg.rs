//! In-network all-reduce: the switches aggregate, in the manner of SHARP's
//! streaming aggregation trees (Graham et al., ISC'20), with SwitchML's
//! self-clocked pool of aggregation slots (Sapio et al., NSDI'21).
//!
//! * **The tree** ([`tree`]): one aggregation node (AN) per switch of a
//!   tree spanning the job's switches, in the switch, at the sum of its
//!   ports' rates.
//! * **The slot pool**: every AN holds `slots` aggregation slots of
//!   `slot_bytes` (the workload's `slots` and `slot_bytes`, so the pool is
//!   a knob). A rank's buffer is cut into chunks of `slot_bytes -`
//!   [`HEADER_BYTES`]; chunk `c` uses slot `c mod slots` at every level.
//! * **The protocol**, per chunk: each rank writes its chunk to its leaf
//!   AN ([`Member`]); an AN that has every child's chunk for a slot
//!   reduces them (in its children's order, so every run and every rank
//!   gets the same bits) and writes the partial result to its parent; the
//!   root's result is the answer, and every AN writes it down to each of
//!   its children (the multicast). A rank writes chunk `c + slots` into
//!   the slot only once chunk `c`'s result came back: the pool is
//!   **self-clocked**, as SwitchML's is, and no credits flow. So the pool
//!   bounds the bytes in flight per rank to `slots x slot_bytes`; a pool
//!   smaller than the tree's round trip (up and down every level, one
//!   chunk's serialisation per level: an AN forwards a whole chunk, the
//!   model's store-and-forward unit) leaves the links idle between chunks.
//! * **Numbers**: the element type itself (as SHARP on Quantum switches:
//!   16/32/64-bit integers and floats, bf16), reduced with the library's
//!   kernels ([`roce_coll::reduce`]). Not SwitchML's fixed point: floats
//!   are summed as floats, in a fixed order, once per tree level. `avg`
//!   sums in the network and divides at the ranks.
//! * **Loss recovery**: each hop (rank to AN, AN to AN) is a reliable
//!   connection of the real NIC engine, as SHARP's AN is an InfiniBand
//!   transport endpoint: a lost packet is retransmitted by the transport
//!   (IBTA vol. 1 §9.7 go-back-N), and nothing above it changes.
//! * **Traffic**: every rank sends `S` and receives `S` once, against
//!   `2(n-1)/n x S` each way for the host ring, so the bound is about 2x
//!   the ring for large `n`; the latency is `2 x depth` chunk hops against
//!   the ring's `2(n-1)` steps.
//!
//! Each message is an RDMA WRITE WITH IMMEDIATE of a slot (the
//! collectives' [`roce_coll::Transport`], on the simulator's hosts): a
//! [`HEADER_BYTES`]-byte header naming the call, chunk and type, then the
//! chunk's bytes. The immediate names the slot (so the transport, which
//! keeps host copies of the slots, knows where it landed) and the low bits
//! of the chunk.

pub mod member;
pub mod node;
pub mod tree;

pub use member::Member;
pub use node::Aggregator;
pub use tree::{AggTree, Child, TreeError};

use roce_coll::{DataType, Layout, RedOp, TransportError, HEADER_BYTES};

const MAGIC: u32 = 0x5048_5352; // "RSHP" little-endian

/// The immediate of chunk `chunk` in slot `slot`: the collectives' data
/// immediate (bit 31 clear, slot in bits 15..0).
fn imm(chunk: usize, slot: usize) -> u32 {
    (((chunk as u32) & 0x7fff) << 16) | slot as u32
}

/// The chunk bytes one slot carries: `slot_bytes` less the header, a
/// multiple of 64 (so of every element size: 1, 2, 4 or 8 bytes).
pub fn chunk_bytes(layout: &Layout, dtype: DataType) -> usize {
    debug_assert_eq!(64 % dtype.size(), 0);
    (layout.slot_bytes - HEADER_BYTES) / 64 * 64
}

/// Every message's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The call's number on this communicator (from 1).
    pub seq: u32,
    pub chunk: u32,
    pub chunks: u32,
    /// Payload bytes.
    pub len: u32,
    pub dtype: DataType,
    pub redop: RedOp,
    /// Elements per rank.
    pub count: u64,
}

impl Header {
    const LEN: usize = 32;

    pub fn emit(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4..8].copy_from_slice(&self.seq.to_le_bytes());
        out[8..12].copy_from_slice(&self.chunk.to_le_bytes());
        out[12..16].copy_from_slice(&self.chunks.to_le_bytes());
        out[16..20].copy_from_slice(&self.len.to_le_bytes());
        out[20] = DataType::ALL.iter().position(|&d| d == self.dtype).expect("a known type") as u8;
        out[21] = RedOp::ALL.iter().position(|&r| r == self.redop).expect("a known reduction") as u8;
        out[22..24].fill(0);
        out[24..32].copy_from_slice(&self.count.to_le_bytes());
    }

    /// A header read from a slot; `slot_bytes` bounds the length.
    pub fn parse(b: &[u8], slot_bytes: usize) -> Result<Header, String> {
        if b.len() < Header::LEN {
            return Err(format!("{} bytes: shorter than a header", b.len()));
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        if u32_at(0) != MAGIC {
            return Err(format!("bad magic {:#010x}", u32_at(0)));
        }
        let dtype = *DataType::ALL.get(b[20] as usize).ok_or(format!("unknown type code {}", b[20]))?;
        let redop = *RedOp::ALL.get(b[21] as usize).ok_or(format!("unknown reduction code {}", b[21]))?;
        let h = Header {
            seq: u32_at(4),
            chunk: u32_at(8),
            chunks: u32_at(12),
            len: u32_at(16),
            dtype,
            redop,
            count: u64::from_le_bytes(b[24..32].try_into().expect("8 bytes")),
        };
        if h.chunk >= h.chunks {
            return Err(format!("chunk {} of {}", h.chunk, h.chunks));
        }
        if h.len as usize > slot_bytes - HEADER_BYTES || h.len as usize % dtype.size() != 0 {
            return Err(format!("a {}-byte chunk of {dtype:?}", h.len));
        }
        Ok(h)
    }
}

/// Why an aggregation failed.
#[derive(Debug, thiserror::Error)]
pub enum AggError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// No result for `waited_ns` (the call's deadline).
    #[error("call {seq}: {got} of {chunks} chunks back from the switch, nothing for {waited_ns} ns")]
    Timeout { seq: u32, got: usize, chunks: usize, waited_ns: u64 },
    /// A message that breaks the protocol.
    #[error("a bad message from endpoint {from}: {why}")]
    Malformed { from: usize, why: String },
    /// Children of one aggregation node sent different calls to one slot.
    #[error("ranks disagree on the call: {0}")]
    Disagree(String),
}

#[cfg(test)]
mod tests;
