//! The BTH opcode table as data (IBTA vol. 1 §9.2, Table 38 "OpCode field";
//! Annex A17 §A17.9.3 for the RoCEv2 CNP).
//!
//! `OpCode[7:5]` selects the transport (000 RC, 001 UC, 011 UD; 100 with
//! `OpCode[4:0]` = 00001 is the RoCEv2 Congestion Notification Packet) and
//! `OpCode[4:0]` the operation. Each row says which extension headers follow the
//! BTH, in wire order, whether the packet is the first, middle, last or only
//! packet of a message, and whether it carries payload and immediate data.
//! RD and XRC are not implemented by RoCE devices and are treated as unknown.

use crate::error::Header;

/// Transport service selected by `OpCode[7:5]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Unreliable Datagram.
    Ud,
    /// RoCEv2 Congestion Notification Packet (opcode 0x81).
    Cnp,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
        }
    }
}

/// The operation an opcode belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Send,
    RdmaWrite,
    RdmaReadRequest,
    RdmaReadResponse,
    Acknowledge,
    AtomicAcknowledge,
    CompareSwap,
    FetchAdd,
    Flush,
    AtomicWrite,
    Cnp,
}

/// Position of a packet within a message (IBTA §9.4: First, Middle, Last, Only).
/// Single-packet operations without a payload sequence (READ request, ACK,
/// atomics, CNP) are `Only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

