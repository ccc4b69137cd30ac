//! `roce fabric`: planning a RoCE fabric's settings.
//!
//! ```text
//! roce fabric plan TOPOLOGY [--hpcc-topology] [--mtu N] [--buffer SIZE] [--lossless 3,4]
//!                  [--cable LENGTH] [--headroom-scale F] [--out FILE]
//!                  [--check [--incast-senders N] [--incast-size SIZE]
//!                           [--flows FLOW_LIST [--max-flows N] | --cdf FILE [--load F] [--duration T]]]
//! ```
//!
//! Rooms: [`plan`] (the arguments, the topology and workload read, the
//! plan printed and checked). The computation is `roce_fabric::plan`.
//!
//! Exit status: 0 with a plan (and, with `--check`, a check that holds), 1
//! when the check finds the plan does not hold (drops, flows left
//! unfinished), 2 on bad arguments or unreadable/malformed files.

mod plan;

use std::path::PathBuf;
use std::process::ExitCode;

use roce_fabric::hpcc::HpccError;
use roce_fabric::plan::check::CheckError;
use roce_fabric::plan::PlanError;
use roce_fabric::ScenarioError;

/// Exit status of a plan that does not hold.
const EXIT_PLAN_FAILS: u8 = 1;
/// Exit status of bad arguments or files.
const EXIT_USAGE: u8 = 2;

#[derive(Debug, clap::Subcommand)]
pub enum FabricCommand {
    /// PFC headroom, XOFF/XON, buffer alpha, ECN and DCQCN settings for a
    /// topology, each number explained, written as a scenario's [switch]
    /// and [nic] sections; `--check` simulates a worst-case incast and a
    /// workload with them and reports drops (must be 0), pause time and
    /// p99 slowdown.
    Plan(plan::PlanArgs),
}

/// Why a `roce fabric` command failed.
#[derive(Debug, thiserror::Error)]
pub enum FabricCliError {
    #[error(transparent)]
    Hpcc(#[from] HpccError),
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("no plan: {0}")]
    Plan(#[from] PlanError),
    #[error("check: {0}")]
    Check(#[from] CheckError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
}

pub fn main(cmd: &FabricCommand) -> ExitCode {
    let result = match cmd {
        FabricCommand::Plan(args) => plan::cmd_plan(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roce fabric: {e}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}
