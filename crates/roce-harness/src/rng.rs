//! The simulation's random streams: the fabric simulator's [`SimRng`]
//! (one seed, a stream forked per consumer).

pub use roce_fabric::rng::SimRng;