impl Position {
    /// First or Only: the packet starts a message.
    pub fn starts_message(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// Last or Only: the packet ends a message.
    pub fn ends_message(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// A set of extension headers, one bit each, iterated in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u16);

impl HeaderSet {
    pub const EMPTY: HeaderSet = HeaderSet(0);
    pub const DETH: HeaderSet = HeaderSet(1 << 0);
    pub const FETH: HeaderSet = HeaderSet(1 << 1);
    pub const RETH: HeaderSet = HeaderSet(1 << 2);
    pub const ATOMIC_ETH: HeaderSet = HeaderSet(1 << 3);
    pub const AETH: HeaderSet = HeaderSet(1 << 4);
    pub const ATOMIC_ACK_ETH: HeaderSet = HeaderSet(1 << 5);
    pub const IMM_DT: HeaderSet = HeaderSet(1 << 6);
    pub const IETH: HeaderSet = HeaderSet(1 << 7);
    pub const CNP: HeaderSet = HeaderSet(1 << 8);

    /// Wire order of extension headers after the BTH (IBTA §9.2 header order:
    /// DETH, then FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH).
    pub const ORDER: [(HeaderSet, Header, usize); 9] = [
        (HeaderSet::DETH, Header::Deth, crate::deth::HEADER_LEN),
        (HeaderSet::FETH, Header::Feth, crate::ext::FETH_LEN),
        (HeaderSet::RETH, Header::Reth, crate::reth::HEADER_LEN),
        (HeaderSet::ATOMIC_ETH, Header::AtomicEth, crate::atomic::ATOMIC_ETH_LEN),
        (HeaderSet::AETH, Header::Aeth, crate::aeth::HEADER_LEN),
        (HeaderSet::ATOMIC_ACK_ETH, Header::AtomicAckEth, crate::atomic::ATOMIC_ACK_ETH_LEN),
        (HeaderSet::IMM_DT, Header::ImmDt, crate::ext::IMM_DT_LEN),
        (HeaderSet::IETH, Header::Ieth, crate::ext::IETH_LEN),
        (HeaderSet::CNP, Header::Cnp, crate::ext::CNP_PAD_LEN),
    ];

    pub const fn union(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 | other.0)
    }
    pub const fn contains(self, other: HeaderSet) -> bool {
        self.0 & other.0 == other.0
    }
    /// Total length in bytes of the headers in the set (a sum over its
    /// bits: every packet asks, on send and on receive).
    pub fn len_bytes(self) -> usize {
        let (mut bits, mut n) = (self.0, 0);
        while bits != 0 {
            // ORDER's row i is bit i
            n += HeaderSet::ORDER[bits.trailing_zeros() as usize].2;
            bits &= bits - 1;
        }
        n
    }
    /// The headers in wire order.
    pub fn iter(self) -> impl Iterator<Item = (HeaderSet, Header, usize)> {
        HeaderSet::ORDER.into_iter().filter(move |(h, _, _)| self.contains(*h))
    }
}

/// One row of the opcode table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    pub code: u8,
    /// Name as in the IBTA table, prefixed by the transport: `RC_SEND_FIRST`.
    pub name: &'static str,
    pub transport: Transport,
    pub operation: Operation,
    pub position: Position,
    /// Extension headers after the BTH.
    pub headers: HeaderSet,
    /// The packet carries a data payload (possibly empty on Only packets).
    pub payload: bool,
    /// The packet carries ImmDt.
    pub immediate: bool,
    /// The packet carries an IETH (SEND with invalidate).
    pub invalidate: bool,
    /// Sent by the requester (true) or the responder (false).
    pub request: bool,
}

impl OpcodeInfo {
    /// Bytes of the BTH and this opcode's extension headers: where the
    /// payload starts.
    #[inline]
    pub fn header_len(&self) -> usize {
        crate::bth::HEADER_LEN + self.headers.len_bytes()
    }
}

const fn row(
    code: u8,
    name: &'static str,
    operation: Operation,
    position: Position,
    headers: HeaderSet,
    payload: bool,
) -> OpcodeInfo {
    let transport = match code >> 5 {
        0 => Transport::Rc,
        1 => Transport::Uc,
        3 => Transport::Ud,
        _ => Transport::Cnp,
    };
    let request = !matches!(
        operation,
        Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
    );
    OpcodeInfo {
        code,
        name,
        transport,
        operation,
        position,
        headers,
        payload,
        immediate: headers.contains(HeaderSet::IMM_DT),
        invalidate: headers.contains(HeaderSet::IETH),
        request,
    }
}

use HeaderSet as H;
use Operation as Op;
use Position as P;

const RETH_IMM: HeaderSet = H::RETH.union(H::IMM_DT);
const DETH_IMM: HeaderSet = H::DETH.union(H::IMM_DT);
const AETH_ATOMIC_ACK: HeaderSet = H::AETH.union(H::ATOMIC_ACK_ETH);
const FETH_RETH: HeaderSet = H::FETH.union(H::RETH);

/// Every opcode this stack knows, sorted by code.
pub static OPCODES: [OpcodeInfo; 40] = [
    // Reliable Connected (000xxxxx)
    row(0x00, "RC_SEND_FIRST", Op::Send, P::First, H::EMPTY, true),
    row(0x01, "RC_SEND_MIDDLE", Op::Send, P::Middle, H::EMPTY, true),
    row(0x02, "RC_SEND_LAST", Op::Send, P::Last, H::EMPTY, true),
    row(0x03, "RC_SEND_LAST_WITH_IMMEDIATE", Op::Send, P::Last, H::IMM_DT, true),
    row(0x04, "RC_SEND_ONLY", Op::Send, P::Only, H::EMPTY, true),
    row(0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", Op::Send, P::Only, H::IMM_DT, true),
    row(0x06, "RC_RDMA_WRITE_FIRST", Op::RdmaWrite, P::First, H::RETH, true),
    row(0x07, "RC_RDMA_WRITE_MIDDLE", Op::RdmaWrite, P::Middle, H::EMPTY, true),
    row(0x08, "RC_RDMA_WRITE_LAST", Op::RdmaWrite, P::Last, H::EMPTY, true),
    row(0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", Op::RdmaWrite, P::Last, H::IMM_DT, true),
    row(0x0a, "RC_RDMA_WRITE_ONLY", Op::RdmaWrite, P::Only, H::RETH, true),
    row(0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", Op::RdmaWrite, P::Only, RETH_IMM, true),
    row(0x0c, "RC_RDMA_READ_REQUEST", Op::RdmaReadRequest, P::Only, H::RETH, false),
    row(0x0d, "RC_RDMA_READ_RESPONSE_FIRST", Op::RdmaReadResponse, P::First, H::AETH, true),
    row(0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", Op::RdmaReadResponse, P::Middle, H::EMPTY, true),
    row(0x0f, "RC_RDMA_READ_RESPONSE_LAST", Op::RdmaReadResponse, P::Last, H::AETH, true),
    row(0x10, "RC_RDMA_READ_RESPONSE_ONLY", Op::RdmaReadResponse, P::Only, H::AETH, true),
    row(0x11, "RC_ACKNOWLEDGE", Op::Acknowledge, P::Only, H::AETH, false),
    row(0x12, "RC_ATOMIC_ACKNOWLEDGE", Op::AtomicAcknowledge, P::Only, AETH_ATOMIC_ACK, false),
    row(0x13, "RC_COMPARE_SWAP", Op::CompareSwap, P::Only, H::ATOMIC_ETH, false),
    row(0x14, "RC_FETCH_ADD", Op::FetchAdd, P::Only, H::ATOMIC_ETH, false),
    row(0x16, "RC_SEND_LAST_WITH_INVALIDATE", Op::Send, P::Last, H::IETH, true),
    row(0x17, "RC_SEND_ONLY_WITH_INVALIDATE", Op::Send, P::Only, H::IETH, true),
    row(0x1c, "RC_FLUSH", Op::Flush, P::Only, FETH_RETH, false),
    row(0x1d, "RC_ATOMIC_WRITE", Op::AtomicWrite, P::Only, H::RETH, true),
    // Unreliable Connected (001xxxxx)
    row(0x20, "UC_SEND_FIRST", Op::Send, P::First, H::EMPTY, true),
    row(0x21, "UC_SEND_MIDDLE", Op::Send, P::Middle, H::EMPTY, true),
    row(0x22, "UC_SEND_LAST", Op::Send, P::Last, H::EMPTY, true),
    row(0x23, "UC_SEND_LAST_WITH_IMMEDIATE", Op::Send, P::Last, H::IMM_DT, true),
    row(0x24, "UC_SEND_ONLY", Op::Send, P::Only, H::EMPTY, true),
    row(0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", Op::Send, P::Only, H::IMM_DT, true),
    row(0x26, "UC_RDMA_WRITE_FIRST", Op::RdmaWrite, P::First, H::RETH, true),
    row(0x27, "UC_RDMA_WRITE_MIDDLE", Op::RdmaWrite, P::Middle, H::EMPTY, true),
    row(0x28, "UC_RDMA_WRITE_LAST", Op::RdmaWrite, P::Last, H::EMPTY, true),
    row(0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", Op::RdmaWrite, P::Last, H::IMM_DT, true),
    row(0x2a, "UC_RDMA_WRITE_ONLY", Op::RdmaWrite, P::Only, H::RETH, true),
    row(0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", Op::RdmaWrite, P::Only, RETH_IMM, true),
    // Unreliable Datagram (011xxxxx)
    row(0x64, "UD_SEND_ONLY", Op::Send, P::Only, H::DETH, true),
    row(0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", Op::Send, P::Only, DETH_IMM, true),
    // RoCEv2 CNP (Annex A17.9.3): BTH + 16 reserved bytes.
    row(0x81, "CNP", Op::Cnp, P::Only, H::CNP, false),
];

/// The opcode of a RoCEv2 Congestion Notification Packet (Annex A17.9.3).
pub const CNP: u8 = 0x81;

/// Row for `code`, or `None` for a reserved or unsupported opcode.
#[inline]
pub fn lookup(code: u8) -> Option<&'static OpcodeInfo> {
    TABLE[code as usize].map(|i| &OPCODES[i as usize])
}

/// All defined opcodes.
pub fn all() -> impl Iterator<Item = &'static OpcodeInfo> {
    OPCODES.iter()
}

/// What the last (or only) packet of a message carries besides its payload:
/// the part of the opcode the operation and position do not decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suffix {
    Plain,
    /// `..._WITH_IMMEDIATE` (ImmDt).
    Immediate,
    /// `..._WITH_INVALIDATE` (IETH).
    Invalidate,
}

/// The opcode for a packet of `operation` at `position` on `transport`,
/// with `suffix` (meaningful on Last and Only packets): the table read the
/// other way round, so that senders name packets by what they are instead
/// of by hex codes. `None` where the table has no such row (a READ request
/// is always Only; UD has no Middle; ...).
#[inline]
pub fn find(
    transport: Transport,
    operation: Operation,
    position: Position,
    suffix: Suffix,
) -> Option<&'static OpcodeInfo> {
    REVERSE[reverse_key(transport, operation, position, suffix)].map(|i| &OPCODES[i as usize])
}

const fn reverse_key(t: Transport, op: Operation, pos: Position, suffix: Suffix) -> usize {
    (((t as usize * 11 + op as usize) * 4 + pos as usize) * 3) + suffix as usize
}

/// `(transport, operation, position, suffix)` -> position in `OPCODES`.
static REVERSE: [Option<u8>; 4 * 11 * 4 * 3] = {
    let mut t = [None; 4 * 11 * 4 * 3];
    let mut i = 0;
    while i < OPCODES.len() {
        let o = &OPCODES[i];
        let suffix = if o.immediate {
            Suffix::Immediate
        } else if o.invalidate {
            Suffix::Invalidate
        } else {
            Suffix::Plain
        };
        t[reverse_key(o.transport, o.operation, o.position, suffix)] = Some(i as u8);
        i += 1;
    }
    t
};

/// Dense index: opcode byte -> position in `OPCODES`.
static TABLE: [Option<u8>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < OPCODES.len() {
        t[OPCODES[i].code as usize] = Some(i as u8);
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        let mut n = 0;
        for o in all() {
            n += 1;
            assert_eq!(lookup(o.code).unwrap().code, o.code);
            assert!(o.name.starts_with(o.transport.name()), "{}", o.name);
            if o.transport == Transport::Ud {
                assert!(o.headers.contains(HeaderSet::DETH));
            }
            if o.position == Position::First && o.operation == Operation::RdmaWrite {
                assert!(o.headers.contains(HeaderSet::RETH));
            }
        }
        assert_eq!(n, 40);
        // reserved codes
        for c in [0x15u8, 0x18, 0x1e, 0x2c, 0x40, 0x60, 0x63, 0x80, 0xa0, 0xff] {
            assert!(lookup(c).is_none(), "0x{c:02x}");
        }
    }

    #[test]
    fn a_header_sets_length_is_the_sum_of_its_headers_in_wire_order() {
        for (i, (h, _, _)) in HeaderSet::ORDER.iter().enumerate() {
            assert_eq!(h.0, 1 << i, "ORDER's row {i} is bit {i}");
        }
        for bits in 0..1u16 << HeaderSet::ORDER.len() {
            let set = HeaderSet(bits);
            let sum: usize = set.iter().map(|(_, _, n)| n).sum();
            assert_eq!(set.len_bytes(), sum, "{bits:#x}");
        }
    }

    #[test]
    fn find_reads_the_table_backwards() {
        for o in all() {
            let suffix = match (o.immediate, o.invalidate) {
                (true, _) => Suffix::Immediate,
                (_, true) => Suffix::Invalidate,
                _ => Suffix::Plain,
            };
            assert_eq!(find(o.transport, o.operation, o.position, suffix).map(|r| r.code), Some(o.code));
        }
        assert!(find(Transport::Ud, Operation::Send, Position::Middle, Suffix::Plain).is_none());
        assert!(find(Transport::Rc, Operation::RdmaReadRequest, Position::First, Suffix::Plain).is_none());
        let w = find(Transport::Uc, Operation::RdmaWrite, Position::Last, Suffix::Immediate).unwrap();
        assert_eq!(w.code, 0x29);
    }

    #[test]
    fn header_lengths() {
        assert_eq!(lookup(0x0b).unwrap().headers.len_bytes(), 20);
        assert_eq!(lookup(0x12).unwrap().headers.len_bytes(), 12);
        assert_eq!(lookup(0x13).unwrap().headers.len_bytes(), 28);
        assert_eq!(lookup(0x65).unwrap().headers.len_bytes(), 12);
        assert_eq!(lookup(0x81).unwrap().headers.len_bytes(), 16);
    }
}
