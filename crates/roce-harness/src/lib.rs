//! The fault-injection harness of the roce engine: simulated hosts, each
//! running a `roce_proto::Engine`, on the fabric simulator's seeded
//! discrete-event network with faults, driven by random verbs workloads
//! and judged by a shadow model (TigerBeetle's VOPR is the model).
//!
//! ```text
//! seed ─┬─ workload::generate ─> Plan ─ workload::setup ─> engines, MRs, QPs
//!       ├─ workload::mix (DCQCN + CNPs, encryption, blackouts, heal time)
//!       └─ net (links: delay, jitter, loss, reorder, duplicate, corrupt)
//! application: posts WRs at their   <──  Network::run (the fabric
//! times, polls CQs, plays the mix          simulator's event loop, a mesh)
//! check::verify: liveness, counters, completions, atomics, UD, every byte
//! ```
//!
//! [`run_seed`] runs one seed and returns a [`Report`] or a [`Failure`]
//! naming the seed; [`soak()`] runs a range of seeds. The same seed always
//! gives the same packet trace (see [`net::Trace::fingerprint`]), which can
//! be written as a pcap with [`net::pcap::write_pcap`]. For directed tests,
//! [`scenario`] builds a connected RC pair and [`net::Rule`]s drop, delay or
//! duplicate exactly the packets a test is about.

pub mod application;
pub mod check;
pub mod exhaustion;
pub mod net;
pub mod rng;
pub mod run;
pub mod scenario;
pub mod soak;
pub mod workload;

pub use run::{run_seed, simulate, Config, Failure, MixReport, Report, Run};
pub use soak::{soak, Drawn, SoakOptions, Summary, Totals};
