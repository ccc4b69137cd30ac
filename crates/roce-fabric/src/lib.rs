//! roce-fabric: a deterministic discrete-event model of a RoCE fabric.
//!
//! Hosts run the real `roce-proto` engine behind a NIC model (line rate,
//! one egress queue per priority, PFC reaction); switches have a shared
//! buffer with per-(port, priority) ingress accounting, PFC XOFF/XON with
//! headroom, RED-style ECN marking at egress, strict or DWRR scheduling
//! and flow-hash ECMP; links have a rate, a propagation delay and optional
//! loss, and carry Ethernet frames (data and PFC) store-and-forward.
//!
//! Time is integer picoseconds and all randomness comes from the
//! scenario's seed, so one seed gives one run, byte for byte.

pub mod builtin;
pub mod coll;
pub mod compare;
mod datagram;
mod deadlock;
pub mod faults;
pub mod hooks;
pub mod hpcc;
pub mod mesh;
pub mod plan;
pub mod plot;
mod queue;
pub mod report;
pub mod rng;
mod routing;
pub mod scenario;
pub mod sim;
pub mod summary;
pub mod sweep;
mod switch;
pub mod toml_scenario;
pub mod topo;

pub use report::{
    Counters, Ending, FctRecord, HeadroomUse, PfcRecord, QueueRef, QueueSample, RateSample, Report,
};
pub use scenario::*;
pub use sim::{simulate, FabricError, Progress};
