//! RoCEv2 on the wire: zero-copy header views, `Repr` structs that parse from
//! and emit into them, the BTH opcode table, the ICRC, 24-bit PSN arithmetic
//! and pcap I/O.
//!
//! ```text
//! Eth [802.1Q] | IPv4/IPv6 | UDP(4791) | BTH | ext headers | payload | pad | ICRC
//! Eth [802.1Q] | GRH (RoCEv1, EtherType 0x8915)  | BTH | ...
//! ```
//!
//! Each header has a view (`Bth<T: AsRef<[u8]>>`, with `new_checked`) and a
//! `Repr` (`BthRepr::parse` / `emit`); `RocePacketRepr` is the transport
//! packet (`Display` prints it on one line, as `roce pcap decode` does) and
//! `RoceFrameRepr` the whole frame. `EncapRepr` is the IP/UDP
//! encapsulation of a datagram: its headers, the ICRC they give, the frame
//! around it. Every malformation is a [`WireError`]; nothing here panics on
//! input bytes.
#![forbid(unsafe_code)]

mod display;
mod field;
mod view;

pub mod aeth;
pub mod atomic;
pub mod bth;
pub mod cm;
pub mod cma;
pub mod deth;
pub mod encap;
pub mod error;
pub mod ethernet;
pub mod ext;
pub mod frame;
pub mod grh;
pub mod icrc;
pub mod ipv4;
pub mod ipv6;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod pcap;
pub mod psn;
pub mod reth;
pub mod udp;

pub use aeth::{AethRepr, NakCode, Syndrome};
pub use atomic::AtomicEthRepr;
pub use bth::BthRepr;
pub use cm::{CmMadRepr, CmMsgRepr};
pub use cma::CmaHdrRepr;
pub use deth::DethRepr;
pub use encap::EncapRepr;
pub use error::{Header, WireError};
pub use ethernet::{EthernetRepr, VlanTag};
pub use ext::FethRepr;
pub use frame::{NetRepr, ParseOptions, RoceFrameRepr};
pub use grh::GrhRepr;
pub use icrc::NetHeader;
pub use ipv4::Ipv4Repr;
pub use ipv6::Ipv6Repr;
pub use mad::MadRepr;
pub use opcode::{HeaderSet, OpcodeInfo, Operation, Position, Transport};
pub use packet::{ExtHeaders, RocePacket, RocePacketRepr};
pub use psn::Psn;
pub use reth::RethRepr;
pub use udp::{UdpRepr, ROCE_PORT};
