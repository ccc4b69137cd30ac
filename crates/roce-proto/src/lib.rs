//! The RDMA NIC as a sans-IO state machine: verbs objects (PD, MR, CQ, QP,
//! SRQ) and the three roles of an RC/UC/UD transport, split as in Linux rxe:
//! the requester turns work requests into packets, the responder executes
//! incoming requests, the completer retires work requests from responses and
//! timers. No sockets, threads or clock: time and randomness are inputs, so a
//! seed and a sequence of calls give the same bytes every time.

mod completer;
mod cq;
mod mr;
mod qp;
mod requester;
mod res;
mod responder;
mod timers;
mod wqe;

pub mod cc;
pub mod cm;
pub mod config;
pub mod datagram;
pub mod limits;

pub mod connect;
pub mod counters;
pub mod crypto;
pub mod engine;
pub mod mem;
pub mod testkit;
pub mod time;
pub mod verbs;

pub use connect::ConnectAttr;
pub use counters::Counters;
pub use crypto::{DirectionKey, QpKeys};
pub use engine::{
    CnpConfig, DatagramMeta, Engine, EngineConfig, Hole, IcrcCheck, MrAddressing, QpRateState, Transmit,
    MAX_DATAGRAM,
};
pub use mem::{MemBuf, PayloadRef};
pub use time::{Duration, Instant};
pub use verbs::*;
