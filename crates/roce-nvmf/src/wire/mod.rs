//! The NVMe and NVMe-oF structures that cross the wire, as zero-copy views
//! over byte buffers plus `Repr` structs with `parse`/`emit` (the style of
//! `roce-wire`). Every multi-byte field is little-endian (NVMe Base 2.0,
//! 1.4 "Conventions"), unlike the InfiniBand headers around them.
//!
//! * [`Sqe`]: the 64-byte submission queue entry (a command capsule without
//!   its in-capsule data), NVMe Base 2.0 Fig. 88/92.
//! * [`Cqe`]: the 16-byte completion queue entry (a response capsule),
//!   Fig. 90.
//! * [`Sgl`]: the one SGL descriptor in an NVMe/RDMA command (NVMe RDMA
//!   Transport 1.0, 3.3: keyed SGL data block or in-capsule offset).
//! * [`fabrics`]: Connect and its data, Property Get/Set, the RDMA CM
//!   private data of NVMe/RDMA (RDMA Transport 1.0, Figs. 5-7).
//! * [`identify`]: Identify data structures and the discovery log page.

pub mod fabrics;
pub mod identify;

mod sqe;
mod status;

pub use sqe::{Cqe, Sgl, SglError, Sqe, CQE_LEN, FLAGS_SGL, SQE_LEN};
pub use status::Status;

/// Admin command opcodes (NVMe Base 2.0, Fig. 138).
pub mod admin {
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0A;
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    pub const KEEP_ALIVE: u8 = 0x18;
    /// Fabrics commands (Connect, Property Get/Set) share this opcode;
    /// the command type is byte 4 ([`super::fabrics::fctype`]).
    pub const FABRICS: u8 = 0x7F;
}

/// NVM command set I/O opcodes (NVM Command Set 1.0, Fig. 17).
pub mod io {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MANAGEMENT: u8 = 0x09;
}

/// Feature identifiers (NVMe Base 2.0, Fig. 275).
pub mod feature {
    pub const ARBITRATION: u8 = 0x01;
    pub const POWER_MANAGEMENT: u8 = 0x02;
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    pub const INTERRUPT_COALESCING: u8 = 0x08;
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
    pub const HOST_IDENTIFIER: u8 = 0x81;
}

/// Log page identifiers (NVMe Base 2.0, Fig. 202).
pub mod log {
    pub const ERROR: u8 = 0x01;
    pub const SMART: u8 = 0x02;
    pub const FIRMWARE_SLOT: u8 = 0x03;
    pub const CHANGED_NAMESPACES: u8 = 0x04;
    pub const COMMAND_EFFECTS: u8 = 0x05;
    pub const DISCOVERY: u8 = 0x70;
}

/// The well-known NQN of discovery controllers (NVMe Base 2.0, 4.5).
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// NQNs are at most 223 bytes of UTF-8 (NVMe Base 2.0, 4.5), stored in
/// 256-byte NUL-padded fields.
pub const NQN_MAX: usize = 223;

pub(crate) fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A NUL-padded ASCII/UTF-8 field as a string: up to the first NUL;
/// `None` if that is not UTF-8.
pub fn field_str(b: &[u8]) -> Option<&str> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    std::str::from_utf8(&b[..end]).ok()
}

/// Writes `s` into a fixed field, padded with `pad` (NUL for NQNs, space
/// for the Identify strings), cut at the field's length.
pub fn put_str(b: &mut [u8], s: &str, pad: u8) {
    let n = s.len().min(b.len());
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
    b[n..].fill(pad);
}
