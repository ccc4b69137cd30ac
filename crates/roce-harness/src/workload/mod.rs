//! Random verbs workloads: a seed becomes a [`Plan`] (hosts, memory, QPs,
//! timed work requests), which [`setup`] instantiates on a network.

mod gen;
mod memory;
pub mod mix;
mod params;
mod plan;
mod recv;
mod setup;
mod ud;

pub use gen::{generate, GRH_LEN};
pub use memory::{ATOM, LAND, RECV, SRC, TGT, UDOUT};
pub use params::{Faults, MixParams, Params};
pub use plan::*;
pub use setup::{setup, Live, LiveHost};
