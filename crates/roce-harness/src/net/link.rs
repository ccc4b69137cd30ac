//! The links of the harness's network: the fabric simulator's fault model
//! (`roce_fabric::faults`), one one-way link per ordered pair of hosts.

pub use roce_fabric::faults::{CopyFate, Link, LinkParams};
