//! Parameter sweeps: one base scenario, a grid of settings over it, and
//! one row of summary figures per grid point.
//!
//! A grid file names the base (a built-in scenario, a scenario file or an
//! HPCC run), optionally a generated workload that replaces its flows, and
//! the axes: each a key of the scenario and the values it takes. The
//! points are every combination of the axes' values (the last axis
//! varies fastest), numbered from 0. Every point is a deterministic run,
//! so its row is the same wherever it runs: on one machine with several
//! jobs, or as a task of a Slurm job array.
//!
//! # The format
//!
//! ```toml
//! name = "incast-ecn"               # default: the grid file's stem
//! skip_invalid = false              # true: a point whose settings the
//!                                   # scenario rejects (kmin > kmax, say)
//!                                   # gets a row saying why, not an error
//!
//! [base]                            # exactly one of builtin, scenario, hpcc_run
//! builtin = "incast"
//! # scenario = "my-fabric.toml"     # paths are relative to the grid file
//! # hpcc_run = "runs/fat_ws30_dcqcn"
//! # hpcc_topology = "topologies/fat320_hpcc.txt"   # with hpcc_run
//! # max_flows = 400                 # only the base's first N flows
//!
//! [workload]                        # optional: Poisson arrivals at every
//! cdf = "WebSearch_distribution.txt" # host (HPCC's traffic_gen), sizes
//! load = 0.3                        # from the CDF, `load` of each host's
//! duration = "200us"                # link, over `duration`; replaces the
//! # seed = 7                        # base's flows (default seed: the point's)
//!
//! [[axis]]
//! key = "switch.ecn_rules.*.kmin"   # a key of the scenario file
//! values = ["100KB", "200KB", "400KB", "800KB"]
//! # name = "kmin"                   # the table's column; default the key
//!
//! [[axis]]
//! key = "nic.dcqcn_set"
//! values = ["paper", "nvidia", "hpcc"]
//!
//! [[axis]]
//! key = "workload.load"             # workload.* sets the [workload]
//! values = [0.3, 0.5]
//!
//! [[axis]]                          # no key: each value is a table of
//! name = "ecn"                      # settings made together (nested
//! labels = ["low", "high"]          # tables merge into the base's)
//! values = [ { "switch.ecn_rules.0.kmin" = "100KB", "switch.ecn_rules.0.kmax" = "400KB" },
//!            { "switch.ecn_rules.0.kmin" = "400KB", "switch.ecn_rules.0.kmax" = "1600KB" } ]
//! # labels: how the table shows each value (default: the value itself)
//! ```
//!
//! # Keys
//!
//! A key is a dotted path into the base scenario written in the scenario
//! format ([`crate::toml_scenario`]) by [`crate::toml_scenario::to_toml`],
//! where every setting is explicit (so `switch.ecn_rules` exists even
//! when the base file left `[switch]` out, and an incast generator has
//! become its `flows`). A segment is a table key, an index into a list,
//! or `*` for every element of a list (`flows.*.size` sets every flow's
//! size). A missing key of a table is added, so optional settings can be
//! swept; the scenario's own checks then judge it, and a key the format
//! does not know is an error naming it. [`Grid::base_toml`] is the text
//! the keys address.

mod grid;
mod row;

pub use grid::{Axis, Grid, Point, MAX_POINTS};
pub use row::{figures, header, unrun, Status, FIGURES};

use std::path::PathBuf;

use crate::hpcc::HpccError;
use crate::plan::check::CheckError;
use crate::scenario::ScenarioError;

/// Why a grid cannot be read or one of its points cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The grid file does not parse, has an unknown key or a value of the
    /// wrong type.
    #[error("{}: {message}", path.display())]
    Syntax { path: PathBuf, message: String },
    /// The grid is well-formed TOML but says something impossible.
    #[error("{0}")]
    Grid(String),
    #[error("base scenario: {0}")]
    Base(#[from] ScenarioError),
    #[error("base run: {0}")]
    BaseRun(#[from] HpccError),
    /// An axis key that does not address the base.
    #[error("axis {key:?}: {reason}")]
    Key { key: String, reason: String },
    /// A point's settings that the scenario (or its workload) rejects.
    #[error("point {index} ({values}): {reason}")]
    Point { index: usize, values: String, reason: String },
    #[error("workload: {0}")]
    Workload(#[from] CheckError),
}

#[cfg(test)]
mod tests;
