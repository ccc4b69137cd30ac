//! `roce sim run`: a TOML scenario or a built-in one, simulated; writes
//! fct.txt, pfc.txt, summary.json and the plots.

use std::path::PathBuf;
use std::process::ExitCode;

use roce_fabric::{builtin, hpcc, plot, toml_scenario};

use super::{default_out, simulate_and_write, SimCliError};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The scenario file (TOML).
    #[arg(required_unless_present = "builtin", conflicts_with = "builtin")]
    pub scenario: Option<PathBuf>,
    /// A built-in scenario instead of a file (`--builtin list` lists them).
    #[arg(long, value_name = "NAME")]
    pub builtin: Option<String>,
    /// Output directory (default: sim-out/<scenario name>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seed (default: the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
}

fn builtin_names() -> String {
    builtin::NAMES.join(", ")
}

pub fn cmd_run(args: &RunArgs) -> Result<ExitCode, SimCliError> {
    let mut scn = match (&args.scenario, &args.builtin) {
        (_, Some(name)) if name == "list" => {
            println!("{}", builtin::NAMES.join("\n"));
            return Ok(ExitCode::SUCCESS);
        }
        (_, Some(name)) => builtin::scenario(name).ok_or_else(|| {
            SimCliError::Usage(format!("no built-in scenario {name:?}; there are: {}", builtin_names()))
        })?,
        (Some(path), None) => toml_scenario::from_path(path)?,
        (None, None) => {
            return Err(SimCliError::Usage(format!(
                "give a scenario file or --builtin NAME ({})",
                builtin_names()
            )))
        }
    };
    if let Some(seed) = args.seed {
        scn.seed = seed;
    }
    let out = args.out.clone().unwrap_or_else(|| default_out(&scn.name));
    let outcome = simulate_and_write(&scn, &out, u64::from(scn.nic.mtu))?;
    let fct = hpcc::read_fct(&out.join("fct.txt"))?;
    let slowdowns: Vec<(u64, f64)> = fct.iter().map(|l| (l.size, l.slowdown())).collect();
    let plots = plot::write_plots(&scn, &outcome.report, &out, Some(&slowdowns))
        .map_err(|source| SimCliError::Io { path: out.clone(), source })?;
    for p in plots {
        println!("  plot: {}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}
