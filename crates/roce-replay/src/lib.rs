//! Replay of recorded training traces (the straggler traces of Lin et al.,
//! "Understanding Stragglers in Large Model Training Using What-if
//! Analysis", OSDI'25): the operation graph, its replay with recorded,
//! straggler-free or modelled durations, and the what-if slowdown S.
//!
//! * [`trace`]: reading (and writing) the parquet trace format.
//! * [`meta`]: the job's parallelism.
//! * [`graph`]: per-step operation graphs (the dependency model).
//! * [`replay`]: replaying a graph with given costs.
//! * [`whatif`]: base / no-delay / straggler-free step times, S and its
//!   decompositions.
//! * [`comm`]: communication from a model instead of the trace.

pub mod comm;
pub mod error;
pub mod graph;
pub mod meta;
pub mod replay;
pub mod trace;
pub mod whatif;

pub use error::ReplayError;
pub use graph::Job;
pub use meta::JobMeta;
pub use trace::{read_trace, write_trace, Op, OpKind};
