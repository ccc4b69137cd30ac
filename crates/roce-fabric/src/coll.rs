//! Collectives on the simulated fabric: the real `roce-coll` algorithms,
//! one rank per host, each host running the real `roce-proto` engine
//! behind the fabric's NIC model (issue: collectives in the fabric
//! simulator).
//!
//! * [`workload`]: the TOML workload (`[[collective]]`, topology, faults).
//! * [`transport`]: `roce_coll::Transport` on a host's engine.
//! * [`agg`]: in-network all-reduce, the switches aggregating.
//! * [`background`]: flows sharing the fabric with the collectives.
//! * [`run`]: the driver (compute phases as timed delays, iterations,
//!   the figures nccl-tests prints plus iteration percentiles).

pub mod agg;
pub mod background;
pub mod run;
pub mod transport;
pub mod workload;

pub use run::{cost_params, fabric_of, run, CollResult, DataCheck, Half, SizeRow};
pub use workload::{CollSpec, Compute, SimAlgo, Topology, Workload};

use crate::scenario::{ScenarioError, Time};

/// Why a collective run failed.
#[derive(Debug, thiserror::Error)]
pub enum CollSimError {
    #[error(transparent)]
    Workload(#[from] ScenarioError),
    #[error(transparent)]
    Topology(#[from] crate::topo::TopoError),
    #[error(transparent)]
    Fabric(#[from] crate::sim::FabricError),
    #[error("the workload has no collective number {0}")]
    NoSuchCollective(usize),
    #[error("{ranks} ranks on a fabric of {hosts} hosts: need 2..={hosts}")]
    Ranks { ranks: usize, hosts: usize },
    #[error("{what}: rank {rank} is not one of the {ranks} ranks")]
    FaultRank { what: &'static str, rank: usize, ranks: usize },
    #[error("collectives: {0}")]
    Coll(roce_coll::Error),
    #[error("rank {rank}: {source}")]
    Rank {
        rank: usize,
        #[source]
        source: roce_coll::Error,
    },
    #[error("{who}: {source}")]
    Aggregation {
        who: String,
        #[source]
        source: agg::AggError,
    },
    #[error(transparent)]
    AggTree(#[from] agg::TreeError),
    #[error(transparent)]
    Background(#[from] background::BackgroundError),
    #[error("nothing left to simulate at {at_ps} ps and the ranks are not done")]
    Stuck { at_ps: Time },
}

#[cfg(test)]
mod tests;
