//! The event loop (being written).

use crate::report::Report;
use crate::scenario::{Scenario, Time};

/// Why a scenario cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    #[error("invalid scenario: {0}")]
    Invalid(String),
}

/// Told how far a run has got, now and then (for a progress bar).
pub trait Progress {
    /// `now`: simulated time; `done` of `total` flows finished.
    fn update(&mut self, now: Time, done: usize, total: usize);
}

/// Runs a scenario to its end.
pub fn simulate(scn: &Scenario, progress: Option<&mut dyn Progress>) -> Result<Report, FabricError> {
    let _ = (scn, progress);
    Err(FabricError::Invalid("not yet".into()))
}
