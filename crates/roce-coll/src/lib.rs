//! Collectives (all-reduce, reduce-scatter, all-gather, broadcast, reduce,
//! all-to-all, barrier) as sans-IO state machines over a small verbs-shaped
//! [`Transport`]: no threads, sockets or clocks inside; time comes from the
//! transport, so the same code runs over real `roce` devices and inside
//! the fabric simulator.

// The schedule executor that uses these items lands next.
#![allow(dead_code)]

pub mod cost;
mod engine;
mod error;
mod header;
mod transport;
mod types;

// The driver side: real processes over `roce` devices.
#[cfg(feature = "udp")]
mod comm;
pub mod launch;
#[cfg(feature = "udp")]
pub mod net;
pub mod rendezvous;

#[cfg(feature = "udp")]
pub use comm::{CommConfig, CommError, Communicator, Element};
pub use engine::{Buffers, Config, Engine, Poll};
pub use error::{Error, ParseError, TransportError, Waiting};
pub use rendezvous::RendezvousConfig;
pub use transport::{Completion, Layout, Transport};
pub use types::{Algo, DataType, OpDesc, OpKind, RedOp};

/// Bytes of the header at the start of every data message.
pub const HEADER_BYTES: usize = 64;
